//! The sandbox: a real cluster (the coordinator and worker binaries as child processes on
//! 127.0.0.1 with free ports) around an in-process JIA simulator; its builder
//! ([`ClusterOptions`]), and the node operations tests make (kill, start, add a worker, logs).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use deploy::node_args::{CellEndpoint, CoordinatorArgs, NodeArgs, ReplicaGroup, WorkerArgs};
use jia_sim::condition::SentCondition;
use jia_sim::jwt::JwtSigner;
use jia_sim::{JiaConfig, JiaHandle, JiaSimulator, UrlPolicy};
use reqwest::StatusCode;
use serde_json::json;

use crate::agent::{Agent, Routes, REQUEST_TIMEOUT};
use crate::ports::free_ports;
use crate::process::{node_binary, tail, NodeProcess};
use crate::reply::Reply;
use crate::scratch::ScratchDir;
use crate::wait::wait_until;

/// How long a node may take to become healthy.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Devices stop by themselves after this long, whatever a test does.
const DEVICE_RUN_FOR: Duration = Duration::from_secs(60);

/// How a test cluster is built.
#[derive(Clone)]
pub struct ClusterOptions {
    /// How long the JIA simulator waits before answering an activation (its device already posts).
    pub activation_delay: Duration,
    /// How many workers (cells a, b, c, ...).
    pub workers: usize,
    /// How many coordinators: 1, or a group of replicas (`--replica`), each with its own
    /// data directory (kept across restarts, durable or not).
    pub coordinators: usize,
    /// `target_base_url` of each cell's devices; default: the worker's own device server
    /// (`--device-listen`), as `scripts/cluster` runs it.
    pub device_urls: Option<Vec<String>>,
    /// Extra coordinator flags (dataset, keys, static directory).
    pub coordinator_args: Vec<String>,
    /// Signs sign-in JWTs; default: the project's key.
    pub signer: Option<JwtSigner>,
    /// Extra worker flags (both workers).
    pub worker_args: Vec<String>,
    /// Every node keeps a durable log in `<scratch>/data/<node>` (`--data-dir`), kept across restarts.
    pub durable: bool,
    /// How long the simulator's device of each activated ISU posts (zero: not at all).
    pub device_run_for: Duration,
    /// `FAILPOINTS` for every node's first start (`node_http::fail_points_from_env`); nodes
    /// started again run without (see [`Cluster::fail_points`]).
    pub fail_points: Option<String>,
    /// Every node's environment names this HTTP proxy (`HTTP_PROXY`, `HTTPS_PROXY`,
    /// `ALL_PROXY`, in both cases) and `NO_PROXY` names only the JIA simulator, which then
    /// listens on [`JIA_OUTSIDE_HOST`]: calls to JIA may take the proxy, calls between nodes
    /// must not. Default: no proxy at all.
    pub proxy: Option<String>,
}

/// Where the JIA simulator listens when the nodes are given a proxy: an address of its own,
/// so that `NO_PROXY` can name it and no node.
pub const JIA_OUTSIDE_HOST: &str = "127.0.0.5";
/// The proxy variables reqwest reads, in both cases.
const PROXY_VARIABLES: [&str; 6] = [
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
];

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            activation_delay: Duration::from_millis(50),
            workers: 2,
            coordinators: 1,
            device_urls: None,
            coordinator_args: Vec::new(),
            signer: None,
            worker_args: Vec::new(),
            durable: false,
            device_run_for: DEVICE_RUN_FOR,
            fail_points: None,
            proxy: None,
        }
    }
}

