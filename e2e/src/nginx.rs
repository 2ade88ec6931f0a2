//! The real nginx in front of a sandbox cluster: found on the system (or the test skips,
//! except under CI), configured from the project's template, started, and stopped on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::ports::free_ports;
use deploy::supervise::{self, Process, Signal};

use crate::process::tail;
use crate::sandbox::{Cluster, CELL_NAMES};
use crate::scratch::ScratchDir;
use crate::wait::wait_until;

/// Where nginx is, if installed.
pub fn nginx_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nginx"))
            .find(|candidate| candidate.is_file())
    });
    on_path.or_else(|| {
        let fallback = PathBuf::from("/usr/sbin/nginx");
        fallback.is_file().then_some(fallback)
    })
}

/// An nginx started from a rendered config. On drop its master (the child, or the PID in
/// the pid file if it daemonized) gets SIGTERM, then SIGKILL with its workers if it lingers.
pub struct Nginx {
    child: Child,
    pid_file: PathBuf,
    pub error_log: PathBuf,
    /// The public server's access log (LTSV, `upstream:` the servers tried), written by
    /// nginx every 2 s.
    pub access_log: PathBuf,
}

impl Nginx {
    pub fn start(nginx: &Path, run_dir: &Path, config: &Path) -> Nginx {
        let error_log = run_dir.join("nginx-error.log");
        let mut command = Command::new(nginx);
        command
            .arg("-p")
            .arg(format!("{}/", run_dir.display()))
            .arg("-c")
            .arg(config);
        let help = Command::new(nginx).arg("-h").output().expect("running nginx -h");
        let help = String::from_utf8_lossy(&help.stderr).into_owned() + &String::from_utf8_lossy(&help.stdout);
        if help.contains("-e filename") {
            command.arg("-e").arg(&error_log);
        }
        let output = std::fs::File::create(run_dir.join("nginx.out")).expect("creating a log file");
        let stderr = output.try_clone().expect("cloning a file handle");
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(output))
            .stderr(Stdio::from(stderr))
            .spawn()
            .unwrap_or_else(|error| panic!("starting nginx: {error}"));
        Nginx {
            child,
            pid_file: run_dir.join("nginx.pid"),
            error_log,
            access_log: run_dir.join("nginx-access.log"),
        }
    }

    /// PIDs of the master(s) this guard owns: the child while it runs, and the pid file's.
    fn master_pids(&mut self) -> Vec<u32> {
        let mut pids = Vec::new();
        if matches!(self.child.try_wait(), Ok(None)) {
            pids.push(self.child.id());
        }
        if let Some(pid) = std::fs::read_to_string(&self.pid_file)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
        {
            if !pids.contains(&pid) && supervise::is_alive(pid) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Panics (with the error log) if nginx has stopped.
    #[track_caller]
    pub fn assert_running(&mut self) {
        if self.master_pids().is_empty() {
            let log = std::fs::read_to_string(&self.error_log).unwrap_or_default();
            panic!("nginx is not running; error log:\n{}", tail(&log, 40));
        }
    }
}

impl Drop for Nginx {
    /// Stops nginx as the local cluster does (the one supervisor): SIGTERM to each master,
    /// SIGKILL to it and its workers after 5 s.
    fn drop(&mut self) {
        for pid in self.master_pids() {
            Process::of(pid).stop(Signal::SIGTERM, Duration::from_secs(5), true);
        }
        let _ = self.child.wait();
    }
}

/// What the public nginx is configured with.
struct RenderRequest<'a> {
    nginx: &'a Path,
    run_dir: &'a Path,
    static_dir: &'a Path,
    public_listen: String,
    /// The coordinator's `host:port`, or each replica's.
    coordinators: Vec<String>,
    /// `<cell>=<worker host:port>,<nginx device listen>` per cell, in cell order.
    cells: Vec<String>,
    /// The file holding the cluster secret (the control server wants it).
    secret_file: PathBuf,
    /// The control server's loopback address.
    control: String,
    /// nginx's worker processes.
    worker_processes: usize,
}

