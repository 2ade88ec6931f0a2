//! The transport between replicas: each raft RPC is one `POST` to the target's
//! `/internal/raft/{append,vote,snapshot}` with a JSON body and the cluster secret; the
//! answer is openraft's `Result` as JSON.
//!
//! The server side refuses, with a short text: a missing or wrong secret (401), a body that
//! is not the RPC's JSON (400), a body over [`MAX_RPC_BYTES`] (413). Snapshots travel in
//! chunks of [`SNAPSHOT_CHUNK_BYTES`] (openraft's `install_snapshot` reassembles them).

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Node, NodeId, Raft, TypeConfig};

pub const APPEND: &str = "/internal/raft/append";
pub const VOTE: &str = "/internal/raft/vote";
pub const SNAPSHOT: &str = "/internal/raft/snapshot";
/// A command a follower forwards to the leader (raw bytes in, `{"index": N}` out).
pub const PROPOSE: &str = "/internal/raft/propose";
/// The index a replica has applied (`{"index": N}`): a follower catching up reads the
/// leader's.
pub const APPLIED: &str = "/internal/raft/applied";
/// The largest RPC body a replica takes: [`crate::replica::MAX_PAYLOAD_ENTRIES`] entries of
/// registrations with icons as base64 fit.
pub const MAX_RPC_BYTES: usize = 64 << 20;
/// Snapshot bytes per `install_snapshot` RPC (openraft sends them as a JSON array of
/// numbers: up to about four times as many bytes on the wire, within [`MAX_RPC_BYTES`]).
pub const SNAPSHOT_CHUNK_BYTES: u64 = 1 << 20;

/// Builds a connection per target replica; every connection shares one HTTP client.
#[derive(Clone)]
pub struct Network {
    client: reqwest::Client,
    secret: std::sync::Arc<str>,
    rivals: std::sync::Arc<tokio::sync::watch::Sender<u64>>,
}

impl Network {
    /// The transport, and what tells of rival candidates: the last term in which a replica
    /// refused this one's vote because it stands for that same term itself (a split vote).
    pub fn new(secret: &str) -> (Network, tokio::sync::watch::Receiver<u64>) {
        let client = node_http::internal_client()
            .connect_timeout(Duration::from_millis(500))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .expect("an HTTP client builds");
        let (rivals, rival_terms) = tokio::sync::watch::channel(0);
        let network = Network {
            client,
            secret: secret.into(),
            rivals: std::sync::Arc::new(rivals),
        };
        (network, rival_terms)
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Connection {
        Connection {
            network: self.clone(),
            target,
            base: node.addr.trim_end_matches('/').to_owned(),
        }
    }
}

/// The way to one replica.
pub struct Connection {
    network: Network,
    target: NodeId,
    base: String,
}

impl Connection {
    async fn call<Request, Answer, Error>(
        &self,
        path: &str,
        request: &Request,
        option: &RPCOption,
    ) -> Result<Answer, RPCError<NodeId, Node, RaftError<NodeId, Error>>>
    where
        Request: Serialize,
        Answer: DeserializeOwned,
        Error: std::error::Error + DeserializeOwned,
    {
        let sent = self
            .network
            .client
            .post(format!("{}{path}", self.base))
            .header(shared::protocol::SECRET_HEADER, self.network.secret.as_ref())
            .timeout(option.hard_ttl())
            .json(request)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            // Unreachable makes openraft back off instead of retrying at once.
            Err(error) if error.is_connect() => return Err(RPCError::Unreachable(Unreachable::new(&error))),
            Err(error) => return Err(RPCError::Network(NetworkError::new(&error))),
        };
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|error| RPCError::Network(NetworkError::new(&error)))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            let error = std::io::Error::other(format!("{path} answered {status}: {}", text.trim()));
            return Err(RPCError::Network(NetworkError::new(&error)));
        }
        let answer: Result<Answer, RaftError<NodeId, Error>> =
            serde_json::from_slice(&body).map_err(|error| RPCError::Network(NetworkError::new(&error)))?;
        answer.map_err(|error| RPCError::RemoteError(RemoteError::new(self.target, error)))
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        request: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.call(APPEND, &request, &option).await
    }

    async fn install_snapshot(
        &mut self,
        request: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>> {
        self.call(SNAPSHOT, &request, &option).await
    }

    async fn vote(
        &mut self,
        request: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let answer: VoteResponse<NodeId> = self.call(VOTE, &request, &option).await?;
        let mine = &request.vote.leader_id;
        let theirs = &answer.vote.leader_id;
        if !answer.vote_granted
            && !answer.vote.committed
            && theirs.term == mine.term
            && theirs.voted_for != mine.voted_for
        {
            self.network.rivals.send_replace(mine.term);
        }
        Ok(answer)
    }
}

