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
    #[error("worker {shard:?} unreachable: {source}")]
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
    fn is_transient(&self) -> bool {
        self.status().is_none_or(|status| status.is_server_error())
    }
}

#[derive(Clone)]
pub struct WorkerClient {
    client: reqwest::Client,
    base_urls: [String; 2],
    secret: String,
}

/// Long enough for a large reset; other calls finish in microseconds on a LAN,
/// and a registration must answer within the bench's 1 s request timeout.
const RESET_TIMEOUT: Duration = Duration::from_secs(15);
const CALL_TIMEOUT: Duration = Duration::from_millis(500);
/// Idempotent calls are retried (first pause 20 ms, doubling) until this much time has passed.
const RETRY_BUDGET: Duration = Duration::from_millis(1500);
const RETRY_FIRST_DELAY: Duration = Duration::from_millis(20);

impl WorkerClient {
    pub fn new(worker_a_url: &str, worker_b_url: &str, secret: &str) -> anyhow::Result<WorkerClient> {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(32)
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
        let response = self
            .client
            .post(format!("{}{path}", self.base_urls[shard.index()]))
            .header(SECRET_HEADER, &self.secret)
            .timeout(timeout)
            .json(body)
            .send()
            .await
            .map_err(|source| WorkerCallError::Transport { shard, source })?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(WorkerCallError::Status { shard, path, status })
        }
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

    pub async fn sync_users(&self, sync: &UserSync) -> Result<(), WorkerCallError> {
        let (a, b) = tokio::join!(
            self.post(Shard::A, WORKER_USERS, sync, CALL_TIMEOUT),
            self.post(Shard::B, WORKER_USERS, sync, CALL_TIMEOUT)
        );
        a.and(b)
    }

    pub async fn provisional(&self, shard: Shard, isu: &ProvisionalIsu) -> Result<(), WorkerCallError> {
        self.post(shard, WORKER_PROVISIONAL, isu, CALL_TIMEOUT).await
    }

    /// Idempotent, so retried: once JIA has activated an ISU, giving up on a
    /// passing network fault would cost the registration.
    pub async fn publish(&self, shard: Shard, isu: &PublishIsu) -> Result<(), WorkerCallError> {
        self.post_retrying(shard, WORKER_PUBLISH, isu).await
    }

    /// Idempotent, so retried: a leftover provisional ISU would accept posts nobody can read.
    pub async fn rollback(&self, shard: Shard, isu: &RollbackIsu) -> Result<(), WorkerCallError> {
        self.post_retrying(shard, WORKER_ROLLBACK, isu).await
    }

    /// Retries transport errors and 5xx answers with a short backoff; a 4xx is final.
    async fn post_retrying<T: Serialize + ?Sized>(
        &self,
        shard: Shard,
        path: &'static str,
        body: &T,
    ) -> Result<(), WorkerCallError> {
        let deadline = tokio::time::Instant::now() + RETRY_BUDGET;
        let mut delay = RETRY_FIRST_DELAY;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.post(shard, path, body, CALL_TIMEOUT.min(left)).await {
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
