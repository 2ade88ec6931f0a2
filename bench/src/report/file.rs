//! `report.json` as a type: what the bench writes after a scored run, what `isuctl` reads
//! back (and adds `control_plane` to), what CI checks (`isuctl bench check`), and what the
//! bench's own table is printed from (`report::table`). Its keys are the report's wire format,
//! which other tools and the docs name: a field renamed here renames a key of the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use shared::protocol::HeldIsu;

use super::{CellFigures, DevicePosts};
use crate::scenario::front_end::FrontEnd;
use crate::scenario::stats::{FailureSpan, Latency, Stall};

/// A scored run's report, as `report.json` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportFile {
    /// The score as printed: 0 unless the run passed.
    pub score: i64,
    pub passed: bool,
    /// Failed responses of every kind (timeouts apart).
    pub errors: u64,
    pub timeouts: u64,
    /// GETs retried once after the server closed an idle keep-alive connection under them.
    pub idle_close_retries: u64,
    /// Requests that got no answer (not timeouts), by cause: every cause, zeros included.
    pub connection_errors: BTreeMap<String, u64>,
    /// nginx reloads during the load (`null`: no nginx was named, or it could not be watched
    /// to the end).
    pub router_reloads: Option<u64>,
    /// Score tag → count.
    pub breakdown: BTreeMap<String, u64>,
    /// Score tag → points.
    pub breakdown_points: BTreeMap<String, i64>,
    /// Flamegraphs and protobufs written.
    pub profiles: Vec<String>,
    pub target: String,
    /// `language` answered by `POST /initialize`.
    pub language: String,
    /// Why the run stopped before load, if it did.
    pub failed_phase: Option<String>,
    /// Why the run failed (empty when it passed).
    pub fail_reasons: Vec<String>,
    /// Sum of the tags' points.
    pub points: i64,
    /// One per error, one per 10 timeouts.
    pub deductions: i64,
    /// Length of the load phase actually run.
    pub load_seconds: f64,
    /// The users' and viewers' requests (the devices' posts apart).
    pub requests: u64,
    /// Error kind (`status`, `content_type`, `json`, `data`, `connection`) → count.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Failed requests (error or timeout) by the first hex digit of the ISU in their path
    /// (`none`: no ISU in it): which cells' ISUs were hurt.
    pub failures_by_isu_digit: BTreeMap<String, u64>,
    pub error_samples: Vec<String>,
    /// Newly read conditions per level.
    pub conditions_read: ConditionsRead,
    /// Users signed in during load.
    pub users: usize,
    pub viewers: usize,
    /// ISUs JIA activated.
    pub activations: usize,
    /// Activation requests JIA got for an ISU it had already activated that no re-sent
    /// registration explains (see [`super::JiaRepeats`]).
    pub repeated_activations: usize,
    /// The ISUs of those.
    pub repeated_activation_isus: Vec<String>,
    /// Repeated activations that a registration the bench re-sent after a timeout explains.
    pub activations_on_resend: usize,
    /// Registrations answered 201 whose ISU JIA never activated.
    pub unactivated_acknowledged: usize,
    /// The load's registrations answered 201, in the order they were answered.
    pub acknowledged_registrations: Vec<HeldIsu>,
    pub sent_conditions: usize,
    /// Endpoint label → latency percentiles.
    pub latency_ms: BTreeMap<String, Latency>,
    /// CPU seconds of each process during the load, per node, then `bench` itself (`null`:
    /// could not be read).
    #[serde(with = "in_order")]
    pub cpu_seconds: Vec<(String, Option<f64>)>,
    /// The CPUs the bench may run on (`Cpus_allowed_list`).
    pub bench_cpus: Option<String>,
    /// The devices' posts from the first activation to the end: what the cluster
    /// acknowledged in all, to compare with what it stored.
    pub device_posts_whole_run: PostsWholeRun,
    /// The devices' posts during the load.
    pub device_posts: DevicePosts,
    /// Every HTTP request the cluster served for the bench during the load: the users' and
    /// viewers' requests and the devices' posts.
    pub cluster_requests: u64,
    /// CPU seconds of each cluster process, and of the whole cluster (`cluster`), per 1,000
    /// of `cluster_requests` (empty when nothing was counted or no CPU was read).
    #[serde(with = "in_order")]
    pub cluster_cpu_per_1000_requests: Vec<(String, f64)>,
    /// The same per 1,000 conditions the cluster stored during the load.
    #[serde(with = "in_order")]
    pub cluster_cpu_per_1000_conditions: Vec<(String, f64)>,
    /// Per cell (and coordinator), as the nodes measured themselves.
    pub cells: Vec<CellFigures>,
    /// The front end's files the browsers fetched, beside nginx's CPU.
    pub front_end: FrontEndServed,
    /// When each failed request was sent and failed (isuctl tells those inside a takeover
    /// from the others).
    pub failure_spans: Vec<FailureSpan>,
    /// Failed requests past the spans kept.
    pub failure_spans_dropped: u64,
    /// When the bench itself fell behind (a request failing then may be the bench's).
    pub bench_stalls: Vec<Stall>,
    /// Times the load's growth was held because the bench fell behind.
    pub growth_held_for_bench_lag: u64,
    /// Added by `isuctl bench --kill-leader-every` / `--pause-leader-every`; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlane>,
}

