//! The outcome of a bench run: what it counted ([`Report`]), turned into the one typed
//! report ([`ReportFile`], `report.json`) that tools read and that the table people read is
//! printed from (`table`).

pub mod check;
mod file;
mod table;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use self::file::{ConditionsRead, ControlPlane, FrontEndServed, PostsWholeRun, ReportFile, TakeoverWindow};
use crate::scenario::stats::{Score, Snapshot};

/// CPU seconds one process used during the load phase (`None`: could not be read).
#[derive(Debug, Clone)]
pub struct CpuUse {
    pub name: String,
    pub seconds: Option<f64>,
}

impl CpuUse {
    /// What each process used between two [`crate::nodes::cpu_readings`].
    pub fn between(before: &[(String, Option<f64>)], after: &[(String, Option<f64>)]) -> Vec<CpuUse> {
        before
            .iter()
            .zip(after)
            .map(|((name, before), (_, after))| CpuUse {
                name: name.clone(),
                seconds: before.zip(*after).map(|(before, after)| after - before),
            })
            .collect()
    }
}

/// The devices' posts during the load (the malformed batches of the error poster apart).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevicePosts {
    pub sent: u64,
    /// Answered 202.
    pub accepted: u64,
    /// Conditions in the accepted posts: stored by the cluster.
    pub stored_conditions: u64,
    pub refused: u64,
    /// Timed out (the device's 100 ms) or failed to connect.
    pub failed: u64,
}

impl DevicePosts {
    /// The difference of two [`jia_sim::JiaHandle::device_posts`] readings.
    pub fn between(before: [u64; 5], after: [u64; 5]) -> DevicePosts {
        let [sent, accepted, stored_conditions, refused, failed] =
            std::array::from_fn(|index| after[index].saturating_sub(before[index]));
        DevicePosts {
            sent,
            accepted,
            stored_conditions,
            refused,
            failed,
        }
    }
}

/// What one node (a cell's worker, or the coordinator) served during the load, from its
/// own `/metrics` before and after: public API requests, 5xx answers and latency
/// percentiles (upper bounds of the nodes' histogram buckets; an infinite bound, beyond the
/// last bucket, is written `null`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellFigures {
    pub cell: String,
    pub node: String,
    /// The node restarted during the load (its process start time changed; a rollout
    /// replaces workers): the figures count only from its last start.
    pub restarted: bool,
    pub requests: u64,
    pub errors: u64,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

impl CellFigures {
    /// One per node that answered both scrapes.
    pub fn between(before: &[(String, Option<String>)], after: &[(String, Option<String>)]) -> Vec<CellFigures> {
        use shared::prom_text::{buckets, label, parse, quantile_between, sum};
        use shared::telemetry::PROCESS_START_SECONDS;
        let public = |labels: &str| label(labels, "route").is_some_and(|route| route.starts_with("/api/"));
        after
            .iter()
            .filter_map(|(node, text)| {
                let earlier = before.iter().find(|(name, _)| name == node)?.1.as_deref()?;
                let (mut earlier, later) = (parse(earlier), parse(text.as_deref()?));
                let started = |samples: &[shared::prom_text::Sample]| sum(samples, PROCESS_START_SECONDS, |_| true);
                let restarted = started(&earlier) != started(&later);
                if restarted {
                    earlier.clear();
                }
                let cell = later
                    .iter()
                    .find_map(|sample| label(&sample.labels, "cell").map(str::to_owned))
                    .unwrap_or_else(|| node.clone());
                let count = |keep: &dyn Fn(&str) -> bool| {
                    (sum(&later, "http_requests_total", keep) - sum(&earlier, "http_requests_total", keep)).max(0.0)
                        as u64
                };
                let errors = count(&|labels: &str| {
                    public(labels) && label(labels, "status").is_some_and(|status| status.starts_with('5'))
                });
                let latency =
                    |samples: &[shared::prom_text::Sample]| buckets(samples, "http_request_duration_seconds", public);
                let (from, to) = (latency(&earlier), latency(&later));
                let ms = |q: f64| quantile_between(&from, &to, q).map(|seconds| seconds * 1000.0);
                Some(CellFigures {
                    cell,
                    node: node.clone(),
                    restarted,
                    requests: count(&public),
                    errors,
                    p50_ms: ms(0.5),
                    p90_ms: ms(0.9),
                    p99_ms: ms(0.99),
                })
            })
            .collect()
    }
}

