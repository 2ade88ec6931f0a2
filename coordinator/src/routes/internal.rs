//! Internal routes: the workers' latest-condition batches, the health check, a replica's
//! status and membership, the replicas' icon stores.

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use futures_util::StreamExt as _;
use node_http::ClusterPeer;
use shared::protocol::{
    decode_latest, Health, LatestBatch, LatestDecodeError, LatestFrames, StreamAnswer, COORDINATOR_LATEST,
    COORDINATOR_LATEST_STREAM, HEALTH, LATEST_BINARY, LATEST_STREAM,
};

use super::json::json;
use crate::error::ApiError;
use crate::AppState;

/// A batch holds at most one item per ISU.
const LATEST_BODY_LIMIT: usize = 64 << 20;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            COORDINATOR_LATEST,
            post(latest).layer(DefaultBodyLimit::max(LATEST_BODY_LIMIT)),
        )
        // The bound is per frame (the stream lasts as long as the worker sends).
        .route(
            COORDINATOR_LATEST_STREAM,
            post(latest_stream).layer(DefaultBodyLimit::disable()),
        )
        .route(HEALTH, get(health))
        .route(shared::protocol::COORDINATOR_REPLICA, get(replica))
        .route(shared::protocol::COORDINATOR_REPLICA_ISUS, get(held_isus))
        .route(
            &format!("{}/{{hash}}", shared::protocol::COORDINATOR_ICONS),
            put(store_icon).get(icon).layer(DefaultBodyLimit::max(ICON_BODY_LIMIT)),
        )
}

/// `GET /internal/replica/isus`: the registered ISUs this coordinator holds (any coordinator
/// answers; a group's replicas must all hold what any of them acknowledged).
async fn held_isus(_: ClusterPeer, State(app): State<AppState>) -> Response {
    axum::Json(app.state.held_isus()).into_response()
}

/// An icon comes from a registration form (at most 10 MiB).
const ICON_BODY_LIMIT: usize = 16 << 20;

/// The icon store of a replica, and the hash a path names; or why they are refused.
fn icon_store_and_hash<'a>(
    app: &'a AppState,
    hash: &str,
) -> Result<(&'a crate::icons::IconStore, crate::icons::IconHash), (StatusCode, &'static str)> {
    let icons = app.state.icons.as_deref().ok_or((
        StatusCode::NOT_FOUND,
        "this coordinator keeps its icons in its log (no --data-dir)",
    ))?;
    let hash = crate::icons::parse_hex(hash).ok_or((
        StatusCode::BAD_REQUEST,
        "an icon is named by 64 hex digits (its SHA-256)",
    ))?;
    Ok((icons, hash))
}