impl ReportFile {
    /// Reads a report the bench wrote.
    pub fn read(path: &Path) -> anyhow::Result<ReportFile> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not a bench run's report", path.display()))
    }

    /// Writes the report (pretty JSON).
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let mut json = serde_json::to_vec_pretty(self).context("the report as JSON")?;
        json.push(b'\n');
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))
    }

    /// The run's failed requests: errors, connection errors of every cause, timeouts.
    pub fn failed_requests(&self) -> u64 {
        self.errors + self.connection_errors.values().sum::<u64>() + self.timeouts
    }
}

/// Newly read conditions, per level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionsRead {
    pub info: u64,
    pub warning: u64,
    pub critical: u64,
}

/// The devices' posts of the whole run (see [`ReportFile::device_posts_whole_run`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostsWholeRun {
    /// Answered 202.
    pub accepted: u64,
    /// Conditions in the accepted posts.
    pub stored_conditions: u64,
    /// Timed out or failed to connect.
    pub failed: u64,
}

/// The front end's files as the browsers received them (requests, body bytes per
/// `Content-Encoding`), and nginx's CPU seconds, which serve them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FrontEndServed {
    #[serde(flatten)]
    pub traffic: FrontEnd,
    pub nginx_cpu_seconds: Option<f64>,
}

/// The report's `control_plane`: the leader kills (or pauses) of a run and what they cost
/// (filled by `bench::takeover`).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlPlane {
    pub replicas: usize,
    pub leader_kills: u32,
    /// Leaders paused (SIGSTOP) until another took over, then resumed.
    pub leader_pauses: u32,
    /// Each kill's or pause's takeover, in milliseconds.
    pub takeover_ms: Vec<u64>,
    /// The median of `takeover_ms`.
    pub takeover_median_ms: Option<u64>,
    /// Kills or pauses after which no replica took over within 15 s, or the old leader did
    /// not come back (ready, and following a later term after a pause).
    pub failed_kills: u32,
    /// The bench's errors, connection errors and timeouts of the run.
    pub failed_requests: u64,
    /// From each kill or pause until another replica took over (or the takeover's limit when
    /// none did).
    pub takeover_windows: Vec<TakeoverWindow>,
    /// Failed requests that overlap no takeover window (`bench::takeover::failed_outside`):
    /// a run with any fails.
    pub failed_outside_takeovers: u64,
    /// Replicas whose state differs from the others' once all applied the same index.
    pub replicas_differing: u64,
    /// Registrations the bench got a 201 for that a replica does not hold (with their owner
    /// and icon), counted once per replica missing each.
    pub lost_acknowledged: u64,
    /// Activation requests JIA got for an ISU it had already activated that no re-sent
    /// registration explains: one request that reached JIA twice (the bench's report).
    pub repeated_activations: u64,
    /// Activations asked again by a registration the bench re-sent after a timeout, the
    /// first having been rolled back after JIA answered it (the bench's report).
    pub activations_on_resend: u64,
    /// Registrations answered 201 whose ISU JIA never activated (the bench's report).
    pub unactivated_acknowledged: u64,
    /// Each replica's state hash after the run.
    pub state_hashes: Vec<String>,
    pub log: PathBuf,
}

