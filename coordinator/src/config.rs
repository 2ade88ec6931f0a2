//! Command-line and environment configuration of the coordinator.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use shared::dataset::DatasetSource;
use shared::wal::FsyncPolicy;

/// The coordinator of the ISUCONDITION cluster: auth, users, ISU registration
/// and metadata, the latest condition of every ISU, trend and ISU lists.
#[derive(Debug, Clone, Parser)]
#[command(version, about)]
pub struct Config {
    /// Address to listen on (public API, frontend routes and internal routes).
    #[arg(long, env = "ISU_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,

    /// Base URL of worker A's internal routes (owns UUIDs whose first hex digit is even).
    #[arg(long, env = "ISU_WORKER_A_URL", default_value = "http://127.0.0.1:3001")]
    pub worker_a_url: String,

    /// Base URL of worker B's internal routes (owns UUIDs whose first hex digit is odd).
    #[arg(long, env = "ISU_WORKER_B_URL", default_value = "http://127.0.0.1:3002")]
    pub worker_b_url: String,

    /// Base URL devices use to post conditions of worker A's ISUs (sent to JIA as `target_base_url`).
    #[arg(
        long,
        env = "ISU_WORKER_A_DEVICE_URL",
        default_value = "https://isucondition-2.t.isucon.dev"
    )]
    pub worker_a_device_url: String,

    /// Base URL devices use to post conditions of worker B's ISUs (sent to JIA as `target_base_url`).
    #[arg(
        long,
        env = "ISU_WORKER_B_DEVICE_URL",
        default_value = "https://isucondition-3.t.isucon.dev"
    )]
    pub worker_b_device_url: String,

    /// PEM file with JIA's ES256 public key that verifies sign-in JWTs (default: the project's own key).
    #[arg(long, env = "ISU_JWT_PUBLIC_KEY")]
    pub jwt_public_key: Option<PathBuf>,

    /// Image stored for ISUs registered without one (default: the project's own icon).
    #[arg(long, env = "ISU_DEFAULT_ICON")]
    pub default_icon: Option<PathBuf>,

    /// Initial data restored by `POST /initialize`: `generated` (the project's dataset), `generated:N` (the same, scaled to N ISUs) or the path of an official MySQL dump.
    #[arg(long, env = "ISU_DATASET", default_value = "generated", value_parser = DatasetSource::parse)]
    pub dataset: DatasetSource,

    /// Directory with `index.html` and `assets/` for the frontend routes (default: a built-in page).
    #[arg(long, env = "ISU_STATIC_DIR")]
    pub static_dir: Option<PathBuf>,

    /// Secret shared by the nodes; required on every internal, metrics and profiling route.
    #[arg(
        long,
        env = "ISU_CLUSTER_SECRET",
        default_value = "local-cluster-secret",
        hide_env_values = true
    )]
    pub cluster_secret: String,

    /// JIA service URL used until `POST /initialize` sets one.
    #[arg(long, env = "ISU_JIA_SERVICE_URL", default_value = "http://localhost:5000")]
    pub jia_service_url: String,

    /// Directory of the durable log (`coordinator.wal`: generation, users, registered ISUs and icons), replayed on start; without it everything is in memory only.
    #[arg(long, env = "ISU_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// When the log reaches the disk: `always` (fsync each group commit before answering), `<N>ms` (answer once the OS has it, fsync every N ms) or `never` (the OS decides).
    #[arg(long, env = "ISU_FSYNC", default_value = "always")]
    pub fsync: FsyncPolicy,

    /// Number of Tokio worker threads (0 = one per core).
    #[arg(long, env = "ISU_THREADS", default_value_t = 0)]
    pub threads: usize,
}
