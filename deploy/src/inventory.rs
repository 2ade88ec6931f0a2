//! The inventory: which hosts run what, at which addresses, with which certificate.
//!
//! One TOML file describes a whole deployment (`ops/deploy/contest.toml` is the contest's
//! three hosts). It is checked as a whole before anything is rendered, so a typo is an error
//! naming the key, never a half-rendered host.
//!
//! The coordinator is one process on the coordinator host (nginx's host), or a group of
//! replicas on a raft log: `coordinator_replica = N` on the coordinator host and on two (or
//! four, or six) worker hosts runs replica N there, beside nginx or beside the worker. An odd
//! number of 3 to 7 replicas, each id once; no key anywhere is one coordinator, rendered as it
//! always was.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use shared::wal::FsyncPolicy;

/// A parsed and checked inventory.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// File with the cluster secret, relative to the inventory; made (32 random bytes, hex,
    /// mode 600) when missing.
    #[serde(default = "default_secret_file")]
    pub secret_file: PathBuf,
    /// File with the operator token (the console at `/ops`, kept apart from the cluster
    /// secret), relative to the inventory; made like the secret when missing.
    #[serde(default = "default_ops_token_file")]
    pub ops_token_file: PathBuf,
    /// Where the node binaries (`coordinator`, `worker`) are on the hosts.
    #[serde(default = "default_bin_dir")]
    pub bin_dir: PathBuf,
    /// Where the front end (`index.html`, `assets/`) is on the coordinator host.
    #[serde(default = "default_web_dir")]
    pub web_dir: PathBuf,
    /// Parent of every node's state directory on the hosts (must be under `/var/lib`:
    /// systemd's `StateDirectory=`).
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// When the logs reach the disk: `always`, `<N>ms` or `never`.
    #[serde(default = "default_fsync")]
    pub fsync: String,
    /// Port of every node's internal listener (on the internal addresses).
    #[serde(default = "default_node_port")]
    pub node_port: u16,
    /// Port of a coordinator replica beside a worker (on the worker host's internal address;
    /// the worker has `node_port`); default `node_port + 1`. The replica on the coordinator
    /// host listens on `node_port`.
    pub replica_port: Option<u16>,
    /// The coordinator replicas' raft heartbeat in milliseconds (their default, 100, unless
    /// set): raise it where the round trip between hosts nears 100 ms.
    pub raft_heartbeat_ms: Option<u64>,
    /// Port of the public listeners (nginx on the coordinator host, the device servers on
    /// the worker hosts); default 443 with TLS, 80 without.
    pub public_port: Option<u16>,
    /// JIA's URL until `POST /initialize` names one (the coordinator's default otherwise).
    pub jia_service_url: Option<String>,
    /// The user nginx's workers run as.
    #[serde(default = "default_nginx_user")]
    pub nginx_user: String,
    /// nginx's binary on the coordinator host.
    #[serde(default = "default_nginx_bin")]
    pub nginx_bin: PathBuf,
    /// Certificate and key on the hosts (one certificate covering every server name).
    pub tls: Option<Tls>,
    /// Units `--apply` stops and disables on every host before starting the cluster's: what
    /// else holds the ports (the distribution's `nginx.service`, the contest image's own app).
    #[serde(default)]
    pub replaces: Vec<String>,
    /// Files `--apply` copies to the hosts with the rendered configuration.
    #[serde(default)]
    pub bundle: Bundle,
    /// Debian's Prometheus on the coordinator host (`[prometheus]`, even empty): it scrapes
    /// every node, the coordinator replicas reach it for the console's charts and alerts.
    pub prometheus: Option<Prometheus>,
    /// The hosts: one coordinator, one host per worker (and coordinator replicas on some of them).
    #[serde(rename = "host")]
    pub hosts: Vec<Host>,
}

/// Paths of the certificate chain and key, as they are on the hosts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Local directories whose files `--apply` installs (relative to the inventory).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// Directory holding the built `coordinator` and `worker`, installed into `bin_dir`.
    pub binaries: Option<PathBuf>,
    /// The built front end, installed into `web_dir` on the coordinator host.
    pub web: Option<PathBuf>,
}

