//! The coordinator's whole router: every area's routes merged, with the request metrics
//! middleware.

use axum::middleware;
use axum::Router;

use super::{auth, cells, frontend, internal, isu, trend};
use crate::AppState;

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
