//! `POST /api/condition/:uuid` (device ingestion) and `GET /api/condition/:uuid`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, RawQuery, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use shared::domain::{ConditionView, LevelSet};
use shared::error as messages;
use shared::ingest::{decode_batch, CONDITION_BODY_LIMIT};

use super::common::{json_response, query_param, SignedIn};
use crate::error::WorkerError;
use crate::state::AppState;

/// The limit of one condition page.
const PAGE_SIZE: usize = 20;

/// The route of both: reads (behind the public router) and device posts (also the device
/// server's label in the request metrics).
pub(super) const CONDITION_ROUTE: &str = "/api/condition/{uuid}";

pub fn router() -> Router<AppState> {
    Router::new().route(
        CONDITION_ROUTE,
        get(list_conditions)
            .post(post_conditions)
            .layer(DefaultBodyLimit::max(CONDITION_BODY_LIMIT)),
    )
}

/// Stores a batch, all or nothing: 400 for an undecodable or empty body,
/// 413 for a body or batch over its limit, 404 for an unknown ISU, 400 when any
/// condition string or message is invalid.
async fn post_conditions(
    State(state): State<AppState>,
    Path(uuid): Path<String>,
    request: Request,
) -> Result<StatusCode, WorkerError> {
    state.write_path().refuse_shaped_early(&uuid)?;
    let body = Bytes::from_request(request, &state).await;
    let body = body.map_err(|rejection: BytesRejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => WorkerError::PayloadTooLarge(messages::PAYLOAD_TOO_LARGE),
        _ => WorkerError::BadRequest(messages::BAD_REQUEST_BODY),
    })?;
    store_body(&state, uuid, &body).await
}

/// A posted batch's body (read within [`CONDITION_BODY_LIMIT`]) decoded and given to the
/// write path: the device's answer, on either server.
pub(super) async fn store_body(state: &AppState, uuid: String, body: &[u8]) -> Result<StatusCode, WorkerError> {
    if state.config.fault_graph_500 {
        return Err(WorkerError::Internal(
            "condition posts fail on purpose (--fault-graph-500)".into(),
        ));
    }
    let mut buffer = body.to_vec();
    let posted = decode_batch(&mut buffer)?;
    state.write_path().post(uuid, &posted).await?;
    Ok(StatusCode::ACCEPTED)
}

/// Validation order: `end_time`, `condition_level`, `start_time`, then ownership.
async fn list_conditions(
    user: SignedIn,
    State(state): State<AppState>,
    Path(uuid): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, WorkerError> {
    let query = query.as_deref();
    let end_time = query_param(query, "end_time")
        .and_then(|value| value.parse::<i64>().ok())
        .ok_or(WorkerError::BadRequest(messages::BAD_FORMAT_END_TIME))?;
    let levels = query_param(query, "condition_level")
        .filter(|value| !value.is_empty())
        .ok_or(WorkerError::BadRequest(messages::MISSING_CONDITION_LEVEL))?;
    let start_time = match query_param(query, "start_time").filter(|value| !value.is_empty()) {
        None => i64::MIN,
        Some(value) => value
            .parse::<i64>()
            .map_err(|_| WorkerError::BadRequest(messages::BAD_FORMAT_START_TIME))?,
    };
    let shard = state.store.shard();
    let isu = shard.owned_isu(&uuid, &user.0).ok_or(WorkerError::IsuNotFound)?;
    let conditions = isu.conditions_desc(start_time, end_time, LevelSet::parse(&levels), PAGE_SIZE);
    let body = {
        let messages = shard.messages.view();
        let items: Vec<ConditionView<'_>> = conditions
            .iter()
            .map(|condition| {
                let message = messages.text(condition.message);
                ConditionView::new(&isu.uuid, &isu.name, condition.timestamp, condition.flags, message)
            })
            .collect();
        serde_json::to_vec(&items)
    };
    Ok(json_response(
        body.map_err(|error| WorkerError::Internal(error.to_string()))?,
    ))
}
