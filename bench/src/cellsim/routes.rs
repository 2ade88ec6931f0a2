//! The worker internal routes a coordinator calls, as a simulated cell answers them: the
//! same paths, status codes and bodies as `worker/src/routes/internal.rs`, with nothing
//! behind them but the cell's generation, map version and ISU list.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use shared::placement_map::PlacementMap;
use shared::protocol::{
    encode_latest, Activation, Health, JiaActivateIsu, LatestItem, ProvisionalIsu, PublishIsu, ResendLatest,
    RollbackIsu, UnpublishedIsu, UserSync, WireCondition, HEALTH, LATEST_BINARY, SECRET_HEADER, WORKER_ACCEPT,
    WORKER_JIA_ACTIVATE, WORKER_LATEST_ALL, WORKER_PLACEMENT, WORKER_PROVISIONAL, WORKER_PUBLISH, WORKER_RESEND_LATEST,
    WORKER_RESET, WORKER_ROLLBACK, WORKER_UNPUBLISHED, WORKER_USERS,
};

use super::{SimCell, SimIsu};

/// A reset carries a whole shard (as the real worker's limit).
const RESET_BODY_LIMIT: usize = 1 << 30;

/// The routes of one simulated cell; all but `/healthz` need `secret`.
pub fn router(cell: Arc<SimCell>, secret: String) -> Router {
    let guarded = Router::new()
        .route(WORKER_RESET, post(reset).layer(DefaultBodyLimit::max(RESET_BODY_LIMIT)))
        .route(WORKER_USERS, post(sync_users))
        .route(WORKER_PROVISIONAL, post(provisional))
        .route(WORKER_ACCEPT, post(accept))
        .route(WORKER_JIA_ACTIVATE, post(jia_activate))
        .route(WORKER_PUBLISH, post(publish))
        .route(WORKER_ROLLBACK, post(rollback))
        .route(WORKER_UNPUBLISHED, post(unpublished))
        .route(WORKER_PLACEMENT, post(placement))
        .route(WORKER_RESEND_LATEST, post(resend_latest))
        .route(WORKER_LATEST_ALL, post(latest_all))
        .layer(axum::middleware::from_fn_with_state(Arc::new(secret), require_secret));
    Router::new().route(HEALTH, get(health)).merge(guarded).with_state(cell)
}

/// 401 without the cluster secret, as a worker's `ClusterPeer` answers.
async fn require_secret(State(secret): State<Arc<String>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let given = headers.get(SECRET_HEADER).map(|value| value.as_bytes());
    let authorization = headers.get(header::AUTHORIZATION).map(|value| value.as_bytes());
    if shared::protocol::carries_secret(&secret, given, authorization) {
        next.run(request).await
    } else {
        StatusCode::UNAUTHORIZED.into_response()
    }
}

/// 412 for a message of another generation than the cell's, as a worker answers.
fn current(cell: &SimCell, generation: u64) -> Result<(), StatusCode> {
    if cell.generation.load(Ordering::Acquire) == generation {
        Ok(())
    } else {
        Err(StatusCode::PRECONDITION_FAILED)
    }
}

/// What of a reset the simulator keeps: the generation, each ISU's UUID and latest condition.
#[derive(Deserialize)]
struct ResetShard {
    generation: u64,
    isus: Vec<ResetIsu>,
}

#[derive(Deserialize)]
struct ResetIsu {
    uuid: String,
    conditions: Vec<WireCondition>,
}

impl ResetIsu {
    fn into_sim(self) -> SimIsu {
        let latest = self.conditions.into_iter().max_by_key(|condition| condition.timestamp);
        SimIsu {
            uuid: self.uuid,
            latest,
        }
    }
}

