//! Reading a node's Prometheus text and the bench's JSON report for the hosts test's checks:
//! sums of samples, the latest-condition pushes that waited, failures by cell.

use std::collections::BTreeMap;

use shared::prom_text;

/// The sum of every sample whose name starts with `prefix` (so `conditions_stored_total` takes
/// in every label set and every metric named on from it, as the old checks' grep did).
pub fn sum(text: &str, prefix: &str) -> f64 {
    prom_text::parse(text)
        .iter()
        .filter(|sample| sample.name.starts_with(prefix))
        .map(|sample| sample.value)
        .sum()
}

/// Latest-condition pushes that waited more than 2.5 s: the `+Inf` bucket less the `2.5` one
/// of `latest_push_lag_seconds`.
pub fn slow_pushes(text: &str) -> f64 {
    let buckets = prom_text::buckets(&prom_text::parse(text), "latest_push_lag_seconds", |_| true);
    let count_at = |bound: f64| {
        buckets
            .iter()
            .find(|(upper, _)| *upper == bound)
            .map_or(0.0, |(_, count)| *count)
    };
    count_at(f64::INFINITY) - count_at(2.5)
}

/// Failed requests by cell under the default map, from the bench's `failures_by_isu_digit`
/// (an ISU's first hex digit → failures; `none` for requests naming no ISU): the ISUs of the
/// cell at index `i` of `cells` are those whose first digit is `i` mod `cells`. Returns
/// (failures of cell `cell`, failures of every other cell, failures naming no ISU).
pub fn failures_by_cell(
    failures_by_digit: &BTreeMap<String, u64>,
    cells: u32,
    cell: u32,
) -> anyhow::Result<(u64, u64, u64)> {
    let (mut first, mut others, mut none) = (0, 0, 0);
    for (key, count) in failures_by_digit {
        if key == "none" {
            none += count;
            continue;
        }
        let digit = u32::from_str_radix(key, 16)
            .map_err(|_| anyhow::anyhow!("failures_by_isu_digit: {key:?} is not a hex digit"))?;
        if digit % cells == cell {
            first += count;
        } else {
            others += count;
        }
    }
    Ok((first, others, none))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP conditions_stored_total Conditions stored.
# TYPE conditions_stored_total counter
conditions_stored_total{cell=\"a\"} 120
conditions_stored_total_other 5
latest_push_lag_seconds_bucket{le=\"0.5\"} 10
latest_push_lag_seconds_bucket{le=\"2.5\"} 12
latest_push_lag_seconds_bucket{le=\"+Inf\"} 15
latest_push_lag_seconds_count 15
broken line
";

    #[test]
    fn sums_match_by_prefix_as_the_old_checks_did() {
        assert_eq!(sum(TEXT, "conditions_stored_total"), 125.0);
        assert_eq!(sum(TEXT, "latest_push_lag_seconds_count"), 15.0);
        assert_eq!(sum(TEXT, "absent"), 0.0);
        assert_eq!(sum("", "x"), 0.0);
    }

    #[test]
    fn slow_pushes_are_those_past_two_and_a_half_seconds() {
        assert_eq!(slow_pushes(TEXT), 3.0);
        assert_eq!(slow_pushes(""), 0.0);
    }

    #[test]
    fn failures_split_by_the_default_map() {
        let failures: BTreeMap<String, u64> = [("0", 4), ("2", 1), ("3", 7), ("f", 2), ("none", 9)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        // Two cells: even digits are cell a's.
        assert_eq!(failures_by_cell(&failures, 2, 0).unwrap(), (5, 9, 9));
        // ... and odd ones cell b's.
        assert_eq!(failures_by_cell(&failures, 2, 1).unwrap(), (9, 5, 9));
        // Three cells: 0, 3, 6, 9, c, f are cell a's.
        assert_eq!(failures_by_cell(&failures, 3, 0).unwrap(), (13, 1, 9));
        let bad: BTreeMap<String, u64> = [("zz".to_owned(), 1)].into_iter().collect();
        assert!(failures_by_cell(&bad, 2, 0).is_err());
    }
}
