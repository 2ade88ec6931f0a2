//! Telemetry common to every node: tracing setup, the Prometheus recorder and
//! pprof CPU profiles.

use std::collections::HashMap;
use std::sync::{LazyLock, PoisonError, RwLock};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

/// Histogram name for request latency, labelled by `route` and `status`.
pub const REQUEST_SECONDS: &str = "http_request_duration_seconds";
/// Counter of requests, labelled by `route` and `status`.
pub const REQUESTS_TOTAL: &str = "http_requests_total";
/// Histogram of items per latest-condition batch (worker → coordinator).
pub const BATCH_ITEMS: &str = "latest_batch_items";
/// Histogram of seconds from a condition's arrival on a worker to its push being acknowledged.
pub const PUSH_LAG_SECONDS: &str = "latest_push_lag_seconds";
/// Histogram of seconds one outgoing call to another node (or JIA) took, as the caller saw
/// it, labelled by `peer` and `path`, and `outcome` (`ok`, `status`, `timeout`, `transport`).
pub const OUTGOING_CALL_SECONDS: &str = "outgoing_call_duration_seconds";
/// Histogram of seconds a successful registration took on the coordinator from its claim of
/// the UUID to its publish, JIA's answer time excluded: what the cluster itself adds to
/// `POST /api/isu`.
pub const REGISTRATION_OWN_SECONDS: &str = "isu_registration_own_duration_seconds";
/// Counter of conditions stored by a worker.
pub const CONDITIONS_STORED: &str = "conditions_stored_total";
/// Gauge: when this process started (Unix seconds), as Prometheus' client libraries name it.
/// A reader of two scrapes knows by it whether the node restarted in between (its counters
/// then count from that start).
pub const PROCESS_START_SECONDS: &str = "process_start_time_seconds";
/// Counter of per-ISU requests a worker forwarded to the cell that owns the ISU.
pub const REQUESTS_FORWARDED: &str = "requests_forwarded_total";

/// Installs a `fmt` subscriber filtered by `RUST_LOG` (default `info`).
pub fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .try_init();
}

/// How often the recorder folds its histograms' raw samples into their buckets, whether or
/// not anything scrapes `/metrics`.
pub const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Installs the global Prometheus recorder and returns the handle that renders it. Every
/// metric carries `node` (`coordinator`, `worker-a`, ...) and `cell` (the worker's cell;
/// `coordinator` for the control plane), so per-cell rules need no relabelling
/// (`ops/prometheus/`). Upkeep runs every [`METRICS_UPKEEP_INTERVAL`].
pub fn init_metrics(node: &str, cell: &str) -> anyhow::Result<PrometheusHandle> {
    init_metrics_with_upkeep(node, cell, METRICS_UPKEEP_INTERVAL)
}

/// [`init_metrics`] with upkeep every `upkeep`. The exporter keeps every histogram sample
/// (about 16 bytes each, measured; a device post records several) until a scrape or an upkeep folds them into
/// the buckets, and `install_recorder` leaves upkeep to its caller: without this thread a
/// node that nothing scrapes would grow by every sample it ever recorded.
pub fn init_metrics_with_upkeep(node: &str, cell: &str, upkeep: Duration) -> anyhow::Result<PrometheusHandle> {
    let latency_buckets = [
        0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
        1.0, 2.5,
    ];
    let size_buckets = [
        0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0,
    ];
    let handle = PrometheusBuilder::new()
        .add_global_label("node", node)
        .add_global_label("cell", cell)
        .set_buckets_for_metric(Matcher::Full(REQUEST_SECONDS.into()), &latency_buckets)?
        .set_buckets_for_metric(Matcher::Full(PUSH_LAG_SECONDS.into()), &latency_buckets)?
        .set_buckets_for_metric(Matcher::Full(OUTGOING_CALL_SECONDS.into()), &latency_buckets)?
        .set_buckets_for_metric(Matcher::Full(REGISTRATION_OWN_SECONDS.into()), &latency_buckets)?
        .set_buckets_for_metric(Matcher::Full(BATCH_ITEMS.into()), &size_buckets)?
        .install_recorder()?;
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    metrics::gauge!(PROCESS_START_SECONDS).set(started.as_secs_f64());
    let upkept = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(upkeep);
            upkept.run_upkeep();
        })?;
    Ok(handle)
}