/// Everything a run found out.
#[derive(Debug, Clone)]
pub struct Report {
    pub target: String,
    /// `language` answered by `POST /initialize`.
    pub language: String,
    /// Why the run stopped before load, if it did (initialize or compatibility check).
    pub failed_phase: Option<String>,
    /// Length of the load phase actually run.
    pub load_time: Duration,
    pub stats: Snapshot,
    pub score: Score,
    /// Users signed in during load (the initial ones and those added as load grew).
    pub users: usize,
    pub viewers: usize,
    pub activations: usize,
    /// Activation requests JIA got for an ISU it had already activated.
    pub repeated_activations: JiaRepeats,
    /// Registrations answered 201 whose ISU JIA never activated.
    pub unactivated_acknowledged: usize,
    pub sent_conditions: usize,
    /// Per node, then `bench` itself.
    pub cpu: Vec<CpuUse>,
    pub device_posts: DevicePosts,
    /// The devices' posts from the first activation to the end (compatibility check and
    /// load): what the cluster acknowledged in all, to compare with what it stored.
    pub device_posts_whole_run: DevicePosts,
    /// The CPUs the bench may run on (`Cpus_allowed_list`; pinned runs show one).
    pub bench_cpus: Option<String>,
    /// Flamegraphs and protobufs written.
    pub profiles: Vec<PathBuf>,
    /// Per cell (and the coordinator), as the nodes measured themselves.
    pub cells: Vec<CellFigures>,
    /// nginx reloads during the load (new worker processes; `None`: no nginx was named, or it
    /// could not be watched to the end).
    pub router_reloads: Option<u64>,
    /// The load's registrations answered 201, in the order they were answered.
    pub acknowledged_registrations: Vec<shared::protocol::HeldIsu>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.failed_phase.is_none() && self.score.passed
    }

    /// The score as printed and written: 0 unless the run passed.
    pub fn final_score(&self) -> i64 {
        if self.passed() {
            self.score.total
        } else {
            0
        }
    }

    /// Every HTTP request the cluster served for the bench during the load: the users' and
    /// viewers' requests and the devices' posts.
    pub fn cluster_requests(&self) -> u64 {
        self.stats.requests + self.device_posts.sent
    }

    /// CPU seconds of each cluster process (and of the whole cluster, `cluster`) per `per`
    /// units of `count`; empty when nothing was counted or no CPU was read.
    fn cluster_cpu_per(&self, count: u64, per: f64) -> Vec<(String, f64)> {
        if count == 0 {
            return Vec::new();
        }
        let cluster: Vec<(String, f64)> = self
            .cpu
            .iter()
            .filter(|usage| usage.name != "bench")
            .filter_map(|usage| Some((usage.name.clone(), usage.seconds?)))
            .collect();
        if cluster.is_empty() {
            return Vec::new();
        }
        let total: f64 = cluster.iter().map(|(_, seconds)| seconds).sum();
        cluster
            .into_iter()
            .chain(std::iter::once(("cluster".to_owned(), total)))
            .map(|(name, seconds)| (name, seconds * per / count as f64))
            .collect()
    }

    /// The report as `report.json` holds it and as the table prints it.
    pub fn to_report_file(&self) -> ReportFile {
        let (stats, score) = (&self.stats, &self.score);
        ReportFile {
            score: self.final_score(),
            passed: self.passed(),
            errors: stats.error_count(),
            timeouts: stats.timeouts,
            idle_close_retries: stats.idle_close_retries,
            connection_errors: owned_keys(stats.connection_errors.iter().map(|(cause, count)| (*cause, *count))),
            router_reloads: self.router_reloads,
            breakdown: owned_keys(score.breakdown.iter().map(|(tag, (count, _))| (*tag, *count))),
            breakdown_points: owned_keys(score.breakdown.iter().map(|(tag, (_, points))| (*tag, *points))),
            profiles: self.profiles.iter().map(|path| path.display().to_string()).collect(),
            target: self.target.clone(),
            language: self.language.clone(),
            failed_phase: self.failed_phase.clone(),
            fail_reasons: score.fail_reasons.clone(),
            points: score.points,
            deductions: score.deductions,
            load_seconds: self.load_time.as_secs_f64(),
            requests: stats.requests,
            errors_by_kind: owned_keys(stats.errors.iter().map(|(kind, count)| (kind.name(), *count))),
            failures_by_isu_digit: failures_by_isu_digit(&stats.failures_by_isu_digit),
            error_samples: stats.error_samples.clone(),
            conditions_read: ConditionsRead {
                info: stats.read[0],
                warning: stats.read[1],
                critical: stats.read[2],
            },
            users: self.users,
            viewers: self.viewers,
            activations: self.activations,
            repeated_activations: self.repeated_activations.by_service,
            repeated_activation_isus: self.repeated_activations.isus.clone(),
            activations_on_resend: self.repeated_activations.on_resend,
            unactivated_acknowledged: self.unactivated_acknowledged,
            acknowledged_registrations: self.acknowledged_registrations.clone(),
            sent_conditions: self.sent_conditions,
            latency_ms: stats.latencies.clone(),
            cpu_seconds: self
                .cpu
                .iter()
                .map(|usage| (usage.name.clone(), usage.seconds))
                .collect(),
            bench_cpus: self.bench_cpus.clone(),
            device_posts_whole_run: PostsWholeRun {
                accepted: self.device_posts_whole_run.accepted,
                stored_conditions: self.device_posts_whole_run.stored_conditions,
                failed: self.device_posts_whole_run.failed,
            },
            device_posts: self.device_posts,
            cluster_requests: self.cluster_requests(),
            cluster_cpu_per_1000_requests: self.cluster_cpu_per(self.cluster_requests(), 1000.0),
            cluster_cpu_per_1000_conditions: self.cluster_cpu_per(self.device_posts.stored_conditions, 1000.0),
            cells: self.cells.clone(),
            front_end: FrontEndServed {
                traffic: stats.front_end.clone(),
                nginx_cpu_seconds: self.cpu_seconds_of("nginx"),
            },
            failure_spans: stats.failure_spans.clone(),
            failure_spans_dropped: stats.failure_spans_dropped,
            bench_stalls: stats.stalls.clone(),
            growth_held_for_bench_lag: stats.growth_held,
            control_plane: None,
        }
    }

    /// The CPU seconds of the process named `name`, if read.
    fn cpu_seconds_of(&self, name: &str) -> Option<f64> {
        self.cpu
            .iter()
            .find(|usage| usage.name == name)
            .and_then(|usage| usage.seconds)
    }
}

