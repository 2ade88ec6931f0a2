//! The worker's router: one small router per area, merged here, plus the
//! request metrics middleware and the session extractor.

mod condition;
mod device;
mod graph;
mod internal;
mod migration;

pub use device::DeviceService;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::cells::uuid_of;
use crate::error::WorkerError;
use crate::state::AppState;

/// The cluster-secret guard of internal, metrics and profiling routes.
pub use node_http::ClusterPeer;

pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(per_isu(state.clone(), condition::router().merge(graph::router())))
        .merge(internal::router())
        .merge(migration::router())
        .merge(node_http::debug_router())
        .route_layer(middleware::from_fn(node_http::track_request))
        .with_state(state)
}

/// Per-ISU routes: a request for an ISU another cell owns is forwarded there.
fn per_isu(state: AppState, routes: Router<AppState>) -> Router<AppState> {
    routes.route_layer(middleware::from_fn_with_state(state, forward_foreign))
}

/// Middleware of the per-ISU routes: requests for another cell's ISU go to that cell.
async fn forward_foreign(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match state.cells.foreign_owner(uuid_of(request.uri().path()), &request) {
        Some(base) => state.cells.forward_to_owner(&base, request).await,
        None => next.run(request).await,
    }
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
