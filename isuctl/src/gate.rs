//! The rollout's health gate, a pure function: a cell's figures over a window before a new
//! binary and over a window after it, judged against the baseline. The one safety decision a
//! rollout makes, so it is typed and unit-tested (it once read a text table by column with
//! awk, and broke where awk is gawk).
//!
//! Rules (percent and milliseconds):
//! - a cell that served requests before must serve some after;
//! - error ratio (5xx) after ≤ max(0.1 %, 2 × before);
//! - p99 after ≤ max(2 × before, before + slack); a p99 beyond the histogram after, when it
//!   was within before, fails;
//! - a cell idle in a window cannot be judged on it: the wave passes with a warning.

use serde::Serialize;
use shared::protocol::cells::{CellFigures, Latency};

/// The error ratio a cell may always reach, whatever its baseline (0.1 %).
pub const ERROR_RATIO_FLOOR: f64 = 0.001;

/// What a cell did over one window (the part of its figures the gate reads).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Window {
    pub requests_per_second: f64,
    /// 5xx over all answers, 0 to 1; `None` when nothing was answered.
    pub error_ratio: Option<f64>,
    pub p99: Option<Latency>,
}

impl From<&CellFigures> for Window {
    fn from(figures: &CellFigures) -> Window {
        Window {
            requests_per_second: figures.requests_per_second,
            error_ratio: figures.error_ratio,
            p99: figures.p99,
        }
    }
}

impl std::fmt::Display for Window {
    /// `requests/s, 5xx %, p99 ms`, as the rollout prints it.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let errors = self
            .error_ratio
            .map_or("-".to_owned(), |ratio| format!("{:.2}", ratio * 100.0));
        let p99 = self.p99.map_or("-".to_owned(), |p99| p99.to_string());
        write!(formatter, "{:.1} {errors} {p99}", self.requests_per_second)
    }
}

/// The gate's verdict on one wave.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict", content = "reason")]
pub enum Verdict {
    /// Judged on traffic in both windows, and within every limit.
    Passed,
    /// Idle in a window: nothing to judge on, the wave passes with a warning.
    Unjudged,
    /// Why the new binary fails.
    Failed(String),
}

