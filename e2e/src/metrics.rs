//! Reading the nodes' Prometheus metrics.

/// Sums the samples of a Prometheus counter or histogram `_count` whose labels contain every `label`.
pub fn metric_sum(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(name) && labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