impl ControlPlane {
    /// Whether the control plane held (`isuctl bench` fails the run otherwise): every kill or
    /// pause taken over and the old leader back, no failed request outside the takeovers,
    /// the replicas in the same state, every acknowledged registration held by every replica
    /// and activated once by JIA.
    pub fn held(&self) -> bool {
        self.failed_kills == 0
            && self.failed_outside_takeovers == 0
            && self.replicas_differing == 0
            && self.lost_acknowledged == 0
            && self.repeated_activations == 0
            && self.unactivated_acknowledged == 0
    }
}

/// From a kill or pause until the takeover, in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeoverWindow {
    pub from_unix_ms: u64,
    pub to_unix_ms: u64,
}

/// A JSON object as a list of `(name, value)` in the object's order, so the per-process
/// figures keep the processes' order (nodes, nginx, then the bench) that the table prints.
/// (`serde_json::Map` sorts its keys; indexmap's `serde` feature would rebuild the whole
/// HTTP stack of the workspace with it.)
mod in_order {
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::{MapAccess, Visitor};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, V: Serialize>(pairs: &[(String, V)], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(pairs.iter().map(|(name, value)| (name, value)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, V: Deserialize<'de>>(
        deserializer: D,
    ) -> Result<Vec<(String, V)>, D::Error> {
        struct Pairs<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Pairs<V> {
            type Value = Vec<(String, V)>;

            fn expecting(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
                out.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(pair) = map.next_entry()? {
                    pairs.push(pair);
                }
                Ok(pairs)
            }
        }
        deserializer.deserialize_map(Pairs(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report as the bench and isuctl wrote it before this type (the hand-written JSON,
    /// lists shortened), `control_plane` included.
    const WRITTEN_BY_HAND: &str = include_str!("../../tests/data/report-control-plane.json");

    #[test]
    fn a_report_written_by_hand_reads_and_writes_back_the_same_json() {
        let report: ReportFile = serde_json::from_str(WRITTEN_BY_HAND).unwrap();
        let plane = report.control_plane.as_ref().unwrap();
        assert_eq!((plane.leader_pauses, plane.takeover_ms.len()), (3, 3));
        assert_eq!(report.cells[2].p99_ms, None);
        assert_eq!(report.acknowledged_registrations[1].icon_sha256, None);
        let written: serde_json::Value = serde_json::to_value(&report).unwrap();
        let before: serde_json::Value = serde_json::from_str(WRITTEN_BY_HAND).unwrap();
        assert_eq!(written, before);
    }

    #[test]
    fn a_report_without_control_plane_writes_no_such_key() {
        let mut report: ReportFile = serde_json::from_str(WRITTEN_BY_HAND).unwrap();
        report.control_plane = None;
        let written = serde_json::to_value(&report).unwrap();
        assert!(written.get("control_plane").is_none());
        let read: ReportFile = serde_json::from_value(written).unwrap();
        assert_eq!(read, report);
    }

    #[test]
    fn per_process_figures_keep_their_order_through_the_file() {
        let mut report: ReportFile = serde_json::from_str(WRITTEN_BY_HAND).unwrap();
        report.cpu_seconds = vec![("worker-a".to_owned(), Some(1.5)), ("bench".to_owned(), None)];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        report.write(&path).unwrap();
        let read = ReportFile::read(&path).unwrap();
        assert_eq!(read.cpu_seconds, report.cpu_seconds);
        assert_eq!(read, report);

        std::fs::write(&path, "{\"migration_cost\": {}}").unwrap();
        let error = ReportFile::read(&path).unwrap_err();
        assert!(format!("{error:#}").contains("not a bench run's report"), "{error:#}");
    }
}