/// What the RPC routes need.
#[derive(Clone)]
struct Peer {
    raft: Raft,
    secret: std::sync::Arc<str>,
}

/// The raft RPC routes of a replica (merge into the node's router).
pub fn routes(raft: Raft, secret: &str) -> Router {
    Router::new()
        .route(APPEND, post(append))
        .route(VOTE, post(vote))
        .route(SNAPSHOT, post(snapshot))
        .route(PROPOSE, post(propose))
        .route(APPLIED, axum::routing::get(applied))
        .layer(DefaultBodyLimit::max(MAX_RPC_BYTES))
        .with_state(Peer {
            raft,
            secret: secret.into(),
        })
}

async fn append(State(peer): State<Peer>, headers: HeaderMap, body: Bytes) -> Response {
    match decode(&peer, &headers, &body) {
        Ok(request) => answer(&peer.raft.append_entries(request).await),
        Err(refused) => refused,
    }
}

async fn vote(State(peer): State<Peer>, headers: HeaderMap, body: Bytes) -> Response {
    match decode(&peer, &headers, &body) {
        Ok(request) => answer(&peer.raft.vote(request).await),
        Err(refused) => refused,
    }
}

async fn snapshot(State(peer): State<Peer>, headers: HeaderMap, body: Bytes) -> Response {
    match decode(&peer, &headers, &body) {
        Ok(request) => answer(&peer.raft.install_snapshot(request).await),
        Err(refused) => refused,
    }
}

/// What [`PROPOSE`] answers: the index the command was committed and applied at (on the leader).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Proposed {
    pub index: u64,
}

async fn propose(State(peer): State<Peer>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = check_secret(&peer, &headers) {
        return refused;
    }
    if body.is_empty() {
        return text(StatusCode::BAD_REQUEST, "an empty command");
    }
    match peer.raft.client_write(crate::Command(body.to_vec())).await {
        Ok(written) => answer(&Proposed {
            index: written.log_id.index,
        }),
        // The sender asks its own raft for the leader again and retries.
        Err(error) => text(StatusCode::SERVICE_UNAVAILABLE, &format!("not committed: {error}")),
    }
}

async fn applied(State(peer): State<Peer>, headers: HeaderMap) -> Response {
    if let Err(refused) = check_secret(&peer, &headers) {
        return refused;
    }
    // A new leader answers once it has applied what earlier leaders acknowledged.
    let linearizable = tokio::time::timeout(Duration::from_secs(2), peer.raft.ensure_linearizable()).await;
    let index = match linearizable {
        Ok(Ok(log_id)) => log_id.map_or(0, |log_id| log_id.index),
        _ => peer
            .raft
            .metrics()
            .borrow()
            .last_applied
            .map_or(0, |log_id| log_id.index),
    };
    answer(&Proposed { index })
}

fn check_secret(peer: &Peer, headers: &HeaderMap) -> Result<(), Response> {
    let secret = headers
        .get(shared::protocol::SECRET_HEADER)
        .map(|value| value.as_bytes());
    let authorization = headers.get(header::AUTHORIZATION).map(|value| value.as_bytes());
    if shared::protocol::carries_secret(&peer.secret, secret, authorization) {
        Ok(())
    } else {
        Err(text(StatusCode::UNAUTHORIZED, shared::error::UNAUTHORIZED_INTERNAL))
    }
}

/// The request, once the secret and the body are checked.
fn decode<T: DeserializeOwned>(peer: &Peer, headers: &HeaderMap, body: &[u8]) -> Result<T, Response> {
    check_secret(peer, headers)?;
    serde_json::from_slice(body).map_err(|error| {
        let message = format!("malformed raft request: {error}");
        text(StatusCode::BAD_REQUEST, &message)
    })
}

fn answer<T: Serialize>(result: &T) -> Response {
    match serde_json::to_vec(result) {
        Ok(body) => ([(header::CONTENT_TYPE, shared::error::APPLICATION_JSON)], body).into_response(),
        Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
    }
}

fn text(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, shared::error::TEXT_PLAIN)],
        message.to_owned(),
    )
        .into_response()
}
