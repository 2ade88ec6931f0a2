//! The only place that builds worker URLs: internal calls from the coordinator to the workers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde::Serialize;
use shared::placement_map::{Cell, CellId, PlacementMap};
use shared::protocol::{
    ActivateIsus, ExportReport, ExportSubject, ForgetSubject, Health, ProvisionalIsu, PublishIsu, ResendLatest,
    RollbackIsu, UserSync, HEALTH, SECRET_HEADER, TERM_HEADER, WORKER_ACTIVATE, WORKER_EXPORT, WORKER_FORGET,
    WORKER_PLACEMENT, WORKER_PROVISIONAL, WORKER_PUBLISH, WORKER_RESEND_LATEST, WORKER_RESET, WORKER_ROLLBACK,
    WORKER_USERS,
};

#[derive(Debug, thiserror::Error)]
pub enum WorkerCallError {
    #[error("{worker} unreachable: {}", shared::error_chain(source))]
    Transport {
        worker: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{worker} answered {status} to {path}")]
    Status {
        worker: String,
        path: &'static str,
        status: StatusCode,
    },
}

impl WorkerCallError {
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            WorkerCallError::Status { status, .. } => Some(*status),
            WorkerCallError::Transport { .. } => None,
        }
    }

    /// Worth retrying: the worker was unreachable or failed, rather than refused.
    pub fn is_transient(&self) -> bool {
        self.status().is_none_or(|status| status.is_server_error())
    }
}

#[derive(Clone)]
pub struct WorkerClient {
    client: reqwest::Client,
    /// The cells of the current placement map, in id order (see [`WorkerClient::follow`]).
    workers: std::sync::Arc<parking_lot::RwLock<std::sync::Arc<[Endpoint]>>>,
    secret: String,
    /// The term this replica leads (or last led) in, sent as [`TERM_HEADER`]; 0 (a lone
    /// coordinator, or a replica that never led) sends none.
    term: std::sync::Arc<AtomicU64>,
}

/// One worker as the client calls it.
#[derive(PartialEq, Eq)]
struct Endpoint {
    /// `worker-<cell>`: logs and metrics.
    role: String,
    base_url: String,
}

fn endpoints(cells: &[Cell]) -> std::sync::Arc<[Endpoint]> {
    cells
        .iter()
        .map(|cell| Endpoint {
            role: shared::placement_map::worker_role(&cell.name),
            base_url: cell.internal_url.trim_end_matches('/').to_owned(),
        })
        .collect()
}

/// Long enough for a large reset.
const RESET_TIMEOUT: Duration = Duration::from_secs(15);
/// A worker's JIA call: JIA's own timeout (10 s, the worker's client), and some.
const JIA_ACTIVATE_TIMEOUT: Duration = Duration::from_secs(12);
/// A migration's whole history copy.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(600);
/// A call answers in microseconds on a LAN, but on a saturated machine (a bench burst, a test
/// run beside thirty others) in hundreds of milliseconds: a slow worker is not a dead one, and
/// giving up on it turns a slow registration into a failed one. A dead worker is noticed at
/// once anyway (refused or reset connection), and those failures are retried.
const CALL_TIMEOUT: Duration = Duration::from_millis(1000);
/// Idempotent calls are retried (first pause 20 ms, doubling) until this much time has passed.
const RETRY_BUDGET: Duration = Duration::from_millis(3000);
const RETRY_FIRST_DELAY: Duration = Duration::from_millis(20);
/// A provisional registration is on the registration's path before JIA's answer, and a
/// registration whose worker is down must fail within a few seconds: a shorter budget.
const PROVISIONAL_RETRY_BUDGET: Duration = Duration::from_millis(1500);
/// HTTP/2 pings on the idle connection, so a worker that vanished is noticed between calls.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);

impl WorkerClient {
    /// Internal calls go over HTTP/2 (prior knowledge, no TLS): one long-lived connection per
    /// worker carries every call at once. Over HTTP/1.1 a burst of sign-ins and registrations
    /// opened a connection per concurrent call (about 200 per worker at the start of a bench
    /// load, 168 of them closed again right after), on a machine already saturated.
    pub fn new(cells: &[Cell], secret: &str) -> anyhow::Result<WorkerClient> {
        let client = node_http::internal_client()
            .http2_prior_knowledge()
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build()?;
        Ok(WorkerClient {
            client,
            workers: std::sync::Arc::new(parking_lot::RwLock::new(endpoints(cells))),
            secret: secret.to_owned(),
            term: std::sync::Arc::default(),
        })
    }

    /// Calls the cells of `cells` (a map's, in id order) from now on: a map that added a
    /// cell or moved one's URLs.
    pub fn follow(&self, cells: &[Cell]) {
        let endpoints = endpoints(cells);
        let mut workers = self.workers.write();
        if *workers != endpoints {
            *workers = endpoints;
        }
    }

    /// A replica that became the leader in `term`: its calls carry it from now on (a worker
    /// refuses those of an older term once it has seen a newer one). Never lowered.
    pub fn lead_in_term(&self, term: u64) {
        self.term.fetch_max(term, Ordering::AcqRel);
    }

