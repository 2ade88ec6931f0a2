//! Internal routes called by the coordinator (cluster secret required):
//! reset, user sync, provisional registration, its JIA activation (and an older
//! coordinator's acceptance), publish and rollback, the registrations held provisionally.

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use node_http::ClusterPeer;
use shared::placement_map::PlacementMap;
use shared::protocol::{
    AcceptIsu, Activation, Health, JiaActivateIsu, ProvisionalIsu, PublishIsu, ResendLatest, ResetShard, RollbackIsu,
    UserSync, HEALTH, WORKER_ACCEPT, WORKER_JIA_ACTIVATE, WORKER_PLACEMENT, WORKER_PROVISIONAL, WORKER_PUBLISH,
    WORKER_RESEND_LATEST, WORKER_RESET, WORKER_ROLLBACK, WORKER_UNPUBLISHED, WORKER_USERS,
};

use super::common::json_response;
use crate::error::WorkerError;
use crate::state::AppState;
use crate::store::{Provisional, ProvisionalError, Shard};

/// An acceptance's record carries the ISU's icon (base64) when the coordinator keeps no icon
/// store: up to the 16 MiB the coordinator takes, and some.
const ACCEPT_BODY_LIMIT: usize = 32 << 20;

/// A reset carries a whole dataset shard.
const RESET_BODY_LIMIT: usize = 1 << 30;

/// The calls that change the worker (fenced by the leader's term).
pub fn control() -> Router<AppState> {
    Router::new()
        .route(WORKER_RESET, post(reset).layer(DefaultBodyLimit::max(RESET_BODY_LIMIT)))
        .route(WORKER_USERS, post(sync_users))
        .route(WORKER_PROVISIONAL, post(provisional))
        .route(
            WORKER_JIA_ACTIVATE,
            post(jia_activate).layer(DefaultBodyLimit::max(ACCEPT_BODY_LIMIT)),
        )
        .route(WORKER_PUBLISH, post(publish))
        .route(WORKER_ROLLBACK, post(rollback))
        .route(WORKER_UNPUBLISHED, post(unpublished))
        .route(WORKER_PLACEMENT, post(placement))
}

/// The reads and the resync of the latest conditions (any replica calls them), and JIA's
/// acceptance: a fact about a registration its leader started, kept even when that leader
/// was deposed while JIA answered (its successor's sweep finishes the registration with it
/// instead of rolling back the posts this worker took).
pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            WORKER_ACCEPT,
            post(accept).layer(DefaultBodyLimit::max(ACCEPT_BODY_LIMIT)),
        )
        .route(WORKER_RESEND_LATEST, post(resend_latest))
        .route(shared::protocol::WORKER_LATEST_ALL, post(latest_all))
        .route(HEALTH, get(health))
}

