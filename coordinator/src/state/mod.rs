//! The coordinator's memory and protocols, one concern per module:
//! - [`command`]: what is replicated, the closed list of changes to the authoritative state;
//! - [`apply`]: the write path: proposing a command to the group's log, and the one `apply`
//!   that changes the state (a lone coordinator is a group of one);
//! - [`model`]: the plain data they share (an ISU and its latest condition, a registration's outcome);
//! - [`seed`]: the dataset, built again for each use instead of kept;
//! - [`generation`]: users, ISUs and their latest conditions of one dataset generation;
//! - [`trend`]: the trend cache a generation holds, built in the background from the latest conditions;
//! - [`registration`]: the registration protocol with the workers and JIA;
//! - [`worker_sync`]: bringing workers to the current generation and watching them;
//! - [`placement`]: the placement map, the router's copy of it and the slot gate;
//! - [`migration`]: live migration of slots and pins between cells;
//! - [`replica`]: a replica's roles: the leader's duties, a follower's pulls, the stall watchdog.
//!
//! They use each other in one direction only (checked by `e2e/tests/structure.rs`): `model`
//! and `seed` use none of them; `trend` uses `model`; `command` uses none; `generation` uses `model`,
//! `trend` and `command`; `placement` uses none of them. This module, which holds [`State`],
//! uses those; the protocols on [`State`] (`apply`, `registration`, `worker_sync`,
//! `migration`, `replica`) use it and the ones below it, and nothing here uses them by path.
//!
//! Locks are `parking_lot` ones held for short, synchronous sections only
//! (never across `.await`).

pub mod apply;
pub mod command;
mod generation;
pub mod migration;
mod model;
pub mod placement;
pub mod registration;
pub mod replica;
pub mod seed;
mod trend;
mod worker_sync;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;
use shared::session::SessionKey;

pub use generation::Generation;
pub use model::{Isu, Latest, OwnIcon, SharedStr};
pub use placement::Placement;
pub use trend::Trend;

use crate::error::ApiError;
use crate::user_sync::UserSyncer;
use crate::worker_client::WorkerClient;

/// What the state holds at start, until the group's log gives it a generation (a new
/// group's first leader proposes this one as the group's: see [`replica`]).
pub enum Start {
    /// A new generation of the dataset; JIA at this URL until `/initialize` sets one.
    Fresh { jia_service_url: String },
    /// The state of a journal written by a build before 2026-12-06, being converted.
    Converted(command::Snapshot),
}

/// The coordinator's whole state (wrapped in `Arc` by [`AppState`](crate::AppState)).
pub struct State {
    current: Arc<RwLock<Arc<Generation>>>,
    pub jia_service_url: Arc<RwLock<String>>,
    /// The group's log (its proposer is attached once the replica runs).
    pub log: apply::Log,
    /// With a data directory: the icons the log names by hash; set once before serving.
    pub icons: Option<Arc<crate::icons::IconStore>>,
    /// This replica has applied its group's generation.
    established: AtomicBool,
    /// This replica leads and has applied every entry of earlier terms and ended the
    /// registrations they left: it takes leader-only writes.
    leading: AtomicBool,
    /// `/initialize`: the generation it proposed, taken by applying its command instead of
    /// being built again from the dataset.
    prepared: parking_lot::Mutex<Option<Arc<Generation>>>,
    seed: Arc<seed::Seed>,
    /// The log's replay at start (see [`apply::Replay`]).
    replay: parking_lot::Mutex<apply::Replay>,
    /// The current generation is the empty one a fresh start holds (see [`State::new`]).
    unbuilt: AtomicBool,
    pub default_icon: Bytes,
    pub session_key: SessionKey,
    pub workers: WorkerClient,
    /// Tells the workers about new users, in the background.
    pub user_sync: UserSyncer,
    /// The control plane: which cell owns which ISU.
    pub placement: Placement,
    ready: AtomicBool,
    /// The stall watchdog (see [`State::watch_for_stalls`]).
    pub(crate) stalls: replica::Stalls,
    /// Leading: the cells whose worker did not answer when this replica took over,
    /// so the registrations it holds provisionally are ended when it answers again.
    registrations_left: parking_lot::Mutex<std::collections::BTreeSet<shared::placement_map::CellId>>,
    /// Leading: registrations a worker holds unaccepted, by generation and id, with when a
    /// sweep first found them and their UUID (see `registration::ACCEPTANCE_WAIT`).
    awaiting_acceptance: parking_lot::Mutex<std::collections::HashMap<(u64, i64), (std::time::Instant, String)>>,
    /// One sweep of a cell's provisional registrations at a time (the watch's, a takeover's,
    /// a migration's, and those a registration waiting on an earlier one drives).
    sweeping: parking_lot::Mutex<std::collections::HashMap<shared::placement_map::CellId, Arc<tokio::sync::Mutex<()>>>>,
    reset_lock: tokio::sync::Mutex<()>,
    /// Leading: one reservation of registration ids at a time (see `registration::ID_BLOCK`).
    reserving_ids: tokio::sync::Mutex<()>,
    /// One migration at a time.
    migration_lock: tokio::sync::Mutex<()>,
    /// How long a migration's source keeps its copy after the flip.
    pub migration_grace: std::time::Duration,
}