/// `PUT /internal/icons/{hash}`: stores an icon the leader is about to name in the log; 400
/// when the body does not hash to `hash`.
async fn store_icon(_: ClusterPeer, State(app): State<AppState>, Path(hash): Path<String>, body: Bytes) -> Response {
    let (icons, hash) = match icon_store_and_hash(&app, &hash) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    if crate::icons::hash_of(&body) != hash {
        return (StatusCode::BAD_REQUEST, "the icon's bytes do not hash to its name").into_response();
    }
    match icons.store_local(hash, body).await {
        Ok(()) => StatusCode::CREATED.into_response(),
        Err(error) => {
            tracing::error!(%error, "storing a peer's icon failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "storing the icon failed").into_response()
        }
    }
}

/// `GET /internal/icons/{hash}`: an icon this replica holds (404 when it does not).
async fn icon(_: ClusterPeer, State(app): State<AppState>, Path(hash): Path<String>) -> Response {
    let (icons, hash) = match icon_store_and_hash(&app, &hash) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    match icons.local(&hash) {
        Some(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        None => (StatusCode::NOT_FOUND, "no such icon here").into_response(),
    }
}

/// `POST /internal/replica/members` apart: the leader alone changes the group.
pub fn members_router() -> Router<AppState> {
    Router::new().route(shared::protocol::COORDINATOR_MEMBERS, post(members))
}

/// Adds or removes a replica; 400 for a body that is not a [`MembershipRequest`], 409 when
/// the change is refused (or the coordinator keeps its log in memory).
async fn members(_: ClusterPeer, State(app): State<AppState>, body: Bytes) -> Response {
    let replica = &app.replica;
    if app.config.data_dir.is_none() {
        return (
            StatusCode::CONFLICT,
            "this coordinator keeps its log in memory (no --data-dir) and takes no other replica",
        )
            .into_response();
    }
    let request: shared::protocol::MembershipRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => {
            let message = format!(
                "expected {{\"add\": {{\"id\": N, \"url\": \"http://host:port\"}}}} or {{\"remove\": N}}: {error}"
            );
            return (StatusCode::BAD_REQUEST, message).into_response();
        }
    };
    let changed = match request {
        shared::protocol::MembershipRequest::Add { id, url } => {
            if id == 0 || !crate::config::is_http_url(&url) {
                return (
                    StatusCode::BAD_REQUEST,
                    "a replica id is a number from 1, its URL http(s)://host:port",
                )
                    .into_response();
            }
            replica.add_member(id, url.trim_end_matches('/').to_owned()).await
        }
        shared::protocol::MembershipRequest::Remove(id) => replica.remove_member(id).await,
    };
    match changed {
        Ok(_) => replica_answer(&app, replica),
        Err(consensus::MembershipError::NotLeader(message)) => {
            (StatusCode::SERVICE_UNAVAILABLE, message).into_response()
        }
        Err(consensus::MembershipError::Refused(message)) => (StatusCode::CONFLICT, message).into_response(),
    }
}

/// `GET /internal/replica`: this replica's role, term, applied index and leader, whether it
/// is ready, and a hash of its replicated state (equal on replicas that applied the same
/// log); a lone coordinator answers as the one replica of its group.
async fn replica(_: ClusterPeer, State(app): State<AppState>) -> Response {
    replica_answer(&app, &app.replica)
}

fn replica_answer(app: &AppState, replica: &crate::Replica) -> Response {
    axum::Json(shared::protocol::ReplicaAnswer {
        status: replica.status(),
        ready: app.state.is_ready(),
        state_hash: format!("{:016x}", app.state.state_hash()),
    })
    .into_response()
}

/// 412 tells the worker its batch belongs to another generation. The binary form
/// ([`LATEST_BINARY`]) is read in place; JSON (`application/json`, or no `Content-Type`)
/// is decoded with plain `serde_json`: axum's `Json` tracks the path of every field for its
/// error messages, and that was the top of the coordinator's profile under device load. An
/// unknown version, or any other type, is 415, so a worker knows to send JSON.
async fn latest(_: ClusterPeer, State(app): State<AppState>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let content_type = headers.get(header::CONTENT_TYPE).map(|value| value.as_bytes());
    let json;
    let (generation, items) = match content_type {
        Some(binary) if binary.eq_ignore_ascii_case(LATEST_BINARY.as_bytes()) => match decode_latest(&body) {
            Ok(decoded) => decoded,
            Err(LatestDecodeError::Version(_)) => return StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Err(_) => return StatusCode::BAD_REQUEST,
        },
        Some(other) if !is_json(other) => return StatusCode::UNSUPPORTED_MEDIA_TYPE,
        _ => match serde_json::from_slice::<LatestBatch>(&body) {
            Ok(batch) => {
                json = batch;
                (json.generation, json.borrowed())
            }
            Err(_) => return StatusCode::BAD_REQUEST,
        },
    };
    let current = app.state.generation();
    if generation != current.id {
        return StatusCode::PRECONDITION_FAILED;
    }
    current.apply_latest(&items);
    StatusCode::OK
}

/// `POST /internal/latest/stream` ([`LATEST_STREAM`]): answers 200 at once, then applies
/// each frame of the worker's stream as it arrives and acknowledges what it applied in its
/// answer's body ([`StreamAnswer::Applied`] after each chunk of the request that completed a
/// frame). The answer ends with why the stream ended ([`StreamAnswer::End`]): the worker
/// ended it (200), a frame of another generation (412), bad input (400 for a frame that is no
/// batch, 413 for a frame over the bound, 415 for another version), or this coordinator
/// stops (503). A frame is applied whole or not at all, and nothing after a refused one.
/// A request of another `Content-Type` is refused (415) before the stream starts.
async fn latest_stream(_: ClusterPeer, State(app): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let content_type = headers.get(header::CONTENT_TYPE).map(|value| value.as_bytes());
    if !content_type.is_some_and(|value| value.eq_ignore_ascii_case(LATEST_STREAM.as_bytes())) {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a latest stream is application/x-isu-latest-stream",
        );
    }
    let reader = StreamReader {
        app,
        body: body.into_data_stream(),
        frames: LatestFrames::new(LATEST_BODY_LIMIT),
        applied: 0,
        ended: false,
    };
    let answers = futures_util::stream::unfold(reader, |mut reader| async move {
        if reader.ended {
            return None;
        }
        let answer = reader.next_answer().await;
        Some((Ok::<_, std::convert::Infallible>(Bytes::from(answer.line())), reader))
    });
    (
        [(header::CONTENT_TYPE, shared::error::TEXT_PLAIN)],
        Body::from_stream(answers),
    )
        .into_response()
}

