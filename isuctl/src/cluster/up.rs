//! `cluster up`: checks, build, the front end precompressed, the nginx rendering, then the
//! processes in order — workers, the coordinator (healthy before nginx starts), nginx, the
//! JIA simulator — and the wait until every one answers; on failure the log tails and a stop
//! of what was started.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Parser as _;
use deploy::node_args::{CellEndpoint, CoordinatorArgs, ReplicaGroup, WorkerArgs};
use deploy::supervise::Spawn;

use super::{cluster_file, log, started, Cluster, Devices, Worker};
use crate::exit::Exit;
use crate::local::{self, ClusterFile};
use crate::output::{self, Format};
use crate::{http, render};
use deploy::external;

/// The binaries `up` runs.
struct Binaries {
    coordinator: PathBuf,
    worker: PathBuf,
    bench: PathBuf,
}

/// What `up` starts with, resolved (absolute paths, the official files).
struct Inputs {
    dataset: Option<String>,
    jwt_public_key: Option<PathBuf>,
    default_icon: Option<PathBuf>,
    static_dir: PathBuf,
    jia_service_url: Option<String>,
    official_dir: Option<PathBuf>,
}

pub(super) fn up(cluster: &Cluster, format: Format) -> anyhow::Result<()> {
    let running = cluster.running_names();
    if !running.is_empty() {
        bail!(
            "a cluster is already running from {} ({}); use 'cluster down' or 'cluster restart'",
            cluster.run_dir.display(),
            running.join(" ")
        );
    }
    for name in Cluster::all_names() {
        cluster.records.forget(&name);
        // This 'up' records the command line of each node it starts: one left by an earlier,
        // larger cluster would make 'status' report that node as stopped (and fail).
        let _ = std::fs::remove_file(cluster.records.command_file(&name));
    }
    ensure_nginx()?;
    if cluster.options.prometheus {
        deploy::prometheus::ensure_installed()?;
    }
    let inputs = inputs(cluster)?;
    let binaries = build(cluster)?;
    let workers = cluster.workers();

    let mut addresses: Vec<String> = cluster.coordinators().into_iter().map(|(_, listen)| listen).collect();
    addresses.push(cluster.public_listen());
    addresses.extend(
        workers
            .iter()
            .flat_map(|worker| [worker.listen.clone(), worker.device_listen.clone()]),
    );
    if cluster.options.jia {
        addresses.push(cluster.jia_listen());
    }
    if let Some(address) = addresses.iter().find(|address| http::is_listening(address)) {
        bail!("{address} is already in use by a process this tool did not start");
    }

    std::fs::create_dir_all(&cluster.run_dir).with_context(|| format!("creating {}", cluster.run_dir.display()))?;
    let run_dir = std::fs::canonicalize(&cluster.run_dir)?;
    let secret = write_secret(&run_dir)?;
    write_ops_token(&run_dir)?;
    let served_static_dir = precompressed_static_dir(&inputs.static_dir, &run_dir)?;
    let nginx_conf =
        render_nginx(cluster, &run_dir, &served_static_dir, &workers).context("rendering nginx.conf failed")?;

    if let Err(error) = start_all(cluster, &run_dir, &inputs, &binaries, &workers, &secret, &nginx_conf) {
        return Err(fail(cluster, error));
    }

    // Through nginx to the coordinator: an end-to-end check, only advisory.
    let trend = http::status(&format!("{}/api/trend", cluster.public_url()));
    if trend != 200 {
        log(format!(
            "warning: GET {}/api/trend answered {trend:03}",
            cluster.public_url()
        ));
    }
    let mut file = cluster_file(cluster, &workers, cluster.options.jia);
    file.ops_token_file = Some(run_dir.join(OPS_TOKEN_FILE));
    write_cluster_files(&run_dir, &file, &workers)?;
    if let Some(jia) = &file.jia_url {
        log(format!("JIA simulator at {jia} (sign in at {jia}/)"));
    }
    log(format!(
        "operator console at {}/ops (its token is in {}/{OPS_TOKEN_FILE})",
        file.public_url,
        run_dir.display()
    ));
    log(format!(
        "cluster is up: public {}, coordinator {}, workers {}, device servers ({}) {}; logs in {}",
        file.public_url,
        file.coordinator_url,
        workers
            .iter()
            .map(|worker| worker.listen.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        match cluster.options.devices {
            Devices::Direct => "direct",
            Devices::Nginx => "nginx",
        },
        workers
            .iter()
            .map(|worker| worker.device_url.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        run_dir.display()
    ));
    output::emit(format, &file, |file| file.public_url.clone())
}

/// A start-up that failed: the log tails, then a stop of what was started (unless
/// --keep-on-failure). The reason is already on stderr: exit 1 with nothing more.
fn fail(cluster: &Cluster, error: anyhow::Error) -> anyhow::Error {
    log(format!("up failed: {error:#}"));
    show_log_tails(cluster);
    if cluster.options.keep_on_failure {
        log("processes left running (--keep-on-failure); stop them with 'cluster down'");
    } else {
        let _ = cluster.stop_all();
    }
    Exit::quiet(1).into()
}

fn show_log_tails(cluster: &Cluster) {
    let mut files = Vec::new();
    for worker in cluster.workers() {
        files.push(cluster.records.log_file(&worker.name));
    }
    for (name, _) in cluster.coordinators() {
        files.push(cluster.records.log_file(&name));
    }
    files.push(cluster.records.log_file("nginx"));
    files.push(cluster.run_dir.join("nginx-error.log"));
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        if text.is_empty() {
            continue;
        }
        eprintln!("----- tail of {}", file.display());
        let lines: Vec<&str> = text.lines().collect();
        for line in &lines[lines.len().saturating_sub(40)..] {
            eprintln!("{line}");
        }
    }
}

/// nginx and its Lua module (the router, `nginx/router.lua`): installed with apt-get when
/// missing (as root, or through sudo).
fn ensure_nginx() -> anyhow::Result<()> {
    const PACKAGES: [&str; 2] = ["nginx-light", "libnginx-mod-http-lua"];
    let nginx = deploy::nginx::default_nginx_bin();
    let has_nginx = nginx.is_file();
    if has_nginx && deploy::nginx::has_lua_module(&nginx) {
        return Ok(());
    }
    let missing = if has_nginx { "nginx's Lua module" } else { "nginx" };
    log(format!("{missing} missing: installing {}", PACKAGES.join(" ")));
    external::install_packages(&PACKAGES).with_context(|| format!("{missing} is missing"))
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir().map_or_else(|_| path.to_owned(), |dir| dir.join(path))
    }
}

