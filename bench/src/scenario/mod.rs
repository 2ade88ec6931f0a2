//! A bench run (§13): initialize, the compatibility check, then the timed load — users that
//! register ISUs and read them, viewers that poll the trend, load that grows while the service
//! keeps up — verified throughout and scored at the end.

pub mod api;
pub mod expected;
pub mod front_end;
pub mod prepare;
pub mod stats;
mod user;
pub mod validate;
mod viewer;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::Method;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use self::api::{Agent, InitializeResponse};
use self::expected::ExpectedData;
use self::prepare::{ErrorCheckConfig, ErrorCheckUser, PrepareContext, PrepareOutcome};
use self::stats::{Stats, Tag};
use self::validate::{LastFound, TrendIsu};
use crate::nodes::{cpu_readings, LocalProcess, Nodes};
use crate::report::{CpuUse, DevicePosts, JiaRepeats, Report};
use jia_sim::jwt::JwtSigner;
use jia_sim::{JiaConfig, JiaHandle, JiaSimulator, UrlPolicy};
use rand::{Rng, SeedableRng};

/// How often load may grow (§13.4).
const GROWTH_INTERVAL: Duration = Duration::from_secs(5);
/// Fresh trend entries needed per started user for one more user (§13.4).
const FRESH_ENTRIES_PER_USER: u64 = 500;
/// More timeouts than this many per started user stop growth for good and end the viewers.
const TIMEOUTS_PER_USER_LIMIT: u64 = 20;
/// Viewer slots each user grants.
const VIEWERS_PER_USER: usize = 3;
/// Malformed device batches are posted this often (§13.3).
const ERROR_POST_INTERVAL: Duration = Duration::from_secs(1);
/// How often the bench checks that its own runtime keeps time.
const STALL_TICK: Duration = Duration::from_millis(10);
/// A tick at least this late is a stall of the bench itself (see [`Stats::stall`]).
const STALL_REPORTED: Duration = Duration::from_millis(100);
/// The load does not grow after the bench's own runtime fell this far behind: more users
/// would measure the bench (which shares the host), not the service.
const GROWTH_LAG_LIMIT: Duration = Duration::from_millis(50);

/// Everything a run needs.
#[derive(Clone)]
pub struct ScenarioConfig {
    /// Public base URL of the service, e.g. `http://127.0.0.2:8080`.
    pub target: String,
    /// Load until the deadline even past 100 errors (the run still fails).
    pub keep_going: bool,
    /// Where the JIA simulator listens; its `http://` URL is sent in `POST /initialize`.
    pub jia_listen: SocketAddr,
    /// Length of the load phase.
    pub duration: Duration,
    /// Users signed in when load starts (more join as load grows).
    pub users: usize,
    /// Each user registers between 1 and this many ISUs.
    pub max_isus_per_user: usize,
    /// Add users as the service keeps up (§13.4).
    pub grow: bool,
    pub signer: JwtSigner,
    pub url_policy: UrlPolicy,
    /// Host → address overrides for device posts.
    pub resolve: Vec<(String, SocketAddr)>,
    /// Timeout of every load request (official: 1 s).
    pub request_timeout: Duration,
    /// Timeout of `POST /initialize` (official: 20 s).
    pub initialize_timeout: Duration,
    /// The nodes' internal URLs and secret, for CPU time and profiles (optional).
    pub nodes: Option<Nodes>,
    /// Local processes of the cluster whose CPU time is reported too (nginx).
    pub processes: Vec<LocalProcess>,
    /// Profile every node for this long during load, into `out_dir`.
    pub profile_seconds: Option<u64>,
    /// Where profiles are written.
    pub out_dir: PathBuf,
    /// Show a progress bar on stderr (when it is a terminal).
    pub progress: bool,
    /// The initial data the service must hold: `project` (its default dataset),
    /// `generated:N`, or the path of an official `initialize.json`.
    pub expect_data: String,
    /// The icon the service gives ISUs registered without one, if not the dataset's default.
    pub default_icon: Option<PathBuf>,
    /// Timeout of each compatibility-check request (official: 3 s).
    pub prepare_timeout: Duration,
    /// Run the compatibility check before load (off only to aim the load at a partial service).
    pub compatibility_check: bool,
}

