//! Rendering: the inventory → every host's files, as they will lie on the host.
//!
//! `OUT/<host>/` mirrors the host's file system (`etc/systemd/system/*.service`,
//! `etc/isucondition/*.env` with mode 600, `etc/isucondition/nginx.conf`, and the bundled
//! binaries and front end when the inventory names them, the front end with its `.gz` files), plus `OUT/<host>/.isu-deploy/`
//! (which units to enable and what to restart when a file changes) for `--apply`.
//!
//! The services run with systemd's sandboxing: the nodes under `DynamicUser=` with a
//! `StateDirectory=` (their durable logs), read-only system and home, no devices, no new
//! privileges; a worker gets only `CAP_NET_BIND_SERVICE` (its device server binds 443) and
//! reads the TLS key through `LoadCredential=`, so the key file can stay root-only. nginx
//! runs as its own unit (`isu-nginx`, not the distribution's `nginx.service`): the
//! coordinator rewrites the router's map file in its state directory and hands each new
//! version to nginx's loopback control server (no reload; nginx starts from the file).
//!
//! With coordinator replicas (`coordinator_replica` on hosts), each replica host gets the same
//! coordinator unit with a state directory of its own (`coordinator-<id>`: its raft log) and
//! every member in its flags; every worker pushes to every replica; nginx balances over all of
//! them. The leader, wherever it runs, hands nginx each new map on nginx's control server,
//! which then listens on the coordinator host's internal address; nginx starts from a map file
//! of its own, seeded with the default map (the leader hands it the current one within a
//! second, and again whenever nginx restarts).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use shared::wal::FsyncPolicy;

use crate::inventory::{Host, Inventory, Role};
use crate::node_args::{self, CellEndpoint, CoordinatorArgs, ReplicaGroup, Setting, WorkerArgs};

/// One rendered file.
#[derive(Debug, Clone)]
pub struct File {
    pub contents: Vec<u8>,
    pub mode: u32,
}

/// Every file of one host, by path relative to its root (and to `OUT/<host>/`).
#[derive(Debug, Default)]
pub struct HostFiles {
    pub files: BTreeMap<PathBuf, File>,
}

impl HostFiles {
    fn text(&mut self, path: impl Into<PathBuf>, mode: u32, text: String) {
        self.files.insert(
            path.into(),
            File {
                contents: text.into_bytes(),
                mode,
            },
        );
    }
}

/// What rendering needs besides the inventory.
pub struct Context<'a> {
    /// The inventory's directory: relative paths in it are relative to this.
    pub base: &'a Path,
    /// The cluster secret.
    pub secret: &'a str,
    /// The operator token (the console's sign-in), kept apart from the secret.
    pub ops_token: &'a str,
    /// `nginx/nginx.conf.template` of this checkout.
    pub nginx_template: &'a Path,
}

/// The marker line every rendered text file starts with.
pub const HEADER: &str = "# Rendered by scripts/deploy from the inventory: edit the inventory, not this file.";

/// Systemd's sandboxing shared by both nodes.
const NODE_HARDENING: &str = "\
DynamicUser=yes
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
LockPersonality=yes
SystemCallArchitectures=native
UMask=0027
LimitNOFILE=65536
";

/// What differs between the two nodes' units (and Prometheus's, sandboxed the same way).
struct NodeUnit<'a> {
    description: &'a str,
    /// `EnvironmentFile=`, or none.
    environment_file: Option<&'a str>,
    exec_start: String,
    state: String,
    /// `LoadCredential=` lines, or nothing.
    credentials: String,
    /// `CapabilityBoundingSet=` (and `AmbientCapabilities=`) lines.
    capabilities: &'a str,
}

/// A node's unit: restarted for ever, its durable log in its state directory, sandboxed.
fn node_unit(unit: NodeUnit) -> String {
    let NodeUnit {
        description,
        environment_file,
        exec_start,
        state,
        credentials,
        capabilities,
    } = unit;
    let environment_file = environment_file.map_or_else(String::new, |file| format!("EnvironmentFile={file}\n"));
    format!(
        "{HEADER}
[Unit]
Description={description}
# Restart=always for good: never stop retrying after a burst of failed starts.
StartLimitIntervalSec=0
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
{environment_file}ExecStart={exec_start}
Restart=always
RestartSec=1
StateDirectory={state}
{credentials}{NODE_HARDENING}{capabilities}
[Install]
WantedBy=multi-user.target
"
    )
}

