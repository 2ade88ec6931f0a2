//! The operator console's API, `/ops/api/*` (the page itself is the web app's `/ops`
//! route): live state, charts and alerts, and the two actions, for operators signed in with
//! the operator token ([`auth`]; not the cluster secret, not a user's session).
//!
//! - `POST /ops/api/signin` `{"token": "..."}`: sets the operator cookie, answers
//!   `{"csrf": "..."}`; a wrong token is 401 (after a quarter of a second);
//! - `GET  /ops/api/session`: `{"csrf": "..."}` while signed in;
//! - `POST /ops/api/signout`: clears the cookie;
//! - `GET  /ops/api/state`: the placement map slot by slot (cells, pins), each cell's
//!   health, the migrations in flight and the recent ones with their steps ([`history`]),
//!   every replica's role, term, applied index and lag;
//! - `GET  /ops/api/charts?range=SECONDS`, `GET /ops/api/alerts`: from Prometheus
//!   ([`prometheus`]); 503 with a plain reason when the coordinator has no
//!   `--prometheus-url`;
//! - `POST /ops/api/migrate` `{"slot": "0b", "to": "c"}` and `POST /ops/api/drain`
//!   `{"cell": "a"}`: the cells API's own bodies and work (`routes/cells.rs`, what
//!   `isuctl cells` calls), run by the leader (a follower forwards them, `routes/leader.rs`).
//!
//! Every route but the sign-in answers 401 without the operator cookie; the two actions and
//! the sign-out also need the CSRF token and the same origin (403). Without
//! `--ops-token-file` the console is off: every `/ops/api/*` path answers 404.

pub mod auth;
pub mod history;
pub mod prometheus;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use shared::protocol::cells::{DrainRequest, MigrateRequest};
use shared::protocol::ReplicaAnswer;

use self::auth::{OperatorKey, Refusal};
use self::history::{History, SeenMigration};
use self::prometheus::Prometheus;
use super::{cells, leader};
use crate::AppState;

/// How long a wrong token's answer waits (slows down guessing).
const WRONG_TOKEN_DELAY: Duration = Duration::from_millis(250);
/// How long a worker's health or another replica's status may take.
const PEER_TIMEOUT: Duration = Duration::from_millis(500);
/// What `/ops/api/charts` and `/ops/api/alerts` say without Prometheus.
pub const NO_PROMETHEUS: &str =
    "charts and alerts need Prometheus: start the cluster with --prometheus (the coordinator's --prometheus-url)";

/// The console's state: the coordinator's, and what the console adds.
#[derive(Clone)]
struct Ops {
    app: AppState,
    key: Arc<OperatorKey>,
    prometheus: Option<Prometheus>,
    history: Arc<History>,
    /// Calls to the other replicas (their status, with the cluster secret).
    peers: reqwest::Client,
}

/// The session's CSRF token, put in a checked request by [`guard`].
#[derive(Clone)]
struct Csrf(String);

/// The console's routes: with `--ops-token-file`, the API; without, 404 for all of it. An
/// unreadable or short token file is an error (the coordinator does not start).
pub fn router(app: &AppState) -> anyhow::Result<Router<AppState>> {
    let Some(path) = &app.config.ops_token_file else {
        return Ok(Router::new()
            .route("/ops/api", any(console_off))
            .route("/ops/api/{*rest}", any(console_off)));
    };
    let token = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let key = OperatorKey::from_token(&token).map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
    let ops = Ops {
        app: app.clone(),
        key: Arc::new(key),
        prometheus: app
            .config
            .prometheus_url
            .as_deref()
            .map(|url| Prometheus::new(url, &app.config.cluster_secret)),
        history: Arc::default(),
        peers: node_http::internal_client().timeout(PEER_TIMEOUT).build()?,
    };
    let on_leader = middleware::from_fn_with_state(app.clone(), leader::on_leader);
    let guard = middleware::from_fn_with_state(ops.clone(), guard);
    let actions = Router::new()
        .route("/ops/api/migrate", post(migrate))
        .route("/ops/api/drain", post(drain))
        .route_layer(on_leader);
    let guarded = Router::new()
        .route("/ops/api/session", get(session))
        .route("/ops/api/signout", post(sign_out))
        .route("/ops/api/state", get(state))
        .route("/ops/api/charts", get(charts))
        .route("/ops/api/alerts", get(alerts))
        .merge(actions)
        .route_layer(guard);
    Ok(Router::new()
        .route("/ops/api/signin", post(sign_in))
        .merge(guarded)
        .route("/ops/api/{*rest}", any(not_found))
        .with_state(ops))
}

