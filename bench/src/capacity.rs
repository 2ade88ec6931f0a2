//! Capacity mode: how many ISUs the cluster sustains per core at the real device rate.
//!
//! Devices post as the official ones do (every 40 ms, the newest ≤ 10 conditions), users
//! read (ISU list, a condition page, a graph, the trend, in a loop with a pause), and the
//! number of active ISUs grows by a step at a time. Each step is measured on its own window
//! once its registrations are done: device post p99 (the device's own view), read p99 and
//! errors, and the CPU every cluster process and the bench used. The ramp stops at the first
//! step that breaks a service level objective (device post p99 over 100 ms, read p99 over
//! 50 ms, or any error); the step before it is the sustained figure. The report says which
//! side ran out of CPU: a result only describes the cluster when the cluster is the side
//! that saturated.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::nodes::{cpu_readings, LocalProcess, Nodes};
use crate::report::{CpuUse, DevicePosts};
use jia_sim::device::LatencyWindow;
use jia_sim::jwt::JwtSigner;
use jia_sim::{JiaConfig, JiaHandle, JiaSimulator};

/// A ramp's settings.
#[derive(Clone)]
pub struct CapacityConfig {
    pub target: String,
    pub jia: JiaConfig,
    pub signer: JwtSigner,
    pub nodes: Option<Nodes>,
    pub processes: Vec<LocalProcess>,
    /// ISUs added at each step.
    pub step_isus: usize,
    /// How long each step is measured (after its registrations).
    pub step_time: Duration,
    /// The ramp stops here even if nothing broke.
    pub max_isus: usize,
    /// CPUs the cluster may use (1 with `scripts/bench --pin`).
    pub cluster_cores: f64,
    pub device_post_p99_limit: Duration,
    pub read_p99_limit: Duration,
    /// A step breaks when devices post less than this share of their rate (0.9).
    pub min_post_rate_share: f64,
    /// One reading user per this many ISUs (at least one).
    pub isus_per_reader: usize,
    /// Pause of a reader between two reads.
    pub read_pause: Duration,
    pub request_timeout: Duration,
}

/// What one step measured.
#[derive(Debug, Clone)]
pub struct Step {
    pub isus: usize,
    pub seconds: f64,
    pub device_posts: u64,
    pub device_post_p99_ms: Option<f64>,
    pub reads: u64,
    pub read_p99_ms: Option<f64>,
    pub errors: u64,
    /// CPU seconds per second of each cluster process, and of the bench.
    pub cpu_per_second: Vec<(String, Option<f64>)>,
    /// Cluster CPU per device post (µs), all of the cluster's work of the step included.
    pub cluster_cpu_per_device_post_us: Option<f64>,
    /// Which objective the step broke, if any.
    pub broken: Option<String>,
    /// What a first measurement of this step broke, when a second one was taken.
    pub first_break: Option<String>,
}

impl Step {
    fn cluster_cpu_per_second(&self) -> f64 {
        self.cpu_per_second
            .iter()
            .filter(|(name, _)| name != "bench")
            .filter_map(|(_, rate)| *rate)
            .sum()
    }

    fn bench_cpu_per_second(&self) -> Option<f64> {
        self.cpu_per_second
            .iter()
            .find(|(name, _)| name == "bench")
            .and_then(|(_, rate)| *rate)
    }

    fn to_json(&self) -> Value {
        json!({
            "isus": self.isus,
            "seconds": self.seconds,
            "device_posts": self.device_posts,
            "device_post_p99_ms": self.device_post_p99_ms,
            "reads": self.reads,
            "read_p99_ms": self.read_p99_ms,
            "errors": self.errors,
            "cpu_per_second": self.cpu_per_second.iter().map(|(name, rate)| (name.clone(), json!(rate))).collect::<serde_json::Map<_, _>>(),
            "cluster_cpu_per_device_post_us": self.cluster_cpu_per_device_post_us,
            "broken": self.broken,
            "first_break": self.first_break,
        })
    }
}

