//! `isuctl hosts`: the cluster on real network hosts made on this machine (`scripts/hosts`
//! runs it).
//!
//! One network namespace per host, joined by netlab (a userspace router: this kernel has no
//! netem), running the very files `isuctl deploy render` makes for real hosts, with TLS from
//! a private CA made here:
//!
//! ```text
//! isucondition-1  coordinator + nginx   public 10.77.0.1   internal 10.78.0.1
//! isucondition-2  worker, cell a        public 10.77.0.2   internal 10.78.0.2
//! isucondition-3  worker, cell b        public 10.77.0.3   internal 10.78.0.3
//! isucondition-4  worker, cell c        (with --workers 3)
//! bench           the bench and JIA     public 10.77.0.100 (no internal address)
//! ```
//!
//! With `--coordinators 3` the coordinator is a group of three replicas: replica 1 beside
//! nginx on isucondition-1 (port 3000), replicas 2 and 3 beside the workers on
//! isucondition-2 and -3 (port 3001), as the inventory's `coordinator_replica` renders them.
//!
//! Each host runs `isuctl deploy run-host` over its rendered units in its namespace, with its
//! own directories bound where a real host has them (`hosts::plan` says which): its state,
//! its configuration, the certificates, and on the coordinator host the front end the render
//! bundled, so nginx's user reads it from the host's tree and never from the checkout.
//! The state of a running set of hosts (what `up` made and started) is
//! `run/hosts/state.json`; `down` undoes exactly that.
//!
//! The system test on these hosts (TLS, isolation, a partition, latency and loss, the
//! leader's host cut off) is `e2e/tests/hosts`, which `scripts/hosts test` runs.

pub mod plan;
mod processes;
mod tls;

use std::io::{BufRead as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

use deploy::external::{output_checked, run_checked};
use plan::{HostPlan, Paths, DOMAIN};

#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// Worker hosts (cells).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=3))]
    pub workers: u8,
    /// Coordinators: 1, or 3 replicas (beside nginx on isucondition-1 and beside the workers
    /// on isucondition-2 and -3).
    #[arg(long, default_value_t = 1, value_parser = parse_coordinators)]
    pub coordinators: u8,
    /// TLS on the public listeners.
    #[arg(long, value_enum, default_value_t = Tls::On)]
    pub tls: Tls,
    /// Do not build the release binaries first.
    #[arg(long)]
    pub no_build: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tls {
    On,
    Off,
}

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The cluster's processes on CPU 0, the bench and netlab on CPU 1, so the report's
    /// cluster CPU is the cluster's alone.
    #[arg(long)]
    pub pin: bool,
    /// The bench's own options (see bench --help).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub bench_args: Vec<String>,
}

/// `--coordinators`: 1 or 3.
pub fn parse_coordinators(text: &str) -> Result<u8, String> {
    text.parse::<u8>()
        .ok()
        .filter(|count| plan::COORDINATORS.contains(count))
        .ok_or_else(|| format!("{text:?}: 1 (one coordinator) or 3 (replicas)"))
}

/// What `up` made and started, kept in `state.json` as it goes, so `down` undoes exactly
/// that even after a failed `up`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    pub workers: u8,
    /// 1, or 3 replicas.
    #[serde(default = "one_coordinator")]
    pub coordinators: u8,
    pub tls: Option<Tls>,
    /// Network namespaces made (and their /etc/netns/<name> directories).
    pub netns: Vec<String>,
    /// Directories made on this machine for bind targets, outermost first.
    pub made: Vec<PathBuf>,
    /// Processes started, in order: `netlab` and each host's run-host (which leads its own
    /// process group).
    pub processes: Vec<Started>,
}

