//! The local (loopback) cluster's run directory and `cluster.json`, the typed description of
//! the cluster `isuctl cluster up` started: what every other command reads to find the nodes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// `cluster.json` in the run directory (the secret is apart, in `secret`, mode 600), written by
/// `isuctl cluster up` once every process is healthy and removed by `down`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterFile {
    /// nginx's public server, e.g. `http://127.0.0.2:8080`.
    pub public_url: String,
    /// The coordinator's node address, e.g. `http://127.0.0.2:3000` (with replicas, the first's).
    pub coordinator_url: String,
    /// Every coordinator replica (`coordinator`, `coordinator-2`, ...) of a group; empty
    /// with one coordinator.
    #[serde(default)]
    pub replicas: Vec<Node>,
    /// Every cell (worker) in order a, b, c, ...
    pub workers: Vec<WorkerEntry>,
    /// The JIA simulator's URL when `up --jia` started one.
    pub jia_url: Option<String>,
    /// Prometheus's URL when `up --prometheus` started it.
    #[serde(default)]
    pub prometheus_url: Option<String>,
    /// Whether the nodes keep durable logs (`--durable`).
    pub durable: bool,
    /// The operator token's file (mode 600): sign in with it at `<public_url>/ops`.
    #[serde(default)]
    pub ops_token_file: Option<PathBuf>,
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

impl ClusterFile {
    /// Every node of the cluster with its internal URL: `coordinator` (and the other
    /// replicas of a group), then `worker-<cell>` for each cell in order.
    pub fn nodes(&self) -> Vec<Node> {
        let coordinators = match self.replicas.is_empty() {
            true => vec![Node {
                name: "coordinator".to_owned(),
                url: self.coordinator_url.clone(),
            }],
            false => self.replicas.clone(),
        };
        let workers = self.workers.iter().map(|worker| Node {
            name: format!("worker-{}", worker.cell),
            url: worker.url.clone(),
        });
        coordinators.into_iter().chain(workers).collect()
    }
}

/// One node of the cluster: its name (`coordinator`, `worker-a`, ...) and internal URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub url: String,
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
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) => anyhow::bail!(
                "no cluster in {} ({error}): start one with `isuctl cluster up`",
                self.path.display()
            ),
        };
        serde_json::from_str(&text).map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))
    }

    /// The cluster secret's file (`secret`, mode 600), for commands that take a secret file.
    pub fn secret_path(&self) -> PathBuf {
        self.path.join("secret")
    }

    /// The cluster secret (`secret`, mode 600).
    pub fn secret(&self) -> anyhow::Result<String> {
        let path = self.secret_path();
        let text = std::fs::read_to_string(&path)
            .map_err(|error| anyhow::anyhow!("reading the cluster secret {}: {error}", path.display()))?;
        Ok(text.trim().to_owned())
    }
}

/// How one command runs another command of the local cluster (`cluster up`, `cluster replace`,
/// ...): this very tool's `cluster` command (the one place that knows where it lives).
pub fn cluster_command() -> std::process::Command {
    let mut command = match std::env::current_exe() {
        Ok(exe) => std::process::Command::new(exe),
        Err(_) => std::process::Command::new("isuctl"),
    };
    command.arg("cluster");
    command
}

/// Most cells a local cluster has: every worker is a process on this machine (a placement
/// map takes up to `shared::placement_map::MAX_CELLS`).
pub const MAX_LOCAL_CELLS: usize = 16;

/// The local cells' names, a to p.
const CELL_NAMES: [&str; MAX_LOCAL_CELLS] = [
    "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p",
];

/// The name of cell `index` (`a`, `b`, ...); its node is `worker-<name>`.
pub fn cell_name(index: usize) -> &'static str {
    CELL_NAMES[index]
}

/// The index of cell `name`, if it is one of a local cluster's.
pub fn cell_index(name: &str) -> Option<usize> {
    CELL_NAMES.iter().position(|cell| *cell == name)
}

