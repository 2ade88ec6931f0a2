//! The local (loopback) cluster's run directory and `cluster.json`, the typed description of
//! the cluster `isuctl cluster up` started: what every other command reads to find the nodes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// `cluster.json` in the run directory (the secret is apart, in `secret`, mode 600).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterFile {
    /// nginx's public server, e.g. `http://127.0.0.2:8080`.
    pub public_url: String,
    /// The coordinator's node address, e.g. `http://127.0.0.2:3000`.
    pub coordinator_url: String,
    /// Every cell (worker) in order a, b, c, ...
    pub workers: Vec<WorkerEntry>,
    /// The JIA simulator's URL when `up --jia` started one.
    pub jia_url: Option<String>,
    /// Whether the nodes keep durable logs (`--durable`).
    pub durable: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerEntry {
    /// The cell's name (`a`, `b`, ...); the node is `worker-<cell>`.
    pub cell: String,
    /// The worker's node address (internal API, reads).
    pub url: String,
    /// The device URL JIA is given for this cell.
    pub device_url: String,
}

/// A local cluster's run directory (default `<repo>/run/cluster`, or `$ISU_RUN_DIR`).
#[derive(Debug, Clone)]
pub struct RunDir {
    pub path: PathBuf,
}

impl RunDir {
    pub fn new(path: impl Into<PathBuf>) -> RunDir {
        RunDir { path: path.into() }
    }

    /// `$ISU_RUN_DIR`, else `<repo>/run/cluster`.
    pub fn from_env() -> RunDir {
        match std::env::var_os("ISU_RUN_DIR") {
            Some(dir) => RunDir::new(dir),
            None => RunDir::new(repo_root().join("run/cluster")),
        }
    }

    pub fn cluster_file_path(&self) -> PathBuf {
        self.path.join("cluster.json")
    }

    /// The description of the running cluster, or an error telling how to start one.
    pub fn cluster(&self) -> anyhow::Result<ClusterFile> {
        let path = self.cluster_file_path();
        if !path.exists() {
            if let Some(cluster) = self.cluster_env() {
                return Ok(cluster);
            }
        }
        let text = std::fs::read_to_string(&path).map_err(|error| {
            anyhow::anyhow!(
                "no cluster in {} ({error}): start one with `isuctl cluster up`",
                self.path.display()
            )
        })?;
        serde_json::from_str(&text).map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))
    }

    /// Until `isuctl cluster up` writes `cluster.json`: the `cluster.env` of `scripts/cluster
    /// up` (`KEY=value` lines; the workers in `ISU_WORKER_NODES`, `worker-a=URL ...`).
    fn cluster_env(&self) -> Option<ClusterFile> {
        let text = std::fs::read_to_string(self.path.join("cluster.env")).ok()?;
        let value = |key: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
                .map(|value| value.trim_matches('"').to_owned())
        };
        let workers = value("ISU_WORKER_NODES")?
            .split_whitespace()
            .filter_map(|node| {
                let (name, url) = node.split_once('=')?;
                let cell = name.strip_prefix("worker-")?.to_owned();
                let device_url = value(&format!("ISU_WORKER_{}_DEVICE_URL", cell.to_uppercase())).unwrap_or_default();
                Some(WorkerEntry {
                    cell,
                    url: url.to_owned(),
                    device_url,
                })
            })
            .collect();
        Some(ClusterFile {
            public_url: value("ISU_PUBLIC_URL")?,
            coordinator_url: value("ISU_COORDINATOR_URL")?,
            workers,
            jia_url: value("ISU_JIA_URL"),
            durable: self.path.join("data").is_dir(),
        })
    }

    /// The cluster secret (`secret`, mode 600).
    pub fn secret(&self) -> anyhow::Result<String> {
        let path = self.path.join("secret");
        let text = std::fs::read_to_string(&path)
            .map_err(|error| anyhow::anyhow!("reading the cluster secret {}: {error}", path.display()))?;
        Ok(text.trim().to_owned())
    }
}

/// How one command runs another command of the local cluster (`cluster up`, `cluster replace`,
/// ...): the one place that knows where that command lives.
pub fn cluster_command() -> std::process::Command {
    std::process::Command::new(repo_root().join("scripts/cluster"))
}

/// The checkout this tool was built from (where `scripts/`, `nginx/` and `web/` are).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("isuctl lives one level below the repository root")
        .to_owned()
}