fn error(status: StatusCode, message: &str) -> Response {
    #[derive(Serialize)]
    struct Body<'a> {
        error: &'a str,
    }
    let mut response = (status, Json(Body { error: message })).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn console_off() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "the operator console is off (the coordinator has no --ops-token-file)",
    )
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such console route")
}

/// Every route but the sign-in: the operator cookie, and for an action the CSRF token and
/// the origin ([`OperatorKey::check`]).
async fn guard(State(ops): State<Ops>, mut request: Request, next: Next) -> Response {
    match ops.key.check(request.method(), request.headers(), SystemTime::now()) {
        Ok(csrf) => {
            request.extensions_mut().insert(Csrf(csrf));
            let mut response = next.run(request).await;
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(Refusal::SignedOut) => error(StatusCode::UNAUTHORIZED, "sign in with the operator token"),
        Err(Refusal::Forgery(reason)) => error(StatusCode::FORBIDDEN, reason),
    }
}

#[derive(Deserialize)]
struct SignIn {
    token: String,
}

#[derive(Serialize)]
struct SessionAnswer {
    csrf: String,
}

async fn sign_in(State(ops): State<Ops>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if let Err(Refusal::Forgery(reason)) = auth::same_origin(&headers) {
        return error(StatusCode::FORBIDDEN, reason);
    }
    let token = serde_json::from_slice::<SignIn>(&body)
        .map(|sign_in| sign_in.token)
        .unwrap_or_default();
    if !ops.key.is_token(&token) {
        tokio::time::sleep(WRONG_TOKEN_DELAY).await;
        return error(StatusCode::UNAUTHORIZED, "wrong operator token");
    }
    let session = ops.key.new_session(SystemTime::now());
    let csrf = ops
        .key
        .verify(&session, SystemTime::now())
        .expect("a new session verifies");
    let secure = headers
        .get("x-forwarded-proto")
        .is_some_and(|proto| proto.as_bytes() == b"https");
    let mut response = Json(SessionAnswer { csrf }).into_response();
    let cookie = HeaderValue::from_str(&auth::set_cookie(&session, secure)).expect("a cookie is a header value");
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn session(Extension(Csrf(csrf)): Extension<Csrf>) -> Json<SessionAnswer> {
    Json(SessionAnswer { csrf })
}

async fn sign_out() -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let cookie = HeaderValue::from_str(&auth::clear_cookie()).expect("a cookie is a header value");
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response
}

/// Answer of `GET /ops/api/state`.
#[derive(Serialize)]
struct ConsoleState {
    map_version: u64,
    /// Every cell, in map order; `slots` and `pins` name cells by their index here.
    cells: Vec<CellRow>,
    /// The owner of each of the 256 slots.
    slots: Vec<u8>,
    pins: Vec<PinRow>,
    in_flight: Vec<SeenMigration>,
    recent: Vec<SeenMigration>,
    replicas: Vec<ReplicaRow>,
    /// The replica that answered.
    served_by: u64,
    /// Whether charts and alerts are available.
    prometheus: bool,
}

#[derive(Serialize)]
struct CellRow {
    name: String,
    /// Its worker answered `/healthz` (within half a second).
    up: bool,
    slots: usize,
    pins: usize,
    /// The worker's copy of the map (when it answered).
    map_version: Option<u64>,
}

#[derive(Serialize)]
struct PinRow {
    isu: String,
    cell: u8,
}

#[derive(Serialize)]
struct ReplicaRow {
    id: u64,
    url: String,
    /// Its status, when it answered.
    status: Option<ReplicaAnswer>,
    /// How far its applied index is behind the most advanced replica's.
    lag: Option<u64>,
}

async fn state(State(ops): State<Ops>) -> Json<ConsoleState> {
    let app = &ops.app;
    let map = app.state.placement.map();
    // The unfinished set first, then the steps (see `History::update`).
    let unfinished: Vec<_> = app.state.placement.migrations.lock().values().cloned().collect();
    let steps = app.state.placement.applied_steps_since(ops.history.seen());
    let names: Vec<String> = map.cells().iter().map(|cell| cell.name.clone()).collect();
    ops.history.update(&unfinished, &steps, &names, SystemTime::now());
    let (in_flight, recent) = ops.history.listed();
    let workers = &app.state.workers;
    let health = futures_util::future::join_all(workers.cells().map(|cell| async move {
        tokio::time::timeout(PEER_TIMEOUT, workers.health(cell))
            .await
            .ok()
            .and_then(Result::ok)
    }));
    let (health, replicas) = tokio::join!(health, replicas(&ops));
    let counts = map.slot_counts();
    let cells = names
        .iter()
        .enumerate()
        .map(|(id, name)| {
            let health = health.get(id).cloned().flatten();
            CellRow {
                name: name.clone(),
                up: health.is_some(),
                slots: counts[id],
                pins: map.pins_of(id as u8).len(),
                map_version: health.map(|health| health.map_version),
            }
        })
        .collect();
    Json(ConsoleState {
        map_version: map.version(),
        cells,
        slots: map.slots().to_vec(),
        pins: map
            .pins()
            .iter()
            .map(|(isu, cell)| PinRow {
                isu: isu.clone(),
                cell: *cell,
            })
            .collect(),
        in_flight,
        recent,
        replicas,
        served_by: app.replica.id,
        prometheus: ops.prometheus.is_some(),
    })
}

/// Every member of the group: this replica's own status, the others' asked for.
async fn replicas(ops: &Ops) -> Vec<ReplicaRow> {
    let app = &ops.app;
    let members: Vec<(u64, String)> = {
        let metrics = app.replica.raft.metrics().borrow().clone();
        metrics
            .membership_config
            .membership()
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect()
    };
    let own = ReplicaAnswer {
        status: app.replica.status(),
        ready: app.state.is_ready(),
        state_hash: format!("{:016x}", app.state.state_hash()),
    };
    let asked = members.iter().map(|(id, url)| {
        let own = own.clone();
        async move {
            if *id == app.replica.id {
                return Some(own);
            }
            let answer = ops
                .peers
                .get(format!("{url}{}", shared::protocol::COORDINATOR_REPLICA))
                .header(shared::protocol::SECRET_HEADER, &app.config.cluster_secret)
                .send()
                .await
                .ok()?;
            answer.json::<ReplicaAnswer>().await.ok()
        }
    });
    let statuses = futures_util::future::join_all(asked).await;
    let mut rows: Vec<ReplicaRow> = members
        .into_iter()
        .zip(statuses)
        .map(|((id, url), status)| ReplicaRow {
            id,
            url,
            status,
            lag: None,
        })
        .collect();
    if rows.is_empty() {
        // A lone coordinator's group may name no address for itself.
        rows.push(ReplicaRow {
            id: own.status.id,
            url: String::new(),
            status: Some(own),
            lag: None,
        });
    }
    let newest = rows
        .iter()
        .filter_map(|row| row.status.as_ref().map(|answer| answer.status.applied_index))
        .max()
        .unwrap_or(0);
    for row in &mut rows {
        row.lag = row
            .status
            .as_ref()
            .map(|answer| newest.saturating_sub(answer.status.applied_index));
    }
    rows
}

#[derive(Deserialize)]
struct ChartsQuery {
    /// Seconds back from now (default 15 minutes).
    range: Option<u64>,
}

async fn charts(State(ops): State<Ops>, Query(query): Query<ChartsQuery>) -> Response {
    let Some(prometheus) = &ops.prometheus else {
        return error(StatusCode::SERVICE_UNAVAILABLE, NO_PROMETHEUS);
    };
    match prometheus.charts(query.range.unwrap_or(900), SystemTime::now()).await {
        Ok(charts) => Json(charts).into_response(),
        Err(failure) => {
            tracing::warn!(error = %failure, "the console's charts failed");
            error(StatusCode::BAD_GATEWAY, &failure.to_string())
        }
    }
}

async fn alerts(State(ops): State<Ops>) -> Response {
    let Some(prometheus) = &ops.prometheus else {
        return error(StatusCode::SERVICE_UNAVAILABLE, NO_PROMETHEUS);
    };
    #[derive(Serialize)]
    struct Alerts {
        alerts: Vec<prometheus::Alert>,
    }
    match prometheus.alerts().await {
        Ok(alerts) => Json(Alerts { alerts }).into_response(),
        Err(failure) => {
            tracing::warn!(error = %failure, "the console's alerts failed");
            error(StatusCode::BAD_GATEWAY, &failure.to_string())
        }
    }
}

async fn migrate(State(ops): State<Ops>, body: axum::body::Bytes) -> Response {
    match serde_json::from_slice::<MigrateRequest>(&body) {
        Ok(request) => cells::run_migrate(ops.app.clone(), request).await,
        Err(_) => error(StatusCode::BAD_REQUEST, "expected {\"slot\": \"0b\", \"to\": \"c\"}"),
    }
}

async fn drain(State(ops): State<Ops>, body: axum::body::Bytes) -> Response {
    match serde_json::from_slice::<DrainRequest>(&body) {
        Ok(request) => cells::run_drain(ops.app.clone(), request).await,
        Err(_) => error(StatusCode::BAD_REQUEST, "expected {\"cell\": \"a\"}"),
    }
}
