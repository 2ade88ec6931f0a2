//! The coordinator's whole router: every area's routes merged, with the request metrics
//! middleware.

use axum::middleware;
use axum::Router;

use super::{auth, cells, frontend, internal, isu, leader, ops, trend};
use crate::AppState;

pub fn router(state: AppState) -> anyhow::Result<Router> {
    let on_leader = middleware::from_fn_with_state(state.clone(), leader::on_leader);
    let raft = consensus::network::routes(state.replica.raft.clone(), &state.config.cluster_secret);
    let when_ready = middleware::from_fn_with_state(state.clone(), leader::when_ready);
    let public = Router::new()
        .merge(auth::router())
        .merge(auth::initialize_router().route_layer(on_leader.clone()))
        .merge(isu::router().route_layer(on_leader.clone()))
        .merge(trend::router())
        .merge(frontend::router(state.config.static_dir.as_deref())?)
        .route_layer(when_ready);
    let router = Router::new()
        .merge(public)
        .merge(internal::router())
        .merge(internal::members_router().route_layer(on_leader.clone()))
        .merge(cells::router().route_layer(on_leader))
        .merge(ops::router(&state)?)
        .merge(node_http::debug_router())
        .route_layer(middleware::from_fn(node_http::track_request))
        .with_state(state);
    Ok(router.merge(raft))
}