/// The `isu-prometheus` unit's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prometheus {
    /// Its binary on the coordinator host.
    #[serde(default = "default_prometheus_bin")]
    pub bin: PathBuf,
    /// Its loopback port (nginx's control server passes the coordinators' queries to it).
    #[serde(default = "default_prometheus_port")]
    pub port: u16,
    /// How long it keeps its data (`--storage.tsdb.retention.time`).
    #[serde(default = "default_prometheus_retention")]
    pub retention: String,
}

fn default_prometheus_bin() -> PathBuf {
    PathBuf::from("/usr/bin/prometheus")
}
fn default_prometheus_port() -> u16 {
    9090
}
fn default_prometheus_retention() -> String {
    "15d".to_owned()
}

/// What a host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Coordinator,
    Worker,
}

/// One host.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// Short name: the rendered directory, and the host in messages.
    pub name: String,
    /// `ssh` destination for `--apply` (default: `server_name`).
    pub ssh: Option<String>,
    pub role: Role,
    /// The worker's cell (a-z, 0-9, '-'); workers only.
    pub cell: Option<String>,
    /// The host's public name: the browser's site (coordinator) or the devices' (worker).
    pub server_name: String,
    /// Address the public listener binds (nginx, or the worker's device server).
    pub public_address: IpAddr,
    /// Address of the internal network: the nodes listen here and call each other here.
    pub internal_address: IpAddr,
    /// This host runs coordinator replica N (1, 2, 3, …): the coordinator host beside nginx,
    /// a worker host beside its worker. Either the coordinator host and 2, 4 or 6 worker hosts
    /// have it (3, 5 or 7 replicas), or no host has it (one coordinator).
    pub coordinator_replica: Option<u64>,
}

fn default_secret_file() -> PathBuf {
    PathBuf::from("secret")
}
fn default_ops_token_file() -> PathBuf {
    PathBuf::from("ops-token")
}
fn default_bin_dir() -> PathBuf {
    PathBuf::from("/usr/local/lib/isucondition")
}
fn default_web_dir() -> PathBuf {
    PathBuf::from("/usr/local/share/isucondition/web")
}
fn default_data_dir() -> PathBuf {
    PathBuf::from("/var/lib/isucondition")
}
fn default_fsync() -> String {
    "10ms".to_owned()
}
fn default_node_port() -> u16 {
    3000
}
fn default_nginx_user() -> String {
    "www-data".to_owned()
}
fn default_nginx_bin() -> PathBuf {
    PathBuf::from("/usr/sbin/nginx")
}

/// Where nginx's control server (the router's) listens on the coordinator host with
/// coordinator replicas: on its internal address, so that a leader on another host hands nginx
/// each new placement map (one coordinator uses loopback).
pub const ROUTER_CONTROL_PORT: u16 = 3099;

/// How many coordinator replicas a group may have: an odd number (an even one survives no
/// more failures than one fewer, with a larger majority to wait for), at most 7 (every write
/// waits for a majority).
pub const REPLICA_COUNTS: [usize; 3] = [3, 5, 7];

/// An inventory that cannot be deployed.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Parse { path: PathBuf, source: toml::de::Error },
    #[error("{0}")]
    Invalid(String),
}

impl Inventory {
    /// Reads and checks an inventory file.
    pub fn load(path: &Path) -> Result<Inventory, InventoryError> {
        let text = std::fs::read_to_string(path).map_err(|source| InventoryError::Read {
            path: path.to_owned(),
            source,
        })?;
        let inventory: Inventory = toml::from_str(&text).map_err(|source| InventoryError::Parse {
            path: path.to_owned(),
            source,
        })?;
        inventory.check()?;
        Ok(inventory)
    }