/// Renders every host.
pub fn render(inventory: &Inventory, context: &Context) -> anyhow::Result<BTreeMap<String, HostFiles>> {
    let mut hosts = BTreeMap::new();
    for host in &inventory.hosts {
        let files = match host.role {
            Role::Coordinator => coordinator_host(inventory, host, context)?,
            Role::Worker => worker_host(inventory, host, context)?,
        };
        hosts.insert(host.name.clone(), files);
    }
    Ok(hosts)
}

fn state_directory(inventory: &Inventory, node: &str) -> String {
    let relative = inventory
        .data_dir
        .strip_prefix("/var/lib")
        .expect("checked: under /var/lib");
    format!("{}/{node}", relative.display())
}

/// The router's map file nginx starts from: in the coordinator's state directory (it
/// rewrites the file; nginx takes each new version on its control server); with replicas,
/// nginx's own copy (the leader may run on another host).
fn nginx_placement_file(inventory: &Inventory) -> PathBuf {
    if inventory.replicas().is_empty() {
        inventory.data_dir.join("coordinator/placement.map")
    } else {
        nginx_run_dir(inventory).join("placement.map")
    }
}

/// The map file a coordinator writes (a replica while it leads), in its state directory.
fn coordinator_placement_file(inventory: &Inventory, host: &Host) -> PathBuf {
    match host.coordinator_replica {
        None => inventory.data_dir.join("coordinator/placement.map"),
        Some(id) => inventory.data_dir.join(replica_node(id)).join("placement.map"),
    }
}

/// Where nginx's control server listens on the coordinator host (the coordinator hands it
/// each new placement map there): loopback, or with replicas (a leader on another host) the
/// coordinator host's internal address.
fn router_control(inventory: &Inventory) -> String {
    if inventory.replicas().is_empty() {
        ROUTER_CONTROL.to_owned()
    } else {
        socket(
            inventory.coordinator().internal_address,
            crate::inventory::ROUTER_CONTROL_PORT,
        )
    }
}

/// nginx's control server with one coordinator.
const ROUTER_CONTROL: &str = "127.0.0.1:3099";

/// With replicas, the map nginx starts from the first time (`PlacementMap::new` over the
/// cells, version 1), copied to nginx's own map file when it has none.
const DEFAULT_MAP_FILE: &str = "/etc/isucondition/placement.default.map";

/// The cluster secret for nginx's control server (read by nginx's master, as root).
const ROUTER_SECRET_FILE: &str = "/etc/isucondition/router.secret";

fn nginx_run_dir(inventory: &Inventory) -> PathBuf {
    inventory.data_dir.join("nginx")
}

fn internal(inventory: &Inventory, host: &Host) -> String {
    socket(host.internal_address, inventory.node_port)
}

fn socket(address: std::net::IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(address, port).to_string()
}

fn env_file(lines: &[(&str, String)]) -> String {
    let mut text = format!("{HEADER}\n# Holds the cluster secret: mode 600, root only.\n");
    for (key, value) in lines {
        if value.contains(' ') {
            writeln!(text, "{key}=\"{value}\"").unwrap();
        } else {
            writeln!(text, "{key}={value}").unwrap();
        }
    }
    text
}

