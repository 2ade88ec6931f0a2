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

    /// How long the device server waits for a request's head, in milliseconds, counted from
    /// the connection's start or the end of its previous answer (so also how long a
    /// kept-alive connection may sit idle), and again for the request's whole body (answered
    /// 408 when it is late). Then the connection is closed: a client that stalls or trickles
    /// holds a connection this long at most. HTTP/2 connections are pinged every 20 s and
    /// closed when a ping goes unanswered for 20 s.
    #[arg(long, env = "ISU_DEVICE_READ_TIMEOUT_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub device_read_timeout_ms: u64,

    /// Take over from a running worker of this cell on the same addresses and data directory
    /// (a replacement in place): bind beside it, wait for it to finish, replay its log, serve.
    /// Without it an address in use is refused. Needs `--data-dir`.
    #[arg(long, env = "ISU_REPLACE", requires = "data_dir")]
    pub replace: bool,

    /// Base URL of the coordinator's internal routes; with a group of coordinator replicas,
    /// each replica's (repeat it; in the environment, separated by spaces): the latest
    /// conditions are pushed to every one.
    #[arg(
        long,
        env = "ISU_COORDINATOR_URL",
        value_delimiter = ' ',
        default_value = "http://127.0.0.1:3000"
    )]
    pub coordinator_url: Vec<String>,

    /// Secret shared by the nodes (at least 16 bytes, no default; `scripts/cluster` makes a
    /// random one): required on every internal, metrics and profiling route, and the key of
    /// the session cookies.
    #[arg(long, env = "ISU_CLUSTER_SECRET", hide_env_values = true)]
    pub cluster_secret: String,

    /// At a stop, how long the worker goes on serving its open connections with
    /// `Connection: close` on every HTTP/1 answer before it stops, in milliseconds (it takes
    /// no new connection meanwhile: they queue at a replacement, `--replace`). Longer than a
    /// device's 40 ms interval, so a device posting on a kept-alive connection learns the
    /// connection's end from an answer instead of finding it closed under a post; short,
    /// because connections queued at the replacement wait this long, and a device gives up
    /// after 100 ms.
    #[arg(long, env = "ISU_SHUTDOWN_LINGER_MS", default_value_t = 50)]
    pub shutdown_linger_ms: u64,

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

    /// Per-ISU quota: conditions per ISU per 10 s window (counted in a count-min sketch);
    /// an ISU over it is shaped (its batches are stored when the lanes are idle; 429 when
    /// the shaping lane is full). 0 turns the quota off. The default is several times what
    /// an official device posts (up to 10 conditions every 40 ms: 2,500 per window).
    #[arg(long, env = "ISU_QUOTA", default_value_t = 10_000)]
    pub isu_quota: u32,

    /// Ingest lanes: device batches are stored inside one of N lanes.
    #[arg(long, env = "ISU_INGEST_LANES", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub ingest_lanes: u16,

    /// Lanes per ISU (shuffle sharding): an ISU uses the least loaded of its K lanes.
    #[arg(long, env = "ISU_LANE_CHOICES", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub lane_choices: u16,

    /// Batches a lane stores at once.
    #[arg(long, env = "ISU_LANE_PERMITS", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub lane_permits: u16,

    /// Batches waiting or running in a lane before new ones get 503 (`Retry-After: 1`).
    #[arg(long, env = "ISU_LANE_QUEUE", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub lane_queue: u32,

    /// Conditions waiting in the shaping lane before shaped ISUs get 429 (`Retry-After: 1`,
    /// answered before the body is read).
    #[arg(long, env = "ISU_SHAPING_QUEUE", default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub shaping_queue: u32,

    /// Conditions a second the shaping lane stores, at most (shaped ISUs together).
    #[arg(long, env = "ISU_SHAPING_RATE", default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub shaping_rate: u32,

    /// A batch holding its lane this long (ms) is left behind: the lane goes on, its ISU is
    /// quarantined.
    #[arg(long, env = "ISU_LANE_STALL_MS", default_value_t = 1000)]
    pub lane_stall_ms: u64,

    /// Quarantine an ISU whose batch stalled or panicked a lane (its later batches go to the
    /// shaping lane): `on` or `off`.
    #[arg(long, env = "ISU_QUARANTINE", default_value = "on", value_parser = ["on", "off"])]
    pub quarantine: String,

    /// Seed of the ISUs' lane sets.
    #[arg(long, env = "ISU_LANE_SEED", default_value_t = 0x15_c0de)]
    pub lane_seed: u64,

    /// A deliberately broken build, for the rollout tests (`isuctl/tests/rollout.rs`): every
    /// graph read and every condition post is answered 500 (posts come to every cell all the
    /// time; graph reads only where the users reading them have ISUs).
    #[arg(long, env = "ISU_FAULT_GRAPH_500", hide = true)]
    pub fault_graph_500: bool,

    /// Number of Tokio worker threads (0 = one per core).
    #[arg(long, env = "ISU_THREADS", default_value_t = 0)]
    pub threads: usize,
}

fn parse_cell(text: &str) -> Result<String, String> {
    shared::placement_map::check_name(text).map_err(|error| error.to_string())?;
    Ok(text.to_owned())
}

impl Config {
    /// `--device-read-timeout-ms` as a duration.
    pub fn device_read_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.device_read_timeout_ms)
    }

    /// This worker's node name in logs and metrics (`worker-a`).
    pub fn role(&self) -> String {
        shared::placement_map::worker_role(&self.cell)
    }

    /// The ingest settings (quota and lanes).
    pub fn ingest(&self) -> crate::ingest::IngestConfig {
        crate::ingest::IngestConfig {
            quota: self.isu_quota,
            lanes: usize::from(self.ingest_lanes),
            choices: usize::from(self.lane_choices),
            permits: usize::from(self.lane_permits),
            lane_queue: self.lane_queue as usize,
            shaping_queue: self.shaping_queue as usize,
            shaping_rate: self.shaping_rate,
            stall_after: std::time::Duration::from_millis(self.lane_stall_ms.max(1)),
            quarantine: self.quarantine == "on",
            seed: self.lane_seed,
        }
    }
}
