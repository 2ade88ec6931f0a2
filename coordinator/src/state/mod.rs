//! The coordinator's memory and protocols, one concern per module:
//! - [`model`]: the plain data they share (an ISU and its latest condition, a registration's outcome);
//! - [`generation`]: users, ISUs and their latest conditions of one dataset generation;
//! - [`trend`]: the trend cache a generation holds, built in the background from the latest conditions;
//! - [`registration`]: the registration protocol with the workers and JIA;
//! - [`worker_sync`]: bringing workers to the current generation and watching them;
//! - [`placement`]: the placement map, the router's copy of it and the slot gate;
//! - [`migration`]: live migration of slots and pins between cells.
//!
//! They use each other in one direction only (checked by `e2e/tests/structure.rs`): `model`
//! uses none of them; `trend` uses `model`; `generation` uses `model` and `trend`;
//! `placement` uses none of them. This module, which holds [`State`], uses those four; the
//! protocols on [`State`] (`registration`, `worker_sync`, `migration`) use it and the ones
//! below it, and nothing here uses them by path.
//!
//! Locks are `parking_lot` ones held for short, synchronous sections only
//! (never across `.await`).

mod generation;
pub mod migration;
mod model;
pub mod placement;
pub mod registration;
pub mod replica;
mod trend;
mod worker_sync;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;
use shared::dataset::Dataset;
use shared::session::SessionKey;

pub use generation::Generation;
pub use model::{Isu, Latest};
pub use placement::Placement;
pub use trend::Trend;

use crate::error::ApiError;
use crate::jia_client::JiaClient;
use crate::journal::{Journal, Restored};
use crate::user_sync::UserSyncer;
use crate::worker_client::WorkerClient;

/// Where the state comes from at start.
pub enum Start {
    /// A new generation of the dataset; JIA at this URL until `/initialize` sets one.
    Fresh { jia_service_url: String },
    /// The generation, users and registrations of a replayed log.
    Restored(Restored),
    /// A replica of a group (`--replica`): a generation drawn from the dataset until the
    /// group's log gives it one (see [`replica`]).
    Replicated { jia_service_url: String },
}

/// The coordinator's whole state (wrapped in `Arc` by [`AppState`](crate::AppState)).
pub struct State {
    current: Arc<RwLock<Arc<Generation>>>,
    pub jia_service_url: Arc<RwLock<String>>,
    /// The durable log (disabled without `--data-dir`); set once before serving.
    pub journal: Journal,
    /// Replicas: the icons the log names by hash; set once before serving.
    pub icons: Option<Arc<crate::icons::IconStore>>,
    /// The generation came from the log: workers that still hold it keep their data.
    restored: bool,
    /// One of a group of replicas (the journal is the group's raft log).
    replicated: bool,
    /// A replica has applied its group's generation (always true otherwise).
    established: AtomicBool,
    /// A replica leads and has applied every entry of earlier terms and ended the
    /// registrations they left: it takes leader-only writes (always true otherwise).
    leading: AtomicBool,
    /// A replica's `/initialize`: the generation it proposed, taken by applying its record
    /// instead of being built again from the dataset.
    prepared: parking_lot::Mutex<Option<Arc<Generation>>>,
    dataset: Arc<Dataset>,
    pub default_icon: Bytes,
    pub session_key: SessionKey,
    pub workers: WorkerClient,
    /// Tells the workers about new users, in the background.
    pub user_sync: UserSyncer,
    jia: JiaClient,
    /// The control plane: which cell owns which ISU.
    pub placement: Placement,
    ready: AtomicBool,
    /// Replicas: the stall watchdog (see [`State::watch_for_stalls`]).
    pub(crate) stalls: replica::Stalls,
    /// Replicas, leading: the cells whose worker did not answer when this replica took over,
    /// so the registrations it holds provisionally are ended when it answers again.
    registrations_left: parking_lot::Mutex<std::collections::BTreeSet<shared::placement_map::CellId>>,
    reset_lock: tokio::sync::Mutex<()>,
    /// One migration at a time.
    migration_lock: tokio::sync::Mutex<()>,
    /// How long a migration's source keeps its copy after the flip.
    pub migration_grace: std::time::Duration,
}

impl State {
    pub fn new(
        dataset: Dataset,
        default_icon: Bytes,
        session_key: SessionKey,
        workers: WorkerClient,
        jia: JiaClient,
        placement: Placement,
        start: Start,
    ) -> State {
        let restored = matches!(start, Start::Restored(_) | Start::Replicated { .. });
        let replicated = matches!(start, Start::Replicated { .. });
        let (generation, jia_service_url) = match start {
            Start::Restored(restored) => (
                Generation::restored(&restored, &dataset, &default_icon),
                restored.jia_service_url,
            ),
            Start::Fresh { jia_service_url } | Start::Replicated { jia_service_url } => (
                Generation::from_dataset(new_generation_id(), &dataset, &default_icon),
                jia_service_url,
            ),
        };
        let current = Arc::new(RwLock::new(Arc::new(generation)));
        let current_id = current.clone();
        State {
            user_sync: UserSyncer::new(placement.map().cells().len(), Arc::new(move || current_id.read().id)),
            current,
            jia_service_url: Arc::new(RwLock::new(jia_service_url)),
            journal: Journal::default(),
            icons: None,
            restored,
            replicated,
            established: AtomicBool::new(!replicated),
            leading: AtomicBool::new(!replicated),
            prepared: parking_lot::Mutex::new(None),
            dataset: Arc::new(dataset),
            default_icon,
            session_key,
            workers,
            jia,
            placement,
            ready: AtomicBool::new(false),
            stalls: replica::Stalls::default(),
            registrations_left: parking_lot::Mutex::default(),
            reset_lock: tokio::sync::Mutex::new(()),
            migration_lock: tokio::sync::Mutex::new(()),
            migration_grace: DEFAULT_MIGRATION_GRACE,
        }
    }

