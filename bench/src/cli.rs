//! Command line of the `bench` binary.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::jia::UrlPolicy;
use crate::jwt::JwtSigner;
use crate::scenario::ScenarioConfig;

/// Short verifying load run against a running ISUCONDITION service.
#[derive(Debug, Parser)]
#[command(name = "bench", version)]
pub struct Cli {
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
}

impl Cli {
    pub fn into_config(self) -> anyhow::Result<ScenarioConfig> {
        let signer = match &self.private_key {
            Some(path) => JwtSigner::from_file(path)?,
            None => JwtSigner::project_default(),
        };
        Ok(ScenarioConfig {
            duration: self.duration,
            users: self.users,
            isus_per_user: self.isus_per_user,
            signer,
            url_policy: if self.official_urls {
                UrlPolicy::Official
            } else {
                UrlPolicy::AnyUrl
            },
            ..ScenarioConfig::new(&self.target, self.jia_listen)
        })
    }
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
    fn the_cli_is_well_formed() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }
}
