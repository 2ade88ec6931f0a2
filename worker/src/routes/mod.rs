//! The worker's HTTP side, every handler of it: one small router per area, merged here with
//! the request metrics and the forwarding of per-ISU requests to their owner cell; the
//! device server's service ([`DeviceService`]). Handlers are thin: they extract, make one
//! call into the state (the store, the write path, the migration steps) and map its result.

mod common;
mod condition;
mod device;
mod graph;
mod internal;
mod migration;

pub use device::DeviceService;
pub use internal::ask_jia_again;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse as _, Response};
use axum::Router;
use node_http::ClusterPeer;

use crate::cells::uuid_of;
use crate::state::AppState;

pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(per_isu(state.clone(), condition::router().merge(graph::router())))
        .merge(fenced(state.clone(), internal::control().merge(migration::control())))
        .merge(internal::router())
        .merge(migration::router())
        .merge(node_http::debug_router())
        .route_layer(middleware::from_fn(node_http::track_request))
        .with_state(state)
}

/// The coordinator's control routes: a call of a deposed leader's term is refused (see
/// [`crate::fence`]).
fn fenced(state: AppState, routes: Router<AppState>) -> Router<AppState> {
    routes.route_layer(middleware::from_fn_with_state(state, fence_older_terms))
}

/// Middleware of the control routes: the cluster secret first (a term is taken only from a
/// peer), then the term.
async fn fence_older_terms(_: ClusterPeer, State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(value) = request.headers().get(crate::fence::TERM_HEADER) else {
        return next.run(request).await;
    };
    let Some(term) = value.to_str().ok().and_then(|text| text.parse::<u64>().ok()) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            format!("{} is not a term", crate::fence::TERM_HEADER),
        );
    };
    match state.fence.admit(term) {
        Ok(()) => next.run(request).await,
        Err(newest) => {
            metrics::counter!(crate::fence::FENCED_CALLS).increment(1);
            tracing::warn!(term, newest, path = %request.uri().path(), "a deposed leader's call refused");
            refuse(
                StatusCode::FORBIDDEN,
                format!("fenced: leader term {term} is older than term {newest}"),
            )
        }
    }
}

fn refuse(status: StatusCode, message: String) -> Response {
    (status, [(header::CONTENT_TYPE, shared::error::TEXT_PLAIN)], message).into_response()
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
