//! `isuctl cluster`: the local cluster on loopback — a coordinator, N workers (cells a, b, c,
//! ...; default 2) and one nginx (public server), all supervised from the run directory.
//!
//! Devices post straight to their worker's own device server (or, with `--devices nginx`,
//! through nginx). nginx routes per-ISU requests by the coordinator's placement map, which the
//! coordinator writes to `RUN_DIR/placement.map` and hands to nginx's control server
//! (`COORDINATOR_HOST:ROUTER_PORT`) without a reload.
//!
//! Files in the run dir: `NAME.pid`, `NAME.start`, `NAME.cmd` and `NAME.log` per process
//! ([`deploy::supervise::Records`]), `data/NAME` (with `--durable`), `nginx.conf`,
//! `placement.map` (the router's map), `nginx-error.log`, `nginx-access.log`, `secret` (mode
//! 600), `cluster.json` ([`crate::local::ClusterFile`]) and `cluster.env` (the same URLs as
//! shell variables, for the scripts that still source it).

pub mod prometheus;
mod up;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::builder::FalseyValueParser;
use deploy::supervise::{Process, Records, Spawn, Stopped};
use nix::sys::signal::Signal;
use serde::Serialize;
use shared::wal::FsyncPolicy;

use crate::exit::Exit;
use crate::http;
use crate::local::{self, Addresses, ClusterFile, RunDir};
use crate::output::{self, Format};

#[derive(Debug, clap::Args)]
#[command(after_help = ENVIRONMENT)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub options: Options,
}

