//! Scale mode (`bench --scale`): one bounded step measuring a lone coordinator at a scale
//! of ISUs and cells no machine runs real workers at. It starts the cell simulator
//! ([`crate::cellsim`]), a coordinator (its release binary) told those cells and
//! `--dataset generated:N`, initializes it, has every simulated cell push latest conditions
//! at a rate per ISU for a while, and reports the coordinator's memory per ISU, its CPU per
//! thousand applied latest updates and the trend's size and time.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use deploy::node_args::CoordinatorArgs;
use serde::Serialize;

use crate::cellsim::{CellSim, CellSimConfig, PushTotals};

/// A step's settings.
#[derive(Debug, Clone)]
pub struct ScaleConfig {
    /// The coordinator binary (a release build).
    pub coordinator: PathBuf,
    pub cells: usize,
    pub isus: usize,
    /// Latest updates per ISU per second.
    pub rate_per_isu: f64,
    /// How long the cells push.
    pub push_time: Duration,
    /// The first simulated cell's loopback host (`127.0.0.<it>`).
    pub first_host: u8,
    /// Folder of the coordinator's log.
    pub out: PathBuf,
}

/// What the step measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    pub cells: usize,
    pub isus: usize,
    /// ISUs the simulated cells were reset with (every dataset ISU, when all went well).
    pub isus_in_cells: usize,
    pub rate_per_isu: f64,
    pub initialize_seconds: f64,
    /// The coordinator's resident memory once ready, before `/initialize` (a lone
    /// coordinator builds its dataset's generation at start already).
    pub rss_bytes_at_start: u64,
    /// Its resident memory right after `/initialize`.
    pub rss_bytes_after_initialize: u64,
    /// Resident memory after `/initialize` per ISU (its fixed share included: compare two
    /// steps for the cost of one more ISU).
    pub rss_bytes_per_isu: f64,
    /// Its resident memory after the pushes.
    pub rss_bytes_after_push: u64,
    /// Its peak resident memory (`VmHWM`) over the whole step.
    pub rss_bytes_peak: u64,
    pub push_seconds: f64,
    /// The coordinator's CPU (user + system) over the push window.
    pub coordinator_cpu_seconds: f64,
    /// This process's (the simulator's) CPU over the same window: on a shared machine, a
    /// simulator short of CPU pushes less than asked (compare `pushes` with the rate).
    pub simulator_cpu_seconds: Option<f64>,
    pub pushes: PushTotals,
    pub applied_per_second: f64,
    /// Coordinator CPU milliseconds per 1,000 applied latest updates.
    pub cpu_ms_per_1000_applied: Option<f64>,
    pub trend: TrendFigures,
}

/// One `GET /api/trend` each way.
#[derive(Debug, Clone, Serialize)]
pub struct TrendFigures {
    /// The first request (the coordinator builds the trend on the spot).
    pub first_ms: f64,
    pub json_bytes: usize,
    pub json_ms: f64,
    pub gzip_bytes: usize,
    pub gzip_ms: f64,
    /// Entries (ISUs) the JSON trend lists.
    pub isus_listed: usize,
}

/// A coordinator child process, killed and reaped on drop.
struct CoordinatorProcess(Child);

