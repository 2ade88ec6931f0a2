//! `GET /api/trend`: public, answered from the cached trend of the current generation.

use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::Router;

use super::json_response;
use crate::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/trend", get(trend))
}

async fn trend(State(app): State<AppState>) -> Response {
    json_response(app.state.generation().trend_json())
}
