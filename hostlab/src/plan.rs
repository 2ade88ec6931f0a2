//! The namespace hosts as data: which hosts a cluster of N workers has, each one's network
//! namespace, addresses, cell and mounts, the inventory they are deployed from and the
//! netlab ports that join them. Pure: `isuctl hosts up` carries the plan out.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use netlab::router::PortSpec;

use deploy::mounts::Bind;

/// The public domain every cluster host is named in.
pub const DOMAIN: &str = "t.isucon.dev";
/// The bench host's public address (it has no internal one).
pub const BENCH_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
/// The internal network: bench routes to it are added by the isolation check.
pub const INTERNAL_NETWORK: &str = "10.78.0.0/24";
/// Where the nodes' state lies on a host (the inventory's default `data_dir`).
pub const DATA_DIR: &str = "/var/lib/isucondition";
/// Where the rendered environment files and nginx's configuration lie on a host.
pub const CONFIG_DIR: &str = "/etc/isucondition";
/// Where the certificate and key lie on a host (the inventory's `[tls]`).
pub const TLS_DIR: &str = "/etc/ssl/isucondition";
/// Where the front end lies on the coordinator host: the inventory's default `web_dir`,
/// installed from the rendered bundle as on a real host (readable by nginx's user, wherever
/// the checkout is).
pub const WEB_DIR: &str = "/usr/local/share/isucondition/web";

/// What a host runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Coordinator,
    Worker { cell: String },
    Bench,
}

/// One namespace host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPlan {
    /// `isucondition-N` or `bench`.
    pub name: String,
    /// Its network namespace (`ip netns`).
    pub netns: String,
    pub role: Role,
    pub public_address: Ipv4Addr,
    /// None for the bench host.
    pub internal_address: Option<Ipv4Addr>,
    /// The coordinator replica this host runs (`--coordinators 3`: 1 beside nginx, 2 and 3
    /// beside the workers of cells a and b); none with one coordinator.
    pub replica: Option<u64>,
}

impl HostPlan {
    /// `isucondition-N.t.isucon.dev`.
    pub fn server_name(&self) -> String {
        format!("{}.{DOMAIN}", self.name)
    }

    pub fn is_cluster_host(&self) -> bool {
        self.role != Role::Bench
    }

    /// Where this host's coordinator (the one, or a replica) answers: `node_port` on the
    /// coordinator host, `replica_port` beside a worker (the inventory's defaults).
    pub fn coordinator_url(&self) -> Option<String> {
        let port = match (&self.role, self.replica) {
            (Role::Coordinator, _) => NODE_PORT,
            (Role::Worker { .. }, Some(_)) => NODE_PORT + 1,
            _ => return None,
        };
        Some(format!("http://{}:{port}", self.internal_address?))
    }

    /// The coordinator's node name on this host: `coordinator`, or `coordinator-N` for
    /// replica N (its state directory).
    pub fn coordinator_node(&self) -> String {
        match self.replica {
            Some(id) => deploy::render::replica_node(id),
            None => "coordinator".to_owned(),
        }
    }
}

/// Every node's internal port (the inventory's default `node_port`).
pub const NODE_PORT: u16 = 3000;

/// How many coordinators a namespace cluster may have: one, or three replicas.
pub const COORDINATORS: [u8; 2] = [1, 3];

/// How many workers a namespace cluster may have (the certificate names four hosts).
pub const WORKERS: std::ops::RangeInclusive<usize> = 2..=3;

/// The hosts of a cluster of `workers` workers and `coordinators` coordinators (1, or 3
/// replicas on the first three hosts), then the bench host: `isucondition-1` (coordinator +
/// nginx), `isucondition-2..` (cells a, b, c), `bench`.
pub fn hosts(workers: usize, coordinators: u8) -> Vec<HostPlan> {
    let replicas = if coordinators > 1 { usize::from(coordinators) } else { 0 };
    let mut hosts: Vec<HostPlan> = (1..=workers + 1)
        .map(|index| {
            let role = match index {
                1 => Role::Coordinator,
                _ => Role::Worker {
                    cell: cell_name(index - 2),
                },
            };
            let index = u8::try_from(index).expect("a few hosts");
            HostPlan {
                name: format!("isucondition-{index}"),
                netns: format!("isu-h{index}"),
                role,
                public_address: Ipv4Addr::new(10, 77, 0, index),
                internal_address: Some(Ipv4Addr::new(10, 78, 0, index)),
                replica: (usize::from(index) <= replicas).then_some(u64::from(index)),
            }
        })
        .collect();
    hosts.push(HostPlan {
        name: "bench".to_owned(),
        netns: "isu-hb".to_owned(),
        role: Role::Bench,
        public_address: BENCH_ADDRESS,
        internal_address: None,
        replica: None,
    });
    hosts
}

