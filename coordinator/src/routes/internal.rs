//! Internal routes: the workers' latest-condition batches and the health check.

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use shared::protocol::{Health, LatestBatch, COORDINATOR_LATEST, HEALTH};

use super::{json, ClusterPeer};
use crate::error::ApiError;
use crate::AppState;

/// A batch holds at most one item per ISU.
const LATEST_BODY_LIMIT: usize = 64 << 20;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            COORDINATOR_LATEST,
            post(latest).layer(DefaultBodyLimit::max(LATEST_BODY_LIMIT)),
        )
        .route(HEALTH, get(health))
}

/// 412 tells the worker its batch belongs to another generation. Decoded with plain
/// `serde_json`: axum's `Json` tracks the path of every field for its error messages, and
/// that was the top of the coordinator's profile under device load (a batch every 10 ms per
/// worker, an item per changed ISU).
async fn latest(_: ClusterPeer, State(app): State<AppState>, body: Bytes) -> StatusCode {
    let Ok(batch) = serde_json::from_slice::<LatestBatch>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let generation = app.state.generation();
    if batch.generation != generation.id {
        return StatusCode::PRECONDITION_FAILED;
    }
    generation.apply_latest(&batch);
    StatusCode::OK
}

async fn health(State(app): State<AppState>) -> Result<Response, ApiError> {
    let ready = app.state.is_ready();
    let mut response = json(&Health {
        role: "coordinator".into(),
        ready,
        generation: app.state.generation().id,
        map_version: app.state.placement.map().version(),
    })?;
    if !ready {
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    Ok(response.into_response())
}