fn inputs(cluster: &Cluster) -> anyhow::Result<Inputs> {
    let options = &cluster.options;
    let mut dataset = options.dataset.clone().filter(|dataset| !dataset.is_empty());
    let mut jwt_public_key = options.jwt_public_key.clone();
    let mut default_icon = options.default_icon.clone();
    let mut official_dir = None;
    if options.official {
        let dir = local::repo_root().join("../shared/data/isucon11-qualify");
        for file in ["1_InitData.sql", "ec256-public.pem", "NoImage.jpg"] {
            if !dir.join(file).is_file() {
                bail!("--official: missing {}", dir.join(file).display());
            }
        }
        let dir = std::fs::canonicalize(dir)?;
        dataset = Some(dir.join("1_InitData.sql").display().to_string());
        jwt_public_key = Some(dir.join("ec256-public.pem"));
        default_icon = Some(dir.join("NoImage.jpg"));
        official_dir = Some(dir);
    }
    if let Some(text) = &dataset {
        if text != "generated" && !text.starts_with("generated:") {
            let path = absolute(Path::new(text));
            if !path.is_file() {
                bail!("dataset not found: {}", path.display());
            }
            dataset = Some(path.display().to_string());
        }
    }
    let jwt_public_key = jwt_public_key.map(|path| absolute(&path));
    if let Some(path) = &jwt_public_key {
        if !path.is_file() {
            bail!("JWT public key not found: {}", path.display());
        }
    }
    let default_icon = default_icon.map(|path| absolute(&path));
    if let Some(path) = &default_icon {
        if !path.is_file() {
            bail!("default icon not found: {}", path.display());
        }
    }
    let default_static_dir = local::repo_root().join("web/dist");
    let static_dir = absolute(options.static_dir.as_deref().unwrap_or(&default_static_dir));
    if static_dir == default_static_dir && !static_dir.join("index.html").is_file() {
        if options.no_build {
            bail!(
                "the front end is not built ({}); run scripts/web build, or drop --no-build",
                static_dir.display()
            );
        }
        log("building the front end (scripts/web build)");
        external::run_to_stderr(Command::new(local::repo_root().join("scripts/web")).arg("build"))?;
    }
    if !static_dir.is_dir() {
        bail!("static dir not found: {}", static_dir.display());
    }
    let mut jia_service_url = options.jia_service_url.clone().filter(|url| !url.is_empty());
    if options.jia && jia_service_url.is_none() {
        jia_service_url = Some(format!("http://{}", cluster.jia_listen()));
    }
    Ok(Inputs {
        dataset,
        jwt_public_key,
        default_icon,
        static_dir,
        jia_service_url,
        official_dir,
    })
}