/// A running cluster. Dropping it kills the node processes and stops the simulator.
pub struct Cluster {
    /// The coordinator (the first replica of a group).
    pub coordinator: String,
    /// Every coordinator replica (the coordinator alone without a group); replica `i + 1`
    /// is node `workers.len() + i`.
    pub coordinators: Vec<String>,
    /// Worker A (even first hex digit), worker B (odd), then any further cells.
    pub workers: Vec<String>,
    /// The workers' own device servers (`--device-listen`): device posts only.
    pub device_servers: Vec<String>,
    pub jia: JiaHandle,
    pub secret: String,
    pub signer: JwtSigner,
    /// Declared before `scratch`: the processes die before their log directory goes.
    processes: Vec<NodeProcess>,
    /// Settings of every worker and then the coordinator(s), to start them again.
    node_args: Vec<NodeArgs>,
    /// Node names in the same order (`worker-a`, ..., `coordinator`).
    names: Vec<&'static str>,
    /// `FAILPOINTS` of nodes (re)started from now on.
    pub fail_points: Option<String>,
    /// The options the cluster was built with (for [`Cluster::add_worker`]).
    options: ClusterOptions,
    pub scratch: ScratchDir,
}

/// Cell names of test clusters, in order.
pub const CELL_NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
const WORKER_NAMES: [&str; 6] = ["worker-a", "worker-b", "worker-c", "worker-d", "worker-e", "worker-f"];
const COORDINATOR_NAMES: [&str; 5] = [
    "coordinator",
    "coordinator-2",
    "coordinator-3",
    "coordinator-4",
    "coordinator-5",
];

/// Starts a cluster with the default options and initializes it.
pub async fn spawn_cluster() -> Cluster {
    spawn_cluster_with(ClusterOptions::default()).await
}

/// Starts the workers (A and B by default) and the coordinator on free ports, waits until
/// every `/healthz` answers 200, then sends `POST /initialize` with the simulator's URL.
pub async fn spawn_cluster_with(options: ClusterOptions) -> Cluster {
    // A port handed out by `free_ports` can be taken by another test's outgoing connection
    // (same ephemeral range) before the node binds it: such a start is tried again.
    for attempt in 1.. {
        match try_spawn_cluster(options.clone()).await {
            Ok(cluster) => return cluster,
            Err(failure) if attempt < 3 && failure.contains("in use") => {
                eprintln!("a node could not bind its port; starting the cluster again: {failure}");
            }
            Err(failure) => panic!("{failure}"),
        }
    }
    unreachable!("the loop returns or panics")
}

/// The cluster's JIA simulator: on loopback, or behind the proxy's outside address.
async fn start_jia(options: &ClusterOptions) -> JiaHandle {
    let jia_host: std::net::IpAddr = match options.proxy {
        Some(_) => JIA_OUTSIDE_HOST.parse().expect("an IPv4 address"),
        None => std::net::Ipv4Addr::LOCALHOST.into(),
    };
    JiaSimulator::start(JiaConfig {
        listen: std::net::SocketAddr::new(jia_host, 0),
        url_policy: UrlPolicy::AnyUrl,
        accept_any_uuid: false,
        activation_delay: options.activation_delay,
        run_for: options.device_run_for,
        ..JiaConfig::default()
    })
    .await
    .expect("starting the JIA simulator")
}

