//! Device posts inside a cell: a per-ISU quota and shuffle-sharded ingest lanes, so one
//! noisy or poisonous ISU does not hurt the others (`docs/cells.md`, "Inside a cell: quota and lanes"). This is
//! the mechanism; a batch is taken through it, in order, by the write path (`write_path.rs`).
//!
//! - **Quota**: every batch counts its conditions for its ISU in a count-min sketch over two
//!   alternating windows ([`shared::sketch::WindowedSketch`], fixed memory however many ISUs
//!   post). An ISU over its quota (`--isu-quota` conditions per window) is *shaped*: its
//!   batch is logged and acknowledged (202) as usual, then waits in the **shaping lane**,
//!   which stores it only when the normal lanes are idle (at the latest after
//!   [`SHAPING_MAX_WAIT`]) and at most `--shaping-rate` conditions a second: visible
//!   later, never dropped. The lane holds at most `--shaping-queue` conditions; when it is
//!   full a shaped ISU's post is answered 429 with `Retry-After` *before its body is read*,
//!   so a flood costs the cell little more than its connections.
//! - **Lanes**: the other batches are stored while their post waits for its answer, inside
//!   one of `n` lanes (each admits `--lane-permits` batches at a time and queues at most
//!   `--lane-queue`); an ISU's batches use the least loaded of its `k` lanes
//!   ([`shared::shuffle::lanes_of`]; a lane a batch has held for over 100 ms counts as
//!   the most loaded). A batch that panics is answered 500 and its ISU is
//!   quarantined; one that holds its lane past `--lane-stall-ms` is replaced (the lane gets
//!   a fresh permit, the stuck one is dropped when it ends) and its ISU quarantined.
//!   Quarantined ISUs go to the shaping lane, so a poison pill jams at most its own lanes
//!   once, and afterwards only the shaping lane.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashSet;
use futures_util::FutureExt;
use parking_lot::Mutex;
use shared::protocol::WireCondition;
use shared::sketch::{CountMinSketch, WindowedSketch};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::error::WorkerError;

/// The quota's window (the sketch alternates two of them).
pub const QUOTA_WINDOW: Duration = Duration::from_secs(10);
/// How long a shaped batch waits for idle lanes before it is stored anyway.
pub const SHAPING_MAX_WAIT: Duration = Duration::from_secs(1);
/// How often the watchdog looks at the lanes (and rotates the quota's window).
const WATCH_EVERY: Duration = Duration::from_millis(50);
/// A batch holding its lane this long makes the lane one to avoid (storing takes
/// microseconds, or a group commit's few milliseconds).
const SUSPECT_AFTER: Duration = Duration::from_millis(100);

/// Metric names.
pub const SHAPED_BATCHES: &str = "ingest_shaped_batches_total";
pub const REJECTED_BATCHES: &str = "ingest_rejected_batches_total";
/// [`REJECTED_BATCHES`]' reasons: an ingest lane's queue full, the shaping lane's full.
const LANE_FULL: &str = "lane_full";
const SHAPING_FULL: &str = "shaping_full";
pub const LANE_DEPTH: &str = "ingest_lane_depth";
pub const SHAPING_DEPTH: &str = "ingest_shaping_depth";
pub const LANE_STALLS: &str = "ingest_lane_stalls_total";
pub const LANE_PANICS: &str = "ingest_lane_panics_total";
pub const QUARANTINED_ISUS: &str = "ingest_quarantined_isus";
pub const SHAPED_ISUS: &str = "ingest_shaped_isus";

/// The worker's ingest settings (its flags).
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Conditions per ISU per [`QUOTA_WINDOW`]; 0: no quota.
    pub quota: u32,
    pub lanes: usize,
    pub choices: usize,
    pub permits: usize,
    /// Batches waiting or running per lane before 503.
    pub lane_queue: usize,
    /// Conditions waiting in the shaping lane before shaped ISUs get 429.
    pub shaping_queue: usize,
    /// Conditions a second the shaping lane stores, at most.
    pub shaping_rate: u32,
    pub stall_after: Duration,
    pub quarantine: bool,
    pub seed: u64,
}

