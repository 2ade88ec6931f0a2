//! The simulated cells' pushes: every interval, each cell builds one binary latest batch
//! ([`encode_latest`]) of the ISUs whose turn it is (a rate per ISU, round robin over the
//! cell's ISUs) and queues it, as a frame ([`latest_frame`]), on one stream per coordinator
//! ([`COORDINATOR_LATEST_STREAM`], [`LATEST_STREAM`]): the worker pusher's default way. Each
//! stream counts the updates it sent and, from the coordinator's acknowledgments, those it
//! applied. A stream the coordinator ends (another generation after a reset, a restart) is
//! opened again; a frame its queue has no room for is counted as dropped.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use shared::dataset::generated::VIRTUAL_START;
use shared::domain::Flags;
use shared::protocol::{
    encode_latest, latest_frame, LatestItem, StreamAnswer, StreamAnswers, COORDINATOR_LATEST_STREAM, LATEST_STREAM,
    SECRET_HEADER,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::{CellSimConfig, SimCell, SimIsu};

/// Frames a stream queues while the coordinator does not read them (as a worker's).
const FRAMES_QUEUED: usize = 16;
/// Pause before a stream that broke is opened again.
const REOPEN_AFTER: Duration = Duration::from_millis(100);
/// How long a stop waits for the coordinators to acknowledge the last frames.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// The message of every simulated condition.
const MESSAGE: &str = "simulated";

/// Running totals of every cell's pushes, to every coordinator.
#[derive(Debug, Default)]
pub struct Counters {
    frames_sent: AtomicU64,
    items_sent: AtomicU64,
    items_applied: AtomicU64,
    items_dropped: AtomicU64,
    streams_broken: AtomicU64,
}

impl Counters {
    pub fn snapshot(&self) -> PushTotals {
        PushTotals {
            frames_sent: self.frames_sent.load(Ordering::Acquire),
            items_sent: self.items_sent.load(Ordering::Acquire),
            items_applied: self.items_applied.load(Ordering::Acquire),
            items_dropped: self.items_dropped.load(Ordering::Acquire),
            streams_broken: self.streams_broken.load(Ordering::Acquire),
        }
    }
}

/// What the pushes came to, summed over the cells and coordinators (an update sent to three
/// replicas counts three times).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PushTotals {
    /// Frames (batches) written to a stream.
    pub frames_sent: u64,
    /// Latest updates in those frames.
    pub items_sent: u64,
    /// Of those, the updates in frames the coordinator acknowledged as applied.
    pub items_applied: u64,
    /// Updates in frames a stream's queue had no room for (the coordinator fell behind).
    pub items_dropped: u64,
    /// Streams that ended other than by the simulator (and were opened again).
    pub streams_broken: u64,
}

/// One batch, queued for one coordinator.
#[derive(Clone)]
struct Frame {
    bytes: Bytes,
    items: u64,
}

/// The running pushes: a batch builder per cell and a stream task per cell and coordinator.
pub struct Pushing {
    stop: CancellationToken,
    builders: Vec<JoinHandle<()>>,
    streams: Vec<JoinHandle<()>>,
}

impl Pushing {
    pub(super) fn start(
        cells: &[Arc<SimCell>],
        config: &CellSimConfig,
        rate_per_isu: f64,
        counters: Arc<Counters>,
    ) -> anyhow::Result<Pushing> {
        anyhow::ensure!(!config.coordinators.is_empty(), "no coordinator to push to");
        let client = node_http::internal_client()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .context("building the pushes' HTTP client")?;
        let mut secret =
            reqwest::header::HeaderValue::from_str(&config.secret).context("the cluster secret is no header value")?;
        secret.set_sensitive(true);
        let stop = CancellationToken::new();
        let (mut builders, mut streams) = (Vec::new(), Vec::new());
        for cell in cells {
            let mut queues = Vec::new();
            for coordinator in &config.coordinators {
                let (queue, frames) = mpsc::channel(FRAMES_QUEUED);
                queues.push(queue);
                let target = StreamTarget {
                    client: client.clone(),
                    url: format!("{}{COORDINATOR_LATEST_STREAM}", coordinator.trim_end_matches('/')),
                    secret: secret.clone(),
                    counters: counters.clone(),
                };
                streams.push(tokio::spawn(target.run(frames)));
            }
            let builder = BatchBuilder {
                cell: cell.clone(),
                queues,
                per_tick: rate_per_isu * config.interval.as_secs_f64(),
                counters: counters.clone(),
            };
            builders.push(tokio::spawn(builder.run(config.interval, stop.clone())));
        }
        Ok(Pushing {
            stop,
            builders,
            streams,
        })
    }