    pub fn generation(&self) -> Arc<Generation> {
        self.current.read().clone()
    }

    /// Builds the log's snapshot record of the state as it is when called.
    pub fn snapshot_fn(&self) -> shared::wal::SnapshotFn {
        let (current, jia_service_url) = (self.current.clone(), self.jia_service_url.clone());
        let default_icon = self.default_icon.clone();
        let placement = self.placement.snapshot_parts();
        Arc::new(move || {
            let generation = current.read().clone();
            snapshot_record(&generation, &jia_service_url.read(), &default_icon, &placement)
        })
    }

    /// Whether this node serves the public API from its own state. A replica whose stall
    /// watchdog is late (it was stopped or starved, and its latest conditions may be old) is
    /// not, even before the watchdog has run again.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.stalls.late()
    }

    /// `POST /initialize`: a new generation from the dataset, on every node.
    pub async fn initialize(&self, jia_service_url: String) -> Result<(), ApiError> {
        let _resetting = self.reset_lock.lock().await;
        // Never between a migration's plan and its flip: the reset hands each slot's ISUs to
        // the owner the map names, and a flip after it would name a cell that never got them.
        // A migration that waits for this lock starts on the new generation.
        let _no_migration = self.migration_lock.lock().await;
        let dataset = self.dataset.clone();
        let default_icon = self.default_icon.clone();
        let generation =
            tokio::task::spawn_blocking(move || Generation::from_dataset(new_generation_id(), &dataset, &default_icon))
                .await
                .map_err(|error| ApiError::Internal(error.to_string()))?;
        let generation = Arc::new(generation);
        if self.replicated {
            // Committed first, and swapped in by applying the record (here as everywhere):
            // a proposal that fails may still commit, and memory never runs ahead of the log.
            let record = snapshot_record(
                &generation,
                &jia_service_url,
                &self.default_icon,
                &self.placement.snapshot_parts(),
            );
            *self.prepared.lock() = Some(generation.clone());
            let committed = self.journal.propose_snapshot(record).await;
            self.prepared.lock().take();
            committed.map_err(|error| ApiError::Unavailable(error.to_string()))?;
            if self.generation().id != generation.id {
                return Err(ApiError::Unavailable("a newer /initialize replaced this one".into()));
            }
        } else {
            // Swap first: pushes of the new generation must find it.
            *self.current.write() = generation.clone();
            *self.jia_service_url.write() = jia_service_url;
            // A fresh log: its snapshot holds the new generation.
            self.journal
                .snapshot()
                .await
                .map_err(|error| ApiError::Internal(error.to_string()))?;
        }
        self.reset_workers(&generation, false)
            .await
            .map_err(|error| ApiError::Internal(error.to_string()))?;
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Signs a user in (creating it if needed, logged before the answer) and returns the
    /// `Set-Cookie` value. A user whose record was not logged is forgotten again, so a retry
    /// logs it. Replicated, every replica adds the user when it applies the record (this one
    /// before the answer), and the leader tells the workers then.
    pub async fn sign_in(self: &Arc<Self>, user: &str) -> Result<String, ApiError> {
        let generation = self.generation();
        if generation.has_user(user) {
            return Ok(self.session_key.set_cookie(user, generation.id));
        }
        // To completion even if the client leaves: a user added here but neither logged nor
        // forgotten again would exist on this replica only.
        let (state, user) = (self.clone(), user.to_owned());
        tokio::spawn(async move { state.sign_in_new(&user).await })
            .await
            .map_err(|error| ApiError::Internal(error.to_string()))?
    }

    async fn sign_in_new(&self, user: &str) -> Result<String, ApiError> {
        let generation = self.generation();
        let not_logged = |error: crate::journal::JournalError| match error {
            crate::journal::JournalError::NotCommitted(error) => ApiError::Unavailable(error.to_string()),
            other => ApiError::Internal(other.to_string()),
        };
        if self.replicated {
            // Added by applying its record (here too, before the answer), never before: a
            // commit that fails may still happen, and then every replica has the user.
            self.journal.user(generation.id, user).await.map_err(not_logged)?;
            if !generation.has_user(user) {
                return Err(ApiError::Unavailable(
                    "the generation changed during the sign-in".into(),
                ));
            }
        } else if generation.add_user(user) {
            if let Err(error) = self.journal.user(generation.id, user).await {
                generation.remove_user(user);
                return Err(not_logged(error));
            }
            self.user_sync.add(generation.id, user);
        }
        Ok(self.session_key.set_cookie(user, generation.id))
    }
}

/// How long a migration's source keeps its copy after the flip, until the configured
/// `--migration-grace-ms` (the same default) is set.
const DEFAULT_MIGRATION_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The log's snapshot record of `generation` with the placement's map and migrations.
fn snapshot_record(
    generation: &Generation,
    jia_service_url: &str,
    default_icon: &Bytes,
    placement: &impl Fn() -> (shared::placement_map::PlacementMap, Vec<shared::migration::Migration>),
) -> Vec<u8> {
    let mut restored = generation.to_restored(jia_service_url, default_icon);
    let (map, migrations) = placement();
    restored.placement = Some(map);
    restored.migrations = migrations;
    crate::journal::snapshot_record(&restored)
}

fn new_generation_id() -> u64 {
    rand::random::<u64>() | 1
}