/// The outcome of a ramp.
#[derive(Debug, Clone)]
pub struct CapacityReport {
    pub steps: Vec<Step>,
    pub cluster_cores: f64,
    /// CPUs the bench may use (its affinity), and their list.
    pub bench_cores: f64,
    pub bench_cpus: Option<String>,
}

impl CapacityReport {
    /// The last step that broke nothing.
    pub fn sustained(&self) -> Option<&Step> {
        self.steps.iter().rev().find(|step| step.broken.is_none())
    }

    pub fn isus_per_core(&self) -> f64 {
        self.sustained()
            .map_or(0.0, |step| step.isus as f64 / self.cluster_cores)
    }

    /// Which side ran out of CPU at the end of the ramp: `cluster`, `bench` or `neither`
    /// (over 85 % of the cores it may use).
    pub fn saturated(&self) -> &'static str {
        let Some(last) = self.steps.last() else {
            return "neither";
        };
        let cluster = last.cluster_cpu_per_second() / self.cluster_cores;
        let bench = last.bench_cpu_per_second().unwrap_or(0.0) / self.bench_cores;
        match (cluster >= 0.85, bench >= 0.85) {
            (true, false) => "cluster",
            (false, true) => "bench",
            (true, true) if cluster >= bench => "cluster",
            (true, true) => "bench",
            (false, false) => "neither",
        }
    }

    pub fn to_json(&self) -> Value {
        let sustained = self.sustained();
        json!({
            "capacity": {
                "isus_per_core": self.isus_per_core(),
                "sustained_isus": sustained.map(|step| step.isus),
                "broken_at_isus": self.steps.last().filter(|step| step.broken.is_some()).map(|step| step.isus),
                "broken": self.steps.last().and_then(|step| step.broken.clone()),
                "cluster_cpu_per_device_post_us": sustained.and_then(|step| step.cluster_cpu_per_device_post_us),
                "saturated": self.saturated(),
                "cluster_cores": self.cluster_cores,
                "bench_cpus": self.bench_cpus,
                "steps": self.steps.iter().map(Step::to_json).collect::<Vec<_>>(),
            }
        })
    }
}

impl std::fmt::Display for CapacityReport {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            out,
            "{:>7} {:>9} {:>10} {:>7} {:>9} {:>6} {:>9} {:>8} {:>10}  broken",
            "ISUs", "posts/s", "post p99", "reads", "read p99", "errors", "cluster", "bench", "µs/post"
        )?;
        let ms = |value: Option<f64>| value.map_or("-".to_owned(), |ms| format!("{ms:.1}ms"));
        for step in &self.steps {
            writeln!(
                out,
                "{:>7} {:>9.0} {:>10} {:>7} {:>9} {:>6} {:>8.0}% {:>7.0}% {:>10}  {}",
                step.isus,
                step.device_posts as f64 / step.seconds,
                ms(step.device_post_p99_ms),
                step.reads,
                ms(step.read_p99_ms),
                step.errors,
                step.cluster_cpu_per_second() * 100.0,
                step.bench_cpu_per_second().unwrap_or(0.0) * 100.0,
                step.cluster_cpu_per_device_post_us
                    .map_or("-".to_owned(), |us| format!("{us:.1}")),
                match (&step.broken, &step.first_break) {
                    (Some(broken), _) => broken.clone(),
                    (None, Some(first)) => format!("(held when measured again after: {first})"),
                    (None, None) => String::new(),
                },
            )?;
        }
        let sustained = self.sustained();
        write!(
            out,
            "\nsustained {} ISUs on {} cluster core(s): {:.0} ISUs per core; cluster CPU per device post {} µs; \
             saturated: {}",
            sustained.map_or(0, |step| step.isus),
            self.cluster_cores,
            self.isus_per_core(),
            sustained
                .and_then(|step| step.cluster_cpu_per_device_post_us)
                .map_or("-".to_owned(), |us| format!("{us:.1}")),
            self.saturated()
        )
    }
}

