//! The latest-condition pusher: an actor that, every interval (10 ms by default), sends each
//! coordinator (one, or every replica of a group) one batch with the latest condition of
//! each published ISU that changed, and nothing when nothing changed.
//!
//! The shard's push queue is taken once per tick and its ISUs added to one pending set per
//! coordinator; each coordinator has its own task sending its set when the tick wakes it, so
//! a coordinator that is slow or stopped (a replica paused, a takeover) delays only its own
//! batches. One ticker drives them all, so an ISU queued just after a tick waits one
//! interval, not one more for its coordinator's own ticker to come round. A failed push
//! puts its ISUs back in that coordinator's set, so every coordinator eventually converges
//! (it keeps the newest timestamp, so a repeat is harmless). A set holds each ISU at most once
//! and the latest condition is read when a batch is built, so while a coordinator is down
//! memory stays bounded by the number of ISUs however many conditions arrive. Failed pushes
//! back off exponentially (20 ms doubling, capped at [`MAX_BACKOFF`]) and are logged once
//! when they start, every tenth time, and once when pushes recover. Batches go in the binary
//! form ([`LATEST_BINARY`]); a coordinator that refuses it (an older build, during a rollout)
//! gets JSON for [`JSON_FOR`], then the binary form is tried again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use shared::backoff::Backoff;
use shared::protocol::{encode_latest, LatestBatch, LatestItem, COORDINATOR_LATEST, LATEST_BINARY, SECRET_HEADER};
use shared::telemetry::{BATCH_ITEMS, PUSH_LAG_SECONDS};
use tokio::sync::Notify;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::store::{Condition, IsuEntry, Shard, Store};

/// First pause after a failed push.
const FIRST_BACKOFF: Duration = Duration::from_millis(20);
/// Longest pause between attempts while a coordinator is unreachable.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How long batches go as JSON after a coordinator refused the binary form, before the
/// binary form is tried again.
pub const JSON_FOR: Duration = Duration::from_secs(5);

/// What one push did.
enum Pushed {
    Nothing,
    Sent,
    /// The coordinator refused the binary form: the batch is pending again, for JSON.
    RefusedBinary,
    Failed(String),
}

/// The ISUs waiting for one coordinator, each once, with the time the oldest was queued.
#[derive(Default)]
struct Pending {
    shard: Option<Arc<Shard>>,
    /// By the entry's address: one entry per ISU of the shard.
    entries: HashMap<usize, Arc<IsuEntry>>,
    oldest: Option<std::time::Instant>,
}

impl Pending {
    /// Adds `entries` of `shard` (a set of another shard, an older generation, is dropped:
    /// the coordinator would refuse it as stale).
    fn add(
        &mut self,
        shard: &Arc<Shard>,
        entries: impl IntoIterator<Item = Arc<IsuEntry>>,
        oldest: Option<std::time::Instant>,
    ) {
        if self.shard.as_ref().is_none_or(|held| !Arc::ptr_eq(held, shard)) {
            *self = Pending {
                shard: Some(shard.clone()),
                ..Pending::default()
            };
        }
        for entry in entries {
            self.entries.insert(Arc::as_ptr(&entry) as usize, entry);
        }
        if let Some(since) = oldest {
            self.oldest = Some(self.oldest.map_or(since, |held| held.min(since)));
        }
    }
}

pub struct Pusher {
    store: Store,
    client: reqwest::Client,
    urls: Vec<String>,
    /// Checked once at start (a secret that is no valid header value stops the worker), and
    /// marked sensitive, so it stays out of debug output.
    secret: reqwest::header::HeaderValue,
    interval: Duration,
}

impl Pusher {
    /// A pusher to every URL of `coordinator_urls` (the coordinator, or each replica).
    pub fn new(store: Store, coordinator_urls: &[String], secret: &str, interval: Duration) -> anyhow::Result<Pusher> {
        anyhow::ensure!(!coordinator_urls.is_empty(), "no coordinator URL to push to");
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
            urls: coordinator_urls
                .iter()
                .map(|url| format!("{}{COORDINATOR_LATEST}", url.trim_end_matches('/')))
                .collect(),
            secret,
            interval,
        })
    }

    /// Runs until `cancel` fires, then pushes what is left once to each coordinator (twice
    /// if it refused the binary form of that last batch).
    pub async fn run(self, cancel: CancellationToken) {
        let stop_targets = CancellationToken::new();
        let mut targets = Vec::new();
        let mut tasks = Vec::new();
        for url in &self.urls {
            let wake = TargetWake::default();
            let target = Target {
                client: self.client.clone(),
                url: url.clone(),
                secret: self.secret.clone(),
                wake: wake.clone(),
                json_until: None,
            };
            targets.push(wake);
            tasks.push(tokio::spawn(target.run(stop_targets.clone())));
        }
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => self.distribute(&targets),
                () = cancel.cancelled() => {
                    self.distribute(&targets);
                    stop_targets.cancel();
                    for task in tasks {
                        let _ = task.await;
                    }
                    return;
                }
            }
        }
    }

    /// Takes the shard's queue into every coordinator's pending set, and wakes each
    /// coordinator's sender that has something to send (new, or put back by a failed push).
    fn distribute(&self, targets: &[TargetWake]) {
        let shard = self.store.shard();
        let (queued, oldest) = shard.take_queued();
        for target in targets {
            let mut pending = target.pending.lock();
            if !queued.is_empty() {
                pending.add(&shard, queued.iter().cloned(), oldest);
            }
            if !pending.entries.is_empty() {
                target.tick.notify_one();
            }
        }
    }
}

