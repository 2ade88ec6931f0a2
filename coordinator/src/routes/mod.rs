//! The coordinator's router: one small router per area, merged here, plus the
//! request metrics middleware and the session and cluster-secret extractors.

mod auth;
mod debug;
mod frontend;
mod internal;
mod isu;
mod trend;

use std::time::Instant;

use axum::extract::{FromRequestParts, MatchedPath, Request};
use axum::http::header;
use axum::http::request::Parts;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::error::ApiError;
use crate::AppState;

pub fn router(state: AppState) -> anyhow::Result<Router> {
    Ok(Router::new()
        .merge(auth::router())
        .merge(isu::router())
        .merge(trend::router())
        .merge(internal::router())
        .merge(debug::router())
        .merge(frontend::router(state.config.static_dir.as_deref())?)
        .route_layer(middleware::from_fn(track_request))
        .with_state(state))
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

/// The signed-in user: a valid session cookie whose user exists now.
pub struct SignedIn(pub String);

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Self::Rejection> {
        let session = parts
            .headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .find_map(|value| app.state.session_key.from_cookie_header(value))
            .ok_or(ApiError::NotSignedIn)?;
        if app.state.generation().has_user(&session.user) {
            Ok(SignedIn(session.user))
        } else {
            Err(ApiError::NotSignedIn)
        }
    }
}

/// Requires the cluster secret (internal, metrics and profiling routes).
pub struct ClusterPeer;

impl FromRequestParts<AppState> for ClusterPeer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Self::Rejection> {
        let secret_header = parts
            .headers
            .get(shared::protocol::SECRET_HEADER)
            .map(|value| value.as_bytes());
        let authorization = parts.headers.get(header::AUTHORIZATION).map(|value| value.as_bytes());
        if shared::protocol::carries_secret(&app.config.cluster_secret, secret_header, authorization) {
            Ok(ClusterPeer)
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}

/// A JSON response with the API's content type.
pub(crate) fn json_response(body: impl Into<axum::body::Body>) -> Response {
    ([(header::CONTENT_TYPE, shared::error::APPLICATION_JSON)], body.into()).into_response()
}

/// Serialises `value` as a JSON response.
pub(crate) fn json<T: serde::Serialize>(value: &T) -> Result<Response, ApiError> {
    let body = serde_json::to_vec(value).map_err(|error| ApiError::Internal(error.to_string()))?;
    Ok(json_response(body))
}