const ENVIRONMENT: &str = "\
Addresses (environment only):
  ISU_COORDINATOR_HOST=127.0.0.2  ISU_WORKER_A_HOST=127.0.0.3  ISU_WORKER_B_HOST=127.0.0.4
                        (workers c, d, ...: .5, .6, ... of the coordinator host's /24)
  ISU_NODE_PORT=3000    nodes listen on HOST:NODE_PORT
  ISU_PUBLIC_PORT=8080  nginx public server on COORDINATOR_HOST:PUBLIC_PORT
  ISU_DEVICE_PORT=8080  device servers (worker's own or nginx's) on WORKER_x_HOST:DEVICE_PORT
  ISU_JIA_PORT=5000     the --jia simulator on COORDINATOR_HOST:JIA_PORT
  ISU_ROUTER_PORT=3099  nginx's control server (placement maps) on COORDINATOR_HOST:ROUTER_PORT
  ISU_PROMETHEUS_PORT=9090  Prometheus (--prometheus) on COORDINATOR_HOST:PROMETHEUS_PORT
  ISU_WORKER_A_DEVICE_URL / ISU_WORKER_B_DEVICE_URL  what the coordinator sends
                        to JIA (default http://WORKER_x_HOST:DEVICE_PORT)
Other environment:
  ISU_CLUSTER_SECRET    shared secret of internal routes (default: random per
                        'up'); always written to RUN_DIR/secret (mode 600)
  ISU_RUN_DIR           default <repo>/run/cluster
  ISU_COORDINATOR_BIN / ISU_WORKER_BIN / ISU_BENCH_BIN  binaries to run instead of the built ones
  ISU_STOP_TIMEOUT      seconds 'down' waits before SIGKILL (default 10)
  ISU_NGINX_WORKER_PROCESSES, ISU_NGINX_ACCESS_LOG=on|off, ISU_NGINX_TEMPLATE
                        reach the nginx rendering (see 'isuctl render nginx --help')
  RUST_LOG and the nodes' other ISU_* variables reach the nodes unchanged.

Files in RUN_DIR: NAME.pid (bare PID), NAME.start, NAME.log, NAME.cmd (its command line,
NUL-separated, for 'start'), data/NAME (with --durable), nginx.conf, placement.map (the
router's map), nginx-error.log, nginx-access.log, secret, cluster.json and cluster.env
(URLs of every endpoint, for scripts).";

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Build, start every process, wait until every /healthz answers 200, then print the
    /// public base URL as the last line of stdout. Refuses (exit 1) when a cluster from this
    /// run dir is still running. If start-up fails, the log tails are shown and whatever was
    /// started is stopped (see --keep-on-failure).
    Up,
    /// Stop exactly the recorded processes (SIGQUIT for nginx, SIGTERM for the nodes, SIGKILL
    /// after ISU_STOP_TIMEOUT s); safe when nothing runs.
    Down,
    /// Down, then up.
    Restart,
    /// Each process: PID, alive or not, and its health; exit 0 only when everything is up
    /// and healthy, 3 when nothing runs.
    Status,
    /// Tail the logs; NAME is coordinator, worker-a, worker-b, ..., jia, nginx (stderr + error
    /// log) or access (nginx access log, LTSV).
    Logs {
        names: Vec<String>,
        /// Follow the logs.
        #[arg(short, long)]
        follow: bool,
        /// Lines of each log.
        #[arg(short = 'n', default_value_t = 40)]
        lines: usize,
    },
    /// SIGTERM node NAME (a graceful stop: it drains and exits) by its recorded PID.
    Stop { name: String },
    /// SIGKILL node NAME (coordinator, worker-a, worker-b, ...) by its recorded PID: a crash,
    /// for fault tests.
    Kill { name: String },
    /// SIGSTOP node NAME by its recorded PID: a process that hangs (a long pause, a stalled
    /// host) while its sockets stay open, for fault tests; 'resume' lets it go on.
    Pause { name: String },
    /// SIGCONT node NAME (after 'pause').
    Resume { name: String },
    /// Start node NAME again with the command line 'up' gave it (same data directory with
    /// --durable); its log is appended to; waits for /healthz.
    Start {
        name: String,
        /// Run PATH instead of the binary it ran.
        #[arg(long, value_name = "PATH")]
        binary: Option<PathBuf>,
    },
    /// (--durable, workers) Replace worker NAME in place without a gap: the new process binds
    /// beside the running one, which then drains and exits; the new one replays the log and
    /// serves.
    Replace {
        name: String,
        /// Run PATH instead of the binary it ran.
        #[arg(long, value_name = "PATH")]
        binary: Option<PathBuf>,
    },
    /// Graceful nginx reload (SIGHUP to the recorded nginx master), for a new nginx.conf
    /// (another set of cells). A placement map change needs none: the coordinator hands
    /// each new map to nginx's control server.
    ReloadRouter,
}

/// The options of every command (given before or after it), each also an environment variable.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Number of workers (cells a, b, c, ...), 1 to 16. With --durable, a later 'up' with more
    /// workers adds cells holding nothing (move slots to them with 'cells rebalance').
    #[arg(long, global = true, env = "ISU_WORKER_COUNT", default_value_t = 2)]
    pub workers: usize,
    /// Number of coordinators, 1 to 5: one (the default), or a group of replicas
    /// (`coordinator`, `coordinator-2`, ... on COORDINATOR_HOST:NODE_PORT, NODE_PORT+1, ...)
    /// that keep the control plane up through the loss of a minority; nginx balances over
    /// them. Each replica keeps its raft log in RUN_DIR/data/NAME (emptied at 'up' unless
    /// --durable).
    #[arg(long, global = true, env = "ISU_COORDINATOR_COUNT", default_value_t = 1)]
    pub coordinators: usize,
    /// The coordinator's initial data: generated[:N] (scaled to N ISUs) or a file [default:
    /// the binary's own, 'generated'].
    #[arg(long, global = true, env = "ISU_DATASET")]
    pub dataset: Option<String>,
    /// Key for sign-in JWTs [default: the project's key].
    #[arg(long, global = true, env = "ISU_JWT_PUBLIC_KEY")]
    pub jwt_public_key: Option<PathBuf>,
    /// Icon of ISUs registered without one.
    #[arg(long, global = true, env = "ISU_DEFAULT_ICON")]
    pub default_icon: Option<PathBuf>,
    /// Front end served by nginx [default: web/dist, built by 'scripts/web build' when missing].
    /// Sent precompressed: a folder without a .gz beside each compressible file is served from
    /// a precompressed copy in RUN_DIR/static/ (the folder itself is never written).
    #[arg(long, global = true, env = "ISU_STATIC_DIR")]
    pub static_dir: Option<PathBuf>,
    /// JIA service the coordinator calls.
    #[arg(long, global = true, env = "ISU_JIA_SERVICE_URL")]
    pub jia_service_url: Option<String>,
    /// Also run the bench's JIA simulator (target/<profile>/bench jia) on
    /// COORDINATOR_HOST:ISU_JIA_PORT: browser sign-in page at its /, activation of any ISU id,
    /// posting devices; the coordinator calls it unless --jia-service-url says otherwise.
    #[arg(long, global = true, env = "ISU_JIA", value_parser = FalseyValueParser::new())]
    pub jia: bool,
    /// Also run Debian's Prometheus (`prometheus`, installed with apt-get when missing) on
    /// COORDINATOR_HOST:ISU_PROMETHEUS_PORT: it scrapes every node every 5 s with the cluster
    /// secret, evaluates ops/prometheus/rules, keeps its data in RUN_DIR/prometheus, and
    /// stops with the cluster. Its URL is in cluster.json and cluster.env.
    #[arg(long, global = true, env = "ISU_PROMETHEUS", value_parser = FalseyValueParser::new())]
    pub prometheus: bool,
    /// Dataset, JWT key and icon of the contest, from ../shared/data/isucon11-qualify/
    /// (1_InitData.sql, ec256-public.pem, NoImage.jpg); fails if absent.
    #[arg(long, global = true)]
    pub official: bool,
    /// Where devices post: direct = each worker serves its device address itself (worker
    /// --device-listen); nginx = an nginx device server per worker proxies to the worker.
    #[arg(long, global = true, env = "ISU_DEVICES", value_enum, default_value = "direct")]
    pub devices: Devices,
    /// Run every cluster process (nodes, nginx, the --jia simulator) on these CPUs only
    /// (taskset -c LIST, e.g. 1), so that a load generator pinned elsewhere does not compete.
    #[arg(long, global = true, env = "ISU_CLUSTER_CPUS")]
    pub cpus: Option<String>,
    /// Every node keeps a durable log in RUN_DIR/data/NAME (--data-dir), replayed when it
    /// starts again (also after down/up; remove RUN_DIR/data to start empty).
    #[arg(long, global = true, env = "ISU_DURABLE", value_parser = FalseyValueParser::new())]
    pub durable: bool,
    /// With --durable: always, never or <N>ms (the nodes' own syntax: `shared::wal::FsyncPolicy`).
    #[arg(long, global = true, env = "ISU_FSYNC", default_value = "always")]
    pub fsync: FsyncPolicy,
    /// Use debug builds (target/debug).
    #[arg(long, global = true, env = "ISU_DEBUG", value_parser = FalseyValueParser::new())]
    pub debug: bool,
    /// Do not run cargo build.
    #[arg(long, global = true, env = "ISU_NO_BUILD", value_parser = FalseyValueParser::new())]
    pub no_build: bool,
    /// How long 'up' (and 'start', 'replace') wait for health, in seconds.
    #[arg(long, global = true, env = "ISU_UP_TIMEOUT", default_value_t = 60)]
    pub timeout: u64,
    /// Leave processes running when 'up' fails.
    #[arg(long, global = true)]
    pub keep_on_failure: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Devices {
    Direct,
    Nginx,
}

/// A progress line on stderr; a closed stderr (`... 2>&1 | head`) does not stop a command
/// halfway (a `down` that stopped printing still stops every process).
fn log(message: impl std::fmt::Display) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "cluster: {message}");
}

