//! The simulator checked against real workers (`bench --scale-compare`): the same scale
//! step ([`crate::scale`]) run with simulated cells and with real workers at one size, in
//! alternated rounds (simulated then real, then real then simulated, ...), and the
//! coordinator's CPU per 1,000 applied updates and memory per ISU of each compared: the
//! medians over the rounds, their ratio real / simulated, and whether it is within
//! [`AGREEMENT`] of 1. The memory judged is the step's memory per ISU, right after
//! `/initialize`; the memory after the pushes is shown beside it but not judged: it is
//! what the allocator has given back of the reset's transient memory by then, which moves
//! from run to run by a quarter.

use std::path::PathBuf;

use serde::Serialize;

use crate::scale::{ScaleConfig, ScaleReport};

/// How far real / simulated may be from 1 for the two to agree.
pub const AGREEMENT: f64 = 0.2;

/// A comparison's settings.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// The step of both kinds (its `real_workers` is set for the real runs only).
    pub step: ScaleConfig,
    /// The worker binary (a release build).
    pub worker: PathBuf,
    pub rounds: usize,
}

/// The comparison's figures.
#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    pub cells: usize,
    pub isus: usize,
    pub rate_per_isu: f64,
    pub push_seconds: f64,
    pub rounds: Vec<CompareRound>,
    pub simulated: Figures,
    pub real: Figures,
    /// Real / simulated, of the medians.
    pub ratio: Figures,
    /// The largest distance from 1 that still agrees.
    pub agreement: f64,
    /// The ratios of CPU per 1,000 applied and of memory per ISU (after `/initialize`) are
    /// within `agreement` of 1.
    pub agree: bool,
}

/// One round: a step of each kind, in `order`.
#[derive(Debug, Clone, Serialize)]
pub struct CompareRound {
    /// `simulated, real` or `real, simulated`.
    pub order: &'static str,
    pub simulated: ScaleReport,
    pub real: ScaleReport,
}

/// The compared figures of one step, or their medians, or the ratio of those.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figures {
    /// The coordinator's CPU milliseconds per 1,000 applied latest updates.
    pub cpu_ms_per_1000_applied: f64,
    /// Its resident memory per ISU right after `/initialize`.
    pub rss_bytes_per_isu: f64,
    /// The same after the pushes.
    pub rss_bytes_after_push_per_isu: f64,
}

impl Figures {
    fn of(report: &ScaleReport) -> Figures {
        Figures {
            cpu_ms_per_1000_applied: report.cpu_ms_per_1000_applied.unwrap_or(f64::NAN),
            rss_bytes_per_isu: report.rss_bytes_per_isu,
            rss_bytes_after_push_per_isu: report.rss_bytes_after_push_per_isu,
        }
    }

    fn median_of(all: &[Figures]) -> Figures {
        let pick = |value: fn(&Figures) -> f64| median(all.iter().map(value).collect());
        Figures {
            cpu_ms_per_1000_applied: pick(|figures| figures.cpu_ms_per_1000_applied),
            rss_bytes_per_isu: pick(|figures| figures.rss_bytes_per_isu),
            rss_bytes_after_push_per_isu: pick(|figures| figures.rss_bytes_after_push_per_isu),
        }
    }

    fn ratio(real: Figures, simulated: Figures) -> Figures {
        Figures {
            cpu_ms_per_1000_applied: real.cpu_ms_per_1000_applied / simulated.cpu_ms_per_1000_applied,
            rss_bytes_per_isu: real.rss_bytes_per_isu / simulated.rss_bytes_per_isu,
            rss_bytes_after_push_per_isu: real.rss_bytes_after_push_per_isu / simulated.rss_bytes_after_push_per_isu,
        }
    }

    /// The figures judged.
    fn judged(&self) -> [f64; 2] {
        [self.cpu_ms_per_1000_applied, self.rss_bytes_per_isu]
    }
}

/// The median (the mean of the middle two for an even count; NaN for none).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        count if count % 2 == 1 => values[count / 2],
        count => (values[count / 2 - 1] + values[count / 2]) / 2.0,
    }
}

/// Whether a ratio is within `agreement` of 1.
pub fn agrees(ratio: f64, agreement: f64) -> bool {
    (ratio - 1.0).abs() <= agreement
}

