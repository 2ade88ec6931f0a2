//! Support code of the cluster tests: a real three-node cluster (the coordinator
//! binary and two worker processes) on 127.0.0.1 with free ports, an in-process
//! JIA simulator from the bench crate, typed HTTP helpers that route requests
//! the way the public nginx server does, and expectations computed from the
//! generated dataset.
//!
//! Every process a test starts is killed by PID when its guard is dropped, also
//! when the test panics (the node logs are then printed to help the diagnosis).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use bench::model::{condition_string, Level, SentCondition, CHARACTERS};
use bytes::Bytes;
use jia_sim::jwt::JwtSigner;
use jia_sim::{JiaConfig, JiaHandle, JiaSimulator, UrlPolicy};
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::dataset::{Dataset, DatasetIsu};
use shared::domain::Flags;
use shared::protocol::WireCondition;

/// The contract's error bodies, written out here rather than taken from the
/// product's constants, so that a typo there cannot hide.
pub const NOT_SIGNED_IN: &str = "you are not signed in";
pub const NOT_FOUND_ISU: &str = "not found: isu";
pub const DUPLICATED_ISU: &str = "duplicated: isu";
pub const JIA_SERVICE_ERROR: &str = "JIAService returned error";
pub const BAD_REQUEST_BODY: &str = "bad request body";

pub const INFO: &str = "is_dirty=false,is_overweight=false,is_broken=false";
pub const WARNING: &str = "is_dirty=true,is_overweight=false,is_broken=false";
pub const CRITICAL: &str = "is_dirty=true,is_overweight=true,is_broken=true";

/// Every level, as the bench asks for them.
pub const ALL_LEVELS: &str = "info,warning,critical";
/// An `end_time` after every timestamp a test produces.
pub const FAR_FUTURE: i64 = 9_999_999_999;

/// How long a node may take to become healthy.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Client timeout of every request a test sends (the bench allows `/initialize` 20 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Devices stop by themselves after this long, whatever a test does.
const DEVICE_RUN_FOR: Duration = Duration::from_secs(60);

// ------------------------------------------------------------------ replies

/// A response, read completely.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: String,
    pub set_cookies: Vec<String>,
    pub body: Bytes,
    /// `METHOD url`, for assertion messages.
    pub request: String,
}

impl Reply {
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap_or("<binary body>")
    }

    /// Asserts a `text/plain` error with this status and this exact body.
    #[track_caller]
    pub fn assert_error(&self, status: u16, message: &str) {
        assert_eq!(
            (self.status.as_u16(), self.text()),
            (status, message),
            "{}: unexpected status or body",
            self.request
        );
        assert!(
            self.content_type.starts_with("text/plain"),
            "{}: Content-Type {:?}, expected text/plain",
            self.request,
            self.content_type
        );
    }

    /// Asserts the status and an `application/json` body, and parses it.
    #[track_caller]
    pub fn json(&self, status: u16) -> Value {
        assert_eq!(
            self.status.as_u16(),
            status,
            "{}: unexpected status, body {:?}",
            self.request,
            self.text()
        );
        assert!(
            self.content_type.starts_with("application/json"),
            "{}: Content-Type {:?}, expected application/json",
            self.request,
            self.content_type
        );
        serde_json::from_slice(&self.body).unwrap_or_else(|error| panic!("{}: invalid JSON: {error}", self.request))
    }

    /// Asserts the status and an empty body.
    #[track_caller]
    pub fn assert_empty(&self, status: u16) {
        assert_eq!(
            (self.status.as_u16(), self.text()),
            (status, ""),
            "{}: unexpected status or non-empty body",
            self.request
        );
    }
}

// ------------------------------------------------------------------ routing and agents

/// Where requests go.
#[derive(Debug, Clone)]
pub enum Routes {
    /// Straight to the nodes, routed like the public nginx server does:
    /// condition and graph routes to the worker owning the UUID, the rest to the coordinator.
    /// With N workers, the default placement map: first hex digit mod N (for two, its parity).
    Direct { coordinator: String, workers: Vec<String> },
    /// Everything to one public base URL (nginx).
    Public(String),
}

