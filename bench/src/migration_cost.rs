//! Migration cost: what moving a heavy slot to another cell costs while the service runs;
//! and, with the same windows, flood cost: what one ISU posting as fast as it can costs the
//! others (the per-ISU quota shapes it).
//!
//! Devices post at the real rate (every 40 ms) for a set of background ISUs and for the
//! heavy ones, and users read both (ISU list, trend, a condition page, a graph). The heavy
//! ISUs all live in one placement slot and are first filled with a large history (one
//! million conditions by default, posted in batches of 1,000). Then the slot moves to
//! another cell through the coordinator's cells API, and four windows are measured: before,
//! during the migration (from the call to its answer: clone, catch-up, flip), right after
//! the flip (the router's reload and the source's forget fall here) and settled. Each window
//! has the read latency of the background ISUs and of the heavy ones, the devices' post
//! latency, errors, and the CPU the cluster used.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::capacity::{
    initialize, read_loop, register_step, sign_in, start_lean_jia, CapacityConfig, ReadWindow, User,
};
use crate::nodes::cpu_readings;
use crate::report::{CpuUse, DevicePosts};
use jia_sim::JiaHandle;

/// A migration-cost run's settings.
#[derive(Clone)]
pub struct MigrationCostConfig {
    /// Target, JIA, signer, nodes (the coordinator among them, with the secret), processes,
    /// and the readers' settings.
    pub base: CapacityConfig,
    /// History put into the moving slot before it moves.
    pub conditions: usize,
    /// ISUs of the moving slot, sharing that history.
    pub heavy_isus: usize,
    /// ISUs elsewhere, posting and read all along.
    pub background_isus: usize,
    /// Length of the windows before and after.
    pub window: Duration,
    /// Instead of a migration: one heavy ISU floods for this long (batches of 1,000 from
    /// [`FLOOD_CONNECTIONS`] connections, back to back).
    pub flood: Option<Duration>,
}

/// The flooding ISU's UUID starts with this (its simulator device stays silent).
const FLOODER_PREFIX: &str = "f100d";

/// Connections the flooding ISU posts from at once.
pub const FLOOD_CONNECTIONS: usize = 4;

/// Conditions per posted batch while filling (the ingest limit).
const FILL_BATCH: usize = 1_000;
/// Fill posts in flight at once.
const FILL_CONCURRENCY: usize = 4;
/// The first timestamp of the filled history (2017): far from the devices' own.
const FILL_START: i64 = 1_500_000_000;
/// The moving slot: the UUIDs' first two hex digits.
const SLOT: &str = "00";

/// What one window measured.
#[derive(Debug, Clone)]
pub struct Window {
    pub name: &'static str,
    pub seconds: f64,
    pub reads: u64,
    pub read_p50_ms: Option<f64>,
    pub read_p99_ms: Option<f64>,
    pub heavy_reads: u64,
    pub heavy_read_p99_ms: Option<f64>,
    pub device_posts: u64,
    pub device_post_p99_ms: Option<f64>,
    pub errors: u64,
    /// CPU seconds per second of the cluster's processes (nodes and nginx).
    pub cluster_cpu: Option<f64>,
}

impl Window {
    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "seconds": self.seconds,
            "reads": self.reads,
            "read_p50_ms": self.read_p50_ms,
            "read_p99_ms": self.read_p99_ms,
            "heavy_reads": self.heavy_reads,
            "heavy_read_p99_ms": self.heavy_read_p99_ms,
            "device_posts": self.device_posts,
            "device_post_p99_ms": self.device_post_p99_ms,
            "errors": self.errors,
            "cluster_cpu": self.cluster_cpu,
        })
    }
}

#[derive(Debug, Clone)]
pub struct MigrationCostReport {
    /// In flood mode: what the flooding ISU's batches got (202, 429, other).
    pub flood: Option<Value>,
    pub slot: String,
    /// The coordinator's answer (from, to, isus, conditions, millis, map_version).
    pub migration: Value,
    /// Wall time of the migrate call, as the operator sees it.
    pub migration_seconds: f64,
    pub filled_conditions: usize,
    pub fill_seconds: f64,
    pub windows: Vec<Window>,
}

