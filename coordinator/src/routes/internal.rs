//! Internal routes: the workers' latest-condition batches and the health check.

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
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

/// 412 tells the worker its batch belongs to another generation.
async fn latest(_: ClusterPeer, State(app): State<AppState>, Json(batch): Json<LatestBatch>) -> StatusCode {
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
    })?;
    if !ready {
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    Ok(response.into_response())
}
