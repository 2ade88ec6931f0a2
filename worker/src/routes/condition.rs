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
use shared::ingest::{decode_batch, validate_batch, BatchError, CONDITION_BODY_LIMIT};

use super::{json_response, query_param, SignedIn};
use crate::error::WorkerError;
use crate::ingest::{Route, ShapedBatch};
use crate::state::AppState;
use crate::store::{NewCondition, PostError, Shard};

/// The stored-conditions counter, looked up once (after the recorder is installed: the
/// first device post comes after the node's start), not at every batch.
static CONDITIONS_STORED: std::sync::LazyLock<metrics::Counter> =
    std::sync::LazyLock::new(|| metrics::counter!(shared::telemetry::CONDITIONS_STORED));

/// The limit of one condition page.
const PAGE_SIZE: usize = 20;

/// The route of both: reads (behind the public router) and device posts (also the device
/// server's label in the request metrics).
pub(crate) const CONDITION_ROUTE: &str = "/api/condition/{uuid}";

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
    refuse_shaped_early(&state, &uuid)?;
    let body = Bytes::from_request(request, &state).await;
    let body = body.map_err(|rejection: BytesRejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => WorkerError::PayloadTooLarge(messages::PAYLOAD_TOO_LARGE),
        _ => WorkerError::BadRequest(messages::BAD_REQUEST_BODY),
    })?;
    store_posted(&state, uuid, &body).await
}

/// A shaped ISU meeting a full shaping lane is refused before its body is read.
/// (The lane is nearly always empty: one atomic load, the sketch only when it is full.)
pub(crate) fn refuse_shaped_early(state: &AppState, uuid: &str) -> Result<(), WorkerError> {
    if state.ingest.shaping_full() && state.ingest.is_shaped(uuid) {
        return Err(state.ingest.refuse_shaped());
    }
    Ok(())
}

/// A posted batch's body (read within [`CONDITION_BODY_LIMIT`]) decoded, checked and stored
/// through the ISU's lane, or shaped: the device's answer, on either server.
pub(crate) async fn store_posted(state: &AppState, uuid: String, body: &[u8]) -> Result<StatusCode, WorkerError> {
    let mut buffer = body.to_vec();
    let posted = decode_batch(&mut buffer).map_err(batch_error)?;
    let shard = state.store.shard();
    if shard.isu(&uuid).is_none() {
        return Err(WorkerError::IsuNotFound);
    }
    let batch: Vec<NewCondition<'_>> = validate_batch(&posted)
        .map_err(batch_error)?
        .into_iter()
        .map(|condition| NewCondition {
            timestamp: condition.timestamp,
            flags: condition.flags,
            message: condition.message,
        })
        .collect();
    match state.ingest.route(&uuid, batch.len()) {
        Route::Lane(lane) => {
            let _inside = state.ingest.enter(lane, &uuid).await?;
            state
                .ingest
                .guarded(&uuid, store_batch(state, &shard, &uuid, &batch))
                .await?;
        }
        Route::Shaped => {
            // Over its quota (or quarantined): logged and acknowledged now, stored when
            // the lanes have room; 429 when the shaping lane is full.
            let place = state.ingest.reserve_shaping(batch.len())?;
            state.journal.post(shard.generation, &uuid, &batch).await?;
            state.exports.forward(&state.cells, &shard, &uuid, &batch).await?;
            let conditions = batch.iter().map(NewCondition::to_wire).collect();
            state.ingest.shape(
                place,
                ShapedBatch {
                    generation: shard.generation,
                    uuid,
                    conditions,
                },
            );
        }
    }
    Ok(StatusCode::ACCEPTED)
}

/// Stores a batch (inside its lane): in memory, then in the log, then at a migration's
/// target; the device's 202 follows.
async fn store_batch(
    state: &AppState,
    shard: &Shard,
    uuid: &str,
    batch: &[NewCondition<'_>],
) -> Result<(), WorkerError> {
    crate::ingest::poison(uuid).await;
    match shard.post(uuid, batch) {
        Ok(inserted) => {
            CONDITIONS_STORED.increment(inserted as u64);
            if inserted > 0 {
                // Acknowledged only once logged (a repeat is already in the log).
                state.journal.post(shard.generation, uuid, batch).await?;
            }
            // During a migration of this ISU, acknowledged only once its target has it too.
            state.exports.forward(&state.cells, shard, uuid, batch).await
        }
        // Rolled back between the check and the insert.
        Err(PostError::UnknownIsu) => Err(WorkerError::IsuNotFound),
    }
}

fn batch_error(error: BatchError) -> WorkerError {
    match error {
        BatchError::TooManyConditions => WorkerError::PayloadTooLarge(messages::TOO_MANY_CONDITIONS),
        BatchError::Undecodable | BatchError::Empty | BatchError::InvalidCondition | BatchError::MessageTooLong => {
            WorkerError::BadRequest(messages::BAD_REQUEST_BODY)
        }
    }
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
