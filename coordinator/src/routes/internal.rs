//! Internal routes: the workers' latest-condition batches and the health check.

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use node_http::ClusterPeer;
use shared::protocol::{
    decode_latest, Health, LatestBatch, LatestDecodeError, COORDINATOR_LATEST, HEALTH, LATEST_BINARY,
};

use super::json::json;
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
        .route(shared::protocol::COORDINATOR_REPLICA, get(replica))
}

/// `GET /internal/replica`: this replica's role, term, applied index and leader (404 for a
/// coordinator that is no replica).
async fn replica(_: ClusterPeer, State(app): State<AppState>) -> Response {
    match &app.replica {
        Some(replica) => axum::Json(replica.status()).into_response(),
        None => (StatusCode::NOT_FOUND, "this coordinator is not a replica").into_response(),
    }
}

/// 412 tells the worker its batch belongs to another generation. The binary form
/// ([`LATEST_BINARY`]) is read in place; JSON (`application/json`, or no `Content-Type`)
/// is decoded with plain `serde_json`: axum's `Json` tracks the path of every field for its
/// error messages, and that was the top of the coordinator's profile under device load. An
/// unknown version, or any other type, is 415, so a worker knows to send JSON.
async fn latest(_: ClusterPeer, State(app): State<AppState>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let content_type = headers.get(header::CONTENT_TYPE).map(|value| value.as_bytes());
    let json;
    let (generation, items) = match content_type {
        Some(binary) if binary.eq_ignore_ascii_case(LATEST_BINARY.as_bytes()) => match decode_latest(&body) {
            Ok(decoded) => decoded,
            Err(LatestDecodeError::Version(_)) => return StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Err(_) => return StatusCode::BAD_REQUEST,
        },
        Some(other) if !is_json(other) => return StatusCode::UNSUPPORTED_MEDIA_TYPE,
        _ => match serde_json::from_slice::<LatestBatch>(&body) {
            Ok(batch) => {
                json = batch;
                (json.generation, json.borrowed())
            }
            Err(_) => return StatusCode::BAD_REQUEST,
        },
    };
    let current = app.state.generation();
    if generation != current.id {
        return StatusCode::PRECONDITION_FAILED;
    }
    current.apply_latest(&items);
    StatusCode::OK
}

/// `application/json`, with parameters or not, in any case.
fn is_json(content_type: &[u8]) -> bool {
    let essence = content_type.split(|byte| *byte == b';').next().unwrap_or_default();
    essence.trim_ascii().eq_ignore_ascii_case(b"application/json")
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
