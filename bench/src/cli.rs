//! Command line of the `bench` binary.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::clock::{VirtualClock, DEFAULT_VIRTUAL_START};
use crate::jia::{JiaConfig, UrlPolicy};
use crate::jwt::JwtSigner;
use crate::scenario::ScenarioConfig;
use crate::signin::SignIn;

/// The ISUCONDITION bench: verifying load runs against a cluster, and a standalone JIA simulator.
#[derive(Debug, Parser)]
#[command(name = "bench", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Without a subcommand: one bench run (initialize, compatibility check, load, score).
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run only the JIA simulator, until Ctrl-C: browser sign-in page (`GET /`), activation
    /// of any ISU id, and a posting device per activated ISU.
    Jia(JiaArgs),
}

/// Options of a bench run.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Public base URL of the service.
    #[arg(long, env = "BENCH_TARGET", default_value = "http://127.0.0.2:8080")]
    pub target: String,
    /// Address the JIA simulator binds; `http://<it>` is sent as `jia_service_url`.
    #[arg(long, env = "BENCH_JIA_LISTEN", default_value = "127.0.0.1:5000")]
    pub jia_listen: SocketAddr,
    /// Length of the load phase (e.g. `20s`, `1500ms`, `2m`).
    #[arg(long, env = "BENCH_DURATION", default_value = "20s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Number of users signed in concurrently.
    #[arg(long, env = "BENCH_USERS", default_value_t = 4)]
    pub users: usize,
    /// ISUs each user registers.
    #[arg(long, env = "BENCH_ISUS_PER_USER", default_value_t = 3)]
    pub isus_per_user: usize,
    /// PEM private key that signs sign-in JWTs (PKCS#8 or SEC1); default: the project's key.
    #[arg(long, env = "BENCH_PRIVATE_KEY")]
    pub private_key: Option<PathBuf>,
    /// Accept only official `target_base_url`s (https, isucondition-[1-3].t.isucon.dev, no port).
    #[arg(long, env = "BENCH_OFFICIAL_URLS")]
    pub official_urls: bool,
    /// Devices connect to ADDR:PORT for HOST (repeatable), e.g.
    /// `isucondition-2.t.isucon.dev=127.0.0.3:8080`; no DNS needed.
    #[arg(long = "resolve", value_name = "HOST=ADDR:PORT", value_parser = parse_resolve)]
    pub resolve: Vec<(String, SocketAddr)>,
}

/// Options of the standalone JIA simulator.
#[derive(Debug, Args)]
pub struct JiaArgs {
    /// Address to listen on; the coordinator's `--jia-service-url` is `http://<it>`.
    #[arg(long, env = "BENCH_JIA_LISTEN", default_value = "127.0.0.1:5000")]
    pub listen: SocketAddr,
    /// Where the sign-in page sends the user back (with `?jwt=`) when not told by `redirect`.
    #[arg(long, env = "BENCH_APP_URL", default_value = "http://127.0.0.2:8080/")]
    pub app: String,
    /// PEM private key that signs sign-in JWTs (PKCS#8 or SEC1); default: the project's key.
    #[arg(long, env = "BENCH_PRIVATE_KEY")]
    pub private_key: Option<PathBuf>,
    /// Virtual seconds per real second of the devices' clock (the bench runs at 30000).
    #[arg(long, env = "BENCH_JIA_SPEED", default_value_t = 3600, value_parser = clap::value_parser!(i64).range(1..=1_000_000))]
    pub speed: i64,
    /// Accept only official `target_base_url`s (https, isucondition-[1-3].t.isucon.dev, no port).
    #[arg(long)]
    pub official_urls: bool,
    /// Devices connect to ADDR:PORT for HOST (repeatable).
    #[arg(long = "resolve", value_name = "HOST=ADDR:PORT", value_parser = parse_resolve)]
    pub resolve: Vec<(String, SocketAddr)>,
}

fn load_signer(path: Option<&Path>) -> anyhow::Result<JwtSigner> {
    match path {
        Some(path) => JwtSigner::from_file(path),
        None => Ok(JwtSigner::project_default()),
    }
}

fn url_policy(official: bool) -> UrlPolicy {
    if official {
        UrlPolicy::Official
    } else {
        UrlPolicy::AnyUrl
    }
}

impl RunArgs {
    pub fn into_config(self) -> anyhow::Result<ScenarioConfig> {
        Ok(ScenarioConfig {
            duration: self.duration,
            users: self.users,
            isus_per_user: self.isus_per_user,
            signer: load_signer(self.private_key.as_deref())?,
            url_policy: url_policy(self.official_urls),
            resolve: self.resolve,
            ..ScenarioConfig::new(&self.target, self.jia_listen)
        })
    }
}

impl JiaArgs {
    /// A simulator that activates any ISU, serves the sign-in page and runs until stopped.
    pub fn into_config(self) -> anyhow::Result<JiaConfig> {
        let signer = load_signer(self.private_key.as_deref())?;
        Ok(JiaConfig {
            listen: self.listen,
            url_policy: url_policy(self.official_urls),
            accept_any_uuid: true,
            clock: VirtualClock::starting_now(DEFAULT_VIRTUAL_START, self.speed),
            run_for: Duration::from_secs(10 * 365 * 86_400),
            sign_in: Some(SignIn {
                signer,
                default_app_url: self.app,
            }),
            resolve: self.resolve,
            ..JiaConfig::default()
        })
    }
}

/// Parses `HOST=ADDR:PORT`.
pub fn parse_resolve(text: &str) -> Result<(String, SocketAddr), String> {
    let (host, addr) = text
        .split_once('=')
        .ok_or_else(|| format!("expected HOST=ADDR:PORT, got {text:?}"))?;
    if host.is_empty() {
        return Err(format!("empty host in {text:?}"));
    }
    let addr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an ADDR:PORT socket address"))?;
    Ok((host.to_owned(), addr))
}

/// Parses `20s`, `1500ms`, `2m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit_millis) = if let Some(number) = text.strip_suffix("ms") {
        (number, 1)
    } else if let Some(number) = text.strip_suffix('s') {
        (number, 1000)
    } else if let Some(number) = text.strip_suffix('m') {
        (number, 60_000)
    } else {
        (text, 1000)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("invalid duration {text:?}"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("invalid duration {text:?}"));
    }
    Ok(Duration::from_millis((value * unit_millis as f64) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("15"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn resolve_overrides_parse() {
        let parsed = parse_resolve("isucondition-2.t.isucon.dev=127.0.0.3:8080").unwrap();
        assert_eq!(parsed.0, "isucondition-2.t.isucon.dev");
        assert_eq!(parsed.1, "127.0.0.3:8080".parse::<SocketAddr>().unwrap());
        assert!(parse_resolve("no-equals").is_err());
        assert!(parse_resolve("=127.0.0.1:1").is_err());
        assert!(parse_resolve("host=127.0.0.1").is_err());
    }

    #[test]
    fn the_cli_is_well_formed() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }
}