    /// The request with the secret, and the term when this replica has led.
    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let request = request.header(SECRET_HEADER, &self.secret);
        match self.term.load(Ordering::Acquire) {
            0 => request,
            term => request.header(TERM_HEADER, term),
        }
    }

    /// Every cell this client calls, in id order.
    pub fn cells(&self) -> impl Iterator<Item = CellId> {
        (0..self.workers.read().len()).map(|index| index as CellId)
    }

    /// `worker-<cell>`.
    pub fn role(&self, cell: CellId) -> String {
        self.workers.read()[usize::from(cell)].role.clone()
    }

    fn url(&self, cell: CellId, path: &str) -> String {
        format!("{}{path}", self.workers.read()[usize::from(cell)].base_url)
    }

    fn transport(&self, cell: CellId) -> impl FnOnce(reqwest::Error) -> WorkerCallError + '_ {
        move |source| WorkerCallError::Transport {
            worker: self.role(cell),
            source,
        }
    }

    fn status(&self, cell: CellId, path: &'static str, status: StatusCode) -> WorkerCallError {
        WorkerCallError::Status {
            worker: self.role(cell),
            path,
            status,
        }
    }

    async fn post<T: Serialize + ?Sized>(
        &self,
        cell: CellId,
        path: &'static str,
        body: &T,
        timeout: Duration,
    ) -> Result<(), WorkerCallError> {
        self.post_for_response(cell, path, body, timeout).await.map(drop)
    }

    /// POSTs `body` as JSON; a successful answer, or the error; the call's outcome and time
    /// are recorded either way.
    async fn post_for_response<T: Serialize + ?Sized>(
        &self,
        cell: CellId,
        path: &'static str,
        body: &T,
        timeout: Duration,
    ) -> Result<reqwest::Response, WorkerCallError> {
        let started = std::time::Instant::now();
        let outcome = self
            .authorized(self.client.post(self.url(cell, path)))
            .timeout(timeout)
            .json(body)
            .send()
            .await;
        let result = match outcome {
            Ok(response) if response.status().is_success() => Ok(response),
            Ok(response) => Err(self.status(cell, path, response.status())),
            Err(source) => Err(self.transport(cell)(source)),
        };
        let outcome = match &result {
            Ok(_) => "ok",
            Err(WorkerCallError::Status { .. }) => "status",
            Err(WorkerCallError::Transport { source, .. }) if source.is_timeout() => "timeout",
            Err(WorkerCallError::Transport { .. }) => "transport",
        };
        shared::telemetry::record_outgoing_call(&self.role(cell), path, outcome, started.elapsed());
        result
    }

    /// Sends a reset body (serialised off the async threads by the caller).
    pub async fn reset(&self, cell: CellId, body: bytes::Bytes) -> Result<(), WorkerCallError> {
        let response = self
            .authorized(self.client.post(self.url(cell, WORKER_RESET)))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .timeout(RESET_TIMEOUT)
            .body(body)
            .send()
            .await
            .map_err(self.transport(cell))?;
        match response.status() {
            status if status.is_success() => Ok(()),
            status => Err(self.status(cell, WORKER_RESET, status)),
        }
    }

    /// A worker's `/healthz` (its generation tells whether it lost its state).
    pub async fn health(&self, cell: CellId) -> Result<Health, WorkerCallError> {
        let response = self
            .client
            .get(self.url(cell, HEALTH))
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .map_err(self.transport(cell))?;
        let status = response.status();
        if !status.is_success() {
            return Err(self.status(cell, HEALTH, status));
        }
        response.json().await.map_err(self.transport(cell))
    }

    /// A worker's `/metrics` (Prometheus text), for `GET /internal/cells`.
    pub async fn metrics(&self, cell: CellId) -> Result<String, WorkerCallError> {
        let response = self
            .client
            .get(self.url(cell, shared::protocol::METRICS))
            .header(SECRET_HEADER, &self.secret)
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .map_err(self.transport(cell))?;
        match response.status() {
            status if status.is_success() => response.text().await.map_err(self.transport(cell)),
            status => Err(self.status(cell, shared::protocol::METRICS, status)),
        }
    }

    /// Asks a worker to push the latest condition of every published ISU again.
    pub async fn resend_latest(&self, cell: CellId, generation: u64) -> Result<(), WorkerCallError> {
        self.post(cell, WORKER_RESEND_LATEST, &ResendLatest { generation }, CALL_TIMEOUT)
            .await
    }

    /// Every published ISU's latest condition on the worker of `cell`, as a binary batch.
    pub async fn latest_all(&self, cell: CellId, generation: u64) -> Result<bytes::Bytes, WorkerCallError> {
        let response = self
            .post_for_response(
                cell,
                shared::protocol::WORKER_LATEST_ALL,
                &ResendLatest { generation },
                CALL_TIMEOUT,
            )
            .await?;
        response.bytes().await.map_err(self.transport(cell))
    }

    /// Sends the placement map (the worker keeps it if newer than its copy). One attempt: the
    /// coordinator's worker watch sends it again to a worker whose copy is older.
    pub async fn placement(&self, cell: CellId, map: &PlacementMap) -> Result<(), WorkerCallError> {
        self.post(cell, WORKER_PLACEMENT, map, CALL_TIMEOUT).await
    }

    /// One attempt: the [`UserSyncer`](crate::user_sync::UserSyncer) retries.
    pub async fn sync_users(&self, cell: CellId, sync: &UserSync) -> Result<(), WorkerCallError> {
        self.post(cell, WORKER_USERS, sync, CALL_TIMEOUT).await
    }

    /// Idempotent (the worker takes the same registration again without change), so retried:
    /// a registration must not fail because one call met a passing stall.
    pub async fn provisional(&self, cell: CellId, isu: &ProvisionalIsu) -> Result<(), WorkerCallError> {
        self.post_retrying(cell, WORKER_PROVISIONAL, isu, CALL_TIMEOUT, PROVISIONAL_RETRY_BUDGET)
            .await
    }

    /// Has the worker of `cell` ask JIA to activate a registration's ISU and keep JIA's
    /// answer with the registration (see [`shared::protocol::WORKER_JIA_ACTIVATE`]). One
    /// attempt: a failure fails the registration, and leaves it to the leader's sweep, which
    /// finishes it from the worker's copy of JIA's answer or else rolls it back.
    pub async fn jia_activate(
        &self,
        cell: CellId,
        call: &shared::protocol::JiaActivateIsu,
    ) -> Result<shared::protocol::Activation, WorkerCallError> {
        let response = self
            .post_for_response(cell, shared::protocol::WORKER_JIA_ACTIVATE, call, JIA_ACTIVATE_TIMEOUT)
            .await?;
        response.json().await.map_err(self.transport(cell))
    }

    /// Idempotent, so retried: once JIA has activated an ISU, giving up on a
    /// passing network fault would cost the registration.
    pub async fn publish(&self, cell: CellId, isu: &PublishIsu) -> Result<(), WorkerCallError> {
        self.post_retrying(cell, WORKER_PUBLISH, isu, CALL_TIMEOUT, RETRY_BUDGET)
            .await
    }

    /// Idempotent, so retried: a leftover provisional ISU would accept posts nobody can read.
    pub async fn rollback(&self, cell: CellId, isu: &RollbackIsu) -> Result<(), WorkerCallError> {
        self.post_retrying(cell, WORKER_ROLLBACK, isu, CALL_TIMEOUT, RETRY_BUDGET)
            .await
    }

    /// The registrations the worker of `cell` holds provisionally (a new leader ends them).
    pub async fn unpublished(
        &self,
        cell: CellId,
        generation: u64,
    ) -> Result<Vec<shared::protocol::UnpublishedIsu>, WorkerCallError> {
        let response = self
            .post_for_response(
                cell,
                shared::protocol::WORKER_UNPUBLISHED,
                &ResendLatest { generation },
                CALL_TIMEOUT,
            )
            .await?;
        response.json().await.map_err(self.transport(cell))
    }

    /// Asks a migration's source to export its subject to the target; answers once the target
    /// holds the whole history (a slot of a million conditions takes seconds, hence the timeout).
    pub async fn export(&self, cell: CellId, request: &ExportSubject) -> Result<ExportReport, WorkerCallError> {
        let response = self
            .post_for_response(cell, WORKER_EXPORT, request, EXPORT_TIMEOUT)
            .await?;
        response.json().await.map_err(self.transport(cell))
    }

    /// Idempotent (publishing again changes nothing), so retried.
    pub async fn activate(&self, cell: CellId, request: &ActivateIsus) -> Result<(), WorkerCallError> {
        self.post_retrying(cell, WORKER_ACTIVATE, request, CALL_TIMEOUT * 5, RETRY_BUDGET * 5)
            .await
    }

    /// Idempotent (what is gone stays gone), so retried.
    pub async fn forget(&self, cell: CellId, request: &ForgetSubject) -> Result<(), WorkerCallError> {
        // A source that restarted since its export copies the subject again first.
        let (attempt, budget) = match request.target_url {
            Some(_) => (EXPORT_TIMEOUT, EXPORT_TIMEOUT),
            None => (CALL_TIMEOUT * 5, RETRY_BUDGET * 5),
        };
        self.post_retrying(cell, WORKER_FORGET, request, attempt, budget).await
    }

    /// Retries transport errors and 5xx answers with a short backoff; a 4xx is final.
    async fn post_retrying<T: Serialize + ?Sized>(
        &self,
        cell: CellId,
        path: &'static str,
        body: &T,
        attempt_timeout: Duration,
        budget: Duration,
    ) -> Result<(), WorkerCallError> {
        let deadline = tokio::time::Instant::now() + budget;
        let mut delay = RETRY_FIRST_DELAY;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.post(cell, path, body, attempt_timeout.min(left)).await {
                Ok(()) => return Ok(()),
                Err(error) if error.is_transient() && left > delay => {
                    tracing::warn!(%error, "worker call failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(error) => return Err(error),
            }
        }
    }
}