    /// Every rule that rendering relies on.
    pub fn check(&self) -> Result<(), InventoryError> {
        let invalid = |message: String| Err(InventoryError::Invalid(message));
        let coordinators = self.hosts.iter().filter(|host| host.role == Role::Coordinator).count();
        if coordinators != 1 {
            return invalid(format!(
                "exactly one host must have role = \"coordinator\" (found {coordinators})"
            ));
        }
        let workers = self.hosts.len() - 1;
        if !(1..=shared::placement_map::MAX_CELLS).contains(&workers) {
            return invalid(format!(
                "1 to {} worker hosts are needed (found {workers})",
                shared::placement_map::MAX_CELLS
            ));
        }
        let mut names = BTreeSet::new();
        let mut cells = BTreeSet::new();
        let mut addresses = BTreeSet::new();
        for host in &self.hosts {
            if !is_simple_name(&host.name) {
                return invalid(format!(
                    "host name {:?}: use a-z, 0-9, '-' (1 to 63 characters)",
                    host.name
                ));
            }
            if !names.insert(&host.name) {
                return invalid(format!("host {:?} appears twice", host.name));
            }
            if !is_server_name(&host.server_name) {
                return invalid(format!(
                    "host {}: server_name {:?} is not a DNS name",
                    host.name, host.server_name
                ));
            }
            if host.internal_address.is_unspecified() {
                return invalid(format!(
                    "host {}: internal_address must be the host's own address (the other nodes call it)",
                    host.name
                ));
            }
            if !addresses.insert(host.internal_address) {
                return invalid(format!(
                    "host {}: internal_address {} is taken",
                    host.name, host.internal_address
                ));
            }
            match (host.role, &host.cell) {
                (Role::Worker, Some(cell)) => {
                    if !is_simple_name(cell) || cell.len() > 32 {
                        return invalid(format!("host {}: cell {cell:?}: use a-z, 0-9, '-' (≤ 32)", host.name));
                    }
                    if !cells.insert(cell) {
                        return invalid(format!("cell {cell:?} is on two hosts"));
                    }
                }
                (Role::Worker, None) => return invalid(format!("host {}: a worker needs cell = \"...\"", host.name)),
                (Role::Coordinator, Some(_)) => {
                    return invalid(format!("host {}: the coordinator has no cell", host.name))
                }
                (Role::Coordinator, None) => {}
            }
        }
        for unit in &self.replaces {
            let ok = unit.ends_with(".service")
                && unit.len() > ".service".len()
                && unit.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b));
            if !ok || unit.starts_with("isu-") {
                return invalid(format!("replaces: {unit:?} is not another service unit's name"));
            }
        }
        if !self.data_dir.starts_with("/var/lib/") || self.data_dir.components().count() < 4 {
            return invalid(format!(
                "data_dir {} must be a directory under /var/lib (systemd's StateDirectory=)",
                self.data_dir.display()
            ));
        }
        for (key, path) in [
            ("data_dir", &self.data_dir),
            ("bin_dir", &self.bin_dir),
            ("web_dir", &self.web_dir),
            ("nginx_bin", &self.nginx_bin),
        ] {
            if !path.is_absolute() || !is_plain_path(path) {
                return invalid(format!(
                    "{key} {} must be an absolute path without spaces or quotes",
                    path.display()
                ));
            }
        }
        if let Some(prometheus) = &self.prometheus {
            self.check_prometheus(prometheus)?;
        }
        if let Some(tls) = &self.tls {
            for (key, path) in [("tls.cert", &tls.cert), ("tls.key", &tls.key)] {
                if !path.is_absolute() || !is_plain_path(path) {
                    return invalid(format!(
                        "{key} {} must be an absolute path on the hosts",
                        path.display()
                    ));
                }
            }
        }
        // The nodes' own reading of `--fsync` (`ISU_FSYNC`): what passes here, they take.
        if self.fsync.parse::<FsyncPolicy>().is_err() {
            let fsync = &self.fsync;
            return invalid(format!("fsync {fsync:?}: use \"always\", \"<N>ms\" or \"never\""));
        }
        if let Some(url) = &self.jia_service_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) || url.contains(char::is_whitespace) {
                return invalid(format!("jia_service_url {url:?} is not an http(s) URL"));
            }
        }
        if !is_simple_name(&self.nginx_user.replace('_', "-")) {
            return invalid(format!("nginx_user {:?} is not a user name", self.nginx_user));
        }
        self.check_replicas()
    }

    /// `[prometheus]`: an absolute binary, a retention Prometheus reads, a port free on the
    /// coordinator host.
    fn check_prometheus(&self, prometheus: &Prometheus) -> Result<(), InventoryError> {
        let invalid = |message: String| Err(InventoryError::Invalid(message));
        if !prometheus.bin.is_absolute() || !is_plain_path(&prometheus.bin) {
            return invalid(format!(
                "prometheus.bin {} must be an absolute path without spaces or quotes",
                prometheus.bin.display()
            ));
        }
        let retention = &prometheus.retention;
        let digits = retention.trim_end_matches(['y', 'w', 'd', 'h', 'm', 's']);
        if digits.is_empty() || digits.len() == retention.len() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return invalid(format!(
                "prometheus.retention {retention:?}: a duration such as \"15d\" or \"12h\""
            ));
        }
        if [self.node_port, self.public_port(), ROUTER_CONTROL_PORT].contains(&prometheus.port) {
            return invalid(format!(
                "prometheus.port {}: taken on the coordinator host",
                prometheus.port
            ));
        }
        Ok(())
    }

    /// The coordinator replicas as a whole: none, or the coordinator host and worker hosts,
    /// 3, 5 or 7 of them, each id once, on ports of their own.
    fn check_replicas(&self) -> Result<(), InventoryError> {
        let invalid = |message: String| Err(InventoryError::Invalid(message));
        let replicas: Vec<&Host> = self
            .hosts
            .iter()
            .filter(|host| host.coordinator_replica.is_some())
            .collect();
        if replicas.is_empty() {
            if let Some(port) = self.replica_port {
                return invalid(format!(
                    "replica_port = {port} without coordinator replicas (coordinator_replica = N on hosts)"
                ));
            }
            if let Some(heartbeat) = self.raft_heartbeat_ms {
                return invalid(format!(
                    "raft_heartbeat_ms = {heartbeat} without coordinator replicas (coordinator_replica = N on hosts)"
                ));
            }
            return Ok(());
        }
        if let Some(heartbeat) = self.raft_heartbeat_ms.filter(|ms| !(10..=5_000).contains(ms)) {
            return invalid(format!(
                "raft_heartbeat_ms = {heartbeat}: use 10 to 5000 (milliseconds)"
            ));
        }
        let coordinator = self.coordinator();
        if coordinator.coordinator_replica.is_none() {
            return invalid(format!(
                "host {}: the coordinator host (nginx's) needs coordinator_replica = N too when other hosts run replicas",
                coordinator.name
            ));
        }
        let mut ids = BTreeSet::new();
        for host in &replicas {
            let id = host.coordinator_replica.expect("filtered");
            if id == 0 {
                return invalid(format!("host {}: coordinator_replica ids start at 1", host.name));
            }
            if !ids.insert(id) {
                return invalid(format!("coordinator_replica = {id} is on two hosts"));
            }
        }
        let count = replicas.len();
        if !REPLICA_COUNTS.contains(&count) {
            let why = match count {
                1 => "one replica is no group: leave coordinator_replica out for a single coordinator".to_owned(),
                count if count % 2 == 0 => format!(
                    "an even number survives no more failures than {} with a larger majority to wait for",
                    count - 1
                ),
                _ => "every write waits for a majority of them".to_owned(),
            };
            return invalid(format!(
                "{count} hosts have coordinator_replica: use 3, 5 or 7 replicas ({why})"
            ));
        }
        let replica_port = self.replica_port();
        let public_port = self.public_port();
        for (key, port) in [("node_port", self.node_port), ("replica_port", replica_port)] {
            if port == ROUTER_CONTROL_PORT {
                return invalid(format!(
                    "{key} {port}: with coordinator replicas nginx's control server takes port {ROUTER_CONTROL_PORT} of the coordinator host's internal address"
                ));
            }
        }
        if replica_port == self.node_port || replica_port == public_port {
            return invalid(format!(
                "replica_port {replica_port}: a replica beside a worker needs a port of its own (node_port {}, public_port {public_port})",
                self.node_port
            ));
        }
        Ok(())
    }

    /// The coordinator's host.
    pub fn coordinator(&self) -> &Host {
        self.hosts
            .iter()
            .find(|host| host.role == Role::Coordinator)
            .expect("checked: one coordinator")
    }

    /// The hosts running coordinator replicas, by replica id (none: one coordinator).
    pub fn replicas(&self) -> Vec<&Host> {
        let mut replicas: Vec<&Host> = self
            .hosts
            .iter()
            .filter(|host| host.coordinator_replica.is_some())
            .collect();
        replicas.sort_by_key(|host| host.coordinator_replica);
        replicas
    }

    /// The port of a replica beside a worker: given, else `node_port + 1`.
    pub fn replica_port(&self) -> u16 {
        self.replica_port.unwrap_or(self.node_port.wrapping_add(1))
    }

    /// Where the coordinator on `host` listens (`ADDRESS:PORT`): `node_port` on the
    /// coordinator host, `replica_port` beside a worker.
    pub fn coordinator_listen(&self, host: &Host) -> std::net::SocketAddr {
        let port = match host.role {
            Role::Coordinator => self.node_port,
            Role::Worker => self.replica_port(),
        };
        std::net::SocketAddr::new(host.internal_address, port)
    }

    /// Every coordinator's internal listener, by replica id (the one coordinator's alone
    /// without replicas): nginx's coordinator upstream, and where each worker pushes.
    pub fn coordinator_listeners(&self) -> Vec<std::net::SocketAddr> {
        let replicas = self.replicas();
        if replicas.is_empty() {
            return vec![self.coordinator_listen(self.coordinator())];
        }
        replicas.iter().map(|host| self.coordinator_listen(host)).collect()
    }

    /// The worker hosts, in inventory order (the cells' order in the placement map).
    pub fn workers(&self) -> impl Iterator<Item = &Host> {
        self.hosts.iter().filter(|host| host.role == Role::Worker)
    }

    /// The public port: given, else 443 with TLS and 80 without.
    pub fn public_port(&self) -> u16 {
        self.public_port.unwrap_or(if self.tls.is_some() { 443 } else { 80 })
    }

    /// The URL a name is reached at on the public port (no port when it is the scheme's).
    pub fn public_url(&self, server_name: &str) -> String {
        let (scheme, default_port) = if self.tls.is_some() {
            ("https", 443)
        } else {
            ("http", 80)
        };
        match self.public_port() {
            port if port == default_port => format!("{scheme}://{server_name}"),
            port => format!("{scheme}://{server_name}:{port}"),
        }
    }
}