/// The `index`-th cell's name: a, b, c, ...
fn cell_name(index: usize) -> String {
    char::from(b'a' + u8::try_from(index).expect("at most 26 cells")).to_string()
}

/// The host named `name` among `hosts`, or an error listing the names.
pub fn find<'a>(hosts: &'a [HostPlan], name: &str) -> anyhow::Result<&'a HostPlan> {
    hosts.iter().find(|host| host.name == name).ok_or_else(|| {
        let names: Vec<&str> = hosts.iter().map(|host| host.name.as_str()).collect();
        anyhow::anyhow!("no host {name} (hosts: {})", names.join(", "))
    })
}

/// Every namespace's `/etc/hosts`: the cluster hosts by their public names.
pub fn etc_hosts(hosts: &[HostPlan]) -> String {
    let mut text = String::new();
    for host in hosts.iter().filter(|host| host.is_cluster_host()) {
        writeln!(text, "{} {}", host.public_address, host.server_name()).unwrap();
    }
    text.push_str("127.0.0.1 localhost\n");
    text
}

/// netlab's ports: each host's public interface (`pub0`, /24), and each cluster host's
/// internal one (`int0`).
pub fn netlab_ports(hosts: &[HostPlan]) -> Vec<PortSpec> {
    let port = |host: &HostPlan, ifname: &str, addr: Ipv4Addr| PortSpec {
        host: host.name.clone(),
        netns: host.netns.clone(),
        ifname: ifname.to_owned(),
        addr,
        prefix: 24,
    };
    hosts
        .iter()
        .flat_map(|host| {
            std::iter::once(port(host, "pub0", host.public_address))
                .chain(host.internal_address.map(|addr| port(host, "int0", addr)))
        })
        .collect()
}

/// Paths on this machine the plan needs besides the hosts.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The state directory (`run/hosts`).
    pub state: PathBuf,
    /// The release binaries (`coordinator`, `worker`, `bench`, `netlab`).
    pub release: PathBuf,
    /// The front end to install on the coordinator host (an `index.html` and its assets).
    pub web: PathBuf,
}

impl Paths {
    /// A host's rendered tree (`OUT/<host>/` of the render).
    pub fn rendered(&self, host: &str) -> PathBuf {
        self.state.join("rendered").join(host)
    }

    /// A host's own directories (its state directory, its credentials).
    pub fn root(&self, host: &str) -> PathBuf {
        self.state.join("roots").join(host)
    }

    pub fn logs(&self, host: &str) -> PathBuf {
        self.state.join("logs").join(host)
    }

    pub fn tls(&self) -> PathBuf {
        self.state.join("tls")
    }
}

/// The replicas' raft heartbeat on these hosts (see [`inventory`]).
pub const HOSTS_RAFT_HEARTBEAT_MS: u64 = 300;

/// The inventory the hosts are deployed from: the very file format of a real deployment,
/// with the binaries taken from this checkout and the front end bundled (installed into the
/// coordinator host's `web_dir` by the render).
pub fn inventory(hosts: &[HostPlan], tls: bool, paths: &Paths) -> String {
    let mut text = String::from("# Made by isuctl hosts up: the namespace hosts of this machine.\n");
    writeln!(text, "secret_file = \"secret\"").unwrap();
    writeln!(text, "bin_dir = {:?}", paths.release.display().to_string()).unwrap();
    writeln!(text, "web_dir = {WEB_DIR:?}").unwrap();
    writeln!(text, "data_dir = {DATA_DIR:?}").unwrap();
    writeln!(text, "fsync = \"10ms\"").unwrap();
    if hosts.iter().any(|host| host.replica.is_some()) {
        // The latency check puts 50 ms each way between hosts: an append must be answered
        // within one heartbeat (openraft), so the replicas get a longer one than a LAN's.
        writeln!(text, "raft_heartbeat_ms = {HOSTS_RAFT_HEARTBEAT_MS}").unwrap();
    }
    writeln!(text, "jia_service_url = \"http://{BENCH_ADDRESS}:5000\"").unwrap();
    if tls {
        write!(
            text,
            "\n[tls]\ncert = \"{TLS_DIR}/cert.pem\"\nkey = \"{TLS_DIR}/key.pem\"\n"
        )
        .unwrap();
    }
    write!(text, "\n[bundle]\nweb = {:?}\n", paths.web.display().to_string()).unwrap();
    // Debian's Prometheus on isucondition-1, as a deployment runs it.
    text.push_str("\n[prometheus]\n");
    for host in hosts.iter().filter(|host| host.is_cluster_host()) {
        write!(text, "\n[[host]]\nname = \"{}\"\n", host.name).unwrap();
        match &host.role {
            Role::Coordinator => writeln!(text, "role = \"coordinator\"").unwrap(),
            Role::Worker { cell } => write!(text, "role = \"worker\"\ncell = \"{cell}\"\n").unwrap(),
            Role::Bench => unreachable!("filtered"),
        }
        if let Some(id) = host.replica {
            writeln!(text, "coordinator_replica = {id}").unwrap();
        }
        write!(
            text,
            "server_name = \"{}\"\npublic_address = \"{}\"\ninternal_address = \"{}\"\n",
            host.server_name(),
            host.public_address,
            host.internal_address.expect("a cluster host has one")
        )
        .unwrap();
    }
    text
}