impl Drop for CoordinatorProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the step.
pub async fn run(config: ScaleConfig) -> anyhow::Result<ScaleReport> {
    let secret = hex::encode(rand::random::<[u8; 24]>());
    let listen = free_loopback_port()?;
    let base = format!("http://{listen}");
    let mut cells = CellSim::start(CellSimConfig {
        cells: config.cells,
        first_host: config.first_host,
        coordinators: vec![base.clone()],
        secret: secret.clone(),
        interval: Duration::from_millis(10),
    })
    .await?;
    let coordinator = spawn_coordinator(&config, &cells, &listen, &secret)?;
    let pid = coordinator.0.id();
    let client = reqwest::Client::builder().no_proxy().build()?;
    wait_ready(&client, &base, Duration::from_secs(120)).await?;
    let rss_at_start = rss_bytes(pid)?;
    let started = Instant::now();
    initialize(&client, &base).await?;
    let initialize_seconds = started.elapsed().as_secs_f64();
    let rss_after_initialize = rss_bytes(pid)?;
    tracing::info!(initialize_seconds, rss_after_initialize, "initialized; the cells push");

    let cpu_before = cpu_seconds(pid)?;
    let own_before = crate::nodes::own_cpu_seconds();
    let started = Instant::now();
    cells.start_pushing(config.rate_per_isu)?;
    tokio::time::sleep(config.push_time).await;
    let pushes = cells.stop_pushing().await;
    let push_seconds = started.elapsed().as_secs_f64();
    let coordinator_cpu_seconds = cpu_seconds(pid)? - cpu_before;
    let simulator_cpu_seconds = own_before
        .zip(crate::nodes::own_cpu_seconds())
        .map(|(before, after)| after - before);
    let rss_after_push = rss_bytes(pid)?;
    let rss_peak = status_bytes(pid, "VmHWM:")?;
    let trend = measure_trend(&client, &base).await?;
    let isus_in_cells = cells.isu_count();
    cells.shutdown().await;
    drop(coordinator);
    Ok(ScaleReport {
        cells: config.cells,
        isus: config.isus,
        isus_in_cells,
        rate_per_isu: config.rate_per_isu,
        initialize_seconds,
        rss_bytes_at_start: rss_at_start,
        rss_bytes_after_initialize: rss_after_initialize,
        rss_bytes_per_isu: rss_after_initialize as f64 / config.isus as f64,
        rss_bytes_after_push: rss_after_push,
        rss_bytes_peak: rss_peak,
        push_seconds,
        coordinator_cpu_seconds,
        simulator_cpu_seconds,
        pushes,
        applied_per_second: pushes.items_applied as f64 / push_seconds,
        cpu_ms_per_1000_applied: (pushes.items_applied > 0)
            .then(|| coordinator_cpu_seconds * 1e6 / pushes.items_applied as f64),
        trend,
    })
}

/// A free port on 127.0.0.1 (bound on port 0 and released).
fn free_loopback_port() -> anyhow::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.to_string())
}

/// Starts the coordinator told the simulated cells, its log in `config.out`.
fn spawn_coordinator(
    config: &ScaleConfig,
    cells: &CellSim,
    listen: &str,
    secret: &str,
) -> anyhow::Result<CoordinatorProcess> {
    let args = CoordinatorArgs {
        listen: listen.to_owned(),
        workers: cells.cell_endpoints(),
        dataset: Some(format!("generated:{}", config.isus)),
        ..CoordinatorArgs::default()
    };
    std::fs::create_dir_all(&config.out).with_context(|| format!("creating {}", config.out.display()))?;
    let log_path = config.out.join("coordinator.log");
    let log = std::fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let child = Command::new(&config.coordinator)
        .args(args.args())
        .env("ISU_CLUSTER_SECRET", secret)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| format!("starting {}", config.coordinator.display()))?;
    Ok(CoordinatorProcess(child))
}

