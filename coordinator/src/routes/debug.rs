//! `/metrics` (Prometheus text) and `/debug/pprof/profile` (cluster secret required).

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use shared::protocol::{METRICS, PPROF_LAST, PPROF_PROFILE};

use super::ClusterPeer;
use crate::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(METRICS, get(metrics))
        .route(PPROF_PROFILE, get(profile))
        .route(PPROF_LAST, get(last_profile))
}

async fn metrics(_: ClusterPeer, State(app): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        shared::telemetry::render_metrics(&app.metrics),
    )
        .into_response()
}

async fn profile(_: ClusterPeer, RawQuery(query): RawQuery) -> Response {
    let reply = shared::telemetry::profile_from_query(query.as_deref()).await;
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, reply.content_type)], reply.body).into_response()
}

async fn last_profile(_: ClusterPeer, RawQuery(query): RawQuery) -> Response {
    let reply = shared::telemetry::last_profile_from_query(query.as_deref());
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, reply.content_type)], reply.body).into_response()
}