/// Judges the window `after` a change against the window `before` it, with `slack_ms` of
/// p99 allowance on top of the baseline.
pub fn judge(before: &Window, after: &Window, slack_ms: f64) -> Verdict {
    if before.requests_per_second > 0.0 && after.requests_per_second <= 0.0 {
        return Verdict::Failed(format!(
            "the cell served nothing after the change ({:.1} requests/s before)",
            before.requests_per_second
        ));
    }
    if before.requests_per_second <= 0.0 || after.requests_per_second <= 0.0 {
        return Verdict::Unjudged;
    }
    let (Some(old_errors), Some(new_errors)) = (before.error_ratio, after.error_ratio) else {
        return Verdict::Unjudged;
    };
    let limit = (2.0 * old_errors).max(ERROR_RATIO_FLOOR);
    if new_errors > limit {
        return Verdict::Failed(format!(
            "error ratio {:.2} % > {:.2} % (baseline {:.2} %)",
            new_errors * 100.0,
            limit * 100.0,
            old_errors * 100.0
        ));
    }
    match (before.p99, after.p99) {
        (Some(Latency::Millis(old)), Some(Latency::Millis(new))) => {
            let limit = (2.0 * old).max(old + slack_ms);
            if new > limit {
                return Verdict::Failed(format!("p99 {new:.1} ms > {limit:.1} ms (baseline {old:.1} ms)"));
            }
            Verdict::Passed
        }
        (Some(Latency::Millis(old)), Some(beyond @ Latency::BeyondHistogram { .. })) => {
            Verdict::Failed(format!("p99 {beyond} ms beyond the histogram (baseline {old:.1} ms)"))
        }
        // Slow beyond measure already before, or no latency observed: errors were judged.
        _ => Verdict::Passed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(requests_per_second: f64, error_percent: Option<f64>, p99_ms: Option<f64>) -> Window {
        Window {
            requests_per_second,
            error_ratio: error_percent.map(|percent| percent / 100.0),
            p99: p99_ms.map(Latency::Millis),
        }
    }

    const BEYOND: Option<Latency> = Some(Latency::BeyondHistogram { above_millis: 2500.0 });

    #[test]
    fn a_healthy_new_binary_passes() {
        let before = window(50.0, Some(0.0), Some(12.0));
        assert_eq!(
            judge(&before, &window(48.0, Some(0.0), Some(20.0)), 50.0),
            Verdict::Passed
        );
        // Within twice the baseline's errors, and within the slack.
        let before = window(50.0, Some(1.0), Some(12.0));
        assert_eq!(
            judge(&before, &window(50.0, Some(2.0), Some(62.0)), 50.0),
            Verdict::Passed
        );
    }

    #[test]
    fn errors_beyond_twice_the_baseline_or_the_floor_fail() {
        let before = window(50.0, Some(0.0), Some(12.0));
        assert_eq!(
            judge(&before, &window(50.0, Some(0.1), Some(12.0)), 50.0),
            Verdict::Passed
        );
        assert_eq!(
            judge(&before, &window(50.0, Some(22.0), Some(12.0)), 50.0),
            Verdict::Failed("error ratio 22.00 % > 0.10 % (baseline 0.00 %)".into())
        );
        let before = window(50.0, Some(1.0), Some(12.0));
        assert_eq!(
            judge(&before, &window(50.0, Some(2.5), Some(12.0)), 50.0),
            Verdict::Failed("error ratio 2.50 % > 2.00 % (baseline 1.00 %)".into())
        );
    }

    #[test]
    fn a_slower_p99_fails_beyond_twice_the_baseline_and_the_slack() {
        let before = window(50.0, Some(0.0), Some(100.0));
        // max(2 × 100, 100 + 50) = 200.
        assert_eq!(
            judge(&before, &window(50.0, Some(0.0), Some(200.0)), 50.0),
            Verdict::Passed
        );
        assert_eq!(
            judge(&before, &window(50.0, Some(0.0), Some(250.0)), 50.0),
            Verdict::Failed("p99 250.0 ms > 200.0 ms (baseline 100.0 ms)".into())
        );
        // A fast baseline: the slack decides (max(2 × 5, 5 + 500) = 505).
        let before = window(50.0, Some(0.0), Some(5.0));
        assert_eq!(
            judge(&before, &window(50.0, Some(0.0), Some(500.0)), 500.0),
            Verdict::Passed
        );
    }

    #[test]
    fn a_p99_beyond_the_histogram_fails_only_when_it_was_within_before() {
        let within = window(50.0, Some(0.0), Some(100.0));
        let beyond = Window { p99: BEYOND, ..within };
        assert_eq!(
            judge(&within, &beyond, 50.0),
            Verdict::Failed("p99 >2500 ms beyond the histogram (baseline 100.0 ms)".into())
        );
        assert_eq!(judge(&beyond, &beyond, 50.0), Verdict::Passed);
        assert_eq!(judge(&beyond, &within, 50.0), Verdict::Passed);
    }

    #[test]
    fn a_cell_that_stops_serving_fails() {
        let before = window(50.0, Some(0.0), Some(12.0));
        assert_eq!(
            judge(&before, &window(0.0, None, None), 50.0),
            Verdict::Failed("the cell served nothing after the change (50.0 requests/s before)".into())
        );
    }

    #[test]
    fn an_idle_window_cannot_be_judged() {
        let idle = window(0.0, None, None);
        assert_eq!(judge(&idle, &idle, 50.0), Verdict::Unjudged);
        assert_eq!(
            judge(&idle, &window(50.0, Some(30.0), Some(900.0)), 50.0),
            Verdict::Unjudged
        );
    }

    #[test]
    fn a_window_prints_as_the_rollout_shows_it() {
        assert_eq!(window(52.26, Some(1.5), Some(12.0)).to_string(), "52.3 1.50 12.0");
        assert_eq!(window(0.0, None, None).to_string(), "0.0 - -");
    }
}