/// Latencies and errors of the readers, per step.
#[derive(Default)]
pub(crate) struct ReadWindow {
    pub(crate) latencies: LatencyWindow,
    pub(crate) errors: AtomicU64,
}

impl ReadWindow {
    pub(crate) fn take(&self) -> (Option<Histogram<u64>>, u64) {
        (self.latencies.take(), self.errors.swap(0, Ordering::Relaxed))
    }
}

/// A signed-in user with the ISUs it registered.
pub(crate) struct User {
    pub(crate) client: reqwest::Client,
    pub(crate) isus: Vec<String>,
}

/// Runs the ramp (initialize, then steps until an objective breaks or `max_isus`).
pub async fn run(config: CapacityConfig) -> anyhow::Result<CapacityReport> {
    let jia = start_lean_jia(&config.jia).await?;
    let outcome = ramp(&config, &jia).await;
    jia.shutdown().await;
    outcome
}

/// The JIA simulator of the measuring modes: lean devices, any UUID activated, no sent log.
pub(crate) async fn start_lean_jia(config: &JiaConfig) -> anyhow::Result<JiaHandle> {
    JiaSimulator::start(JiaConfig {
        keep_sent_log: false,
        lean_devices: true,
        accept_any_uuid: true,
        ..config.clone()
    })
    .await
    .context("starting the JIA simulator")
}

/// `POST /initialize` with the simulator's URL; an error unless it succeeded.
pub(crate) async fn initialize(base: &str, jia: &JiaHandle) -> anyhow::Result<()> {
    let initialized = jia_sim::http::client_builder()
        .no_proxy()
        .build()?
        .post(format!("{base}/initialize"))
        .json(&json!({"jia_service_url": jia.url()}))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .context("POST /initialize")?;
    anyhow::ensure!(
        initialized.status().is_success(),
        "POST /initialize answered {}",
        initialized.status()
    );
    Ok(())
}

async fn ramp(config: &CapacityConfig, jia: &JiaHandle) -> anyhow::Result<CapacityReport> {
    let base = config.target.trim_end_matches('/').to_owned();
    initialize(&base, jia).await?;

    let window = Arc::new(ReadWindow::default());
    let mut readers = JoinSet::new();
    let mut users: Vec<Arc<User>> = Vec::new();
    let mut steps = Vec::new();
    // Active ISUs (registered), and registrations attempted (failed ones included).
    let mut isus = 0;
    let mut attempted = 0;
    let bench_cpus = crate::nodes::own_cpus_allowed();
    let bench_cores = std::thread::available_parallelism().map_or(1.0, |cores| cores.get() as f64);
    while isus < config.max_isus {
        let added = config.step_isus.min(config.max_isus - isus);
        let (created, registration_errors) = register_step(config, &base, &mut users, attempted, added).await?;
        attempted += added;
        isus += created;
        let wanted_readers = isus.div_ceil(config.isus_per_reader.max(1));
        while readers.len() < wanted_readers {
            let user = users[readers.len() % users.len()].clone();
            readers.spawn(read_loop(config.clone(), base.clone(), user, window.clone()));
        }
        let mut step = measure_step(config, jia, &window, isus, registration_errors).await;
        if let Some(first) = step.broken.clone() {
            // One bad window (a page-cache miss, another process on the core) is not the
            // capacity: the same number of ISUs is measured once more before the ramp ends.
            tracing::info!(isus, broken = %first, "capacity step broke; measuring it again");
            step = measure_step(config, jia, &window, isus, registration_errors).await;
            step.first_break = Some(first);
        }
        let broken = step.broken.is_some();
        steps.push(step);
        if broken {
            break;
        }
    }
    readers.abort_all();
    while readers.join_next().await.is_some() {}
    Ok(CapacityReport {
        steps,
        cluster_cores: config.cluster_cores,
        bench_cores,
        bench_cpus,
    })
}