async fn reset(_: ClusterPeer, State(state): State<AppState>, Json(reset): Json<ResetShard>) -> StatusCode {
    let isus = reset.isus.len();
    let shard =
        tokio::task::spawn_blocking(move || Shard::from_reset(reset.generation, &reset.users, &reset.isus)).await;
    match shard {
        Ok(shard) => {
            tracing::info!(generation = shard.generation, isus, "shard reset");
            state.store.replace(shard);
            state.ingest.reset();
            // A fresh log: a snapshot of the new shard replaces the old file.
            if let Err(error) = state.journal.reset().await {
                tracing::error!(%error, "logging the reset failed");
                return StatusCode::INTERNAL_SERVER_ERROR;
            }
            StatusCode::OK
        }
        Err(error) => {
            tracing::error!(%error, "building the shard failed");
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

async fn sync_users(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(sync): Json<UserSync>,
) -> Result<StatusCode, WorkerError> {
    state
        .store
        .current(sync.generation)?
        .add_users(sync.users.iter().map(String::as_str));
    state.journal.users(sync.generation, &sync.users).await?;
    Ok(StatusCode::OK)
}

async fn provisional(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(isu): Json<ProvisionalIsu>,
) -> Result<StatusCode, WorkerError> {
    let status = match state.store.current(isu.generation)?.provisional(
        &isu.uuid,
        &isu.owner,
        &isu.name,
        isu.id,
        isu.request.as_deref(),
    ) {
        Ok(Provisional::Created) => StatusCode::CREATED,
        // A retried call whose first answer was lost. Logged again like a new one: the first
        // attempt's record may never have been written (its log write failed, or the call was
        // cut off while waiting for it), and a replayed repeat is again a harmless repeat.
        Ok(Provisional::Repeated) => StatusCode::OK,
        Err(ProvisionalError::AlreadyExists) => return Err(WorkerError::Conflict(shared::error::DUPLICATED_ISU)),
    };
    state.journal.provisional(&isu, true).await?;
    Ok(status)
}

/// Asks JIA to activate a provisional registration (a leader's control call: a deposed
/// leader's never reaches JIA) and keeps its answer with the registration, logged, before
/// answering: from then on the registration is finished whatever becomes of the leader.
async fn jia_activate(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(call): Json<JiaActivateIsu>,
) -> Result<Json<Activation>, WorkerError> {
    // Runs to its end even when the leader goes away meanwhile (its connection closes and
    // drops this handler): JIA may have started the device, and its answer is kept.
    tokio::spawn(activate_with_jia(state, call))
        .await
        .map_err(|error| WorkerError::Internal(error.to_string()))?
}

/// Why asking JIA failed: its log record of the ask, or JIA.
enum AskFailed {
    Log(shared::wal::WalError),
    Jia(crate::jia_client::ActivateError),
}

async fn activate_with_jia(state: AppState, call: JiaActivateIsu) -> Result<Json<Activation>, WorkerError> {
    use crate::jia_client::ActivateError;
    let shard = state.store.current(call.generation)?;
    let asked = shard
        .activate(&call, |first| {
            let (state, call) = (&state, &call);
            async move {
                // Logged before JIA is asked: a worker that dies before it has logged JIA's
                // answer holds the registration with the device JIA may have started posting
                // to, and asks again when it restarts (JIA answers a repeat alike).
                if first {
                    state.journal.asking(call).await.map_err(AskFailed::Log)?;
                }
                // Tests only: `jia-call-held=return(UUID/MILLIS)` holds the call before JIA is asked.
                node_http::hold_at("jia-call-held", &call.uuid).await;
                let answer = state
                    .jia
                    .activate(&call.jia_service_url, &call.target_base_url, &call.uuid)
                    .await
                    .map_err(AskFailed::Jia);
                // Tests only: `jia-answer-held=return(UUID/MILLIS)` holds JIA's answer before it is kept.
                node_http::hold_at("jia-answer-held", &call.uuid).await;
                answer
            }
        })
        .await
        .ok_or(WorkerError::IsuNotFound)?;
    match asked {
        Ok((character, asked_now)) => {
            if asked_now {
                state.journal.activated(&call, &character).await?;
            }
            Ok(Json(Activation::Activated { character }))
        }
        Err(AskFailed::Jia(ActivateError::Refused(status))) => Ok(Json(Activation::Refused {
            status: status.as_u16(),
        })),
        Err(AskFailed::Jia(error)) => {
            tracing::warn!(%error, uuid = %call.uuid, "asking JIA to activate an ISU failed");
            Err(WorkerError::Upstream(error.to_string()))
        }
        Err(AskFailed::Log(error)) => Err(error.into()),
    }
}

/// At the start: asks JIA again for each registration whose JIA call this worker started
/// and never logged an answer to (it died meanwhile, and the device JIA may have started
/// posts to it), so the leader's sweep can finish it instead of rolling it back after its
/// wait with what the device posted (nemesis seeds 4711 and 314159).
pub async fn ask_jia_again(state: AppState) {
    let in_doubt = state.store.shard().asks_in_doubt();
    for call in in_doubt {
        let uuid = call.uuid.clone();
        match activate_with_jia(state.clone(), call).await {
            Ok(answer) => {
                tracing::warn!(%uuid, answer = ?answer.0, "asked JIA again for a registration left without its answer")
            }
            Err(error) => {
                tracing::warn!(%error, %uuid, "asking JIA again for a registration left without its answer failed")
            }
        }
    }
}

/// JIA accepted a provisional registration: marked, then logged (as a publish is).
async fn accept(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(isu): Json<AcceptIsu>,
) -> Result<StatusCode, WorkerError> {
    if state
        .store
        .current(isu.generation)?
        .accept(&isu.uuid, isu.id, &isu.record)
    {
        state.journal.accept(&isu).await?;
        Ok(StatusCode::OK)
    } else {
        Err(WorkerError::IsuNotFound)
    }
}

async fn publish(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(isu): Json<PublishIsu>,
) -> Result<StatusCode, WorkerError> {
    if state.store.current(isu.generation)?.publish(&isu.uuid, isu.id) {
        state.journal.publish(&isu).await?;
        Ok(StatusCode::OK)
    } else {
        Err(WorkerError::IsuNotFound)
    }
}

async fn rollback(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(isu): Json<RollbackIsu>,
) -> Result<StatusCode, WorkerError> {
    let shard = state.store.current(isu.generation)?;
    if shard.rollback_unless_accepted(&isu.uuid, isu.id).is_err() {
        return Err(WorkerError::Conflict(shared::error::ACCEPTED_REGISTRATION));
    }
    state.journal.rollback(&isu).await?;
    Ok(StatusCode::OK)
}

/// The registrations held provisionally (a new leader of the coordinator replicas ends them).
async fn unpublished(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(of): Json<ResendLatest>,
) -> Result<Json<Vec<shared::protocol::UnpublishedIsu>>, WorkerError> {
    Ok(Json(state.store.current(of.generation)?.unpublished_registrations()))
}

/// The pusher sends the latest condition of every published ISU with its next batch.
async fn resend_latest(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(resend): Json<ResendLatest>,
) -> Result<StatusCode, WorkerError> {
    let queued = state.store.current(resend.generation)?.requeue_published();
    tracing::info!(queued, "latest conditions queued again for the coordinator");
    Ok(StatusCode::OK)
}

/// Every published ISU's latest condition, as one binary batch of this generation.
async fn latest_all(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(resend): Json<ResendLatest>,
) -> Result<axum::response::Response, WorkerError> {
    use axum::response::IntoResponse;
    let shard = state.store.current(resend.generation)?;
    let body = crate::pusher::encode_batch(&shard, &shard.published_latest(), true);
    Ok((
        [(axum::http::header::CONTENT_TYPE, shared::protocol::LATEST_BINARY)],
        body,
    )
        .into_response())
}

/// The coordinator's map: taken when newer than this worker's copy (saved before the answer).
async fn placement(
    _: ClusterPeer,
    State(state): State<AppState>,
    Json(map): Json<PlacementMap>,
) -> Result<StatusCode, WorkerError> {
    let cells = state.cells.clone();
    tokio::task::spawn_blocking(move || cells.update(map))
        .await
        .map_err(|error| WorkerError::Internal(error.to_string()))?
        .map_err(|error| WorkerError::Internal(format!("saving the placement map: {error}")))?;
    Ok(StatusCode::OK)
}

/// Liveness: a worker is ready as soon as it listens (the coordinator resets it).
async fn health(State(state): State<AppState>) -> Response {
    let health = Health {
        role: state.config.role(),
        ready: true,
        generation: state.store.shard().generation,
        map_version: state.cells.version(),
        leader: false,
        fence_term: state.fence.newest(),
    };
    json_response(serde_json::to_vec(&health).unwrap_or_default())
}
