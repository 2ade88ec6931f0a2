//! The write path's two ends: [`Log`] proposes a [`Command`] to the group's raft log and
//! returns once it is committed and applied here; [`State::apply`] is the one place where a
//! committed command changes the authoritative state, on every replica alike (a lone
//! coordinator is a group of one). Snapshots of the state ([`State::snapshot_command`]) and
//! their restore ([`StateApplier`]'s `restore`) are the same state as a whole.
//!
//! ```text
//! handler / leader duty ──propose──▶ raft log ──commit──▶ apply (every replica) ──▶ memory
//!        │                                                                          │
//!        └──── waits for its own replica's apply, then acts on the world ◀──────────┘
//!              (workers, JIA, the router), fenced by the term it leads in
//! ```
//!
//! Applying is idempotent and ignores commands of another generation, so a command
//! committed twice, or a snapshot that overlaps the commands after it, changes nothing.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};

use super::command::{Command, LoggedIsu, Snapshot};
use super::generation::Generation;
use super::model::OwnIcon;
use super::State;

/// How long a proposed command took to be committed and applied here.
pub const RAFT_COMMIT_SECONDS: &str = "coordinator_raft_commit_seconds";

/// This coordinator's way into its group's log (set once its replica runs).
#[derive(Default)]
pub struct Log {
    proposer: OnceLock<consensus::Proposer>,
}

/// Why a command was not committed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error(transparent)]
    NotCommitted(#[from] consensus::ProposeError),
    #[error("the replicated log is not started yet")]
    NotStarted,
}

impl Log {
    /// Starts proposing through this replica (once it runs).
    pub fn attach(&self, proposer: consensus::Proposer) {
        let _ = self.proposer.set(proposer);
    }

    fn proposer(&self) -> Result<&consensus::Proposer, LogError> {
        self.proposer.get().ok_or(LogError::NotStarted)
    }

    /// This replica's raft, once it runs.
    pub fn raft(&self) -> Option<&consensus::Raft> {
        self.proposer.get().map(consensus::Proposer::raft)
    }

    /// Commits `command` from any replica (a follower forwards it to the leader) and waits
    /// until this replica has applied it.
    pub async fn propose(&self, command: &Command) -> Result<(), LogError> {
        self.commit(command, false).await
    }

    /// Commits `command` only while this replica leads: a step of a protocol the leader runs
    /// (a registration, a migration) must not be committed for a replica that no longer
    /// leads (it would race the next leader ending the same protocol).
    pub async fn propose_as_leader(&self, command: &Command) -> Result<(), LogError> {
        self.commit(command, true).await
    }

