//! The coordinator's memory: users, ISUs, the latest condition of every ISU,
//! the trend cache, and the registration protocol with the workers.
//!
//! Everything of one dataset generation lives in a [`Generation`]; `/initialize`
//! builds a new one and swaps it in, so no request ever sees half a reset.
//! Locks are `parking_lot` ones held for short, synchronous sections only
//! (never across `.await`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use shared::dataset::Dataset;
use shared::domain::Flags;
use shared::placement::{shard_of, Shard};
use shared::protocol::{LatestBatch, ProvisionalIsu, PublishIsu, ResetShard, RollbackIsu, ShardIsu, WireCondition};
use shared::session::SessionKey;
use tokio::sync::watch;

use crate::error::ApiError;
use crate::jia_client::{ActivateError, JiaClient};
use crate::journal::{Journal, LoggedIsu, Restored};
use crate::user_sync::UserSyncer;
use crate::worker_client::WorkerClient;

/// The latest condition of an ISU, as pushed by its worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latest {
    pub timestamp: i64,
    pub flags: Flags,
    pub message: Box<str>,
}

/// A registered (published) ISU.
#[derive(Debug)]
pub struct Isu {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub character: String,
    pub owner: String,
    pub image: Bytes,
    latest: Mutex<Option<Latest>>,
}

impl Isu {
    pub fn latest(&self) -> Option<Latest> {
        self.latest.lock().clone()
    }

    /// Timestamp and flags of the latest condition, without copying its message.
    fn latest_key(&self) -> Option<(i64, Flags)> {
        self.latest
            .lock()
            .as_ref()
            .map(|latest| (latest.timestamp, latest.flags))
    }

    /// Keeps the condition with the greatest timestamp; true when it changed.
    fn offer_latest(&self, condition: &WireCondition) -> bool {
        let mut latest = self.latest.lock();
        if latest
            .as_ref()
            .is_some_and(|current| current.timestamp >= condition.timestamp)
        {
            return false;
        }
        *latest = Some(Latest {
            timestamp: condition.timestamp,
            flags: condition.flags,
            message: condition.message.as_str().into(),
        });
        true
    }
}

/// Outcome of a registration, seen by concurrent registrations of the same UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pending,
    Published,
    Failed,
}

/// Everything that `/initialize` resets.
pub struct Generation {
    pub id: u64,
    users: RwLock<HashSet<String>>,
    by_uuid: DashMap<String, Arc<Isu>>,
    by_owner: DashMap<String, Vec<Arc<Isu>>>,
    /// All ISUs in id order, for the trend.
    all: RwLock<Vec<Arc<Isu>>>,
    /// Registrations in flight, by UUID.
    pending: Mutex<HashMap<String, watch::Receiver<Outcome>>>,
    next_id: AtomicI64,
    /// Ids from here on are registrations (below: the dataset's ISUs).
    first_registered_id: i64,
    /// Bumped whenever the trend may have changed.
    trend_version: AtomicU64,
    /// The last built trend and the version it was built from. Requests only
    /// clone it; building happens off the request path (see [`Generation::changed`]).
    trend_cache: Mutex<(u64, Trend)>,
    /// Set while a background rebuild runs: at most one at a time.
    trend_rebuilding: AtomicBool,
    /// When the last rebuild started (held only by the one running builder).
    last_trend_build: Mutex<Option<std::time::Instant>>,
}

