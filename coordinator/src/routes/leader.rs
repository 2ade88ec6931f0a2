//! Writes that only the leader of a group of replicas may run (registration, `/initialize`,
//! migrations): on a follower, [`on_leader`] forwards the request to the leader as it came
//! and answers with the leader's answer, once this replica has applied what the leader had
//! applied when it answered, so the client's next read here sees its write.
//!
//! A forwarded request carries [`FORWARDED_HEADER`]; a replica that gets one while it does
//! not lead (leadership moved meanwhile) answers 503 instead of forwarding it again, so a
//! request crosses at most one hop. Reads and the writes any replica commits through the
//! log (sign-in) never come here. A group of one leads as soon as it has started, so its
//! requests are served where they came.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;

use crate::Replica;

/// Marks a request a follower forwarded.
pub const FORWARDED_HEADER: &str = "x-isu-forwarded-to-leader";
/// A request's id: nginx sets it (`$request_id`, the same on its retries); a forwarding
/// replica keeps it, or sets one, and sends a registration again with it when the leader
/// died before answering: the leader answers a registration it has seen from its outcome.
pub const REQUEST_ID_HEADER: &str = "x-isu-request-id";
/// On the leader's answer to a forwarded request: the index it had applied.
pub const APPLIED_HEADER: &str = "x-raft-applied";
/// The largest body forwarded (a registration with its icon is far smaller).
const FORWARD_BODY_LIMIT: usize = 16 << 20;
/// On a 503 of a replica that got a forwarded request but no longer leads.
const NOT_LEADER_HEADER: &str = "x-isu-not-leader";
/// How often a forwarded write waiting for a leader tries again.
const RETRY_EVERY: Duration = Duration::from_millis(50);
/// How long a follower waits to apply what the leader had applied.
const APPLY_WAIT: Duration = Duration::from_secs(2);

/// Headers that belong to one connection, not to the request or the answer.
const HOP_BY_HOP: [HeaderName; 4] = [
    header::CONNECTION,
    header::HOST,
    header::TRANSFER_ENCODING,
    header::CONTENT_LENGTH,
];

pub async fn on_leader(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let replica = app.replica.clone();
    let forwarded = request.headers().contains_key(FORWARDED_HEADER);
    let reads = matches!(*request.method(), Method::GET | Method::HEAD);
    if !reads && app.state.is_leader() {
        // A new leader takes writes once it has applied the earlier terms and ended their
        // registrations (a registration sent again must find its outcome).
        let deadline = tokio::time::Instant::now() + consensus::replica::ELECTION_WAIT;
        while !app.state.takes_leader_writes() && app.state.is_leader() {
            if tokio::time::Instant::now() >= deadline {
                return unavailable("this replica is taking over; try again");
            }
            tokio::time::sleep(RETRY_EVERY).await;
        }
    }
    if reads || app.state.is_leader() {
        let mut response = next.run(request).await;
        if forwarded {
            let applied = replica.applied_index();
            response
                .headers_mut()
                .insert(APPLIED_HEADER, HeaderValue::from(applied));
        }
        return response;
    }
    if forwarded {
        return not_leader();
    }
    forward(&app, &replica, request).await
}