    /// Stops building batches; each stream ends once it sent what was queued and the
    /// coordinator acknowledged it (or after [`STOP_WAIT`]).
    pub(super) async fn stop(self) {
        self.stop.cancel();
        for builder in self.builders {
            let _ = builder.await;
        }
        let deadline = tokio::time::Instant::now() + STOP_WAIT;
        for stream in self.streams {
            let abort = stream.abort_handle();
            if tokio::time::timeout_at(deadline, stream).await.is_err() {
                abort.abort();
            }
        }
    }
}

/// Builds one cell's batches.
struct BatchBuilder {
    cell: Arc<SimCell>,
    queues: Vec<mpsc::Sender<Frame>>,
    /// Updates per ISU per interval.
    per_tick: f64,
    counters: Arc<Counters>,
}

impl BatchBuilder {
    async fn run(self, interval: Duration, stop: CancellationToken) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let (mut owed, mut cursor) = (0.0_f64, 0_usize);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = stop.cancelled() => return,
            }
            let isus = self.cell.isus();
            if isus.is_empty() {
                continue;
            }
            // At most one update per ISU per batch, as a worker's batch holds each ISU once.
            owed = (owed + isus.len() as f64 * self.per_tick).min(isus.len() as f64);
            let count = owed.floor() as usize;
            owed -= count as f64;
            let resend = self.cell.resend.swap(false, Ordering::AcqRel);
            if count == 0 && !resend {
                continue;
            }
            let frame = self.batch(&isus, cursor, count, resend);
            cursor = (cursor + count) % isus.len();
            self.queue(frame);
        }
    }

    /// A frame of `count` ISUs from `cursor` on, each with a new condition one virtual second
    /// after the cell's last batch (and, after a `latest/resend`, every ISU's reset latest).
    fn batch(&self, isus: &[SimIsu], cursor: usize, count: usize, resend: bool) -> Frame {
        let timestamp = self.cell.last_pushed.load(Ordering::Acquire).max(VIRTUAL_START) + 1;
        self.cell.last_pushed.store(timestamp, Ordering::Release);
        let fresh = (0..count).map(|offset| {
            let index = (cursor + offset) % isus.len();
            LatestItem {
                uuid: &isus[index].uuid,
                timestamp,
                flags: Flags((index as u8 ^ timestamp as u8) & Flags::ALL),
                message: MESSAGE,
            }
        });
        let again = isus
            .iter()
            .filter(|_| resend)
            .filter_map(super::routes::reset_item)
            .filter(|item| item.timestamp < timestamp);
        let items: Vec<LatestItem<'_>> = again.chain(fresh).collect();
        let generation = self.cell.generation.load(Ordering::Acquire);
        Frame {
            items: items.len() as u64,
            bytes: Bytes::from(latest_frame(&encode_latest(generation, items))),
        }
    }

    /// Queues `frame` for every coordinator; one whose queue is full misses it.
    fn queue(&self, frame: Frame) {
        for queue in &self.queues {
            if queue.try_send(frame.clone()).is_err() {
                self.counters.items_dropped.fetch_add(frame.items, Ordering::AcqRel);
            }
        }
    }
}

/// One cell's streams to one coordinator, one after another.
struct StreamTarget {
    client: reqwest::Client,
    url: String,
    secret: reqwest::header::HeaderValue,
    counters: Arc<Counters>,
}

/// How a stream ended.
enum StreamEnd {
    /// The simulator stopped and the coordinator acknowledged the end.
    Finished,
    Broken(String),
}

impl StreamTarget {
    /// Streams `frames` until they end, opening a new stream whenever one breaks.
    async fn run(self, mut frames: mpsc::Receiver<Frame>) {
        let mut warned = false;
        loop {
            match self.stream(&mut frames).await {
                StreamEnd::Finished => return,
                StreamEnd::Broken(reason) => {
                    self.counters.streams_broken.fetch_add(1, Ordering::AcqRel);
                    if !warned {
                        tracing::warn!(url = self.url, reason, "a simulated cell's latest stream broke");
                        warned = true;
                    }
                    if frames.is_closed() && frames.is_empty() {
                        return;
                    }
                    tokio::time::sleep(REOPEN_AFTER).await;
                }
            }
        }
    }