/// Output format of a CPU profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileFormat {
    /// gzip-less pprof protobuf, readable by `go tool pprof` and `pprof`.
    Protobuf,
    /// Flamegraph SVG.
    Svg,
}

impl ProfileFormat {
    pub fn parse(text: Option<&str>) -> Option<ProfileFormat> {
        match text {
            None | Some("pb") | Some("proto") | Some("protobuf") => Some(ProfileFormat::Protobuf),
            Some("svg") | Some("flamegraph") => Some(ProfileFormat::Svg),
            Some(_) => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            ProfileFormat::Protobuf => "application/octet-stream",
            ProfileFormat::Svg => "image/svg+xml",
        }
    }
}

/// Longest profile one request may ask for.
pub const MAX_PROFILE_SECONDS: u64 = 300;

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("seconds must be between 1 and {MAX_PROFILE_SECONDS}")]
    BadDuration,
    #[error("a profile is already being taken on this node")]
    Busy,
    #[error("profiler failed: {0}")]
    Failed(String),
}

/// An idle process yields no samples, and the flamegraph renderer then writes nothing.
const EMPTY_FLAMEGRAPH: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"600\" height=\"40\">\
<text x=\"10\" y=\"25\">no CPU samples in this interval (idle process)</text></svg>\n";

static PROFILING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Samples this process's CPU for `seconds` at 99 Hz and renders the profile.
pub async fn cpu_profile(seconds: u64, format: ProfileFormat) -> Result<Vec<u8>, ProfileError> {
    if seconds == 0 || seconds > MAX_PROFILE_SECONDS {
        return Err(ProfileError::BadDuration);
    }
    let _only_one = PROFILING.try_lock().map_err(|_| ProfileError::Busy)?;
    // The first start allocates the sampler's tables: also off the async threads.
    let guard = tokio::task::spawn_blocking(|| {
        pprof::ProfilerGuardBuilder::default()
            .frequency(99)
            .blocklist(&["libc", "libgcc", "pthread", "vdso"])
            .build()
            .map_err(|error| ProfileError::Failed(error.to_string()))
    })
    .await
    .map_err(|error| ProfileError::Failed(error.to_string()))??;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    // Symbolising and rendering take tens to hundreds of milliseconds of CPU (more on the
    // first profile, which loads the debug info): off the async threads, or every request
    // queued behind this task on its thread waits for it.
    let rendered = tokio::task::spawn_blocking(move || {
        let report = guard
            .report()
            .build()
            .map_err(|error| ProfileError::Failed(error.to_string()))?;
        drop(guard);
        RenderedProfile::of(&report)
    })
    .await
    .map_err(|error| ProfileError::Failed(error.to_string()))??;
    let requested = rendered.get(format).to_vec();
    *LAST_PROFILE.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(rendered);
    Ok(requested)
}

/// One profile in both formats.
struct RenderedProfile {
    svg: Vec<u8>,
    protobuf: Vec<u8>,
}

impl RenderedProfile {
    fn of(report: &pprof::Report) -> Result<RenderedProfile, ProfileError> {
        let failed = |error: pprof::Error| ProfileError::Failed(error.to_string());
        let mut svg = Vec::new();
        if report.data.is_empty() {
            svg.extend_from_slice(EMPTY_FLAMEGRAPH.as_bytes());
        } else {
            report.flamegraph(&mut svg).map_err(failed)?;
        }
        use pprof::protos::Message;
        let mut protobuf = Vec::new();
        report
            .pprof()
            .map_err(failed)?
            .encode(&mut protobuf)
            .map_err(|error| ProfileError::Failed(error.to_string()))?;
        Ok(RenderedProfile { svg, protobuf })
    }

    fn get(&self, format: ProfileFormat) -> &[u8] {
        match format {
            ProfileFormat::Svg => &self.svg,
            ProfileFormat::Protobuf => &self.protobuf,
        }
    }
}

/// The last profile taken; a std mutex is fine (held for a swap or a copy, never across `.await`).
static LAST_PROFILE: std::sync::Mutex<Option<RenderedProfile>> = std::sync::Mutex::new(None);