/// Measures one step's window at the current number of ISUs.
async fn measure_step(
    config: &CapacityConfig,
    jia: &JiaHandle,
    window: &ReadWindow,
    isus: usize,
    registration_errors: u64,
) -> Step {
    // The step's window starts now: registrations and their first posts are behind.
    jia.take_device_latencies();
    window.take();
    // The window spans the readings too, so CPU and posts are divided by the time they cover.
    let started = Instant::now();
    let posts_before = jia.device_posts();
    let cpu_before = cpu_readings(config.nodes.as_ref(), &config.processes).await;
    tokio::time::sleep(config.step_time).await;
    let cpu_after = cpu_readings(config.nodes.as_ref(), &config.processes).await;
    let posts_after = jia.device_posts();
    let seconds = started.elapsed().as_secs_f64();
    let device_latencies = jia.take_device_latencies();
    let (read_latencies, read_errors) = window.take();

    let posts = DevicePosts::between(posts_before, posts_after);
    let p99 = |histogram: &Option<Histogram<u64>>| {
        histogram
            .as_ref()
            .map(|histogram| histogram.value_at_quantile(0.99) as f64 / 1000.0)
    };
    let cpu_per_second: Vec<(String, Option<f64>)> = CpuUse::between(&cpu_before, &cpu_after)
        .into_iter()
        .map(|usage| (usage.name, usage.seconds.map(|used| used.max(0.0) / seconds)))
        .collect();
    let mut step = Step {
        isus,
        seconds,
        device_posts: posts.sent,
        device_post_p99_ms: p99(&device_latencies),
        reads: read_latencies.as_ref().map_or(0, |histogram| histogram.len()),
        read_p99_ms: p99(&read_latencies),
        errors: registration_errors + posts.refused + posts.failed + read_errors,
        cpu_per_second,
        cluster_cpu_per_device_post_us: None,
        broken: None,
        first_break: None,
    };
    let cluster_cpu = step.cluster_cpu_per_second() * seconds;
    if posts.sent > 0 && cluster_cpu > 0.0 {
        step.cluster_cpu_per_device_post_us = Some(cluster_cpu / posts.sent as f64 * 1e6);
    }
    step.broken = broken_objective(config, &step);
    tracing::info!(
        isus,
        device_post_p99_ms = step.device_post_p99_ms,
        read_p99_ms = step.read_p99_ms,
        errors = step.errors,
        cluster_cpu = step.cluster_cpu_per_second(),
        "capacity step"
    );
    step
}

fn broken_objective(config: &CapacityConfig, step: &Step) -> Option<String> {
    let limit_ms = |limit: Duration| limit.as_secs_f64() * 1000.0;
    if step.errors > 0 {
        return Some(format!("{} errors", step.errors));
    }
    // Every device posts once per interval; fewer posts mean devices waited on slow answers
    // (or the bench fell behind): the rate is not sustained either way.
    let expected = step.isus as f64 / config.jia.timing.post_interval.as_secs_f64();
    let posted = step.device_posts as f64 / step.seconds;
    if posted < config.min_post_rate_share * expected {
        return Some(format!("{posted:.0} posts/s, below the devices' {expected:.0}/s"));
    }
    if let Some(p99) = step
        .device_post_p99_ms
        .filter(|p99| *p99 > limit_ms(config.device_post_p99_limit))
    {
        return Some(format!("device post p99 {p99:.1} ms"));
    }
    if let Some(p99) = step.read_p99_ms.filter(|p99| *p99 > limit_ms(config.read_p99_limit)) {
        return Some(format!("read p99 {p99:.1} ms"));
    }
    None
}

/// ISUs per user: a new user signs in for every ten ISUs.
const ISUS_PER_USER: usize = 10;