fn one_coordinator() -> u8 {
    1
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Started {
    pub name: String,
    pub pid: u32,
    /// Its executable: a recorded PID is ours only while it still runs this (after a reboot
    /// or a crash the number may be someone else's).
    pub exe: PathBuf,
}

/// What `up` reports.
#[derive(Debug, Serialize)]
pub struct UpReport {
    pub workers: u8,
    pub coordinators: u8,
    pub tls: Tls,
    pub url: String,
    pub hosts: Vec<String>,
}

/// What `status` reports.
#[derive(Debug, Serialize)]
pub struct Status {
    pub up: bool,
    pub workers: Option<u8>,
    pub coordinators: Option<u8>,
    pub tls: Option<Tls>,
    pub processes: Vec<ProcessStatus>,
    pub nodes: Vec<(String, u32)>,
}

/// One process `up` started, and whether it still runs.
#[derive(Debug, Serialize)]
pub struct ProcessStatus {
    pub name: String,
    pub pid: u32,
    pub running: bool,
}

/// The hosts of this checkout: where their state lies and how to reach them.
#[derive(Debug, Clone)]
pub struct Hosts {
    pub paths: Paths,
    /// This checkout.
    pub repo: PathBuf,
    /// The isuctl each host runs `deploy run-host` with (this program, unless a test says).
    pub isuctl: PathBuf,
}

impl Hosts {
    /// The hosts of the checkout `repo`: their state in `$ISU_HOSTS_DIR`, else
    /// `<repo>/run/hosts`.
    pub fn from_env(repo: PathBuf) -> anyhow::Result<Hosts> {
        let state = match std::env::var_os("ISU_HOSTS_DIR") {
            Some(dir) => std::path::absolute(PathBuf::from(dir))?,
            None => repo.join("run/hosts"),
        };
        // Where `up` builds them: CARGO_TARGET_DIR when set, as cargo does.
        let release = deploy::external::target_dir(&repo).join("release");
        let built = repo.join("web/dist");
        let web = if built.join("index.html").is_file() {
            built
        } else {
            state.join("web-unbuilt")
        };
        Ok(Hosts {
            paths: Paths { state, release, web },
            repo,
            isuctl: std::env::current_exe().context("finding this program")?,
        })
    }

    fn state_file(&self) -> PathBuf {
        self.paths.state.join("state.json")
    }

    fn socket(&self) -> PathBuf {
        self.paths.state.join("netlab.sock")
    }

    /// The state of the hosts that are up, or none.
    pub fn state(&self) -> anyhow::Result<Option<State>> {
        let path = self.state_file();
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(
                serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?,
            )),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error).with_context(|| format!("reading {}", path.display())),
        }
    }

    fn save(&self, state: &State) -> anyhow::Result<()> {
        let path = self.state_file();
        let temporary = path.with_extension("json.new");
        std::fs::write(&temporary, serde_json::to_vec_pretty(state)?)?;
        std::fs::rename(&temporary, &path)?;
        Ok(())
    }

    /// The running hosts' state, or an error telling how to start them.
    fn up_state(&self) -> anyhow::Result<State> {
        self.state()?.context("not up (isuctl hosts up)")
    }

    /// The hosts of the running cluster (all of them when nothing is up: every name is valid).
    pub fn plan(&self) -> anyhow::Result<Vec<HostPlan>> {
        let (workers, coordinators) = self
            .state()?
            .map_or((3, 3), |state| (state.workers, state.coordinators));
        Ok(plan::hosts(usize::from(workers), coordinators))
    }

    fn scheme(&self) -> anyhow::Result<&'static str> {
        Ok(match self.up_state()?.tls {
            Some(Tls::On) => "https",
            _ => "http",
        })
    }

    pub fn site(&self) -> anyhow::Result<String> {
        Ok(format!("{}://isucondition-1.{DOMAIN}", self.scheme()?))
    }

    pub fn up(&self, args: &UpArgs) -> anyhow::Result<UpReport> {
        require_root()?;
        which("curl")?;
        if self.state_file().exists() {
            bail!("already up ({}); isuctl hosts down first", self.state_file().display());
        }
        deploy::prometheus::ensure_installed()?;
        if !args.no_build {
            // deploy is not run, but built with the rest as always: the same feature set of
            // the shared dependencies, so the release binaries already built are reused.
            deploy::external::build_release(&self.repo, &["coordinator", "worker", "bench", "netlab", "deploy"])?;
        }
        let paths = &self.paths;
        let hosts = plan::hosts(usize::from(args.workers), args.coordinators);
        for host in &hosts {
            if netns_exists(&host.netns)? {
                bail!(
                    "namespace {ns} exists (left by an earlier run? ip netns del {ns})",
                    ns = host.netns
                );
            }
        }
        for dir in ["rendered", "roots", "logs"] {
            let dir = paths.state.join(dir);
            if dir.exists() {
                std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
            }
        }
        std::fs::create_dir_all(paths.state.join("logs"))?;
        tls::make_certificates(&paths.tls())?;
        self.stage_unbuilt_front_end()?;
        let inventory = paths.state.join("inventory.toml");
        std::fs::write(&inventory, plan::inventory(&hosts, args.tls == Tls::On, paths))?;
        let mut state = State {
            workers: args.workers,
            coordinators: args.coordinators,
            tls: Some(args.tls),
            ..State::default()
        };
        self.save(&state)?;
        let nginx_template = self.repo.join("nginx/nginx.conf.template");
        deploy::deployment::render(&inventory, Some(&paths.state.join("rendered")), &nginx_template)?;
        // The front end as a real host has it: readable by nginx's user.
        let web = paths
            .rendered("isucondition-1")
            .join(plan::WEB_DIR.trim_start_matches('/'));
        make_world_readable(&web)?;

        self.make_namespaces(&hosts, &mut state)?;
        self.start_netlab(&hosts, &mut state)?;
        for host in hosts.iter().filter(|host| host.is_cluster_host()) {
            let pid = self.start_host(host, &self.isuctl)?;
            state.processes.push(Started {
                name: host.name.clone(),
                pid,
                exe: self.isuctl.clone(),
            });
            self.save(&state)?;
        }
        let url = self.wait_until_serving(&hosts, args.tls)?;
        Ok(UpReport {
            workers: args.workers,
            coordinators: args.coordinators,
            tls: args.tls,
            url,
            hosts: hosts.iter().map(|host| host.name.clone()).collect(),
        })
    }

    /// One network namespace per host, with its /etc/netns hosts file, and the directories
    /// the hosts' mounts need; each recorded in `state` as it is made.
    fn make_namespaces(&self, hosts: &[HostPlan], state: &mut State) -> anyhow::Result<()> {
        let etc_hosts = plan::etc_hosts(hosts);
        for host in hosts {
            run_checked(Command::new("ip").args(["netns", "add", &host.netns]))?;
            state.netns.push(host.netns.clone());
            self.save(state)?;
            run_checked(Command::new("ip").args(["netns", "exec", &host.netns, "ip", "link", "set", "lo", "up"]))?;
            let dir = Path::new("/etc/netns").join(&host.netns);
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("hosts"), &etc_hosts)?;
        }
        for point in plan::mount_points(hosts, &self.paths) {
            for dir in plan::missing_directories(&point, Path::exists) {
                std::fs::create_dir(&dir).with_context(|| format!("making {}", dir.display()))?;
                state.made.push(dir);
                self.save(state)?;
            }
        }
        Ok(())
    }

    /// netlab, the network between the hosts, once it says it is ready.
    fn start_netlab(&self, hosts: &[HostPlan], state: &mut State) -> anyhow::Result<()> {
        let netlab = self.paths.release.join("netlab");
        let mut command = Command::new(&netlab);
        command.arg("run").arg("--control").arg(self.socket());
        for port in plan::netlab_ports(hosts) {
            command.arg("--port").arg(port.to_string());
        }
        let logs = self.paths.state.join("logs");
        let child = command
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(logs.join("netlab.out"))?)
            .stderr(std::fs::File::create(logs.join("netlab.log"))?)
            .spawn()
            .with_context(|| format!("starting {}", netlab.display()))?;
        state.processes.push(Started {
            name: "netlab".to_owned(),
            pid: child.id(),
            exe: netlab.clone(),
        });
        self.save(state)?;
        wait_for("netlab", 10, &self.paths.state, || {
            std::fs::read_to_string(logs.join("netlab.out")).is_ok_and(|text| text.lines().any(|l| l == "ready"))
        })
    }

    /// Waits until every node, replica, device server and nginx answers; the site's URL.
    fn wait_until_serving(&self, hosts: &[HostPlan], tls: Tls) -> anyhow::Result<String> {
        let paths = &self.paths;
        let scheme = if tls == Tls::On { "https" } else { "http" };
        for host in hosts.iter().filter(|host| host.is_cluster_host()) {
            let internal = host.internal_address.expect("a cluster host has one");
            wait_for(&format!("node on {}", host.name), 60, &paths.state, || {
                self.curl_status(&host.netns, &format!("http://{internal}:3000/healthz"), &[]) == "200"
            })?;
            if let (Some(url), Some(_)) = (host.coordinator_url(), host.replica) {
                // A replica is healthy once it serves: its group has a leader that brought
                // the workers up, and it caught up.
                wait_for(
                    &format!("coordinator replica on {}", host.name),
                    60,
                    &paths.state,
                    || self.curl_status(&host.netns, &format!("{url}/healthz"), &[]) == "200",
                )?;
            }
            if host.role != plan::Role::Coordinator {
                wait_for(&format!("device server of {}", host.name), 30, &paths.state, || {
                    self.curl_status("isu-hb", &format!("{scheme}://{}/", host.server_name()), &[]) != "000"
                })?;
            }
        }
        let url = format!("{scheme}://isucondition-1.{DOMAIN}");
        wait_for("nginx on isucondition-1", 30, &paths.state, || {
            self.curl_status("isu-hb", &format!("{url}/"), &[]) == "200"
        })?;
        wait_for("prometheus on isucondition-1", 30, &paths.state, || {
            self.curl_status("isu-h1", "http://127.0.0.1:9090/-/ready", &[]) == "200"
        })?;
        Ok(url)
    }

    /// Without a built front end (`scripts/web build`), the site serves the source
    /// `index.html` alone: enough for its checks, said once.
    fn stage_unbuilt_front_end(&self) -> anyhow::Result<()> {
        if self.paths.web.join("index.html").is_file() && !self.paths.web.starts_with(&self.paths.state) {
            return Ok(());
        }
        eprintln!("hosts: the front end is not built (scripts/web build): serving web/index.html alone");
        std::fs::create_dir_all(&self.paths.web)?;
        std::fs::copy(self.repo.join("web/index.html"), self.paths.web.join("index.html"))?;
        Ok(())
    }

    /// Starts one host: `run-host` over its rendered units, in its namespace, with its
    /// directories bound (in a mount namespace of its own), leading its own process group.
    fn start_host(&self, host: &HostPlan, exe: &Path) -> anyhow::Result<u32> {
        let paths = &self.paths;
        let root = paths.root(&host.name);
        let logs = paths.logs(&host.name);
        std::fs::create_dir_all(root.join("var-lib"))?;
        std::fs::create_dir_all(root.join("credentials"))?;
        std::fs::create_dir_all(&logs)?;
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &host.netns])
            .arg(exe)
            .args(["deploy", "run-host", "--units"])
            .arg(paths.rendered(&host.name).join("etc/systemd/system"))
            .arg("--log-dir")
            .arg(&logs)
            .arg("--credentials")
            .arg(root.join("credentials"));
        for bind in plan::binds(host, paths) {
            command.arg("--bind").arg(bind.to_string());
        }
        let out = std::fs::File::create(logs.join("run-host.out"))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", host.name))?;
        Ok(child.id())
    }

    /// Stops what `up` started (the hosts first, so their nodes stop cleanly, the network
    /// last) and deletes what it made.
    pub fn down(&self) -> anyhow::Result<()> {
        let Some(mut state) = self.state()? else {
            return Ok(());
        };
        state.processes.retain(processes::still_ours);
        self.save(&state)?;
        for started in state.processes.iter().rev() {
            processes::signal(started.pid as i32, nix::sys::signal::Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline
            && state
                .processes
                .iter()
                .any(|started| deploy::supervise::is_alive(started.pid))
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        for started in &state.processes {
            processes::signal(started.pid as i32, nix::sys::signal::Signal::SIGKILL);
            if started.name != "netlab" {
                // A host's run-host leads its own process group: nothing it started is left.
                processes::signal(-(started.pid as i32), nix::sys::signal::Signal::SIGKILL);
            }
        }
        state.processes.clear();
        self.save(&state)?;
        for netns in &state.netns {
            let _ = Command::new("ip")
                .args(["netns", "del", netns])
                .stderr(Stdio::null())
                .status();
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(netns));
        }
        for dir in state.made.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
        for file in [self.socket(), self.paths.state.join("secret-header"), self.state_file()] {
            let _ = std::fs::remove_file(file);
        }
        Ok(())
    }

    /// The hosts and their processes (`up` false when nothing is up).
    pub fn status(&self) -> anyhow::Result<Status> {
        let Some(state) = self.state()? else {
            return Ok(Status {
                up: false,
                workers: None,
                coordinators: None,
                tls: None,
                processes: Vec::new(),
                nodes: Vec::new(),
            });
        };
        Ok(Status {
            up: true,
            workers: Some(state.workers),
            coordinators: Some(state.coordinators),
            tls: state.tls,
            processes: state
                .processes
                .iter()
                .map(|started| ProcessStatus {
                    name: started.name.clone(),
                    pid: started.pid,
                    running: deploy::supervise::is_alive(started.pid),
                })
                .collect(),
            nodes: processes::node_pids(&state),
        })
    }

    /// Runs the bench on the bench host (its output to `output` when given, else ours).
    pub fn bench(&self, args: &BenchArgs, output: Option<&Path>) -> anyhow::Result<std::process::ExitStatus> {
        let state = self.up_state()?;
        let mut command = Command::new("ip");
        command.args(["netns", "exec", "isu-hb"]);
        // `--pin` may come among the bench's options too, as the script took it.
        let pin = args.pin || args.bench_args.iter().any(|arg| arg == "--pin");
        let bench_args = args.bench_args.iter().filter(|arg| *arg != "--pin");
        if pin {
            // As if the bench had its own machine: the cluster (nodes, nginx) on CPU 0, the
            // bench and netlab (the network, no host's cost) on CPU 1.
            for started in &state.processes {
                processes::pin_tree(started.pid, if started.name == "netlab" { 1 } else { 0 });
            }
            command.args(["taskset", "-c", "1"]);
        }
        let out = self.paths.state.join("bench").join(shared::clock::timestamp());
        std::fs::create_dir_all(&out)?;
        command
            .arg(self.paths.release.join("bench"))
            .arg("--target")
            .arg(self.site()?)
            .arg("--jia-listen")
            .arg(format!("{}:5000", plan::BENCH_ADDRESS))
            .arg("--ca-cert")
            .arg(self.paths.tls().join("ca.pem"))
            .arg("--out")
            .arg(&out);
        for (name, pid) in processes::node_pids(&state) {
            command.arg("--process").arg(format!("{name}={pid}"));
        }
        command.args(bench_args);
        if let Some(output) = output {
            let file = std::fs::File::create(output)?;
            command.stdout(file.try_clone()?).stderr(file);
        }
        command.stdin(Stdio::null());
        command.status().context("running the bench on the bench host")
    }

    /// One netlab control command; its answer's lines.
    pub fn net(&self, command: &str) -> anyhow::Result<Vec<String>> {
        self.up_state()?;
        match netlab::control::request(&self.socket(), command)? {
            Ok(lines) => Ok(lines),
            Err(message) => bail!("netlab: {message}"),
        }
    }

    /// Runs a command on a host (its namespace; each call its own mounts).
    pub fn exec(&self, host: &str, command: &[String]) -> anyhow::Result<std::process::ExitStatus> {
        let plan = self.plan()?;
        let host = plan::find(&plan, host)?;
        Command::new("ip")
            .args(["netns", "exec", &host.netns])
            .args(command)
            .status()
            .context("running ip netns exec")
    }

    /// The HTTP status `url` answers from namespace `netns` ("000": no answer), through curl
    /// with the hosts' CA.
    pub fn curl_status(&self, netns: &str, url: &str, extra: &[&str]) -> String {
        let output = Command::new("ip")
            .args([
                "netns",
                "exec",
                netns,
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
            ])
            .args(["--max-time", "3", "--cacert"])
            .arg(self.paths.tls().join("ca.pem"))
            .args(extra)
            .arg(url)
            .stderr(Stdio::null())
            .output();
        match output {
            Ok(output) if !output.stdout.is_empty() => String::from_utf8_lossy(&output.stdout).into_owned(),
            _ => "000".to_owned(),
        }
    }

    /// A curl header file with the secret (mode 600): the secret never appears in argv.
    pub fn secret_header(&self) -> anyhow::Result<String> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = self.paths.state.join("secret-header");
        if !file.is_file() {
            let secret = std::fs::read_to_string(self.paths.state.join("secret"))?;
            let mut handle = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&file)?;
            writeln!(handle, "{}: {}", shared::protocol::SECRET_HEADER, secret.trim())?;
        }
        Ok(format!("@{}", file.display()))
    }

    /// NAME=PID of every node process of the running hosts (`coordinator`, `worker-<cell>`,
    /// `nginx`, …).
    pub fn nodes(&self) -> anyhow::Result<Vec<(String, u32)>> {
        Ok(processes::node_pids(&self.up_state()?))
    }
}

