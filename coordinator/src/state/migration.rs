//! Live migration of a slot or a pinned ISU between cells, driven by the coordinator:
//! clone → flip → redirect → forget (`docs/cells.md`, "Live migration"; `shared::migration`).
//!
//! One migration runs at a time. Each step is logged before the next one starts, and the
//! map is logged before anyone sees it, so after a crash of any node the coordinator finds
//! every unfinished migration in its log and resumes it (after the flip) or rolls it back
//! (before): [`State::recover_migrations`].
//!
//! 1. plan (logged), freeze the subject's slot for registrations (waits for those in flight),
//!    end the registrations the source holds unfinished;
//! 2. clone: the source exports (forwards new batches, copies the history) → caught up;
//! 3. flip: map v+1 naming the target is logged, the target activates the subject's
//!    registered ISUs, every worker gets the map (the source now forwards what it
//!    receives), nginx reloads; registrations of the slot go on, to the target;
//! 4. forget, after the grace period: the source drops its copy and ends the export.
//!
//! What a dead node interrupts is finished in the background, retried every second until
//! the node answers: the activation and the forget after a flip, the two forgets of a roll
//! back (the source first, so it stops forwarding to a target that may be gone). Until then
//! the migration stays unfinished in the log, and a new migration of the same slot waits
//! for it ([`SLOT_BUSY_WAIT`]), so a late forget never meets a newer copy of its slot.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shared::migration::{Event, Migration, MigrationError, Recovery, Subject};
use shared::placement_map::{CellId, PlacementError, PlacementMap, SlotMove};
use shared::protocol::{ActivateIsus, ExportSubject, ForgetSubject, IsuRef};

use super::command::Command;
use super::State;

