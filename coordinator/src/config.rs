//! Command-line and environment configuration of the coordinator.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use shared::dataset::DatasetSource;
use shared::placement_map::Cell;
use shared::wal::FsyncPolicy;

/// The coordinator of the ISUCONDITION cluster: auth, users, ISU registration
/// and metadata, the latest condition of every ISU, trend and ISU lists.
#[derive(Debug, Clone, Parser)]
#[command(version, about)]
pub struct Config {
    /// Address to listen on (public API, frontend routes and internal routes).
    #[arg(long, env = "ISU_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,

    /// A cell (worker): `NAME=INTERNAL_URL,DEVICE_URL`, e.g.
    /// `a=http://127.0.0.3:3000,https://isucondition-2.t.isucon.dev`. Repeat it for each worker
    /// (1 to 64; in the environment, separated by spaces). The internal URL serves internal
    /// calls and reads; the device URL is what JIA gives the devices of the cell's ISUs. A new
    /// placement map spreads the slots by first hex digit (`(digit) mod N`: with two cells,
    /// exactly even → first, odd → second; past 16 cells, in even runs of slots); a map restored from the log is kept, with these
    /// URLs, and a cell it does not name yet is added holding nothing (see `scripts/cells`).
    /// Without `--worker`, the two `--worker-a-*`/`--worker-b-*` pairs below make cells a and b.
    #[arg(long = "worker", env = "ISU_WORKERS", value_delimiter = ' ', value_parser = parse_cell)]
    pub workers: Vec<Cell>,

    /// Base URL of worker A's internal routes (without `--worker`: cell a, UUIDs whose first hex digit is even).
    #[arg(long, env = "ISU_WORKER_A_URL", default_value = "http://127.0.0.1:3001")]
    pub worker_a_url: String,

    /// Base URL of worker B's internal routes (without `--worker`: cell b, UUIDs whose first hex digit is odd).
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

    /// Secret shared by the nodes (at least 16 bytes, no default; `scripts/cluster` makes a
    /// random one): required on every internal, metrics and profiling route, and the key of
    /// the session cookies.
    #[arg(long, env = "ISU_CLUSTER_SECRET", hide_env_values = true)]
    pub cluster_secret: String,

    /// JIA service URL used until `POST /initialize` sets one.
    #[arg(long, env = "ISU_JIA_SERVICE_URL", default_value = "http://localhost:5000")]
    pub jia_service_url: String,

    /// Directory of the coordinator's raft log and snapshots (`raft.log`, `raft.snapshot`:
    /// generation, users, registered ISUs, the placement map, migrations) and icons
    /// (`icons/`), read back at start; without it everything is in memory only. An earlier
    /// build's `coordinator.wal` found there is converted once (kept as `.converted`).
    #[arg(long, env = "ISU_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// When the log reaches the disk: `always` (fsync each group commit before answering), `<N>ms` (answer once the OS has it, fsync every N ms) or `never` (the OS decides). Replicas of a group of several should keep `always`.
    #[arg(long, env = "ISU_FSYNC", default_value = "always")]
    pub fsync: FsyncPolicy,

    /// Write the router's map file (its version, cells, the 256 slots and the pins: what
    /// nginx starts from) at start and whenever the placement map changes.
    #[arg(long, env = "ISU_ROUTER_MAP")]
    pub router_map: Option<PathBuf>,

    /// nginx's control server (`http://127.0.0.1:3099`): after each rewrite of the router's
    /// map, the coordinator PUTs it to `/map` there, and nginx routes by it at once, without
    /// a reload. An nginx that is down gets it again every second (one that starts reads
    /// the file).
    #[arg(long, env = "ISU_ROUTER_URL", requires = "router_map")]
    pub router_url: Option<String>,

    /// After a migration's flip, how long the source keeps its copy before forgetting it (ms).
    #[arg(long, env = "ISU_MIGRATION_GRACE_MS", default_value_t = 2000)]
    pub migration_grace_ms: u64,