    async fn commit(&self, command: &Command, as_leader: bool) -> Result<(), LogError> {
        let proposer = self.proposer()?;
        let started = std::time::Instant::now();
        let encoded = command.encode();
        if as_leader {
            proposer.propose_as_leader(encoded).await?;
        } else {
            proposer.propose(encoded).await?;
        }
        metrics::histogram!(RAFT_COMMIT_SECONDS).record(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Waits until this replica has applied what the leader had (see
    /// [`consensus::Proposer::catch_up`]).
    pub async fn catch_up(&self) -> Result<(), LogError> {
        self.proposer()?.catch_up().await?;
        Ok(())
    }

    /// On the leader: waits until it has applied its whole log (see
    /// [`consensus::Proposer::settled`]).
    pub async fn settled(&self) -> Result<(), LogError> {
        self.proposer()?.settled().await?;
        Ok(())
    }
}

/// Applies the group's log to a [`State`] (held weakly: the raft it belongs to lives as
/// long as the state).
pub struct StateApplier {
    state: Weak<State>,
}

impl StateApplier {
    pub fn new(state: &Arc<State>) -> StateApplier {
        StateApplier {
            state: Arc::downgrade(state),
        }
    }
}

impl consensus::Applier for StateApplier {
    fn apply(&self, index: u64, command: &[u8]) -> Vec<u8> {
        let Some(state) = self.state.upgrade() else {
            return Vec::new();
        };
        match Command::decode(command) {
            Some(command) => state.apply(command),
            None => tracing::error!(
                index,
                bytes = command.len(),
                "a command this build cannot read; skipped"
            ),
        }
        Vec::new()
    }

    fn snapshot(&self) -> Vec<u8> {
        match self.state.upgrade() {
            Some(state) => {
                // A generation the replay has not built yet is in the snapshot.
                state.build_deferred();
                state.snapshot_command().encode()
            }
            None => Vec::new(),
        }
    }

    fn replayed(&self) {
        if let Some(state) = self.state.upgrade() {
            state.end_replay();
        }
    }

    fn restore(&self, snapshot: &[u8]) -> Result<(), String> {
        if snapshot.is_empty() {
            return Ok(());
        }
        let Some(state) = self.state.upgrade() else {
            return Ok(());
        };
        match Command::decode(snapshot) {
            Some(Command::Snapshot(mut snapshot)) => {
                state.resolve_icons(&mut snapshot.isus);
                state.restore(snapshot);
                Ok(())
            }
            _ => Err("the raft snapshot does not hold a coordinator snapshot".into()),
        }
    }
}

/// How a snapshot of the current generation is taken (see [`State::adopt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Adopt {
    /// A snapshot command in the log (what the state holds beyond it came later).
    Adding,
    /// An installed snapshot: the state becomes exactly it.
    Exactly,
}

/// The replay of the log at start ([`State::begin_replay`] to [`State::end_replay`]): a
/// generation the log names is built once, when the replay ends, instead of once for each
/// snapshot command replayed (a log without a raft snapshot yet holds the group's first
/// generation and every `/initialize` after it: seconds each at a million ISUs).
#[derive(Default)]
pub(super) struct Replay {
    active: bool,
    /// The last new generation replayed, not built yet, and the commands of it after it.
    deferred: Option<Deferred>,
}

struct Deferred {
    snapshot: Snapshot,
    after: Vec<Command>,
}

impl State {
    /// From here until [`State::end_replay`], a snapshot of a new generation is taken
    /// without building it (see [`Replay`]): call before the replica starts.
    pub fn begin_replay(&self) {
        self.replay.lock().active = true;
    }

    /// Ends the replay: builds the generation it ended with, if it named a new one, and
    /// applies the commands of it that came after (blocking: seconds at a million ISUs).
    pub fn end_replay(&self) {
        let mut replay = self.replay.lock();
        replay.active = false;
        self.build_deferred_locked(&mut replay);
    }

    /// Whether the replay has begun and not ended.
    #[cfg(test)]
    pub(super) fn replaying(&self) -> bool {
        self.replay.lock().active
    }

    /// Builds a deferred generation now (the replay goes on).
    fn build_deferred(&self) {
        self.build_deferred_locked(&mut self.replay.lock());
    }

    fn build_deferred_locked(&self, replay: &mut Replay) {
        let Some(Deferred { snapshot, after }) = replay.deferred.take() else {
            return;
        };
        let started = std::time::Instant::now();
        let generation = Generation::from_snapshot(&snapshot, |each| self.seed.each_isu(each), &self.default_icon);
        self.take_generation(Arc::new(generation));
        self.established.store(true, Ordering::Release);
        tracing::info!(
            generation = snapshot.generation,
            commands_after = after.len(),
            took_ms = started.elapsed().as_millis() as u64,
            "built the generation the log replay took"
        );
        for command in after {
            self.apply_now(command);
        }
    }

    /// Applies one committed command: the only code that changes the authoritative state.
    pub(super) fn apply(&self, mut command: Command) {
        match &mut command {
            Command::Isu { isu, .. } => self.resolve_icons(std::slice::from_mut(isu)),
            Command::Snapshot(snapshot) => self.resolve_icons(&mut snapshot.isus),
            _ => {}
        }
        let mut replay = self.replay.lock();
        if replay.active {
            let taken = replay.deferred.as_ref().map(|deferred| deferred.snapshot.generation);
            match (command.generation(), command) {
                // A new generation: taken, built when the replay ends (or replaced).
                (Some(generation), Command::Snapshot(snapshot))
                    if generation != taken.unwrap_or_else(|| self.generation().id) =>
                {
                    self.defer(&mut replay, snapshot);
                }
                // The deferred generation's: applied once it is built; another's: nothing.
                (Some(generation), command) if taken.is_some() => {
                    if Some(generation) == taken {
                        let deferred = replay.deferred.as_mut().expect("a deferred generation");
                        deferred.after.push(command);
                    }
                }
                (_, command) => self.apply_now(command),
            }
            return;
        }
        drop(replay);
        self.apply_now(command);
    }

    /// An installed (or restored) snapshot: the state becomes exactly it.
    fn restore(&self, snapshot: Snapshot) {
        let mut replay = self.replay.lock();
        if replay.active {
            // A new generation, or the one deferred (replaced, with what came after it).
            if replay.deferred.is_some() || snapshot.generation != self.generation().id {
                self.defer(&mut replay, snapshot);
                return;
            }
        }
        drop(replay);
        self.adopt(snapshot, Adopt::Exactly);
    }

    /// Takes a new generation's snapshot without building it: what outlives a generation
    /// (JIA's URL, the map, the migrations) now, in log order; the generation at the end.
    fn defer(&self, replay: &mut Replay, snapshot: Snapshot) {
        self.adopt_beyond_generation(&snapshot);
        replay.deferred = Some(Deferred {
            snapshot,
            after: Vec::new(),
        });
    }

    fn apply_now(&self, command: Command) {
        let current = self.generation();
        match command {
            Command::Snapshot(snapshot) => self.adopt(snapshot, Adopt::Adding),
            Command::User { generation, user } if generation == current.id => {
                // Only the leader tells the workers (it is the one running the syncer).
                if current.add_user(&user) && self.is_leader() {
                    self.user_sync.add(generation, &user);
                }
            }
            Command::Isu {
                generation,
                isu,
                request,
            } if generation == current.id => {
                if let Some(request) = request {
                    let registered = (isu.uuid.clone(), isu.owner.clone());
                    current.requests.lock().insert(request, registered);
                }
                if let Some(unfinished) = current.unfinished.lock().get_mut(&isu.uuid) {
                    unfinished.accepted = true;
                }
                current.publish_logged(&isu, &self.default_icon);
            }
            Command::Abandoned {
                generation,
                registrations,
            } if generation == current.id => {
                let mut requests = current.requests.lock();
                let mut unfinished = current.unfinished.lock();
                for registration in registrations {
                    unfinished.remove(&registration.uuid);
                    if let Some(request) = registration.request {
                        requests.insert(request, (registration.uuid, registration.owner));
                    }
                }
            }
            Command::Removed { generation, uuid } if generation == current.id => {
                current.unfinished.lock().remove(&uuid);
                current.remove(&uuid);
            }
            Command::Registering { generation, unfinished } if generation == current.id => {
                if let Some(request) = &unfinished.request {
                    let registered = (unfinished.uuid.clone(), unfinished.owner.clone());
                    current.requests.lock().insert(request.clone(), registered);
                }
                current.unfinished.lock().insert(unfinished.uuid.clone(), unfinished);
            }
            Command::Published { generation, uuid } if generation == current.id => {
                current.unfinished.lock().remove(&uuid);
            }
            Command::Ids { generation, up_to } if generation == current.id => {
                current.ids_reserved.fetch_max(up_to, Ordering::AcqRel);
            }
            Command::Map(map) => self.take_map(map),
            Command::Migration(migration) => self.placement.record_migration(&migration),
            // Of another generation (a write that raced an `/initialize`).
            Command::Ids { .. }
            | Command::User { .. }
            | Command::Isu { .. }
            | Command::Removed { .. }
            | Command::Registering { .. }
            | Command::Published { .. }
            | Command::Abandoned { .. } => {}
        }
    }

    /// Takes a snapshot's state: its generation, JIA's URL, the map if newer, the unfinished
    /// migrations. A snapshot of the current generation is added to it (the log's commands
    /// after it may be applied already), or, installed, replaces its ISUs exactly: an ISU
    /// removed within the snapshot's span is removed here too.
    fn adopt(&self, snapshot: Snapshot, how: Adopt) {
        let current = self.generation();
        if current.id == snapshot.generation {
            for user in &snapshot.users {
                current.add_user(user);
            }
            for isu in &snapshot.isus {
                current.publish_logged(isu, &self.default_icon);
            }
            if how == Adopt::Exactly {
                let kept: std::collections::HashSet<&str> = snapshot.isus.iter().map(|isu| isu.uuid.as_str()).collect();
                for isu in current.registered() {
                    if !kept.contains(&*isu.uuid) {
                        current.remove(&isu.uuid);
                    }
                }
            }
            *current.unfinished.lock() = snapshot
                .unfinished
                .iter()
                .map(|unfinished| (unfinished.uuid.clone(), unfinished.clone()))
                .collect();
            current.ids_reserved.fetch_max(snapshot.ids_reserved, Ordering::AcqRel);
        } else {
            // `/initialize` built its generation before proposing it: taken, not built again.
            let prepared = self
                .prepared
                .lock()
                .take_if(|prepared| prepared.id == snapshot.generation);
            let generation = match prepared {
                Some(prepared) => prepared,
                None => Arc::new(Generation::from_snapshot(
                    &snapshot,
                    |each| self.seed.each_isu(each),
                    &self.default_icon,
                )),
            };
            self.take_generation(generation);
        }
        self.adopt_beyond_generation(&snapshot);
        self.established.store(true, Ordering::Release);
    }

    /// Swaps `generation` in.
    fn take_generation(&self, generation: Arc<Generation>) {
        let id = generation.id;
        *self.current.write() = generation;
        self.unbuilt.store(false, Ordering::Release);
        tracing::info!(generation = id, "took a new generation");
    }

    /// A snapshot's state that outlives its generation: JIA's URL, the map if newer, the
    /// unfinished migrations.
    fn adopt_beyond_generation(&self, snapshot: &Snapshot) {
        *self.jia_service_url.write() = snapshot.jia_service_url.clone();
        if let Some(map) = snapshot.placement.clone() {
            self.take_map(map);
        }
        self.placement.replace_migrations(&snapshot.migrations);
    }

    /// Takes a committed map (if newer); the worker client calls its cells from then on.
    fn take_map(&self, map: shared::placement_map::PlacementMap) {
        self.placement.adopt_map(map);
        self.workers.follow(self.placement.map().cells());
    }

    /// The whole state as one command (the log's snapshots, `/initialize`'s proposal).
    pub(super) fn snapshot_command(&self) -> Command {
        self.snapshot_of(&self.generation(), &self.jia_service_url.read())
    }

    /// A snapshot of `generation` with this state's map and unfinished migrations.
    pub(super) fn snapshot_of(&self, generation: &Generation, jia_service_url: &str) -> Command {
        let mut snapshot = generation.to_snapshot(jia_service_url);
        snapshot.placement = Some((*self.placement.map()).clone());
        snapshot.migrations = self.placement.migrations();
        Command::Snapshot(snapshot)
    }

    /// A hash of the authoritative state: the generation, its users, its ISUs (icons
    /// included) and the placement map; not the soft state (latest conditions).
    pub fn state_hash(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let generation = self.generation();
        let mut hasher = std::hash::DefaultHasher::new();
        generation.id.hash(&mut hasher);
        let mut users: Vec<String> = generation.users.read().iter().cloned().collect();
        users.sort();
        users.hash(&mut hasher);
        for isu in generation.all.read().iter() {
            // An icon by its hash (its bytes may still be on their way to this replica).
            let hash = isu.icon_hash();
            let image = match isu.icon.as_deref() {
                Some(OwnIcon { hash: Some(_), .. }) => &[][..],
                Some(icon) => &icon.bytes[..],
                None => &self.default_icon[..],
            };
            (
                isu.id,
                &isu.uuid,
                &isu.name,
                &isu.character,
                &isu.owner,
                hash.as_ref(),
                image,
            )
                .hash(&mut hasher);
        }
        let map = self.placement.map();
        serde_json::to_string(&*map).unwrap_or_default().hash(&mut hasher);
        hasher.finish()
    }

    /// Gives `isus` the bytes of the icons they name by hash that this replica holds; one it
    /// lacks is fetched from a peer in the background (and meanwhile when asked for).
    fn resolve_icons(&self, isus: &mut [LoggedIsu]) {
        let Some(icons) = &self.icons else {
            return;
        };
        for isu in isus.iter_mut().filter(|isu| isu.image.is_none()) {
            let Some(hash) = isu.icon else { continue };
            match icons.local(&hash) {
                Some(bytes) => isu.image = Some(bytes),
                None => {
                    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                        let (icons, peers) = (icons.clone(), self.peer_urls());
                        runtime.spawn(async move { icons.fetch(hash, &peers).await });
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
