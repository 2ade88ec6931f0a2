//! A node's configuration, the one place that names the coordinator's and the worker's flags
//! for whoever starts them: the e2e sandbox and isuctl's local cluster give them as a command
//! line, a deployment (`render`) as an environment file and its unit's `ExecStart=`.
//!
//! Each [`Setting`] is a flag and the variable the node also reads it from
//! (`coordinator/src/config.rs`, `worker/src/config.rs`): on a command line the flag comes once
//! per value (`--worker a=... --worker b=...`), in the environment the variable holds the
//! values space-separated (`ISU_WORKERS="a=... b=..."`). The settings come in one fixed order
//! (the order of the rendered environment files); a setting left empty is not given, and the
//! node takes its default.

use std::path::PathBuf;

use shared::wal::FsyncPolicy;

/// One setting of a node: its flag, its variable and its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// `--listen`; none for a variable the node reads without a flag (`NO_COLOR`), which is
    /// in the environment form only: on a command line the caller's environment says it.
    pub flag: Option<&'static str>,
    /// `ISU_LISTEN`.
    pub variable: &'static str,
    /// One value, or one per repetition of the flag.
    pub values: Vec<String>,
}

impl Setting {
    fn new(flag: &'static str, variable: &'static str, values: Vec<String>) -> Setting {
        Setting {
            flag: Some(flag),
            variable,
            values,
        }
    }

    /// `NO_COLOR=1`: plain log lines (tracing honours it), for a file or the journal.
    fn no_color() -> Setting {
        Setting {
            flag: None,
            variable: "NO_COLOR",
            values: vec!["1".to_owned()],
        }
    }
}

/// `settings` as command-line arguments: each flag once per value, in order.
pub fn command_line(settings: &[Setting]) -> Vec<String> {
    let mut args = Vec::new();
    for setting in settings {
        if let Some(flag) = setting.flag {
            for value in &setting.values {
                args.extend([flag.to_owned(), value.clone()]);
            }
        }
    }
    args
}

/// `settings` as environment variables, in order: each variable with its values
/// space-separated.
pub fn environment(settings: &[Setting]) -> Vec<(&'static str, String)> {
    settings
        .iter()
        .map(|setting| (setting.variable, setting.values.join(" ")))
        .collect()
}

/// A cell as the coordinator is given it (`--worker CELL=URL,DEVICE_URL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellEndpoint {
    /// `a`, `b`, ...
    pub cell: String,
    /// The worker's internal URL (`http://127.0.0.1:3001`).
    pub url: String,
    /// Where the cell's devices post (`https://isucondition-2.t.isucon.dev`): the URL JIA is given.
    pub device_url: String,
}

/// A coordinator replica's place in its group (`--replica-id`, `--replica ID=URL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaGroup {
    /// This replica's id (from 1).
    pub id: u64,
    /// Every member, this one too: its id and its internal URL (`http://ADDR:PORT`).
    pub members: Vec<(u64, String)>,
}

/// The coordinator's settings (`coordinator --help` says what each does).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoordinatorArgs {
    /// `ADDR:PORT` of its internal and public API.
    pub listen: String,
    /// Every cell, in order.
    pub workers: Vec<CellEndpoint>,
    /// None: the caller gives `ISU_CLUSTER_SECRET` in the environment (off the command line).
    pub cluster_secret: Option<String>,
    pub fsync: Option<FsyncPolicy>,
    /// The front end it serves.
    pub static_dir: Option<PathBuf>,
    /// The router's placement map file it writes.
    pub router_map: Option<PathBuf>,
    /// nginx's control server, handed each new map (`http://ADDR:PORT`).
    pub router_url: Option<String>,
    /// In the environment form only: `NO_COLOR=1`.
    pub no_color: bool,
    pub jia_service_url: Option<String>,
    pub group: Option<ReplicaGroup>,
    pub raft_heartbeat_ms: Option<u64>,
    /// Its durable log (a replica's raft log).
    pub data_dir: Option<PathBuf>,
    /// `generated`, `generated:N` or an SQL dump's path.
    pub dataset: Option<String>,
    pub jwt_public_key: Option<PathBuf>,
    pub default_icon: Option<PathBuf>,
    /// The operator token's file (the console at `/ops`).
    pub ops_token_file: Option<PathBuf>,
    /// Prometheus's base URL (the console's charts and alerts).
    pub prometheus_url: Option<String>,
    /// Flags with no field here (a test's own), last on the command line: not a setting.
    pub extra: Vec<String>,
}