/// Renders the project's nginx configuration into `run_dir` and returns its path: the one
/// place the sandbox renders it, through the renderer `isuctl cluster` and the deployment use
/// (`deploy::nginx`), checked with `nginx -t`.
fn render_config(request: &RenderRequest) -> PathBuf {
    let cells = request
        .cells
        .iter()
        .map(|cell| cell.parse().expect("a cell spec the sandbox made"))
        .collect();
    let options = deploy::nginx::Options {
        run_dir: request.run_dir.to_owned(),
        template: repository_root().join("nginx/nginx.conf.template"),
        out: None,
        static_dir: request.static_dir.to_owned(),
        public_listen: request.public_listen.clone(),
        public_server_name: "isucondition-1.t.isucon.dev".to_owned(),
        coordinators: request.coordinators.clone(),
        cells,
        placement: None,
        secret_file: request.secret_file.clone(),
        router_control: request.control.clone(),
        reset_placement: false,
        worker_processes: request.worker_processes.to_string(),
        device_servers: true,
        // The public requests' log (device posts left out): a test that fails on where a
        // request went prints it.
        access_log: true,
        tls: None,
        check: true,
        nginx_bin: request.nginx.to_owned(),
        prometheus: None,
    };
    deploy::nginx::render_local(&options).unwrap_or_else(|error| panic!("rendering nginx.conf: {error}"))
}

/// The checkout this crate is built from.
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the e2e crate sits in the repository")
        .to_path_buf()
}

/// Where a test's router lives, chosen before the cluster starts: the coordinator names its
/// map file and control server, and the workers their device servers.
pub struct RouterFront {
    /// nginx's run directory (configuration, pid file, logs, the map file, the secret).
    pub run_dir: PathBuf,
    /// Cell i's nginx device server.
    pub device_listens: Vec<String>,
    /// The control server (loopback), where the coordinator hands nginx each new map.
    pub control: String,
}

impl RouterFront {
    /// Fresh loopback ports for `cells` device servers and the control server.
    pub fn new(run_dir: &Path, cells: usize) -> RouterFront {
        RouterFront {
            run_dir: run_dir.to_owned(),
            device_listens: (0..cells)
                .map(|_| format!("127.0.0.1:{}", free_ports::<1>()[0]))
                .collect(),
            control: format!("127.0.0.1:{}", free_ports::<1>()[0]),
        }
    }

    /// The router's map file, which nginx starts from.
    pub fn map_file(&self) -> PathBuf {
        self.run_dir.join("placement.map")
    }

    /// The control server's base URL.
    pub fn control_url(&self) -> String {
        format!("http://{}", self.control)
    }

    /// The URLs devices are given for each cell: its nginx device server.
    pub fn device_urls(&self) -> Vec<String> {
        self.device_listens
            .iter()
            .map(|listen| format!("http://{listen}"))
            .collect()
    }

    /// The coordinator's flags that make it this router's map keeper.
    pub fn coordinator_args(&self) -> Vec<String> {
        vec![
            "--router-map".to_owned(),
            self.map_file().display().to_string(),
            "--router-url".to_owned(),
            self.control_url(),
        ]
    }
}

/// The public nginx in front of `cluster` with nginx device servers on fresh ports, from
/// `<scratch>/nginx`: see [`public_nginx_at`]. The coordinator does not know this router
/// (it routes by the default map).
pub async fn public_nginx(cluster: &Cluster, nginx: &Path, static_dir: &Path) -> (Nginx, String) {
    let front = RouterFront::new(&cluster.scratch.path.join("nginx"), cluster.workers.len());
    public_nginx_at(cluster, nginx, static_dir, &front).await
}

