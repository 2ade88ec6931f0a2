//! The only place that builds worker URLs: internal calls from the coordinator to the workers.

use std::time::Duration;

use reqwest::StatusCode;
use serde::Serialize;
use shared::placement::Shard;
use shared::protocol::{
    Health, ProvisionalIsu, PublishIsu, ResendLatest, RollbackIsu, UserSync, HEALTH, SECRET_HEADER, WORKER_PROVISIONAL,
    WORKER_PUBLISH, WORKER_RESEND_LATEST, WORKER_RESET, WORKER_ROLLBACK, WORKER_USERS,
};

#[derive(Debug, thiserror::Error)]
pub enum WorkerCallError {
    #[error("worker {shard:?} unreachable: {}", shared::error_chain(source))]
    Transport {
        shard: Shard,
        #[source]
        source: reqwest::Error,
    },
    #[error("worker {shard:?} answered {status} to {path}")]
    Status {
        shard: Shard,
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
    base_urls: [String; 2],
    secret: String,
}

/// Long enough for a large reset.
const RESET_TIMEOUT: Duration = Duration::from_secs(15);
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
    pub fn new(worker_a_url: &str, worker_b_url: &str, secret: &str) -> anyhow::Result<WorkerClient> {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .http2_prior_knowledge()
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build()?;
        Ok(WorkerClient {
            client,
            base_urls: [
                worker_a_url.trim_end_matches('/').to_owned(),
                worker_b_url.trim_end_matches('/').to_owned(),
            ],
            secret: secret.to_owned(),
        })
    }

    async fn post<T: Serialize + ?Sized>(
        &self,
        shard: Shard,
        path: &'static str,
        body: &T,
        timeout: Duration,
    ) -> Result<(), WorkerCallError> {
        let started = std::time::Instant::now();
        let outcome = self
            .client
            .post(format!("{}{path}", self.base_urls[shard.index()]))
            .header(SECRET_HEADER, &self.secret)
            .timeout(timeout)
            .json(body)
            .send()
            .await;
        let result = match outcome {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(WorkerCallError::Status {
                shard,
                path,
                status: response.status(),
            }),
            Err(source) => Err(WorkerCallError::Transport { shard, source }),
        };
        let outcome = match &result {
            Ok(()) => "ok",
            Err(WorkerCallError::Status { .. }) => "status",
            Err(WorkerCallError::Transport { source, .. }) if source.is_timeout() => "timeout",
            Err(WorkerCallError::Transport { .. }) => "transport",
        };
        shared::telemetry::record_outgoing_call(shard.role(), path, outcome, started.elapsed());
        result
    }

    /// Sends a reset body (serialised off the async threads by the caller).
    pub async fn reset(&self, shard: Shard, body: bytes::Bytes) -> Result<(), WorkerCallError> {
        let response = self
            .client
            .post(format!("{}{WORKER_RESET}", self.base_urls[shard.index()]))
            .header(SECRET_HEADER, &self.secret)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .timeout(RESET_TIMEOUT)
            .body(body)
            .send()
            .await
            .map_err(|source| WorkerCallError::Transport { shard, source })?;
        match response.status() {
            status if status.is_success() => Ok(()),
            status => Err(WorkerCallError::Status {
                shard,
                path: WORKER_RESET,
                status,
            }),
        }
    }

    /// A worker's `/healthz` (its generation tells whether it lost its state).
    pub async fn health(&self, shard: Shard) -> Result<Health, WorkerCallError> {
        let response = self
            .client
            .get(format!("{}{HEALTH}", self.base_urls[shard.index()]))
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .map_err(|source| WorkerCallError::Transport { shard, source })?;
        let status = response.status();
        if !status.is_success() {
            return Err(WorkerCallError::Status {
                shard,
                path: HEALTH,
                status,
            });
        }
        response
            .json()
            .await
            .map_err(|source| WorkerCallError::Transport { shard, source })
    }

    /// Asks a worker to push the latest condition of every published ISU again.
    pub async fn resend_latest(&self, shard: Shard, generation: u64) -> Result<(), WorkerCallError> {
        self.post(shard, WORKER_RESEND_LATEST, &ResendLatest { generation }, CALL_TIMEOUT)
            .await
    }

    /// One attempt: the [`UserSyncer`](crate::user_sync::UserSyncer) retries.
    pub async fn sync_users(&self, shard: Shard, sync: &UserSync) -> Result<(), WorkerCallError> {
        self.post(shard, WORKER_USERS, sync, CALL_TIMEOUT).await
    }

    /// Idempotent (the worker takes the same registration again without change), so retried:
    /// a registration must not fail because one call met a passing stall.
    pub async fn provisional(&self, shard: Shard, isu: &ProvisionalIsu) -> Result<(), WorkerCallError> {
        self.post_retrying(shard, WORKER_PROVISIONAL, isu, CALL_TIMEOUT, PROVISIONAL_RETRY_BUDGET)
            .await
    }

    /// Idempotent, so retried: once JIA has activated an ISU, giving up on a
    /// passing network fault would cost the registration.
    pub async fn publish(&self, shard: Shard, isu: &PublishIsu) -> Result<(), WorkerCallError> {
        self.post_retrying(shard, WORKER_PUBLISH, isu, CALL_TIMEOUT, RETRY_BUDGET)
            .await
    }

    /// Idempotent, so retried: a leftover provisional ISU would accept posts nobody can read.
    pub async fn rollback(&self, shard: Shard, isu: &RollbackIsu) -> Result<(), WorkerCallError> {
        self.post_retrying(shard, WORKER_ROLLBACK, isu, CALL_TIMEOUT, RETRY_BUDGET)
            .await
    }

    /// Retries transport errors and 5xx answers with a short backoff; a 4xx is final.
    async fn post_retrying<T: Serialize + ?Sized>(
        &self,
        shard: Shard,
        path: &'static str,
        body: &T,
        attempt_timeout: Duration,
        budget: Duration,
    ) -> Result<(), WorkerCallError> {
        let deadline = tokio::time::Instant::now() + budget;
        let mut delay = RETRY_FIRST_DELAY;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.post(shard, path, body, attempt_timeout.min(left)).await {
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