/// What the pusher shares with one coordinator's sender: its pending set, and the tick
/// that wakes it.
#[derive(Clone, Default)]
struct TargetWake {
    pending: Arc<Mutex<Pending>>,
    tick: Arc<Notify>,
}

/// A latest batch of `shard` holding `changed`: the binary form ([`LATEST_BINARY`]) or JSON.
pub fn encode_batch(shard: &Shard, changed: &[(Arc<IsuEntry>, Condition)], binary: bool) -> Vec<u8> {
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
}

/// One coordinator's sender.
struct Target {
    client: reqwest::Client,
    url: String,
    secret: reqwest::header::HeaderValue,
    wake: TargetWake,
    /// After the coordinator refused a binary batch: JSON until then, then binary again
    /// (the coordinator may have been upgraded meanwhile). `None`: binary.
    json_until: Option<Instant>,
}

impl Target {
    async fn run(mut self, stop: CancellationToken) {
        let tick = self.wake.tick.clone();
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        let mut retry_at = Instant::now();
        loop {
            tokio::select! {
                () = tick.notified() => {
                    if Instant::now() < retry_at {
                        continue;
                    }
                    match self.push_pending().await {
                        Pushed::Failed(reason) => {
                            let failure = backoff.failed();
                            if failure.log {
                                tracing::warn!(%reason, url = %self.url, failures = failure.failures, retry_in_ms = failure.pause.as_millis() as u64, "latest push failed; will retry");
                            }
                            retry_at = Instant::now() + failure.pause;
                        }
                        Pushed::Sent | Pushed::Nothing | Pushed::RefusedBinary => {
                            let failures = backoff.succeeded();
                            if failures > 0 {
                                tracing::info!(failures, url = %self.url, "latest pushes recovered");
                            }
                        }
                    }
                }
                () = stop.cancelled() => {
                    if let Pushed::RefusedBinary = self.push_pending().await {
                        self.push_pending().await;
                    }
                    return;
                }
            }
        }
    }

    /// Pushes one batch of what is pending for this coordinator.
    async fn push_pending(&mut self) -> Pushed {
        let Pending { shard, entries, oldest } = std::mem::take(&mut *self.wake.pending.lock());
        let Some(shard) = shard else {
            return Pushed::Nothing;
        };
        let changed: Vec<_> = entries
            .into_values()
            .filter_map(|entry| entry.latest().map(|latest| (entry, latest)))
            .collect();
        if changed.is_empty() {
            return Pushed::Nothing;
        }
        let count = changed.len();
        let binary = self.json_until.is_none_or(|until| Instant::now() >= until);
        let body = encode_batch(&shard, &changed, binary);
        let content_type = if binary { LATEST_BINARY } else { "application/json" };
        let result = self
            .client
            .post(&self.url)
            .header(SECRET_HEADER, self.secret.clone())
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await;
        let pending = self.wake.pending.clone();
        let put_back = |changed: Vec<(Arc<IsuEntry>, _)>| {
            let mut pending = pending.lock();
            // A set of a newer shard (an `/initialize` meanwhile) is kept: this batch is stale.
            if pending.shard.as_ref().is_none_or(|held| Arc::ptr_eq(held, &shard)) {
                pending.add(&shard, changed.into_iter().map(|(entry, _)| entry), oldest);
            }
        };
        match result {
            Ok(response) if response.status().is_success() => {
                metrics::histogram!(BATCH_ITEMS).record(count as f64);
                if let Some(oldest) = oldest {
                    metrics::histogram!(PUSH_LAG_SECONDS).record(oldest.elapsed().as_secs_f64());
                }
                Pushed::Sent
            }
            Ok(response) if response.status() == reqwest::StatusCode::PRECONDITION_FAILED => {
                // The coordinator moved to another generation: this shard is stale, drop the
                // batch (a replica that adopts this generation later asks for all of it again).
                tracing::debug!(url = %self.url, "latest batch refused as stale");
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
                tracing::warn!(status = %response.status(), url = %self.url, retry_binary_in_s = JSON_FOR.as_secs(), "the coordinator refused a binary latest batch: sending JSON");
                self.json_until = Some(Instant::now() + JSON_FOR);
                put_back(changed);
                Pushed::RefusedBinary
            }
            failed => {
                let reason = match failed {
                    Ok(response) => format!("status {}", response.status()),
                    Err(error) => error.to_string(),
                };
                put_back(changed);
                Pushed::Failed(reason)
            }
        }
    }
}