/// The local cluster's loopback addresses and ports, from the `ISU_*` environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addresses {
    /// `ISU_COORDINATOR_HOST` (127.0.0.2): the coordinator, nginx's public server, the JIA simulator.
    pub coordinator_host: String,
    /// `ISU_WORKER_A_HOST` (127.0.0.3).
    pub worker_a_host: String,
    /// `ISU_WORKER_B_HOST` (127.0.0.4).
    pub worker_b_host: String,
    /// `ISU_NODE_PORT` (3000): every node's HOST:NODE_PORT.
    pub node_port: u16,
    /// `ISU_PUBLIC_PORT` (8080): nginx's public server.
    pub public_port: u16,
    /// `ISU_DEVICE_PORT` (8080): the device servers.
    pub device_port: u16,
    /// `ISU_JIA_PORT` (5000): the JIA simulator.
    pub jia_port: u16,
    /// `ISU_ROUTER_PORT` (3099): nginx's control server, on the coordinator's (loopback) host.
    pub router_port: u16,
    /// `ISU_PROMETHEUS_PORT` (9090): Prometheus (`up --prometheus`), on the coordinator's host.
    pub prometheus_port: u16,
}

impl Addresses {
    /// From the environment; a port that is not a number is a clear error.
    pub fn try_from_env() -> anyhow::Result<Addresses> {
        let text = |key: &str, default: &str| std::env::var(key).unwrap_or_else(|_| default.to_owned());
        let port = |key: &str, default: u16| -> anyhow::Result<u16> {
            match std::env::var(key) {
                Err(_) => Ok(default),
                Ok(value) => value
                    .parse()
                    .map_err(|_| anyhow::anyhow!("{key} must be a port number, not {value:?}")),
            }
        };
        Ok(Addresses {
            coordinator_host: text("ISU_COORDINATOR_HOST", "127.0.0.2"),
            worker_a_host: text("ISU_WORKER_A_HOST", "127.0.0.3"),
            worker_b_host: text("ISU_WORKER_B_HOST", "127.0.0.4"),
            node_port: port("ISU_NODE_PORT", 3000)?,
            public_port: port("ISU_PUBLIC_PORT", 8080)?,
            device_port: port("ISU_DEVICE_PORT", 8080)?,
            jia_port: port("ISU_JIA_PORT", 5000)?,
            router_port: port("ISU_ROUTER_PORT", 3099)?,
            prometheus_port: port("ISU_PROMETHEUS_PORT", 9090)?,
        })
    }

    /// The host of worker `index`: A and B as set, then the coordinator's /24 from .(3+index)
    /// on (127.0.0.5, 127.0.0.6, ... by default), so a cluster moved to other addresses
    /// keeps all its workers there.
    pub fn worker_host(&self, index: usize) -> String {
        match index {
            0 => self.worker_a_host.clone(),
            1 => self.worker_b_host.clone(),
            _ => {
                let prefix = match self.coordinator_host.parse::<std::net::Ipv4Addr>() {
                    Ok(address) => {
                        let [a, b, c, _] = address.octets();
                        format!("{a}.{b}.{c}")
                    }
                    Err(_) => "127.0.0".to_owned(),
                };
                format!("{prefix}.{}", 3 + index)
            }
        }
    }
}

/// How one command runs a `cells …` command against the local cluster (`cells random`, ...).
pub fn cells_command() -> std::process::Command {
    let mut command = match std::env::current_exe() {
        Ok(exe) => std::process::Command::new(exe),
        Err(_) => std::process::Command::new("isuctl"),
    };
    command.arg("cells");
    command
}

/// The checkout this tool was built from (where `scripts/`, `nginx/` and `web/` are).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("isuctl lives one level below the repository root")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addresses(coordinator_host: &str) -> Addresses {
        Addresses {
            coordinator_host: coordinator_host.to_owned(),
            worker_a_host: "127.0.1.3".to_owned(),
            worker_b_host: "10.1.1.1".to_owned(),
            node_port: 3000,
            public_port: 8080,
            device_port: 8080,
            jia_port: 5000,
            router_port: 3099,
            prometheus_port: 9090,
        }
    }

    #[test]
    fn workers_past_b_live_on_the_coordinator_hosts_slash_24() {
        let moved = addresses("127.0.1.2");
        assert_eq!(moved.worker_host(0), "127.0.1.3");
        assert_eq!(moved.worker_host(1), "10.1.1.1");
        assert_eq!(moved.worker_host(2), "127.0.1.5");
        assert_eq!(moved.worker_host(15), "127.0.1.18");
        assert_eq!(addresses("127.0.0.2").worker_host(3), "127.0.0.6");
        assert_eq!(addresses("localhost").worker_host(2), "127.0.0.5");
    }

    #[test]
    fn cells_are_named_a_to_p() {
        assert_eq!(cell_name(0), "a");
        assert_eq!(cell_name(15), "p");
        assert_eq!(cell_index("c"), Some(2));
        assert_eq!(cell_index("q"), None);
    }
}