/// A map of `&str` keys with owned keys.
fn owned_keys<'a, V>(pairs: impl Iterator<Item = (&'a str, V)>) -> BTreeMap<String, V> {
    pairs.map(|(key, value)| (key.to_owned(), value)).collect()
}

/// Failed requests by the first hex digit of the ISU in their path, keyed `0`..`f`, and
/// `none` for requests that name no ISU.
fn failures_by_isu_digit(counts: &[u64; 17]) -> BTreeMap<String, u64> {
    counts
        .iter()
        .enumerate()
        .map(|(slot, count)| {
            let key = if slot < 16 {
                format!("{slot:x}")
            } else {
                "none".to_owned()
            };
            (key, *count)
        })
        .collect()
}

/// The table (see [`ReportFile`]'s `Display`).
impl fmt::Display for Report {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_report_file(), out)
    }
}

/// JIA's repeated activations, split by cause. A registration request reaches JIA at most
/// once, but a request the bench sends again after a timeout is a new one: when the first
/// was rolled back after JIA had answered (its leader died before it committed the answer),
/// the second asks JIA again, which answers as the first time. Repeats beyond the bench's
/// re-sent requests are the service's own: one request that reached JIA twice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JiaRepeats {
    /// Repeats no re-sent request explains.
    pub by_service: usize,
    /// The ISUs of those.
    pub isus: Vec<String>,
    /// Repeats that a re-sent registration request explains.
    pub on_resend: usize,
}

