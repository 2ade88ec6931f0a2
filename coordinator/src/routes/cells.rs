//! The cells API (internal, cluster secret required): the placement map and the operations
//! that move ISUs between cells. `isuctl cells` is its command-line front; the bodies are
//! `shared::protocol::cells`.
//!
//! - `GET  /internal/placement`: the map and the migrations in progress;
//! - `GET  /internal/cells[?seconds=S]`: per cell, the map's share and what the cell did over
//!   S seconds (two scrapes of its `/metrics`), and the migrations in progress (JSON);
//! - `POST /internal/cells/migrate` `{"slot": "0b", "to": "c"}` or `{"isu": UUID, "to": "c"}`;
//! - `POST /internal/cells/drain` `{"cell": "a"}`: every slot and pin of the cell elsewhere;
//! - `POST /internal/cells/rebalance` `{}`: the fewest slot moves that even out every cell.
//!
//! Each answers once its migrations flipped: `{"migrations": [...], "map_version": N}`, or
//! an error `{"error": "...", "migrations": [what moved before it]}` (400: refused, 503: a
//! worker failed and the migration was rolled back).

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use shared::migration::Subject;
use shared::placement_map::CellId;
use shared::protocol::cells::{
    CellFigures, CellSummary, CellsAnswer, CellsSummary, DrainRequest, Latency, MigrateRequest, MigrationInProgress,
    MigrationReport, PlacementAnswer,
};
use shared::protocol::{
    COORDINATOR_CELLS, COORDINATOR_DRAIN, COORDINATOR_MIGRATE, COORDINATOR_PLACEMENT, COORDINATOR_REBALANCE,
};

use super::ClusterPeer;
use crate::state::migration::CellsError;
use crate::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(COORDINATOR_PLACEMENT, get(placement))
        .route(COORDINATOR_CELLS, get(summary))
        .route(COORDINATOR_MIGRATE, post(migrate))
        .route(COORDINATOR_DRAIN, post(drain))
        .route(COORDINATOR_REBALANCE, post(rebalance))
}

async fn placement(_: ClusterPeer, State(app): State<AppState>) -> Response {
    let map = app.state.placement.map();
    let migrations = app.state.placement.migrations.lock().values().cloned().collect();
    Json(PlacementAnswer {
        slot_counts: map.slot_counts(),
        map: (*map).clone(),
        migrations,
    })
    .into_response()
}

#[derive(Deserialize)]
struct SummaryQuery {
    /// Seconds between the two scrapes the rates and percentiles are taken from.
    seconds: Option<f64>,
}

/// Public API routes only: the scrapes and the cluster's own calls are not the cell's load.
fn public_route(labels: &str) -> bool {
    shared::prom_text::label(labels, "route").is_some_and(|route| route.starts_with("/api/"))
}