/// Registers `count` new ISUs (at once), signing in users as needed; returns the failures.
pub(crate) async fn register_step(
    config: &CapacityConfig,
    base: &str,
    users: &mut Vec<Arc<User>>,
    first: usize,
    count: usize,
) -> anyhow::Result<(usize, u64)> {
    let mut registrations = JoinSet::new();
    for index in first..first + count {
        let user_index = index / ISUS_PER_USER;
        if user_index == users.len() {
            users.push(Arc::new(
                sign_in(config, base, &format!("capacity-{user_index}")).await?,
            ));
        }
        let uuid = uuid::Uuid::new_v4().to_string();
        let client = users[user_index].client.clone();
        let url = format!("{base}/api/isu");
        registrations.spawn(async move {
            let form = reqwest::multipart::Form::new()
                .text("jia_isu_uuid", uuid.clone())
                .text("isu_name", "capacity");
            let failure = match client.post(url).multipart(form).send().await {
                Ok(response) if response.status() == 201 => None,
                Ok(response) => {
                    let status = response.status();
                    let body = response.text().await.unwrap_or_default();
                    Some(format!(
                        "status {status}, body {:?}",
                        body.chars().take(120).collect::<String>()
                    ))
                }
                Err(error) if error.is_timeout() => Some("timed out".to_owned()),
                Err(error) => Some(shared::error_chain(&error)),
            };
            (user_index, uuid, failure)
        });
    }
    let mut failures = 0;
    let mut new_isus: Vec<(usize, String)> = Vec::new();
    while let Some(joined) = registrations.join_next().await {
        match joined {
            Ok((user_index, uuid, None)) => new_isus.push((user_index, uuid)),
            Ok((_, uuid, Some(why))) => {
                failures += 1;
                tracing::warn!(uuid, why, "capacity: a registration failed");
            }
            Err(error) => {
                failures += 1;
                tracing::warn!(%error, "capacity: a registration task failed");
            }
        }
    }
    let created = new_isus.len();
    // Users are shared with their readers: their ISU lists are rebuilt, not mutated.
    for (user_index, uuid) in new_isus {
        let user = &mut users[user_index];
        let mut isus = user.isus.clone();
        isus.push(uuid);
        *user = Arc::new(User {
            client: user.client.clone(),
            isus,
        });
    }
    Ok((created, failures))
}

pub(crate) async fn sign_in(config: &CapacityConfig, base: &str, user: &str) -> anyhow::Result<User> {
    let client = jia_sim::http::client_builder()
        .cookie_store(true)
        .no_proxy()
        .timeout(config.request_timeout)
        .build()?;
    let response = client
        .post(format!("{base}/api/auth"))
        .bearer_auth(config.signer.sign(user))
        .send()
        .await
        .with_context(|| format!("signing in {user}"))?;
    anyhow::ensure!(response.status() == 200, "signing in {user}: {}", response.status());
    Ok(User {
        client,
        isus: Vec::new(),
    })
}

/// One reading user: ISU list, then for one of its ISUs a condition page and a graph, then
/// the trend; a pause after each read.
pub(crate) async fn read_loop(config: CapacityConfig, base: String, user: Arc<User>, window: Arc<ReadWindow>) {
    let mut turn = 0usize;
    loop {
        let mut paths = vec!["/api/isu".to_owned(), "/api/trend".to_owned()];
        if !user.isus.is_empty() {
            let uuid = &user.isus[turn % user.isus.len()];
            paths.push(format!(
                "/api/condition/{uuid}?end_time=4102444800&condition_level=info,warning,critical"
            ));
            paths.push(format!("/api/isu/{uuid}/graph?datetime=1628380800"));
        }
        for path in paths {
            let started = Instant::now();
            let url = format!("{base}{path}");
            let mut answer = user.client.get(&url).send().await;
            // A kept-alive connection nginx closed as it reloaded: once more, as the scored
            // run (and Go's client) does for a GET.
            if matches!(&answer, Err(error) if crate::scenario::api::closed_before_answer(error)) {
                answer = user.client.get(&url).send().await;
            }
            let ok = match answer {
                Ok(response) => response.status() == 200 && response.bytes().await.is_ok(),
                Err(_) => false,
            };
            window.latencies.record(started.elapsed());
            if !ok {
                window.errors.fetch_add(1, Ordering::Relaxed);
            }
            tokio::time::sleep(config.read_pause).await;
        }
        turn += 1;
    }
}