impl ScenarioConfig {
    /// A configuration with the official timeouts and small defaults.
    pub fn new(target: &str, jia_listen: SocketAddr) -> ScenarioConfig {
        ScenarioConfig {
            target: target.trim_end_matches('/').to_owned(),
            keep_going: false,
            jia_listen,
            duration: Duration::from_secs(60),
            users: 6,
            max_isus_per_user: 9,
            grow: true,
            signer: JwtSigner::project_default(),
            url_policy: UrlPolicy::AnyUrl,
            resolve: Vec::new(),
            request_timeout: Duration::from_secs(1),
            initialize_timeout: Duration::from_secs(20),
            nodes: None,
            processes: Vec::new(),
            profile_seconds: None,
            out_dir: PathBuf::from("run/bench"),
            progress: false,
            expect_data: "project".to_owned(),
            default_icon: None,
            prepare_timeout: prepare::PREPARE_TIMEOUT,
            compatibility_check: true,
        }
    }
}

/// State shared by the users and viewers of one run.
pub(crate) struct RunContext {
    target: String,
    request_timeout: Duration,
    max_isus_per_user: usize,
    signer: JwtSigner,
    jia: JiaHandle,
    stats: Arc<Stats>,
    /// Every ISU registered so far (id → uuid, character), for trend checks.
    registered: Mutex<HashMap<i64, TrendIsu>>,
    /// Every registration of the load answered 201 (for the report: each must be on every
    /// coordinator replica afterwards).
    acknowledged: Mutex<Vec<shared::protocol::HeldIsu>>,
    /// Per ISU, the registration requests sent again after one that timed out (each is a new
    /// request the service may take to JIA again, see `JiaRepeats`).
    resent_registrations: Mutex<HashMap<String, usize>>,
    /// The devices' sent log as viewers consult it (latest finds remembered).
    trend_log: LastFound<JiaHandle>,
    /// Free viewer slots (each user adds some).
    viewer_slots: Arc<Semaphore>,
    /// Trend entries fresher than 2 real seconds, first seen by a viewer since the last growth check.
    fresh_trend_entries: AtomicU64,
    users_started: AtomicUsize,
    viewers_started: AtomicUsize,
    /// Set when timeouts stopped growth: viewers quit.
    viewers_stopped: AtomicBool,
    /// How far (ms) the bench's own runtime fell behind at worst since the last growth check.
    worst_lag_ms: AtomicU64,
    /// Users whose registrations are done, for the periodic error checks.
    ready_users: Mutex<Vec<ErrorCheckUser>>,
    /// Where new users' and viewers' tasks go.
    tasks: Mutex<JoinSet<()>>,
    deadline: Instant,
    keep_going: bool,
}

impl RunContext {
    /// Whether the load phase must end now (at the deadline; before it on too many errors
    /// unless `--keep-going`).
    fn over(&self) -> bool {
        Instant::now() >= self.deadline || (self.stats.failed() && !self.keep_going)
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let deadline = self.deadline;
        self.tasks.lock().expect("tasks poisoned").spawn(until(deadline, task));
    }

    fn start_user(self: &Arc<Self>) {
        let index = self.users_started.fetch_add(1, Ordering::Relaxed);
        self.stats.add(Tag::UserInit);
        self.viewer_slots.add_permits(VIEWERS_PER_USER);
        self.spawn(user::run_user(self.clone(), index));
    }