async fn reset(State(cell): State<Arc<SimCell>>, body: Bytes) -> StatusCode {
    let parsed = tokio::task::spawn_blocking(move || serde_json::from_slice::<ResetShard>(&body)).await;
    match parsed {
        Ok(Ok(reset)) => {
            let isus: Vec<SimIsu> = reset.isus.into_iter().map(ResetIsu::into_sim).collect();
            tracing::debug!(cell = cell.name, isus = isus.len(), "simulated cell reset");
            cell.replace_isus(isus);
            cell.generation.store(reset.generation, Ordering::Release);
            StatusCode::OK
        }
        Ok(Err(error)) => {
            tracing::warn!(cell = cell.name, %error, "a reset that is no shard");
            StatusCode::UNPROCESSABLE_ENTITY
        }
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

async fn sync_users(State(cell): State<Arc<SimCell>>, Json(sync): Json<UserSync>) -> StatusCode {
    match current(&cell, sync.generation) {
        Ok(()) => StatusCode::OK,
        Err(status) => status,
    }
}

/// Taken at once (201); the cell holds nothing provisionally.
async fn provisional(State(cell): State<Arc<SimCell>>, Json(isu): Json<ProvisionalIsu>) -> StatusCode {
    match current(&cell, isu.generation) {
        Ok(()) => StatusCode::CREATED,
        Err(status) => status,
    }
}

/// JIA's acceptance: a simulated cell's devices post only once the ISU is published.
async fn accept(State(cell): State<Arc<SimCell>>, Json(isu): Json<shared::protocol::AcceptIsu>) -> StatusCode {
    match current(&cell, isu.generation) {
        Ok(()) => StatusCode::OK,
        Err(status) => status,
    }
}

/// Asks JIA, as a worker does, and answers with JIA's answer (the cell keeps nothing: its
/// devices post only once the ISU is published); 502 when JIA does not answer.
async fn jia_activate(State(cell): State<Arc<SimCell>>, Json(call): Json<JiaActivateIsu>) -> Response {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    if let Err(status) = current(&cell, call.generation) {
        return status.into_response();
    }
    let client = CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .expect("a plain HTTP client builds")
    });
    #[derive(Deserialize)]
    struct Answer {
        character: String,
    }
    let answer = client
        .post(format!("{}/api/activate", call.jia_service_url.trim_end_matches('/')))
        .json(&serde_json::json!({ "target_base_url": call.target_base_url, "isu_uuid": call.uuid }))
        .send()
        .await;
    let activation = match answer {
        Ok(answer) if answer.status() == StatusCode::ACCEPTED => match answer.json::<Answer>().await {
            Ok(Answer { character }) => Activation::Activated { character },
            Err(_) => return StatusCode::BAD_GATEWAY.into_response(),
        },
        Ok(answer) => Activation::Refused {
            status: answer.status().as_u16(),
        },
        Err(_) => return StatusCode::BAD_GATEWAY.into_response(),
    };
    Json(activation).into_response()
}

/// The published ISU joins the cell's pushes.
async fn publish(State(cell): State<Arc<SimCell>>, Json(isu): Json<PublishIsu>) -> StatusCode {
    if let Err(status) = current(&cell, isu.generation) {
        return status;
    }
    cell.add_isu(isu.uuid);
    StatusCode::OK
}

async fn rollback(State(cell): State<Arc<SimCell>>, Json(isu): Json<RollbackIsu>) -> StatusCode {
    match current(&cell, isu.generation) {
        Ok(()) => StatusCode::OK,
        Err(status) => status,
    }
}

/// None held provisionally.
async fn unpublished(State(cell): State<Arc<SimCell>>, Json(of): Json<ResendLatest>) -> Response {
    match current(&cell, of.generation) {
        Ok(()) => Json(Vec::<UnpublishedIsu>::new()).into_response(),
        Err(status) => status.into_response(),
    }
}

/// The map's version is kept (the coordinator's health check compares it), and when a newer
/// one arrived.
async fn placement(State(cell): State<Arc<SimCell>>, Json(map): Json<PlacementMap>) -> StatusCode {
    let arrived = std::time::Instant::now();
    if cell.map_version.fetch_max(map.version(), Ordering::AcqRel) < map.version() {
        cell.map_arrivals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((map.version(), arrived));
    }
    StatusCode::OK
}

/// The next batch carries every ISU's latest condition again.
async fn resend_latest(State(cell): State<Arc<SimCell>>, Json(resend): Json<ResendLatest>) -> StatusCode {
    match current(&cell, resend.generation) {
        Ok(()) => {
            cell.resend.store(true, Ordering::Release);
            StatusCode::OK
        }
        Err(status) => status,
    }
}

/// Every ISU's latest condition from its reset, as one binary batch.
async fn latest_all(State(cell): State<Arc<SimCell>>, Json(of): Json<ResendLatest>) -> Response {
    if let Err(status) = current(&cell, of.generation) {
        return status.into_response();
    }
    let isus = cell.isus();
    let body = encode_latest(of.generation, isus.iter().filter_map(reset_item));
    ([(header::CONTENT_TYPE, LATEST_BINARY)], body).into_response()
}

/// An ISU's latest condition from its reset, as a batch item.
pub(super) fn reset_item(isu: &SimIsu) -> Option<LatestItem<'_>> {
    isu.latest.as_ref().map(|latest| LatestItem {
        uuid: &isu.uuid,
        timestamp: latest.timestamp,
        flags: latest.flags,
        message: &latest.message,
    })
}

async fn health(State(cell): State<Arc<SimCell>>) -> Json<Health> {
    Json(Health {
        role: shared::placement_map::worker_role(&cell.name),
        ready: true,
        generation: cell.generation.load(Ordering::Acquire),
        map_version: cell.map_version.load(Ordering::Acquire),
        leader: false,
        fence_term: 0,
    })
}