/// Where a batch goes.
pub enum Route {
    /// Stored now, in this lane.
    Lane(usize),
    /// Logged and acknowledged now, stored by the shaping lane later.
    Shaped,
}

/// A shaped batch waiting to be stored.
pub struct ShapedBatch {
    pub generation: u64,
    pub uuid: String,
    pub conditions: Vec<WireCondition>,
}

struct Holder {
    uuid: String,
    since: Instant,
    /// The watchdog gave the lane a fresh permit: this one is dropped, not returned.
    replaced: bool,
}

struct Lane {
    permits: Arc<Semaphore>,
    /// Batches waiting for or holding a permit.
    load: AtomicUsize,
    /// A batch has held this lane for longer than [`SUSPECT_AFTER`]: ISUs that have another
    /// lane avoid it.
    suspect: AtomicBool,
    holders: Mutex<HashMap<u64, Holder>>,
}

pub struct Ingest {
    config: IngestConfig,
    sketch: Option<WindowedSketch>,
    lanes: Vec<Lane>,
    next_ticket: AtomicU64,
    quarantined: DashSet<String>,
    /// ISUs shaped in the current window (for the gauge; cleared with the window).
    shaped: DashSet<String>,
    shaping: mpsc::UnboundedSender<ShapedBatch>,
    /// Conditions in the shaping lane (queued or being stored).
    shaping_depth: AtomicUsize,
}

/// Room taken in the shaping lane for one batch.
pub struct ShapingPlace<'a> {
    ingest: &'a Ingest,
    conditions: usize,
    used: bool,
}

impl Drop for ShapingPlace<'_> {
    fn drop(&mut self) {
        if !self.used {
            self.ingest.shaping_depth.fetch_sub(self.conditions, Ordering::AcqRel);
        }
    }
}