/// Serves `GET /debug/pprof/last?format=pb|svg`: the last profile taken, 404 when none.
pub fn last_profile_from_query(query: Option<&str>) -> ProfileReply {
    let format = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .find(|(key, _)| key == "format")
        .map(|(_, value)| value.into_owned());
    let Some(format) = ProfileFormat::parse(format.as_deref()) else {
        return ProfileReply {
            status: 400,
            content_type: crate::error::TEXT_PLAIN,
            body: b"bad format: format (expected pb or svg)".to_vec(),
        };
    };
    match &*LAST_PROFILE.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) {
        Some(rendered) => ProfileReply {
            status: 200,
            content_type: format.content_type(),
            body: rendered.get(format).to_vec(),
        },
        None => ProfileReply {
            status: 404,
            content_type: crate::error::TEXT_PLAIN,
            body: b"no profile has been taken on this node".to_vec(),
        },
    }
}

/// What a profiling endpoint answers, independent of the web framework.
pub struct ProfileReply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// Serves `GET /debug/pprof/profile?seconds=N&format=pb|svg` (default 30 s, protobuf).
pub async fn profile_from_query(query: Option<&str>) -> ProfileReply {
    let param = |name: &str| {
        form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    let text = |status: u16, message: String| ProfileReply {
        status,
        content_type: crate::error::TEXT_PLAIN,
        body: message.into_bytes(),
    };
    let seconds = match param("seconds").map(|value| value.parse::<u64>()) {
        None => 30,
        Some(Ok(seconds)) => seconds,
        Some(Err(_)) => return text(400, "bad format: seconds".into()),
    };
    let Some(format) = ProfileFormat::parse(param("format").as_deref()) else {
        return text(400, "bad format: format (expected pb or svg)".into());
    };
    match cpu_profile(seconds, format).await {
        Ok(body) => ProfileReply {
            status: 200,
            content_type: format.content_type(),
            body,
        },
        Err(error @ ProfileError::BadDuration) => text(400, error.to_string()),
        Err(error @ ProfileError::Busy) => text(409, error.to_string()),
        Err(error @ ProfileError::Failed(_)) => text(500, error.to_string()),
    }
}

/// The request metrics' handles by route and then status. Looking a labelled metric up in
/// the recorder builds its key of owned labels, hashes it and searches a locked map (and the
/// two macros did it twice, with a copy of each label each): once per route and status here,
/// not once per request. Routes are the routers' templates (bounded), so is the map. Valid
/// for the recorder installed when a pair is first seen: the nodes install theirs before
/// they serve.
type RequestHandles = HashMap<String, HashMap<u16, (metrics::Counter, metrics::Histogram)>>;
static REQUEST_HANDLES: LazyLock<RwLock<RequestHandles>> = LazyLock::new(RwLock::default);

/// Counts one served request and records its latency, labelled by matched route and status.
pub fn record_request(route: &str, status: u16, elapsed: std::time::Duration) {
    let record = |(counter, histogram): &(metrics::Counter, metrics::Histogram)| {
        counter.increment(1);
        histogram.record(elapsed.as_secs_f64());
    };
    {
        let handles = REQUEST_HANDLES.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = handles.get(route).and_then(|by_status| by_status.get(&status)) {
            return record(known);
        }
    }
    let labels = [("route", route.to_owned()), ("status", status.to_string())];
    let new = (
        metrics::counter!(REQUESTS_TOTAL, &labels),
        metrics::histogram!(REQUEST_SECONDS, &labels),
    );
    record(&new);
    REQUEST_HANDLES
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(route.to_owned())
        .or_default()
        .insert(status, new);
}

/// Records one outgoing call (see [`OUTGOING_CALL_SECONDS`]).
pub fn record_outgoing_call(peer: &str, path: &'static str, outcome: &'static str, elapsed: Duration) {
    metrics::histogram!(OUTGOING_CALL_SECONDS, "peer" => peer.to_owned(), "path" => path, "outcome" => outcome)
        .record(elapsed.as_secs_f64());
}

/// User + system CPU seconds of this process so far (all threads), to the microsecond.
pub fn process_cpu_seconds() -> Option<f64> {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).ok()?;
    let seconds = |time: nix::sys::time::TimeVal| time.tv_sec() as f64 + time.tv_usec() as f64 / 1e6;
    Some(seconds(usage.user_time()) + seconds(usage.system_time()))
}

/// The Prometheus text of every metric, process metrics refreshed first.
pub fn render_metrics(handle: &PrometheusHandle) -> String {
    if let Some(seconds) = process_cpu_seconds() {
        metrics::gauge!(PROCESS_CPU_SECONDS).set(seconds);
    }
    handle.render()
}

/// CPU time of the node process (what the bench reads before and after a load).
pub const PROCESS_CPU_SECONDS: &str = "process_cpu_seconds_total";