/// What a cluster host sees at the paths of a real host: its own state directory, its
/// rendered configuration, the certificates, and (the coordinator host) the front end the
/// render installed into its tree. Each target must exist on this machine (see
/// [`mount_points`]).
pub fn binds(host: &HostPlan, paths: &Paths) -> Vec<Bind> {
    let rendered = paths.rendered(&host.name);
    let mut binds = vec![
        Bind {
            source: paths.root(&host.name).join("var-lib"),
            target: DATA_DIR.into(),
        },
        Bind {
            source: rendered.join(relative(CONFIG_DIR)),
            target: CONFIG_DIR.into(),
        },
        Bind {
            source: paths.tls(),
            target: TLS_DIR.into(),
        },
    ];
    if host.role == Role::Coordinator {
        binds.push(Bind {
            source: rendered.join(relative(WEB_DIR)),
            target: WEB_DIR.into(),
        });
    }
    binds
}

/// Every bind target of a cluster of hosts, each once, in order.
pub fn mount_points(hosts: &[HostPlan], paths: &Paths) -> Vec<PathBuf> {
    let mut points: Vec<PathBuf> = Vec::new();
    for bind in hosts
        .iter()
        .filter(|host| host.is_cluster_host())
        .flat_map(|host| binds(host, paths))
    {
        if !points.contains(&bind.target) {
            points.push(bind.target);
        }
    }
    points
}

/// `/a/b` → `a/b`: where an absolute host path lies in a rendered tree.
fn relative(path: &str) -> &Path {
    Path::new(path.trim_start_matches('/'))
}