/// A batch inside its lane: leaving (drop) frees the lane.
pub struct LanePass<'a> {
    lane: &'a Lane,
    ticket: u64,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for LanePass<'_> {
    fn drop(&mut self) {
        let holder = self.lane.holders.lock().remove(&self.ticket);
        if let Some(permit) = self.permit.take() {
            if holder.is_some_and(|holder| holder.replaced) {
                // The lane already got a replacement for this permit.
                permit.forget();
            }
        }
        self.lane.load.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Ingest {
    /// The ingest state and the receiving end of the shaping lane (for [`run_shaping_lane`]).
    pub fn new(config: IngestConfig) -> (Arc<Ingest>, mpsc::UnboundedReceiver<ShapedBatch>) {
        // Every refusal's count exists from the start (at 0): the per-cell rules take its rate,
        // and a series that appears only with its first refusal would make that rate absent.
        for reason in [LANE_FULL, SHAPING_FULL] {
            metrics::counter!(REJECTED_BATCHES, "reason" => reason).increment(0);
        }
        let sketch = (config.quota > 0)
            .then(|| WindowedSketch::new(QUOTA_WINDOW, CountMinSketch::for_error(0.00005, 0.00001, config.seed)));
        let lanes = (0..config.lanes.clamp(1, shared::shuffle::MAX_LANES))
            .map(|_| Lane {
                permits: Arc::new(Semaphore::new(config.permits.max(1))),
                load: AtomicUsize::new(0),
                suspect: AtomicBool::new(false),
                holders: Mutex::new(HashMap::new()),
            })
            .collect();
        let (shaping, receiver) = mpsc::unbounded_channel();
        let ingest = Ingest {
            config,
            sketch,
            lanes,
            next_ticket: AtomicU64::new(0),
            quarantined: DashSet::new(),
            shaped: DashSet::new(),
            shaping,
            shaping_depth: AtomicUsize::new(0),
        };
        (Arc::new(ingest), receiver)
    }

    /// Counts the batch against its ISU's quota and picks its route.
    pub fn route(&self, uuid: &str, conditions: usize) -> Route {
        if self.quarantined.contains(uuid) {
            return Route::Shaped;
        }
        if let Some(sketch) = &self.sketch {
            let count = u32::try_from(conditions).unwrap_or(u32::MAX);
            if sketch.add(uuid.as_bytes(), count) > self.config.quota {
                if self.shaped.insert(uuid.to_owned()) {
                    tracing::info!(uuid, quota = self.config.quota, "ISU over its quota: shaped");
                }
                return Route::Shaped;
            }
        }
        let choices =
            shared::shuffle::lanes_of(uuid.as_bytes(), self.config.seed, self.lanes.len(), self.config.choices);
        let lane = choices
            .into_iter()
            .min_by_key(|lane| {
                let lane = &self.lanes[*lane];
                let suspect = usize::from(lane.suspect.load(Ordering::Acquire));
                (suspect, lane.load.load(Ordering::Acquire))
            })
            .unwrap_or(0);
        Route::Lane(lane)
    }

    /// Enters lane `index` for `uuid` (waits for a permit); 503 when its queue is full.
    pub async fn enter(&self, index: usize, uuid: &str) -> Result<LanePass<'_>, WorkerError> {
        let lane = &self.lanes[index];
        if lane.load.fetch_add(1, Ordering::AcqRel) >= self.config.lane_queue.max(1) {
            lane.load.fetch_sub(1, Ordering::AcqRel);
            metrics::counter!(REJECTED_BATCHES, "reason" => LANE_FULL).increment(1);
            return Err(WorkerError::Unavailable);
        }
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let mut pass = LanePass {
            lane,
            ticket,
            permit: None,
        };
        let permit = lane
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| WorkerError::Unavailable)?;
        lane.holders.lock().insert(
            ticket,
            Holder {
                uuid: uuid.to_owned(),
                since: Instant::now(),
                replaced: false,
            },
        );
        pass.permit = Some(permit);
        Ok(pass)
    }

    /// Runs `store` (a batch's storing, inside its lane); a panic is caught, its ISU
    /// quarantined and the batch answered 500.
    pub async fn guarded<T>(
        &self,
        uuid: &str,
        store: impl Future<Output = Result<T, WorkerError>>,
    ) -> Result<T, WorkerError> {
        match std::panic::AssertUnwindSafe(store).catch_unwind().await {
            Ok(result) => result,
            Err(_) => {
                metrics::counter!(LANE_PANICS).increment(1);
                self.quarantine(uuid, "its batch panicked");
                Err(WorkerError::Internal(format!("storing a batch of {uuid} panicked")))
            }
        }
    }

    fn quarantine(&self, uuid: &str, why: &str) {
        if self.config.quarantine && self.quarantined.insert(uuid.to_owned()) {
            tracing::warn!(uuid, why, "ISU quarantined to the shaping lane");
            metrics::gauge!(QUARANTINED_ISUS).set(self.quarantined.len() as f64);
        }
    }

    /// Is `uuid` shaped now (quarantined, or over its quota in either window), judged
    /// without counting anything: the check made before a post's body is read.
    pub fn is_shaped(&self, uuid: &str) -> bool {
        self.quarantined.contains(uuid)
            || self
                .sketch
                .as_ref()
                .is_some_and(|sketch| sketch.estimate(uuid.as_bytes()) > self.config.quota)
    }

    /// Is the shaping lane full (a shaped ISU's post is refused with 429)?
    pub fn shaping_full(&self) -> bool {
        self.shaping_depth.load(Ordering::Acquire) >= self.config.shaping_queue.max(1)
    }

    /// The 429 of a shaped ISU's post when the shaping lane is full (counted).
    pub fn refuse_shaped(&self) -> WorkerError {
        metrics::counter!(REJECTED_BATCHES, "reason" => SHAPING_FULL).increment(1);
        WorkerError::TooManyRequests
    }

    /// Takes room for `conditions` in the shaping lane (429 when it is full); the room is
    /// given back if the returned place is dropped unused.
    pub fn reserve_shaping(&self, conditions: usize) -> Result<ShapingPlace<'_>, WorkerError> {
        let before = self.shaping_depth.fetch_add(conditions, Ordering::AcqRel);
        if before >= self.config.shaping_queue.max(1) {
            self.shaping_depth.fetch_sub(conditions, Ordering::AcqRel);
            return Err(self.refuse_shaped());
        }
        Ok(ShapingPlace {
            ingest: self,
            conditions,
            used: false,
        })
    }

    /// Queues a shaped batch in the room `place` holds.
    pub fn shape(&self, mut place: ShapingPlace<'_>, batch: ShapedBatch) {
        place.used = true;
        metrics::counter!(SHAPED_BATCHES).increment(1);
        if self.shaping.send(batch).is_err() {
            // The lane has stopped (the process is ending): the batch is in the log.
            self.shaping_depth.fetch_sub(place.conditions, Ordering::AcqRel);
        }
    }

    /// Shaped conditions not stored yet.
    pub fn shaping_depth(&self) -> usize {
        self.shaping_depth.load(Ordering::Acquire)
    }

    /// Are the normal lanes idle (spare capacity for the shaping lane)?
    fn lanes_idle(&self) -> bool {
        self.lanes.iter().all(|lane| lane.load.load(Ordering::Acquire) == 0)
    }

    /// A reset: quarantine and quota start over.
    pub fn reset(&self) {
        self.quarantined.clear();
        self.shaped.clear();
        if let Some(sketch) = &self.sketch {
            sketch.clear();
        }
    }

    /// One look of the watchdog: stuck batches are replaced (their ISU quarantined), the
    /// quota's window turns, the gauges are set.
    fn watch(&self, now: Instant) {
        for (index, lane) in self.lanes.iter().enumerate() {
            let mut stuck = Vec::new();
            let mut suspect = false;
            for holder in lane.holders.lock().values_mut() {
                let held = now.saturating_duration_since(holder.since);
                suspect |= held >= SUSPECT_AFTER;
                if !holder.replaced && held >= self.config.stall_after {
                    holder.replaced = true;
                    stuck.push(holder.uuid.clone());
                }
            }
            lane.suspect.store(suspect, Ordering::Release);
            for uuid in stuck {
                lane.permits.add_permits(1);
                metrics::counter!(LANE_STALLS).increment(1);
                tracing::warn!(
                    lane = index,
                    uuid,
                    "a batch holds its lane too long: the lane goes on without it"
                );
                self.quarantine(&uuid, "its batch stalled a lane");
            }
            metrics::gauge!(LANE_DEPTH, "lane" => index.to_string()).set(lane.load.load(Ordering::Acquire) as f64);
        }
        metrics::gauge!(SHAPING_DEPTH).set(self.shaping_depth.load(Ordering::Acquire) as f64);
        metrics::gauge!(SHAPED_ISUS).set(self.shaped.len() as f64);
        if let Some(sketch) = &self.sketch {
            if sketch.rotate_if_due(now) {
                self.shaped.clear();
            }
        }
    }
}