/// The local cluster as the options and the environment describe it.
struct Cluster {
    options: Options,
    addresses: Addresses,
    run_dir: PathBuf,
    records: Records,
    stop_timeout: Duration,
}

/// One worker's addresses.
struct Worker {
    cell: &'static str,
    name: String,
    listen: String,
    device_listen: String,
    device_url: String,
    host: String,
}

impl Cluster {
    fn new(options: Options) -> anyhow::Result<Cluster> {
        if !(1..=local::MAX_LOCAL_CELLS).contains(&options.workers) {
            bail!("--workers must be 1 to 16");
        }
        if !(1..=MAX_COORDINATORS).contains(&options.coordinators) {
            bail!("--coordinators must be 1 to {MAX_COORDINATORS}");
        }
        if options.cpus.as_deref().is_some_and(|cpus| !valid_cpu_list(cpus)) {
            bail!("--cpus takes a CPU list such as 1 or 0,2-3");
        }
        let stop_timeout = match std::env::var("ISU_STOP_TIMEOUT") {
            Err(_) => 10,
            Ok(text) => text
                .parse()
                .map_err(|_| anyhow::anyhow!("ISU_STOP_TIMEOUT must be a number of seconds"))?,
        };
        let run_dir = RunDir::from_env().path;
        Ok(Cluster {
            records: Records::new(&run_dir),
            run_dir,
            addresses: Addresses::try_from_env()?,
            options,
            stop_timeout: Duration::from_secs(stop_timeout),
        })
    }

    fn coordinator_listen(&self) -> String {
        format!("{}:{}", self.addresses.coordinator_host, self.addresses.node_port)
    }

    /// Every coordinator's name and address: `coordinator` on NODE_PORT, then the other
    /// replicas of a group on the next ports.
    fn coordinators(&self) -> Vec<(String, String)> {
        (1..=self.options.coordinators)
            .map(|replica| {
                let port = self.addresses.node_port + replica as u16 - 1;
                (
                    coordinator_name(replica),
                    format!("{}:{port}", self.addresses.coordinator_host),
                )
            })
            .collect()
    }

    /// nginx's control server (the coordinator hands it each new map): `COORDINATOR_HOST:ROUTER_PORT`.
    fn router_control(&self) -> String {
        format!("{}:{}", self.addresses.coordinator_host, self.addresses.router_port)
    }

    /// nginx's public server: `COORDINATOR_HOST:PUBLIC_PORT`.
    fn public_listen(&self) -> String {
        format!("{}:{}", self.addresses.coordinator_host, self.addresses.public_port)
    }

    fn public_url(&self) -> String {
        format!("http://{}", self.public_listen())
    }

    fn jia_listen(&self) -> String {
        format!("{}:{}", self.addresses.coordinator_host, self.addresses.jia_port)
    }

    /// Prometheus (`up --prometheus`): `COORDINATOR_HOST:PROMETHEUS_PORT`.
    fn prometheus_listen(&self) -> String {
        format!("{}:{}", self.addresses.coordinator_host, self.addresses.prometheus_port)
    }