    /// One stream: its frames go out as they come; its acknowledgments count as applied.
    async fn stream(&self, frames: &mut mpsc::Receiver<Frame>) -> StreamEnd {
        let (body, body_frames) = mpsc::channel::<Bytes>(FRAMES_QUEUED);
        let request = self
            .client
            .post(&self.url)
            .header(SECRET_HEADER, self.secret.clone())
            .header(reqwest::header::CONTENT_TYPE, LATEST_STREAM)
            .body(reqwest::Body::wrap(shared::protocol::FrameBody(body_frames)));
        let (answered, mut answers) = mpsc::unbounded_channel();
        let _reader = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(read_answers(request, answered)));
        let mut body = Some(body);
        let (mut unacked, mut acked) = (VecDeque::new(), 0_u64);
        loop {
            tokio::select! {
                frame = frames.recv(), if body.is_some() => match frame {
                    Some(frame) => self.send(body.as_ref().expect("an open body"), frame, &mut unacked),
                    // The simulator stops: the body ends, the coordinator answers its last lines.
                    None => body = None,
                },
                answer = answers.recv() => match answer {
                    Some(Ok(StreamAnswer::Applied(frames))) => {
                        while acked < frames {
                            let items = unacked.pop_front().unwrap_or(0);
                            self.counters.items_applied.fetch_add(items, Ordering::AcqRel);
                            acked += 1;
                        }
                    }
                    Some(Ok(StreamAnswer::End { status: 200, .. })) if body.is_none() => return StreamEnd::Finished,
                    Some(Ok(StreamAnswer::End { status, reason })) => {
                        return StreamEnd::Broken(format!("ended {status} {reason}"));
                    }
                    Some(Err(reason)) => return StreamEnd::Broken(reason),
                    None => return StreamEnd::Broken("the answer's reader stopped".to_owned()),
                },
            }
        }
    }

    fn send(&self, body: &mpsc::Sender<Bytes>, frame: Frame, unacked: &mut VecDeque<u64>) {
        if body.try_send(frame.bytes).is_ok() {
            unacked.push_back(frame.items);
            self.counters.frames_sent.fetch_add(1, Ordering::AcqRel);
            self.counters.items_sent.fetch_add(frame.items, Ordering::AcqRel);
        } else {
            self.counters.items_dropped.fetch_add(frame.items, Ordering::AcqRel);
        }
    }
}

/// Sends a stream's request and forwards each line of its answer (or why it stopped).
async fn read_answers(request: reqwest::RequestBuilder, answered: mpsc::UnboundedSender<Result<StreamAnswer, String>>) {
    let outcome = async {
        let mut response = request.send().await.map_err(|error| shared::error_chain(&error))?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(format!("answered {}", response.status()));
        }
        let mut lines = StreamAnswers::default();
        while let Some(chunk) = response.chunk().await.map_err(|error| shared::error_chain(&error))? {
            for answer in lines.push(&chunk).map_err(|error| error.to_string())? {
                if answered.send(Ok(answer)).is_err() {
                    return Ok(());
                }
            }
        }
        Err("the answer ended without saying why".to_owned())
    };
    if let Err(reason) = outcome.await {
        let _ = answered.send(Err(reason));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::protocol::decode_latest;

    fn cell(isus: usize) -> Arc<SimCell> {
        let cell = SimCell::new("s00".to_owned(), "http://127.0.0.1:1".to_owned());
        cell.generation.store(42, std::sync::atomic::Ordering::Release);
        cell.map_version.store(1, std::sync::atomic::Ordering::Release);
        cell.replace_isus(
            (0..isus)
                .map(|index| SimIsu {
                    uuid: format!("00000000-0000-4000-8000-{index:012}"),
                    latest: Some(shared::protocol::WireCondition {
                        timestamp: VIRTUAL_START - 600,
                        flags: Flags(0),
                        message: "from the reset".to_owned(),
                    }),
                })
                .collect(),
        );
        Arc::new(cell)
    }

    #[test]
    fn a_batch_decodes_to_its_isus_with_one_newer_timestamp() {
        let builder = BatchBuilder {
            cell: cell(5),
            queues: Vec::new(),
            per_tick: 1.0,
            counters: Arc::default(),
        };
        let isus = builder.cell.isus();
        let frame = builder.batch(&isus, 3, 4, false);
        assert_eq!(frame.items, 4);
        let length = u32::from_le_bytes(frame.bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(length, frame.bytes.len() - 4, "a frame is its length and one batch");
        let (generation, items) = decode_latest(&frame.bytes[4..]).expect("the batch decodes");
        assert_eq!(generation, 42);
        let uuids: Vec<&str> = items.iter().map(|item| item.uuid).collect();
        assert_eq!(uuids, [3, 4, 0, 1].map(|index| isus[index].uuid.as_str()));
        assert!(items
            .iter()
            .all(|item| item.timestamp == VIRTUAL_START + 1 && item.message == MESSAGE));
        assert!(items.iter().all(|item| item.flags.0 & !Flags::ALL == 0));

        let next = builder.batch(&isus, 0, 1, true);
        let (_, items) = decode_latest(&next.bytes[4..]).expect("the batch decodes");
        assert_eq!(
            items.len(),
            6,
            "a resend carries every ISU's reset latest, then the new one"
        );
        assert_eq!(items[0].message, "from the reset");
        assert_eq!(
            items[5].timestamp,
            VIRTUAL_START + 2,
            "each batch one virtual second later"
        );
    }
}