impl JiaRepeats {
    /// Splits JIA's repeats per ISU by the registration requests re-sent per ISU.
    pub fn split(
        repeats: &std::collections::HashMap<String, usize>,
        resent: &std::collections::HashMap<String, usize>,
    ) -> JiaRepeats {
        let mut split = JiaRepeats::default();
        for (uuid, repeated) in repeats {
            let explained = (*repeated).min(resent.get(uuid).copied().unwrap_or(0));
            split.on_resend += explained;
            if *repeated > explained {
                split.by_service += repeated - explained;
                split.isus.push(uuid.clone());
            }
        }
        split.isus.sort();
        split
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::scenario::stats::ErrorKind;

    #[test]
    fn repeats_a_resent_registration_explains_are_told_apart() {
        let counts = |pairs: &[(&str, usize)]| {
            pairs
                .iter()
                .map(|(uuid, count)| ((*uuid).to_owned(), *count))
                .collect::<std::collections::HashMap<_, _>>()
        };
        // a: re-sent once, asked again once (explained); b: never re-sent, asked twice;
        // c: re-sent twice, asked three times more (one beyond what was sent).
        let split = JiaRepeats::split(
            &counts(&[("a", 1), ("b", 1), ("c", 3)]),
            &counts(&[("a", 1), ("c", 2), ("d", 1)]),
        );
        assert_eq!(
            split,
            JiaRepeats {
                by_service: 2,
                isus: vec!["b".to_owned(), "c".to_owned()],
                on_resend: 3,
            }
        );
        assert_eq!(
            JiaRepeats::split(&counts(&[]), &counts(&[("a", 2)])),
            JiaRepeats::default()
        );
    }

    fn report_of(cpu: &[(&str, Option<f64>)], requests: u64, posts: DevicePosts) -> Report {
        let stats = Snapshot {
            requests,
            ..Snapshot::default()
        };
        Report {
            target: String::new(),
            language: String::new(),
            failed_phase: None,
            load_time: Duration::from_secs(10),
            stats,
            score: Score::default(),
            users: 0,
            viewers: 0,
            activations: 0,
            repeated_activations: JiaRepeats::default(),
            unactivated_acknowledged: 0,
            sent_conditions: 0,
            cpu: cpu
                .iter()
                .map(|(name, seconds)| CpuUse {
                    name: (*name).to_owned(),
                    seconds: *seconds,
                })
                .collect(),
            device_posts: posts,
            device_posts_whole_run: posts,
            bench_cpus: Some("0".into()),
            profiles: Vec::new(),
            cells: Vec::new(),
            router_reloads: Some(0),
            acknowledged_registrations: Vec::new(),
        }
    }

    #[test]
    fn device_posts_are_the_difference_of_two_readings() {
        let posts = DevicePosts::between([10, 8, 80, 1, 1], [110, 105, 1050, 2, 3]);
        assert_eq!(
            (
                posts.sent,
                posts.accepted,
                posts.stored_conditions,
                posts.refused,
                posts.failed
            ),
            (100, 97, 970, 1, 2)
        );
    }

    #[test]
    fn cluster_cpu_per_thousand_counts_users_requests_and_device_posts_but_not_the_bench() {
        let posts = DevicePosts::between([0; 5], [1_000, 1_000, 8_000, 0, 0]);
        let report = report_of(
            &[
                ("coordinator", Some(1.0)),
                ("worker-a", Some(3.0)),
                ("bench", Some(9.0)),
            ],
            3_000,
            posts,
        );
        assert_eq!(report.cluster_requests(), 4_000);
        let json = json!(report.to_report_file());
        let per_request = &json["cluster_cpu_per_1000_requests"];
        assert_eq!(per_request["coordinator"], json!(0.25));
        assert_eq!(per_request["worker-a"], json!(0.75));
        assert_eq!(per_request["cluster"], json!(1.0));
        assert!(per_request.get("bench").is_none());
        assert_eq!(json["cluster_cpu_per_1000_conditions"]["cluster"], json!(0.5));
        assert_eq!(json["device_posts"]["stored_conditions"], json!(8_000));

        let unread = report_of(
            &[("coordinator", None), ("bench", Some(1.0))],
            10,
            DevicePosts::default(),
        );
        assert_eq!(
            json!(unread.to_report_file())["cluster_cpu_per_1000_requests"],
            json!({})
        );
    }

    #[test]
    fn a_written_report_reads_back_the_same_and_prints_the_same_table() {
        use crate::scenario::stats::{FailureSpan, Latency, Stall};
        // Figures exact in binary: serde_json (without its `float_roundtrip` feature) may
        // read a float back a last bit off, as it did the hand-written JSON.
        let posts = DevicePosts::between([0; 5], [1_000, 990, 8_000, 4, 6]);
        let mut report = report_of(
            &[
                ("worker-a", Some(3.0)),
                ("coordinator", Some(1.0)),
                ("nginx", None),
                ("bench", Some(2.0)),
            ],
            3_000,
            posts,
        );
        report.stats.errors.insert(ErrorKind::Data, 2);
        report.stats.connection_errors.insert("reset", 3);
        report.stats.failures_by_isu_digit[0xb] = 4;
        report
            .stats
            .error_samples
            .push("GET /api/trend: wrong order".to_owned());
        report.stats.latencies.insert(
            "GET /api/isu".to_owned(),
            Latency {
                count: 9,
                p50_ms: 1.5,
                p90_ms: 2.25,
                p99_ms: 4.0,
                max_ms: 8.5,
            },
        );
        report.stats.failure_spans.push(FailureSpan {
            label: "POST /api/isu".to_owned(),
            sent_unix_ms: 1_000,
            failed_unix_ms: 2_000,
        });
        report.stats.stalls.push(Stall {
            from_unix_ms: 1_500,
            to_unix_ms: 1_650,
        });
        report.score.breakdown.insert("IsuInit", (3, 30));
        report.repeated_activations.isus.push("isu-1".to_owned());
        report.profiles.push(PathBuf::from("run/bench/x/profiles/worker-a.svg"));
        report.acknowledged_registrations.push(shared::protocol::HeldIsu {
            uuid: "isu-1".to_owned(),
            owner: "bench000".to_owned(),
            icon_sha256: None,
        });
        report.cells = vec![CellFigures {
            cell: "a".to_owned(),
            node: "worker-a".to_owned(),
            restarted: true,
            requests: 10,
            errors: 1,
            p50_ms: Some(0.5),
            p90_ms: None,
            p99_ms: Some(2.5),
        }];
        let file = report.to_report_file();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        file.write(&path).unwrap();
        let read = ReportFile::read(&path).unwrap();
        assert_eq!(read, file);
        assert_eq!(read.to_string(), report.to_string());
        assert_eq!(read.failed_requests(), 2 + 3);
        let names: Vec<&str> = read.cpu_seconds.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["worker-a", "coordinator", "nginx", "bench"]);
    }