    fn worker(&self, index: usize) -> Worker {
        let host = self.addresses.worker_host(index);
        let device_listen = format!("{host}:{}", self.addresses.device_port);
        let default_url = format!("http://{device_listen}");
        let device_url = match index {
            0 => std::env::var("ISU_WORKER_A_DEVICE_URL").unwrap_or(default_url),
            1 => std::env::var("ISU_WORKER_B_DEVICE_URL").unwrap_or(default_url),
            _ => default_url,
        };
        Worker {
            cell: local::cell_name(index),
            name: format!("worker-{}", local::cell_name(index)),
            listen: format!("{host}:{}", self.addresses.node_port),
            device_listen,
            device_url,
            host,
        }
    }

    fn workers(&self) -> Vec<Worker> {
        (0..self.options.workers).map(|index| self.worker(index)).collect()
    }

    /// Stop order (start order is the reverse: workers first, the coordinator resets them
    /// before it becomes ready); jia runs only with --jia.
    fn all_names() -> Vec<String> {
        let mut names = vec!["prometheus".to_owned(), "jia".to_owned(), "nginx".to_owned()];
        names.extend((1..=MAX_COORDINATORS).rev().map(coordinator_name));
        names.extend(
            (0..local::MAX_LOCAL_CELLS)
                .rev()
                .map(|index| format!("worker-{}", local::cell_name(index))),
        );
        names
    }

    fn running_names(&self) -> Vec<String> {
        Cluster::all_names()
            .into_iter()
            .filter(|name| self.records.running(name).is_some())
            .collect()
    }

    /// Coordinators this run dir has started (a command line recorded), in replica order.
    fn recorded_coordinators(&self) -> Vec<String> {
        (1..=MAX_COORDINATORS)
            .map(coordinator_name)
            .filter(|name| self.records.command_file(name).exists())
            .collect()
    }

    /// Workers this run dir has started (a command line recorded), in cell order.
    fn recorded_workers(&self) -> Vec<String> {
        (0..local::MAX_LOCAL_CELLS)
            .map(|index| format!("worker-{}", local::cell_name(index)))
            .filter(|name| self.records.command_file(name).exists())
            .collect()
    }

    /// The hosts inter-node calls must never send through a proxy.
    fn no_proxy(&self) -> String {
        let mut hosts = vec![self.addresses.coordinator_host.clone()];
        hosts.extend(self.workers().into_iter().map(|worker| worker.host));
        hosts.push("localhost".to_owned());
        let mut value = hosts.join(",");
        if let Ok(existing) = std::env::var("NO_PROXY") {
            if !existing.is_empty() {
                value = format!("{value},{existing}");
            }
        }
        value
    }

    /// The environment every node gets: the secret (not on the command line, so 'ps' does
    /// not show it), no proxy between nodes, plain log files (tracing honours NO_COLOR).
    fn node_env(&self, secret: &str) -> Vec<(String, String)> {
        let no_proxy = self.no_proxy();
        vec![
            ("ISU_CLUSTER_SECRET".to_owned(), secret.to_owned()),
            ("NO_PROXY".to_owned(), no_proxy.clone()),
            ("no_proxy".to_owned(), no_proxy),
            (
                "NO_COLOR".to_owned(),
                std::env::var("NO_COLOR").unwrap_or_else(|_| "1".to_owned()),
            ),
        ]
    }

    /// The `/healthz` URL of node NAME, or an error naming the nodes there are.
    fn node_health_url(&self, name: &str) -> anyhow::Result<String> {
        let replica = (1..=MAX_COORDINATORS).find(|replica| coordinator_name(*replica) == name);
        if let Some(replica) = replica {
            let port = self.addresses.node_port + replica as u16 - 1;
            return Ok(format!("http://{}:{port}/healthz", self.addresses.coordinator_host));
        }
        let index = name
            .strip_prefix("worker-")
            .and_then(local::cell_index)
            .with_context(|| format!("unknown node '{name}' (coordinator, worker-a, worker-b, ...)"))?;
        let recorded = RunDir::new(&self.run_dir).cluster().ok().and_then(|cluster| {
            cluster
                .workers
                .into_iter()
                .find(|worker| worker.cell == local::cell_name(index))
        });
        let url = match recorded {
            Some(worker) => format!("{}/healthz", worker.url.trim_end_matches('/')),
            None => format!("http://{}/healthz", self.worker(index).listen),
        };
        Ok(url)
    }