/// Why a migration was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CellsError {
    #[error("{0}")]
    Refused(String),
    /// An earlier migration of the same slot has not finished.
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    Placement(#[from] PlacementError),
    #[error("{0}")]
    Machine(#[from] MigrationError),
    /// A node failed during the clone: rolled back, nothing changed.
    #[error("migration rolled back: {0}")]
    RolledBack(String),
    #[error("logging failed: {0}")]
    Log(#[from] super::apply::LogError),
}

/// What one migration did (the cells API answers with it).
pub use shared::protocol::cells::MigrationReport;

impl State {
    /// Moves `subject` to cell `to` (see the module documentation); `None` when it is
    /// there already.
    pub async fn migrate(
        self: &Arc<Self>,
        subject: Subject,
        to: CellId,
    ) -> Result<Option<MigrationReport>, CellsError> {
        let _one_at_a_time = self.lock_for(&subject).await?;
        let map = self.placement.map();
        if map.cell(to).is_none() {
            return Err(PlacementError::UnknownCell(to).into());
        }
        let from = subject.owner(&map);
        if from == to {
            if let Subject::Pin(uuid) = &subject {
                // Already there by its slot: pinning changes no data, only the map.
                if !map.pins().contains_key(uuid) {
                    let mut next = (*map).clone();
                    next.pin(uuid, to)?;
                    self.publish_map(next).await?;
                }
            }
            return Ok(None);
        }
        let started = Instant::now();
        let id = rand::random::<u64>() >> 12;
        let mut migration = Migration::plan(id, subject.clone(), from, to)?;
        self.log_migration(&migration).await?;
        let _frozen = self.placement.gate.freeze(subject.slot()).await;
        migration = migration.apply(Event::CloneStarted)?;
        self.log_migration(&migration).await?;
        let generation = self.generation();
        // A registration its leader left unfinished on the source would reach the target as
        // an import, which nothing publishes: the source's are ended first (published,
        // finished from JIA's acceptance, or rolled back), now that none can start in the slot.
        if let Err(error) = self
            .sweep_registrations(&generation, from, super::registration::Sweep::DecideNow)
            .await
        {
            self.roll_back(migration);
            return Err(CellsError::RolledBack(format!(
                "ending the registrations the source holds unfinished: {error:#}"
            )));
        }
        let target_url = map.cell(to).expect("checked above").internal_url.clone();
        let export = ExportSubject {
            generation: generation.id,
            migration: id,
            subject: subject.clone(),
            target_url,
        };
        let report = match self.workers.export(from, &export).await {
            Ok(report) => report,
            Err(error) => {
                let reason = error.to_string();
                self.roll_back(migration);
                return Err(CellsError::RolledBack(reason));
            }
        };
        migration = migration.apply(Event::CaughtUp)?;
        self.log_migration(&migration).await?;
        fail::fail_point!("migration-caught-up");

        // Flip: the map first (logged), then everyone who acts on it.
        let mut next = (*self.placement.map()).clone();
        match &subject {
            Subject::Slot(slot) => {
                next.assign_slot(*slot, to)?;
            }
            Subject::Pin(uuid) => {
                next.pin(uuid, to)?;
            }
        }
        let version = next.version();
        // nginx keeps the old map until the target shows the subject's ISUs.
        let hold = self.placement.hold_router();
        // Applying the committed map makes it this replica's.
        self.log.propose_as_leader(&Command::Map(next)).await?;
        let next = self.placement.map();
        migration = migration.apply(Event::Flipped { map_version: version })?;
        self.log_migration(&migration).await?;
        let activated = self.after_flip(&migration, &next).await;
        drop(hold);
        let router = self.clone();
        tokio::spawn(async move { router.placement.write_router().await });
        let millis = started.elapsed().as_millis() as u64;
        tracing::info!(
            id,
            subject = %subject,
            from = self.workers.role(from),
            to = self.workers.role(to),
            isus = report.isus,
            conditions = report.conditions,
            millis,
            map_version = version,
            "migration flipped"
        );
        self.finish_after_flip(migration, activated);
        Ok(Some(MigrationReport {
            id,
            subject: subject.to_string(),
            from: next.cells()[usize::from(from)].name.clone(),
            to: next.cells()[usize::from(to)].name.clone(),
            isus: report.isus,
            conditions: report.conditions,
            millis,
            map_version: version,
        }))
    }

    /// Runs a plan of slot moves (drain, rebalance) one migration at a time; stops at the
    /// first failure (what moved stays moved).
    pub async fn migrate_plan(
        self: &Arc<Self>,
        slots: Vec<SlotMove>,
        pins: Vec<(String, CellId)>,
    ) -> (Vec<MigrationReport>, Option<CellsError>) {
        let mut done = Vec::new();
        let steps = slots
            .into_iter()
            .map(|step| (Subject::Slot(step.slot), step.to))
            .chain(pins.into_iter().map(|(uuid, to)| (Subject::Pin(uuid), to)));
        for (subject, to) in steps {
            match self.migrate(subject, to).await {
                Ok(Some(report)) => done.push(report),
                Ok(None) => {}
                Err(error) => return (done, Some(error)),
            }
        }
        (done, None)
    }

    /// Logs and publishes a map change that moves no data (a pin on the cell that already
    /// holds the ISU).
    async fn publish_map(&self, map: PlacementMap) -> Result<(), CellsError> {
        self.log.propose_as_leader(&Command::Map(map)).await?;
        let map = self.placement.map();
        self.send_map_everywhere(&map).await;
        self.placement.write_router().await;
        Ok(())
    }

    /// Every worker gets `map` (failures are logged: the worker watch sends it again within a
    /// second, and a stale worker forwards nothing it should not).
    async fn send_map_everywhere(&self, map: &PlacementMap) {
        let sends = self.workers.cells().map(|cell| async move {
            if let Err(error) = self.workers.placement(cell, map).await {
                tracing::warn!(%error, "sending the placement map failed; the watch retries");
            }
        });
        futures_util::future::join_all(sends).await;
    }

    /// After the flip (also when resuming one): the target activates the subject's
    /// registered ISUs (false if it did not answer: [`State::finish_after_flip`] retries),
    /// the workers and the router get the map.
    async fn after_flip(&self, migration: &Migration, map: &PlacementMap) -> bool {
        let activated = match self.activate_target(migration).await {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(%error, id = migration.id, "activating the migrated ISUs failed; retrying");
                false
            }
        };
        self.send_map_everywhere(map).await;
        activated
    }

    async fn activate_target(&self, migration: &Migration) -> Result<(), crate::worker_client::WorkerCallError> {
        let generation = self.generation();
        let map = self.placement.map();
        let isus: Vec<IsuRef> = generation
            .all
            .read()
            .iter()
            .filter(|isu| migration.subject.covers(&isu.uuid, Some(&map)))
            .map(|isu| IsuRef {
                uuid: isu.uuid.to_string(),
                id: isu.id,
            })
            .collect();
        let activate = ActivateIsus {
            generation: generation.id,
            isus,
        };
        self.workers.activate(migration.to, &activate).await
    }

    /// In the background: activation on the target until it answers (unless done), the
    /// grace period, the source's forget until it answers, then `Forgotten` is logged.
    fn finish_after_flip(self: &Arc<Self>, migration: Migration, activated: bool) {
        let state = self.clone();
        tokio::spawn(async move {
            if !activated {
                state
                    .until_done("activating the migrated ISUs on the target", &migration, || {
                        state.activate_target(&migration)
                    })
                    .await;
            }
            tokio::time::sleep(state.migration_grace).await;
            fail::fail_point!("migration-before-forget");
            state.forget_until_done(&migration, migration.from).await;
            match migration.apply(Event::Forgotten) {
                Ok(forgotten) => {
                    if let Err(error) = state.log_migration(&forgotten).await {
                        tracing::error!(%error, "logging a finished migration failed");
                    }
                }
                Err(error) => tracing::error!(%error, "a flipped migration cannot end"),
            }
        });
    }

    /// Before the flip, in the background: the source ends its export (and keeps owning),
    /// then the target drops what it imported; each retried until it answers; then `Failed`
    /// is logged. Until then the migration stays unfinished, so a coordinator restart rolls
    /// it back again (every step is idempotent).
    fn roll_back(self: &Arc<Self>, migration: Migration) {
        tracing::warn!(id = migration.id, subject = %migration.subject, "rolling back a migration");
        let state = self.clone();
        tokio::spawn(async move {
            for cell in [migration.from, migration.to] {
                state.forget_until_done(&migration, cell).await;
            }
            match migration.apply(Event::Failed) {
                Ok(failed) => {
                    if let Err(error) = state.log_migration(&failed).await {
                        tracing::error!(%error, "logging a rolled-back migration failed");
                    }
                    tracing::warn!(id = migration.id, subject = %migration.subject, "migration rolled back");
                }
                Err(error) => tracing::error!(%error, "a migration past its flip cannot roll back"),
            }
        });
    }

    /// Tells `cell` to drop the subject's ISUs the current map does not give it (and to end
    /// its export), until it answers. The map and generation are read at each attempt: no
    /// other migration of the slot runs meanwhile, so the newest map the workers may have is
    /// the right one (a later migration's flip, held back until its target activated, is
    /// not: given it, this source forwarded that subject's reads to a target that did not
    /// show its ISU yet, and a read answered 404).
    async fn forget_until_done(&self, migration: &Migration, cell: CellId) {
        self.until_done("forgetting a migrated subject", migration, || {
            let map = self.placement.map_for_workers();
            let target_url = (cell == migration.from)
                .then(|| map.cell(migration.to).map(|target| target.internal_url.clone()))
                .flatten();
            let forget = ForgetSubject {
                generation: self.generation().id,
                migration: migration.id,
                subject: migration.subject.clone(),
                map: (*map).clone(),
                target_url,
            };
            let workers = &self.workers;
            async move { workers.forget(cell, &forget).await }
        })
        .await;
    }

    /// Runs `step` until it succeeds, once a second ([`RETRY_EVERY`]), logging now and then.
    async fn until_done<F, Fut>(&self, what: &str, migration: &Migration, mut step: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), crate::worker_client::WorkerCallError>>,
    {
        for attempt in 0u64.. {
            match step().await {
                Ok(()) => return,
                Err(error) if attempt % 30 == 0 => {
                    tracing::warn!(%error, id = migration.id, subject = %migration.subject, attempt, "{what} failed; retrying every second");
                }
                Err(_) => {}
            }
            tokio::time::sleep(RETRY_EVERY).await;
        }
    }

    /// The migration lock, once no unfinished migration (one finishing in the background)
    /// shares `subject`'s slot; refused after [`SLOT_BUSY_WAIT`].
    async fn lock_for(&self, subject: &Subject) -> Result<tokio::sync::MutexGuard<'_, ()>, CellsError> {
        let slot = subject.slot();
        let deadline = Instant::now() + SLOT_BUSY_WAIT;
        loop {
            let lock = self.migration_lock.lock().await;
            let busy = self
                .placement
                .migrations
                .lock()
                .values()
                .any(|other| other.subject.slot() == slot);
            if !busy {
                return Ok(lock);
            }
            drop(lock);
            if Instant::now() >= deadline {
                return Err(CellsError::Busy(format!(
                    "slot {slot:02x}: an earlier migration is still finishing (a node it needs does not answer)"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The unfinished migrations of the log, after a restart (once the workers are ready):
    /// rolled back before their flip, resumed after it.
    pub async fn recover_migrations(self: &Arc<Self>) {
        let unfinished: Vec<Migration> = self.placement.migrations.lock().values().cloned().collect();
        for migration in unfinished {
            let map = self.placement.map();
            match migration.on_restart(migration.subject.owner(&map)) {
                Recovery::Nothing => {}
                Recovery::RollBack => {
                    tracing::warn!(id = migration.id, subject = %migration.subject, "rolling back an interrupted migration");
                    self.roll_back(migration);
                }
                Recovery::ResumeAfterFlip => {
                    tracing::warn!(id = migration.id, subject = %migration.subject, "resuming an interrupted migration after its flip");
                    let flipped = match migration.phase {
                        shared::migration::Phase::Flipped { .. } => migration.clone(),
                        _ => match migration.apply(Event::Flipped {
                            map_version: map.version(),
                        }) {
                            Ok(flipped) => flipped,
                            Err(error) => {
                                tracing::error!(%error, "cannot resume a migration");
                                continue;
                            }
                        },
                    };
                    if let Err(error) = self.log_migration(&flipped).await {
                        tracing::error!(%error, "logging a resumed migration failed");
                    }
                    let activated = self.after_flip(&flipped, &map).await;
                    self.placement.write_router().await;
                    self.finish_after_flip(flipped, activated);
                }
            }
        }
    }

    /// Commits a migration's new state (applying it keeps the unfinished ones in memory,
    /// for snapshots and the next leader).
    async fn log_migration(&self, migration: &Migration) -> Result<(), super::apply::LogError> {
        self.log.propose_as_leader(&Command::Migration(migration.clone())).await
    }
}

/// How often a step that a dead node interrupted is tried again.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// How long a migration waits for an earlier one of the same slot to finish.
pub const SLOT_BUSY_WAIT: Duration = Duration::from_secs(30);