async fn try_spawn_cluster(options: ClusterOptions) -> Result<Cluster, String> {
    let count = options.workers;
    assert!(
        (1..=CELL_NAMES.len()).contains(&count),
        "test clusters have 1 to 6 workers"
    );
    let replicas = options.coordinators;
    assert!(
        (1..=COORDINATOR_NAMES.len()).contains(&replicas),
        "test clusters have 1 to 5 coordinators"
    );
    let ports = free_ports::<17>();
    let coordinator_ports: Vec<u16> = [ports[0]]
        .into_iter()
        .chain(ports[13..12 + replicas].iter().copied())
        .collect();
    let (worker_ports, device_ports) = (&ports[1..1 + count], &ports[7..7 + count]);
    let scratch = ScratchDir::new("cluster");
    let secret = format!("test-secret-{}", uuid::Uuid::new_v4().simple());
    let coordinators: Vec<String> = coordinator_ports
        .iter()
        .map(|port| format!("http://127.0.0.1:{port}"))
        .collect();
    let coordinator = coordinators[0].clone();
    let workers: Vec<String> = worker_ports
        .iter()
        .map(|port| format!("http://127.0.0.1:{port}"))
        .collect();
    let jia = start_jia(&options).await;
    let device_servers: Vec<String> = device_ports
        .iter()
        .map(|port| format!("http://127.0.0.1:{port}"))
        .collect();
    let device_urls = options.device_urls.clone().unwrap_or_else(|| device_servers.clone());

    let mut names: Vec<&'static str> = WORKER_NAMES[..count].to_vec();
    names.extend(&COORDINATOR_NAMES[..replicas]);
    let mut node_args: Vec<NodeArgs> = (0..count)
        .map(|index| {
            NodeArgs::Worker(worker_args(
                &options,
                &scratch,
                index,
                worker_ports[index],
                device_ports[index],
                &coordinators,
                &secret,
            ))
        })
        .collect();
    for (replica, port) in coordinator_ports.iter().enumerate() {
        let mut args = CoordinatorArgs {
            listen: format!("127.0.0.1:{port}"),
            workers: (0..count)
                .map(|index| CellEndpoint {
                    cell: CELL_NAMES[index].to_owned(),
                    url: workers[index].clone(),
                    device_url: device_urls[index].clone(),
                })
                .collect(),
            cluster_secret: Some(secret.clone()),
            jia_service_url: Some(jia.url()),
            extra: options.coordinator_args.clone(),
            ..CoordinatorArgs::default()
        };
        if replicas > 1 {
            args.group = Some(ReplicaGroup {
                id: replica as u64 + 1,
                members: (1..).zip(coordinators.iter().cloned()).collect(),
            });
            args.data_dir = Some(scratch.path.join("data").join(COORDINATOR_NAMES[replica]));
        } else {
            args.data_dir = durable_data_dir(&options, &scratch, "coordinator");
        }
        node_args.push(NodeArgs::Coordinator(args));
    }
    let fail_points = options.fail_points.clone();
    let processes = (0..count + replicas)
        .map(|index| {
            NodeProcess::spawn(
                names[index],
                node_command(&node_args[index], fail_points.as_deref(), options.proxy.as_deref()),
                &scratch.path,
            )
        })
        .collect();

    let mut cluster = Cluster {
        coordinator,
        coordinators,
        workers,
        device_servers,
        jia,
        secret,
        signer: options.signer.clone().unwrap_or_else(JwtSigner::project_default),
        processes,
        node_args,
        names,
        fail_points,
        options,
        scratch,
    };
    if let Some(exited) = cluster.wait_for_health().await {
        return Err(exited);
    }
    let reply = cluster.initialize().await;
    assert_eq!(reply.json(200), json!({"language": "rust"}));
    Ok(cluster)
}

impl Cluster {
    pub fn routes(&self) -> Routes {
        Routes::Direct {
            coordinator: self.coordinator.clone(),
            workers: self.workers.clone(),
        }
    }

    /// A client with an empty cookie jar.
    pub fn agent(&self) -> Agent {
        Agent::new(self.routes())
    }

    /// A client signed in as `user` (bench style: the bare JWT in `Authorization`).
    pub async fn sign_in(&self, user: &str) -> Agent {
        sign_in_with(self.agent(), &self.signer, user).await
    }

    /// `POST /initialize` with the simulator's URL.
    pub async fn initialize(&self) -> Reply {
        let body = json!({"jia_service_url": self.jia.url()}).to_string();
        self.agent().post_json("/initialize", &body).await
    }

    /// A UUID starting with `first_digit` (its parity picks the shard), known to the simulator.
    pub fn known_uuid(&self, first_digit: char, serial: u32) -> String {
        let uuid = test_uuid(first_digit, serial);
        self.make_known(&uuid);
        uuid
    }