    /// Starts a viewer if a slot is free (called when a user moves on to its next ISU).
    fn offer_viewer(self: &Arc<Self>) {
        if self.viewers_stopped.load(Ordering::Relaxed) {
            return;
        }
        let Ok(slot) = self.viewer_slots.clone().try_acquire_owned() else {
            return;
        };
        self.viewers_started.fetch_add(1, Ordering::Relaxed);
        self.stats.add(Tag::ViewerInit);
        self.spawn(viewer::run_viewer(self.clone(), slot));
    }
}

/// Runs the whole scenario. `Err` only when the run cannot start (the simulator cannot bind);
/// a service that fails initialize or the compatibility check gets a failed report.
pub async fn run(config: ScenarioConfig) -> anyhow::Result<Report> {
    let setup_allowance = config.initialize_timeout + Duration::from_secs(30);
    let jia = JiaSimulator::start(JiaConfig {
        listen: config.jia_listen,
        url_policy: config.url_policy,
        resolve: config.resolve.clone(),
        run_for: config.duration + setup_allowance,
        ..JiaConfig::default()
    })
    .await
    .with_context(|| format!("starting the JIA simulator on {}", config.jia_listen))?;
    tracing::info!(jia = %jia.url(), target = %config.target, "jia simulator listening");

    let setup_stats = Arc::new(Stats::default());
    let language = match initialize(&config, &jia, &setup_stats).await {
        Ok(language) => language,
        Err(problem) => return Ok(failed_before_load(&config, &jia, setup_stats, problem).await),
    };
    tracing::info!(%language, "initialized");

    let expected = match load_expected(&config) {
        Ok(expected) => Arc::new(expected),
        Err(error) => {
            jia.shutdown().await;
            return Err(error);
        }
    };
    let outcome = compatibility_check(&config, &jia, &setup_stats, &expected).await;
    if !outcome.passed {
        let problem = format!(
            "compatibility check: {} errors, {} timeouts",
            outcome.errors, outcome.timeouts
        );
        return Ok(failed_before_load(&config, &jia, setup_stats, problem).await);
    }
    tracing::info!("compatibility check passed; load starts");
    Ok(load(&config, &jia, language, &expected, &outcome).await)
}

/// The compatibility check (§13.7), or a passing outcome without it when it is turned off.
async fn compatibility_check(
    config: &ScenarioConfig,
    jia: &JiaHandle,
    setup_stats: &Arc<Stats>,
    expected: &Arc<ExpectedData>,
) -> PrepareOutcome {
    let prepare_context = PrepareContext {
        timeout: config.prepare_timeout,
        signer: config.signer.clone(),
        ..PrepareContext::new(&config.target, jia.clone(), setup_stats.clone(), expected.clone())
    };
    tracing::info!("compatibility check");
    if config.compatibility_check {
        prepare::compatibility_check(&prepare_context).await
    } else {
        PrepareOutcome {
            passed: true,
            errors: 0,
            timeouts: 0,
            registered: Vec::new(),
            no_isu_user: None,
        }
    }
}

/// What is read of the cluster and JIA just before and just after the load.
struct Readings {
    cpu: Vec<(String, Option<f64>)>,
    metrics: Vec<(String, Option<String>)>,
    device_posts: [u64; 5],
}

impl Readings {
    async fn take(config: &ScenarioConfig, jia: &JiaHandle) -> Readings {
        Readings {
            cpu: cpu_readings(config.nodes.as_ref(), &config.processes).await,
            metrics: scrape_nodes(config.nodes.as_ref()).await,
            device_posts: jia.device_posts(),
        }
    }
}

