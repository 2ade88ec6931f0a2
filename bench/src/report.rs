//! The outcome of a bench run: printed as tables for people, written as JSON for tools.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::scenario::stats::{ErrorKind, Score, Snapshot};

/// CPU seconds one process used during the load phase (`None`: could not be read).
#[derive(Debug, Clone)]
pub struct CpuUse {
    pub name: String,
    pub seconds: Option<f64>,
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
    pub sent_conditions: usize,
    /// Per node, then `bench` itself.
    pub cpu: Vec<CpuUse>,
    /// Flamegraphs and protobufs written.
    pub profiles: Vec<PathBuf>,
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

    /// The whole report as JSON: `score`, `passed`, `errors`, `timeouts`, `breakdown`
    /// (tag → count), `profiles` (paths), and the details.
    pub fn to_json(&self) -> Value {
        let breakdown: serde_json::Map<String, Value> = self
            .score
            .breakdown
            .iter()
            .map(|(tag, (count, _))| ((*tag).to_owned(), json!(count)))
            .collect();
        let points: serde_json::Map<String, Value> = self
            .score
            .breakdown
            .iter()
            .map(|(tag, (_, points))| ((*tag).to_owned(), json!(points)))
            .collect();
        let errors_by_kind: serde_json::Map<String, Value> = self
            .stats
            .errors
            .iter()
            .map(|(kind, count)| (kind.name().to_owned(), json!(count)))
            .collect();
        let cpu: serde_json::Map<String, Value> = self
            .cpu
            .iter()
            .map(|usage| (usage.name.clone(), json!(usage.seconds)))
            .collect();
        json!({
            "score": self.final_score(),
            "passed": self.passed(),
            "errors": self.stats.error_count(),
            "timeouts": self.stats.timeouts,
            "breakdown": breakdown,
            "breakdown_points": points,
            "profiles": self.profiles.iter().map(|path| path.display().to_string()).collect::<Vec<_>>(),
            "target": self.target,
            "language": self.language,
            "failed_phase": self.failed_phase,
            "fail_reasons": self.score.fail_reasons,
            "points": self.score.points,
            "deductions": self.score.deductions,
            "load_seconds": self.load_time.as_secs_f64(),
            "requests": self.stats.requests,
            "errors_by_kind": errors_by_kind,
            "error_samples": self.stats.error_samples,
            "conditions_read": {
                "info": self.stats.read[0],
                "warning": self.stats.read[1],
                "critical": self.stats.read[2],
            },
            "users": self.users,
            "viewers": self.viewers,
            "activations": self.activations,
            "sent_conditions": self.sent_conditions,
            "latency_ms": self.stats.latencies,
            "cpu_seconds": cpu,
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(out, "target {}  language {}", self.target, self.language)?;
        if let Some(phase) = &self.failed_phase {
            writeln!(out, "FAILED before load: {phase}")?;
        }
        writeln!(
            out,
            "load {:.1} s  users {}  viewers {}  ISUs activated {}  conditions sent {}  requests {}",
            self.load_time.as_secs_f64(),
            self.users,
            self.viewers,
            self.activations,
            self.sent_conditions,
            self.stats.requests,
        )?;

        writeln!(out, "\nscore breakdown")?;
        writeln!(out, "  {:<24} {:>9} {:>9}", "tag", "count", "points")?;
        for (tag, (count, points)) in &self.score.breakdown {
            if *count > 0 || *points > 0 {
                writeln!(out, "  {tag:<24} {count:>9} {points:>9}")?;
            }
        }
        writeln!(out, "  {:<24} {:>9} {:>9}", "sum of points", "", self.score.points)?;
        let by_kind: Vec<String> = ErrorKind::ALL
            .iter()
            .filter_map(|kind| {
                let count = self.stats.errors.get(kind).copied().unwrap_or_default();
                (count > 0).then(|| format!("{} {count}", kind.name()))
            })
            .collect();
        writeln!(out, "  {:<24} {:>9} {:>9}", "deductions", "", -self.score.deductions)?;
        writeln!(
            out,
            "  errors {}{}  timeouts {}",
            self.stats.error_count(),
            if by_kind.is_empty() {
                String::new()
            } else {
                format!(" ({})", by_kind.join(", "))
            },
            self.stats.timeouts
        )?;
        for (number, sample) in self.stats.error_samples.iter().enumerate() {
            writeln!(out, "  error #{}: {sample}", number + 1)?;
        }

        if !self.stats.latencies.is_empty() {
            writeln!(out, "\nlatency by endpoint (ms)")?;
            writeln!(
                out,
                "  {:<34} {:>8} {:>8} {:>8} {:>8} {:>8}",
                "endpoint", "count", "p50", "p90", "p99", "max"
            )?;
            for (label, latency) in &self.stats.latencies {
                writeln!(
                    out,
                    "  {label:<34} {:>8} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                    latency.count, latency.p50_ms, latency.p90_ms, latency.p99_ms, latency.max_ms
                )?;
            }
        }

        if !self.cpu.is_empty() {
            writeln!(out, "\nCPU seconds during load")?;
            for usage in &self.cpu {
                match usage.seconds {
                    Some(seconds) => writeln!(out, "  {:<12} {seconds:>8.2}", usage.name)?,
                    None => writeln!(out, "  {:<12} {:>8}", usage.name, "n/a")?,
                }
            }
            let cluster: f64 = self
                .cpu
                .iter()
                .filter(|usage| usage.name != "bench")
                .filter_map(|usage| usage.seconds)
                .sum();
            let bench = self
                .cpu
                .iter()
                .find(|usage| usage.name == "bench")
                .and_then(|usage| usage.seconds);
            if let (Some(bench), true) = (bench, cluster > 0.0) {
                writeln!(
                    out,
                    "  {:<12} {cluster:>8.2}  (bench/cluster = {:.2})",
                    "cluster",
                    bench / cluster
                )?;
            }
        }
        if !self.profiles.is_empty() {
            writeln!(out, "\nprofiles taken under load")?;
            for path in &self.profiles {
                writeln!(out, "  {}", path.display())?;
            }
        }
        write!(
            out,
            "\nresult: {}  score {}{}",
            if self.passed() { "PASSED" } else { "FAILED" },
            self.final_score(),
            if self.score.fail_reasons.is_empty() {
                String::new()
            } else {
                format!("  ({})", self.score.fail_reasons.join("; "))
            }
        )
    }
}
