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

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;

use crate::cells::uuid_of;
use crate::state::AppState;

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