/// The folder nginx serves, every compressible file with its `.gz` beside it (nginx's
/// `gzip_static`; `deploy::assets`): this project's web/dist as it is (a `.gz` missing or
/// stale is written there), another --static-dir as it is when it has them all, else a
/// precompressed copy of it in `RUN_DIR/static/`, kept while its content stays the same. A
/// user's folder is never written.
fn precompressed_static_dir(static_dir: &Path, run_dir: &Path) -> anyhow::Result<PathBuf> {
    if static_dir == local::repo_root().join("web/dist") {
        let done = deploy::assets::precompress(static_dir)?;
        if done.written + done.removed > 0 {
            log(format!(
                "web/dist: {} .gz files written, {} stale ones removed",
                done.written, done.removed
            ));
        }
        return Ok(static_dir.to_owned());
    }
    let served = deploy::assets::served_copy(static_dir, &run_dir.join("static"))
        .with_context(|| format!("precompressing {}", static_dir.display()))?;
    if served != static_dir {
        log(format!(
            "serving {} from its precompressed copy {}",
            static_dir.display(),
            served.display()
        ));
    }
    Ok(served)
}

/// Builds the node binaries (and the bench with --jia) unless --no-build; finds them.
fn build(cluster: &Cluster) -> anyhow::Result<Binaries> {
    let options = &cluster.options;
    let profile = if options.debug { "debug" } else { "release" };
    let repo = local::repo_root();
    let target_dir = external::target_dir(&repo);
    if !options.no_build {
        log(format!("building coordinator and worker ({profile})"));
        let mut packages = vec!["coordinator", "worker"];
        if options.jia {
            packages.push("bench");
        }
        external::run_to_stderr(&mut external::cargo_build(&repo, !options.debug, &packages))?;
    }
    let binary = |variable: &str, name: &str| {
        std::env::var_os(variable).map_or_else(|| target_dir.join(profile).join(name), PathBuf::from)
    };
    let binaries = Binaries {
        coordinator: binary("ISU_COORDINATOR_BIN", "coordinator"),
        worker: binary("ISU_WORKER_BIN", "worker"),
        bench: binary("ISU_BENCH_BIN", "bench"),
    };
    if options.jia && !super::is_executable(&binaries.bench) {
        bail!(
            "bench binary not found: {} (build it, or drop --no-build)",
            binaries.bench.display()
        );
    }
    for (what, path) in [("coordinator", &binaries.coordinator), ("worker", &binaries.worker)] {
        if !super::is_executable(path) {
            bail!(
                "{what} binary not found: {} (build it, or drop --no-build)",
                path.display()
            );
        }
    }
    Ok(binaries)
}

/// `ISU_CLUSTER_SECRET` or 24 random bytes in hex, written to `RUN_DIR/secret` (mode 600).
fn write_secret(run_dir: &Path) -> anyhow::Result<String> {
    let secret = match std::env::var("ISU_CLUSTER_SECRET") {
        Ok(secret) if !secret.is_empty() => secret,
        _ => hex::encode(rand::random::<[u8; 24]>()),
    };
    write_private(&run_dir.join("secret"), &secret)?;
    Ok(secret)
}

