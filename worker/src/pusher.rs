//! The latest-condition pusher: an actor that, every interval (10 ms by
//! default), sends the coordinator one batch with the latest condition of each
//! published ISU that changed, and nothing when nothing changed. A failed push
//! puts its ISUs back in the queue, so the coordinator eventually converges
//! (it keeps the newest timestamp, so a repeat is harmless). The queue holds
//! each ISU at most once and the latest condition is read when a batch is
//! built, so while the coordinator is down memory stays bounded by the number
//! of ISUs however many conditions arrive. Failed pushes back off
//! exponentially (20 ms doubling, capped at [`MAX_BACKOFF`]) and are logged
//! once when they start, every tenth time, and once when pushes recover. Batches go in the
//! binary form ([`LATEST_BINARY`]); a coordinator that refuses it (an older build, during a
//! rollout) gets JSON for [`JSON_FOR`], then the binary form is tried again.

use std::time::Duration;

use anyhow::Context;

use tokio::time::Instant;

use shared::backoff::Backoff;
use shared::protocol::{encode_latest, LatestBatch, LatestItem, COORDINATOR_LATEST, LATEST_BINARY, SECRET_HEADER};
use shared::telemetry::{BATCH_ITEMS, PUSH_LAG_SECONDS};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::store::Store;

/// First pause after a failed push.
const FIRST_BACKOFF: Duration = Duration::from_millis(20);
/// Longest pause between attempts while the coordinator is unreachable.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How long batches go as JSON after the coordinator refused the binary form, before the
/// binary form is tried again.
pub const JSON_FOR: Duration = Duration::from_secs(5);

/// What one push did.
enum Pushed {
    Nothing,
    Sent,
    /// The coordinator refused the binary form: the batch is queued again, for JSON.
    RefusedBinary,
    Failed(String),
}

pub struct Pusher {
    store: Store,
    client: reqwest::Client,
    url: String,
    /// Checked once at start (a secret that is no valid header value stops the worker), and
    /// marked sensitive, so it stays out of debug output.
    secret: reqwest::header::HeaderValue,
    interval: Duration,
    /// After the coordinator refused a binary batch: JSON until then, then binary again
    /// (the coordinator may have been upgraded meanwhile). `None`: binary.
    json_until: Option<Instant>,
}

impl Pusher {
    pub fn new(store: Store, coordinator_url: &str, secret: &str, interval: Duration) -> anyhow::Result<Pusher> {
        let client = node_http::internal_client()
            .timeout(Duration::from_secs(2))
            .pool_max_idle_per_host(4)
            .build()?;
        let mut secret =
            reqwest::header::HeaderValue::from_str(secret).context("the cluster secret is not a valid header value")?;
        secret.set_sensitive(true);
        Ok(Pusher {
            store,
            client,
            url: format!("{}{COORDINATOR_LATEST}", coordinator_url.trim_end_matches('/')),
            secret,
            interval,
            json_until: None,
        })
    }

    /// Runs until `cancel` fires, then pushes what is left once (twice if the coordinator
    /// refused the binary form of that last batch).
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        let mut retry_at = Instant::now();
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    if Instant::now() < retry_at {
                        continue;
                    }
                    match self.push_changed().await {
                        Pushed::Failed(reason) => {
                            let failure = backoff.failed();
                            if failure.log {
                                tracing::warn!(%reason, failures = failure.failures, retry_in_ms = failure.pause.as_millis() as u64, "latest push failed; will retry");
                            }
                            retry_at = Instant::now() + failure.pause;
                        }
                        Pushed::Sent | Pushed::Nothing | Pushed::RefusedBinary => {
                            let failures = backoff.succeeded();
                            if failures > 0 {
                                tracing::info!(failures, "latest pushes recovered");
                            }
                        }
                    }
                }
                () = cancel.cancelled() => {
                    if let Pushed::RefusedBinary = self.push_changed().await {
                        self.push_changed().await;
                    }
                    return;
                }
            }
        }
    }

    /// Pushes one batch of what changed since the last one.
    async fn push_changed(&mut self) -> Pushed {
        let shard = self.store.shard();
        let (changed, oldest) = shard.take_changed();
        if changed.is_empty() {
            return Pushed::Nothing;
        }
        let count = changed.len();
        let binary = self.json_until.is_none_or(|until| Instant::now() >= until);
        let body = {
            let messages = shard.messages.view();
            let items = changed.iter().map(|(entry, latest)| LatestItem {
                uuid: &entry.uuid,
                timestamp: latest.timestamp,
                flags: latest.flags,
                message: messages.text(latest.message),
            });
            if binary {
                encode_latest(shard.generation, items)
            } else {
                let batch = LatestBatch {
                    generation: shard.generation,
                    items: items.map(|item| item.to_condition()).collect(),
                };
                serde_json::to_vec(&batch).expect("a latest batch encodes")
            }
        };
        let content_type = if binary { LATEST_BINARY } else { "application/json" };
        let result = self
            .client
            .post(&self.url)
            .header(SECRET_HEADER, self.secret.clone())
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await;
        match result {
            Ok(response) if response.status().is_success() => {
                metrics::histogram!(BATCH_ITEMS).record(count as f64);
                if let Some(oldest) = oldest {
                    metrics::histogram!(PUSH_LAG_SECONDS).record(oldest.elapsed().as_secs_f64());
                }
                Pushed::Sent
            }
            Ok(response) if response.status() == reqwest::StatusCode::PRECONDITION_FAILED => {
                // The coordinator moved to another generation: this shard is stale, drop the batch.
                tracing::debug!("latest batch refused as stale");
                Pushed::Sent
            }
            Ok(response)
                if binary
                    && matches!(
                        response.status(),
                        reqwest::StatusCode::BAD_REQUEST | reqwest::StatusCode::UNSUPPORTED_MEDIA_TYPE
                    ) =>
            {
                // A coordinator of an older build (400) or one that knows another version
                // (415): JSON for a while, and this batch again at the next tick.
                tracing::warn!(status = %response.status(), retry_binary_in_s = JSON_FOR.as_secs(), "the coordinator refused a binary latest batch: sending JSON");
                self.json_until = Some(Instant::now() + JSON_FOR);
                shard.requeue(changed.into_iter().map(|(entry, _)| entry), oldest);
                Pushed::RefusedBinary
            }
            failed => {
                let reason = match failed {
                    Ok(response) => format!("status {}", response.status()),
                    Err(error) => error.to_string(),
                };
                shard.requeue(changed.into_iter().map(|(entry, _)| entry), oldest);
                Pushed::Failed(reason)
            }
        }
    }
}
