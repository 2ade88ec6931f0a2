//! `isuctl profile`: CPU-profiles every node of a running local cluster at once (the
//! coordinator and the worker of every cell), through each node's `GET /debug/pprof/profile`
//! with the cluster secret, e.g. while the bench runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use shared::protocol::{PPROF_PROFILE, SECRET_HEADER};

use crate::local::{Node, RunDir};
use crate::output::{self, Format};

/// Extra time a profile request may take beyond its sampling period (rendering, transfer).
const PROFILE_SLACK: Duration = Duration::from_secs(30);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Sampling time in seconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub seconds: u64,
    /// svg = flamegraph; pb = pprof protobuf (`go tool pprof`, `pprof -http`).
    #[arg(long, value_enum, default_value_t = ProfileFormat::Svg)]
    pub format: ProfileFormat,
    /// Where to write `<node>.<format>` (default `run/profiles/<date-time>`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// What a node's profile route renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileFormat {
    Svg,
    Pb,
}

impl ProfileFormat {
    fn as_str(self) -> &'static str {
        match self {
            ProfileFormat::Svg => "svg",
            ProfileFormat::Pb => "pb",
        }
    }
}

/// One node's profile, written.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileFile {
    pub node: String,
    pub path: PathBuf,
    pub bytes: u64,
}

/// What `isuctl profile` did: the folder and the file of every node.
#[derive(Debug, Serialize)]
pub struct Profiles {
    pub out: PathBuf,
    pub seconds: u64,
    pub format: ProfileFormat,
    pub files: Vec<ProfileFile>,
}

pub fn run(args: Args, format: Format) -> anyhow::Result<()> {
    run_in(&RunDir::from_env(), args, format)
}

/// `isuctl profile` against the cluster of `run_dir`: fails, after writing the others, when a
/// node did not answer.
pub fn run_in(run_dir: &RunDir, args: Args, format: Format) -> anyhow::Result<()> {
    let cluster = run_dir.cluster()?;
    let secret = run_dir.secret()?;
    let out = args.out.unwrap_or_else(|| {
        crate::local::repo_root()
            .join("run/profiles")
            .join(shared::clock::timestamp())
    });
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let nodes = cluster.nodes();
    eprintln!("profile: {} nodes for {} s", nodes.len(), args.seconds);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = runtime.block_on(profile_nodes(&nodes, &secret, args.seconds, args.format, &out))?;
    let mut files = Vec::new();
    let mut failures = Vec::new();
    for (node, result) in nodes.iter().zip(results) {
        match result {
            Ok(file) => files.push(file),
            Err(error) => failures.push(format!("{}: {error:#}", node.name)),
        }
    }
    let profiles = Profiles {
        out,
        seconds: args.seconds,
        format: args.format,
        files,
    };
    output::emit(format, &profiles, render)?;
    if !failures.is_empty() {
        anyhow::bail!("a node did not answer: {}", failures.join("; "));
    }
    Ok(())
}

fn render(profiles: &Profiles) -> String {
    let mut text = String::new();
    for file in &profiles.files {
        text.push_str(&format!("{:>10}  {}\n", file.bytes, file.path.display()));
    }
    text.push_str(&profiles.out.display().to_string());
    text
}

/// Profiles every node at once for `seconds` and writes `<node>.<format>` into `out`; one
/// result per node, in the order of `nodes`.
pub async fn profile_nodes(
    nodes: &[Node],
    secret: &str,
    seconds: u64,
    format: ProfileFormat,
    out: &Path,
) -> anyhow::Result<Vec<anyhow::Result<ProfileFile>>> {
    let client = node_http::internal_client().build()?;
    let mut tasks = tokio::task::JoinSet::new();
    for (index, node) in nodes.iter().enumerate() {
        let (client, node, secret) = (client.clone(), node.clone(), secret.to_owned());
        let path = out.join(format!("{}.{}", node.name, format.as_str()));
        tasks.spawn(async move { (index, profile_one(&client, &node, &secret, seconds, format, path).await) });
    }
    let mut results: Vec<Option<anyhow::Result<ProfileFile>>> = nodes.iter().map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        let (index, result) = joined?;
        results[index] = Some(result);
    }
    Ok(results.into_iter().flatten().collect())
}

async fn profile_one(
    client: &reqwest::Client,
    node: &Node,
    secret: &str,
    seconds: u64,
    format: ProfileFormat,
    path: PathBuf,
) -> anyhow::Result<ProfileFile> {
    let url = format!(
        "{}{PPROF_PROFILE}?seconds={seconds}&format={}",
        node.url,
        format.as_str()
    );
    let response = client
        .get(&url)
        .header(SECRET_HEADER, secret)
        .timeout(Duration::from_secs(seconds) + PROFILE_SLACK)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = response.status();
    let body = response.bytes().await.with_context(|| format!("GET {url}"))?;
    if !status.is_success() {
        anyhow::bail!("GET {url}: {status} {}", String::from_utf8_lossy(&body).trim());
    }
    tokio::fs::write(&path, &body)
        .await
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(ProfileFile {
        node: node.name.clone(),
        path,
        bytes: body.len() as u64,
    })
}
