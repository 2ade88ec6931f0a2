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
//! when they start, every tenth time, and once when pushes recover.
//!
//! Batches go as frames of one long request per coordinator, a stream
//! ([`COORDINATOR_LATEST_STREAM`], see [`shared::protocol::LATEST_STREAM`]), so a batch costs
//! no HTTP exchange of its own. The coordinator acknowledges the frames it applied in its
//! answer, which comes while the request still goes on; a batch counts as pushed (its
//! push lag and size are recorded) only when acknowledged. A stream whose oldest frame
//! waits [`ACK_WAIT`] for its acknowledgment (a coordinator stopped, or a network that drops
//! packets silently: the frames wait in the connection's buffers) is dropped as a failed
//! push. Each stream starts with the latest condition of every published ISU: whatever a
//! stream that broke had not had acknowledged is in the next one's first frame, which
//! carries the oldest change of those frames for its lag. A stream whose queue of frames is
//! full (the coordinator stopped reading) counts as a failed push too. A coordinator without
//! the stream route (an older build, during a rollout) gets one request per batch for
//! [`JSON_FOR`], then a stream is tried again; in the binary form ([`LATEST_BINARY`]), or in
//! JSON for [`JSON_FOR`] after it refused the binary form.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use parking_lot::Mutex;
use shared::backoff::Backoff;
use shared::protocol::{
    encode_latest, latest_frame, LatestBatch, LatestItem, StreamAnswer, StreamAnswers, COORDINATOR_LATEST,
    COORDINATOR_LATEST_STREAM, LATEST_BINARY, LATEST_STREAM, SECRET_HEADER,
};
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
/// binary form is tried again; and one request per batch after a coordinator had no stream
/// route, before a stream is tried again.
pub const JSON_FOR: Duration = Duration::from_secs(5);
/// Frames a stream queues while its coordinator does not read them (then pushes fail).
const STREAM_FRAMES_QUEUED: usize = 16;
/// How long a worker that stops waits for a coordinator to read the end of its stream.
const STREAM_END_WAIT: Duration = Duration::from_secs(2);
/// How long a frame waits for its acknowledgment before its stream is dropped (the
/// coordinator applies a frame within milliseconds unless it stopped or the network did).
pub const ACK_WAIT: Duration = Duration::from_secs(2);

/// What one push did.
enum Pushed {
    Nothing,
    Sent,
    /// Queued on a stream: pushed once the coordinator acknowledges it.
    Queued,
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
    /// For streams: no bound on a request's whole time, only on connecting.
    stream_client: reqwest::Client,
    /// Each coordinator's base URL.
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
        // Registered from the start, so the push lag's series (the rules' p99) exists before the
        // first push.
        let _ = metrics::histogram!(PUSH_LAG_SECONDS);
        let client = node_http::internal_client()
            .timeout(Duration::from_secs(2))
            .pool_max_idle_per_host(4)
            .build()?;
        let stream_client = node_http::internal_client()
            .connect_timeout(Duration::from_secs(2))
            .build()?;
        let mut secret =
            reqwest::header::HeaderValue::from_str(secret).context("the cluster secret is not a valid header value")?;
        secret.set_sensitive(true);
        Ok(Pusher {
            store,
            client,
            stream_client,
            urls: coordinator_urls
                .iter()
                .map(|url| url.trim_end_matches('/').to_owned())
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
                store: self.store.clone(),
                client: self.client.clone(),
                stream_client: self.stream_client.clone(),
                url: format!("{url}{COORDINATOR_LATEST}"),
                stream_url: format!("{url}{COORDINATOR_LATEST_STREAM}"),
                secret: self.secret.clone(),
                wake: wake.clone(),
                json_until: None,
                stream: None,
                batches_until: None,
                ended: None,
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

/// Opens a stream to `url`: its request runs in a task of its own, its body the frames
/// queued; the task reads the coordinator's acknowledgments as they come.
fn open_stream(client: &reqwest::Client, url: &str, secret: &reqwest::header::HeaderValue) -> OpenStream {
    let (frames, queued) = tokio::sync::mpsc::channel(STREAM_FRAMES_QUEUED);
    let request = client
        .post(url)
        .header(SECRET_HEADER, secret.clone())
        .header(reqwest::header::CONTENT_TYPE, LATEST_STREAM)
        .body(reqwest::Body::wrap(shared::protocol::FrameBody(queued)));
    let (answered, answer) = tokio::sync::oneshot::channel();
    let (acknowledge, acked) = tokio::sync::watch::channel(0);
    let task = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
        let outcome = read_answer(request, &acknowledge).await;
        let _ = answered.send(outcome);
    }));
    OpenStream {
        frames,
        queued: 0,
        unacked: VecDeque::new(),
        acked,
        answer,
        task,
    }
}

