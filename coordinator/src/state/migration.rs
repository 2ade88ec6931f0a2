//! Live migration of a slot or a pinned ISU between cells, driven by the coordinator:
//! clone → flip → redirect → forget (`../shared/design/CELLS.md`, `shared::migration`).
//!
//! One migration runs at a time. Each step is logged before the next one starts, and the
//! map is logged before anyone sees it, so after a crash of any node the coordinator finds
//! every unfinished migration in its log and resumes it (after the flip) or rolls it back
//! (before): [`State::recover_migrations`].
//!
//! 1. plan (logged), freeze the subject's slot for registrations (waits for those in flight);
//! 2. clone: the source exports (forwards new batches, copies the history) → caught up;
//! 3. flip: map v+1 naming the target is logged, the target activates the subject's
//!    registered ISUs, every worker gets the map (the source now forwards what it
//!    receives), nginx reloads; registrations of the slot go on, to the target;
//! 4. forget, after the grace period: the source drops its copy and ends the export.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use shared::migration::{Event, Migration, MigrationError, Recovery, Subject};
use shared::placement_map::{CellId, PlacementError, PlacementMap, SlotMove};
use shared::protocol::{ActivateIsus, ExportSubject, ForgetSubject, IsuRef};

use super::State;

/// Why a migration was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CellsError {
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Placement(#[from] PlacementError),
    #[error("{0}")]
    Machine(#[from] MigrationError),
    /// A node failed during the clone: rolled back, nothing changed.
    #[error("migration rolled back: {0}")]
    RolledBack(String),
    #[error("logging failed: {0}")]
    Log(#[from] shared::wal::WalError),
}

/// What one migration did.
#[derive(Debug, Clone, Serialize)]
pub struct MigrationReport {
    pub id: u64,
    pub subject: String,
    pub from: String,
    pub to: String,
    pub isus: usize,
    pub conditions: usize,
    /// From the plan to the flip (the forget follows after the grace period).
    pub millis: u64,
    pub map_version: u64,
}

impl State {
    /// Moves `subject` to cell `to` (see the module documentation); `None` when it is
    /// there already.
    pub async fn migrate(
        self: &Arc<Self>,
        subject: Subject,
        to: CellId,
    ) -> Result<Option<MigrationReport>, CellsError> {
        let _one_at_a_time = self.migration_lock.lock().await;
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
                self.roll_back(&migration).await;
                return Err(CellsError::RolledBack(reason));
            }
        };
        migration = migration.apply(Event::CaughtUp)?;
        self.log_migration(&migration).await?;

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
        self.journal.placement(&next).await?;
        let next = self.placement.set_map(next);
        migration = migration.apply(Event::Flipped { map_version: version })?;
        self.log_migration(&migration).await?;
        self.after_flip(&migration, &next).await;
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
        self.forget_after_grace(migration);
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
        self.journal.placement(&map).await?;
        let map = self.placement.set_map(map);
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
    /// registered ISUs, the workers and the router get the map.
    async fn after_flip(&self, migration: &Migration, map: &PlacementMap) {
        let generation = self.generation();
        let isus: Vec<IsuRef> = generation
            .all
            .read()
            .iter()
            .filter(|isu| migration.subject.covers(&isu.uuid, Some(map)))
            .map(|isu| IsuRef {
                uuid: isu.uuid.clone(),
                id: isu.id,
            })
            .collect();
        let activate = ActivateIsus {
            generation: generation.id,
            isus,
        };
        if let Err(error) = self.workers.activate(migration.to, &activate).await {
            tracing::error!(%error, id = migration.id, "activating the migrated ISUs failed; retried on restart");
        }
        self.send_map_everywhere(map).await;
    }

    fn forget_after_grace(self: &Arc<Self>, migration: Migration) {
        let state = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(state.migration_grace).await;
            state.forget_source(migration).await;
        });
    }

    async fn forget_source(&self, migration: Migration) {
        let forget = ForgetSubject {
            generation: self.generation().id,
            migration: migration.id,
            subject: migration.subject.clone(),
            map: (*self.placement.map()).clone(),
        };
        if let Err(error) = self.workers.forget(migration.from, &forget).await {
            // The source keeps a copy it no longer serves (it forwards); retried on restart.
            tracing::warn!(%error, id = migration.id, "the source did not forget its copy yet");
            return;
        }
        if let Ok(forgotten) = migration.apply(Event::Forgotten) {
            if let Err(error) = self.log_migration(&forgotten).await {
                tracing::error!(%error, "logging a finished migration failed");
            }
        }
    }

    /// Before the flip: the target drops what it imported; the source keeps owning.
    async fn roll_back(&self, migration: &Migration) {
        let forget = ForgetSubject {
            generation: self.generation().id,
            migration: migration.id,
            subject: migration.subject.clone(),
            map: (*self.placement.map()).clone(),
        };
        for cell in [migration.to, migration.from] {
            // The target drops the import; the source ends its export.
            if let Err(error) = self.workers.forget(cell, &forget).await {
                tracing::error!(%error, id = migration.id, "rolling back a migration failed on a worker");
            }
        }
        match migration.apply(Event::Failed) {
            Ok(failed) => {
                if let Err(error) = self.log_migration(&failed).await {
                    tracing::error!(%error, "logging a rolled-back migration failed");
                }
            }
            Err(error) => tracing::error!(%error, "a migration past its flip cannot roll back"),
        }
        tracing::warn!(id = migration.id, subject = %migration.subject, "migration rolled back");
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
                    self.roll_back(&migration).await;
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
                    self.after_flip(&flipped, &map).await;
                    self.placement.write_router().await;
                    self.forget_after_grace(flipped);
                }
            }
        }
    }

    /// Logs a migration's new state and keeps the unfinished ones in memory (for snapshots).
    async fn log_migration(&self, migration: &Migration) -> Result<(), shared::wal::WalError> {
        self.journal.migration(migration).await?;
        let mut migrations = self.placement.migrations.lock();
        if migration.is_finished() {
            migrations.remove(&migration.id);
        } else {
            migrations.insert(migration.id, migration.clone());
        }
        Ok(())
    }
}

/// The default grace period before a source forgets (the coordinator's `--migration-grace-ms`).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);
