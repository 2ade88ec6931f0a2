//! HTTP glue that the coordinator and the workers share, written once: the cluster-secret
//! guard of internal routes ([`ClusterPeer`]), the request metrics middleware
//! ([`track_request`]), and the routes every node serves behind the secret
//! ([`debug_router`]: `GET /metrics`, `GET /debug/pprof/profile`, `GET /debug/pprof/last`),
//! the client settings of every call between nodes ([`internal_client`]), a request's session
//! ([`session_of`]) and JSON answers with the API's content type ([`json_response`]).
//! `shared` stays free of axum; the node binaries keep their own routes and error types.

use std::time::Instant;

use axum::extract::{FromRequestParts, MatchedPath, RawQuery, Request, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use shared::protocol::{METRICS, PPROF_LAST, PPROF_PROFILE};

/// The verified session among a request's `Cookie` headers, if any: the signature only; each
/// node decides whether the user still counts (it exists, or the generation is current).
pub fn session_of(
    key: &shared::session::SessionKey,
    headers: &axum::http::HeaderMap,
) -> Option<shared::session::Session> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(|value| key.from_cookie_header(value))
}

/// A JSON response with the API's content type.
pub fn json_response(body: impl Into<axum::body::Body>) -> Response {
    ([(header::CONTENT_TYPE, shared::error::APPLICATION_JSON)], body.into()).into_response()
}

/// A client for calls between nodes (they carry the cluster secret): never through a proxy
/// whatever `HTTP_PROXY`, `ALL_PROXY` or `NO_PROXY` say, since the nodes reach each other
/// directly and a proxy would see the secret; never following a redirect, which could send
/// the secret to another host; `TCP_NODELAY`. Callers add their timeouts and protocol.
pub fn internal_client() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .tcp_nodelay(true)
}

/// What a node's router state gives this crate. A node's state is its parts behind one
/// `Arc` (`Arc<Shared>`, through the impl below), so the clones axum makes for every request
/// (its `State` extractor and each middleware's) cost one reference count.
pub trait NodeState: Send + Sync + 'static {
    /// The secret internal, metrics and profiling routes require.
    fn cluster_secret(&self) -> &str;
    /// The node's Prometheus recorder.
    fn metrics(&self) -> &PrometheusHandle;
}

impl<T: NodeState> NodeState for std::sync::Arc<T> {
    fn cluster_secret(&self) -> &str {
        (**self).cluster_secret()
    }

    fn metrics(&self) -> &PrometheusHandle {
        (**self).metrics()
    }
}

/// Requires the cluster secret (`x-cluster-secret` or `Authorization: Bearer`), compared in
/// constant time; refused with 401 `cluster secret required` (text/plain).
pub struct ClusterPeer;

impl<S: NodeState> FromRequestParts<S> for ClusterPeer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let secret_header = parts
            .headers
            .get(shared::protocol::SECRET_HEADER)
            .map(|value| value.as_bytes());
        let authorization = parts.headers.get(header::AUTHORIZATION).map(|value| value.as_bytes());
        if shared::protocol::carries_secret(state.cluster_secret(), secret_header, authorization) {
            Ok(ClusterPeer)
        } else {
            Err((
                StatusCode::UNAUTHORIZED,
                [(header::CONTENT_TYPE, shared::error::TEXT_PLAIN)],
                shared::error::UNAUTHORIZED_INTERNAL,
            )
                .into_response())
        }
    }
}

/// Middleware: counts every request and records its latency by matched route and status.
pub async fn track_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    // The matched route is shared (cloning it copies no text).
    let route = request.extensions().get::<MatchedPath>().cloned();
    let response = next.run(request).await;
    let route = route.as_ref().map_or("", MatchedPath::as_str);
    shared::telemetry::record_request(route, response.status().as_u16(), started.elapsed());
    response
}

/// `GET /metrics` (Prometheus text) and the CPU profiles, all behind the cluster secret.
pub fn debug_router<S: NodeState + Clone>() -> Router<S> {
    Router::new()
        .route(METRICS, get(metrics::<S>))
        .route(PPROF_PROFILE, get(profile))
        .route(PPROF_LAST, get(last_profile))
}

async fn metrics<S: NodeState + Clone>(_: ClusterPeer, State(state): State<S>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        shared::telemetry::render_metrics(state.metrics()),
    )
        .into_response()
}

async fn profile(_: ClusterPeer, RawQuery(query): RawQuery) -> Response {
    reply(shared::telemetry::profile_from_query(query.as_deref()).await)
}

async fn last_profile(_: ClusterPeer, RawQuery(query): RawQuery) -> Response {
    reply(shared::telemetry::last_profile_from_query(query.as_deref()))
}

fn reply(reply: shared::telemetry::ProfileReply) -> Response {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, reply.content_type)], reply.body).into_response()
}

static FAIL_POINTS_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Fail points for the crash tests (the `fail` crate): `FAILPOINTS="name=action;..."` in a
/// node's environment configures the named points (`sleep(ms)`, `pause`, `panic`, ...) so a
/// test can stop a migration at an exact step and kill a node there. Call from `main`, on
/// the main thread, and keep the guard until the node exits. Evaluating a point takes the
/// `fail` crate's registry lock, so points on a hot path are evaluated only when
/// [`fail_points_on`].
pub fn fail_points_from_env() -> Option<fail::FailScenario<'static>> {
    let configured = std::env::var("FAILPOINTS")
        .ok()
        .filter(|value| !value.trim().is_empty())?;
    let scenario = fail::FailScenario::setup();
    FAIL_POINTS_ON.store(true, std::sync::atomic::Ordering::Release);
    tracing::warn!(failpoints = %configured, "fail points configured from FAILPOINTS (tests only)");
    Some(scenario)
}

/// Whether `FAILPOINTS` configured any fail point (one atomic load; false in deployments).
pub fn fail_points_on() -> bool {
    FAIL_POINTS_ON.load(std::sync::atomic::Ordering::Acquire)
}

/// Tests only: with the fail point `step` set to `return(KEY)`, the caller whose `key` is
/// KEY waits here for a minute; `return(KEY/MILLIS)`, that long (without blocking a thread,
/// as the fail crate's `sleep` would). A test then kills, pauses or cuts off a node while a
/// request is held at an exact step.
pub async fn hold_at(step: &'static str, key: &str) {
    if !fail_points_on() {
        return;
    }
    let Some(target) = fail::eval(step, |target| target).flatten() else {
        return;
    };
    let (target, millis) = match target.split_once('/') {
        Some((target, millis)) => (target.to_owned(), millis.parse().unwrap_or(60_000)),
        None => (target, 60_000),
    };
    if target == key {
        tracing::warn!(step, key, millis, "held at a fail point");
        tokio::time::sleep(std::time::Duration::from_millis(millis)).await;
    }
}
