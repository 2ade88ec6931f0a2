//! Counters of a run and the approximate score computed from them.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::model::Level;

/// How many error descriptions are kept for the report.
const KEPT_ERROR_SAMPLES: usize = 10;
/// More non-timeout errors than this fail the run, as in the official bench.
pub const MAX_ERRORS: u64 = 100;
/// Conditions are scored per batch of this many newly read ones.
const READ_SCORE_STEP: u64 = 50;

/// Graph grades, from the fewest conditions in any of a graph's 24 hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphGrade {
    Good,
    Normal,
    Bad,
    Worst,
}

impl GraphGrade {
    pub const ALL: [GraphGrade; 4] = [GraphGrade::Good, GraphGrade::Normal, GraphGrade::Bad, GraphGrade::Worst];

    /// Grade of a graph whose sparsest hour holds `fewest` conditions.
    pub fn of(fewest: usize) -> GraphGrade {
        match fewest {
            21.. => GraphGrade::Good,
            11..=20 => GraphGrade::Normal,
            6..=10 => GraphGrade::Bad,
            _ => GraphGrade::Worst,
        }
    }

    /// Points of a complete past day's graph (official `Graph*` tags).
    pub fn points(self) -> i64 {
        match self {
            GraphGrade::Good => 150,
            GraphGrade::Normal => 100,
            GraphGrade::Bad => 60,
            GraphGrade::Worst => 10,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Lock-free counters shared by every agent of a run.
#[derive(Default)]
pub struct Stats {
    requests: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    read: [AtomicU64; 3],
    graphs: [AtomicU64; 4],
    error_samples: Mutex<Vec<String>>,
}

impl Stats {
    pub fn count_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub fn timeout(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// Records one non-timeout error; the first few descriptions are kept and logged.
    pub fn error(&self, description: String) {
        let count = self.errors.fetch_add(1, Ordering::Relaxed) + 1;
        if count as usize <= KEPT_ERROR_SAMPLES {
            tracing::warn!(error = %description, "bench error");
            self.error_samples
                .lock()
                .expect("error samples poisoned")
                .push(description);
        }
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

    /// Counts one scored graph.
    pub fn graph(&self, grade: GraphGrade) {
        self.graphs[grade.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> Snapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Snapshot {
            requests: load(&self.requests),
            errors: load(&self.errors),
            timeouts: load(&self.timeouts),
            read: self.read.each_ref().map(load),
            graphs: self.graphs.each_ref().map(load),
            error_samples: self.error_samples.lock().expect("error samples poisoned").clone(),
        }
    }
}

/// The counters at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub requests: u64,
    pub errors: u64,
    pub timeouts: u64,
    /// Newly read conditions: info, warning, critical.
    pub read: [u64; 3],
    /// Scored graphs: good, normal, bad, worst.
    pub graphs: [u64; 4],
    pub error_samples: Vec<String>,
}

/// How the score came about.
#[derive(Debug, Clone, Default)]
pub struct Score {
    pub base: i64,
    pub reads: i64,
    pub graphs: i64,
    pub deductions: i64,
    pub total: i64,
    pub failed: bool,
}

impl Snapshot {
    pub fn conditions_read(&self) -> u64 {
        self.read.iter().sum()
    }

    /// An approximation of the official score (§13.6–13.7), not a reproduction of it:
    /// 1000 for starting, 20 / 8 / 4 per 50 newly read info / warning / critical conditions,
    /// 150 / 100 / 60 / 10 per good / normal / bad / worst graph of a complete past day (each
    /// ISU-day once), minus one per error and one per 10 timeouts. More than 100 errors, or a
    /// total ≤ 0, fails the run with score 0. The official bench also scores "today" graphs,
    /// adds users as the service keeps up, and runs checks this short run does not.
    pub fn score(&self) -> Score {
        let [info, warning, critical] = self.read.map(|count| (count / READ_SCORE_STEP) as i64);
        let reads = info * 20 + warning * 8 + critical * 4;
        let graphs = GraphGrade::ALL
            .iter()
            .map(|grade| grade.points() * self.graphs[grade.index()] as i64)
            .sum();
        let deductions = self.errors as i64 + self.timeouts as i64 / 10;
        let raw = 1000 + reads + graphs - deductions;
        let failed = self.errors > MAX_ERRORS || raw <= 0;
        Score {
            base: 1000,
            reads,
            graphs,
            deductions,
            total: if failed { 0 } else { raw },
            failed,
        }
    }
}

impl fmt::Display for Snapshot {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [info, warning, critical] = self.read;
        let [good, normal, bad, worst] = self.graphs;
        write!(
            out,
            "requests={} errors={} timeouts={} read={} (info={info} warning={warning} critical={critical}) \
             graphs(good={good} normal={normal} bad={bad} worst={worst})",
            self.requests,
            self.errors,
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
    fn score_adds_reads_and_graphs_and_deducts_errors() {
        let snapshot = Snapshot {
            errors: 3,
            timeouts: 25,
            read: [120, 50, 49],
            graphs: [1, 0, 0, 2],
            ..Snapshot::default()
        };
        let score = snapshot.score();
        assert_eq!(score.reads, 2 * 20 + 8);
        assert_eq!(score.graphs, 150 + 20);
        assert_eq!(score.deductions, 5);
        assert_eq!(score.total, 1000 + 48 + 170 - 5);
        assert!(!score.failed);
    }

    #[test]
    fn too_many_errors_fail_the_run() {
        let score = Snapshot {
            errors: 101,
            read: [100_000, 0, 0],
            ..Snapshot::default()
        }
        .score();
        assert!(score.failed);
        assert_eq!(score.total, 0);
    }
}