impl Routes {
    pub fn url(&self, path: &str) -> String {
        match self {
            Routes::Public(base) => format!("{base}{path}"),
            Routes::Direct { coordinator, workers } => match uuid_of_worker_route(path) {
                Some(uuid) => format!("{}{path}", workers[default_cell(uuid, workers.len())]),
                None => format!("{coordinator}{path}"),
            },
        }
    }
}

/// The UUID of `/api/condition/<uuid>...` or `/api/isu/<uuid>/graph...`, the worker-owned routes.
fn uuid_of_worker_route(path: &str) -> Option<&str> {
    let path = path.split('?').next().unwrap_or(path);
    if let Some(rest) = path.strip_prefix("/api/condition/") {
        return Some(rest);
    }
    let rest = path.strip_prefix("/api/isu/")?;
    let (uuid, tail) = rest.split_once('/')?;
    (tail == "graph").then_some(uuid)
}

/// 0 (worker A) when the UUID's first hex digit is even, 1 (worker B) when odd.
/// Written out here (not `shared::placement`) so the tests check the documented rule.
pub fn shard_index(uuid: &str) -> usize {
    default_cell(uuid, 2)
}

/// The cell of `uuid` in a new map of `cells` cells: its first hex digit mod `cells`.
pub fn default_cell(uuid: &str, cells: usize) -> usize {
    match uuid.chars().next().and_then(|first| first.to_digit(16)) {
        Some(digit) => digit as usize % cells,
        None => 0,
    }
}

/// One browser-like client with its own cookie jar.
#[derive(Clone)]
pub struct Agent {
    client: reqwest::Client,
    routes: Routes,
}

impl Agent {
    pub fn new(routes: Routes) -> Agent {
        let client = reqwest::Client::builder()
            .cookie_store(true)
            .no_proxy()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("building an HTTP client");
        Agent { client, routes }
    }

    pub fn url(&self, path: &str) -> String {
        self.routes.url(path)
    }

    /// The same client (and session) sending to other routes.
    pub fn with_routes(&self, routes: Routes) -> Agent {
        Agent {
            client: self.client.clone(),
            routes,
        }
    }

    /// `GET path` with extra headers.
    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = self.client.get(self.url(path));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(request).await
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        let request = request.build().expect("a well-formed request");
        let described = format!("{} {}", request.method(), request.url());
        let response = self
            .client
            .execute(request)
            .await
            .unwrap_or_else(|error| panic!("{described}: {error}"));
        read_reply(described, response).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.client.get(self.url(path))).await
    }

    /// `GET path`; a transport error is returned, not a panic.
    pub async fn try_get(&self, path: &str) -> Result<Reply, reqwest::Error> {
        let url = self.url(path);
        let response = self.client.get(&url).send().await?;
        Ok(read_reply(format!("GET {url}"), response).await)
    }

    pub async fn post_empty(&self, path: &str) -> Reply {
        self.send(self.client.post(self.url(path))).await
    }

    pub async fn post_json(&self, path: &str, body: &str) -> Reply {
        self.send(
            self.client
                .post(self.url(path))
                .header("content-type", "application/json")
                .body(body.to_owned()),
        )
        .await
    }

    /// `POST /api/auth` with this `Authorization` header (none when `None`).
    pub async fn auth(&self, authorization: Option<&str>) -> Reply {
        let mut request = self.client.post(self.url("/api/auth"));
        if let Some(authorization) = authorization {
            request = request.header("authorization", authorization);
        }
        self.send(request).await
    }

    pub async fn me(&self) -> Reply {
        self.get("/api/user/me").await
    }

    pub async fn signout(&self) -> Reply {
        self.post_empty("/api/signout").await
    }

    pub async fn isu_list(&self) -> Reply {
        self.get("/api/isu").await
    }

    /// `POST /api/isu` as the frontend and the bench send it; no `image` part when `image` is `None`.
    pub async fn register(&self, uuid: &str, name: &str, image: Option<&[u8]>) -> Reply {
        let mut form = reqwest::multipart::Form::new()
            .text("jia_isu_uuid", uuid.to_owned())
            .text("isu_name", name.to_owned());
        if let Some(image) = image {
            let part = reqwest::multipart::Part::bytes(image.to_vec())
                .file_name("image.jpeg")
                .mime_str("image/jpeg")
                .expect("a valid MIME type");
            form = form.part("image", part);
        }
        self.send(self.client.post(self.url("/api/isu")).multipart(form)).await
    }

    pub async fn isu(&self, uuid: &str) -> Reply {
        self.get(&format!("/api/isu/{uuid}")).await
    }

    pub async fn icon(&self, uuid: &str) -> Reply {
        self.get(&format!("/api/isu/{uuid}/icon")).await
    }

    /// `GET /api/condition/<uuid>?<query>`.
    pub async fn conditions(&self, uuid: &str, query: &str) -> Reply {
        self.get(&format!("/api/condition/{uuid}?{query}")).await
    }

    pub async fn graph(&self, uuid: &str, datetime: i64) -> Reply {
        self.get(&format!("/api/isu/{uuid}/graph?datetime={datetime}")).await
    }

    pub async fn trend(&self) -> Reply {
        self.get("/api/trend").await
    }

    /// The JSON items of an all-levels condition list ending at `end_time` (exclusive); asserts 200.
    pub async fn condition_items(&self, uuid: &str, end_time: i64) -> Vec<Value> {
        let reply = self
            .conditions(uuid, &format!("end_time={end_time}&condition_level={ALL_LEVELS}"))
            .await;
        reply
            .json(200)
            .as_array()
            .expect("a condition list is an array")
            .clone()
    }

    /// Waits until the ISU's condition list (all levels, before `FAR_FUTURE`) is not empty.
    pub async fn first_conditions(&self, uuid: &str, what: &str, timeout: Duration) -> Vec<Value> {
        wait_until(what, timeout, || async {
            let items = self.condition_items(uuid, FAR_FUTURE).await;
            (!items.is_empty()).then_some(items)
        })
        .await
    }
}