/// A histogram's quantile between two scrapes, as a [`Latency`] (`None`: no observation).
fn latency_between(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<Latency> {
    let seconds = shared::prom_text::quantile_between(before, after, q)?;
    let last_bound = after
        .iter()
        .map(|(bound, _)| *bound)
        .filter(|bound| bound.is_finite())
        .fold(0.0, f64::max);
    Some(Latency::from_seconds(seconds, last_bound))
}

/// A counter or gauge as a whole count (an empty sum is `-0.0`, which printed as `-0`).
fn count(value: f64) -> u64 {
    value.max(0.0).round() as u64
}

fn figures(before: &str, after: &str, seconds: f64, map_version: u64) -> CellFigures {
    use shared::prom_text::{buckets, label, parse, sum};
    let (before, after) = (parse(before), parse(after));
    let delta = |keep: &dyn Fn(&str) -> bool| {
        sum(&after, "http_requests_total", keep) - sum(&before, "http_requests_total", keep)
    };
    let requests = delta(&public_route);
    let errors = delta(&|labels: &str| {
        public_route(labels) && label(labels, "status").is_some_and(|status| status.starts_with('5'))
    });
    let latency =
        |samples: &[shared::prom_text::Sample]| buckets(samples, "http_request_duration_seconds", public_route);
    let lag = |samples: &[shared::prom_text::Sample]| buckets(samples, "latest_push_lag_seconds", |_| true);
    CellFigures {
        conditions: count(sum(&after, "conditions_stored_total", |_| true)),
        requests_per_second: requests.max(0.0) / seconds,
        error_ratio: (requests > 0.0).then(|| errors / requests),
        p99: latency_between(&latency(&before), &latency(&after), 0.99),
        push_lag_p99: latency_between(&lag(&before), &lag(&after), 0.99),
        shaped_isus: count(sum(&after, "ingest_shaped_isus", |_| true)),
        map_version,
    }
}

/// Scrapes every worker's `/metrics` and `/healthz`.
async fn scrape(app: &AppState) -> Vec<Option<(String, u64)>> {
    let workers = &app.state.workers;
    let scrapes = workers.cells().map(|cell| async move {
        let (metrics, health) = tokio::join!(workers.metrics(cell), workers.health(cell));
        Some((metrics.ok()?, health.ok()?.map_version))
    });
    futures_util::future::join_all(scrapes).await
}

/// `GET /internal/cells[?seconds=S]`: per cell — slots, pins, ISUs, conditions, public
/// requests a second, their error ratio (5xx) and p99, the latest push's p99 lag, shaped
/// ISUs and the worker's map version — from two scrapes S seconds apart (default 1, taken
/// between 0.1 and 30; not a finite number: 400), and the migrations in progress
/// ([`CellsSummary`], JSON; `isuctl cells status` renders it as a table).
async fn summary(
    _: ClusterPeer,
    State(app): State<AppState>,
    Query(query): Query<SummaryQuery>,
) -> Result<Json<CellsSummary>, (StatusCode, &'static str)> {
    let seconds = match query.seconds {
        None => 1.0,
        Some(seconds) if seconds.is_finite() => seconds.clamp(0.1, 30.0),
        Some(_) => return Err((StatusCode::BAD_REQUEST, "bad format: seconds")),
    };
    let before = scrape(&app).await;
    tokio::time::sleep(std::time::Duration::from_secs_f64(seconds)).await;
    let after = scrape(&app).await;
    let map = app.state.placement.map();
    let counts = map.slot_counts();
    let isus = app.state.generation().isus_per_cell(&map);
    let cells = map
        .cells()
        .iter()
        .enumerate()
        .map(|(id, cell)| {
            let figures = match (before.get(id).cloned().flatten(), after.get(id).cloned().flatten()) {
                (Some((earlier, _)), Some((later, version))) => Some(figures(&earlier, &later, seconds, version)),
                _ => None,
            };
            CellSummary {
                name: cell.name.clone(),
                slots: counts[id],
                pins: map.pins_of(id as CellId).len(),
                isus: isus[id],
                internal_url: cell.internal_url.clone(),
                device_url: cell.device_url.clone(),
                figures,
            }
        })
        .collect();
    let name = |id: CellId| map.cells()[usize::from(id)].name.clone();
    let migrations = app
        .state
        .placement
        .migrations
        .lock()
        .values()
        .map(|migration| MigrationInProgress {
            id: migration.id,
            subject: migration.subject.clone(),
            from: name(migration.from),
            to: name(migration.to),
            phase: migration.phase,
        })
        .collect();
    Ok(Json(CellsSummary {
        map_version: map.version(),
        pins: map.pins().len(),
        seconds,
        cells,
        migrations,
        router: app.state.placement.router_copy(),
    }))
}

fn refused(message: impl Into<String>) -> Response {
    let body = CellsAnswer {
        error: Some(message.into()),
        migrations: Vec::new(),
        map_version: None,
    };
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

fn cell_named(app: &AppState, name: &str) -> Result<CellId, String> {
    app.state
        .placement
        .map()
        .cell_id(name)
        .ok_or_else(|| format!("no cell named {name:?}"))
}

fn answer(app: &AppState, done: Vec<MigrationReport>, error: Option<CellsError>) -> Response {
    let map_version = Some(app.state.placement.map().version());
    match error {
        None => Json(CellsAnswer {
            error: None,
            migrations: done,
            map_version,
        })
        .into_response(),
        Some(error) => {
            let status = match error {
                CellsError::Refused(_) | CellsError::Placement(_) | CellsError::Machine(_) => StatusCode::BAD_REQUEST,
                CellsError::Busy(_) => StatusCode::CONFLICT,
                CellsError::RolledBack(_) => StatusCode::SERVICE_UNAVAILABLE,
                CellsError::Log(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            tracing::warn!(%error, "cells operation failed");
            let body = CellsAnswer {
                error: Some(error.to_string()),
                migrations: done,
                map_version,
            };
            (status, Json(body)).into_response()
        }
    }
}

async fn migrate(_: ClusterPeer, State(app): State<AppState>, Json(request): Json<MigrateRequest>) -> Response {
    run_migrate(app, request).await
}

/// `migrate`'s work, which the operator console's action runs too.
pub(super) async fn run_migrate(app: AppState, request: MigrateRequest) -> Response {
    let to = match cell_named(&app, &request.to) {
        Ok(to) => to,
        Err(message) => return refused(message),
    };
    let subject = match (request.slot, request.isu) {
        (Some(slot), None) => match u8::from_str_radix(slot.trim_start_matches("0x"), 16) {
            Ok(parsed) if slot.trim_start_matches("0x").len() <= 2 => Subject::Slot(parsed),
            _ => return refused(format!("slot must be two hex digits (00 to ff), not {slot:?}")),
        },
        (None, Some(uuid)) => {
            if !app.state.generation().by_uuid.contains_key(uuid.as_str()) {
                return refused(format!("no registered ISU {uuid}"));
            }
            Subject::Pin(uuid)
        }
        _ => return refused("give either \"slot\" or \"isu\""),
    };
    let (done, error) = match app.state.migrate(subject, to).await {
        Ok(report) => (report.into_iter().collect(), None),
        Err(error) => (Vec::new(), Some(error)),
    };
    answer(&app, done, error)
}

async fn drain(_: ClusterPeer, State(app): State<AppState>, Json(request): Json<DrainRequest>) -> Response {
    run_drain(app, request).await
}

/// `drain`'s work, which the operator console's action runs too.
pub(super) async fn run_drain(app: AppState, request: DrainRequest) -> Response {
    let cell = match cell_named(&app, &request.cell) {
        Ok(cell) => cell,
        Err(message) => return refused(message),
    };
    let map = app.state.placement.map();
    let slots = match map.drain_plan(cell) {
        Ok(slots) => slots,
        Err(error) => return refused(error.to_string()),
    };
    // Pins go to the other cells in turn.
    let others: Vec<CellId> = (0..map.cells().len() as CellId)
        .filter(|other| *other != cell)
        .collect();
    let pins: Vec<(String, CellId)> = map
        .pins_of(cell)
        .into_iter()
        .enumerate()
        .map(|(index, uuid)| (uuid.to_owned(), others[index % others.len()]))
        .collect();
    let (done, error) = app.state.migrate_plan(slots, pins).await;
    answer(&app, done, error)
}

async fn rebalance(_: ClusterPeer, State(app): State<AppState>) -> Response {
    let map = app.state.placement.map();
    let all: Vec<CellId> = (0..map.cells().len() as CellId).collect();
    let slots = match map.rebalance_plan(&all) {
        Ok(slots) => slots,
        Err(error) => return refused(error.to_string()),
    };
    let (done, error) = app.state.migrate_plan(slots, Vec::new()).await;
    answer(&app, done, error)
}
