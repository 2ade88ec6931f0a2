//! The console's charts and alerts, from Prometheus's HTTP API (`--prometheus-url`): a
//! fixed set of range queries (`/api/v1/query_range`), never one the browser writes, and
//! the alerts (`/api/v1/alerts`).
//!
//! Per cell (the `cell` label every node sets; `coordinator` for the control plane), over
//! the range chosen (15 minutes to 24 hours, 120 points):
//! - requests a second: `sum by (cell) (rate(http_requests_total[1m]))`;
//! - the error ratio: 5xx over all answers, over 1 minute;
//! - p99 latency: `histogram_quantile(0.99, …http_request_duration_seconds_bucket[1m])`;
//! - error budget left: `1 - cell:http_request_errors:ratio_rate1h / 0.001` (the SLO of
//!   `ops/prometheus/rules/cells.yml`: 99.9 %, so 1 is untouched, 0 spent, below 0 overspent,
//!   over the trailing hour);
//! - the leader's term (`max(coordinator_raft_term)`), whose rises the page marks as leader
//!   changes.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// How long a query may take.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// Points per series.
pub const POINTS: u64 = 120;
/// The ranges the console offers, in seconds (15 min, 1 h, 6 h, 24 h).
pub const RANGES: [u64; 4] = [900, 3600, 21_600, 86_400];

/// The charted queries: (name, PromQL).
pub const QUERIES: [(&str, &str); 5] = [
    ("requests", "sum by (cell) (rate(http_requests_total[1m]))"),
    (
        "errors",
        "(sum by (cell) (rate(http_requests_total{status=~\"5..\"}[1m])) or 0 * sum by (cell) (rate(http_requests_total[1m]))) / sum by (cell) (rate(http_requests_total[1m]))",
    ),
    (
        "p99",
        "histogram_quantile(0.99, sum by (cell, le) (rate(http_request_duration_seconds_bucket[1m])))",
    ),
    ("budget", "1 - cell:http_request_errors:ratio_rate1h / 0.001"),
    ("term", "max(coordinator_raft_term)"),
];

/// Answer of `GET /ops/api/charts`.
#[derive(Debug, Clone, Serialize)]
pub struct Charts {
    pub start: u64,
    pub end: u64,
    pub step: u64,
    /// One entry per query of [`QUERIES`], in order.
    pub charts: Vec<Chart>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Chart {
    pub name: &'static str,
    pub series: Vec<Series>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// The `cell` label (empty for the term).
    pub cell: String,
    /// `[unix seconds, value]`; a value Prometheus gives as NaN or ±Inf is left out.
    pub points: Vec<(f64, f64)>,
}

/// A firing or pending alert, as the console lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    pub name: String,
    /// `firing` or `pending`.
    pub state: String,
    pub cell: Option<String>,
    pub severity: Option<String>,
    pub summary: Option<String>,
    pub active_at: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("Prometheus did not answer: {0}")]
    Unreachable(#[from] reqwest::Error),
    #[error("Prometheus refused the query: {0}")]
    Refused(String),
}

#[derive(Deserialize)]
struct Envelope<T> {
    status: String,
    data: Option<T>,
    error: Option<String>,
}

#[derive(Deserialize)]
struct Matrix {
    result: Vec<MatrixSeries>,
}

#[derive(Deserialize)]
struct MatrixSeries {
    metric: std::collections::BTreeMap<String, String>,
    values: Vec<(f64, String)>,
}

#[derive(Deserialize)]
struct Alerts {
    alerts: Vec<RawAlert>,
}

#[derive(Deserialize)]
struct RawAlert {
    labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
    state: String,
    #[serde(rename = "activeAt")]
    active_at: Option<String>,
}

/// Prometheus at a base URL. Every query carries the cluster secret: a deployment reaches
/// Prometheus (on the coordinator host's loopback) through nginx's control server, which
/// wants it (`deploy::nginx::PrometheusProxy`); Prometheus itself ignores the header.
#[derive(Clone)]
pub struct Prometheus {
    base: String,
    client: reqwest::Client,
}

