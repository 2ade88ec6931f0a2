//! The coordinator's cells API, typed: the summary `GET /internal/cells` answers (what each
//! cell holds and did over a few seconds, the migrations in progress) and the bodies of the
//! operations that move ISUs (`migrate`, `drain`, `rebalance`). `isuctl cells` and
//! `isuctl rollout` read these types; human tables are rendered from them, never parsed.

use serde::{Deserialize, Serialize};

use crate::migration::{Phase, Subject};

/// Answer of [`super::COORDINATOR_CELLS`] (`?seconds=S`): the map's share of every cell and
/// what each did between two scrapes of its `/metrics` S seconds apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellsSummary {
    /// The coordinator's placement map version.
    pub map_version: u64,
    /// ISUs pinned to a cell other than their slot's, over every cell.
    pub pins: usize,
    /// Seconds between the two scrapes the rates and percentiles come from.
    pub seconds: f64,
    /// Every cell, in map order (a, b, c, ...).
    pub cells: Vec<CellSummary>,
    /// Migrations not finished yet (logged, not forgotten or rolled back).
    pub migrations: Vec<MigrationInProgress>,
    /// What the router (nginx) was given; `None` when the coordinator keeps no router map.
    #[serde(default)]
    pub router: Option<RouterCopy>,
}

/// The coordinator's view of the router's map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterCopy {
    /// The version last written to the router's map file (what a starting nginx reads).
    pub file_version: u64,
    /// The version nginx last took on its control server; `None` without a control server.
    pub nginx_version: Option<u64>,
}

/// One cell: its share of the map, and its figures when its worker answered both scrapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellSummary {
    pub name: String,
    /// Slots of the map this cell owns (of 256).
    pub slots: usize,
    /// ISUs pinned to this cell.
    pub pins: usize,
    /// Registered ISUs this cell owns.
    pub isus: usize,
    /// The worker's internal (node) URL.
    pub internal_url: String,
    /// The URL devices post to.
    pub device_url: String,
    /// `None`: the worker did not answer a scrape (the cell is down).
    pub figures: Option<CellFigures>,
}

impl CellSummary {
    /// Whether the cell's worker answered both scrapes.
    pub fn is_up(&self) -> bool {
        self.figures.is_some()
    }
}

/// What one cell's worker did between the two scrapes (public API routes only: the scrapes
/// and the cluster's own calls are not the cell's load).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellFigures {
    /// Conditions the worker stored since it started.
    pub conditions: u64,
    pub requests_per_second: f64,
    /// 5xx answers over all answers, 0 to 1; `None` when the cell answered nothing.
    pub error_ratio: Option<f64>,
    /// p99 of the public requests' latency; `None` when the cell answered nothing.
    pub p99: Option<Latency>,
    /// p99 of the lag between a condition's arrival and its push to the coordinator.
    pub push_lag_p99: Option<Latency>,
    /// ISUs whose posts the worker shapes (over their quota) right now.
    pub shaped_isus: u64,
    /// The worker's copy of the placement map.
    pub map_version: u64,
}

/// A percentile read from a histogram: a bucket bound, or beyond the last finite bound.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Latency {
    /// At most this many milliseconds (the bucket's upper bound).
    Millis(f64),
    /// Beyond the histogram's last finite bucket bound (`above_millis`): slower than it
    /// measures.
    BeyondHistogram { above_millis: f64 },
}

impl Latency {
    /// From a quantile in seconds as `prom_text::quantile_between` gives it (infinite: the
    /// `+Inf` bucket, beyond `last_bound` seconds).
    pub fn from_seconds(seconds: f64, last_bound: f64) -> Latency {
        match seconds.is_finite() {
            true => Latency::Millis(seconds * 1000.0),
            false => Latency::BeyondHistogram {
                above_millis: last_bound * 1000.0,
            },
        }
    }
}

impl std::fmt::Display for Latency {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Latency::Millis(millis) => write!(formatter, "{millis:.1}"),
            Latency::BeyondHistogram { above_millis } => write!(formatter, ">{above_millis:.0}"),
        }
    }
}

/// A migration not finished yet, with the cells by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationInProgress {
    pub id: u64,
    pub subject: Subject,
    pub from: String,
    pub to: String,
    pub phase: Phase,
}

/// Answer of [`super::COORDINATOR_PLACEMENT`]: the map and the migrations not finished yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementAnswer {
    pub map: crate::placement_map::PlacementMap,
    pub slot_counts: Vec<usize>,
    pub migrations: Vec<crate::migration::Migration>,
}

/// Body of [`super::COORDINATOR_MIGRATE`]: exactly one of `slot` (two hex digits) and `isu`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrateRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isu: Option<String>,
    pub to: String,
}

/// Body of [`super::COORDINATOR_DRAIN`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainRequest {
    pub cell: String,
}

/// What one migration did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationReport {
    pub id: u64,
    /// `slot 0b` or `ISU <uuid>`.
    pub subject: String,
    pub from: String,
    pub to: String,
    pub isus: usize,
    pub conditions: usize,
    /// From the plan to the flip (the forget follows after the grace period).
    pub millis: u64,
    pub map_version: u64,
}

/// Answer of `migrate`, `drain` and `rebalance`, on success and on failure (400: refused,
/// 409: an earlier migration of the slot is unfinished, 503: a worker failed and the
/// migration was rolled back): the migrations that flipped before the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellsAnswer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub migrations: Vec<MigrationReport>,
    /// Absent only in an answer refused before the map was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_version: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_latency_beyond_the_histogram_is_not_a_number_in_json() {
        let beyond = Latency::from_seconds(f64::INFINITY, 2.5);
        assert_eq!(beyond, Latency::BeyondHistogram { above_millis: 2500.0 });
        assert_eq!(Latency::from_seconds(0.0125, 2.5), Latency::Millis(12.5));
        let json = serde_json::to_string(&[Latency::Millis(12.5), beyond]).unwrap();
        assert_eq!(
            json,
            r#"[{"millis":12.5},{"beyond_histogram":{"above_millis":2500.0}}]"#
        );
        assert_eq!(Latency::Millis(12.5).to_string(), "12.5");
        assert_eq!(beyond.to_string(), ">2500");
    }

    #[test]
    fn a_migrate_request_names_one_subject() {
        let request = MigrateRequest {
            slot: Some("0b".into()),
            isu: None,
            to: "c".into(),
        };
        assert_eq!(serde_json::to_string(&request).unwrap(), r#"{"slot":"0b","to":"c"}"#);
    }

    #[test]
    fn a_refusal_without_a_map_version_reads() {
        let answer: CellsAnswer = serde_json::from_str(r#"{"error":"no cell named \"z\"","migrations":[]}"#).unwrap();
        assert_eq!(answer.map_version, None);
        assert_eq!(answer.error.as_deref(), Some("no cell named \"z\""));
    }
}
