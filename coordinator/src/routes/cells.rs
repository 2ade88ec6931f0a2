//! The cells API (internal, cluster secret required): the placement map and the operations
//! that move ISUs between cells. `scripts/cells` is its command-line front.
//!
//! - `GET  /internal/placement`: the map and the migrations in progress;
//! - `GET  /internal/cells`: the same as a text table (one line per cell);
//! - `POST /internal/cells/migrate` `{"slot": "0b", "to": "c"}` or `{"isu": UUID, "to": "c"}`;
//! - `POST /internal/cells/drain` `{"cell": "a"}`: every slot and pin of the cell elsewhere;
//! - `POST /internal/cells/rebalance` `{}`: the fewest slot moves that even out every cell.
//!
//! Each answers once its migrations flipped: `{"migrations": [...], "map_version": N}`, or
//! an error `{"error": "...", "migrations": [what moved before it]}` (400: refused, 503: a
//! worker failed and the migration was rolled back).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use shared::migration::Subject;
use shared::placement_map::CellId;
use shared::protocol::{
    COORDINATOR_CELLS, COORDINATOR_DRAIN, COORDINATOR_MIGRATE, COORDINATOR_PLACEMENT, COORDINATOR_REBALANCE,
};

use super::ClusterPeer;
use crate::state::migration::{CellsError, MigrationReport};
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
    let migrations: Vec<_> = app.state.placement.migrations.lock().values().cloned().collect();
    Json(json!({
        "map": &*map,
        "slot_counts": map.slot_counts(),
        "migrations": migrations,
    }))
    .into_response()
}

async fn summary(_: ClusterPeer, State(app): State<AppState>) -> String {
    let map = app.state.placement.map();
    let counts = map.slot_counts();
    let mut text = format!(
        "placement map version {} ({} cells, {} pins)\n{:<8} {:>5} {:>5}  {:<28} {}\n",
        map.version(),
        map.cells().len(),
        map.pins().len(),
        "CELL",
        "SLOTS",
        "PINS",
        "INTERNAL URL",
        "DEVICE URL"
    );
    for (id, cell) in map.cells().iter().enumerate() {
        text.push_str(&format!(
            "{:<8} {:>5} {:>5}  {:<28} {}\n",
            cell.name,
            counts[id],
            map.pins_of(id as CellId).len(),
            cell.internal_url,
            cell.device_url
        ));
    }
    for migration in app.state.placement.migrations.lock().values() {
        text.push_str(&format!(
            "migration {}: {} {} → {} ({:?})\n",
            migration.id,
            migration.subject,
            map.cells()[usize::from(migration.from)].name,
            map.cells()[usize::from(migration.to)].name,
            migration.phase
        ));
    }
    text
}

#[derive(Deserialize)]
struct MigrateRequest {
    slot: Option<String>,
    isu: Option<String>,
    to: String,
}

#[derive(Deserialize)]
struct DrainRequest {
    cell: String,
}

fn refused(message: impl Into<String>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "error": message.into(), "migrations": [] })),
    )
        .into_response()
}

fn cell_named(app: &AppState, name: &str) -> Result<CellId, String> {
    app.state
        .placement
        .map()
        .cell_id(name)
        .ok_or_else(|| format!("no cell named {name:?}"))
}

fn answer(app: &AppState, done: Vec<MigrationReport>, error: Option<CellsError>) -> Response {
    let map_version = app.state.placement.map().version();
    match error {
        None => Json(json!({ "migrations": done, "map_version": map_version })).into_response(),
        Some(error) => {
            let status = match error {
                CellsError::Refused(_) | CellsError::Placement(_) | CellsError::Machine(_) => StatusCode::BAD_REQUEST,
                CellsError::Busy(_) => StatusCode::CONFLICT,
                CellsError::RolledBack(_) => StatusCode::SERVICE_UNAVAILABLE,
                CellsError::Log(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            tracing::warn!(%error, "cells operation failed");
            let body = json!({ "error": error.to_string(), "migrations": done, "map_version": map_version });
            (status, Json(body)).into_response()
        }
    }
}

async fn migrate(_: ClusterPeer, State(app): State<AppState>, Json(request): Json<MigrateRequest>) -> Response {
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
            if !app.state.generation().by_uuid.contains_key(&uuid) {
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