/// The timed load, from its first user to the deadline, and its report; JIA is shut down
/// at the end.
async fn load(
    config: &ScenarioConfig,
    jia: &JiaHandle,
    language: String,
    expected: &ExpectedData,
    outcome: &PrepareOutcome,
) -> Report {
    let stats = Arc::new(Stats::default());
    let started = Instant::now();
    let ctx = run_context(config, jia, &stats, expected, outcome, started);
    let before = Readings::take(config, jia).await;
    let reload_watch = config
        .processes
        .iter()
        .find(|process| process.name == "nginx")
        .map(|nginx| crate::nodes::ReloadWatch::start(nginx.pid));
    start_load(config, &ctx, jia);
    let profiles = tokio::spawn(take_profiles(config.clone(), config.duration));
    let load_time = drive_load(config, &ctx, started).await;
    let after = Readings::take(config, jia).await;
    let router_reloads = match reload_watch {
        Some(watch) => watch.stop().await,
        None => None,
    };
    let measured = Measured {
        load_time,
        before,
        after,
        router_reloads,
        profiles: profiles.await.unwrap_or_default(),
    };
    jia.shutdown().await;
    report_of_load(config, jia, &ctx, language, measured)
}

/// What the load measured beside its shared state.
struct Measured {
    load_time: Duration,
    before: Readings,
    after: Readings,
    router_reloads: Option<u64>,
    profiles: Vec<PathBuf>,
}

/// The load's shared state: the ISUs the compatibility check registered have devices whose
/// sent log the validator can read; the initial ISUs have none and are only checked for
/// structure and regression.
fn run_context(
    config: &ScenarioConfig,
    jia: &JiaHandle,
    stats: &Arc<Stats>,
    expected: &ExpectedData,
    outcome: &PrepareOutcome,
    started: Instant,
) -> Arc<RunContext> {
    let registered: HashMap<i64, TrendIsu> = outcome
        .registered
        .iter()
        .map(|isu| {
            let trend_isu = TrendIsu {
                uuid: isu.isu.uuid.clone(),
                character: isu.isu.character.clone(),
            };
            (isu.isu.id, trend_isu)
        })
        .collect();
    let first_checked_user = initial_error_check_user(expected, outcome);
    Arc::new(RunContext {
        target: config.target.clone(),
        request_timeout: config.request_timeout,
        max_isus_per_user: config.max_isus_per_user.max(1),
        signer: config.signer.clone(),
        jia: jia.clone(),
        stats: stats.clone(),
        registered: Mutex::new(registered),
        acknowledged: Mutex::new(Vec::new()),
        resent_registrations: Mutex::new(HashMap::new()),
        trend_log: LastFound::new(jia.clone()),
        viewer_slots: Arc::new(Semaphore::new(0)),
        fresh_trend_entries: AtomicU64::new(0),
        users_started: AtomicUsize::new(0),
        viewers_started: AtomicUsize::new(0),
        viewers_stopped: AtomicBool::new(false),
        worst_lag_ms: AtomicU64::new(0),
        ready_users: Mutex::new(first_checked_user.into_iter().collect()),
        tasks: Mutex::new(JoinSet::new()),
        deadline: started + config.duration,
        keep_going: config.keep_going,
    })
}

/// Starts the load: JIA's malformed posts, the first users, the periodic error checks (on
/// a user ready for them) and the bench's own lag watch.
fn start_load(config: &ScenarioConfig, ctx: &Arc<RunContext>, jia: &JiaHandle) {
    ctx.stats.add(Tag::StartBenchmark);
    jia.start_error_poster(ERROR_POST_INTERVAL);
    for _ in 0..config.users {
        ctx.start_user();
    }
    let checks = ErrorCheckConfig {
        target: config.target.clone(),
        timeout: prepare::LOAD_ERROR_CHECK_TIMEOUT,
        signer: config.signer.clone(),
        clock: jia.clock(),
        stats: ctx.stats.clone(),
    };
    let picker = ctx.clone();
    let mut pick_rng = rand::rngs::StdRng::from_entropy();
    ctx.spawn(prepare::run_error_checks(
        checks,
        move || {
            let users = picker.ready_users.lock().expect("ready users poisoned");
            (!users.is_empty()).then(|| users[pick_rng.gen_range(0..users.len())].clone())
        },
        prepare::ERROR_CHECK_INTERVAL,
    ));
    ctx.spawn(watch_lag(ctx.clone()));
}