impl CoordinatorArgs {
    /// Every setting given, in the fixed order.
    pub fn settings(&self) -> Vec<Setting> {
        let group = self.group.as_ref();
        let mut settings = vec![
            Setting::new("--listen", "ISU_LISTEN", vec![self.listen.clone()]),
            Setting::new(
                "--worker",
                "ISU_WORKERS",
                self.workers
                    .iter()
                    .map(|cell| format!("{}={},{}", cell.cell, cell.url, cell.device_url))
                    .collect(),
            ),
            Setting::new("--cluster-secret", "ISU_CLUSTER_SECRET", optional(&self.cluster_secret)),
            Setting::new("--fsync", "ISU_FSYNC", optional(&self.fsync)),
            Setting::new("--static-dir", "ISU_STATIC_DIR", optional_path(&self.static_dir)),
            Setting::new("--router-map", "ISU_ROUTER_MAP", optional_path(&self.router_map)),
            Setting::new("--router-url", "ISU_ROUTER_URL", optional(&self.router_url)),
        ];
        if self.no_color {
            settings.push(Setting::no_color());
        }
        settings.extend([
            Setting::new(
                "--jia-service-url",
                "ISU_JIA_SERVICE_URL",
                optional(&self.jia_service_url),
            ),
            Setting::new("--replica-id", "ISU_REPLICA_ID", optional(&group.map(|group| group.id))),
            Setting::new(
                "--replica",
                "ISU_REPLICAS",
                group.map_or_else(Vec::new, |group| {
                    group.members.iter().map(|(id, url)| format!("{id}={url}")).collect()
                }),
            ),
            Setting::new(
                "--raft-heartbeat-ms",
                "ISU_RAFT_HEARTBEAT_MS",
                optional(&self.raft_heartbeat_ms),
            ),
            Setting::new("--data-dir", "ISU_DATA_DIR", optional_path(&self.data_dir)),
            Setting::new("--dataset", "ISU_DATASET", optional(&self.dataset)),
            Setting::new(
                "--jwt-public-key",
                "ISU_JWT_PUBLIC_KEY",
                optional_path(&self.jwt_public_key),
            ),
            Setting::new("--default-icon", "ISU_DEFAULT_ICON", optional_path(&self.default_icon)),
            Setting::new(
                "--ops-token-file",
                "ISU_OPS_TOKEN_FILE",
                optional_path(&self.ops_token_file),
            ),
            Setting::new("--prometheus-url", "ISU_PROMETHEUS_URL", optional(&self.prometheus_url)),
        ]);
        given(settings)
    }

    /// The command line after the program's name: every setting's flags, then `extra`.
    pub fn args(&self) -> Vec<String> {
        let mut args = command_line(&self.settings());
        args.extend(self.extra.iter().cloned());
        args
    }
}

/// A worker's settings (`worker --help` says what each does).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerArgs {
    /// Its cell (`a`, `b`, ...).
    pub cell: String,
    /// `ADDR:PORT` of its internal API.
    pub listen: String,
    /// `ADDR:PORT` of its own device server.
    pub device_listen: Option<String>,
    /// Every coordinator replica's URL (`http://ADDR:PORT`): each gets the latest conditions.
    pub coordinators: Vec<String>,
    /// None: the caller gives `ISU_CLUSTER_SECRET` in the environment (off the command line).
    pub cluster_secret: Option<String>,
    pub fsync: Option<FsyncPolicy>,
    /// In the environment form only: `NO_COLOR=1`.
    pub no_color: bool,
    /// Its durable log.
    pub data_dir: Option<PathBuf>,
    /// The device server's TLS certificate and key (PEM).
    pub device_tls: Option<(PathBuf, PathBuf)>,
    /// Flags with no field here (a test's own), last on the command line: not a setting.
    pub extra: Vec<String>,
}