/// The watchdog, until the process ends.
pub async fn run_watchdog(ingest: Arc<Ingest>) {
    let mut every = tokio::time::interval(WATCH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        every.tick().await;
        ingest.watch(Instant::now());
    }
}

/// The shaping lane: stores shaped batches one at a time, when the normal lanes are idle
/// (or after [`SHAPING_MAX_WAIT`]) and at most `--shaping-rate` conditions a second;
/// `store` stores one (a panic in it is caught and logged).
pub async fn run_shaping_lane<F, Fut>(ingest: Arc<Ingest>, mut batches: mpsc::UnboundedReceiver<ShapedBatch>, store: F)
where
    F: Fn(ShapedBatch) -> Fut,
    Fut: Future<Output = ()>,
{
    let rate = f64::from(ingest.config.shaping_rate.max(1));
    while let Some(batch) = batches.recv().await {
        let waiting_since = Instant::now();
        while !ingest.lanes_idle() && waiting_since.elapsed() < SHAPING_MAX_WAIT {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (uuid, conditions) = (batch.uuid.clone(), batch.conditions.len());
        if std::panic::AssertUnwindSafe(store(batch)).catch_unwind().await.is_err() {
            metrics::counter!(LANE_PANICS).increment(1);
            tracing::error!(uuid, "storing a shaped batch panicked; it stays in the log only");
        }
        ingest.shaping_depth.fetch_sub(conditions, Ordering::AcqRel);
        // The rate cap: this batch's share of a second.
        tokio::time::sleep(Duration::from_secs_f64(conditions as f64 / rate)).await;
    }
}