/// Starts the project's public nginx in front of `cluster` as `front` describes, serving
/// `static_dir`; returns it and its base URL once it answers `GET /`.
pub async fn public_nginx_at(
    cluster: &Cluster,
    nginx: &Path,
    static_dir: &Path,
    front: &RouterFront,
) -> (Nginx, String) {
    let cells = cluster
        .workers
        .iter()
        .enumerate()
        .map(|(index, worker)| {
            (
                CELL_NAMES[index].to_owned(),
                worker.trim_start_matches("http://").to_owned(),
            )
        })
        .collect::<Vec<_>>();
    let coordinators: Vec<String> = cluster
        .coordinators
        .iter()
        .map(|url| url.trim_start_matches("http://").to_owned())
        .collect();
    let setup = FrontSetup {
        nginx,
        static_dir,
        front,
        secret: &cluster.secret,
        coordinators: &coordinators,
        cells: &cells,
        worker_processes: 1,
    };
    start_front(&setup).await
}

/// What [`start_front`] starts nginx with.
pub struct FrontSetup<'a> {
    pub nginx: &'a Path,
    pub static_dir: &'a Path,
    pub front: &'a RouterFront,
    pub secret: &'a str,
    /// The coordinator's `host:port`, or each replica's (nginx balances over them).
    pub coordinators: &'a [String],
    /// Each cell's name and `host:port`, in map order.
    pub cells: &'a [(String, String)],
    pub worker_processes: usize,
}

/// Renders the project's nginx configuration as `setup` says (the secret written to the run
/// directory) and starts it; returns it and its public base URL once it answers `GET /`.
pub async fn start_front(setup: &FrontSetup<'_>) -> (Nginx, String) {
    let front = setup.front;
    let run_dir = front.run_dir.as_path();
    std::fs::create_dir_all(run_dir).expect("creating nginx's run directory");
    let secret_file = run_dir.join("secret");
    std::fs::write(&secret_file, format!("{}\n", setup.secret)).expect("writing the secret file");
    let public_port = free_ports::<1>()[0];
    let cells: Vec<String> = setup
        .cells
        .iter()
        .zip(&front.device_listens)
        .map(|((name, node), device)| format!("{name}={node},{device}"))
        .collect();
    let config = render_config(&RenderRequest {
        nginx: setup.nginx,
        run_dir,
        static_dir: setup.static_dir,
        public_listen: format!("127.0.0.1:{public_port}"),
        coordinators: setup.coordinators.to_vec(),
        cells,
        secret_file,
        control: front.control.clone(),
        worker_processes: setup.worker_processes,
    });
    let mut server = Nginx::start(setup.nginx, run_dir, &config);
    let public = format!("http://127.0.0.1:{public_port}");
    let root = format!("{public}/");
    let root = &root;
    wait_until(
        "nginx serves the public server",
        Duration::from_secs(10),
        move || async move {
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            let response = client.get(root).timeout(Duration::from_secs(1)).send().await.ok()?;
            (response.status() == 200).then_some(())
        },
    )
    .await;
    server.assert_running();
    (server, public)
}

/// A minimal front end (an `index.html` referencing one asset) in its own scratch directory,
/// so the static-file tests do not depend on whether `web/dist` is built.
pub fn fixture_front_end() -> ScratchDir {
    let dir = ScratchDir::new("web");
    std::fs::create_dir_all(dir.path.join("assets")).expect("creating assets/");
    std::fs::write(
        dir.path.join("index.html"),
        "<!DOCTYPE html>\n<title>fixture</title>\n<link rel=\"stylesheet\" href=\"/assets/app.css\">\n",
    )
    .expect("writing index.html");
    std::fs::write(dir.path.join("assets/app.css"), "body { margin: 0; }\n").expect("writing app.css");
    dir
}

/// nginx for the tests that need it; `None` (the test then skips, saying why) when it is not
/// installed, except under CI, where its absence is a failure.
pub fn nginx_or_skip() -> Option<PathBuf> {
    let nginx = nginx_binary();
    if nginx.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!("nginx is not installed (apt-get install -y nginx-light libnginx-mod-http-lua) and CI is set");
        }
        eprintln!("skipping: nginx is not installed (apt-get install -y nginx-light libnginx-mod-http-lua)");
    }
    nginx
}
