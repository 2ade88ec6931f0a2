//! Command-line and environment configuration of a worker.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use shared::wal::FsyncPolicy;

/// A worker of the ISUCONDITION cluster: owns the condition history of one shard of ISUs.
#[derive(Debug, Clone, Parser)]
#[command(version, about)]
pub struct Config {
    /// This worker's cell name, as the coordinator's `--worker NAME=...` names it (1 to 32 of
    /// a-z, 0-9, '-'). The coordinator's placement map decides which ISUs the cell owns (two
    /// cells `a` and `b` by default: first hex digit even → a, odd → b).
    #[arg(long = "cell", alias = "shard", env = "ISU_CELL", value_parser = parse_cell)]
    pub cell: String,

    /// Address to listen on (public reads, device posts and internal routes).
    #[arg(long, env = "ISU_LISTEN", default_value = "127.0.0.1:3001")]
    pub listen: SocketAddr,

    /// Also take device posts on this address, the one devices are given at activation
    /// (`POST /api/condition/:uuid` only; every other path is 404 there), so they need no
    /// proxy. Without it devices post to `--listen` or through nginx's device server.
    #[arg(long, env = "ISU_DEVICE_LISTEN")]
    pub device_listen: Option<SocketAddr>,

    /// PEM certificate chain of the device server: with `--device-tls-key` it speaks TLS
    /// (rustls; HTTP/2 and HTTP/1.1 by ALPN). Needs `--device-listen`.
    #[arg(long, env = "ISU_DEVICE_TLS_CERT", requires_all = ["device_tls_key", "device_listen"])]
    pub device_tls_cert: Option<PathBuf>,

    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the device server's certificate.
    #[arg(long, env = "ISU_DEVICE_TLS_KEY", requires = "device_tls_cert")]
    pub device_tls_key: Option<PathBuf>,

    /// Base URL of the coordinator's internal routes.
    #[arg(long, env = "ISU_COORDINATOR_URL", default_value = "http://127.0.0.1:3000")]
    pub coordinator_url: String,

    /// Secret shared by the nodes; required on every internal, metrics and profiling route.
    #[arg(
        long,
        env = "ISU_CLUSTER_SECRET",
        default_value = "local-cluster-secret",
        hide_env_values = true
    )]
    pub cluster_secret: String,

    /// How often the latest condition of each changed ISU is pushed to the coordinator, in milliseconds.
    #[arg(long, env = "ISU_PUSH_INTERVAL_MS", default_value_t = 10)]
    pub push_interval_ms: u64,

    /// Directory of the durable log (`worker-<cell>.wal`), replayed on start; without it everything is in memory only.
    #[arg(long, env = "ISU_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// When the log reaches the disk: `always` (fsync each group commit before answering), `<N>ms` (answer once the OS has it, fsync every N ms) or `never` (the OS decides).
    #[arg(long, env = "ISU_FSYNC", default_value = "always")]
    pub fsync: FsyncPolicy,

    /// Rewrite the log as one snapshot once it grows past this many MiB (bounds replay time).
    #[arg(long, env = "ISU_COMPACT_AFTER_MB", default_value_t = 256)]
    pub compact_after_mb: u64,

    /// Number of Tokio worker threads (0 = one per core).
    #[arg(long, env = "ISU_THREADS", default_value_t = 0)]
    pub threads: usize,
}

fn parse_cell(text: &str) -> Result<String, String> {
    shared::placement_map::check_name(text).map_err(|error| error.to_string())?;
    Ok(text.to_owned())
}

impl Config {
    /// This worker's node name in logs and metrics (`worker-a`).
    pub fn role(&self) -> String {
        shared::placement_map::worker_role(&self.cell)
    }
}