impl Prometheus {
    pub fn new(base: &str, cluster_secret: &str) -> Prometheus {
        let mut headers = reqwest::header::HeaderMap::new();
        // Every node sends it in this header; one that cannot be is refused by nginx (401).
        if let Ok(mut secret) = reqwest::header::HeaderValue::from_str(cluster_secret) {
            secret.set_sensitive(true);
            headers.insert(shared::protocol::SECRET_HEADER, secret);
        }
        let client = node_http::internal_client()
            .default_headers(headers)
            .timeout(QUERY_TIMEOUT)
            .build()
            .expect("building Prometheus's client");
        Prometheus {
            base: base.trim_end_matches('/').to_owned(),
            client,
        }
    }

    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, PrometheusError> {
        let answer: Envelope<T> = self
            .client
            .get(format!("{}{path}", self.base))
            .query(query)
            .send()
            .await?
            .json()
            .await?;
        match (answer.status.as_str(), answer.data) {
            ("success", Some(data)) => Ok(data),
            _ => Err(PrometheusError::Refused(answer.error.unwrap_or(answer.status))),
        }
    }

    /// Every chart over the `range` seconds up to `now` (a range not offered: the nearest
    /// one offered above it, or the longest).
    pub async fn charts(&self, range: u64, now: SystemTime) -> Result<Charts, PrometheusError> {
        let range = RANGES
            .iter()
            .copied()
            .find(|offered| *offered >= range)
            .unwrap_or(RANGES[3]);
        let end = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let start = end - range;
        let step = (range / POINTS).max(1);
        let queries = QUERIES.iter().map(|(name, query)| async move {
            let parameters = [
                ("query", (*query).to_owned()),
                ("start", start.to_string()),
                ("end", end.to_string()),
                ("step", step.to_string()),
            ];
            let matrix: Matrix = self.get("/api/v1/query_range", &parameters).await?;
            Ok::<Chart, PrometheusError>(Chart {
                name,
                series: matrix.result.into_iter().map(series).collect(),
            })
        });
        let charts = futures_util::future::try_join_all(queries).await?;
        Ok(Charts {
            start,
            end,
            step,
            charts,
        })
    }

    /// The alerts firing or pending, firing first.
    pub async fn alerts(&self) -> Result<Vec<Alert>, PrometheusError> {
        let alerts: Alerts = self.get("/api/v1/alerts", &[]).await?;
        Ok(listed_alerts(alerts.alerts))
    }
}

fn series(raw: MatrixSeries) -> Series {
    Series {
        cell: raw.metric.get("cell").cloned().unwrap_or_default(),
        points: raw
            .values
            .into_iter()
            .filter_map(|(time, value)| {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|value| value.is_finite())
                    .map(|value| (time, value))
            })
            .collect(),
    }
}

fn listed_alerts(raw: Vec<RawAlert>) -> Vec<Alert> {
    let mut alerts: Vec<Alert> = raw
        .into_iter()
        .map(|alert| Alert {
            name: alert.labels.get("alertname").cloned().unwrap_or_default(),
            state: alert.state,
            cell: alert.labels.get("cell").cloned(),
            severity: alert.labels.get("severity").cloned(),
            summary: alert.annotations.get("summary").cloned(),
            active_at: alert.active_at,
        })
        .collect();
    alerts.sort_by(|a, b| (a.state != "firing", &a.name, &a.cell).cmp(&(b.state != "firing", &b.name, &b.cell)));
    alerts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_becomes_series_without_nan() {
        let matrix: Envelope<Matrix> = serde_json::from_str(
            r#"{"status":"success","data":{"resultType":"matrix","result":[
                {"metric":{"cell":"a"},"values":[[1700000000,"1.5"],[1700000005,"NaN"],[1700000010,"+Inf"]]}]}}"#,
        )
        .unwrap();
        let series = series(matrix.data.unwrap().result.into_iter().next().unwrap());
        assert_eq!(series.cell, "a");
        assert_eq!(series.points, vec![(1_700_000_000.0, 1.5)]);
    }

    #[test]
    fn firing_alerts_come_first() {
        let alerts: Envelope<Alerts> = serde_json::from_str(
            r#"{"status":"success","data":{"alerts":[
                {"labels":{"alertname":"CellLatestPushLagging","cell":"b"},"annotations":{},"state":"pending","activeAt":"t"},
                {"labels":{"alertname":"CellDown","cell":"a","severity":"page"},"annotations":{"summary":"cell a is down"},"state":"firing","activeAt":"t"}]}}"#,
        )
        .unwrap();
        let listed = listed_alerts(alerts.data.unwrap().alerts);
        assert_eq!(listed[0].name, "CellDown");
        assert_eq!(listed[0].summary.as_deref(), Some("cell a is down"));
        assert_eq!(listed[1].state, "pending");
    }
}