/// Sends a stream's request and reads its answer: each acknowledgment into `acknowledge`,
/// and at last why the stream ended (the status of an answer refused at once, or the one
/// its last line gives).
async fn read_answer(request: reqwest::RequestBuilder, acknowledge: &tokio::sync::watch::Sender<u64>) -> StreamOutcome {
    let mut response = request.send().await.map_err(|error| shared::error_chain(&error))?;
    if response.status() != reqwest::StatusCode::OK {
        return Ok(response.status());
    }
    let mut answers = StreamAnswers::default();
    loop {
        let chunk = response
            .chunk()
            .await
            .map_err(|error| shared::error_chain(&error))?
            .ok_or("the answer ended without saying why")?;
        for answer in answers.push(&chunk).map_err(|error| error.to_string())? {
            match answer {
                StreamAnswer::Applied(frames) => {
                    acknowledge.send_replace(frames);
                }
                StreamAnswer::End { status, reason } => {
                    let status = reqwest::StatusCode::from_u16(status).map_err(|error| error.to_string())?;
                    if status != reqwest::StatusCode::OK {
                        tracing::debug!(%status, %reason, "latest stream ended by the coordinator");
                    }
                    return Ok(status);
                }
            }
        }
    }
}

/// What happened to a stream.
enum StreamEvent {
    /// The coordinator acknowledged more frames.
    Acknowledged,
    /// Its oldest frame waited [`ACK_WAIT`] for its acknowledgment.
    Late,
    /// Its request ended.
    Ended(StreamOutcome),
}

/// Resolves at the next event of `stream` (never without a stream).
async fn stream_event(stream: Option<&mut OpenStream>) -> StreamEvent {
    let Some(stream) = stream else {
        return std::future::pending().await;
    };
    let late_at = stream.unacked.front().map(|oldest| oldest.queued_at + ACK_WAIT);
    let late = async move {
        match late_at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        // Once the answer is read to its end, the sender is gone: its end comes next.
        Ok(()) = stream.acked.changed() => StreamEvent::Acknowledged,
        () = late => StreamEvent::Late,
        ended = &mut stream.answer => {
            StreamEvent::Ended(ended.unwrap_or_else(|_| Err("the stream's request was dropped".to_owned())))
        }
    }
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
    store: Store,
    client: reqwest::Client,
    stream_client: reqwest::Client,
    /// Where one request per batch goes.
    url: String,
    stream_url: String,
    secret: reqwest::header::HeaderValue,
    wake: TargetWake,
    /// After the coordinator refused a binary batch: JSON until then, then binary again
    /// (the coordinator may have been upgraded meanwhile). `None`: binary.
    json_until: Option<Instant>,
    /// The stream open to this coordinator.
    stream: Option<OpenStream>,
    /// After the coordinator had no stream route: one request per batch until then.
    batches_until: Option<Instant>,
    /// How the last stream ended, until the next push looks at it.
    ended: Option<StreamOutcome>,
}

/// A stream's queue of frames (its request's body), the frames not acknowledged yet, and
/// its request's outcome. Dropping it ends the request (and its connection).
struct OpenStream {
    frames: tokio::sync::mpsc::Sender<Bytes>,
    /// Frames queued so far.
    queued: u64,
    /// Frames queued and not acknowledged, oldest first.
    unacked: VecDeque<Unacked>,
    /// How many frames the coordinator has acknowledged.
    acked: tokio::sync::watch::Receiver<u64>,
    answer: tokio::sync::oneshot::Receiver<StreamOutcome>,
    /// The request's task (aborted with the stream).
    task: tokio_util::task::AbortOnDropHandle<()>,
}