    /// Stops the recorded process NAME: SIGTERM (nginx: SIGQUIT, a graceful stop of the
    /// master), SIGKILL after the stop timeout (nginx's workers too).
    fn stop_process(&self, name: &str) -> Option<Action> {
        let Some(process) = self.records.running(name) else {
            if self.records.pid_file(name).exists() {
                log(format!("{name}: not running (stale pid file removed)"));
            }
            self.records.forget(name);
            return None;
        };
        let nginx = name == "nginx";
        let signal = if nginx { Signal::SIGQUIT } else { Signal::SIGTERM };
        match process.stop(signal, self.stop_timeout, nginx) {
            Stopped::Killed => log(format!(
                "{name} (pid {}) still alive after {}s: SIGKILL",
                process.pid,
                self.stop_timeout.as_secs()
            )),
            Stopped::Stuck => log(format!("{name} (pid {}) did not die", process.pid)),
            Stopped::Exited | Stopped::NotRunning => {}
        }
        log(format!("stopped {name} (pid {})", process.pid));
        self.records.forget(name);
        Some(Action::ended(name, process.pid))
    }

    fn stop_all(&self) -> Vec<Action> {
        Cluster::all_names()
            .iter()
            .filter_map(|name| self.stop_process(name))
            .collect()
    }

    fn down(&self) -> anyhow::Result<Vec<Action>> {
        if !self.run_dir.is_dir() {
            log(format!("nothing to stop ({} does not exist)", self.run_dir.display()));
            return Ok(Vec::new());
        }
        let stopped = self.stop_all();
        let _ = std::fs::remove_file(self.run_dir.join("cluster.env"));
        let _ = std::fs::remove_file(self.run_dir.join("cluster.json"));
        Ok(stopped)
    }