impl Generation {
    fn from_dataset(id: u64, dataset: &Dataset, default_icon: &Bytes) -> Generation {
        let generation = Generation {
            id,
            users: RwLock::new(dataset.users.iter().cloned().collect()),
            by_uuid: DashMap::new(),
            by_owner: DashMap::new(),
            all: RwLock::new(Vec::new()),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicI64::new(dataset.isus.iter().map(|isu| isu.id).max().unwrap_or(0) + 1),
            first_registered_id: dataset.isus.iter().map(|isu| isu.id).max().unwrap_or(0) + 1,
            trend_version: AtomicU64::new(1),
            trend_cache: Mutex::new((0, Trend::default())),
            trend_rebuilding: AtomicBool::new(false),
            last_trend_build: Mutex::new(None),
        };
        for isu in &dataset.isus {
            let latest = isu
                .conditions
                .iter()
                .max_by_key(|condition| condition.timestamp)
                .map(|condition| Latest {
                    timestamp: condition.timestamp,
                    flags: condition.flags,
                    message: condition.message.as_str().into(),
                });
            generation.users.write().insert(isu.owner.clone());
            generation.insert(Isu {
                id: isu.id,
                uuid: isu.uuid.clone(),
                name: isu.name.clone(),
                character: isu.character.clone(),
                owner: isu.owner.clone(),
                image: isu
                    .image
                    .as_ref()
                    .map_or_else(|| default_icon.clone(), |image| Bytes::from(image.clone())),
                latest: Mutex::new(latest),
            });
        }
        generation.rebuild_trend();
        generation
    }

    /// The dataset's generation `id` with the users and registered ISUs of a replayed log.
    fn restored(restored: &Restored, dataset: &Dataset, default_icon: &Bytes) -> Generation {
        let generation = Generation::from_dataset(restored.generation, dataset, default_icon);
        generation.users.write().extend(restored.users.iter().cloned());
        for isu in &restored.isus {
            generation.next_id.fetch_max(isu.id + 1, Ordering::AcqRel);
            generation.insert(Isu {
                id: isu.id,
                uuid: isu.uuid.clone(),
                name: isu.name.clone(),
                character: isu.character.clone(),
                owner: isu.owner.clone(),
                image: isu.image.clone().unwrap_or_else(|| default_icon.clone()),
                latest: Mutex::new(None),
            });
        }
        generation.rebuild_trend();
        generation
    }

    /// What the log must hold to rebuild this generation: users and registered ISUs.
    fn to_restored(&self, jia_service_url: &str, default_icon: &Bytes) -> Restored {
        let mut users: Vec<String> = self.users.read().iter().cloned().collect();
        users.sort();
        let isus = self
            .all
            .read()
            .iter()
            .filter(|isu| isu.id >= self.first_registered_id)
            .map(|isu| logged(isu, default_icon))
            .collect();
        Restored {
            generation: self.id,
            jia_service_url: jia_service_url.to_owned(),
            users,
            isus,
        }
    }

    /// Adds an ISU (dataset loading); see [`Generation::publish`] for registrations.
    fn insert(&self, isu: Isu) -> Arc<Isu> {
        let isu = Arc::new(isu);
        self.by_uuid.insert(isu.uuid.clone(), isu.clone());
        let mut owned = self.by_owner.entry(isu.owner.clone()).or_default();
        let position = owned.partition_point(|other| other.id < isu.id);
        owned.insert(position, isu.clone());
        drop(owned);
        let mut all = self.all.write();
        let position = all.partition_point(|other| other.id < isu.id);
        all.insert(position, isu.clone());
        drop(all);
        isu
    }

    /// Adds a registered ISU and schedules a trend rebuild.
    fn publish(self: &Arc<Self>, isu: Isu) -> Arc<Isu> {
        let isu = self.insert(isu);
        self.changed();
        isu
    }

    fn remove(self: &Arc<Self>, uuid: &str) {
        let Some((_, isu)) = self.by_uuid.remove(uuid) else {
            return;
        };
        if let Some(mut owned) = self.by_owner.get_mut(&isu.owner) {
            owned.retain(|other| other.uuid != uuid);
        }
        self.all.write().retain(|other| other.uuid != uuid);
        self.changed();
    }

    pub fn has_user(&self, user: &str) -> bool {
        self.users.read().contains(user)
    }

    /// Creates the user if absent; true when it was created.
    pub fn add_user(&self, user: &str) -> bool {
        if self.has_user(user) {
            return false;
        }
        self.users.write().insert(user.to_owned())
    }

    /// The ISU `uuid` if `user` owns it.
    pub fn owned_isu(&self, uuid: &str, user: &str) -> Option<Arc<Isu>> {
        self.by_uuid
            .get(uuid)
            .filter(|isu| isu.owner == user)
            .map(|isu| isu.clone())
    }