/// A frame waiting for its acknowledgment.
struct Unacked {
    /// Its number in the stream (from 1).
    number: u64,
    queued_at: Instant,
    items: usize,
    /// When the oldest change it carries was queued.
    oldest: Option<std::time::Instant>,
}

impl OpenStream {
    /// Records the frames acknowledged since last asked (their sizes and push lags).
    fn take_acknowledged(&mut self) {
        let acked = *self.acked.borrow_and_update();
        while self.unacked.front().is_some_and(|frame| frame.number <= acked) {
            let frame = self.unacked.pop_front().expect("a front frame");
            record_pushed(frame.items, frame.oldest);
        }
    }

    /// The oldest change among the frames not acknowledged.
    fn oldest_unacked(&self) -> Option<std::time::Instant> {
        self.unacked.iter().filter_map(|frame| frame.oldest).min()
    }
}

/// Records a batch of `items` the coordinator took, the oldest change it carried queued at
/// `oldest`.
fn record_pushed(items: usize, oldest: Option<std::time::Instant>) {
    metrics::histogram!(BATCH_ITEMS).record(items as f64);
    if let Some(oldest) = oldest {
        metrics::histogram!(PUSH_LAG_SECONDS).record(oldest.elapsed().as_secs_f64());
    }
}

/// How a stream's request ended: the coordinator's status, or why there was none.
type StreamOutcome = Result<reqwest::StatusCode, String>;

/// What pushing on a stream came to.
enum StreamPush {
    Done(Pushed),
    /// The coordinator has no stream route: what is pending goes as one request.
    NoRoute,
}

impl Target {
    async fn run(mut self, stop: CancellationToken) {
        let tick = self.wake.tick.clone();
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        let mut retry_at = Instant::now();
        loop {
            let pushed = tokio::select! {
                () = tick.notified() => {
                    if Instant::now() < retry_at {
                        continue;
                    }
                    self.push_pending().await
                }
                event = stream_event(self.stream.as_mut()) => match event {
                    StreamEvent::Acknowledged => {
                        if let Some(stream) = self.stream.as_mut() {
                            stream.take_acknowledged();
                        }
                        Pushed::Sent
                    }
                    StreamEvent::Late => {
                        self.drop_stream();
                        Pushed::Failed(format!("no acknowledgment on the latest stream for {ACK_WAIT:?}"))
                    }
                    StreamEvent::Ended(ended) => {
                        // Another generation: what it was given is stale. Otherwise what it had
                        // not had acknowledged is pending again. The next push looks at why.
                        if matches!(ended, Ok(reqwest::StatusCode::PRECONDITION_FAILED)) {
                            self.stream = None;
                        } else {
                            self.drop_stream();
                        }
                        self.ended = Some(ended);
                        continue;
                    }
                },
                () = stop.cancelled() => {
                    if let Pushed::RefusedBinary = self.push_pending().await {
                        self.push_pending().await;
                    }
                    self.end_stream().await;
                    return;
                }
            };
            match pushed {
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
                // A frame counts once acknowledged.
                Pushed::Queued => {}
            }
        }
    }

    /// Drops the open stream: what it had not had acknowledged (every published ISU, and the
    /// oldest change of its frames not acknowledged) is pending again.
    fn drop_stream(&mut self) {
        let Some(mut stream) = self.stream.take() else {
            return;
        };
        stream.take_acknowledged();
        let oldest = stream.oldest_unacked();
        drop(stream);
        self.pend_every_published(oldest);
    }

    /// Pushes what is pending for this coordinator: on its stream, or as one request.
    async fn push_pending(&mut self) -> Pushed {
        if self.batches_until.is_none_or(|until| Instant::now() >= until) {
            match self.push_on_stream().await {
                StreamPush::Done(pushed) => return pushed,
                StreamPush::NoRoute => {
                    tracing::warn!(url = %self.stream_url, stream_again_in_s = JSON_FOR.as_secs(), "the coordinator has no latest stream: one request per batch");
                    self.batches_until = Some(Instant::now() + JSON_FOR);
                }
            }
        }
        self.push_batch().await
    }