impl State {
    /// A fresh start holds an empty generation until it knows whether its group has one: a
    /// replica restarting from its data directory takes the log's, and only a new group's
    /// first leader builds one from the dataset ([`State::build_first_generation`]), so a
    /// restart at a million ISUs does not build a generation it throws away.
    pub fn new(
        seed: seed::Seed,
        default_icon: Bytes,
        session_key: SessionKey,
        workers: WorkerClient,
        placement: Placement,
        start: Start,
    ) -> State {
        let unbuilt = matches!(start, Start::Fresh { .. });
        let (generation, jia_service_url) = match start {
            Start::Converted(snapshot) => (
                Generation::from_snapshot(&snapshot, |each| seed.each_isu(each), &default_icon),
                snapshot.jia_service_url,
            ),
            Start::Fresh { jia_service_url } => (
                Generation::from_dataset(new_generation_id(), &shared::dataset::Dataset::default(), &default_icon),
                jia_service_url,
            ),
        };
        let current = Arc::new(RwLock::new(Arc::new(generation)));
        let current_id = current.clone();
        State {
            user_sync: UserSyncer::new(placement.map().cells().len(), Arc::new(move || current_id.read().id)),
            current,
            jia_service_url: Arc::new(RwLock::new(jia_service_url)),
            log: apply::Log::default(),
            icons: None,
            established: AtomicBool::new(false),
            leading: AtomicBool::new(false),
            prepared: parking_lot::Mutex::new(None),
            seed: Arc::new(seed),
            replay: parking_lot::Mutex::default(),
            unbuilt: AtomicBool::new(unbuilt),
            default_icon,
            session_key,
            workers,
            placement,
            ready: AtomicBool::new(false),
            stalls: replica::Stalls::default(),
            registrations_left: parking_lot::Mutex::default(),
            awaiting_acceptance: parking_lot::Mutex::default(),
            sweeping: parking_lot::Mutex::default(),
            reset_lock: tokio::sync::Mutex::new(()),
            reserving_ids: tokio::sync::Mutex::new(()),
            migration_lock: tokio::sync::Mutex::new(()),
            migration_grace: DEFAULT_MIGRATION_GRACE,
        }
    }

    /// A new group's first leader: the current generation built from the dataset (with the
    /// empty one's id), before it is proposed as the group's. Once only.
    pub(super) async fn build_first_generation(&self) -> Result<(), ApiError> {
        if !self.unbuilt.load(Ordering::Acquire) {
            return Ok(());
        }
        let (seed, default_icon, id) = (self.seed.clone(), self.default_icon.clone(), self.generation().id);
        let generation =
            tokio::task::spawn_blocking(move || Generation::from_isus(id, |each| seed.each_isu(each), &default_icon))
                .await
                .map_err(|error| ApiError::Internal(error.to_string()))?;
        let mut current = self.current.write();
        // Unless the log gave this replica a generation meanwhile.
        if self.unbuilt.swap(false, Ordering::AcqRel) && current.id == id {
            *current = Arc::new(generation);
        }
        Ok(())
    }

    pub fn generation(&self) -> Arc<Generation> {
        self.current.read().clone()
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
        let default_icon = self.default_icon.clone();
        let seed = self.seed.clone();
        // The dataset stays loaded until every worker has its reset (they share it). It is
        // loaded after the generation is built (from its ISUs one at a time, not from it),
        // so that its pieces, freed after the resets, are not scattered among the
        // generation's.
        let (generation, _dataset) = tokio::task::spawn_blocking(move || {
            let generation = Generation::from_isus(new_generation_id(), |each| seed.each_isu(each), &default_icon);
            (generation, seed.load())
        })
        .await
        .map_err(|error| ApiError::Internal(error.to_string()))?;
        let generation = Arc::new(generation);
        // Committed first, and swapped in by applying the command (here as everywhere): a
        // proposal that fails may still commit, and memory never runs ahead of the log.
        let command = self.snapshot_of(&generation, &jia_service_url);
        *self.prepared.lock() = Some(generation.clone());
        let committed = self.log.propose_as_leader(&command).await;
        self.prepared.lock().take();
        committed.map_err(|error| ApiError::Unavailable(error.to_string()))?;
        if self.generation().id != generation.id {
            return Err(ApiError::Unavailable("a newer /initialize replaced this one".into()));
        }
        self.reset_workers(&generation, false)
            .await
            .map_err(|error| ApiError::Internal(error.to_string()))?;
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Signs a user in (creating it if needed, committed before the answer) and returns the
    /// `Set-Cookie` value. Every replica adds the user when it applies the command (this one
    /// before the answer), and the leader tells the workers then.
    pub async fn sign_in(&self, user: &str) -> Result<String, ApiError> {
        let generation = self.generation();
        if generation.has_user(user) {
            return Ok(self.session_key.set_cookie(user, generation.id));
        }
        // Added by applying its command (here too, before the answer), never before: a
        // commit that fails may still happen, and then every replica has the user.
        let command = command::Command::User {
            generation: generation.id,
            user: user.to_owned(),
        };
        self.log.propose(&command).await.map_err(|error| match error {
            apply::LogError::NotCommitted(error) => ApiError::Unavailable(error.to_string()),
            other => ApiError::Internal(other.to_string()),
        })?;
        if !generation.has_user(user) {
            return Err(ApiError::Unavailable(
                "the generation changed during the sign-in".into(),
            ));
        }
        Ok(self.session_key.set_cookie(user, generation.id))
    }
}

/// How long a migration's source keeps its copy after the flip, until the configured
/// `--migration-grace-ms` (the same default) is set.
const DEFAULT_MIGRATION_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

fn new_generation_id() -> u64 {
    rand::random::<u64>() | 1
}