    /// The user's ISUs, most recently registered first.
    pub fn isus_of(&self, user: &str) -> Vec<Arc<Isu>> {
        self.by_owner
            .get(user)
            .map(|owned| owned.iter().rev().cloned().collect())
            .unwrap_or_default()
    }

    /// Applies a worker's batch; returns how many ISUs got a newer latest condition.
    pub fn apply_latest(self: &Arc<Self>, batch: &LatestBatch) -> usize {
        let changed = batch
            .items
            .iter()
            .filter(|item| {
                self.by_uuid
                    .get(&item.uuid)
                    .is_some_and(|isu| isu.offer_latest(&item.condition))
            })
            .count();
        if changed > 0 {
            self.changed();
        }
        changed
    }

    /// Records that the trend changed and rebuilds it in the background. One
    /// rebuild runs at a time; it loops while changes keep arriving, so the
    /// cached trend is at most one build behind.
    fn changed(self: &Arc<Self>) {
        self.trend_version.fetch_add(1, Ordering::SeqCst);
        // SeqCst on the flag and the version: the builder's "clear flag, then
        // re-read version" must not pass a writer's "bump version, then test flag".
        if self.trend_rebuilding.swap(true, Ordering::SeqCst) {
            return; // the running rebuild will see the new version
        }
        let generation = self.clone();
        tokio::task::spawn_blocking(move || loop {
            generation.wait_for_trend_build_slot();
            let built = {
                let _clear = ClearOnDrop(&generation.trend_rebuilding);
                generation.rebuild_trend()
            };
            if generation.trend_version.load(Ordering::SeqCst) == built {
                return;
            }
            if generation.trend_rebuilding.swap(true, Ordering::SeqCst) {
                return; // a newer change started its own rebuild
            }
        });
    }

    /// Keeps rebuild starts at least [`TREND_REBUILD_INTERVAL`] apart (a blocking sleep: this
    /// runs on the blocking pool, in the one builder there is).
    fn wait_for_trend_build_slot(&self) {
        let mut last = self.last_trend_build.lock();
        if let Some(next) = last.map(|last| last + TREND_REBUILD_INTERVAL) {
            let now = std::time::Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
        }
        *last = Some(std::time::Instant::now());
    }

    /// Builds the trend of the current version into the cache; returns that version.
    fn rebuild_trend(&self) -> u64 {
        let version = self.trend_version.load(Ordering::SeqCst);
        // Serialise outside the lock: registrations wait for its write side.
        let isus = self.all.read().clone();
        let json = build_trend(&isus);
        let trend = Trend {
            gzip: gzip(&json).map(Bytes::from),
            json: Bytes::from(json),
        };
        let mut cache = self.trend_cache.lock();
        if cache.0 <= version {
            *cache = (version, trend);
        }
        version
    }

    /// The trend as of the last build (never built on the request path).
    pub fn trend(&self) -> Trend {
        self.trend_cache.lock().1.clone()
    }
}

/// An ISU as the log holds it (the default icon is not copied into the log).
fn logged(isu: &Isu, default_icon: &Bytes) -> LoggedIsu {
    LoggedIsu {
        id: isu.id,
        uuid: isu.uuid.clone(),
        name: isu.name.clone(),
        character: isu.character.clone(),
        owner: isu.owner.clone(),
        image: (isu.image != *default_icon).then(|| isu.image.clone()),
    }
}

/// Shortest time between the starts of two trend rebuilds. Workers push every 10 ms each, so
/// without it the trend would be rebuilt (and compressed) after nearly every push, a third of
/// the coordinator's CPU under load; with it the cached trend is at most this much staler.
const TREND_REBUILD_INTERVAL: Duration = Duration::from_millis(25);

/// Clears a flag when dropped, also while unwinding from a panic.
struct ClearOnDrop<'a>(&'a AtomicBool);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// The trend JSON, and the same gzip-compressed for clients that accept it
/// (at 10,000 ISUs the JSON is about 390 KB; copying it dominates a request).
#[derive(Debug, Clone, Default)]
pub struct Trend {
    pub json: Bytes,
    pub gzip: Option<Bytes>,
}