fn coordinator_host(inventory: &Inventory, host: &Host, context: &Context) -> anyhow::Result<HostFiles> {
    let mut files = HostFiles::default();
    coordinator_node(inventory, host, context, &mut files);

    let nginx_conf = render_nginx(inventory, host, context)?;
    files.text("etc/isucondition/nginx.conf", 0o644, nginx_conf);
    files.text(
        ROUTER_SECRET_FILE.trim_start_matches('/'),
        0o600,
        format!("{}\n", context.secret),
    );
    let run_dir = nginx_run_dir(inventory);
    let placement = nginx_placement_file(inventory);
    let nginx = inventory.nginx_bin.display();
    let nginx_args = format!(
        "-p {run}/ -c /etc/isucondition/nginx.conf -e {run}/nginx-error.log",
        run = run_dir.display()
    );
    let map_ready = if inventory.replicas().is_empty() {
        format!(
            "ExecStartPre=/bin/sh -c 'for i in $$(seq 300); do test -s {placement} && exit 0; sleep 0.1; done; echo no router map at {placement}, is isu-coordinator running >&2; exit 1'",
            placement = placement.display()
        )
    } else {
        // The leader may run on another host: nginx starts from its own copy, the default map
        // at first (the leader hands it the current map on the control server).
        files.text(
            DEFAULT_MAP_FILE.trim_start_matches('/'),
            0o644,
            crate::nginx::default_placement(&nginx_cells(inventory))?,
        );
        format!(
            "ExecStartPre=/bin/sh -c 'test -s {placement} || cp {DEFAULT_MAP_FILE} {placement}'",
            placement = placement.display()
        )
    };
    files.text(
        "etc/systemd/system/isu-nginx.service",
        0o644,
        format!(
            "{HEADER}
[Unit]
Description=ISUCONDITION public site and router over the placement map (nginx)
# Restart=always for good: never stop retrying after a burst of failed starts.
StartLimitIntervalSec=0
After=network-online.target isu-coordinator.service
Wants=network-online.target isu-coordinator.service

[Service]
Type=simple
StateDirectory={state}
ExecStartPre=/bin/mkdir -p {run}/tmp
{map_ready}
ExecStartPre={nginx} -t -q {nginx_args}
ExecStart={nginx} {nginx_args}
ExecReload=/bin/kill -HUP $MAINPID
Restart=always
RestartSec=1
LimitNOFILE=65536
ProtectSystem=full
ProtectHome=yes
PrivateTmp=yes

[Install]
WantedBy=multi-user.target
",
            state = state_directory(inventory, "nginx"),
            run = run_dir.display(),
        ),
    );
    bundle(inventory, context, &mut files, "coordinator", true)?;
    let mut units = vec!["isu-coordinator.service", "isu-nginx.service"];
    let mut actions = coordinator_actions(inventory);
    if let Some(settings) = &inventory.prometheus {
        actions.extend(prometheus_files(inventory, settings, context, &mut files)?);
        units.push("isu-prometheus.service");
    }
    actions.extend([
        ("etc/isucondition/nginx.conf".to_owned(), "reload isu-nginx.service"),
        (
            ROUTER_SECRET_FILE.trim_start_matches('/').to_owned(),
            "reload isu-nginx.service",
        ),
        (
            "etc/systemd/system/isu-nginx.service".to_owned(),
            "restart isu-nginx.service",
        ),
    ]);
    plan(&mut files, inventory, host, &units, &actions);
    Ok(files)
}

/// The coordinator's environment file and unit on `host`: the one coordinator, or replica N
/// (its own state directory, every member in its flags; beside a worker, no front end).
fn coordinator_node(inventory: &Inventory, host: &Host, context: &Context, files: &mut HostFiles) {
    let workers = inventory
        .workers()
        .map(|worker| CellEndpoint {
            cell: worker.cell.clone().expect("checked"),
            url: format!("http://{}", internal(inventory, worker)),
            device_url: inventory.public_url(&worker.server_name),
        })
        .collect();
    let group = host.coordinator_replica.map(|id| ReplicaGroup {
        id,
        members: inventory
            .replicas()
            .iter()
            .map(|member| {
                (
                    member.coordinator_replica.expect("a replica"),
                    format!("http://{}", inventory.coordinator_listen(member)),
                )
            })
            .collect(),
    });
    let (description, state) = match &group {
        None => (
            "ISUCONDITION coordinator (auth, registration, latest conditions, placement map)".to_owned(),
            state_directory(inventory, "coordinator"),
        ),
        Some(group) => (
            format!(
                "ISUCONDITION coordinator replica {} of {} (auth, registration, latest conditions, placement map)",
                group.id,
                group.members.len()
            ),
            state_directory(inventory, &replica_node(group.id)),
        ),
    };
    let args = CoordinatorArgs {
        listen: inventory.coordinator_listen(host).to_string(),
        workers,
        cluster_secret: Some(context.secret.to_owned()),
        fsync: Some(fsync(inventory)),
        // nginx serves the front end; the coordinator's own copy is on nginx's host only.
        static_dir: (host.role == Role::Coordinator).then(|| inventory.web_dir.clone()),
        router_map: Some(coordinator_placement_file(inventory, host)),
        router_url: Some(format!("http://{}", router_control(inventory))),
        no_color: true,
        jia_service_url: inventory.jia_service_url.clone(),
        raft_heartbeat_ms: inventory.raft_heartbeat_ms.filter(|_| group.is_some()),
        group,
        data_dir: Some(PathBuf::from(STATE_DIRECTORY)),
        // Read through `LoadCredential=`: the file stays root-only.
        ops_token_file: Some(PathBuf::from("${CREDENTIALS_DIRECTORY}/ops-token")),
        prometheus_url: inventory
            .prometheus
            .as_ref()
            .map(|_| format!("http://{}{PROMETHEUS_PREFIX}", router_control(inventory))),
        ..CoordinatorArgs::default()
    };
    let (flags, env) = for_systemd(args.settings());
    files.text("etc/isucondition/coordinator.env", 0o600, env_file(&env));
    files.text(
        OPS_TOKEN_FILE.trim_start_matches('/'),
        0o600,
        format!("{}\n", context.ops_token),
    );
    files.text(
        "etc/systemd/system/isu-coordinator.service",
        0o644,
        node_unit(NodeUnit {
            description: &description,
            environment_file: Some("/etc/isucondition/coordinator.env"),
            exec_start: format!("{}/coordinator {flags}", inventory.bin_dir.display()),
            state,
            credentials: format!("LoadCredential=ops-token:{OPS_TOKEN_FILE}\n"),
            capabilities: "CapabilityBoundingSet=\n",
        }),
    );
}