    #[test]
    fn front_end_traffic_is_shown_beside_nginxs_cpu() {
        use crate::scenario::front_end::{Encoding, FrontEndFile};
        let stats = crate::scenario::stats::Stats::default();
        for _ in 0..3 {
            stats.front_end(FrontEndFile::Asset, Encoding::Gzip, 249_000);
        }
        stats.front_end(FrontEndFile::Asset, Encoding::Identity, 592);
        stats.front_end(FrontEndFile::Page, Encoding::Gzip, 330);
        let mut report = report_of(
            &[("nginx", Some(2.5)), ("bench", Some(1.0))],
            10,
            DevicePosts::default(),
        );
        report.stats.front_end = stats.snapshot().front_end;
        let json = json!(report.to_report_file());
        let front_end = &json["front_end"];
        assert_eq!(front_end["nginx_cpu_seconds"], json!(2.5));
        assert_eq!(front_end["assets"]["requests"], json!(4));
        assert_eq!(
            front_end["assets"]["by_encoding"],
            json!([
                {"encoding": "identity", "responses": 1, "bytes": 592},
                {"encoding": "gzip", "responses": 3, "bytes": 747_000},
            ])
        );
        assert_eq!(front_end["pages"]["by_encoding"][0]["encoding"], json!("gzip"));
        let text = report.to_string();
        let (_, cpu_section) = text.split_once("CPU seconds during load").unwrap();
        let lines: Vec<&str> = cpu_section.lines().map(str::trim).collect();
        assert!(lines[1].starts_with("nginx") && lines[1].ends_with("2.50"), "{text}");
        assert!(
            lines.contains(
                &"front end (served by nginx): 4 asset requests (identity 592 B in 1, gzip 747.0 kB in 3); \
                  1 page loads (gzip 330 B in 1)"
            ),
            "{text}"
        );
    }