/// Grows the load and shows progress until the deadline, then abandons what is in flight,
/// as the official bench does; how long the load ran.
async fn drive_load(config: &ScenarioConfig, ctx: &Arc<RunContext>, started: Instant) -> Duration {
    let progress = progress_bar(config);
    let mut growth = tokio::time::interval_at(started + GROWTH_INTERVAL, GROWTH_INTERVAL);
    let mut redraw = tokio::time::interval(Duration::from_millis(250));
    while !ctx.over() {
        tokio::select! {
            _ = growth.tick() => grow(ctx, config.grow),
            _ = redraw.tick() => show_progress(&progress, ctx, started),
        }
    }
    progress.finish_and_clear();
    let load_time = started.elapsed();
    let mut tasks = std::mem::take(&mut *ctx.tasks.lock().expect("tasks poisoned"));
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    load_time
}

/// The report of a load that ran, from its shared state, JIA's counts and what it measured.
fn report_of_load(
    config: &ScenarioConfig,
    jia: &JiaHandle,
    ctx: &RunContext,
    language: String,
    measured: Measured,
) -> Report {
    let Measured {
        load_time,
        before,
        after,
        router_reloads,
        profiles,
    } = measured;
    let snapshot = ctx.stats.snapshot();
    let acknowledged_registrations = std::mem::take(&mut *ctx.acknowledged.lock().expect("acknowledged poisoned"));
    let activated: std::collections::HashSet<String> = jia
        .activations()
        .into_iter()
        .map(|activation| activation.isu_uuid)
        .collect();
    let unactivated_acknowledged = acknowledged_registrations
        .iter()
        .filter(|isu| !activated.contains(&isu.uuid))
        .count();
    let resent = std::mem::take(&mut *ctx.resent_registrations.lock().expect("resent poisoned"));
    let repeated_activations = JiaRepeats::split(&jia.repeated_activations_by_isu(), &resent);
    Report {
        target: config.target.clone(),
        language,
        failed_phase: None,
        load_time,
        score: snapshot.score(),
        stats: snapshot,
        users: ctx.users_started.load(Ordering::Relaxed),
        viewers: ctx.viewers_started.load(Ordering::Relaxed),
        activations: activated.len(),
        repeated_activations,
        unactivated_acknowledged,
        sent_conditions: jia.sent_total(),
        cpu: CpuUse::between(&before.cpu, &after.cpu),
        device_posts: DevicePosts::between(before.device_posts, after.device_posts),
        device_posts_whole_run: DevicePosts::between([0; 5], jia.device_posts()),
        bench_cpus: crate::nodes::own_cpus_allowed(),
        profiles,
        cells: crate::report::CellFigures::between(&before.metrics, &after.metrics),
        router_reloads,
        acknowledged_registrations,
    }
}

/// Every node's `/metrics` (none without `--node`).
async fn scrape_nodes(nodes: Option<&Nodes>) -> Vec<(String, Option<String>)> {
    match nodes {
        Some(nodes) => nodes.scrape_all().await,
        None => Vec::new(),
    }
}

fn load_expected(config: &ScenarioConfig) -> anyhow::Result<ExpectedData> {
    let mut expected = ExpectedData::load(&config.expect_data)
        .with_context(|| format!("loading the expected initial data {:?}", config.expect_data))?;
    if let Some(path) = &config.default_icon {
        let icon = std::fs::read(path).with_context(|| format!("reading the default icon {}", path.display()))?;
        expected = expected.with_default_icon(&icon);
    }
    Ok(expected)
}

/// The first user of the initial data, with its initial ISUs and those the check registered.
fn initial_error_check_user(expected: &ExpectedData, outcome: &PrepareOutcome) -> Option<ErrorCheckUser> {
    let owner = outcome.registered.first().map(|isu| isu.owner.clone())?;
    let mut isu_uuids: Vec<String> = expected
        .user(&owner)
        .map(|user| expected.isus_of(user).map(|isu| isu.uuid.clone()).collect())
        .unwrap_or_default();
    isu_uuids.extend(
        outcome
            .registered
            .iter()
            .filter(|isu| isu.owner == owner)
            .map(|isu| isu.isu.uuid.clone()),
    );
    Some(ErrorCheckUser {
        jia_user_id: owner,
        isu_uuids,
    })
}