/// Runs the rounds; fails at the first step that fails.
pub async fn run(config: CompareConfig) -> anyhow::Result<CompareReport> {
    anyhow::ensure!(config.rounds >= 1, "no round to run");
    let mut rounds = Vec::with_capacity(config.rounds);
    for round in 0..config.rounds {
        let real_first = round % 2 == 1;
        let mut simulated = None;
        let mut real = None;
        for is_real in [real_first, !real_first] {
            let kind = if is_real { "real" } else { "simulated" };
            tracing::info!(round = round + 1, kind, "scale compare: a step");
            let step = ScaleConfig {
                real_workers: is_real.then(|| config.worker.clone()),
                out: config.step.out.join(format!("round-{}-{kind}", round + 1)),
                registrations: 0,
                restart: false,
                ..config.step.clone()
            };
            let report = crate::scale::run(step).await?;
            eprintln!("round {} ({kind}):\n{report}", round + 1);
            if is_real {
                real = Some(report);
            } else {
                simulated = Some(report);
            }
        }
        rounds.push(CompareRound {
            order: if real_first {
                "real, simulated"
            } else {
                "simulated, real"
            },
            simulated: simulated.expect("the round ran a simulated step"),
            real: real.expect("the round ran a real step"),
        });
    }
    let simulated = Figures::median_of(
        &rounds
            .iter()
            .map(|round| Figures::of(&round.simulated))
            .collect::<Vec<_>>(),
    );
    let real = Figures::median_of(&rounds.iter().map(|round| Figures::of(&round.real)).collect::<Vec<_>>());
    let ratio = Figures::ratio(real, simulated);
    Ok(CompareReport {
        cells: config.step.cells,
        isus: config.step.isus,
        rate_per_isu: config.step.rate_per_isu,
        push_seconds: config.step.push_time.as_secs_f64(),
        rounds,
        simulated,
        real,
        ratio,
        agreement: AGREEMENT,
        agree: ratio.judged().iter().all(|ratio| agrees(*ratio, AGREEMENT)),
    })
}

impl CompareReport {
    /// Every step held (nothing lost, every post taken).
    pub fn held(&self) -> bool {
        self.rounds
            .iter()
            .all(|round| round.simulated.held() && round.real.held())
    }
}

impl std::fmt::Display for CompareReport {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            out,
            "scale compare: {} ISUs over {} cells, {} /s per ISU for {:.0} s, simulated cells against real workers",
            self.isus, self.cells, self.rate_per_isu, self.push_seconds
        )?;
        writeln!(
            out,
            "  {:>5} {:>10} {:>16} {:>14} {:>16} {:>10} {:>6}",
            "round", "cells", "CPU/1000 applied", "RSS/ISU init", "RSS/ISU pushed", "applied", "held"
        )?;
        for (index, round) in self.rounds.iter().enumerate() {
            let (first, second) = if round.order.starts_with("real") {
                (&round.real, &round.simulated)
            } else {
                (&round.simulated, &round.real)
            };
            for report in [first, second] {
                let figures = Figures::of(report);
                writeln!(
                    out,
                    "  {:>5} {:>10} {:>13.2} ms {:>8.0} bytes {:>10.0} bytes {:>10} {:>6}",
                    index + 1,
                    report.cells_kind,
                    figures.cpu_ms_per_1000_applied,
                    figures.rss_bytes_per_isu,
                    figures.rss_bytes_after_push_per_isu,
                    report.pushes.items_applied,
                    if report.held() { "yes" } else { "NO" }
                )?;
            }
        }
        for (name, figures) in [("simulated", &self.simulated), ("real", &self.real)] {
            writeln!(
                out,
                "  {:>5} {:>10} {:>13.2} ms {:>8.0} bytes {:>10.0} bytes",
                "med.",
                name,
                figures.cpu_ms_per_1000_applied,
                figures.rss_bytes_per_isu,
                figures.rss_bytes_after_push_per_isu
            )?;
        }
        let ratio = &self.ratio;
        writeln!(
            out,
            "  {:>5} {:>10} {:>16.3} {:>14.3} {:>16.3}",
            "ratio",
            "real/sim",
            ratio.cpu_ms_per_1000_applied,
            ratio.rss_bytes_per_isu,
            ratio.rss_bytes_after_push_per_isu
        )?;
        write!(
            out,
            "  the simulator and real workers {} within {:.0} % (CPU per 1,000 applied, RSS per ISU after init)",
            if self.agree { "agree" } else { "DO NOT agree" },
            self.agreement * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_agreement() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
        assert!(agrees(1.2, AGREEMENT));
        assert!(agrees(0.8, AGREEMENT));
        assert!(!agrees(1.21, AGREEMENT));
        assert!(!agrees(0.79, AGREEMENT));
        assert!(!agrees(f64::NAN, AGREEMENT), "a figure missing does not agree");
        let simulated = Figures {
            cpu_ms_per_1000_applied: 10.0,
            rss_bytes_per_isu: 2_000.0,
            rss_bytes_after_push_per_isu: 2_500.0,
        };
        let real = Figures {
            cpu_ms_per_1000_applied: 11.0,
            rss_bytes_per_isu: 2_100.0,
            rss_bytes_after_push_per_isu: 2_500.0,
        };
        let ratio = Figures::ratio(real, simulated);
        assert!((ratio.cpu_ms_per_1000_applied - 1.1).abs() < 1e-9);
        assert!((ratio.rss_bytes_per_isu - 1.05).abs() < 1e-9);
        assert_eq!(ratio.rss_bytes_after_push_per_isu, 1.0);
    }
}
