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

impl ClusterFile {
    /// Every node of the cluster with its internal URL: `coordinator`, then `worker-<cell>`
    /// for each cell in order.
    pub fn nodes(&self) -> Vec<Node> {
        let coordinator = Node {
            name: "coordinator".to_owned(),
            url: self.coordinator_url.clone(),
        };
        let workers = self.workers.iter().map(|worker| Node {
            name: format!("worker-{}", worker.cell),
            url: worker.url.clone(),
        });
        std::iter::once(coordinator).chain(workers).collect()
    }

    /// Parses the `KEY=value` lines of a `cluster.env` (values optionally in double quotes).
    pub fn from_env_text(text: &str) -> anyhow::Result<ClusterFile> {
        let values: std::collections::HashMap<&str, &str> = text
            .lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .filter_map(|line| line.split_once('='))
            .map(|(key, value)| (key.trim(), value.trim().trim_matches('"')))
            .collect();
        let value = |key: &str| {
            values
                .get(key)
                .filter(|value| !value.is_empty())
                .map(|value| value.to_string())
                .ok_or_else(|| anyhow::anyhow!("no {key}"))
        };
        let workers = value("ISU_WORKER_NODES")?
            .split_whitespace()
            .map(|node| {
                let (name, url) = node
                    .split_once('=')
                    .ok_or_else(|| anyhow::anyhow!("ISU_WORKER_NODES: {node:?} is not NAME=URL"))?;
                let cell = name.strip_prefix("worker-").unwrap_or(name).to_owned();
                let device_url = value(&format!("ISU_WORKER_{}_DEVICE_URL", cell.to_uppercase())).unwrap_or_default();
                Ok(WorkerEntry {
                    cell,
                    url: url.to_owned(),
                    device_url,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(ClusterFile {
            public_url: value("ISU_PUBLIC_URL")?,
            coordinator_url: value("ISU_COORDINATOR_URL")?,
            workers,
            jia_url: value("ISU_JIA_URL").ok(),
            // cluster.env does not say; only the rollout needs to know.
            durable: false,
        })
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
            // Until `isuctl cluster up` writes cluster.json, `scripts/cluster up` leaves
            // cluster.env only.
            Err(_) if self.path.join("cluster.env").is_file() => return self.cluster_from_env_file(),
            Err(error) => anyhow::bail!(
                "no cluster in {} ({error}): start one with `isuctl cluster up`",
                self.path.display()
            ),
        };
        serde_json::from_str(&text).map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))
    }

    /// The same description read from the `cluster.env` that `scripts/cluster up` writes
    /// (`ISU_PUBLIC_URL`, `ISU_COORDINATOR_URL`, `ISU_WORKER_NODES`, device and JIA URLs).
    fn cluster_from_env_file(&self) -> anyhow::Result<ClusterFile> {
        let path = self.path.join("cluster.env");
        let text =
            std::fs::read_to_string(&path).map_err(|error| anyhow::anyhow!("reading {}: {error}", path.display()))?;
        ClusterFile::from_env_text(&text).map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))
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
/// ...): the one place that knows where that command lives.
pub fn cluster_command() -> std::process::Command {
    std::process::Command::new(repo_root().join("scripts/cluster"))
}

/// How one command runs a `cells …` command against the local cluster (`cells random`, ...).
pub fn cells_command() -> std::process::Command {
    std::process::Command::new(repo_root().join("scripts/cells"))
}

/// A folder name for one run, `YYYYMMDD-HHMMSS` in UTC (`run/bench/<it>`, `run/profiles/<it>`).
pub fn timestamp() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    timestamp_of(seconds)
}

/// [`timestamp`] of a Unix time (Howard Hinnant's `civil_from_days` for the date).
fn timestamp_of(unix_seconds: u64) -> String {
    let (days, second_of_day) = ((unix_seconds / 86_400) as i64, unix_seconds % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
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

    #[test]
    fn a_cluster_env_of_three_cells_gives_every_node() {
        let text = "# Written by cluster up\nISU_PUBLIC_URL=http://127.0.0.2:8080\n\
            ISU_COORDINATOR_URL=http://127.0.0.2:3000\n\
            ISU_WORKER_A_DEVICE_URL=http://127.0.0.3:8080\n\
            ISU_WORKER_NODES=\"worker-a=http://127.0.0.3:3000 worker-b=http://127.0.0.4:3000 worker-c=http://127.0.0.5:3000 \"\n\
            ISU_SECRET_FILE=/tmp/run/secret\n";
        let cluster = ClusterFile::from_env_text(text).unwrap();
        assert_eq!(cluster.public_url, "http://127.0.0.2:8080");
        assert_eq!(cluster.jia_url, None);
        assert_eq!(cluster.workers[0].device_url, "http://127.0.0.3:8080");
        let names: Vec<_> = cluster
            .nodes()
            .into_iter()
            .map(|node| format!("{}={}", node.name, node.url))
            .collect();
        assert_eq!(
            names,
            [
                "coordinator=http://127.0.0.2:3000",
                "worker-a=http://127.0.0.3:3000",
                "worker-b=http://127.0.0.4:3000",
                "worker-c=http://127.0.0.5:3000"
            ]
        );
    }

    #[test]
    fn timestamps_are_utc_dates_and_times() {
        assert_eq!(timestamp_of(0), "19700101-000000");
        assert_eq!(timestamp_of(951_782_400), "20000229-000000");
        assert_eq!(timestamp_of(1_796_270_399), "20261203-035959");
    }

    #[test]
    fn a_cluster_env_without_workers_is_refused() {
        let error = ClusterFile::from_env_text("ISU_PUBLIC_URL=http://x\nISU_COORDINATOR_URL=http://y\n").unwrap_err();
        assert!(error.to_string().contains("ISU_WORKER_NODES"), "{error}");
    }
}
