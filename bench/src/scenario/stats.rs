//! Counters of a run — errors by kind, timeouts, score tags, latencies per endpoint — and the
//! score computed from them (spec §13.6–13.7).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use shared::clock::unix_ms;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::front_end::{Encoding, FrontEnd, FrontEndFile, FrontEndTraffic};
use crate::model::Level;

/// How many error descriptions are kept for the report.
const KEPT_ERROR_SAMPLES: usize = 20;
/// Spans kept of failed requests (a run with more has failed anyway), and of the bench's
/// own stalls.
const KEPT_SPANS: usize = 10_000;
/// More non-timeout errors than this fail the run (and stop it), as in the official bench.
pub const MAX_ERRORS: u64 = 100;
/// Conditions are scored per this many newly read ones (remainders pooled over the run).
pub const READ_SCORE_STEP: u64 = 50;
/// Every this many timeouts cost one point.
const TIMEOUTS_PER_DEDUCTION: u64 = 10;
/// Latencies above this are clamped in the histograms (they are timeouts anyway).
const MAX_RECORDED_MICROS: u64 = 60_000_000;

/// What went wrong with one response (each costs one point; timeouts are counted apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// An unexpected HTTP status.
    Status,
    /// A wrong `Content-Type`.
    ContentType,
    /// A body that is not the JSON shape of the endpoint.
    Json,
    /// Wrong, invented, missing or misordered data, or a wrong error message.
    Data,
    /// A connection error other than a timeout (refused, reset, …).
    Connection,
}

/// What broke a request that got no answer (not a timeout): the cause of a connection error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConnectionCause {
    /// Nothing listens (`Connection refused`).
    Refused,
    /// Another failure to connect.
    ConnectFailed,
    /// The server reset the connection (`Connection reset by peer`).
    Reset,
    /// The server closed the connection before any answer (a kept-alive connection it closed
    /// as the request was on its way).
    ClosedBeforeAnswer,
    /// The connection closed while the request body was being written (`Broken pipe`).
    BrokenPipe,
    /// The answer's body stopped short.
    BodyCut,
    Other,
}

impl ConnectionCause {
    pub const ALL: [ConnectionCause; 7] = [
        ConnectionCause::Refused,
        ConnectionCause::ConnectFailed,
        ConnectionCause::Reset,
        ConnectionCause::ClosedBeforeAnswer,
        ConnectionCause::BrokenPipe,
        ConnectionCause::BodyCut,
        ConnectionCause::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ConnectionCause::Refused => "refused",
            ConnectionCause::ConnectFailed => "connect_failed",
            ConnectionCause::Reset => "reset",
            ConnectionCause::ClosedBeforeAnswer => "closed_before_answer",
            ConnectionCause::BrokenPipe => "broken_pipe",
            ConnectionCause::BodyCut => "body_cut",
            ConnectionCause::Other => "other",
        }
    }

    /// The cause of a transport error, from its text and its sources' (reqwest, hyper and
    /// the OS say it in words, not in types).
    pub fn of(error: &(dyn std::error::Error + 'static), connecting: bool, reading_body: bool) -> ConnectionCause {
        let mut texts = vec![error.to_string()];
        let mut source = error.source();
        while let Some(cause) = source {
            texts.push(cause.to_string());
            source = cause.source();
        }
        let said = |words: &str| texts.iter().any(|text| text.contains(words));
        if said("Connection refused") {
            ConnectionCause::Refused
        } else if connecting {
            ConnectionCause::ConnectFailed
        } else if said("Broken pipe") {
            ConnectionCause::BrokenPipe
        } else if said("Connection reset by peer") {
            ConnectionCause::Reset
        } else if reading_body {
            ConnectionCause::BodyCut
        } else if said("connection closed before message completed") {
            ConnectionCause::ClosedBeforeAnswer
        } else {
            ConnectionCause::Other
        }
    }
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 5] = [
        ErrorKind::Status,
        ErrorKind::ContentType,
        ErrorKind::Json,
        ErrorKind::Data,
        ErrorKind::Connection,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Status => "status",
            ErrorKind::ContentType => "content_type",
            ErrorKind::Json => "json",
            ErrorKind::Data => "data",
            ErrorKind::Connection => "connection",
        }
    }
}