/// The operator token on every host running a coordinator (root only; the unit reads it
/// through `LoadCredential=`).
const OPS_TOKEN_FILE: &str = "/etc/isucondition/ops-token";

/// Where nginx's control server passes the coordinators' queries on to Prometheus (after the
/// cluster secret is checked): Prometheus itself listens on the coordinator host's loopback.
const PROMETHEUS_PREFIX: &str = "/prometheus";

/// Prometheus's configuration, its copy of the cluster secret and the rules, on the
/// coordinator host.
const PROMETHEUS_DIR: &str = "etc/isucondition/prometheus";

/// `[prometheus]`: the `isu-prometheus` unit on the coordinator host and its files. It
/// scrapes every node (each replica, each worker) with the cluster secret, evaluates the
/// project's rules, keeps its data in its state directory and listens on loopback only. The
/// configuration and the secret reach it through `LoadCredential=` (the secret stays root
/// only), so the configuration names the secret by a path relative to its own directory.
fn prometheus_files(
    inventory: &Inventory,
    settings: &crate::inventory::Prometheus,
    context: &Context,
    files: &mut HostFiles,
) -> anyhow::Result<Vec<(String, &'static str)>> {
    let rules = Path::new("/").join(PROMETHEUS_DIR).join("rules");
    let mut targets: Vec<crate::prometheus::Target> = match inventory.replicas().as_slice() {
        [] => vec![crate::prometheus::Target {
            address: inventory.coordinator_listen(inventory.coordinator()).to_string(),
            node: "coordinator".to_owned(),
            cell: "coordinator".to_owned(),
        }],
        replicas => replicas
            .iter()
            .map(|host| crate::prometheus::Target {
                address: inventory.coordinator_listen(host).to_string(),
                node: replica_node(host.coordinator_replica.expect("a replica")),
                cell: "coordinator".to_owned(),
            })
            .collect(),
    };
    targets.extend(inventory.workers().map(|worker| crate::prometheus::Target {
        address: internal(inventory, worker),
        node: worker.node_name(),
        cell: worker.cell.clone().expect("checked"),
    }));
    let config = crate::prometheus::configuration(HEADER, &targets, Path::new("cluster-secret"), &rules);
    let dir = Path::new(PROMETHEUS_DIR);
    files.text(dir.join("prometheus.yml"), 0o644, config);
    files.text(dir.join("secret"), 0o600, format!("{}\n", context.secret));
    let mut actions = Vec::new();
    let rules_dir = crate::prometheus::rules_dir();
    let mut entries: Vec<_> = std::fs::read_dir(&rules_dir)
        .with_context(|| format!("reading {}", rules_dir.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let path = entry.path();
        if path.extension().is_some_and(|extension| extension == "yml") {
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let target = dir.join("rules").join(entry.file_name());
            actions.push((target.display().to_string(), "restart isu-prometheus.service"));
            files.text(target, 0o644, text);
        }
    }
    let unit = "etc/systemd/system/isu-prometheus.service";
    let dir = dir.display();
    files.text(
        unit,
        0o644,
        node_unit(NodeUnit {
            description: "ISUCONDITION Prometheus (every node scraped with the cluster secret, the rules evaluated)",
            environment_file: None,
            exec_start: format!(
                "{bin} --config.file=${{CREDENTIALS_DIRECTORY}}/prometheus.yml --storage.tsdb.path=${{STATE_DIRECTORY}} --storage.tsdb.retention.time={retention} --web.listen-address=127.0.0.1:{port} --log.level=warn",
                bin = settings.bin.display(),
                retention = settings.retention,
                port = settings.port,
            ),
            state: state_directory(inventory, "prometheus"),
            credentials: format!(
                "LoadCredential=prometheus.yml:/{dir}/prometheus.yml\nLoadCredential=cluster-secret:/{dir}/secret\n"
            ),
            capabilities: "CapabilityBoundingSet=\n",
        }),
    );
    for path in [
        format!("{PROMETHEUS_DIR}/prometheus.yml"),
        format!("{PROMETHEUS_DIR}/secret"),
        unit.to_owned(),
    ] {
        actions.push((path, "restart isu-prometheus.service"));
    }
    Ok(actions)
}

/// A node's durable log: its unit's state directory, which systemd names on `ExecStart=`.
const STATE_DIRECTORY: &str = "${STATE_DIRECTORY}";

/// The inventory's fsync policy (checked: `Inventory::check` parses it the same way).
fn fsync(inventory: &Inventory) -> FsyncPolicy {
    inventory.fsync.parse().expect("checked: Inventory::check")
}

/// A node's settings as its unit takes them: those naming a systemd variable
/// (`${STATE_DIRECTORY}`, `${CREDENTIALS_DIRECTORY}`), which systemd expands on `ExecStart=`
/// and not in an environment file, as flags for `ExecStart=`; the rest for its environment file.
fn for_systemd(settings: Vec<Setting>) -> (String, Vec<(&'static str, String)>) {
    let (flags, variables): (Vec<Setting>, Vec<Setting>) = settings
        .into_iter()
        .partition(|setting| setting.values.iter().any(|value| value.contains("${")));
    (
        node_args::command_line(&flags).join(" "),
        node_args::environment(&variables),
    )
}

/// What a change of the coordinator's files needs.
fn coordinator_actions(inventory: &Inventory) -> Vec<(String, &'static str)> {
    vec![
        (
            "etc/isucondition/coordinator.env".to_owned(),
            "restart isu-coordinator.service",
        ),
        (
            "etc/systemd/system/isu-coordinator.service".to_owned(),
            "restart isu-coordinator.service",
        ),
        (bin_path(inventory, "coordinator"), "restart isu-coordinator.service"),
        (
            OPS_TOKEN_FILE.trim_start_matches('/').to_owned(),
            "restart isu-coordinator.service",
        ),
    ]
}

/// Replica N's node name (its state directory): `coordinator-N`.
pub fn replica_node(id: u64) -> String {
    format!("coordinator-{id}")
}

fn worker_host(inventory: &Inventory, host: &Host, context: &Context) -> anyhow::Result<HostFiles> {
    let mut files = HostFiles::default();
    let credentials = match &inventory.tls {
        Some(tls) => format!(
            "LoadCredential=tls-cert:{}\nLoadCredential=tls-key:{}\n",
            tls.cert.display(),
            tls.key.display()
        ),
        None => String::new(),
    };
    let args = WorkerArgs {
        cell: host.cell.clone().expect("checked"),
        listen: internal(inventory, host),
        device_listen: Some(socket(host.public_address, inventory.public_port())),
        // Every replica gets the latest conditions.
        coordinators: inventory
            .coordinator_listeners()
            .iter()
            .map(|listen| format!("http://{listen}"))
            .collect(),
        cluster_secret: Some(context.secret.to_owned()),
        fsync: Some(fsync(inventory)),
        no_color: true,
        data_dir: Some(PathBuf::from(STATE_DIRECTORY)),
        // The key stays root-only: systemd hands the unit a copy (`LoadCredential=`).
        device_tls: inventory.tls.as_ref().map(|_| {
            (
                PathBuf::from("${CREDENTIALS_DIRECTORY}/tls-cert"),
                PathBuf::from("${CREDENTIALS_DIRECTORY}/tls-key"),
            )
        }),
        ..WorkerArgs::default()
    };
    let (flags, env) = for_systemd(args.settings());
    files.text("etc/isucondition/worker.env", 0o600, env_file(&env));
    let capabilities = if inventory.public_port() < 1024 {
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE\nAmbientCapabilities=CAP_NET_BIND_SERVICE\n"
    } else {
        "CapabilityBoundingSet=\n"
    };
    files.text(
        "etc/systemd/system/isu-worker.service",
        0o644,
        node_unit(NodeUnit {
            description: &format!(
                "ISUCONDITION worker of cell {} (condition history, device posts)",
                host.cell.as_deref().expect("checked")
            ),
            environment_file: Some("/etc/isucondition/worker.env"),
            exec_start: format!("{}/worker {flags}", inventory.bin_dir.display()),
            state: state_directory(inventory, &host.node_name()),
            credentials,
            capabilities,
        }),
    );
    bundle(inventory, context, &mut files, "worker", false)?;
    let mut units = vec!["isu-worker.service"];
    let mut actions = vec![
        ("etc/isucondition/worker.env".to_owned(), "restart isu-worker.service"),
        (
            "etc/systemd/system/isu-worker.service".to_owned(),
            "restart isu-worker.service",
        ),
        (bin_path(inventory, "worker"), "restart isu-worker.service"),
    ];
    if host.coordinator_replica.is_some() {
        coordinator_node(inventory, host, context, &mut files);
        bundle(inventory, context, &mut files, "coordinator", false)?;
        units.push("isu-coordinator.service");
        actions.extend(coordinator_actions(inventory));
    }
    plan(&mut files, inventory, host, &units, &actions);
    Ok(files)
}

fn bin_path(inventory: &Inventory, binary: &str) -> String {
    let relative = inventory.bin_dir.strip_prefix("/").expect("checked: absolute");
    relative.join(binary).display().to_string()
}

/// Adds the bundled binary (and the front end on the coordinator host) when the inventory
/// names where they are built.
fn bundle(
    inventory: &Inventory,
    context: &Context,
    files: &mut HostFiles,
    binary: &str,
    with_web: bool,
) -> anyhow::Result<()> {
    if let Some(dir) = &inventory.bundle.binaries {
        let path = context.base.join(dir).join(binary);
        let contents = std::fs::read(&path).with_context(|| format!("bundle.binaries: reading {}", path.display()))?;
        files
            .files
            .insert(bin_path(inventory, binary).into(), File { contents, mode: 0o755 });
    }
    if let (true, Some(dir)) = (with_web, &inventory.bundle.web) {
        let root = context.base.join(dir);
        if !root.join("index.html").is_file() {
            bail!(
                "bundle.web: {} has no index.html (build it: scripts/web build)",
                root.display()
            );
        }
        let web = inventory
            .web_dir
            .strip_prefix("/")
            .expect("checked: absolute")
            .to_owned();
        add_tree(&root, &root, &web, files)?;
        add_precompressed(&root, &web, files)?;
    }
    Ok(())
}

/// The `.gz` beside each compressible file of the bundled front end (nginx sends them with
/// `gzip_static`): made here for a front end built without them, a stale one replaced or left
/// out (`crate::assets`). The folder itself is only read.
fn add_precompressed(root: &Path, target: &Path, files: &mut HostFiles) -> anyhow::Result<()> {
    for planned in crate::assets::plan(root)? {
        let path = target.join(planned.companion_path());
        match planned.companion {
            crate::assets::Companion::Fresh => {}
            crate::assets::Companion::Write(contents) => {
                files.files.insert(path, File { contents, mode: 0o644 });
            }
            crate::assets::Companion::NotWorthIt { .. } => {
                files.files.remove(&path);
            }
        }
    }
    Ok(())
}

fn add_tree(root: &Path, dir: &Path, target: &Path, files: &mut HostFiles) -> anyhow::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            add_tree(root, &path, target, files)?;
        } else {
            let relative = path.strip_prefix(root).expect("under root");
            let contents = std::fs::read(&path)?;
            files
                .files
                .insert(target.join(relative), File { contents, mode: 0o644 });
        }
    }
    Ok(())
}