/// Bodies smaller than this are sent as they are.
const GZIP_MIN_BYTES: usize = 4096;

fn gzip(json: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    if json.len() < GZIP_MIN_BYTES {
        return None;
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(json.len() / 4), flate2::Compression::fast());
    encoder.write_all(json).ok()?;
    encoder.finish().ok()
}

#[derive(Serialize)]
struct TrendEntry<'a> {
    character: &'a str,
    info: Vec<TrendCondition>,
    warning: Vec<TrendCondition>,
    critical: Vec<TrendCondition>,
}

#[derive(Serialize, Clone, Copy)]
struct TrendCondition {
    isu_id: i64,
    timestamp: i64,
}

/// One entry per character of any registered ISU; each ISU with a condition
/// appears once, under its latest condition's level; lists newest first.
fn build_trend(isus: &[Arc<Isu>]) -> Vec<u8> {
    let mut by_character: BTreeMap<&str, TrendEntry<'_>> = BTreeMap::new();
    for isu in isus {
        let entry = by_character.entry(&isu.character).or_insert_with(|| TrendEntry {
            character: &isu.character,
            info: Vec::new(),
            warning: Vec::new(),
            critical: Vec::new(),
        });
        let Some((timestamp, flags)) = isu.latest_key() else {
            continue;
        };
        let item = TrendCondition {
            isu_id: isu.id,
            timestamp,
        };
        match flags.level() {
            shared::domain::Level::Info => entry.info.push(item),
            shared::domain::Level::Warning => entry.warning.push(item),
            shared::domain::Level::Critical => entry.critical.push(item),
        }
    }
    let mut entries: Vec<TrendEntry<'_>> = by_character.into_values().collect();
    for entry in &mut entries {
        for list in [&mut entry.info, &mut entry.warning, &mut entry.critical] {
            list.sort_unstable_by_key(|item| std::cmp::Reverse(item.timestamp));
        }
    }
    serde_json::to_vec(&entries).unwrap_or_else(|_| b"[]".to_vec())
}

/// A registration request, after parsing.
pub struct Registration {
    pub owner: String,
    pub uuid: String,
    pub name: String,
    /// `None` = the default icon.
    pub image: Option<Bytes>,
}

/// A UUID claimed by a registration in flight. Dropping it (also when the
/// registration task panics) releases the UUID and tells waiting registrations
/// the outcome, so a failure can never wedge a UUID.
struct Claim {
    generation: Arc<Generation>,
    uuid: String,
    sender: watch::Sender<Outcome>,
    outcome: Outcome,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.generation.pending.lock().remove(&self.uuid);
        let _ = self.sender.send(self.outcome);
    }
}

/// How often the coordinator checks that the workers still hold the current generation.
const WORKER_WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// How long a registration of a UUID waits for a concurrent one of the same UUID.
const CONCURRENT_REGISTRATION_WAIT: Duration = Duration::from_secs(10);

/// Where the state comes from at start.
pub enum Start {
    /// A new generation of the dataset; JIA at this URL until `/initialize` sets one.
    Fresh { jia_service_url: String },
    /// The generation, users and registrations of a replayed log.
    Restored(Restored),
}

/// The coordinator's whole state (wrapped in `Arc` by [`AppState`](crate::AppState)).
pub struct State {
    current: Arc<RwLock<Arc<Generation>>>,
    pub jia_service_url: Arc<RwLock<String>>,
    /// The durable log (disabled without `--data-dir`); set once before serving.
    pub journal: Journal,
    /// The generation came from the log: workers that still hold it keep their data.
    restored: bool,
    dataset: Arc<Dataset>,
    pub default_icon: Bytes,
    pub session_key: SessionKey,
    pub workers: WorkerClient,
    /// Tells the workers about new users, in the background.
    pub user_sync: UserSyncer,
    jia: JiaClient,
    device_urls: [String; 2],
    ready: AtomicBool,
    reset_lock: tokio::sync::Mutex<()>,
}