/// The operator token's file in the run directory (`--ops-token-file` of every replica).
pub const OPS_TOKEN_FILE: &str = "ops-token";

/// A new random operator token (the console's sign-in, apart from the cluster secret) in
/// `RUN_DIR/ops-token`, mode 600.
fn write_ops_token(run_dir: &Path) -> anyhow::Result<()> {
    write_private(&run_dir.join(OPS_TOKEN_FILE), &hex::encode(rand::random::<[u8; 24]>()))
}

/// `text` and a newline in `path`, readable by its owner only.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(file, "{text}")?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// The nginx rendering as `isuctl render nginx` does it for this cluster (the environment's
/// ISU_NGINX_* settings apply as there).
fn render_nginx(cluster: &Cluster, run_dir: &Path, static_dir: &Path, workers: &[Worker]) -> anyhow::Result<PathBuf> {
    #[derive(clap::Parser)]
    struct Render {
        #[command(flatten)]
        args: render::NginxArgs,
    }
    // The environment's settings first, as `isuctl render nginx` takes them; then this
    // cluster's own values over them.
    let mut args = Render::try_parse_from(["render"])
        .map_err(|error| anyhow::anyhow!("{error}"))?
        .args;
    args.run_dir = Some(run_dir.to_owned());
    args.static_dir = Some(static_dir.to_owned());
    args.public_listen = Some(cluster.public_listen());
    args.coordinator = cluster.coordinators().into_iter().map(|(_, listen)| listen).collect();
    args.secret_file = Some(run_dir.join("secret"));
    // A coordinator without a log starts from a new map: so does the router. A durable one
    // keeps its map, and the router's file is checked against these cells.
    args.reset_placement = !cluster.options.durable;
    args.router_control = Some(cluster.router_control());
    args.device_servers = if cluster.options.devices == Devices::Nginx {
        render::Switch::On
    } else {
        render::Switch::Off
    };
    args.cells = workers
        .iter()
        .map(|worker| deploy::nginx::CellSpec {
            name: worker.cell.to_owned(),
            node: worker.listen.clone(),
            device_listen: worker.device_listen.clone(),
            device_server_name: None,
        })
        .collect();
    Ok(deploy::nginx::render_local(&args.options()?)?)
}

fn start_all(
    cluster: &Cluster,
    run_dir: &Path,
    inputs: &Inputs,
    binaries: &Binaries,
    workers: &[Worker],
    secret: &str,
    nginx_conf: &Path,
) -> anyhow::Result<()> {
    let options = &cluster.options;
    let env = cluster.node_env(secret);
    let start = |name: &str, command: Vec<String>| -> anyhow::Result<()> {
        let mut spawn = Spawn::new(command, cluster.records.log_file(name));
        spawn.env = env.clone();
        spawn.cpus = options.cpus.clone();
        let process = cluster.records.start(name, &spawn)?;
        started(name, process);
        Ok(())
    };
    let replicas = cluster.coordinators();
    for worker in workers {
        let args = worker_args(cluster, run_dir, worker);
        start(&worker.name, command_line(&binaries.worker, args.args()))?;
    }
    for (replica, (name, _)) in replicas.iter().enumerate() {
        let args = coordinator_args(cluster, run_dir, inputs, workers, replica)?;
        start(name, command_line(&binaries.coordinator, args.args()))?;
    }
    // nginx starts once the coordinator (a group's leader) has written its placement map
    // (before it is healthy), so it loads that map at start: a reload right after the start
    // would close the first clients' kept-alive connections as its old workers leave (a
    // sign-in's connection reused for a registration at that instant fails before nginx
    // reads the request).
    for (name, _) in &replicas {
        cluster.wait_until_healthy(name)?;
    }

    let nginx_bin = deploy::nginx::default_nginx_bin();
    // One run's access log at a time (it grows by about 80 MB per minute of bench load).
    let access_log = run_dir.join("nginx-access.log");
    if access_log.exists() {
        std::fs::rename(&access_log, run_dir.join("nginx-access.log.prev"))?;
    }
    let mut command = vec![
        nginx_bin.display().to_string(),
        "-p".to_owned(),
        format!("{}/", run_dir.display()),
        "-c".to_owned(),
        nginx_conf.display().to_string(),
    ];
    command.extend(deploy::nginx::error_log_flag(&nginx_bin, run_dir));
    start("nginx", command)?;
    let mut names: Vec<String> = workers.iter().map(|worker| worker.name.clone()).collect();
    names.extend(replicas.iter().map(|(name, _)| name.clone()));
    names.push("nginx".to_owned());
    if options.jia {
        let mut command = vec![
            binaries.bench.display().to_string(),
            "jia".to_owned(),
            "--listen".to_owned(),
            cluster.jia_listen(),
            "--app".to_owned(),
            format!("{}/", cluster.public_url()),
        ];
        if let Some(dir) = &inputs.official_dir {
            command.extend([
                "--private-key".to_owned(),
                dir.join("ec256-private.pem").display().to_string(),
            ]);
        }
        start("jia", command)?;
        names.push("jia".to_owned());
    }
    if options.prometheus {
        start("prometheus", super::prometheus::command(cluster, run_dir, workers)?)?;
        names.push("prometheus".to_owned());
    }
    wait_until_ready(cluster, workers, &replicas, &names)
}