    /// Replicas: how often the icon store is swept of icons no ISU names (seconds).
    #[arg(long, env = "ISU_ICON_SWEEP_EVERY_SECS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    pub icon_sweep_every_secs: u64,

    /// Replicas: how long an icon no ISU names is kept after it was last stored (seconds);
    /// it must exceed the time between storing a registration's icon and applying its record.
    #[arg(long, env = "ISU_ICON_GRACE_SECS", default_value_t = 3600)]
    pub icon_grace_secs: u64,

    /// This coordinator's id in a group of replicas (1, 2, 3, …; with `--replica`). The
    /// group keeps the coordinator's state (users, ISUs, the placement map, migrations) in a
    /// raft log under `--data-dir`; every replica serves the API, the leader runs the
    /// registrations, `/initialize`, migrations and the router's map. Without it, a group
    /// of one: replica 1, its own listener as its URL.
    #[arg(long, env = "ISU_REPLICA_ID", requires_all = ["replicas", "data_dir"])]
    pub replica_id: Option<u64>,

    /// A replica of the group: `ID=URL`, its base URL as its peers reach it (e.g.
    /// `2=http://127.0.0.12:3000`). Repeat it for every replica, this one included (three
    /// keep the group up through one failure; in the environment, separated by spaces).
    /// Used to form a new group; a replica that already belongs to one keeps its members.
    #[arg(long = "replica", env = "ISU_REPLICAS", value_delimiter = ' ', value_parser = parse_replica, requires = "replica_id")]
    pub replicas: Vec<(u64, String)>,

    /// Raft entries between snapshots of a replica's state (the log before one is purged).
    #[arg(long, env = "ISU_RAFT_SNAPSHOT_EVERY", default_value_t = 10_000)]
    pub raft_snapshot_every: u64,

    /// The group leader's heartbeat, in milliseconds; an election follows 8 to 10 missed ones.
    /// An append must be answered within one, so raise it where the round trip between
    /// replicas nears 100 ms (a takeover then takes longer).
    #[arg(long, env = "ISU_RAFT_HEARTBEAT_MS", default_value_t = consensus::DEFAULT_HEARTBEAT_MS,
          value_parser = clap::value_parser!(u64).range(10..=5_000))]
    pub raft_heartbeat_ms: u64,

    /// File holding the operator token (at least 16 bytes; `scripts/cluster up` writes a
    /// random one, mode 600, to `RUN_DIR/ops-token`): signing in at `/ops` with it opens the
    /// operator console and its API (`/ops/api/*`). Apart from the cluster secret and users'
    /// sessions. Without it the console is off: `/ops/api/*` answers 404.
    #[arg(long, env = "ISU_OPS_TOKEN_FILE")]
    pub ops_token_file: Option<PathBuf>,

    /// Prometheus's base URL (e.g. `http://127.0.0.2:9090`), where the operator console's
    /// charts and firing alerts come from (`query_range`, `alerts`). Without it the console
    /// shows the live state only.
    #[arg(long, env = "ISU_PROMETHEUS_URL")]
    pub prometheus_url: Option<String>,

    /// Number of Tokio worker threads (0 = one per core).
    #[arg(long, env = "ISU_THREADS", default_value_t = 0)]
    pub threads: usize,
}

fn parse_cell(text: &str) -> Result<Cell, String> {
    let usage = "expected NAME=INTERNAL_URL,DEVICE_URL";
    let (name, urls) = text.split_once('=').ok_or_else(|| format!("{text:?}: {usage}"))?;
    let (internal_url, device_url) = urls.split_once(',').ok_or_else(|| format!("{text:?}: {usage}"))?;
    shared::placement_map::check_name(name).map_err(|error| error.to_string())?;
    for url in [internal_url, device_url] {
        if !is_http_url(url) {
            return Err(format!("{text:?}: {url:?} is not an http(s) URL"));
        }
    }
    Ok(Cell {
        name: name.to_owned(),
        internal_url: internal_url.trim_end_matches('/').to_owned(),
        device_url: device_url.to_owned(),
    })
}

