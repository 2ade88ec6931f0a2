//! Reading a node's `/metrics` (the Prometheus text format) back: the samples, counters
//! summed over label sets, and a quantile of a histogram between two scrapes. What
//! `scripts/cells status` shows per cell is computed from two scrapes a moment apart.

/// One sample: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    /// The text between the braces (empty without labels).
    pub labels: String,
    pub value: f64,
}

/// Every sample of a text exposition (comments and malformed lines are skipped).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let value = value.trim().parse::<f64>().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            Some(Sample {
                name: name.to_owned(),
                labels: labels.to_owned(),
                value,
            })
        })
        .collect()
}

/// The value of label `key` in a sample's label text.
pub fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
    let rest = &labels[start..];
    Some(&rest[..rest.find('"')?])
}

/// The sum of `name`'s samples whose labels satisfy `keep`.
pub fn sum(samples: &[Sample], name: &str, keep: impl Fn(&str) -> bool) -> f64 {
    samples
        .iter()
        .filter(|sample| sample.name == name && keep(&sample.labels))
        .map(|sample| sample.value)
        .sum()
}

/// The cumulative bucket counts of histogram `name` (`<name>_bucket`) over the label sets
/// `keep` accepts, summed, by upper bound (ascending; `+Inf` last).
pub fn buckets(samples: &[Sample], name: &str, keep: impl Fn(&str) -> bool) -> Vec<(f64, f64)> {
    let bucket = format!("{name}_bucket");
    let mut by_bound: Vec<(f64, f64)> = Vec::new();
    for sample in samples
        .iter()
        .filter(|sample| sample.name == bucket && keep(&sample.labels))
    {
        let Some(bound) = label(&sample.labels, "le").and_then(|le| match le {
            "+Inf" => Some(f64::INFINITY),
            other => other.parse().ok(),
        }) else {
            continue;
        };
        match by_bound.iter_mut().find(|(known, _)| *known == bound) {
            Some((_, count)) => *count += sample.value,
            None => by_bound.push((bound, sample.value)),
        }
    }
    by_bound.sort_by(|a, b| a.0.total_cmp(&b.0));
    by_bound
}

/// The `q` quantile (an upper bound: the first bucket that holds it) of the observations
/// made between two scrapes' buckets; `None` when there were none.
pub fn quantile_between(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let earlier = |bound: f64| {
        before
            .iter()
            .find(|(known, _)| *known == bound)
            .map_or(0.0, |(_, count)| *count)
    };
    let deltas: Vec<(f64, f64)> = after
        .iter()
        .map(|(bound, count)| (*bound, (count - earlier(*bound)).max(0.0)))
        .collect();
    let total = deltas.last()?.1;
    if total <= 0.0 {
        return None;
    }
    deltas
        .iter()
        .find(|(_, count)| *count >= q * total)
        .map(|(bound, _)| *bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE http_requests_total counter\n\
        http_requests_total{node=\"worker-a\",cell=\"a\",route=\"/x\",status=\"202\"} 90\n\
        http_requests_total{node=\"worker-a\",cell=\"a\",route=\"/x\",status=\"503\"} 10\n\
        lat_bucket{route=\"/x\",le=\"0.01\"} 80\n\
        lat_bucket{route=\"/y\",le=\"0.01\"} 5\n\
        lat_bucket{route=\"/x\",le=\"0.1\"} 99\n\
        lat_bucket{route=\"/y\",le=\"0.1\"} 5\n\
        lat_bucket{route=\"/x\",le=\"+Inf\"} 100\n\
        lat_bucket{route=\"/y\",le=\"+Inf\"} 5\n\
        process_cpu_seconds_total 1.5\n";

    #[test]
    fn samples_labels_and_sums() {
        let samples = parse(TEXT);
        assert_eq!(samples.len(), 9);
        assert_eq!(sum(&samples, "http_requests_total", |_| true), 100.0);
        let errors = sum(&samples, "http_requests_total", |labels| {
            label(labels, "status").is_some_and(|status| status.starts_with('5'))
        });
        assert_eq!(errors, 10.0);
        assert_eq!(sum(&samples, "process_cpu_seconds_total", |_| true), 1.5);
        assert_eq!(label("a=\"1\",le=\"+Inf\"", "le"), Some("+Inf"));
    }

    #[test]
    fn a_quantile_between_two_scrapes() {
        let after = buckets(&parse(TEXT), "lat", |_| true);
        assert_eq!(
            buckets(&parse(TEXT), "lat", |labels| labels.contains("/y")).last(),
            Some(&(f64::INFINITY, 5.0))
        );
        assert_eq!(after, vec![(0.01, 85.0), (0.1, 104.0), (f64::INFINITY, 105.0)]);
        assert_eq!(quantile_between(&[], &after, 0.5), Some(0.01));
        assert_eq!(quantile_between(&[], &after, 0.99), Some(0.1));
        assert_eq!(quantile_between(&after, &after, 0.99), None, "nothing in between");
    }
}