/// Directories to create so that `path` exists, outermost first (those missing now).
pub fn missing_directories(path: &Path, exists: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut missing: Vec<PathBuf> = path
        .ancestors()
        .take_while(|ancestor| !ancestor.as_os_str().is_empty() && !exists(ancestor))
        .map(Path::to_owned)
        .collect();
    missing.reverse();
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> Paths {
        Paths {
            state: "/r/run/hosts".into(),
            release: "/r/target/release".into(),
            web: "/r/web/dist".into(),
        }
    }

    #[test]
    fn two_and_three_workers_name_their_hosts_namespaces_and_cells() {
        let two = hosts(2, 1);
        let names: Vec<&str> = two.iter().map(|host| host.name.as_str()).collect();
        assert_eq!(names, ["isucondition-1", "isucondition-2", "isucondition-3", "bench"]);
        let netns: Vec<&str> = two.iter().map(|host| host.netns.as_str()).collect();
        assert_eq!(netns, ["isu-h1", "isu-h2", "isu-h3", "isu-hb"]);
        assert_eq!(two[0].role, Role::Coordinator);
        assert_eq!(two[1].role, Role::Worker { cell: "a".into() });
        assert_eq!(two[2].public_address, Ipv4Addr::new(10, 77, 0, 3));
        assert_eq!(two[2].internal_address, Some(Ipv4Addr::new(10, 78, 0, 3)));
        assert_eq!(two[3].internal_address, None, "the bench host has no internal address");
        let three = hosts(3, 1);
        assert_eq!(three[3].name, "isucondition-4");
        assert_eq!(three[3].role, Role::Worker { cell: "c".into() });
        assert_eq!(three[3].server_name(), "isucondition-4.t.isucon.dev");
        assert!(find(&three, "bench").is_ok());
        let error = find(&two, "isucondition-4").unwrap_err().to_string();
        assert!(error.contains("hosts: isucondition-1, isucondition-2"), "{error}");
    }

    #[test]
    fn the_bench_host_gets_a_public_port_only() {
        let ports: Vec<String> = netlab_ports(&hosts(2, 1)).iter().map(ToString::to_string).collect();
        assert_eq!(
            ports,
            [
                "isucondition-1:isu-h1:pub0:10.77.0.1/24",
                "isucondition-1:isu-h1:int0:10.78.0.1/24",
                "isucondition-2:isu-h2:pub0:10.77.0.2/24",
                "isucondition-2:isu-h2:int0:10.78.0.2/24",
                "isucondition-3:isu-h3:pub0:10.77.0.3/24",
                "isucondition-3:isu-h3:int0:10.78.0.3/24",
                "bench:isu-hb:pub0:10.77.0.100/24",
            ]
        );
        for port in &ports {
            assert!(port.parse::<PortSpec>().is_ok(), "netlab accepts {port}");
        }
    }

    #[test]
    fn every_namespace_names_the_cluster_hosts_only() {
        assert_eq!(
            etc_hosts(&hosts(2, 1)),
            "10.77.0.1 isucondition-1.t.isucon.dev\n10.77.0.2 isucondition-2.t.isucon.dev\n\
             10.77.0.3 isucondition-3.t.isucon.dev\n127.0.0.1 localhost\n"
        );
    }

    #[test]
    fn the_front_end_is_bundled_and_only_the_coordinator_host_mounts_it() {
        let hosts = hosts(2, 1);
        let paths = paths();
        let coordinator = binds(&hosts[0], &paths);
        assert!(coordinator.contains(&Bind {
            source: "/r/run/hosts/rendered/isucondition-1/usr/local/share/isucondition/web".into(),
            target: WEB_DIR.into(),
        }));
        assert!(coordinator.contains(&Bind {
            source: "/r/run/hosts/roots/isucondition-1/var-lib".into(),
            target: "/var/lib/isucondition".into(),
        }));
        let worker = binds(&hosts[1], &paths);
        assert!(worker.contains(&Bind {
            source: "/r/run/hosts/rendered/isucondition-2/etc/isucondition".into(),
            target: "/etc/isucondition".into(),
        }));
        assert!(worker.iter().all(|bind| bind.target != Path::new(WEB_DIR)));
        for bind in coordinator.iter().chain(&worker) {
            assert!(
                !bind.target.starts_with("/r"),
                "nothing is served out of the checkout: {bind}"
            );
        }
        assert_eq!(
            mount_points(&hosts, &paths),
            [DATA_DIR, CONFIG_DIR, TLS_DIR, WEB_DIR].map(PathBuf::from)
        );
    }

    #[test]
    fn the_inventory_is_one_deploy_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inventory.toml");
        for (workers, tls, coordinators) in [(2, true, 1), (3, false, 1), (2, true, 3), (3, false, 3)] {
            let text = inventory(&hosts(workers, coordinators), tls, &paths());
            assert!(!text.contains("bench"), "the bench host is not deployed to");
            assert!(text.contains("[bundle]\nweb = \"/r/web/dist\""), "{text}");
            assert!(text.contains("\n[prometheus]\n"), "{text}");
            std::fs::write(&path, &text).unwrap();
            let loaded = deploy::inventory::Inventory::load(&path).unwrap();
            assert_eq!(loaded.workers().count(), workers);
            assert_eq!(loaded.tls.is_some(), tls);
            assert_eq!(loaded.web_dir, Path::new(WEB_DIR));
            assert_eq!(loaded.public_url("x"), if tls { "https://x" } else { "http://x" });
            let replicas: Vec<&str> = loaded.replicas().iter().map(|host| host.name.as_str()).collect();
            if coordinators == 3 {
                assert_eq!(replicas, ["isucondition-1", "isucondition-2", "isucondition-3"]);
            } else {
                assert!(replicas.is_empty());
            }
        }
    }

    #[test]
    fn three_coordinators_are_replicas_beside_nginx_and_the_first_two_workers() {
        let three = hosts(3, 3);
        let replicas: Vec<Option<u64>> = three.iter().map(|host| host.replica).collect();
        assert_eq!(replicas, [Some(1), Some(2), Some(3), None, None]);
        let urls: Vec<Option<String>> = three.iter().map(HostPlan::coordinator_url).collect();
        assert_eq!(
            urls,
            [
                Some("http://10.78.0.1:3000".to_owned()),
                Some("http://10.78.0.2:3001".to_owned()),
                Some("http://10.78.0.3:3001".to_owned()),
                None,
                None
            ]
        );
        assert_eq!(three[1].coordinator_node(), "coordinator-2");
        let one = hosts(2, 1);
        assert_eq!(one[0].coordinator_url().as_deref(), Some("http://10.78.0.1:3000"));
        assert_eq!(one[0].coordinator_node(), "coordinator");
        assert_eq!(one[1].coordinator_url(), None);
    }

    #[test]
    fn missing_directories_are_listed_outermost_first() {
        let exists = |path: &Path| path == Path::new("/") || path == Path::new("/usr");
        assert_eq!(
            missing_directories(Path::new("/usr/local/share"), exists),
            [PathBuf::from("/usr/local"), PathBuf::from("/usr/local/share")]
        );
        assert!(missing_directories(Path::new("/usr"), exists).is_empty());
    }
}