async fn read_reply(request: String, response: reqwest::Response) -> Reply {
    let status = response.status();
    let header = |name: &str| -> Vec<String> {
        response
            .headers()
            .get_all(name)
            .iter()
            .map(|value| value.to_str().unwrap_or_default().to_owned())
            .collect()
    };
    let content_type = header("content-type").into_iter().next().unwrap_or_default();
    let set_cookies = header("set-cookie");
    let body = response
        .bytes()
        .await
        .unwrap_or_else(|error| panic!("{request}: reading the body: {error}"));
    Reply {
        status,
        content_type,
        set_cookies,
        body,
        request,
    }
}

// ------------------------------------------------------------------ the cluster

/// How a test cluster is built.
#[derive(Clone)]
pub struct ClusterOptions {
    /// How long the JIA simulator waits before answering an activation (its device already posts).
    pub activation_delay: Duration,
    /// How many workers (cells a, b, c, ...).
    pub workers: usize,
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
    pub coordinator: String,
    /// Worker A (even first hex digit), worker B (odd), then any further cells.
    pub workers: Vec<String>,
    /// The workers' own device servers (`--device-listen`): device posts only.
    pub device_servers: Vec<String>,
    pub jia: JiaHandle,
    pub secret: String,
    pub signer: JwtSigner,
    /// Declared before `scratch`: the processes die before their log directory goes.
    processes: Vec<NodeProcess>,
    /// Flags of every worker and then the coordinator, to start them again.
    node_args: Vec<Vec<String>>,
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

async fn try_spawn_cluster(options: ClusterOptions) -> Result<Cluster, String> {
    let count = options.workers;
    assert!(
        (1..=CELL_NAMES.len()).contains(&count),
        "test clusters have 1 to 6 workers"
    );
    let ports = free_ports::<13>();
    let coordinator_port = ports[0];
    let (worker_ports, device_ports) = (&ports[1..1 + count], &ports[7..7 + count]);
    let scratch = ScratchDir::new("cluster");
    let secret = format!("test-secret-{}", uuid::Uuid::new_v4().simple());
    let coordinator = format!("http://127.0.0.1:{coordinator_port}");
    let workers: Vec<String> = worker_ports
        .iter()
        .map(|port| format!("http://127.0.0.1:{port}"))
        .collect();
    let jia_host: std::net::IpAddr = match options.proxy {
        Some(_) => JIA_OUTSIDE_HOST.parse().expect("an IPv4 address"),
        None => std::net::Ipv4Addr::LOCALHOST.into(),
    };
    let jia = JiaSimulator::start(JiaConfig {
        listen: std::net::SocketAddr::new(jia_host, 0),
        url_policy: UrlPolicy::AnyUrl,
        accept_any_uuid: false,
        activation_delay: options.activation_delay,
        run_for: options.device_run_for,
        ..JiaConfig::default()
    })
    .await
    .expect("starting the JIA simulator");
    let device_servers: Vec<String> = device_ports
        .iter()
        .map(|port| format!("http://127.0.0.1:{port}"))
        .collect();
    let device_urls = options.device_urls.clone().unwrap_or_else(|| device_servers.clone());

    let mut names: Vec<&'static str> = WORKER_NAMES[..count].to_vec();
    names.push("coordinator");
    let mut node_args: Vec<Vec<String>> = (0..count)
        .map(|index| {
            worker_node_args(
                &options,
                &scratch,
                index,
                worker_ports[index],
                device_ports[index],
                &coordinator,
                &secret,
            )
        })
        .collect();
    node_args.push(Vec::new());
    let args = &mut node_args[count];
    args.extend(["--listen".into(), format!("127.0.0.1:{coordinator_port}")]);
    for index in 0..count {
        args.extend([
            "--worker".into(),
            format!("{}={},{}", CELL_NAMES[index], workers[index], device_urls[index]),
        ]);
    }
    args.extend([
        "--cluster-secret".into(),
        secret.clone(),
        "--jia-service-url".into(),
        jia.url(),
    ]);
    args.extend(data_dir_args(&options, &scratch, "coordinator"));
    args.extend(options.coordinator_args.iter().cloned());
    let fail_points = options.fail_points.clone();
    let processes = (0..=count)
        .map(|index| {
            NodeProcess::spawn(
                names[index],
                node_command(
                    index == count,
                    &node_args[index],
                    fail_points.as_deref(),
                    options.proxy.as_deref(),
                ),
                &scratch.path,
            )
        })
        .collect();

    let mut cluster = Cluster {
        coordinator,
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
        self.jia.add_isu(&uuid, bench::model::character_for_uuid(&uuid));
        uuid
    }

    /// A UUID in placement slot `slot` (its first two hex digits), known to the simulator.
    pub fn known_uuid_in_slot(&self, slot: u8, serial: u32) -> String {
        let uuid = format!("{slot:02x}{serial:06x}-0000-4000-8000-{serial:012x}");
        self.jia.add_isu(&uuid, bench::model::character_for_uuid(&uuid));
        uuid
    }

    /// The character the simulator gives to a UUID made by [`Cluster::known_uuid`].
    pub fn character_of(&self, uuid: &str) -> &'static str {
        bench::model::character_for_uuid(uuid)
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

    async fn wait_until_healthy(&mut self) {
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
            .chain([&self.coordinator])
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

    /// Starts node `index` again with its flags (its log file is appended to); returns once it listens.
    pub fn start_node(&mut self, index: usize) {
        let name = self.names[index];
        let is_coordinator = index == self.workers.len();
        self.processes[index] = NodeProcess::spawn_appending(
            name,
            node_command(
                is_coordinator,
                &self.node_args[index],
                self.fail_points.as_deref(),
                self.options.proxy.as_deref(),
            ),
            &self.scratch.path,
        );
        let base = if is_coordinator {
            &self.coordinator
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
        let index = self.workers.len();
        assert!(index < CELL_NAMES.len(), "test clusters have at most 6 workers");
        let [port, device_port] = free_ports::<2>();
        let args = worker_node_args(
            &self.options,
            &self.scratch,
            index,
            port,
            device_port,
            &self.coordinator,
            &self.secret,
        );
        let worker = format!("http://127.0.0.1:{port}");
        let device_server = format!("http://127.0.0.1:{device_port}");
        // The coordinator is node `index` now; it moves one place on, behind the new worker.
        self.kill_node(index);
        let coordinator_args = &mut self.node_args[index];
        coordinator_args.extend([
            "--worker".into(),
            format!("{}={worker},{device_server}", CELL_NAMES[index]),
        ]);
        self.node_args.insert(index, args);
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

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// ------------------------------------------------------------------ processes and files

/// target/debug/worker, next to the directory of this test executable.
fn worker_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target/<profile>/deps")
        .join(format!("worker{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "worker binary not found at {}: run `cargo build --workspace --bins` first",
        path.display()
    );
    path
}

/// The command of a worker or the coordinator with its flags.
fn node_command(coordinator: bool, args: &[String], fail_points: Option<&str>, proxy: Option<&str>) -> Command {
    let mut command = match coordinator {
        true => Command::new(env!("CARGO_BIN_EXE_coordinator")),
        false => Command::new(worker_binary()),
    };
    command.args(args);
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

/// `--data-dir <scratch>/data/<node>` for durable clusters.
fn data_dir_args(options: &ClusterOptions, scratch: &ScratchDir, node: &str) -> Vec<String> {
    match options.durable {
        true => vec![
            "--data-dir".into(),
            scratch.path.join("data").join(node).display().to_string(),
        ],
        false => Vec::new(),
    }
}

/// The flags of worker `index` (cell `CELL_NAMES[index]`).
fn worker_node_args(
    options: &ClusterOptions,
    scratch: &ScratchDir,
    index: usize,
    port: u16,
    device_port: u16,
    coordinator: &str,
    secret: &str,
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--cell".into(),
        CELL_NAMES[index].into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--device-listen".into(),
        format!("127.0.0.1:{device_port}"),
        "--coordinator-url".into(),
        coordinator.into(),
        "--cluster-secret".into(),
        secret.into(),
    ];
    args.extend(data_dir_args(options, scratch, WORKER_NAMES[index]));
    args.extend(options.worker_args.iter().cloned());
    args
}

/// A child process killed (by its PID) and reaped on drop; stdout and stderr go to a log file.
pub struct NodeProcess {
    pub name: &'static str,
    pub child: Child,
    pub log: PathBuf,
}

impl NodeProcess {
    pub fn spawn(name: &'static str, command: Command, log_dir: &Path) -> NodeProcess {
        let log = log_dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("creating a log file");
        Self::spawn_logging_to(name, command, log, file)
    }

    /// Like [`NodeProcess::spawn`], appending to the node's log (a restart keeps the earlier lines).
    pub fn spawn_appending(name: &'static str, command: Command, log_dir: &Path) -> NodeProcess {
        let log = log_dir.join(format!("{name}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("opening a log file");
        Self::spawn_logging_to(name, command, log, file)
    }

    fn spawn_logging_to(name: &'static str, mut command: Command, log: PathBuf, file: std::fs::File) -> NodeProcess {
        let stderr = file.try_clone().expect("cloning a file handle");
        // An error exit prints its cause chain only (panics keep RUST_BACKTRACE's backtrace):
        // with a backtrace, a port taken by another test ("Address already in use") fell
        // out of the log tail that `spawn_cluster_with` looks at to start again.
        command
            .env("RUST_LIB_BACKTRACE", "0")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(stderr));
        let child = command
            .spawn()
            .unwrap_or_else(|error| panic!("starting {name} ({command:?}): {error}"));
        NodeProcess { name, child, log }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh directory under the system temp dir, removed on drop unless a test failed.
pub struct ScratchDir {
    pub path: PathBuf,
}

impl ScratchDir {
    pub fn new(label: &str) -> ScratchDir {
        let path = std::env::temp_dir().join(format!("isu-{label}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&path).expect("creating a scratch dir");
        ScratchDir { path }
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for inspection", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Ports handed out by this test binary, never handed out twice.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// `N` distinct free ports on 127.0.0.1: bound on port 0, read, and released together.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let mut handed_out = HANDED_OUT.lock().expect("port registry poisoned");
    let mut listeners = Vec::new();
    let mut ports = Vec::new();
    while ports.len() < N {
        assert!(listeners.len() < 100 * N, "no free ports on 127.0.0.1");
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        let port = listener.local_addr().expect("a bound address").port();
        listeners.push(listener);
        if handed_out.insert(port) {
            ports.push(port);
        }
    }
    drop(listeners);
    ports.try_into().expect("exactly N ports")
}

// ------------------------------------------------------------------ waiting

/// Polls `check` every 10 ms until it returns `Some`, or panics after `timeout`.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ------------------------------------------------------------------ expectations

/// The generated dataset every `/initialize` restores.
pub fn dataset() -> &'static Dataset {
    static DATASET: OnceLock<Dataset> = OnceLock::new();
    DATASET.get_or_init(shared::dataset::generated::generate)
}

/// The dataset's ISUs owned by `user`, most recently registered first.
pub fn dataset_isus_of(user: &str) -> Vec<&'static DatasetIsu> {
    let mut isus: Vec<&DatasetIsu> = dataset().isus.iter().filter(|isu| isu.owner == user).collect();
    isus.sort_by_key(|isu| std::cmp::Reverse(isu.id));
    isus
}

/// A stored condition in the API's words: (is_sitting, condition string, level, message).
pub fn api_fields(condition: &WireCondition) -> (bool, &'static str, &'static str, &str) {
    let bits = condition.flags.0;
    let text = condition_string(
        bits & Flags::DIRTY != 0,
        bits & Flags::OVERWEIGHT != 0,
        bits & Flags::BROKEN != 0,
    );
    (
        bits & Flags::SITTING != 0,
        text,
        Level::of_condition(text).as_str(),
        &condition.message,
    )
}

/// The newest condition of a dataset ISU.
pub fn latest_of(isu: &DatasetIsu) -> &WireCondition {
    isu.conditions
        .iter()
        .max_by_key(|condition| condition.timestamp)
        .expect("every initial ISU has conditions")
}

/// `GET /api/isu` of `user` right after `/initialize`.
pub fn expected_isu_list(user: &str) -> Value {
    let items: Vec<Value> = dataset_isus_of(user)
        .into_iter()
        .map(|isu| {
            let latest = latest_of(isu);
            let (is_sitting, condition, level, message) = api_fields(latest);
            json!({
                "id": isu.id,
                "jia_isu_uuid": isu.uuid,
                "name": isu.name,
                "character": isu.character,
                "latest_isu_condition": {
                    "jia_isu_uuid": isu.uuid,
                    "isu_name": isu.name,
                    "timestamp": latest.timestamp,
                    "is_sitting": is_sitting,
                    "condition": condition,
                    "condition_level": level,
                    "message": message,
                },
            })
        })
        .collect();
    Value::Array(items)
}

/// An item of `GET /api/condition` for a condition sent by a device.
pub fn condition_item(uuid: &str, isu_name: &str, sent: &SentCondition) -> Value {
    json!({
        "jia_isu_uuid": uuid,
        "isu_name": isu_name,
        "timestamp": sent.timestamp,
        "is_sitting": sent.is_sitting,
        "condition": sent.condition,
        "condition_level": sent.level().as_str(),
        "message": sent.message,
    })
}

/// Where an ISU stands in the trend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrendSpot {
    pub character: String,
    pub level: String,
    pub timestamp: i64,
}

/// The trend right after `/initialize`: every initial ISU at its newest condition.
pub fn expected_trend() -> BTreeMap<i64, TrendSpot> {
    dataset()
        .isus
        .iter()
        .map(|isu| {
            let latest = latest_of(isu);
            let (_, _, level, _) = api_fields(latest);
            let spot = TrendSpot {
                character: isu.character.clone(),
                level: level.to_owned(),
                timestamp: latest.timestamp,
            };
            (isu.id, spot)
        })
        .collect()
}

/// Checks the shape of a trend (the 25 characters once each, exactly the three
/// lists, newest first, each ISU once) and returns where each ISU stands.
#[track_caller]
pub fn parse_trend(trend: &Value) -> BTreeMap<i64, TrendSpot> {
    let entries = trend.as_array().expect("the trend is an array");
    let mut characters = HashSet::new();
    let mut spots = BTreeMap::new();
    for entry in entries {
        let object = entry.as_object().expect("a trend entry is an object");
        let keys: BTreeSet<&str> = object.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["character", "critical", "info", "warning"]),
            "fields of {entry}"
        );
        let character = entry["character"].as_str().expect("character is a string");
        assert!(CHARACTERS.contains(&character), "unknown character {character:?}");
        assert!(characters.insert(character.to_owned()), "{character} listed twice");
        for level in ["info", "warning", "critical"] {
            let list = entry[level].as_array().expect("a trend list is an array");
            let timestamps: Vec<i64> = list
                .iter()
                .map(|item| item["timestamp"].as_i64().expect("timestamp is an integer"))
                .collect();
            assert!(
                timestamps.windows(2).all(|pair| pair[0] >= pair[1]),
                "{character}/{level} not newest first: {timestamps:?}"
            );
            for item in list {
                let fields: BTreeSet<&str> = item.as_object().expect("object").keys().map(String::as_str).collect();
                assert_eq!(fields, BTreeSet::from(["isu_id", "timestamp"]), "fields of {item}");
                let id = item["isu_id"].as_i64().expect("isu_id is an integer");
                let spot = TrendSpot {
                    character: character.to_owned(),
                    level: level.to_owned(),
                    timestamp: item["timestamp"].as_i64().expect("timestamp is an integer"),
                };
                assert!(spots.insert(id, spot).is_none(), "ISU {id} listed twice");
            }
        }
    }
    assert_eq!(characters.len(), 25, "every character once: {characters:?}");
    spots
}

/// Conditions of a test's own making, with static strings as the wire type wants.
pub fn sent(timestamp: i64, is_sitting: bool, condition: &'static str, message: &'static str) -> SentCondition {
    SentCondition {
        is_sitting,
        condition,
        message,
        timestamp,
    }
}

/// Timestamps of a condition list, as returned.
pub fn timestamps_of(items: &[Value]) -> Vec<i64> {
    items
        .iter()
        .map(|item| item["timestamp"].as_i64().expect("timestamp is an integer"))
        .collect()
}

// ------------------------------------------------------------------ nginx

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
            if !pids.contains(&pid) && is_alive(pid) {
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
    fn drop(&mut self) {
        let masters = self.master_pids();
        let mut workers = Vec::new();
        for pid in &masters {
            workers.extend(children_of(*pid));
            signal(*pid, "TERM");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while masters.iter().any(|pid| is_alive(*pid)) && Instant::now() < deadline {
            let _ = self.child.try_wait();
            std::thread::sleep(Duration::from_millis(20));
        }
        for pid in masters.iter().chain(&workers) {
            if is_alive(*pid) {
                signal(*pid, "KILL");
            }
        }
        let _ = self.child.wait();
    }
}

fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| rest.to_owned()))
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|child| child.parse().ok())
        .collect()
}

/// Sends a signal to one process, by PID.
fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Starts the project's public nginx in front of `cluster` from `run_dir` (its placement
/// file there, `run_dir/placement.conf`, is what `--router-map` of the coordinator names),
/// serving `static_dir`, with cell i's nginx device server on `device_listens[i]`; returns
/// it and its base URL once it answers `GET /`.
pub async fn public_nginx_at(
    cluster: &Cluster,
    nginx: &Path,
    static_dir: &Path,
    run_dir: &Path,
    device_listens: &[String],
) -> (Nginx, String) {
    let public_port = free_ports::<1>()[0];
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let host_port = |url: &str| url.trim_start_matches("http://").to_owned();
    let mut render = Command::new(repo.join("scripts/render-nginx"));
    render
        .arg("--run-dir")
        .arg(run_dir)
        .arg("--static-dir")
        .arg(static_dir)
        .args(["--public-listen", &format!("127.0.0.1:{public_port}")])
        .args(["--coordinator", &host_port(&cluster.coordinator)]);
    for (index, worker) in cluster.workers.iter().enumerate() {
        let cell = format!("{}={},{}", CELL_NAMES[index], host_port(worker), device_listens[index]);
        render.args(["--cell", &cell]);
    }
    let rendered = render
        .args(["--worker-processes", "1", "--access-log", "off"])
        .env("ISU_NGINX_BIN", nginx)
        .output()
        .expect("running scripts/render-nginx");
    assert!(
        rendered.status.success(),
        "render-nginx failed: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let config = PathBuf::from(String::from_utf8(rendered.stdout).unwrap().trim());
    let mut server = Nginx::start(nginx, run_dir, &config);
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

/// Sums the samples of a Prometheus counter or histogram `_count` whose labels contain every `label`.
pub fn metric_sum(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(name) && labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
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
            panic!("nginx is not installed (apt-get install -y nginx-light) and CI is set");
        }
        eprintln!("skipping: nginx is not installed (apt-get install -y nginx-light)");
    }
    nginx
}