    /// Waits until node NAME (the recorded process) answers its /healthz; the error says why
    /// not (it exited, or the timeout).
    fn wait_until_healthy(&self, name: &str) -> anyhow::Result<()> {
        let url = self.node_health_url(name)?;
        let deadline = Instant::now() + Duration::from_secs(self.options.timeout);
        loop {
            let healthy = http::status(&url) == 200;
            if self.records.running(name).is_none() {
                bail!(
                    "{name} exited during start-up (see {})",
                    self.records.log_file(name).display()
                );
            }
            if healthy {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("{name} not healthy after {}s", self.options.timeout);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn status(&self) -> Vec<ProcessStatus> {
        let recorded = RunDir::new(&self.run_dir).cluster().ok();
        let public_url = recorded
            .as_ref()
            .map_or_else(|| self.public_url(), |cluster| cluster.public_url.clone());
        let jia_url = recorded
            .as_ref()
            .and_then(|cluster| cluster.jia_url.clone())
            .unwrap_or_else(|| format!("http://{}", self.jia_listen()));
        let mut names = self.recorded_workers();
        names.extend(self.recorded_coordinators());
        names.push("nginx".to_owned());
        for extra in ["jia", "prometheus"] {
            if self.records.pid_file(extra).exists() {
                names.push(extra.to_owned());
            }
        }
        let prometheus_url = recorded
            .as_ref()
            .and_then(|cluster| cluster.prometheus_url.clone())
            .unwrap_or_else(|| format!("http://{}", self.prometheus_listen()));
        names
            .into_iter()
            .map(|name| {
                let process = self.records.running(&name);
                let health = process.map(|_| {
                    let (url, with_body) = match name.as_str() {
                        "nginx" => (format!("{public_url}/"), false),
                        "jia" => (format!("{}/", jia_url.trim_end_matches('/')), false),
                        "prometheus" => (format!("{prometheus_url}/-/ready"), false),
                        _ => (self.node_health_url(&name).unwrap_or_default(), true),
                    };
                    let answer = http::get(&url, Duration::from_secs(2));
                    Health {
                        status: answer.as_ref().map_or(0, |answer| answer.status),
                        body: answer
                            .filter(|_| with_body)
                            .map(|answer| answer.body.replace('\n', "").chars().take(200).collect()),
                        url,
                    }
                });
                ProcessStatus {
                    name,
                    pid: process.map(|process| process.pid),
                    alive: process.is_some(),
                    healthy: health.as_ref().is_some_and(|health| health.status == 200),
                    health,
                }
            })
            .collect()
    }

    fn logs(&self, names: &[String], follow: bool, lines: usize) -> anyhow::Result<()> {
        let mut names = names.to_vec();
        if names.is_empty() {
            names = self.recorded_workers();
            names.extend(self.recorded_coordinators());
            names.push("nginx".to_owned());
        }
        let mut files = Vec::new();
        for name in &names {
            let is_worker = name
                .strip_prefix("worker-")
                .is_some_and(|cell| local::cell_index(cell).is_some());
            let is_coordinator = (1..=MAX_COORDINATORS).any(|replica| coordinator_name(replica) == *name);
            match name.as_str() {
                "jia" | "prometheus" => files.push(self.records.log_file(name)),
                _ if is_coordinator => files.push(self.records.log_file(name)),
                _ if is_worker => files.push(self.records.log_file(name)),
                "nginx" => files.extend([self.records.log_file("nginx"), self.run_dir.join("nginx-error.log")]),
                "access" => files.push(self.run_dir.join("nginx-access.log")),
                _ => {
                    bail!("unknown log '{name}' (coordinator, worker-a, worker-b, ..., jia, prometheus, nginx, access)")
                }
            }
        }
        files.retain(|file| file.is_file());
        if files.is_empty() {
            bail!("no logs in {}", self.run_dir.display());
        }
        let mut tail = std::process::Command::new("tail");
        tail.arg("-n").arg(lines.to_string());
        if follow {
            tail.arg("-F");
        }
        let status = tail.args(&files).status().context("running tail")?;
        if !status.success() {
            return Err(Exit::quiet(status.code().unwrap_or(1)).into());
        }
        Ok(())
    }

    /// A graceful reload for a new nginx.conf: nginx's master starts new workers; the old
    /// ones finish their requests and close their idle kept-alive connections (a client
    /// sending on one at that instant fails), so the command says so.
    fn reload_router(&self) -> anyhow::Result<Option<Action>> {
        let Some(nginx) = self.records.running("nginx") else {
            log("reload-router: nginx is not running (it reads nginx.conf and placement.map when it starts)");
            return Ok(None);
        };
        // An nginx still starting has not installed its SIGHUP handler yet, and the signal
        // would kill it: wait until it catches SIGHUP.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !nginx.catches(Signal::SIGHUP) {
            if !nginx.is_running() {
                log("reload-router: nginx exited while starting");
                return Ok(None);
            }
            if Instant::now() >= deadline {
                bail!(
                    "reload-router: nginx (pid {}) does not handle SIGHUP after 10 s",
                    nginx.pid
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !nginx.signal(Signal::SIGHUP) {
            bail!("reload-router: nginx (pid {}) exited", nginx.pid);
        }
        log(format!(
            "reload-router: SIGHUP sent to nginx (pid {}): new workers take over, the old ones close their idle client connections",
            nginx.pid
        ));
        Ok(Some(Action::running("nginx", nginx.pid, None)))
    }

    fn kill(&self, name: &str) -> anyhow::Result<Action> {
        self.node_health_url(name)?;
        let process = self
            .records
            .running(name)
            .with_context(|| format!("{name} is not running"))?;
        process.signal(Signal::SIGKILL);
        if !process.wait_for_exit(Duration::from_secs(5)) {
            bail!("{name} (pid {}) did not die", process.pid);
        }
        self.records.forget(name);
        log(format!("killed {name} (pid {}, SIGKILL)", process.pid));
        Ok(Action::ended(name, process.pid))
    }

    /// Sends `signal` (SIGSTOP, SIGCONT) to node NAME, which goes on running.
    fn signal(&self, name: &str, signal: Signal) -> anyhow::Result<Action> {
        self.node_health_url(name)?;
        let process = self
            .records
            .running(name)
            .with_context(|| format!("{name} is not running"))?;
        process.signal(signal);
        log(format!("sent {signal} to {name} (pid {})", process.pid));
        Ok(Action::running(name, process.pid, None))
    }

    fn stop(&self, name: &str) -> anyhow::Result<Action> {
        self.node_health_url(name)?;
        self.stop_process(name)
            .with_context(|| format!("{name} is not running"))
    }

    /// The recorded command line of NAME, with `binary` in place of its binary.
    fn recorded_spawn(&self, name: &str, binary: Option<&Path>) -> anyhow::Result<Spawn> {
        let path = self.records.command_file(name);
        if !path.exists() {
            bail!(
                "no recorded command line for {name} ({}): run 'up' first",
                path.display()
            );
        }
        let mut command = self.records.command(name)?;
        // The node's binary follows a 'taskset -c CPUS' prefix when the cluster was pinned;
        // the prefix is kept as recorded.
        let mut cpus = None;
        if command.first().map(String::as_str) == Some("taskset") && command.len() > 3 {
            cpus = Some(command[2].clone());
            command.drain(..3);
        }
        if let Some(binary) = binary {
            if !is_executable(binary) {
                bail!("--binary {} is not an executable file", binary.display());
            }
            command[0] = std::fs::canonicalize(binary)?.display().to_string();
        }
        let secret = RunDir::new(&self.run_dir).secret()?;
        let mut spawn = Spawn::new(command, self.records.log_file(name));
        spawn.append = true;
        spawn.cpus = cpus;
        spawn.env = self.node_env(&secret);
        Ok(spawn)
    }

    fn start(&self, name: &str, binary: Option<&Path>) -> anyhow::Result<Action> {
        self.node_health_url(name)?;
        if self.records.running(name).is_some() {
            bail!("{name} is already running");
        }
        let spawn = self.recorded_spawn(name, binary)?;
        let process = self.records.start(name, &spawn)?;
        log(format!("started {name} (pid {})", process.pid));
        self.wait_until_healthy(name)?;
        log(format!("{name} is healthy again"));
        Ok(Action::running(name, process.pid, None))
    }

    /// A new worker process takes over from the running one without a gap: it binds the same
    /// addresses beside it (SO_REUSEPORT; connections reaching it wait in its accept queue),
    /// the old one gets SIGTERM, drains, flushes and exits, and the new one replays the
    /// complete log and serves (worker/src/handover.rs).
    fn replace(&self, name: &str, binary: Option<&Path>) -> anyhow::Result<Action> {
        self.node_health_url(name)?;
        if !name.starts_with("worker-") {
            bail!("replace takes a worker (worker-a, worker-b, ...); use stop and start for {name}");
        }
        let old = self
            .records
            .running(name)
            .with_context(|| format!("{name} is not running (use 'start')"))?;
        if !self.run_dir.join("data").join(name).is_dir() {
            bail!("{name} is not durable: nothing would hand its data over (up --durable)");
        }
        let mut spawn = self.recorded_spawn(name, binary)?;
        spawn.env.push(("ISU_REPLACE".to_owned(), "true".to_owned()));
        let log_path = self.records.log_file(name);
        let offset = std::fs::metadata(&log_path).map_or(0, |metadata| metadata.len());
        let new = self.records.start(name, &spawn)?;
        log(format!("started {name} (pid {})", new.pid));
        // Puts the old process back on record when the new one cannot take over.
        let restore_old = |reason: String| -> anyhow::Error {
            let _ = self.records.record(name, old);
            anyhow::anyhow!(
                "{reason} (see {}); {name} (pid {}) still runs",
                log_path.display(),
                old.pid
            )
        };
        let deadline = Instant::now() + Duration::from_secs(self.options.timeout);
        while !log_since(&log_path, offset).contains("holds the data directory") {
            if !new.is_running() {
                return Err(restore_old(format!(
                    "the new {name} exited before binding beside the old one"
                )));
            }
            if Instant::now() >= deadline {
                new.signal(Signal::SIGKILL);
                return Err(restore_old(format!(
                    "the new {name} did not bind within {}s",
                    self.options.timeout
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        log(format!(
            "the new {name} (pid {}) listens beside pid {}: stopping the old one",
            new.pid, old.pid
        ));
        match old.stop(Signal::SIGTERM, self.stop_timeout, false) {
            Stopped::Killed => log(format!(
                "{name} (pid {}) still alive after {}s: SIGKILL",
                old.pid,
                self.stop_timeout.as_secs()
            )),
            Stopped::Stuck => log(format!("{name} (pid {}) did not die", old.pid)),
            Stopped::Exited | Stopped::NotRunning => {}
        }
        self.wait_until_healthy(name)?;
        log(format!("{name} replaced: pid {} -> {}", old.pid, new.pid));
        Ok(Action::running(name, new.pid, Some(old.pid)))
    }
}

/// What a log file holds after `offset` bytes.
fn log_since(path: &Path, offset: u64) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset).unwrap_or(usize::MAX).min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// A taskset CPU list: numbers joined by `,` and `-` (`1`, `0,2-3`).
fn valid_cpu_list(text: &str) -> bool {
    !text.is_empty()
        && text
            .split([',', '-'])
            .all(|number| !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
}

/// What a command did to a process: its `--json` answer (the human form is the progress
/// lines on stderr, as before).
#[derive(Debug, Serialize)]
pub struct Action {
    pub name: String,
    /// The process that runs now (started, or signalled and still running).
    pub pid: Option<u32>,
    /// The process it replaced, stopped or killed.
    pub previous_pid: Option<u32>,
}

impl Action {
    fn ended(name: &str, pid: u32) -> Action {
        Action {
            name: name.to_owned(),
            pid: None,
            previous_pid: Some(pid),
        }
    }

    fn running(name: &str, pid: u32, previous_pid: Option<u32>) -> Action {
        Action {
            name: name.to_owned(),
            pid: Some(pid),
            previous_pid,
        }
    }
}

/// `--json`: the actions as a JSON array; the human form prints nothing on stdout.
fn emit_actions(format: Format, actions: &[Action]) -> anyhow::Result<()> {
    if format == Format::Json {
        output::emit(format, &actions, |_| String::new())?;
    }
    Ok(())
}

/// One process of `status`.
#[derive(Debug, Serialize)]
pub struct ProcessStatus {
    pub name: String,
    /// Its recorded PID while that very process runs.
    pub pid: Option<u32>,
    pub alive: bool,
    /// Alive and its health URL answered 200.
    pub healthy: bool,
    /// Asked only of a running process.
    pub health: Option<Health>,
}

#[derive(Debug, Serialize)]
pub struct Health {
    pub url: String,
    /// 0 when nothing answered.
    pub status: u16,
    /// The first 200 characters of a node's answer.
    pub body: Option<String>,
}

fn status_table(processes: &[ProcessStatus]) -> String {
    processes
        .iter()
        .map(|process| {
            let state = match process.pid {
                Some(pid) => format!("running (pid {pid})"),
                None => "stopped".to_owned(),
            };
            let health = process.health.as_ref().map_or_else(String::new, |health| {
                let status = if health.status == 0 {
                    "000".to_owned()
                } else {
                    health.status.to_string()
                };
                match &health.body {
                    Some(body) => format!("GET {} -> {status} {body}", health.url),
                    None => format!("GET {} -> {status}", health.url),
                }
            });
            format!("{:<12} {:<22} {health}", process.name, state)
                .trim_end()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn run(args: Args, format: Format) -> anyhow::Result<()> {
    let cluster = Cluster::new(args.options)?;
    match args.command {
        Command::Up => up::up(&cluster, format),
        Command::Down => emit_actions(format, &cluster.down()?),
        Command::Restart => {
            cluster.down()?;
            up::up(&cluster, format)
        }
        Command::Status => {
            let processes = cluster.status();
            let console = RunDir::new(&cluster.run_dir).cluster().ok().and_then(|file| {
                let token = file.ops_token_file?;
                Some(format!(
                    "\noperator console: {}/ops (token in {})",
                    file.public_url,
                    token.display()
                ))
            });
            output::emit(format, &processes, |processes| {
                status_table(processes) + console.as_deref().unwrap_or_default()
            })?;
            if !processes.iter().any(|process| process.alive) {
                return Err(Exit::quiet(3).into());
            }
            if !processes.iter().all(|process| process.healthy) {
                return Err(Exit::quiet(1).into());
            }
            Ok(())
        }
        Command::Logs { names, follow, lines } => cluster.logs(&names, follow, lines),
        Command::Stop { name } => emit_actions(format, &[cluster.stop(&name)?]),
        Command::Kill { name } => emit_actions(format, &[cluster.kill(&name)?]),
        Command::Pause { name } => emit_actions(format, &[cluster.signal(&name, Signal::SIGSTOP)?]),
        Command::Resume { name } => emit_actions(format, &[cluster.signal(&name, Signal::SIGCONT)?]),
        Command::Start { name, binary } => emit_actions(format, &[cluster.start(&name, binary.as_deref())?]),
        Command::Replace { name, binary } => emit_actions(format, &[cluster.replace(&name, binary.as_deref())?]),
        Command::ReloadRouter => emit_actions(format, &Vec::from_iter(cluster.reload_router()?)),
    }
}

/// A started process, for `up`'s records and its JSON answer.
fn started(name: &str, process: Process) {
    log(format!("started {name} (pid {})", process.pid));
}

/// The most coordinator replicas a local cluster runs.
const MAX_COORDINATORS: usize = 5;

/// Replica 1 is `coordinator`, the others `coordinator-2`, `coordinator-3`, ...
fn coordinator_name(replica: usize) -> String {
    match replica {
        1 => "coordinator".to_owned(),
        other => format!("coordinator-{other}"),
    }
}

/// `cluster.json`'s value for a cluster `up` started.
fn cluster_file(cluster: &Cluster, workers: &[Worker], jia: bool) -> ClusterFile {
    let replicas = cluster.coordinators();
    ClusterFile {
        public_url: cluster.public_url(),
        coordinator_url: format!("http://{}", cluster.coordinator_listen()),
        replicas: match replicas.len() {
            1 => Vec::new(),
            _ => replicas
                .into_iter()
                .map(|(name, listen)| local::Node {
                    name,
                    url: format!("http://{listen}"),
                })
                .collect(),
        },
        workers: workers
            .iter()
            .map(|worker| local::WorkerEntry {
                cell: worker.cell.to_owned(),
                url: format!("http://{}", worker.listen),
                device_url: worker.device_url.clone(),
            })
            .collect(),
        jia_url: jia.then(|| format!("http://{}", cluster.jia_listen())),
        prometheus_url: cluster
            .options
            .prometheus
            .then(|| format!("http://{}", cluster.prometheus_listen())),
        durable: cluster.options.durable,
        ops_token_file: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (`--fsync` is read by the nodes' own parser: its syntax is tested there, in
    /// `shared::wal`.)
    #[test]
    fn cpu_lists_are_checked_as_taskset_takes_them() {
        for good in ["1", "0,2-3", "10-11"] {
            assert!(valid_cpu_list(good), "{good}");
        }
        for bad in ["", "a", "1,", "-1", "1--2"] {
            assert!(!valid_cpu_list(bad), "{bad}");
        }
    }

    #[test]
    fn the_status_table_has_the_old_columns() {
        let processes = vec![
            ProcessStatus {
                name: "worker-a".to_owned(),
                pid: Some(42),
                alive: true,
                healthy: true,
                health: Some(Health {
                    url: "http://127.0.0.3:3000/healthz".to_owned(),
                    status: 200,
                    body: Some("ok".to_owned()),
                }),
            },
            ProcessStatus {
                name: "nginx".to_owned(),
                pid: None,
                alive: false,
                healthy: false,
                health: None,
            },
        ];
        assert_eq!(
            status_table(&processes),
            "worker-a     running (pid 42)       GET http://127.0.0.3:3000/healthz -> 200 ok\nnginx        stopped"
        );
    }
}
