//! The coordinator's router: one small router per area, merged here, plus the
//! request metrics middleware and the session and cluster-secret extractors.

mod auth;
mod cells;
mod frontend;
mod internal;
mod isu;
mod trend;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::error::ApiError;
use crate::AppState;

/// The cluster-secret guard of internal, metrics and profiling routes.
pub use node_http::ClusterPeer;

pub fn router(state: AppState) -> anyhow::Result<Router> {
    Ok(Router::new()
        .merge(auth::router())
        .merge(isu::router())
        .merge(trend::router())
        .merge(internal::router())
        .merge(cells::router())
        .merge(node_http::debug_router())
        .merge(frontend::router(state.config.static_dir.as_deref())?)
        .route_layer(middleware::from_fn(node_http::track_request))
        .with_state(state))
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

/// A JSON response with the API's content type.
pub(crate) fn json_response(body: impl Into<axum::body::Body>) -> Response {
    ([(header::CONTENT_TYPE, shared::error::APPLICATION_JSON)], body.into()).into_response()
}

/// Serialises `value` as a JSON response.
pub(crate) fn json<T: serde::Serialize>(value: &T) -> Result<Response, ApiError> {
    let body = serde_json::to_vec(value).map_err(|error| ApiError::Internal(error.to_string()))?;
    Ok(json_response(body))
}