    /// Queues what is pending as one frame of this coordinator's stream, opening one (whose
    /// first frame holds every published ISU) when none is open.
    async fn push_on_stream(&mut self) -> StreamPush {
        if let Some(ended) = self.ended.take() {
            // The coordinator answered (it ends a stream only for a reason) or the connection
            // broke (see the run loop).
            match ended {
                Ok(reqwest::StatusCode::NOT_FOUND | reqwest::StatusCode::METHOD_NOT_ALLOWED) => {
                    // What the ended stream was given is pending again (see the run loop):
                    // it goes in the next request.
                    return StreamPush::NoRoute;
                }
                Ok(reqwest::StatusCode::PRECONDITION_FAILED) => {
                    // Another generation: as for a batch, nothing to do but go on (a replica
                    // that adopts this one later asks for all of it again).
                    tracing::debug!(url = %self.stream_url, "latest stream refused as stale");
                }
                Ok(status) => {
                    return StreamPush::Done(Pushed::Failed(format!("the stream ended with status {status}")))
                }
                Err(reason) => return StreamPush::Done(Pushed::Failed(reason)),
            }
        }
        let Pending { shard, entries, oldest } = std::mem::take(&mut *self.wake.pending.lock());
        let Some(shard) = shard else {
            return StreamPush::Done(Pushed::Nothing);
        };
        let opening = self.stream.is_none();
        let changed: Vec<_> = if opening {
            let mut every = shard.published_latest();
            let published: std::collections::HashSet<usize> =
                every.iter().map(|(entry, _)| Arc::as_ptr(entry) as usize).collect();
            every.extend(
                entries
                    .into_iter()
                    .filter(|(address, _)| !published.contains(address))
                    .filter_map(|(_, entry)| entry.latest().map(|latest| (entry, latest))),
            );
            every
        } else {
            entries
                .into_values()
                .filter_map(|entry| entry.latest().map(|latest| (entry, latest)))
                .collect()
        };
        if changed.is_empty() {
            return StreamPush::Done(Pushed::Nothing);
        }
        let count = changed.len();
        let frame = Bytes::from(latest_frame(&encode_batch(&shard, &changed, true)));
        let stream = self
            .stream
            .get_or_insert_with(|| open_stream(&self.stream_client, &self.stream_url, &self.secret));
        let reason = match stream.frames.try_send(frame) {
            Ok(()) => {
                stream.queued += 1;
                stream.unacked.push_back(Unacked {
                    number: stream.queued,
                    queued_at: Instant::now(),
                    items: count,
                    oldest,
                });
                return StreamPush::Done(Pushed::Queued);
            }
            Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                "the coordinator does not read its stream".to_owned()
            }
            // The request ended: the next push finds out why.
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => "the stream closed".to_owned(),
        };
        let mut pending = self.wake.pending.lock();
        if pending.shard.as_ref().is_none_or(|held| Arc::ptr_eq(held, &shard)) {
            pending.add(&shard, changed.into_iter().map(|(entry, _)| entry), oldest);
        }
        StreamPush::Done(Pushed::Failed(reason))
    }

    /// Ends the stream (the coordinator applies what it holds, then answers), waiting for its
    /// answer a while.
    async fn end_stream(&mut self) {
        // The request's task runs until this returns; the queue's sender dropped ends its body
        // once the frames queued are sent.
        let Some(OpenStream {
            answer, task: _task, ..
        }) = self.stream.take()
        else {
            return;
        };
        match tokio::time::timeout(STREAM_END_WAIT, answer).await {
            Ok(Ok(Ok(status))) if status.is_success() => {}
            outcome => tracing::warn!(url = %self.stream_url, ?outcome, "the last latest stream did not end cleanly"),
        }
    }

    /// Every published ISU into this coordinator's pending set, `oldest` the oldest change
    /// among them not acknowledged (after a stream whose frames may not have been applied).
    fn pend_every_published(&self, oldest: Option<std::time::Instant>) {
        let shard = self.store.shard();
        let every = shard.published_latest().into_iter().map(|(entry, _)| entry);
        self.wake.pending.lock().add(&shard, every, oldest);
    }

    /// Pushes one batch of what is pending for this coordinator, as one request.
    async fn push_batch(&mut self) -> Pushed {
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
                record_pushed(count, oldest);
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