/// Runs `work` until it ends or the deadline passes; what it had in flight is abandoned.
async fn until(deadline: Instant, work: impl std::future::Future<Output = ()>) {
    tokio::select! {
        _ = tokio::time::sleep_until(deadline) => {}
        _ = work => {}
    }
}

/// Measures how far the bench's own runtime falls behind a [`STALL_TICK`] timer, until the
/// load ends: the worst since the last growth check, and each stall of [`STALL_REPORTED`]
/// or more.
async fn watch_lag(ctx: Arc<RunContext>) {
    let mut last = Instant::now();
    loop {
        tokio::time::sleep(STALL_TICK).await;
        let now = Instant::now();
        let late = now.saturating_duration_since(last + STALL_TICK);
        ctx.worst_lag_ms.fetch_max(late.as_millis() as u64, Ordering::Relaxed);
        if late >= STALL_REPORTED {
            let to = std::time::SystemTime::now();
            ctx.stats.stall(to - late, to);
        }
        last = now;
    }
}

/// §13.4: stop growing (and end the viewers) once timeouts pile up; otherwise add one user per
/// 500 fresh trend entries per user seen since the last check, unless the bench itself fell
/// behind (see [`growth`]).
fn grow(ctx: &Arc<RunContext>, enabled: bool) {
    let fresh = ctx.fresh_trend_entries.swap(0, Ordering::Relaxed);
    let lag = Duration::from_millis(ctx.worst_lag_ms.swap(0, Ordering::Relaxed));
    if !enabled || ctx.viewers_stopped.load(Ordering::Relaxed) {
        return;
    }
    let users = ctx.users_started.load(Ordering::Relaxed).max(1) as u64;
    match growth(fresh, users, ctx.stats.timeouts(), lag) {
        Growth::Stop => {
            tracing::info!(users, "timeouts pile up: load stops growing");
            ctx.viewers_stopped.store(true, Ordering::Relaxed);
        }
        Growth::Hold => {
            ctx.stats.growth_held();
            tracing::debug!(?lag, "the bench itself falls behind: load does not grow");
        }
        Growth::Add(added) => {
            for _ in 0..added {
                ctx.start_user();
            }
            if added > 0 {
                tracing::debug!(added, fresh, "load grows");
            }
        }
    }
}

/// What one growth check does.
#[derive(Debug, PartialEq, Eq)]
enum Growth {
    /// Timeouts piled up: no more users, and viewers quit.
    Stop,
    /// The bench itself fell behind: no user this time.
    Hold,
    /// This many new users.
    Add(u64),
}

/// The growth check after `fresh` fresh trend entries with `users` users, `timeouts` so far
/// and the bench's own runtime at worst `lag` behind since the last check.
fn growth(fresh: u64, users: u64, timeouts: u64, lag: Duration) -> Growth {
    if timeouts > TIMEOUTS_PER_USER_LIMIT * users {
        return Growth::Stop;
    }
    if lag >= GROWTH_LAG_LIMIT {
        return Growth::Hold;
    }
    Growth::Add(fresh / (FRESH_ENTRIES_PER_USER * users))
}

fn progress_bar(config: &ScenarioConfig) -> ProgressBar {
    if !config.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(config.duration.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} load [{bar:30}] {elapsed:>3}/{duration} {msg}")
            .expect("valid progress template")
            .progress_chars("=> "),
    );
    bar
}