/// Waits until the coordinator's `/healthz` answers 200.
async fn wait_ready(client: &reqwest::Client, base: &str, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    let url = format!("{base}{}", shared::protocol::HEALTH);
    loop {
        let answer = client.get(&url).timeout(Duration::from_secs(2)).send().await;
        if answer.is_ok_and(|response| response.status().is_success()) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the coordinator was not ready within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn initialize(client: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let response = client
        .post(format!("{base}/initialize"))
        .json(&serde_json::json!({ "jia_service_url": "http://127.0.0.1:5000" }))
        .timeout(Duration::from_secs(600))
        .send()
        .await
        .context("POST /initialize")?;
    anyhow::ensure!(
        response.status().is_success(),
        "POST /initialize answered {}",
        response.status()
    );
    Ok(())
}

/// The trend asked three times: first (built on the spot), as JSON, and gzip-compressed.
async fn measure_trend(client: &reqwest::Client, base: &str) -> anyhow::Result<TrendFigures> {
    let url = format!("{base}/api/trend");
    let (_, first) = get_timed(client, &url, None).await?;
    let (json, json_time) = get_timed(client, &url, None).await?;
    let (gzip, gzip_time) = get_timed(client, &url, Some("gzip")).await?;
    let ms = |time: Duration| time.as_secs_f64() * 1e3;
    Ok(TrendFigures {
        first_ms: ms(first),
        json_bytes: json.len(),
        json_ms: ms(json_time),
        gzip_bytes: gzip.len(),
        gzip_ms: ms(gzip_time),
        isus_listed: trend_isus(&json)?,
    })
}

/// One GET, its whole body as sent (reqwest here does not decompress) and its time.
async fn get_timed(
    client: &reqwest::Client,
    url: &str,
    encoding: Option<&str>,
) -> anyhow::Result<(bytes::Bytes, Duration)> {
    let started = Instant::now();
    let mut request = client.get(url).timeout(Duration::from_secs(60));
    if let Some(encoding) = encoding {
        request = request.header(reqwest::header::ACCEPT_ENCODING, encoding);
    }
    let response = request.send().await.with_context(|| format!("GET {url}"))?;
    anyhow::ensure!(
        response.status().is_success(),
        "GET {url} answered {}",
        response.status()
    );
    if let Some(encoding) = encoding {
        let given = response.headers().get(reqwest::header::CONTENT_ENCODING);
        anyhow::ensure!(
            given.is_some_and(|given| given == encoding),
            "GET {url} with Accept-Encoding: {encoding} came back as {given:?}"
        );
    }
    let body = response.bytes().await.with_context(|| format!("reading GET {url}"))?;
    Ok((body, started.elapsed()))
}

/// The ISUs a trend lists: every entry of every character's `info`, `warning`, `critical`.
pub fn trend_isus(json: &[u8]) -> anyhow::Result<usize> {
    let trend: Vec<serde_json::Value> = serde_json::from_slice(json).context("the trend is no JSON list")?;
    Ok(trend
        .iter()
        .flat_map(|character| ["info", "warning", "critical"].map(|level| &character[level]))
        .filter_map(serde_json::Value::as_array)
        .map(Vec::len)
        .sum())
}

/// `VmRSS` (resident memory) of process `pid`, in bytes.
fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    status_bytes(pid, "VmRSS:")
}

/// A memory line of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`), in bytes.
fn status_bytes(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kilobytes = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .with_context(|| format!("no {field} line in /proc/{pid}/status"))?;
    Ok(kilobytes * 1024)
}

fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    crate::nodes::process_tree_cpu_seconds(pid).context("reading the coordinator's CPU time")
}

impl std::fmt::Display for ScaleReport {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
        writeln!(
            out,
            "scale step: {} ISUs over {} simulated cells",
            self.isus, self.cells
        )?;
        writeln!(out, "  ISUs in the cells' resets   {:>12}", self.isus_in_cells)?;
        writeln!(out, "  initialize                  {:>12.2} s", self.initialize_seconds)?;
        writeln!(
            out,
            "  RSS at start                {:>12.1} MiB",
            mib(self.rss_bytes_at_start)
        )?;
        writeln!(
            out,
            "  RSS after initialize        {:>12.1} MiB ({:.0} bytes/ISU)",
            mib(self.rss_bytes_after_initialize),
            self.rss_bytes_per_isu
        )?;
        writeln!(
            out,
            "  RSS after the pushes        {:>12.1} MiB",
            mib(self.rss_bytes_after_push)
        )?;
        writeln!(
            out,
            "  RSS peak (VmHWM)            {:>12.1} MiB",
            mib(self.rss_bytes_peak)
        )?;
        writeln!(
            out,
            "  pushes                      {:>12.1} s at {} /s per ISU",
            self.push_seconds, self.rate_per_isu
        )?;
        let pushes = &self.pushes;
        writeln!(
            out,
            "  updates sent / applied      {:>12} / {} ({:.0}/s applied; {} dropped, {} streams broke)",
            pushes.items_sent,
            pushes.items_applied,
            self.applied_per_second,
            pushes.items_dropped,
            pushes.streams_broken
        )?;
        writeln!(
            out,
            "  coordinator CPU             {:>12.2} s",
            self.coordinator_cpu_seconds
        )?;
        let simulator = self
            .simulator_cpu_seconds
            .map_or("-".to_owned(), |seconds| format!("{seconds:.2}"));
        writeln!(out, "  simulator CPU               {simulator:>12} s")?;
        let per_1000 = self
            .cpu_ms_per_1000_applied
            .map_or("-".to_owned(), |ms| format!("{ms:.2}"));
        writeln!(out, "  CPU per 1,000 applied       {per_1000:>12} ms")?;
        let trend = &self.trend;
        writeln!(out, "  trend first GET (built)     {:>12.1} ms", trend.first_ms)?;
        writeln!(
            out,
            "  trend JSON                  {:>12} bytes in {:.1} ms ({} ISUs listed)",
            trend.json_bytes, trend.json_ms, trend.isus_listed
        )?;
        write!(
            out,
            "  trend gzip                  {:>12} bytes in {:.1} ms",
            trend.gzip_bytes, trend.gzip_ms
        )
    }
}