impl Host {
    /// Where `--apply` connects.
    pub fn ssh_destination(&self) -> &str {
        self.ssh.as_deref().unwrap_or(&self.server_name)
    }

    /// The node's name: `coordinator` or `worker-<cell>`.
    pub fn node_name(&self) -> String {
        match &self.cell {
            Some(cell) => format!("worker-{cell}"),
            None => "coordinator".to_owned(),
        }
    }
}

fn is_simple_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
}

fn is_server_name(name: &str) -> bool {
    (1..=253).contains(&name.len())
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
        })
}

fn is_plain_path(path: &Path) -> bool {
    path.to_str()
        .is_some_and(|text| !text.contains(|c: char| c.is_whitespace() || "\"'$;{}\\%".contains(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        [tls]
        cert = "/etc/isucondition/tls/cert.pem"
        key = "/etc/isucondition/tls/key.pem"

        [[host]]
        name = "isu1"
        role = "coordinator"
        server_name = "isucondition-1.t.isucon.dev"
        public_address = "0.0.0.0"
        internal_address = "192.168.0.11"

        [[host]]
        name = "isu2"
        role = "worker"
        cell = "a"
        server_name = "isucondition-2.t.isucon.dev"
        public_address = "0.0.0.0"
        internal_address = "192.168.0.12"
    "#;

    fn parse(text: &str) -> Result<Inventory, String> {
        let inventory: Inventory = toml::from_str(text).map_err(|error| error.to_string())?;
        inventory.check().map_err(|error| error.to_string())?;
        Ok(inventory)
    }

    #[test]
    fn a_good_inventory_has_defaults_and_urls() {
        let inventory = parse(GOOD).unwrap();
        assert_eq!(inventory.public_port(), 443);
        assert_eq!(inventory.public_url("x.example"), "https://x.example");
        assert_eq!(inventory.coordinator().name, "isu1");
        assert_eq!(inventory.workers().count(), 1);
        assert_eq!(inventory.data_dir, Path::new("/var/lib/isucondition"));
        assert_eq!(inventory.hosts[1].node_name(), "worker-a");
        assert_eq!(inventory.hosts[1].ssh_destination(), "isucondition-2.t.isucon.dev");
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            (
                GOOD.replace("role = \"coordinator\"", "role = \"worker\"\ncell = \"z\""),
                "exactly one host",
            ),
            (GOOD.replace("cell = \"a\"", ""), "needs cell"),
            (GOOD.replace("192.168.0.12", "192.168.0.11"), "is taken"),
            (GOOD.replace("isucondition-2.t", "bad name.t"), "not a DNS name"),
            (format!("fsync = \"sometimes\"\n{GOOD}"), "fsync"),
            (format!("data_dir = \"/srv/isu\"\n{GOOD}"), "under /var/lib"),
            (format!("colour = \"red\"\n{GOOD}"), "unknown field"),
            (
                GOOD.replace("\"/etc/isucondition/tls/key.pem\"", "\"key.pem\""),
                "tls.key",
            ),
            (
                GOOD.replace("internal_address = \"192.168.0.12\"", "internal_address = \"0.0.0.0\""),
                "own address",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(&text).expect_err(expected);
            assert!(error.contains(expected), "{error:?} should mention {expected:?}");
        }
    }

    /// GOOD with a third host (cell b) and `coordinator_replica` on the hosts given.
    fn three_hosts(replicas: &[(usize, &str)]) -> String {
        let third = "\n[[host]]\nname = \"isu3\"\nrole = \"worker\"\ncell = \"b\"\n\
                     server_name = \"isucondition-3.t.isucon.dev\"\npublic_address = \"0.0.0.0\"\n\
                     internal_address = \"192.168.0.13\"\n";
        let text = format!("{GOOD}{third}");
        let mut parts: Vec<String> = text.split("[[host]]\n").map(str::to_owned).collect();
        for (host, value) in replicas {
            parts[host + 1] = format!("coordinator_replica = {value}\n{}", parts[host + 1]);
        }
        parts.join("[[host]]\n")
    }

    #[test]
    fn replicas_are_listed_by_id_with_their_listeners() {
        let inventory = parse(&three_hosts(&[(0, "1"), (1, "3"), (2, "2")])).unwrap();
        let names: Vec<&str> = inventory.replicas().iter().map(|host| host.name.as_str()).collect();
        assert_eq!(names, ["isu1", "isu3", "isu2"]);
        let listeners: Vec<String> = inventory
            .coordinator_listeners()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            listeners,
            ["192.168.0.11:3000", "192.168.0.13:3001", "192.168.0.12:3001"]
        );
        let single = parse(&three_hosts(&[])).unwrap();
        assert!(single.replicas().is_empty());
        let listeners: Vec<String> = single.coordinator_listeners().iter().map(ToString::to_string).collect();
        assert_eq!(listeners, ["192.168.0.11:3000"]);
        let moved = parse(&format!(
            "replica_port = 4000\n{}",
            three_hosts(&[(0, "1"), (1, "2"), (2, "3")])
        ))
        .unwrap();
        assert_eq!(moved.coordinator_listeners()[1].to_string(), "192.168.0.12:4000");
    }

    #[test]
    fn replica_mistakes_are_named() {
        let cases = [
            (
                three_hosts(&[(1, "2"), (2, "3")]),
                "the coordinator host (nginx's) needs coordinator_replica",
            ),
            (
                three_hosts(&[(0, "1"), (1, "1"), (2, "3")]),
                "coordinator_replica = 1 is on two hosts",
            ),
            (three_hosts(&[(0, "0"), (1, "1"), (2, "3")]), "ids start at 1"),
            (
                three_hosts(&[(0, "1"), (1, "2")]),
                "use 3, 5 or 7 replicas (an even number",
            ),
            (three_hosts(&[(0, "1")]), "one replica is no group"),
            (three_hosts(&[(0, "-1"), (1, "2"), (2, "3")]), "coordinator_replica"),
            (
                format!("replica_port = 3000\n{}", three_hosts(&[(0, "1"), (1, "2"), (2, "3")])),
                "needs a port of its own",
            ),
            (
                format!("replica_port = 3099\n{}", three_hosts(&[(0, "1"), (1, "2"), (2, "3")])),
                "nginx's control server",
            ),
            (
                format!("replica_port = 4000\n{}", three_hosts(&[])),
                "without coordinator replicas",
            ),
            (
                format!("raft_heartbeat_ms = 300\n{}", three_hosts(&[])),
                "raft_heartbeat_ms = 300 without coordinator replicas",
            ),
            (
                format!(
                    "raft_heartbeat_ms = 5\n{}",
                    three_hosts(&[(0, "1"), (1, "2"), (2, "3")])
                ),
                "use 10 to 5000",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(&text).expect_err(expected);
            assert!(error.contains(expected), "{error:?} should mention {expected:?}");
        }
    }

    #[test]
    fn without_tls_the_site_is_plain_http_on_80() {
        let text = GOOD
            .split("[[host]]")
            .skip(1)
            .fold(String::new(), |all, host| all + "[[host]]" + host);
        let inventory = parse(&text).unwrap();
        assert_eq!(inventory.public_port(), 80);
        assert_eq!(inventory.public_url("x.example"), "http://x.example");
    }
}