/// What the apply script needs besides the files, in `.isu-deploy/`: `modes` (each file's
/// mode, as rendered: an extraction under another user's umask cannot change it; written
/// first, so it lists the host's files only), `units` (enabled and started), `actions`
/// (`PATH ACTION UNIT` per file whose change needs one), `replaces` (units to stop and
/// disable first), `host` (its name in messages) and the script itself.
fn plan(files: &mut HostFiles, inventory: &Inventory, host: &Host, units: &[&str], actions: &[(String, &str)]) {
    let modes = lines(
        files
            .files
            .iter()
            .map(|(path, file)| format!("{} {:o}", path.display(), file.mode)),
    );
    files.text(".isu-deploy/modes", 0o644, modes);
    files.text(".isu-deploy/units", 0o644, lines(units));
    let actions = lines(actions.iter().map(|(path, action)| format!("{path} {action}")));
    files.text(".isu-deploy/actions", 0o644, actions);
    files.text(".isu-deploy/replaces", 0o644, lines(&inventory.replaces));
    files.text(".isu-deploy/host", 0o644, format!("{}\n", host.name));
    files.text(".isu-deploy/apply.sh", 0o644, crate::apply::APPLY_SCRIPT.to_owned());
}

/// One item per line.
fn lines(items: impl IntoIterator<Item = impl std::fmt::Display>) -> String {
    items.into_iter().map(|item| format!("{item}\n")).collect()
}

