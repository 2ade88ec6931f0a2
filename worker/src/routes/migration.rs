//! The migration routes called by the coordinator (cluster secret required): export,
//! import, activate and forget. The steps themselves are [`crate::migration`]'s.

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use node_http::ClusterPeer;
use shared::protocol::{
    ActivateIsus, ExportReport, ExportSubject, ForgetSubject, ImportChunk, WORKER_ACTIVATE, WORKER_EXPORT,
    WORKER_FORGET, WORKER_IMPORT,
};

use crate::error::WorkerError;
use crate::state::AppState;

/// An import chunk's body limit.
const IMPORT_BODY_LIMIT: usize = 64 << 20;

/// The coordinator's steps of a migration (fenced by the leader's term).
pub fn control() -> Router<AppState> {
    Router::new()
        .route(WORKER_EXPORT, post(export))
        .route(WORKER_ACTIVATE, post(activate))
        .route(WORKER_FORGET, post(forget))
}

/// An import chunk, from the migration's source worker.
pub fn router() -> Router<AppState> {
    Router::new().route(
        WORKER_IMPORT,
        post(import).layer(DefaultBodyLimit::max(IMPORT_BODY_LIMIT)),
    )
}

async fn export(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(request): Json<ExportSubject>,
) -> Result<Json<ExportReport>, WorkerError> {
    state.migrations().export(&request).await.map(Json)
}

async fn import(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(chunk): Json<ImportChunk>,
) -> Result<StatusCode, WorkerError> {
    state.write_path().import(&chunk).await?;
    Ok(StatusCode::OK)
}

async fn activate(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(request): Json<ActivateIsus>,
) -> Result<StatusCode, WorkerError> {
    state.migrations().activate(&request).await?;
    Ok(StatusCode::OK)
}

async fn forget(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(request): Json<ForgetSubject>,
) -> Result<StatusCode, WorkerError> {
    state.migrations().forget(request).await?;
    Ok(StatusCode::OK)
}
