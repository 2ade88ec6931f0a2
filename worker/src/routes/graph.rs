//! `GET /api/isu/:uuid/graph`: 24 hourly data points from the hour of `datetime`.

use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use shared::error as messages;
use shared::graph::{DataPoint, HOUR};

use super::common::{json_response, query_param, SignedIn};
use crate::error::WorkerError;
use crate::state::AppState;

const MAX_ABS_DATETIME: i64 = 1 << 60;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/isu/{uuid}/graph", get(graph))
}

#[derive(Serialize)]
struct GraphPoint<'a> {
    data: Option<DataPoint>,
    start_at: i64,
    end_at: i64,
    condition_timestamps: &'a [i64],
}

async fn graph(
    user: SignedIn,
    State(state): State<AppState>,
    Path(uuid): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, WorkerError> {
    if state.config.fault_graph_500 {
        return Err(WorkerError::Internal(
            "graph reads fail on purpose (--fault-graph-500)".into(),
        ));
    }
    let datetime = query_param(query.as_deref(), "datetime")
        .filter(|value| !value.is_empty())
        .ok_or(WorkerError::BadRequest(messages::MISSING_DATETIME))?
        .parse::<i64>()
        .map_err(|_| WorkerError::BadRequest(messages::BAD_FORMAT_DATETIME))?;
    // Far beyond any real clock; refusing keeps the hour arithmetic free of overflow.
    if !(-MAX_ABS_DATETIME..=MAX_ABS_DATETIME).contains(&datetime) {
        return Err(WorkerError::BadRequest(messages::BAD_FORMAT_DATETIME));
    }
    let shard = state.store.shard();
    let isu = shard.owned_isu(&uuid, &user.0).ok_or(WorkerError::IsuNotFound)?;
    let hours = isu.graph(datetime);
    let points: Vec<GraphPoint<'_>> = hours
        .iter()
        .map(|hour| GraphPoint {
            data: hour.data_point(),
            start_at: hour.start_at,
            end_at: hour.start_at + HOUR,
            condition_timestamps: &hour.timestamps,
        })
        .collect();
    let body = serde_json::to_vec(&points).map_err(|error| WorkerError::Internal(error.to_string()))?;
    Ok(json_response(body))
}