/// Sends `request` to the leader as it came and answers with the leader's answer, once this
/// replica has applied what the leader had applied (see the module documentation).
async fn forward(app: &AppState, replica: &Replica, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, FORWARD_BODY_LIMIT).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, shared::error::PAYLOAD_TOO_LARGE).into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |path| path.as_str()).to_owned();
    if !parts.headers.contains_key(REQUEST_ID_HEADER) {
        let id = uuid::Uuid::new_v4().simple().to_string();
        parts.headers.insert(
            REQUEST_ID_HEADER,
            HeaderValue::from_str(&id).expect("hex is a header value"),
        );
    }
    // A registration is answered from its outcome when sent again with its id: one whose
    // leader died before answering goes to the next leader instead of failing.
    let sent_again_is_safe = parts.method == Method::POST && parts.uri.path() == "/api/isu";
    // While the group elects (no leader known, the known one gone or no longer leading),
    // the request waits and goes to the next leader: nothing was done with it yet. The wait
    // is bounded from its start, not from the request's: a leader that worked on a
    // registration for seconds before it died leaves the next election its whole time.
    let mut deadline = None;
    let answer = loop {
        let retry = match replica.leader_url() {
            None => "no leader is known yet (an election is under way)",
            Some(leader) => {
                let mut forward = app
                    .forward_client
                    .request(parts.method.clone(), format!("{}{path}", leader.trim_end_matches('/')))
                    .header(FORWARDED_HEADER, replica.id.to_string())
                    .body(body.clone());
                for (name, value) in &parts.headers {
                    if !HOP_BY_HOP.contains(name) {
                        forward = forward.header(name, value);
                    }
                }
                match forward.send().await {
                    Ok(answer) if answer.headers().contains_key(NOT_LEADER_HEADER) => "the leader moved on",
                    Ok(answer) => break answer,
                    Err(error) if error.is_connect() => "the leader does not answer",
                    Err(error) if sent_again_is_safe => {
                        tracing::warn!(%error, %leader, "a forwarded registration lost its answer; sending it again");
                        "the leader did not answer"
                    }
                    Err(error) => {
                        // Sent, maybe done: not sent again.
                        tracing::warn!(%error, %leader, "forwarding a write to the leader failed");
                        return unavailable("the leader did not answer; try again");
                    }
                }
            }
        };
        let now = tokio::time::Instant::now();
        if now >= *deadline.get_or_insert(now + consensus::replica::ELECTION_WAIT) {
            tracing::warn!(reason = retry, "no leader took a forwarded request in time");
            return unavailable("no leader is known yet (an election is under way); try again");
        }
        tokio::time::sleep(RETRY_EVERY).await;
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let body = match answer.bytes().await {
        Ok(body) => body,
        Err(error) => {
            tracing::warn!(%error, "reading the leader's answer failed");
            return unavailable("the leader did not answer; try again");
        }
    };
    let applied = headers
        .get(APPLIED_HEADER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if let Some(applied) = applied {
        if !replica.wait_applied(applied, APPLY_WAIT).await {
            tracing::warn!(applied, "the leader's write was not applied here in time");
        }
    }
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    for (name, value) in &headers {
        if !HOP_BY_HOP.contains(name) && name.as_str() != APPLIED_HEADER {
            response.headers_mut().append(name, value.clone());
        }
    }
    response
}

/// A replica serves the public API once it is ready (it has applied its group's generation
/// and received the workers' latest conditions). Before, it hands each request to the
/// leader (nginx sends a client back to a restarted replica as soon as it listens), or
/// answers 503 while no leader is known; a leader serves its own.
pub async fn when_ready(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let replica = app.replica.clone();
    if app.state.is_ready() || app.state.is_leader() {
        return read_your_writes(&replica, request, next).await;
    }
    if request.headers().contains_key(FORWARDED_HEADER) {
        // Forwarded here as if this were the leader: the sender asks the next one.
        return not_leader();
    }
    forward(&app, &replica, request).await
}

/// The cookie that carries how far a client's last write was applied.
pub const APPLIED_COOKIE: &str = "isucondition_applied";

/// Read-your-writes across replicas: a client's write answers with a cookie naming the log
/// index this replica had applied when it answered, and any later request of that client,
/// on whichever replica (nginx moves a client when its replica dies), first waits until
/// that replica has applied as far (at most 2 s).
async fn read_your_writes(replica: &Replica, request: Request, next: Next) -> Response {
    let seen = request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().strip_prefix(APPLIED_COOKIE)?.strip_prefix('='))
        .filter_map(|index| index.parse::<u64>().ok())
        .max();
    if let Some(seen) = seen {
        if seen > replica.applied_index() && !replica.wait_applied(seen, APPLY_WAIT).await {
            tracing::warn!(seen, "a client's last write was not applied here in time");
        }
    }
    let wrote = !matches!(*request.method(), Method::GET | Method::HEAD);
    let mut response = next.run(request).await;
    if wrote && response.status().is_success() {
        let cookie = format!(
            "{APPLIED_COOKIE}={}; Path=/; HttpOnly; SameSite=Lax",
            replica.applied_index()
        );
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

/// 503 to a replica that forwarded a request here as if this replica led.
fn not_leader() -> Response {
    let mut refused = unavailable("this replica does not lead; try again");
    refused
        .headers_mut()
        .insert(NOT_LEADER_HEADER, HeaderValue::from_static("1"));
    refused
}

fn unavailable(message: &'static str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, shared::error::TEXT_PLAIN)],
        message,
    )
        .into_response()
}