/// Score tags (official names). Read tags are derived from the raw read counts at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tag {
    StartBenchmark,
    ReadInfoCondition,
    ReadWarningCondition,
    ReadCriticalCondition,
    TodayGraphGood,
    TodayGraphNormal,
    TodayGraphBad,
    TodayGraphWorst,
    GraphGood,
    GraphNormal,
    GraphBad,
    GraphWorst,
    // Zero-point bookkeeping.
    UserInit,
    IsuInit,
    ViewerInit,
    ViewerLoop,
    ViewerDropout,
    RepairIsu,
    SignOut,
    ErrorPost,
}

impl Tag {
    pub const ALL: [Tag; 20] = [
        Tag::StartBenchmark,
        Tag::ReadInfoCondition,
        Tag::ReadWarningCondition,
        Tag::ReadCriticalCondition,
        Tag::TodayGraphGood,
        Tag::TodayGraphNormal,
        Tag::TodayGraphBad,
        Tag::TodayGraphWorst,
        Tag::GraphGood,
        Tag::GraphNormal,
        Tag::GraphBad,
        Tag::GraphWorst,
        Tag::UserInit,
        Tag::IsuInit,
        Tag::ViewerInit,
        Tag::ViewerLoop,
        Tag::ViewerDropout,
        Tag::RepairIsu,
        Tag::SignOut,
        Tag::ErrorPost,
    ];

    pub fn points(self) -> i64 {
        match self {
            Tag::StartBenchmark => 1000,
            Tag::ReadInfoCondition => 20,
            Tag::ReadWarningCondition => 8,
            Tag::ReadCriticalCondition => 4,
            Tag::TodayGraphGood => 60,
            Tag::TodayGraphNormal => 40,
            Tag::TodayGraphBad => 24,
            Tag::TodayGraphWorst => 4,
            Tag::GraphGood => 150,
            Tag::GraphNormal => 100,
            Tag::GraphBad => 60,
            Tag::GraphWorst => 10,
            _ => 0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Tag::StartBenchmark => "StartBenchmark",
            Tag::ReadInfoCondition => "ReadInfoCondition",
            Tag::ReadWarningCondition => "ReadWarningCondition",
            Tag::ReadCriticalCondition => "ReadCriticalCondition",
            Tag::TodayGraphGood => "TodayGraphGood",
            Tag::TodayGraphNormal => "TodayGraphNormal",
            Tag::TodayGraphBad => "TodayGraphBad",
            Tag::TodayGraphWorst => "TodayGraphWorst",
            Tag::GraphGood => "GraphGood",
            Tag::GraphNormal => "GraphNormal",
            Tag::GraphBad => "GraphBad",
            Tag::GraphWorst => "GraphWorst",
            Tag::UserInit => "UserInit",
            Tag::IsuInit => "IsuInit",
            Tag::ViewerInit => "ViewerInit",
            Tag::ViewerLoop => "ViewerLoop",
            Tag::ViewerDropout => "ViewerDropout",
            Tag::RepairIsu => "RepairIsu",
            Tag::SignOut => "SignOut",
            Tag::ErrorPost => "ErrorPost",
        }
    }

    fn index(self) -> usize {
        Tag::ALL
            .iter()
            .position(|tag| *tag == self)
            .expect("every tag is in ALL")
    }
}

/// Graph grades, from the fewest conditions in any of a graph's hourly points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphGrade {
    Good,
    Normal,
    Bad,
    Worst,
}

impl GraphGrade {
    /// Grade of a graph whose sparsest hour holds `fewest` conditions.
    pub fn of(fewest: usize) -> GraphGrade {
        match fewest {
            21.. => GraphGrade::Good,
            11..=20 => GraphGrade::Normal,
            6..=10 => GraphGrade::Bad,
            _ => GraphGrade::Worst,
        }
    }

    /// The tag of a complete past day's graph.
    pub fn past_tag(self) -> Tag {
        match self {
            GraphGrade::Good => Tag::GraphGood,
            GraphGrade::Normal => Tag::GraphNormal,
            GraphGrade::Bad => Tag::GraphBad,
            GraphGrade::Worst => Tag::GraphWorst,
        }
    }