/// Waits until every process in `names` runs and every node, device server, nginx, the
/// JIA simulator and Prometheus (when started) answer.
fn wait_until_ready(
    cluster: &Cluster,
    workers: &[Worker],
    replicas: &[(String, String)],
    names: &[String],
) -> anyhow::Result<()> {
    let options = &cluster.options;
    log(format!("waiting up to {}s for every node to be ready", options.timeout));
    let deadline = Instant::now() + Duration::from_secs(options.timeout);
    loop {
        if let Some(name) = names.iter().find(|name| cluster.records.running(name).is_none()) {
            bail!("{name} exited during start-up");
        }
        let mut pending = Vec::new();
        let devices = match options.devices {
            Devices::Direct => "direct",
            Devices::Nginx => "nginx",
        };
        for worker in workers {
            if http::status(&format!("http://{}/healthz", worker.listen)) != 200 {
                pending.push(worker.name.clone());
            }
            if http::status(&format!("http://{}/", worker.device_listen)) == 0 {
                pending.push(format!("{devices} device server {}", worker.cell));
            }
        }
        for (name, listen) in replicas {
            if http::status(&format!("http://{listen}/healthz")) != 200 {
                pending.push(name.clone());
            }
        }
        if http::status(&format!("{}/", cluster.public_url())) != 200 {
            pending.push("nginx public server".to_owned());
        }
        if options.jia && http::status(&format!("http://{}/", cluster.jia_listen())) != 200 {
            pending.push("jia".to_owned());
        }
        if options.prometheus && http::status(&format!("http://{}/-/ready", cluster.prometheus_listen())) != 200 {
            pending.push("prometheus".to_owned());
        }
        if pending.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("not ready after {}s: {}", options.timeout, pending.join(" "));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `binary` and its arguments.
fn command_line(binary: &Path, args: Vec<String>) -> Vec<String> {
    std::iter::once(binary.display().to_string()).chain(args).collect()
}

/// A worker's settings: its cell and addresses, every replica to push to, its own device
/// server (devices direct), its durable log (--durable). The secret is in the environment.
fn worker_args(cluster: &Cluster, run_dir: &Path, worker: &Worker) -> WorkerArgs {
    let options = &cluster.options;
    WorkerArgs {
        cell: worker.cell.to_owned(),
        listen: worker.listen.clone(),
        // Every replica gets the latest conditions.
        coordinators: cluster
            .coordinators()
            .into_iter()
            .map(|(_, listen)| format!("http://{listen}"))
            .collect(),
        device_listen: (options.devices == Devices::Direct).then(|| worker.device_listen.clone()),
        data_dir: options.durable.then(|| run_dir.join("data").join(&worker.name)),
        fsync: options.durable.then_some(options.fsync),
        ..WorkerArgs::default()
    }
}

/// Coordinator replica `replica`'s settings (from 0; the one coordinator's without a group):
/// every cell, the front end, the router's map and control server, the inputs given; in a
/// group, its raft log in a directory of its own (emptied first unless the cluster is
/// durable) and every member; alone, a durable log with --durable. The secret is in the
/// environment.
fn coordinator_args(
    cluster: &Cluster,
    run_dir: &Path,
    inputs: &Inputs,
    workers: &[Worker],
    replica: usize,
) -> anyhow::Result<CoordinatorArgs> {
    let options = &cluster.options;
    let replicas = cluster.coordinators();
    let (name, listen) = &replicas[replica];
    let data_dir = run_dir.join("data").join(name);
    let mut args = CoordinatorArgs {
        listen: listen.clone(),
        workers: workers
            .iter()
            .map(|worker| CellEndpoint {
                cell: worker.cell.to_owned(),
                url: format!("http://{}", worker.listen),
                device_url: worker.device_url.clone(),
            })
            .collect(),
        static_dir: Some(inputs.static_dir.clone()),
        router_map: Some(run_dir.join("placement.map")),
        // The coordinator (a group's leader) hands nginx each new map there: no reload.
        router_url: Some(format!("http://{}", cluster.router_control())),
        dataset: inputs.dataset.clone(),
        jwt_public_key: inputs.jwt_public_key.clone(),
        default_icon: inputs.default_icon.clone(),
        jia_service_url: inputs.jia_service_url.clone(),
        ops_token_file: Some(run_dir.join(OPS_TOKEN_FILE)),
        prometheus_url: options
            .prometheus
            .then(|| format!("http://{}", cluster.prometheus_listen())),
        ..CoordinatorArgs::default()
    };
    if replicas.len() > 1 {
        if !options.durable && data_dir.exists() {
            std::fs::remove_dir_all(&data_dir).with_context(|| format!("emptying {}", data_dir.display()))?;
        }
        args.group = Some(ReplicaGroup {
            id: replica as u64 + 1,
            members: (1..)
                .zip(&replicas)
                .map(|(id, (_, listen))| (id, format!("http://{listen}")))
                .collect(),
        });
        args.data_dir = Some(data_dir);
    } else if options.durable {
        args.data_dir = Some(data_dir);
        args.fsync = Some(options.fsync);
    }
    Ok(args)
}

/// `cluster.json`, and `cluster.env` with the same URLs for the scripts that source it.
fn write_cluster_files(run_dir: &Path, file: &ClusterFile, workers: &[Worker]) -> anyhow::Result<()> {
    let json = run_dir.join("cluster.json");
    std::fs::write(&json, serde_json::to_string_pretty(file)? + "\n")
        .with_context(|| format!("writing {}", json.display()))?;
    let url = |index: usize| file.workers.get(index).map_or("", |worker| worker.url.as_str());
    let device_url = |index: usize| file.workers.get(index).map_or("", |worker| worker.device_url.as_str());
    let nodes: String = workers
        .iter()
        .map(|worker| format!("{}=http://{} ", worker.name, worker.listen))
        .collect();
    let mut env = format!(
        "# Written by isuctl cluster up; the secret and the operator token are in secret and ops-token (mode 600).
ISU_PUBLIC_URL={}
ISU_COORDINATOR_URL={}
ISU_WORKER_A_URL={}
ISU_WORKER_B_URL={}
ISU_WORKER_A_DEVICE_URL={}
ISU_WORKER_B_DEVICE_URL={}
ISU_WORKER_NODES=\"{nodes}\"
ISU_RUN_DIR={}
ISU_SECRET_FILE={}
ISU_OPS_TOKEN_FILE={}
",
        file.public_url,
        file.coordinator_url,
        url(0),
        url(1),
        device_url(0),
        device_url(1),
        run_dir.display(),
        run_dir.join("secret").display(),
        run_dir.join(OPS_TOKEN_FILE).display()
    );
    if let Some(jia) = &file.jia_url {
        env.push_str(&format!("ISU_JIA_URL={jia}\n"));
    }
    if let Some(prometheus) = &file.prometheus_url {
        env.push_str(&format!("ISU_PROMETHEUS_URL={prometheus}\n"));
    }
    let path = run_dir.join("cluster.env");
    std::fs::write(&path, env).with_context(|| format!("writing {}", path.display()))
}
