//! The worker's router: one small router per area, merged here, plus the
//! request metrics middleware and the session extractor.

mod condition;
mod debug;
mod graph;
mod internal;

use std::time::Instant;

use axum::extract::{FromRequestParts, MatchedPath, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::error::WorkerError;
use crate::AppState;

pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(condition::router())
        .merge(graph::router())
        .merge(internal::router())
        .merge(debug::router())
        .route_layer(middleware::from_fn(track_request))
        .with_state(state)
}

/// The device server's router: `POST /api/condition/:uuid` and nothing else (no read,
/// internal, metrics or profiling route; any other path is 404, another method 405).
pub fn device_router(state: AppState) -> Router {
    Router::new()
        .merge(condition::device_router())
        .route_layer(middleware::from_fn(track_request))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found") })
        .with_state(state)
}

/// Records request count and latency by matched route and status.
async fn track_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_default();
    let response = next.run(request).await;
    shared::telemetry::record_request(route, response.status().as_u16(), started.elapsed());
    response
}

/// The signed-in user of a request. A session is valid when its cookie is
/// signed with the cluster key and its user exists: either the user was
/// synced here, or the session was created in the current generation (so the
/// user cannot have been erased by a reset since).
pub struct SignedIn(pub String);

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = WorkerError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let session = parts
            .headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .find_map(|value| state.session_key.from_cookie_header(value))
            .ok_or(WorkerError::NotSignedIn)?;
        let shard = state.store.shard();
        if session.generation == shard.generation || shard.has_user(&session.user) {
            Ok(SignedIn(session.user))
        } else {
            Err(WorkerError::NotSignedIn)
        }
    }
}

/// Requires the cluster secret (internal, metrics and profiling routes).
pub struct ClusterPeer;

impl FromRequestParts<AppState> for ClusterPeer {
    type Rejection = WorkerError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let secret_header = parts
            .headers
            .get(shared::protocol::SECRET_HEADER)
            .map(|value| value.as_bytes());
        let authorization = parts.headers.get(header::AUTHORIZATION).map(|value| value.as_bytes());
        if shared::protocol::carries_secret(&state.config.cluster_secret, secret_header, authorization) {
            Ok(ClusterPeer)
        } else {
            Err(WorkerError::Unauthorized)
        }
    }
}

/// First value of `name` in a raw query string, percent-decoded.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// A JSON response with the API's content type.
pub(crate) fn json_response(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, shared::error::APPLICATION_JSON)], body).into_response()
}