impl WorkerArgs {
    /// Every setting given, in the fixed order.
    pub fn settings(&self) -> Vec<Setting> {
        let tls = self.device_tls.as_ref();
        let mut settings = vec![
            Setting::new("--cell", "ISU_CELL", vec![self.cell.clone()]),
            Setting::new("--listen", "ISU_LISTEN", vec![self.listen.clone()]),
            Setting::new("--device-listen", "ISU_DEVICE_LISTEN", optional(&self.device_listen)),
            Setting::new("--coordinator-url", "ISU_COORDINATOR_URL", self.coordinators.clone()),
            Setting::new("--cluster-secret", "ISU_CLUSTER_SECRET", optional(&self.cluster_secret)),
            Setting::new("--fsync", "ISU_FSYNC", optional(&self.fsync)),
        ];
        if self.no_color {
            settings.push(Setting::no_color());
        }
        settings.extend([
            Setting::new("--data-dir", "ISU_DATA_DIR", optional_path(&self.data_dir)),
            Setting::new(
                "--device-tls-cert",
                "ISU_DEVICE_TLS_CERT",
                optional_path(&tls.map(|(cert, _)| cert.clone())),
            ),
            Setting::new(
                "--device-tls-key",
                "ISU_DEVICE_TLS_KEY",
                optional_path(&tls.map(|(_, key)| key.clone())),
            ),
        ]);
        given(settings)
    }

    /// The command line after the program's name: every setting's flags, then `extra`.
    pub fn args(&self) -> Vec<String> {
        let mut args = command_line(&self.settings());
        args.extend(self.extra.iter().cloned());
        args
    }
}

/// A node of either kind, for whoever starts both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeArgs {
    Coordinator(CoordinatorArgs),
    Worker(WorkerArgs),
}

impl NodeArgs {
    /// The binary's name: `coordinator` or `worker`.
    pub fn program(&self) -> &'static str {
        match self {
            NodeArgs::Coordinator(_) => "coordinator",
            NodeArgs::Worker(_) => "worker",
        }
    }

    /// Its command line after the program's name.
    pub fn args(&self) -> Vec<String> {
        match self {
            NodeArgs::Coordinator(coordinator) => coordinator.args(),
            NodeArgs::Worker(worker) => worker.args(),
        }
    }
}

fn optional(value: &Option<impl ToString>) -> Vec<String> {
    value.iter().map(ToString::to_string).collect()
}

fn optional_path(path: &Option<PathBuf>) -> Vec<String> {
    path.iter().map(|path| path.display().to_string()).collect()
}