    #[test]
    fn per_cell_figures_come_from_two_scrapes_of_each_node() {
        let scrape = |ok: u64, errors: u64, fast: u64, slow: u64| {
            format!(
                "http_requests_total{{node=\"worker-a\",cell=\"a\",route=\"/api/condition/{{uuid}}\",status=\"202\"}} {ok}\n\
                 http_requests_total{{node=\"worker-a\",cell=\"a\",route=\"/api/condition/{{uuid}}\",status=\"503\"}} {errors}\n\
                 http_requests_total{{node=\"worker-a\",cell=\"a\",route=\"/metrics\",status=\"200\"}} 7\n\
                 http_request_duration_seconds_bucket{{node=\"worker-a\",cell=\"a\",route=\"/api/condition/{{uuid}}\",status=\"202\",le=\"0.001\"}} {fast}\n\
                 http_request_duration_seconds_bucket{{node=\"worker-a\",cell=\"a\",route=\"/api/condition/{{uuid}}\",status=\"202\",le=\"0.1\"}} {slow}\n\
                 http_request_duration_seconds_bucket{{node=\"worker-a\",cell=\"a\",route=\"/api/condition/{{uuid}}\",status=\"202\",le=\"+Inf\"}} {slow}\n"
            )
        };
        let before = vec![
            ("worker-a".to_owned(), Some(scrape(10, 0, 10, 10))),
            ("worker-b".to_owned(), None),
        ];
        let after = vec![
            ("worker-a".to_owned(), Some(scrape(110, 5, 105, 110))),
            ("worker-b".to_owned(), None),
        ];
        let cells = CellFigures::between(&before, &after);
        assert_eq!(cells.len(), 1, "a node that did not answer has no figures");
        let a = &cells[0];
        assert_eq!(
            (a.cell.as_str(), a.node.as_str(), a.requests, a.errors),
            ("a", "worker-a", 105, 5)
        );
        assert_eq!(a.p50_ms, Some(1.0));
        assert_eq!(a.p99_ms, Some(100.0));
        assert_eq!(json!(a)["p99_ms"], json!(100.0));
        assert!(!a.restarted);

        // Replaced during the load (a rollout): the new process counts from zero, so the
        // figures are its own since its start, and say so.
        let started =
            |seconds: u64, text: String| format!("process_start_time_seconds{{node=\"worker-a\"}} {seconds}\n{text}");
        let before = vec![("worker-a".to_owned(), Some(started(1000, scrape(500, 9, 500, 500))))];
        let after = vec![("worker-a".to_owned(), Some(started(1030, scrape(40, 2, 30, 40))))];
        let a = &CellFigures::between(&before, &after)[0];
        assert!(a.restarted);
        assert_eq!((a.requests, a.errors), (42, 2), "the restarted node's own counts");
        assert_eq!(json!(a)["restarted"], json!(true));
        let same = vec![("worker-a".to_owned(), Some(started(1000, scrape(600, 9, 600, 600))))];
        let a = &CellFigures::between(&before, &same)[0];
        assert!(!a.restarted);
        assert_eq!(a.requests, 100);
    }
}