/// A latest stream being read (see [`latest_stream`]).
struct StreamReader {
    app: AppState,
    body: axum::body::BodyDataStream,
    frames: LatestFrames,
    /// Frames applied so far.
    applied: u64,
    ended: bool,
}

impl StreamReader {
    /// Reads the stream until a chunk completed frames (and applies them) or it ends.
    async fn next_answer(&mut self) -> StreamAnswer {
        loop {
            let chunk = tokio::select! {
                chunk = self.body.next() => chunk,
                () = self.app.stopping.cancelled() => return self.end(503, "this coordinator is stopping"),
            };
            match chunk {
                Some(Ok(chunk)) => self.frames.push(&chunk),
                Some(Err(_)) => return self.end(400, "the stream broke"),
                None if self.frames.is_between_frames() => return self.end(200, "ended by the worker"),
                None => return self.end(400, "the stream ends inside a frame"),
            }
            let before = self.applied;
            loop {
                let frame = match self.frames.next_frame() {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(_) => return self.end(413, "a latest frame over the bound"),
                };
                let (generation, items) = match decode_latest(&frame) {
                    Ok(decoded) => decoded,
                    Err(LatestDecodeError::Version(_)) => return self.end(415, "a latest batch of an unknown version"),
                    Err(_) => return self.end(400, "a latest frame that is no batch"),
                };
                let current = self.app.state.generation();
                if generation != current.id {
                    return self.end(412, "a latest batch of another generation");
                }
                current.apply_latest(&items);
                self.applied += 1;
            }
            if self.applied > before {
                return StreamAnswer::Applied(self.applied);
            }
        }
    }

    fn end(&mut self, status: u16, reason: &str) -> StreamAnswer {
        self.ended = true;
        StreamAnswer::End {
            status,
            reason: reason.to_owned(),
        }
    }
}

fn refuse(status: StatusCode, message: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, shared::error::TEXT_PLAIN)], message).into_response()
}

/// `application/json`, with parameters or not, in any case.
fn is_json(content_type: &[u8]) -> bool {
    let essence = content_type.split(|byte| *byte == b';').next().unwrap_or_default();
    essence.trim_ascii().eq_ignore_ascii_case(b"application/json")
}

async fn health(State(app): State<AppState>) -> Result<Response, ApiError> {
    let ready = app.state.is_ready();
    let mut response = json(&Health {
        role: "coordinator".into(),
        ready,
        generation: app.state.generation().id,
        map_version: app.state.placement.map().version(),
        leader: app.state.takes_leader_writes(),
        fence_term: 0,
    })?;
    if !ready {
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    Ok(response.into_response())
}