/// The settings that have a value.
fn given(settings: Vec<Setting>) -> Vec<Setting> {
    settings
        .into_iter()
        .filter(|setting| !setting.values.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|word| (*word).to_owned()).collect()
    }

    fn replica() -> CoordinatorArgs {
        CoordinatorArgs {
            listen: "10.0.0.1:3000".to_owned(),
            workers: vec![
                CellEndpoint {
                    cell: "a".to_owned(),
                    url: "http://10.0.0.2:3000".to_owned(),
                    device_url: "https://a.example".to_owned(),
                },
                CellEndpoint {
                    cell: "b".to_owned(),
                    url: "http://10.0.0.3:3000".to_owned(),
                    device_url: "https://b.example".to_owned(),
                },
            ],
            cluster_secret: Some("s3cret".to_owned()),
            fsync: Some(FsyncPolicy::Interval(std::time::Duration::from_millis(10))),
            no_color: true,
            jia_service_url: Some("http://jia:5000".to_owned()),
            group: Some(ReplicaGroup {
                id: 2,
                members: vec![
                    (1, "http://10.0.0.1:3000".to_owned()),
                    (3, "http://10.0.0.3:3001".to_owned()),
                ],
            }),
            data_dir: Some("/var/lib/isu/coordinator-2".into()),
            extra: strings(&["--threads", "2"]),
            ..CoordinatorArgs::default()
        }
    }

    #[test]
    fn a_coordinator_replica_has_every_flag_once_per_value_and_its_extra_flags_last() {
        assert_eq!(
            replica().args(),
            strings(&[
                "--listen",
                "10.0.0.1:3000",
                "--worker",
                "a=http://10.0.0.2:3000,https://a.example",
                "--worker",
                "b=http://10.0.0.3:3000,https://b.example",
                "--cluster-secret",
                "s3cret",
                "--fsync",
                "10ms",
                "--jia-service-url",
                "http://jia:5000",
                "--replica-id",
                "2",
                "--replica",
                "1=http://10.0.0.1:3000",
                "--replica",
                "3=http://10.0.0.3:3001",
                "--data-dir",
                "/var/lib/isu/coordinator-2",
                "--threads",
                "2",
            ])
        );
    }

    #[test]
    fn the_environment_form_joins_values_has_no_color_and_no_extra_flags() {
        let environment = environment(&replica().settings());
        let variables: Vec<&str> = environment.iter().map(|(variable, _)| *variable).collect();
        assert_eq!(
            variables,
            [
                "ISU_LISTEN",
                "ISU_WORKERS",
                "ISU_CLUSTER_SECRET",
                "ISU_FSYNC",
                "NO_COLOR",
                "ISU_JIA_SERVICE_URL",
                "ISU_REPLICA_ID",
                "ISU_REPLICAS",
                "ISU_DATA_DIR"
            ]
        );
        assert_eq!(
            environment[1].1,
            "a=http://10.0.0.2:3000,https://a.example b=http://10.0.0.3:3000,https://b.example"
        );
        assert_eq!(environment[7].1, "1=http://10.0.0.1:3000 3=http://10.0.0.3:3001");
    }

    #[test]
    fn a_lone_coordinator_gives_only_what_is_set() {
        let coordinator = CoordinatorArgs {
            listen: "127.0.0.1:3000".to_owned(),
            static_dir: Some("/srv/web".into()),
            router_map: Some("/run/placement.map".into()),
            router_url: Some("http://127.0.0.1:3099".to_owned()),
            dataset: Some("generated".to_owned()),
            jwt_public_key: Some("/keys/jwt.pem".into()),
            default_icon: Some("/keys/icon.jpg".into()),
            ..CoordinatorArgs::default()
        };
        assert_eq!(
            coordinator.args(),
            strings(&[
                "--listen",
                "127.0.0.1:3000",
                "--static-dir",
                "/srv/web",
                "--router-map",
                "/run/placement.map",
                "--router-url",
                "http://127.0.0.1:3099",
                "--dataset",
                "generated",
                "--jwt-public-key",
                "/keys/jwt.pem",
                "--default-icon",
                "/keys/icon.jpg",
            ])
        );
    }

    #[test]
    fn a_worker_pushes_to_every_coordinator_and_its_tls_pair_is_two_flags() {
        let worker = NodeArgs::Worker(WorkerArgs {
            cell: "c".to_owned(),
            listen: "127.0.0.1:3003".to_owned(),
            device_listen: Some("127.0.0.1:8083".to_owned()),
            coordinators: strings(&["http://127.0.0.1:3000", "http://127.0.0.1:3001"]),
            fsync: Some(FsyncPolicy::Never),
            data_dir: Some("/tmp/data/worker-c".into()),
            device_tls: Some(("/tls/cert.pem".into(), "/tls/key.pem".into())),
            ..WorkerArgs::default()
        });
        assert_eq!(worker.program(), "worker");
        assert_eq!(
            worker.args(),
            strings(&[
                "--cell",
                "c",
                "--listen",
                "127.0.0.1:3003",
                "--device-listen",
                "127.0.0.1:8083",
                "--coordinator-url",
                "http://127.0.0.1:3000",
                "--coordinator-url",
                "http://127.0.0.1:3001",
                "--fsync",
                "never",
                "--data-dir",
                "/tmp/data/worker-c",
                "--device-tls-cert",
                "/tls/cert.pem",
                "--device-tls-key",
                "/tls/key.pem",
            ])
        );
        assert_eq!(
            NodeArgs::Coordinator(CoordinatorArgs::default()).program(),
            "coordinator"
        );
    }
}