    /// The tag of the first graph of a graph step ("today", in the bench's sense).
    pub fn today_tag(self) -> Tag {
        match self {
            GraphGrade::Good => Tag::TodayGraphGood,
            GraphGrade::Normal => Tag::TodayGraphNormal,
            GraphGrade::Bad => Tag::TodayGraphBad,
            GraphGrade::Worst => Tag::TodayGraphWorst,
        }
    }
}

/// Counters shared by every agent of a run. Atomics for the counters; the histograms and
/// samples sit behind std mutexes held only for a map lookup and a record (never across
/// an `.await`).
#[derive(Default)]
pub struct Stats {
    requests: AtomicU64,
    errors: [AtomicU64; 5],
    timeouts: AtomicU64,
    /// GETs sent again because the server closed an idle keep-alive connection as they left.
    idle_close_retries: AtomicU64,
    /// Connection errors by [`ConnectionCause`] (in `ALL`'s order).
    connection_causes: [AtomicU64; ConnectionCause::ALL.len()],
    read: [AtomicU64; 3],
    tags: [AtomicU64; Tag::ALL.len()],
    critical: AtomicBool,
    error_samples: Mutex<Vec<String>>,
    latencies: Mutex<HashMap<String, Histogram<u64>>>,
    /// Failed requests (errors and timeouts of the request itself) by the first hex digit of
    /// the ISU in their path; the last slot is requests that name no ISU.
    failures_by_isu_digit: [AtomicU64; 17],
    /// When each failed request was sent and failed (the first [`KEPT_SPANS`]).
    failure_spans: Mutex<Vec<FailureSpan>>,
    /// Failed requests whose span was not kept.
    failure_spans_dropped: AtomicU64,
    /// When the bench's own runtime fell behind (the first [`KEPT_SPANS`]).
    stalls: Mutex<Vec<Stall>>,
    /// Growth checks that added no user because the bench itself fell behind.
    growth_held: AtomicU64,
    /// The front end's files as received (requests, bytes per encoding).
    front_end: FrontEndTraffic,
}

impl Stats {
    /// The bench's own runtime fell behind from `from` to `to`: a timer due at `from` fired
    /// only at `to`. Requests in flight then may time out in the bench, not in the service.
    pub fn stall(&self, from: SystemTime, to: SystemTime) {
        let mut stalls = self.stalls.lock().expect("stalls poisoned");
        if stalls.len() < KEPT_SPANS {
            stalls.push(Stall {
                from_unix_ms: unix_ms(from),
                to_unix_ms: unix_ms(to),
            });
        }
    }

    /// A growth check added no user because the bench itself fell behind.
    pub fn growth_held(&self) {
        self.growth_held.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one request and its latency under `label` (e.g. `GET /api/isu/:uuid`).
    pub fn record_request(&self, label: &str, elapsed: Duration) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let micros = (elapsed.as_micros() as u64).clamp(1, MAX_RECORDED_MICROS);
        let mut latencies = self.latencies.lock().expect("latencies poisoned");
        if let Some(histogram) = latencies.get_mut(label) {
            histogram.saturating_record(micros);
            return;
        }
        let mut histogram = Histogram::new_with_bounds(1, MAX_RECORDED_MICROS, 2).expect("valid histogram bounds");
        histogram.saturating_record(micros);
        latencies.insert(label.to_owned(), histogram);
    }

