//! A short smoke/load run against a running cluster: initialize, sign users in, register ISUs,
//! then read, verify and score until the duration ends.

pub mod api;
pub mod stats;
mod user;
pub mod validate;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use reqwest::Method;
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;

use self::api::{Agent, InitializeResponse, TrendEntry};
use self::stats::{Score, Snapshot, Stats};
use self::validate::{check_trend, TrendIsu, TrendMemory};
use crate::jia::{JiaConfig, JiaHandle, JiaSimulator, UrlPolicy};
use crate::jwt::JwtSigner;

/// Everything a run needs.
#[derive(Clone)]
pub struct ScenarioConfig {
    /// Public base URL of the service, e.g. `http://127.0.0.2:8080`.
    pub target: String,
    /// Where the JIA simulator listens; its `http://` URL is sent in `POST /initialize`.
    pub jia_listen: SocketAddr,
    /// Length of the load phase, after `POST /initialize`.
    pub duration: Duration,
    pub users: usize,
    pub isus_per_user: usize,
    pub signer: JwtSigner,
    pub url_policy: UrlPolicy,
    /// Host → address overrides for device posts.
    pub resolve: Vec<(String, SocketAddr)>,
    /// Timeout of every request but `POST /initialize` (official: 1 s).
    pub request_timeout: Duration,
    /// Timeout of `POST /initialize` (official: 20 s).
    pub initialize_timeout: Duration,
    /// Interval of the progress log lines.
    pub progress_interval: Duration,
}

impl ScenarioConfig {
    /// A configuration with the official timeouts and small defaults.
    pub fn new(target: &str, jia_listen: SocketAddr) -> ScenarioConfig {
        ScenarioConfig {
            target: target.trim_end_matches('/').to_owned(),
            jia_listen,
            duration: Duration::from_secs(20),
            users: 4,
            isus_per_user: 3,
            signer: JwtSigner::project_default(),
            url_policy: UrlPolicy::AnyUrl,
            resolve: Vec::new(),
            request_timeout: Duration::from_secs(1),
            initialize_timeout: Duration::from_secs(20),
            progress_interval: Duration::from_secs(5),
        }
    }
}

/// State shared by the users of one run.
pub(crate) struct RunContext {
    target: String,
    request_timeout: Duration,
    isus_per_user: usize,
    signer: JwtSigner,
    jia: JiaHandle,
    stats: Arc<Stats>,
    /// Every ISU registered so far (id → uuid, character), for trend checks.
    registered: Mutex<HashMap<i64, TrendIsu>>,
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct Report {
    pub language: String,
    pub elapsed: Duration,
    pub stats: Snapshot,
    pub score: Score,
    pub activations: usize,
    pub sent_conditions: usize,
}

impl fmt::Display for Report {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(out, "language: {}", self.language)?;
        writeln!(out, "elapsed: {:.1}s", self.elapsed.as_secs_f64())?;
        writeln!(out, "activations: {}", self.activations)?;
        writeln!(out, "conditions sent by devices: {}", self.sent_conditions)?;
        writeln!(out, "{}", self.stats)?;
        for (number, sample) in self.stats.error_samples.iter().enumerate() {
            writeln!(out, "error #{}: {sample}", number + 1)?;
        }
        let score = &self.score;
        write!(
            out,
            "score breakdown (approximation of the official scoring): base {} + reads {} + graphs {} - deductions {}{}",
            score.base,
            score.reads,
            score.graphs,
            score.deductions,
            if score.failed { " => FAILED" } else { "" }
        )
    }
}

/// Runs the scenario. Fails only when the run cannot start: the simulator cannot bind, or
/// `POST /initialize` does not answer 200 with a non-empty `language`.
pub async fn run(config: ScenarioConfig) -> anyhow::Result<Report> {
    let setup_allowance = config.initialize_timeout + Duration::from_secs(10);
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

    let stats = Arc::new(Stats::default());
    let language = initialize(&config, &jia, &stats).await?;
    tracing::info!(%language, "initialized");

    let started = Instant::now();
    let deadline = started + config.duration;
    let ctx = Arc::new(RunContext {
        target: config.target.clone(),
        request_timeout: config.request_timeout,
        isus_per_user: config.isus_per_user,
        signer: config.signer.clone(),
        jia: jia.clone(),
        stats: stats.clone(),
        registered: Mutex::new(HashMap::new()),
    });

    let mut tasks = JoinSet::new();
    let viewer = ctx.clone();
    tasks.spawn(until(deadline, async move { first_trend(&viewer).await }));
    for index in 0..config.users {
        tasks.spawn(until(deadline, user::run_user(ctx.clone(), index)));
    }
    let reporter = tokio::spawn(until(
        deadline,
        report_progress(ctx.clone(), started, config.progress_interval),
    ));
    while let Some(joined) = tasks.join_next().await {
        if let Err(error) = joined {
            stats.error(format!("bench task failed: {error}"));
        }
    }
    reporter.abort();
    jia.shutdown().await;

    let snapshot = stats.snapshot();
    Ok(Report {
        language,
        elapsed: started.elapsed(),
        score: snapshot.score(),
        stats: snapshot,
        activations: jia.activations().len(),
        sent_conditions: jia.sent_total(),
    })
}

/// Runs `work` until it ends or the deadline passes; what it had in flight is abandoned.
async fn until(deadline: Instant, work: impl std::future::Future<Output = ()>) {
    tokio::select! {
        _ = tokio::time::sleep_until(deadline) => {}
        _ = work => {}
    }
}

async fn initialize(config: &ScenarioConfig, jia: &JiaHandle, stats: &Arc<Stats>) -> anyhow::Result<String> {
    let agent = Agent::new(&config.target, config.initialize_timeout, stats.clone())?;
    let request = agent
        .request(Method::POST, "/initialize")
        .json(&json!({"jia_service_url": jia.url()}));
    let response = agent.json::<InitializeResponse>("POST /initialize", request, 200).await;
    match response {
        Some(InitializeResponse { language }) if !language.is_empty() => Ok(language),
        Some(_) => bail!("POST /initialize answered an empty language"),
        None => {
            let snapshot = stats.snapshot();
            let cause = snapshot
                .error_samples
                .last()
                .cloned()
                .unwrap_or_else(|| "timed out".to_owned());
            bail!("POST /initialize failed: {cause}")
        }
    }
}

/// The trend right after initialize, as an anonymous viewer sees it.
async fn first_trend(ctx: &RunContext) {
    let Ok(viewer) = Agent::new(&ctx.target, ctx.request_timeout, ctx.stats.clone()) else {
        return;
    };
    let request = viewer.request(Method::GET, "/api/trend");
    let Some(entries) = viewer.json::<Vec<TrendEntry>>("GET /api/trend", request, 200).await else {
        return;
    };
    let known = HashMap::new();
    if let Err(problem) = check_trend(&entries, &known, &ctx.jia, &mut TrendMemory::default()) {
        ctx.stats.error(problem);
    }
}

async fn report_progress(ctx: Arc<RunContext>, started: Instant, interval: Duration) {
    let mut ticker = tokio::time::interval_at(started + interval, interval);
    loop {
        ticker.tick().await;
        tracing::info!(
            elapsed_s = started.elapsed().as_secs(),
            isus = ctx.jia.activations().len(),
            sent = ctx.jia.sent_total(),
            "progress: {}",
            ctx.stats.snapshot()
        );
    }
}