fn nginx_cells(inventory: &Inventory) -> Vec<crate::nginx::CellSpec> {
    inventory
        .workers()
        .map(|worker| crate::nginx::CellSpec {
            name: worker.cell.clone().expect("checked"),
            node: internal(inventory, worker),
            device_listen: socket(worker.public_address, inventory.public_port()),
            device_server_name: Some(worker.server_name.clone()),
        })
        .collect()
}

fn render_nginx(inventory: &Inventory, host: &Host, context: &Context) -> anyhow::Result<String> {
    let cells = nginx_cells(inventory);
    let options = crate::nginx::Options {
        run_dir: nginx_run_dir(inventory),
        template: context.nginx_template.to_owned(),
        out: None,
        static_dir: inventory.web_dir.clone(),
        public_listen: socket(host.public_address, inventory.public_port()),
        public_server_name: host.server_name.clone(),
        coordinators: inventory
            .coordinator_listeners()
            .iter()
            .map(ToString::to_string)
            .collect(),
        cells,
        placement: Some(nginx_placement_file(inventory)),
        secret_file: PathBuf::from(ROUTER_SECRET_FILE),
        router_control: router_control(inventory),
        reset_placement: false,
        worker_processes: "auto".to_owned(),
        device_servers: false,
        access_log: false,
        tls: inventory.tls.as_ref().map(|tls| crate::nginx::Tls {
            cert: tls.cert.clone(),
            key: tls.key.clone(),
        }),
        check: false,
        nginx_bin: inventory.nginx_bin.clone(),
        prometheus: inventory
            .prometheus
            .as_ref()
            .map(|settings| crate::nginx::PrometheusProxy {
                prefix: PROMETHEUS_PREFIX.to_owned(),
                listen: format!("127.0.0.1:{}", settings.port),
            }),
    };
    let text = crate::nginx::render_for_host(&options, &inventory.nginx_user)
        .with_context(|| format!("rendering nginx.conf for host {}", host.name))?;
    Ok(format!("{HEADER}\n{text}"))
}

/// Writes every host's files into `out/<host>/`, replacing what a previous render left
/// there, and returns how many files each host has.
pub fn write(out: &Path, hosts: &BTreeMap<String, HostFiles>) -> anyhow::Result<Vec<(String, usize)>> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut counts = Vec::new();
    for (name, files) in hosts {
        let dir = out.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        for (path, file) in &files.files {
            let target = dir.join(path);
            std::fs::create_dir_all(target.parent().expect("a file has a parent"))?;
            // Created with its mode: an environment file is never readable by others, even briefly.
            let mut handle = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(file.mode)
                .open(&target)
                .with_context(|| format!("creating {}", target.display()))?;
            handle
                .write_all(&file.contents)
                .with_context(|| format!("writing {}", target.display()))?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(file.mode))?;
        }
        counts.push((name.clone(), files.files.len()));
    }
    Ok(counts)
}