    /// A UUID in placement slot `slot` (its first two hex digits), known to the simulator.
    pub fn known_uuid_in_slot(&self, slot: u8, serial: u32) -> String {
        let uuid = format!("{slot:02x}{serial:06x}-0000-4000-8000-{serial:012x}");
        self.make_known(&uuid);
        uuid
    }

    /// Makes `uuid` known to the simulator, with the character [`Cluster::character_of`] gives.
    pub fn make_known(&self, uuid: &str) {
        self.jia.add_isu(uuid, self.character_of(uuid));
    }

    /// The character the simulator gives to a UUID made by [`Cluster::known_uuid`].
    pub fn character_of(&self, uuid: &str) -> &'static str {
        jia_sim::condition::character_for_uuid(uuid)
    }

    /// Posts conditions for `uuid` as its device would, straight to the owning worker.
    pub async fn post_conditions(&self, uuid: &str, conditions: &[SentCondition]) -> Reply {
        let body = serde_json::to_string(conditions).expect("conditions serialise");
        self.agent().post_json(&format!("/api/condition/{uuid}"), &body).await
    }

    /// A plain client for the internal and debug routes.
    pub fn raw_client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .no_proxy()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("building an HTTP client")
    }

    /// `GET url` with the cluster secret (internal, metrics and debug routes); the error when
    /// the node does not answer.
    pub async fn internal_get(&self, url: &str) -> reqwest::Result<reqwest::Response> {
        self.raw_client()
            .get(url)
            .header(shared::protocol::SECRET_HEADER, &self.secret)
            .send()
            .await
    }

    /// Waits until every node answers `/healthz`; panics, with the end of its log, if a node
    /// exited meanwhile.
    pub async fn wait_until_healthy(&mut self) {
        if let Some(exited) = self.wait_for_health().await {
            panic!("{exited}");
        }
    }

    /// Waits until every node answers `/healthz`; a node that exited meanwhile, with the
    /// end of its log.
    async fn wait_for_health(&mut self) -> Option<String> {
        let client = self.raw_client();
        let urls: Vec<String> = self
            .workers
            .iter()
            .chain(&self.coordinators)
            .map(|base| format!("{base}/healthz"))
            .collect();
        let deadline = Instant::now() + READY_TIMEOUT;
        for url in urls {
            loop {
                if let Some(exited) = self.exited_node() {
                    return Some(exited);
                }
                let healthy = client
                    .get(&url)
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await
                    .is_ok_and(|response| response.status() == StatusCode::OK);
                if healthy {
                    break;
                }
                assert!(Instant::now() < deadline, "{url} not healthy after {READY_TIMEOUT:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        None
    }

    /// A node that has exited: its name, status and the end of its log.
    fn exited_node(&mut self) -> Option<String> {
        for process in &mut self.processes {
            if let Some(status) = process.child.try_wait().expect("polling a child") {
                let log = std::fs::read_to_string(&process.log).unwrap_or_default();
                return Some(format!("{} exited with {status}:\n{}", process.name, tail(&log, 10)));
            }
        }
        None
    }

    /// Kills worker `index` (0 = A, 1 = B) and starts a fresh one on the same
    /// address (with the same data directory, if durable); returns once it listens.
    pub fn restart_worker(&mut self, index: usize) {
        self.kill_node(index);
        self.start_node(index);
    }

    /// SIGKILLs node `index` (0 = worker A, 1 = worker B, ..., then the coordinator) by its PID and reaps it.
    pub fn kill_node(&mut self, index: usize) {
        let process = &mut self.processes[index];
        let _ = process.child.kill();
        let _ = process.child.wait();
    }

    /// Sends `signal` (`STOP`, `CONT`) to node `index`, by its PID (a stopped node is still
    /// killed on drop: SIGKILL needs no CONT).
    pub fn signal_node(&self, index: usize, signal: &str) {
        let pid = self.processes[index].child.id();
        assert!(crate::process::signal_pid(pid, signal), "kill -{signal} {pid} failed");
    }

    /// Starts node `index` again with its flags (its log file is appended to); returns once it listens.
    pub fn start_node(&mut self, index: usize) {
        let name = self.names[index];
        let is_coordinator = index >= self.workers.len();
        self.processes[index] = NodeProcess::spawn_appending(
            name,
            node_command(
                &self.node_args[index],
                self.fail_points.as_deref(),
                self.options.proxy.as_deref(),
            ),
            &self.scratch.path,
        );
        let base = if is_coordinator {
            &self.coordinators[index - self.workers.len()]
        } else {
            &self.workers[index]
        };
        let listen = base.trim_start_matches("http://").to_owned();
        let deadline = Instant::now() + READY_TIMEOUT;
        while std::net::TcpStream::connect(&listen).is_err() {
            assert!(
                Instant::now() < deadline,
                "the restarted {name} never listened on {listen}"
            );
            if let Some(status) = self.processes[index].child.try_wait().expect("polling a child") {
                panic!("the restarted {name} exited with {status}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Starts one more worker (the next cell, on new ports) and restarts the coordinator
    /// with it configured; returns once every node is healthy. Only for durable clusters:
    /// the coordinator keeps everything across the restart, the new cell holds nothing.
    pub async fn add_worker(&mut self) {
        assert!(
            self.options.durable,
            "add_worker restarts the coordinator: durable clusters only"
        );
        assert_eq!(self.coordinators.len(), 1, "add_worker restarts the one coordinator");
        let index = self.workers.len();
        assert!(index < CELL_NAMES.len(), "test clusters have at most 6 workers");
        let [port, device_port] = free_ports::<2>();
        let args = worker_args(
            &self.options,
            &self.scratch,
            index,
            port,
            device_port,
            &self.coordinators,
            &self.secret,
        );
        let worker = format!("http://127.0.0.1:{port}");
        let device_server = format!("http://127.0.0.1:{device_port}");
        // The coordinator is node `index` now; it moves one place on, behind the new worker.
        self.kill_node(index);
        let NodeArgs::Coordinator(coordinator) = &mut self.node_args[index] else {
            unreachable!("node {index} is the coordinator")
        };
        coordinator.workers.push(CellEndpoint {
            cell: CELL_NAMES[index].to_owned(),
            url: worker.clone(),
            device_url: device_server.clone(),
        });
        self.node_args.insert(index, NodeArgs::Worker(args));
        self.names.insert(index, WORKER_NAMES[index]);
        let placeholder = NodeProcess::spawn(WORKER_NAMES[index], Command::new("true"), &self.scratch.path);
        self.processes.insert(index, placeholder);
        self.workers.push(worker);
        self.device_servers.push(device_server);
        self.start_node(index);
        self.start_node(index + 1);
        self.wait_until_healthy().await;
    }

    /// The log file of node `index`.
    pub fn node_log(&self, index: usize) -> String {
        std::fs::read_to_string(&self.processes[index].log).unwrap_or_default()
    }

    /// Waits (15 s at most) until node `index` has logged `line`: a log line is written
    /// when the node gets there, which on a loaded machine may be after the answer a test
    /// saw, so a test never reads a log only once.
    pub async fn wait_for_log(&self, index: usize, line: &str) {
        wait_until(
            &format!("node {index} logs {line:?}"),
            Duration::from_secs(15),
            || async { self.node_log(index).contains(line).then_some(()) },
        )
        .await;
    }

    /// The durable data directory of node `index` (see [`ClusterOptions::durable`]).
    pub fn data_dir(&self, index: usize) -> PathBuf {
        self.scratch.path.join("data").join(self.names[index])
    }

    /// Name and PID of every node process (workers, then the coordinator).
    pub fn node_pids(&self) -> Vec<(&'static str, u32)> {
        self.processes
            .iter()
            .map(|process| (process.name, process.child.id()))
            .collect()
    }

    /// Panics if a node process has exited.
    #[track_caller]
    pub fn assert_processes_alive(&mut self) {
        for process in &mut self.processes {
            if let Some(status) = process.child.try_wait().expect("polling a child") {
                panic!("{} exited with {status}", process.name);
            }
        }
    }

    /// Panics if a node has exited or logged a panic.
    #[track_caller]
    pub fn assert_no_crash(&mut self) {
        self.assert_processes_alive();
        for process in &self.processes {
            let log = std::fs::read_to_string(&process.log).unwrap_or_default();
            assert!(
                !log.contains("panicked"),
                "{} logged a panic:\n{}",
                process.name,
                tail(&log, 40)
            );
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for process in &self.processes {
                let log = std::fs::read_to_string(&process.log).unwrap_or_default();
                eprintln!("----- last lines of {} ({})", process.name, process.log.display());
                eprintln!("{}", tail(&log, 40));
            }
        }
    }
}

/// Signs `agent` in as `user` with a valid JWT; asserts 200.
pub async fn sign_in_with(agent: Agent, signer: &JwtSigner, user: &str) -> Agent {
    let reply = agent.auth(Some(&signer.sign(user))).await;
    reply.assert_empty(200);
    assert!(!reply.set_cookies.is_empty(), "POST /api/auth as {user} set no cookie");
    agent
}

/// `<first_digit><serial, 7 hex digits>-0000-4000-8000-<serial, 12 hex digits>`: stable
/// across runs, so the simulator's device for it always draws the same random stream.
pub fn test_uuid(first_digit: char, serial: u32) -> String {
    assert!(first_digit.is_ascii_hexdigit());
    format!("{first_digit}{serial:07x}-0000-4000-8000-{serial:012x}")
}

/// The command of a worker or the coordinator with its flags.
fn node_command(node: &NodeArgs, fail_points: Option<&str>, proxy: Option<&str>) -> Command {
    let mut command = Command::new(node_binary(node.program()));
    command.args(node.args());
    command.env_remove("FAILPOINTS");
    if let Some(fail_points) = fail_points {
        command.env("FAILPOINTS", fail_points);
    }
    // Loopback only: no proxy sits between the nodes, the simulator and the tests, unless
    // the cluster is given one (`ClusterOptions::proxy`), which only calls to JIA may take.
    let no_proxy = match proxy {
        Some(proxy) => {
            for variable in PROXY_VARIABLES {
                command.env(variable, proxy);
            }
            JIA_OUTSIDE_HOST
        }
        None => {
            for variable in PROXY_VARIABLES {
                command.env_remove(variable);
            }
            "127.0.0.1,localhost"
        }
    };
    command.env("NO_PROXY", no_proxy).env("no_proxy", no_proxy);
    command
}

/// `<scratch>/data/<node>` for durable clusters.
fn durable_data_dir(options: &ClusterOptions, scratch: &ScratchDir, node: &str) -> Option<PathBuf> {
    options.durable.then(|| scratch.path.join("data").join(node))
}

/// The settings of worker `index` (cell `CELL_NAMES[index]`).
fn worker_args(
    options: &ClusterOptions,
    scratch: &ScratchDir,
    index: usize,
    port: u16,
    device_port: u16,
    coordinators: &[String],
    secret: &str,
) -> WorkerArgs {
    WorkerArgs {
        cell: CELL_NAMES[index].to_owned(),
        listen: format!("127.0.0.1:{port}"),
        device_listen: Some(format!("127.0.0.1:{device_port}")),
        cluster_secret: Some(secret.to_owned()),
        coordinators: coordinators.to_vec(),
        data_dir: durable_data_dir(options, scratch, WORKER_NAMES[index]),
        extra: options.worker_args.clone(),
        ..WorkerArgs::default()
    }
}
