//! A run's report: the seed, the faults by kind, the operations, each check's count and its
//! first violations; printed as a table or as JSON (`--json`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::checker::{Check, Violation};
use crate::history::History;

/// How many violations of one check the report lists.
const LISTED: usize = 5;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub seed: u64,
    pub duration_s: f64,
    pub faults: u64,
    pub faults_by_kind: BTreeMap<String, u64>,
    /// Faults whose doing or undoing failed (a migration refused, a node that did not come back).
    pub faults_failed: u64,
    /// Most faults active at once.
    pub faults_overlapping: u64,
    pub operations: u64,
    pub operations_by_kind: BTreeMap<String, u64>,
    /// Writes that got no answer or a 5xx: they may or may not have taken effect.
    pub indeterminate: u64,
    pub checks: Vec<CheckSummary>,
    pub passed: bool,
    pub cost: Cost,
    /// The history the checks read (`nemesis --check FILE` checks it again).
    pub history: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckSummary {
    pub name: String,
    pub checked: u64,
    pub violations: u64,
    pub listed: Vec<Violation>,
}

/// What the run cost the machine.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cost {
    pub wall_s: f64,
    /// The nemesis process's own CPU (clients, checker, JIA simulator).
    pub nemesis_cpu_s: f64,
    /// The whole machine's busy cores on average during the load (every process, other
    /// users' included).
    pub machine_busy_cores: f64,
}

impl Report {
    pub fn new(seed: u64, duration_s: f64, history: &History, checks: Vec<Check>, cost: Cost) -> Report {
        let mut faults_by_kind = BTreeMap::new();
        for fault in &history.faults {
            *faults_by_kind.entry(fault.kind.clone()).or_default() += 1;
        }
        let mut operations_by_kind = BTreeMap::new();
        for op in &history.ops {
            *operations_by_kind.entry(op.call.kind().to_owned()).or_default() += 1;
        }
        let faults_overlapping = history
            .faults
            .iter()
            .map(|fault| {
                history
                    .faults
                    .iter()
                    .filter(|other| other.from <= fault.from && other.to >= fault.from)
                    .count() as u64
            })
            .max()
            .unwrap_or(0);
        let checks: Vec<CheckSummary> = checks
            .into_iter()
            .map(|check| CheckSummary {
                name: check.name,
                checked: check.checked,
                violations: check.violations.len() as u64,
                listed: check.violations.into_iter().take(LISTED).collect(),
            })
            .collect();
        Report {
            seed,
            duration_s,
            faults: history.faults.len() as u64,
            faults_by_kind,
            faults_failed: history.faults.iter().filter(|fault| !fault.ok).count() as u64,
            faults_overlapping,
            operations: history.ops.len() as u64,
            operations_by_kind,
            indeterminate: history
                .ops
                .iter()
                .filter(|op| op.call.writes() && op.indeterminate())
                .count() as u64,
            passed: checks.iter().all(|check| check.violations == 0),
            checks,
            cost,
            history: None,
        }
    }

    /// The report as a person reads it.
    pub fn table(&self) -> String {
        let mut text = format!(
            "nemesis: seed {} over {:.0} s\nfaults: {} ({} failed, at most {} at once): {}\noperations: {} ({} indeterminate): {}\n",
            self.seed,
            self.duration_s,
            self.faults,
            self.faults_failed,
            self.faults_overlapping,
            counts(&self.faults_by_kind),
            self.operations,
            self.indeterminate,
            counts(&self.operations_by_kind),
        );
        text.push_str(&format!("{:<26} {:>9} {:>10}\n", "check", "checked", "violations"));
        for check in &self.checks {
            text.push_str(&format!(
                "{:<26} {:>9} {:>10}\n",
                check.name, check.checked, check.violations
            ));
            for violation in &check.listed {
                text.push_str(&format!("  - {}\n", violation.what));
                for op in &violation.ops {
                    text.push_str(&format!("      op {op}\n"));
                }
                for fault in &violation.faults {
                    text.push_str(&format!("      during {fault}\n"));
                }
            }
        }
        text.push_str(&format!(
            "cost: {:.0} s wall, nemesis {:.1} CPU s, machine {:.2} busy cores on average\n",
            self.cost.wall_s, self.cost.nemesis_cpu_s, self.cost.machine_busy_cores
        ));
        if let Some(history) = &self.history {
            text.push_str(&format!("history: {}\n", history.display()));
        }
        text.push_str(&format!(
            "{} (seed {})\n",
            if self.passed { "PASSED" } else { "FAILED" },
            self.seed
        ));
        text
    }
}

fn counts(counts: &BTreeMap<String, u64>) -> String {
    counts
        .iter()
        .map(|(kind, count)| format!("{kind} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}