impl MigrationCostReport {
    pub fn errors(&self) -> u64 {
        self.windows.iter().map(|window| window.errors).sum()
    }

    pub fn to_json(&self) -> Value {
        let key = if self.flood.is_some() {
            "flood_cost"
        } else {
            "migration_cost"
        };
        json!({
            key: {
                "flood": self.flood,
                "slot": self.slot,
                "migration": self.migration,
                "migration_seconds": self.migration_seconds,
                "filled_conditions": self.filled_conditions,
                "fill_seconds": self.fill_seconds,
                "errors": self.errors(),
                "windows": self.windows.iter().map(Window::to_json).collect::<Vec<_>>(),
            }
        })
    }
}

impl std::fmt::Display for MigrationCostReport {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let migration = &self.migration;
        if let Some(flood) = &self.flood {
            writeln!(
                out,
                "one ISU flooded for {} s ({} connections, 1,000 conditions a batch): {} batches accepted (202), {} shaped away (429), {} other answers",
                flood["seconds"], FLOOD_CONNECTIONS, flood["accepted"], flood["too_many"], flood["other"]
            )?;
        } else {
            writeln!(
            out,
            "slot {} moved {} → {}: {} ISUs, {} conditions, {:.2} s (coordinator: {} ms to the flip); filled {} conditions in {:.1} s",
            self.slot,
            migration["from"].as_str().unwrap_or("?"),
            migration["to"].as_str().unwrap_or("?"),
            migration["isus"],
            migration["conditions"],
            self.migration_seconds,
            migration["millis"],
            self.filled_conditions,
            self.fill_seconds,
        )?;
        }
        writeln!(
            out,
            "{:<11} {:>6} {:>7} {:>9} {:>9} {:>11} {:>9} {:>10} {:>6} {:>8}",
            "window", "secs", "reads", "read p50", "read p99", "heavy p99", "posts/s", "post p99", "errors", "cluster"
        )?;
        let ms = |value: Option<f64>| value.map_or("-".to_owned(), |ms| format!("{ms:.1}ms"));
        for window in &self.windows {
            writeln!(
                out,
                "{:<11} {:>6.1} {:>7} {:>9} {:>9} {:>11} {:>9.0} {:>10} {:>6} {:>8}",
                window.name,
                window.seconds,
                window.reads,
                ms(window.read_p50_ms),
                ms(window.read_p99_ms),
                ms(window.heavy_read_p99_ms),
                window.device_posts as f64 / window.seconds.max(1e-9),
                ms(window.device_post_p99_ms),
                window.errors,
                window
                    .cluster_cpu
                    .map_or("-".to_owned(), |cpu| format!("{:.0}%", cpu * 100.0)),
            )?;
        }
        Ok(())
    }
}

/// Runs the measurement (initialize, background and heavy ISUs, fill, four windows).
pub async fn run(config: MigrationCostConfig) -> anyhow::Result<MigrationCostReport> {
    let nodes = config
        .base
        .nodes
        .clone()
        .context("the migration cost needs the coordinator: --node coordinator=URL and --cluster-secret-file")?;
    let coordinator = nodes
        .url_of("coordinator")
        .context("no --node coordinator=URL")?
        .trim_end_matches('/')
        .to_owned();
    let mut jia_config = config.base.jia.clone();
    if config.flood.is_some() {
        // The flooding ISU posts through the flood alone.
        jia_config.silent_uuid_prefix = Some(FLOODER_PREFIX.to_owned());
    }
    let jia = start_lean_jia(&jia_config).await?;
    let outcome = measure(&config, &jia, &coordinator, nodes.secret()).await;
    jia.shutdown().await;
    outcome
}