fn require_root() -> anyhow::Result<()> {
    if !nix::unistd::Uid::effective().is_root() {
        bail!("needs root (network namespaces)");
    }
    which("ip").context("needs iproute2 (apt-get install -y iproute2)")
}

/// An error unless `program` is on the PATH.
pub(crate) fn which(program: &str) -> anyhow::Result<()> {
    anyhow::ensure!(deploy::external::on_path(program), "needs {program}");
    Ok(())
}

fn netns_exists(name: &str) -> anyhow::Result<bool> {
    let output = output_checked(Command::new("ip").args(["netns", "list"]))?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .any(|line| line.split_whitespace().next() == Some(name)))
}

/// Polls `ready` every 200 ms for up to `seconds`.
fn wait_for(what: &str, seconds: u64, state: &Path, mut ready: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !ready() {
        if Instant::now() >= deadline {
            bail!(
                "{what}: not ready after {seconds}s (logs in {})",
                state.join("logs").display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// Directories 755 and files 644 under `dir`: what nginx's user needs of the front end,
/// whatever umask rendered it.
fn make_world_readable(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("{}: the front end was not rendered", dir.display()))?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            make_world_readable(&entry.path())?;
        } else {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o644))?;
        }
    }
    Ok(())
}

/// Reads the lines of a file that start with one of `prefixes` (the bench's summary lines).
pub fn lines_starting(path: &Path, prefixes: &[&str]) -> Vec<String> {
    let Ok(file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter(|line| prefixes.iter().any(|prefix| line.starts_with(prefix)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_round_trips_and_down_of_nothing_is_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = Hosts {
            paths: Paths {
                state: dir.path().to_owned(),
                release: dir.path().join("release"),
                web: dir.path().join("web"),
            },
            repo: dir.path().to_owned(),
            isuctl: dir.path().join("isuctl"),
        };
        assert!(hosts.state().unwrap().is_none());
        hosts.down().unwrap();
        assert!(hosts.net("stats").unwrap_err().to_string().contains("not up"));
        let state = State {
            workers: 3,
            coordinators: 1,
            tls: Some(Tls::Off),
            netns: Vec::new(),
            made: vec![dir.path().join("made")],
            processes: vec![Started {
                name: "netlab".into(),
                pid: u32::MAX - 1,
                exe: "/nonexistent/netlab".into(),
            }],
        };
        std::fs::create_dir(dir.path().join("made")).unwrap();
        hosts.save(&state).unwrap();
        let read = hosts.state().unwrap().unwrap();
        assert_eq!((read.workers, read.tls), (3, Some(Tls::Off)));
        assert_eq!(hosts.site().unwrap(), "http://isucondition-1.t.isucon.dev");
        hosts.down().unwrap();
        assert!(hosts.state().unwrap().is_none());
        assert!(!dir.path().join("made").exists(), "what up made is removed");
    }
}