    pub fn timeout(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failed request under the first hex digit of the ISU its path names (`None`:
    /// it names none), so a run can tell which cells' ISUs saw failures.
    pub fn failure_for_isu_digit(&self, digit: Option<u8>) {
        let slot = digit.map_or(16, |digit| usize::from(digit.min(15)));
        self.failures_by_isu_digit[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// When a failed request (an error or a timeout of the request itself, or an answer whose
    /// data was wrong where the bench knows when it came) was sent and when it failed, so that
    /// a run with disruptions can tell the failures inside them from the others.
    pub fn failure_span(&self, label: &str, sent: SystemTime, failed: SystemTime) {
        let mut spans = self.failure_spans.lock().expect("failure spans poisoned");
        if spans.len() >= KEPT_SPANS {
            self.failure_spans_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        spans.push(FailureSpan {
            label: label.to_owned(),
            sent_unix_ms: unix_ms(sent),
            failed_unix_ms: unix_ms(failed),
        });
    }

    /// One response of a front-end file: its body `bytes` as received, in `encoding`.
    pub fn front_end(&self, file: FrontEndFile, encoding: Encoding, bytes: u64) {
        self.front_end.record(file, encoding, bytes);
    }

    pub fn idle_close_retry(&self) {
        self.idle_close_retries.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a connection error (an [`ErrorKind::Connection`]) with its cause.
    pub fn connection_error(&self, cause: ConnectionCause, description: String) {
        let index = ConnectionCause::ALL
            .iter()
            .position(|known| *known == cause)
            .expect("every cause is in ALL");
        self.connection_causes[index].fetch_add(1, Ordering::Relaxed);
        self.error(ErrorKind::Connection, format!("{description} [{}]", cause.name()));
    }

    /// Records one non-timeout error; the first few descriptions are kept and logged.
    pub fn error(&self, kind: ErrorKind, description: String) {
        let index = ErrorKind::ALL
            .iter()
            .position(|k| *k == kind)
            .expect("every kind is in ALL");
        self.errors[index].fetch_add(1, Ordering::Relaxed);
        let mut samples = self.error_samples.lock().expect("error samples poisoned");
        if samples.len() < KEPT_ERROR_SAMPLES {
            tracing::debug!(kind = kind.name(), error = %description, "bench error");
            samples.push(format!("[{}] {description}", kind.name()));
        }
    }

    /// Wrong data (the most common kind, found by the validator).
    pub fn data_error(&self, description: String) {
        self.error(ErrorKind::Data, description);
    }

    /// An error that fails the run whatever the score (e.g. data of another user).
    pub fn critical(&self, description: String) {
        self.critical.store(true, Ordering::Relaxed);
        self.error(ErrorKind::Data, format!("CRITICAL: {description}"));
    }

    /// Counts one newly read condition.
    pub fn read(&self, level: Level) {
        let index = match level {
            Level::Info => 0,
            Level::Warning => 1,
            Level::Critical => 2,
        };
        self.read[index].fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(&self, tag: Tag) {
        self.tags[tag.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Non-timeout errors so far.
    pub fn errors(&self) -> u64 {
        self.errors.iter().map(|count| count.load(Ordering::Relaxed)).sum()
    }

    pub fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }

    /// Whether the run must stop: too many errors, or a critical one.
    pub fn failed(&self) -> bool {
        self.errors() > MAX_ERRORS || self.critical.load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> Snapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let errors = ErrorKind::ALL
            .iter()
            .zip(&self.errors)
            .map(|(kind, count)| (*kind, load(count)))
            .collect();
        let tags = Tag::ALL
            .iter()
            .zip(&self.tags)
            .map(|(tag, count)| (*tag, load(count)))
            .collect();
        let latencies = self
            .latencies
            .lock()
            .expect("latencies poisoned")
            .iter()
            .map(|(label, histogram)| (label.clone(), Latency::of(histogram)))
            .collect();
        Snapshot {
            requests: load(&self.requests),
            errors,
            timeouts: load(&self.timeouts),
            idle_close_retries: load(&self.idle_close_retries),
            connection_errors: ConnectionCause::ALL
                .iter()
                .zip(&self.connection_causes)
                .map(|(cause, count)| (cause.name(), load(count)))
                .collect(),
            read: self.read.each_ref().map(load),
            tags,
            critical: self.critical.load(Ordering::Relaxed),
            error_samples: self.error_samples.lock().expect("error samples poisoned").clone(),
            latencies,
            failures_by_isu_digit: self.failures_by_isu_digit.each_ref().map(load),
            failure_spans: self.failure_spans.lock().expect("failure spans poisoned").clone(),
            failure_spans_dropped: load(&self.failure_spans_dropped),
            stalls: self.stalls.lock().expect("stalls poisoned").clone(),
            growth_held: load(&self.growth_held),
            front_end: self.front_end.snapshot(),
        }
    }
}

/// When one failed request was sent and when it failed (milliseconds since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureSpan {
    pub label: String,
    pub sent_unix_ms: u64,
    pub failed_unix_ms: u64,
}

/// A time the bench's own runtime fell behind (milliseconds since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stall {
    pub from_unix_ms: u64,
    pub to_unix_ms: u64,
}

/// Latency percentiles of one endpoint, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    fn of(histogram: &Histogram<u64>) -> Latency {
        let ms = |micros: u64| micros as f64 / 1000.0;
        Latency {
            count: histogram.len(),
            p50_ms: ms(histogram.value_at_quantile(0.50)),
            p90_ms: ms(histogram.value_at_quantile(0.90)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            max_ms: ms(histogram.max()),
        }
    }
}

/// The counters at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub requests: u64,
    pub errors: BTreeMap<ErrorKind, u64>,
    pub timeouts: u64,
    /// GETs retried once after the server closed an idle keep-alive connection under them
    /// (an nginx reload does that), as Go's HTTP client, the official bench's, does.
    pub idle_close_retries: u64,
    /// Connection errors (no answer, not a timeout) by cause: every cause, zeros included.
    pub connection_errors: BTreeMap<&'static str, u64>,
    /// Newly read conditions: info, warning, critical.
    pub read: [u64; 3],
    pub tags: BTreeMap<Tag, u64>,
    pub critical: bool,
    pub error_samples: Vec<String>,
    /// Endpoint label → latency percentiles.
    pub latencies: BTreeMap<String, Latency>,
    /// See [`Stats::failure_for_isu_digit`].
    pub failures_by_isu_digit: [u64; 17],
    /// See [`Stats::failure_span`].
    pub failure_spans: Vec<FailureSpan>,
    pub failure_spans_dropped: u64,
    /// See [`Stats::stall`].
    pub stalls: Vec<Stall>,
    /// See [`Stats::growth_held`].
    pub growth_held: u64,
    /// See [`Stats::front_end`].
    pub front_end: FrontEnd,
}

/// How the score came about.
#[derive(Debug, Clone, Default)]
pub struct Score {
    /// Tag name → (count, points).
    pub breakdown: BTreeMap<&'static str, (u64, i64)>,
    /// Sum of the tags' points.
    pub points: i64,
    /// One per non-timeout error, one per 10 timeouts.
    pub deductions: i64,
    pub total: i64,
    pub passed: bool,
    /// Why the run failed (empty when it passed).
    pub fail_reasons: Vec<String>,
}

impl Snapshot {
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    pub fn conditions_read(&self) -> u64 {
        self.read.iter().sum()
    }

    fn tag(&self, tag: Tag) -> u64 {
        self.tags.get(&tag).copied().unwrap_or_default()
    }

    /// The official scoring: every tag's points (read tags per 50 newly read conditions of a
    /// level, pooled over the run), minus one per non-timeout error and one per 10 timeouts.
    /// More than 100 errors, a critical error, or a total ≤ 0 fail the run (score 0).
    pub fn score(&self) -> Score {
        let mut counts: BTreeMap<Tag, u64> = Tag::ALL.iter().map(|tag| (*tag, self.tag(*tag))).collect();
        let [info, warning, critical] = self.read.map(|count| count / READ_SCORE_STEP);
        counts.insert(Tag::ReadInfoCondition, info);
        counts.insert(Tag::ReadWarningCondition, warning);
        counts.insert(Tag::ReadCriticalCondition, critical);
        let breakdown: BTreeMap<&'static str, (u64, i64)> = counts
            .iter()
            .map(|(tag, count)| (tag.name(), (*count, tag.points() * *count as i64)))
            .collect();
        let points = breakdown.values().map(|(_, points)| points).sum::<i64>();
        let errors = self.error_count();
        let deductions = errors as i64 + (self.timeouts / TIMEOUTS_PER_DEDUCTION) as i64;
        let raw = points - deductions;
        let mut fail_reasons = Vec::new();
        if errors > MAX_ERRORS {
            fail_reasons.push(format!("{errors} errors (more than {MAX_ERRORS})"));
        }
        if self.critical {
            fail_reasons.push("a critical error".to_owned());
        }
        if raw <= 0 {
            fail_reasons.push(format!("score {raw} ≤ 0"));
        }
        let passed = fail_reasons.is_empty();
        Score {
            breakdown,
            points,
            deductions,
            total: if passed { raw } else { 0 },
            passed,
            fail_reasons,
        }
    }
}

impl fmt::Display for Snapshot {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [info, warning, critical] = self.read;
        write!(
            out,
            "requests={} errors={} timeouts={} read={} (info={info} warning={warning} critical={critical})",
            self.requests,
            self.error_count(),
            self.timeouts,
            self.conditions_read(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grades_follow_the_official_thresholds() {
        assert_eq!(GraphGrade::of(21), GraphGrade::Good);
        assert_eq!(GraphGrade::of(20), GraphGrade::Normal);
        assert_eq!(GraphGrade::of(11), GraphGrade::Normal);
        assert_eq!(GraphGrade::of(10), GraphGrade::Bad);
        assert_eq!(GraphGrade::of(6), GraphGrade::Bad);
        assert_eq!(GraphGrade::of(5), GraphGrade::Worst);
        assert_eq!(GraphGrade::of(0), GraphGrade::Worst);
    }

    #[test]
    fn score_adds_tags_and_pooled_reads_and_deducts_errors() {
        let stats = Stats::default();
        stats.add(Tag::StartBenchmark);
        stats.add(Tag::GraphGood);
        stats.add(Tag::GraphWorst);
        stats.add(Tag::GraphWorst);
        stats.add(Tag::TodayGraphBad);
        stats.add(Tag::UserInit);
        for _ in 0..120 {
            stats.read(Level::Info);
        }
        for _ in 0..50 {
            stats.read(Level::Warning);
        }
        for _ in 0..49 {
            stats.read(Level::Critical);
        }
        for kind in [ErrorKind::Status, ErrorKind::Data, ErrorKind::Connection] {
            stats.error(kind, "x".to_owned());
        }
        for _ in 0..25 {
            stats.timeout();
        }
        let score = stats.snapshot().score();
        assert_eq!(score.breakdown["ReadInfoCondition"], (2, 40));
        assert_eq!(score.breakdown["ReadWarningCondition"], (1, 8));
        assert_eq!(score.breakdown["ReadCriticalCondition"], (0, 0));
        assert_eq!(score.breakdown["UserInit"], (1, 0));
        assert_eq!(score.points, 1000 + 40 + 8 + 150 + 20 + 24);
        assert_eq!(score.deductions, 3 + 2);
        assert_eq!(score.total, score.points - 5);
        assert!(score.passed);
    }

    #[test]
    fn too_many_errors_or_a_critical_one_fail_the_run() {
        let stats = Stats::default();
        stats.add(Tag::StartBenchmark);
        for _ in 0..=MAX_ERRORS {
            stats.error(ErrorKind::Status, "x".to_owned());
        }
        assert!(stats.failed());
        let score = stats.snapshot().score();
        assert!(!score.passed);
        assert_eq!(score.total, 0);

        let stats = Stats::default();
        stats.add(Tag::StartBenchmark);
        stats.critical("another user's ISU".to_owned());
        assert!(stats.failed());
        assert!(!stats.snapshot().score().passed);
    }

    #[test]
    fn latencies_are_kept_per_endpoint() {
        let stats = Stats::default();
        for millis in 1..=100 {
            stats.record_request("GET /api/trend", Duration::from_millis(millis));
        }
        stats.record_request("GET /api/isu", Duration::from_millis(5));
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.requests, 101);
        let trend = snapshot.latencies["GET /api/trend"];
        assert_eq!(trend.count, 100);
        assert!((49.0..=51.0).contains(&trend.p50_ms), "{trend:?}");
        assert!((98.0..=100.5).contains(&trend.p99_ms), "{trend:?}");
        assert_eq!(snapshot.latencies["GET /api/isu"].count, 1);
    }
}