fn parse_replica(text: &str) -> Result<(u64, String), String> {
    let usage = "expected ID=URL, e.g. 2=http://127.0.0.12:3000";
    let (id, url) = text.split_once('=').ok_or_else(|| format!("{text:?}: {usage}"))?;
    let id = id
        .parse::<u64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| format!("{text:?}: the id is a number from 1: {usage}"))?;
    if !is_http_url(url) {
        return Err(format!("{text:?}: {url:?} is not an http(s) URL"));
    }
    Ok((id, url.trim_end_matches('/').to_owned()))
}

/// `http://` or `https://` and a host (a cell's or a replica's URL).
pub fn is_http_url(url: &str) -> bool {
    (url.starts_with("http://") || url.starts_with("https://")) && url.len() >= "http://x".len()
}

impl Config {
    /// The configured cells, in order: `--worker` as given, else cells a and b from the legacy pairs.
    pub fn cells(&self) -> Vec<Cell> {
        if !self.workers.is_empty() {
            return self.workers.clone();
        }
        [
            ("a", &self.worker_a_url, &self.worker_a_device_url),
            ("b", &self.worker_b_url, &self.worker_b_device_url),
        ]
        .into_iter()
        .map(|(name, internal_url, device_url)| Cell {
            name: name.to_owned(),
            internal_url: internal_url.trim_end_matches('/').to_owned(),
            device_url: device_url.clone(),
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every run needs a secret (no default); these tests are about the other flags.
    const SECRET: [&str; 2] = ["--cluster-secret", "a-test-secret-of-32-bytes-length"];

    #[test]
    fn workers_are_named_cells_with_two_urls() {
        let config = Config::parse_from([
            "coordinator",
            SECRET[0],
            SECRET[1],
            "--worker",
            "a=http://127.0.0.3:3000/,https://isucondition-2.t.isucon.dev",
            "--worker",
            "c-2=http://127.0.0.5:3000,http://127.0.0.5:8080",
        ]);
        let cells = config.cells();
        assert_eq!(cells.len(), 2);
        assert_eq!(cells[0].internal_url, "http://127.0.0.3:3000");
        assert_eq!(cells[1].name, "c-2");
        assert_eq!(cells[1].device_url, "http://127.0.0.5:8080");
        let legacy = Config::parse_from(["coordinator", SECRET[0], SECRET[1]]).cells();
        assert_eq!(
            legacy.iter().map(|cell| cell.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let replicated = Config::parse_from([
            "coordinator",
            SECRET[0],
            SECRET[1],
            "--data-dir",
            "/tmp/x",
            "--replica-id",
            "2",
            "--replica",
            "1=http://127.0.0.11:3000/",
            "--replica",
            "2=http://127.0.0.12:3000",
        ]);
        assert_eq!(replicated.replicas[0], (1, "http://127.0.0.11:3000".to_owned()));
        for bad in ["1", "0=http://x:1", "x=http://x:1", "1=ftp://x"] {
            let parsed = Config::try_parse_from([
                "coordinator",
                SECRET[0],
                SECRET[1],
                "--data-dir",
                "/tmp/x",
                "--replica-id",
                "1",
                "--replica",
                bad,
            ]);
            assert!(parsed.expect_err(bad).to_string().contains("--replica"), "{bad}");
        }
        let without_data_dir = Config::try_parse_from([
            "coordinator",
            SECRET[0],
            SECRET[1],
            "--replica-id",
            "1",
            "--replica",
            "1=http://x:1",
        ]);
        assert!(without_data_dir.is_err(), "a replica needs --data-dir");
        for bad in [
            "a",
            "a=http://x",
            "A=http://x,http://y",
            "a=ftp://x,http://y",
            "a=http://x,",
        ] {
            let parsed = Config::try_parse_from(["coordinator", SECRET[0], SECRET[1], "--worker", bad]);
            let error = parsed.expect_err(bad).to_string();
            assert!(error.contains("--worker"), "{bad}: {error}");
        }
    }
}