impl State {
    pub fn new(
        dataset: Dataset,
        default_icon: Bytes,
        session_key: SessionKey,
        workers: WorkerClient,
        jia: JiaClient,
        device_urls: [String; 2],
        start: Start,
    ) -> State {
        let restored = matches!(start, Start::Restored(_));
        let (generation, jia_service_url) = match start {
            Start::Restored(restored) => (
                Generation::restored(&restored, &dataset, &default_icon),
                restored.jia_service_url,
            ),
            Start::Fresh { jia_service_url } => (
                Generation::from_dataset(new_generation_id(), &dataset, &default_icon),
                jia_service_url,
            ),
        };
        State {
            current: Arc::new(RwLock::new(Arc::new(generation))),
            jia_service_url: Arc::new(RwLock::new(jia_service_url)),
            journal: Journal::default(),
            restored,
            dataset: Arc::new(dataset),
            default_icon,
            session_key,
            workers,
            user_sync: UserSyncer::new(Shard::ALL.len()),
            jia,
            device_urls,
            ready: AtomicBool::new(false),
            reset_lock: tokio::sync::Mutex::new(()),
        }
    }

    pub fn generation(&self) -> Arc<Generation> {
        self.current.read().clone()
    }

    /// Builds the log's snapshot record of the state as it is when called.
    pub fn snapshot_fn(&self) -> shared::wal::SnapshotFn {
        let (current, jia_service_url) = (self.current.clone(), self.jia_service_url.clone());
        let default_icon = self.default_icon.clone();
        Arc::new(move || {
            let generation = current.read().clone();
            let jia_service_url = jia_service_url.read().clone();
            crate::journal::snapshot_record(&generation.to_restored(&jia_service_url, &default_icon))
        })
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Brings the workers to the current generation (at start-up), retrying until both answer.
    pub async fn sync_workers_until_ready(&self) {
        let mut delay = Duration::from_millis(50);
        loop {
            // Locked per attempt, so an early `/initialize` need not wait for slow workers.
            let resetting = self.reset_lock.lock().await;
            if self.is_ready() {
                return; // an `/initialize` reached every worker first
            }
            let generation = self.generation();
            match self.reset_workers(&generation, self.restored).await {
                Ok(()) => {
                    self.ready.store(true, Ordering::Release);
                    tracing::info!(generation = generation.id, "cluster ready");
                    return;
                }
                Err(error) => {
                    drop(resetting);
                    tracing::info!(%error, "waiting for workers");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// Resets a worker to `generation`; with `keep_current`, a worker that
    /// already holds it (this node restored it from its log) keeps its data and
    /// pushes its latest conditions again instead (this node forgot them).
    async fn bring_worker_up(
        &self,
        generation: &Arc<Generation>,
        shard: Shard,
        keep_current: bool,
    ) -> anyhow::Result<()> {
        if keep_current && self.workers.health(shard).await?.generation == generation.id {
            self.workers.resend_latest(shard, generation.id).await?;
            tracing::info!(
                shard = shard.name(),
                "worker kept its data; its latest conditions are pushed again"
            );
            return Ok(());
        }
        self.reset_worker(generation, shard).await
    }

    /// `POST /initialize`: a new generation from the dataset, on every node.
    pub async fn initialize(&self, jia_service_url: String) -> Result<(), ApiError> {
        let _resetting = self.reset_lock.lock().await;
        let dataset = self.dataset.clone();
        let default_icon = self.default_icon.clone();
        let generation =
            tokio::task::spawn_blocking(move || Generation::from_dataset(new_generation_id(), &dataset, &default_icon))
                .await
                .map_err(|error| ApiError::Internal(error.to_string()))?;
        let generation = Arc::new(generation);
        // Swap first: pushes of the new generation must find it.
        *self.current.write() = generation.clone();
        *self.jia_service_url.write() = jia_service_url;
        // A fresh log: its snapshot holds the new generation.
        self.journal
            .snapshot()
            .await
            .map_err(|error| ApiError::Internal(error.to_string()))?;
        self.reset_workers(&generation, false)
            .await
            .map_err(|error| ApiError::Internal(error.to_string()))?;
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Brings both workers to `generation` (see [`State::bring_worker_up`]).
    async fn reset_workers(&self, generation: &Arc<Generation>, keep_current: bool) -> anyhow::Result<()> {
        let (a, b) = tokio::join!(
            self.bring_worker_up(generation, Shard::A, keep_current),
            self.bring_worker_up(generation, Shard::B, keep_current)
        );
        a.and(b)
    }

    /// Sends a worker its shard of `generation` as the coordinator knows it now.
    async fn reset_worker(&self, generation: &Arc<Generation>, shard: Shard) -> anyhow::Result<()> {
        let (dataset, generation) = (self.dataset.clone(), generation.clone());
        let body = tokio::task::spawn_blocking(move || reset_body(&dataset, &generation, shard)).await??;
        Ok(self.workers.reset(shard, body).await?)
    }

    /// Watches the workers' generation and resets a worker that lost its state
    /// (restarted) with its shard as the coordinator knows it: the dataset's
    /// conditions, every registered ISU, and the latest condition of each. Reads
    /// then work again at once; conditions posted since the dataset are gone with
    /// the worker's memory, except each ISU's latest.
    pub async fn watch_workers(&self) {
        let mut ticker = tokio::time::interval(WORKER_WATCH_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            for shard in Shard::ALL {
                // Asked under the lock, so an `/initialize` in progress is not mistaken for a restart.
                let _resetting = self.reset_lock.lock().await;
                let Ok(health) = self.workers.health(shard).await else {
                    continue; // down: it is reset when it answers again
                };
                let generation = self.generation();
                if health.generation == generation.id {
                    continue;
                }
                tracing::warn!(
                    shard = shard.name(),
                    worker_generation = health.generation,
                    "worker lost its state; resetting it"
                );
                if let Err(error) = self.reset_worker(&generation, shard).await {
                    tracing::error!(%error, shard = shard.name(), "resetting a worker failed");
                }
            }
        }
    }

    /// Signs a user in (creating it if needed, logged before the answer) and returns the `Set-Cookie` value.
    pub async fn sign_in(self: &Arc<Self>, user: &str) -> Result<String, ApiError> {
        let generation = self.generation();
        if generation.add_user(user) {
            self.journal
                .user(generation.id, user)
                .await
                .map_err(|error| ApiError::Internal(error.to_string()))?;
            self.user_sync.add(generation.id, user);
        }
        Ok(self.session_key.set_cookie(user, generation.id))
    }

    /// Registers an ISU: provisional on the owning worker, JIA activation, publish;
    /// rolled back on both nodes on failure. Runs to completion even if the client leaves.
    pub async fn register(self: &Arc<Self>, registration: Registration) -> Result<Arc<Isu>, ApiError> {
        let state = self.clone();
        tokio::spawn(async move { state.register_inner(registration).await })
            .await
            .map_err(|error| ApiError::Internal(error.to_string()))?
    }

    async fn register_inner(&self, registration: Registration) -> Result<Arc<Isu>, ApiError> {
        let started = std::time::Instant::now();
        let generation = self.generation();
        let (mut claim, id) = self.claim(&generation, &registration.uuid).await?;
        let mut jia_time = Duration::ZERO;
        let result = self
            .activate_and_publish(&generation, &registration, id, &mut jia_time)
            .await;
        if result.is_ok() {
            claim.outcome = Outcome::Published;
            metrics::histogram!(shared::telemetry::REGISTRATION_OWN_SECONDS)
                .record(started.elapsed().saturating_sub(jia_time).as_secs_f64());
        }
        result
    }

    /// Claims `uuid` for this registration: 409 when registered, waits for a
    /// registration of the same UUID in flight. Returns the claim and the new id.
    async fn claim(&self, generation: &Arc<Generation>, uuid: &str) -> Result<(Claim, i64), ApiError> {
        let deadline = tokio::time::Instant::now() + CONCURRENT_REGISTRATION_WAIT;
        loop {
            let mut in_flight = {
                let mut pending = generation.pending.lock();
                // In flight first: an ISU being published may still fail and be removed.
                match pending.get(uuid) {
                    Some(receiver) => receiver.clone(),
                    None if generation.by_uuid.contains_key(uuid) => return Err(ApiError::DuplicatedIsu),
                    None => {
                        let (sender, receiver) = watch::channel(Outcome::Pending);
                        pending.insert(uuid.to_owned(), receiver);
                        let claim = Claim {
                            generation: generation.clone(),
                            uuid: uuid.to_owned(),
                            sender,
                            outcome: Outcome::Failed,
                        };
                        return Ok((claim, generation.next_id.fetch_add(1, Ordering::AcqRel)));
                    }
                }
            };
            let finished =
                tokio::time::timeout_at(deadline, in_flight.wait_for(|outcome| *outcome != Outcome::Pending)).await;
            match finished {
                Ok(Ok(outcome)) if *outcome == Outcome::Published => return Err(ApiError::DuplicatedIsu),
                // Failed, or its claim was dropped: the UUID is free again (the claim left `pending` first).
                Ok(_) => continue,
                Err(_) => return Err(ApiError::Internal(format!("registration of {uuid} still in flight"))),
            }
        }
    }

    async fn activate_and_publish(
        &self,
        generation: &Arc<Generation>,
        registration: &Registration,
        id: i64,
        jia_time: &mut Duration,
    ) -> Result<Arc<Isu>, ApiError> {
        let shard = shard_of(&registration.uuid);
        let provisional = ProvisionalIsu {
            generation: generation.id,
            id,
            uuid: registration.uuid.clone(),
            owner: registration.owner.clone(),
            name: registration.name.clone(),
        };
        self.workers
            .provisional(shard, &provisional)
            .await
            .map_err(|error| match error.status() {
                Some(reqwest::StatusCode::CONFLICT) => ApiError::DuplicatedIsu,
                _ => ApiError::Internal(error.to_string()),
            })?;
        let rollback = RollbackIsu {
            generation: generation.id,
            id,
            uuid: registration.uuid.clone(),
        };
        let service_url = self.jia_service_url.read().clone();
        let asked_jia = std::time::Instant::now();
        let activated = self
            .jia
            .activate(&service_url, &self.device_urls[shard.index()], &registration.uuid)
            .await;
        *jia_time = asked_jia.elapsed();
        let character = match activated {
            Ok(character) => character,
            Err(error) => {
                self.rollback_worker(shard, &rollback).await;
                return Err(match error {
                    ActivateError::Refused(status) => ApiError::JiaRefused(status),
                    other => ApiError::Internal(other.to_string()),
                });
            }
        };
        let isu = generation.publish(Isu {
            id,
            uuid: registration.uuid.clone(),
            name: registration.name.clone(),
            character: character.clone(),
            owner: registration.owner.clone(),
            image: registration.image.clone().unwrap_or_else(|| self.default_icon.clone()),
            latest: Mutex::new(None),
        });
        // Logged before the worker publishes it: an ISU visible anywhere is in the log.
        if let Err(error) = self.journal.isu(generation.id, &logged(&isu, &self.default_icon)).await {
            generation.remove(&registration.uuid);
            self.rollback_worker(shard, &rollback).await;
            return Err(ApiError::Internal(error.to_string()));
        }
        let publish = PublishIsu {
            generation: generation.id,
            uuid: registration.uuid.clone(),
            id,
            character,
        };
        if let Err(error) = self.workers.publish(shard, &publish).await {
            generation.remove(&registration.uuid);
            if let Err(error) = self.journal.removed(generation.id, &registration.uuid).await {
                tracing::error!(%error, uuid = %registration.uuid, "logging a failed registration failed");
            }
            self.rollback_worker(shard, &rollback).await;
            return Err(ApiError::Internal(error.to_string()));
        }
        Ok(isu)
    }

    async fn rollback_worker(&self, shard: Shard, rollback: &RollbackIsu) {
        if let Err(error) = self.workers.rollback(shard, rollback).await {
            tracing::error!(%error, uuid = %rollback.uuid, "rollback on worker failed");
        }
    }
}

fn new_generation_id() -> u64 {
    rand::random::<u64>() | 1
}

/// A worker's reset body: the ISUs of its shard in `generation`, with the
/// dataset's conditions and each ISU's latest known condition, and every user.
fn reset_body(dataset: &Dataset, generation: &Generation, shard: Shard) -> anyhow::Result<Bytes> {
    let dataset_conditions: HashMap<&str, &[WireCondition]> = dataset
        .isus
        .iter()
        .map(|isu| (isu.uuid.as_str(), isu.conditions.as_slice()))
        .collect();
    let isus: Vec<ShardIsu> = generation
        .all
        .read()
        .iter()
        .filter(|isu| shard_of(&isu.uuid) == shard)
        .map(|isu| {
            let mut conditions = dataset_conditions
                .get(isu.uuid.as_str())
                .map_or_else(Vec::new, |known| known.to_vec());
            if let Some(latest) = isu.latest() {
                if conditions.last().is_none_or(|last| last.timestamp < latest.timestamp) {
                    conditions.push(WireCondition {
                        timestamp: latest.timestamp,
                        flags: latest.flags,
                        message: latest.message.into_string(),
                    });
                }
            }
            ShardIsu {
                id: isu.id,
                uuid: isu.uuid.clone(),
                owner: isu.owner.clone(),
                name: isu.name.clone(),
                character: isu.character.clone(),
                conditions,
            }
        })
        .collect();
    let mut users: Vec<String> = generation.users.read().iter().cloned().collect();
    users.sort();
    Ok(Bytes::from(serde_json::to_vec(&ResetShard {
        generation: generation.id,
        users,
        isus,
    })?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::domain::parse_condition;

    fn isu(id: i64, character: &str) -> Isu {
        Isu {
            id,
            uuid: format!("uuid-{id}"),
            name: format!("isu {id}"),
            character: character.into(),
            owner: "alice".into(),
            image: Bytes::new(),
            latest: Mutex::new(None),
        }
    }

    fn condition(timestamp: i64, condition: &str) -> WireCondition {
        WireCondition {
            timestamp,
            flags: Flags::new(false, parse_condition(condition).unwrap()),
            message: String::new(),
        }
    }

    #[test]
    fn latest_keeps_the_greatest_timestamp() {
        let isu = isu(1, "c");
        assert!(isu.offer_latest(&condition(10, "is_dirty=false,is_overweight=false,is_broken=false")));
        assert!(!isu.offer_latest(&condition(5, "is_dirty=true,is_overweight=true,is_broken=true")));
        assert!(!isu.offer_latest(&condition(10, "is_dirty=true,is_overweight=true,is_broken=true")));
        assert_eq!(isu.latest().unwrap().timestamp, 10);
    }

    #[test]
    fn trend_groups_by_character_and_level_newest_first() {
        let isus: Vec<Arc<Isu>> = vec![
            Arc::new(isu(1, "すなお")),
            Arc::new(isu(2, "すなお")),
            Arc::new(isu(3, "のんき")),
            Arc::new(isu(4, "てれや")),
        ];
        isus[0].offer_latest(&condition(100, "is_dirty=false,is_overweight=false,is_broken=false"));
        isus[1].offer_latest(&condition(300, "is_dirty=false,is_overweight=false,is_broken=false"));
        isus[2].offer_latest(&condition(200, "is_dirty=true,is_overweight=true,is_broken=true"));
        let trend: serde_json::Value = serde_json::from_slice(&build_trend(&isus)).unwrap();
        let entries = trend.as_array().unwrap();
        assert_eq!(entries.len(), 3, "a character without conditions is still listed");
        let find = |name: &str| entries.iter().find(|entry| entry["character"] == name).unwrap().clone();
        let sunao = find("すなお");
        assert_eq!(
            sunao["info"],
            serde_json::json!([{"isu_id": 2, "timestamp": 300}, {"isu_id": 1, "timestamp": 100}])
        );
        assert_eq!(sunao["warning"], serde_json::json!([]));
        assert_eq!(
            find("のんき")["critical"],
            serde_json::json!([{"isu_id": 3, "timestamp": 200}])
        );
        let te = find("てれや");
        assert_eq!(
            (te["info"].clone(), te["warning"].clone(), te["critical"].clone()),
            (serde_json::json!([]), serde_json::json!([]), serde_json::json!([]))
        );
    }
}