fn show_progress(bar: &ProgressBar, ctx: &RunContext, started: Instant) {
    bar.set_position(started.elapsed().as_millis() as u64);
    let snapshot = ctx.stats.snapshot();
    bar.set_message(format!(
        "score≈{} users {} viewers {} read {} errors {} timeouts {}",
        snapshot.score().points,
        ctx.users_started.load(Ordering::Relaxed),
        ctx.viewers_started.load(Ordering::Relaxed),
        snapshot.conditions_read(),
        snapshot.error_count(),
        snapshot.timeouts,
    ));
}

/// Profiles all nodes at once, starting a quarter into the load (once users are busy).
async fn take_profiles(config: ScenarioConfig, load: Duration) -> Vec<PathBuf> {
    let (Some(nodes), Some(seconds)) = (config.nodes, config.profile_seconds) else {
        return Vec::new();
    };
    tokio::time::sleep(load / 4).await;
    let out = config.out_dir.join("profiles");
    tracing::info!(seconds, out = %out.display(), "profiling every node");
    nodes.profile_all(seconds, &out).await
}

/// Node, local process and bench CPU seconds so far.
/// `POST /initialize` with the simulator's URL; its `language`, or why it failed.
async fn initialize(config: &ScenarioConfig, jia: &JiaHandle, stats: &Arc<Stats>) -> Result<String, String> {
    let agent = Agent::new(&config.target, config.initialize_timeout, stats.clone())
        .map_err(|error| format!("building the HTTP client: {error}"))?;
    let request = agent
        .request(Method::POST, "/initialize")
        .json(&json!({"jia_service_url": jia.url()}));
    let response = agent.json::<InitializeResponse>("POST /initialize", request, 200).await;
    match response {
        Some(InitializeResponse { language }) if !language.is_empty() => Ok(language),
        Some(_) => Err("POST /initialize answered an empty language".to_owned()),
        None => {
            let snapshot = stats.snapshot();
            let cause = snapshot
                .error_samples
                .last()
                .cloned()
                .unwrap_or_else(|| "timed out".to_owned());
            Err(format!("POST /initialize failed: {cause}"))
        }
    }
}

async fn failed_before_load(config: &ScenarioConfig, jia: &JiaHandle, stats: Arc<Stats>, problem: String) -> Report {
    jia.shutdown().await;
    let snapshot = stats.snapshot();
    Report {
        target: config.target.clone(),
        language: String::new(),
        failed_phase: Some(problem),
        load_time: Duration::ZERO,
        score: snapshot.score(),
        stats: snapshot,
        users: 0,
        viewers: 0,
        activations: jia.activations().len(),
        repeated_activations: JiaRepeats::split(&jia.repeated_activations_by_isu(), &HashMap::new()),
        unactivated_acknowledged: 0,
        sent_conditions: jia.sent_total(),
        cpu: Vec::new(),
        device_posts: DevicePosts::default(),
        device_posts_whole_run: DevicePosts::between([0; 5], jia.device_posts()),
        bench_cpus: crate::nodes::own_cpus_allowed(),
        profiles: Vec::new(),
        cells: Vec::new(),
        router_reloads: None,
        acknowledged_registrations: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_grows_with_fresh_entries_unless_timeouts_pile_up_or_the_bench_falls_behind() {
        let on_time = Duration::from_millis(3);
        let per_user = FRESH_ENTRIES_PER_USER;
        assert_eq!(growth(3 * 10 * per_user, 10, 0, on_time), Growth::Add(3));
        assert_eq!(growth(per_user - 1, 1, 0, on_time), Growth::Add(0));
        assert_eq!(growth(3 * 10 * per_user, 10, 0, GROWTH_LAG_LIMIT), Growth::Hold);
        assert_eq!(
            growth(3 * 10 * per_user, 10, TIMEOUTS_PER_USER_LIMIT * 10 + 1, on_time),
            Growth::Stop
        );
        // Piled-up timeouts stop the load even when the bench also fell behind.
        assert_eq!(
            growth(0, 10, TIMEOUTS_PER_USER_LIMIT * 10 + 1, GROWTH_LAG_LIMIT),
            Growth::Stop
        );
    }
}