/// The cell after slot 00's owner (the migration's target).
async fn next_cell_of_slot_00(plain: &reqwest::Client, coordinator: &str, secret: &str) -> anyhow::Result<String> {
    let placement: Value = plain
        .get(format!("{coordinator}/internal/placement"))
        .header(shared::protocol::SECRET_HEADER, secret)
        .send()
        .await
        .context("GET /internal/placement")?
        .error_for_status()?
        .json()
        .await?;
    let cells: Vec<String> = placement["map"]["cells"]
        .as_array()
        .context("the placement map lists no cells")?
        .iter()
        .filter_map(|cell| cell["name"].as_str().map(str::to_owned))
        .collect();
    anyhow::ensure!(
        cells.len() >= 2,
        "a migration needs two cells; the cluster has {}",
        cells.len()
    );
    let owner = placement["map"]["slots"][0].as_u64().context("slot 00 has no cell")? as usize;
    Ok(cells[(owner + 1) % cells.len()].clone())
}

async fn measure(
    config: &MigrationCostConfig,
    jia: &JiaHandle,
    coordinator: &str,
    secret: &str,
) -> anyhow::Result<MigrationCostReport> {
    let base_config = &config.base;
    let base = base_config.target.trim_end_matches('/').to_owned();
    initialize(&base, jia).await?;
    let plain = jia_sim::http::client_builder().no_proxy().build()?;

    let target = match config.flood {
        Some(_) => String::new(),
        None => next_cell_of_slot_00(&plain, coordinator, secret).await?,
    };

    let mut users = Vec::new();
    let (created, failed) = register_step(base_config, &base, &mut users, 0, config.background_isus).await?;
    anyhow::ensure!(
        failed == 0,
        "{failed} of {} background registrations failed",
        created as u64 + failed
    );
    let heavy = register_heavy(config, &base).await?;

    let started = Instant::now();
    let filled = match config.flood {
        Some(_) => 0,
        None => fill(&heavy, &base, config.conditions).await?,
    };
    let fill_seconds = started.elapsed().as_secs_f64();
    tracing::info!(conditions = filled, seconds = fill_seconds, "slot {SLOT} filled");

    let background = Arc::new(ReadWindow::default());
    let heavy_window = Arc::new(ReadWindow::default());
    let mut readers = JoinSet::new();
    for user in &users {
        readers.spawn(read_loop(
            base_config.clone(),
            base.clone(),
            user.clone(),
            background.clone(),
        ));
    }
    readers.spawn(read_loop(
        base_config.clone(),
        base.clone(),
        heavy.clone(),
        heavy_window.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;

    let meter = Meter {
        config: base_config,
        jia,
        background: &background,
        heavy: &heavy_window,
    };
    let mut windows = Vec::new();
    let mut mark = meter.start().await;
    tokio::time::sleep(config.window).await;
    windows.push(meter.window("before", &mut mark).await);

    if let Some(length) = config.flood {
        let flood = flood(&heavy, &base, length).await;
        windows.push(meter.window("flood", &mut mark).await);
        tokio::time::sleep(config.window).await;
        windows.push(meter.window("after", &mut mark).await);
        readers.abort_all();
        while readers.join_next().await.is_some() {}
        return Ok(MigrationCostReport {
            flood: Some(flood),
            slot: SLOT.to_owned(),
            migration: Value::Null,
            migration_seconds: 0.0,
            filled_conditions: 0,
            fill_seconds: 0.0,
            windows,
        });
    }
    let called = Instant::now();
    let answer = plain
        .post(format!("{coordinator}{}", shared::protocol::COORDINATOR_MIGRATE))
        .header(shared::protocol::SECRET_HEADER, secret)
        .json(&json!({"slot": SLOT, "to": target}))
        .timeout(Duration::from_secs(3600))
        .send()
        .await
        .context("POST /internal/cells/migrate")?;
    let status = answer.status();
    let body: Value = answer.json().await.unwrap_or(Value::Null);
    let migration_seconds = called.elapsed().as_secs_f64();
    windows.push(meter.window("migration", &mut mark).await);
    anyhow::ensure!(status.is_success(), "the migration failed ({status}): {body}");

    tokio::time::sleep(Duration::from_secs(3)).await;
    windows.push(meter.window("after flip", &mut mark).await);
    tokio::time::sleep(config.window).await;
    windows.push(meter.window("settled", &mut mark).await);
    readers.abort_all();
    while readers.join_next().await.is_some() {}

    Ok(MigrationCostReport {
        flood: None,
        slot: SLOT.to_owned(),
        migration: body["migrations"][0].clone(),
        migration_seconds,
        filled_conditions: filled,
        fill_seconds,
        windows,
    })
}

/// Signs in one user and registers the heavy ISUs (UUIDs in [`SLOT`]).
async fn register_heavy(config: &MigrationCostConfig, base: &str) -> anyhow::Result<Arc<User>> {
    let user = sign_in(&config.base, base, "migration-heavy").await?;
    let mut isus = Vec::new();
    let prefix = if config.flood.is_some() { FLOODER_PREFIX } else { SLOT };
    for _ in 0..config.heavy_isus {
        let uuid = format!("{prefix}{}", &uuid::Uuid::new_v4().to_string()[prefix.len()..]);
        let form = reqwest::multipart::Form::new()
            .text("jia_isu_uuid", uuid.clone())
            .text("isu_name", "heavy");
        let response = user
            .client
            .post(format!("{base}/api/isu"))
            .multipart(form)
            .send()
            .await
            .context("registering a heavy ISU")?;
        anyhow::ensure!(
            response.status() == 201,
            "registering a heavy ISU: {}",
            response.status()
        );
        isus.push(uuid);
    }
    Ok(Arc::new(User {
        client: user.client,
        isus,
    }))
}

/// Posts `conditions` conditions spread over the heavy ISUs, [`FILL_BATCH`] at a time, through
/// the public server; every batch must be answered 202. Returns the conditions stored.
async fn fill(heavy: &User, base: &str, conditions: usize) -> anyhow::Result<usize> {
    let client = jia_sim::http::client_builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()?;
    let per_isu = conditions / heavy.isus.len().max(1);
    let batches: Vec<(String, usize, usize)> = heavy
        .isus
        .iter()
        .flat_map(|uuid| {
            (0..per_isu)
                .step_by(FILL_BATCH)
                .map(move |first| (uuid.clone(), first, FILL_BATCH.min(per_isu - first)))
        })
        .collect();
    let mut posts = JoinSet::new();
    let mut stored = 0;
    for (uuid, first, count) in batches {
        if posts.len() >= FILL_CONCURRENCY {
            stored += posts.join_next().await.expect("a post in flight")??;
        }
        let (client, url) = (client.clone(), format!("{base}/api/condition/{uuid}"));
        posts.spawn(async move {
            let batch: Vec<Value> = (first..first + count)
                .map(|offset| {
                    json!({
                        "is_sitting": offset % 3 == 0,
                        "condition": crate::model::condition_string(offset % 2 == 0, offset % 5 == 0, offset % 7 == 0),
                        "message": "history",
                        "timestamp": FILL_START + offset as i64,
                    })
                })
                .collect();
            let response = client.post(&url).json(&batch).send().await?;
            anyhow::ensure!(
                response.status() != 429,
                "filling {url}: 429: the cluster's per-ISU quota shapes the history being loaded; \
                 start the cluster with ISU_QUOTA=0 (scripts/bench --migration-cost does)"
            );
            anyhow::ensure!(response.status() == 202, "filling {url}: {}", response.status());
            Ok::<usize, anyhow::Error>(count)
        });
    }
    while let Some(done) = posts.join_next().await {
        stored += done??;
    }
    Ok(stored)
}

/// The first heavy ISU posts batches of [`FILL_BATCH`] conditions back to back from
/// [`FLOOD_CONNECTIONS`] connections for `length`; what the batches got.
async fn flood(heavy: &User, base: &str, length: Duration) -> Value {
    let uuid = heavy.isus[0].clone();
    let deadline = Instant::now() + length;
    let mut posters = JoinSet::new();
    for connection in 0..FLOOD_CONNECTIONS {
        let url = format!("{base}/api/condition/{uuid}");
        posters.spawn(async move {
            let client = jia_sim::http::client_builder()
                .no_proxy()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("an HTTP client");
            let (mut accepted, mut too_many, mut other) = (0u64, 0u64, 0u64);
            let mut first = FILL_START + connection as i64 * 100_000_000;
            while Instant::now() < deadline {
                let batch: Vec<Value> = (first..first + FILL_BATCH as i64)
                    .map(|timestamp| {
                        json!({"is_sitting": true, "condition": crate::model::condition_string(false, false, false),
                               "message": "flood", "timestamp": timestamp})
                    })
                    .collect();
                first += FILL_BATCH as i64;
                match client
                    .post(&url)
                    .json(&batch)
                    .send()
                    .await
                    .map(|response| response.status().as_u16())
                {
                    Ok(202) => accepted += 1,
                    // A flooder ignores Retry-After and comes straight back.
                    Ok(429) => too_many += 1,
                    _ => other += 1,
                }
            }
            (accepted, too_many, other)
        });
    }
    let (mut accepted, mut too_many, mut other) = (0, 0, 0);
    while let Some(Ok((a, t, o))) = posters.join_next().await {
        accepted += a;
        too_many += t;
        other += o;
    }
    json!({"seconds": length.as_secs_f64(), "accepted": accepted, "too_many": too_many, "other": other})
}

/// Takes the windows' readings.
struct Meter<'a> {
    config: &'a CapacityConfig,
    jia: &'a JiaHandle,
    background: &'a ReadWindow,
    heavy: &'a ReadWindow,
}

/// Where a window starts.
struct Mark {
    at: Instant,
    posts: [u64; 5],
    cpu: Vec<(String, Option<f64>)>,
}

impl Meter<'_> {
    /// The first mark: what was recorded so far is dropped.
    async fn start(&self) -> Mark {
        self.jia.take_device_latencies();
        self.background.take();
        self.heavy.take();
        self.reading().await
    }

    /// The window from `mark` to now; `mark` moves to now.
    async fn window(&self, name: &'static str, mark: &mut Mark) -> Window {
        let next = self.reading().await;
        let seconds = next.at.duration_since(mark.at).as_secs_f64();
        let (reads, read_errors) = self.background.take();
        let (heavy_reads, heavy_errors) = self.heavy.take();
        let device = self.jia.take_device_latencies();
        let posts = DevicePosts::between(mark.posts, next.posts);
        let cluster_seconds: f64 = CpuUse::between(&mark.cpu, &next.cpu)
            .into_iter()
            .filter(|usage| usage.name != "bench")
            .filter_map(|usage| usage.seconds)
            .sum();
        let quantile = |histogram: &Option<Histogram<u64>>, q: f64| {
            histogram
                .as_ref()
                .map(|histogram| histogram.value_at_quantile(q) as f64 / 1000.0)
        };
        let window = Window {
            name,
            seconds,
            reads: reads.as_ref().map_or(0, Histogram::len),
            read_p50_ms: quantile(&reads, 0.5),
            read_p99_ms: quantile(&reads, 0.99),
            heavy_reads: heavy_reads.as_ref().map_or(0, Histogram::len),
            heavy_read_p99_ms: quantile(&heavy_reads, 0.99),
            device_posts: posts.sent,
            device_post_p99_ms: quantile(&device, 0.99),
            errors: read_errors + heavy_errors + posts.refused + posts.failed,
            cluster_cpu: (!next.cpu.is_empty()).then(|| cluster_seconds / seconds.max(1e-9)),
        };
        *mark = next;
        window
    }

    /// A mark here (the recorded latencies are read by [`Meter::window`]).
    async fn reading(&self) -> Mark {
        Mark {
            at: Instant::now(),
            posts: self.jia.device_posts(),
            cpu: cpu_readings(self.config.nodes.as_ref(), &self.config.processes).await,
        }
    }
}
