//! A worker's part in a live migration (`docs/cells.md`, "Live migration"):
//!
//! - as the **source** (`WORKER_EXPORT`): it registers the export first, so from then on
//!   every batch it accepts for the subject is also sent to the target before the device
//!   gets its 202; then it copies the subject's history to the target in chunks. A batch
//!   accepted before the export was registered is in the copy, one accepted after is
//!   forwarded (maybe both: the target skips what it holds), so when the export answers the
//!   target holds every condition the source acknowledged;
//! - as the **target** (`WORKER_IMPORT`, `WORKER_ACTIVATE`): imported ISUs are unpublished
//!   entries (invisible to reads, not pushed) until the coordinator activates them after
//!   the flip; every step is logged like a registration and its posts;
//! - both (`WORKER_FORGET`): drop the subject's ISUs the given map says are not this
//!   worker's (the source after the grace period; the target of a rolled-back migration),
//!   and end the export.
//!
//! This is the domain side, free of HTTP: its routes are `routes/migration.rs`. The post
//! path's step (a batch for an exported ISU goes to the target too) is [`Exports::forward`]
//! and an import's entries are [`admit`]'s; the write path (`write_path.rs`) calls both.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use shared::migration::Subject;
use shared::placement_map::PlacementMap;
use shared::protocol::{
    ActivateIsus, ExportReport, ExportSubject, ForgetSubject, ImportChunk, ImportIsu, ProvisionalIsu, PublishIsu,
    RollbackIsu, SECRET_HEADER, WORKER_IMPORT,
};

use crate::cells::Cells;
use crate::error::WorkerError;
use crate::journal::Journal;
use crate::store::{IsuEntry, NewCondition, ProvisionalError, Shard, Store};

/// Conditions per history chunk (about 1 MB of JSON).
const CHUNK_CONDITIONS: usize = 20_000;
const IMPORT_TIMEOUT: Duration = Duration::from_secs(30);

/// One export in progress on this (source) worker.
struct Export {
    migration: u64,
    subject: Subject,
    target_url: String,
}

/// The exports of this worker (the post path asks [`Exports::forward`] about each batch),
/// and the calls that send their chunks to the targets.
pub struct Exports {
    any: AtomicBool,
    list: RwLock<Vec<Arc<Export>>>,
    /// The HTTP/2 client to other workers ([`Cells::client`]).
    client: reqwest::Client,
    secret: String,
}

impl Exports {
    pub fn new(client: reqwest::Client, secret: &str) -> Exports {
        Exports {
            any: AtomicBool::new(false),
            list: RwLock::default(),
            client,
            secret: secret.to_owned(),
        }
    }

    fn start(&self, export: Export) {
        let mut list = self.list.write();
        list.retain(|other| other.migration != export.migration);
        list.push(Arc::new(export));
        self.any.store(true, Ordering::Release);
    }

    /// Ends the export of `migration`; whether this process held it.
    fn end(&self, migration: u64) -> bool {
        let mut list = self.list.write();
        let before = list.len();
        list.retain(|other| other.migration != migration);
        self.any.store(!list.is_empty(), Ordering::Release);
        list.len() < before
    }

    fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    /// The target URL and migration a batch for `uuid` must also go to, if it is exported.
    fn target_of(&self, uuid: &str, map: Option<&PlacementMap>) -> Option<(String, u64)> {
        self.list
            .read()
            .iter()
            .find(|export| export.subject.covers(uuid, map))
            .map(|export| (export.target_url.clone(), export.migration))
    }

    /// Sends one chunk to the target (secret, generous timeout); an error names what failed.
    async fn send(&self, target_url: &str, chunk: &ImportChunk) -> Result<(), String> {
        let response = self
            .client
            .post(format!("{target_url}{WORKER_IMPORT}"))
            .header(SECRET_HEADER, &self.secret)
            .timeout(IMPORT_TIMEOUT)
            .json(chunk)
            .send()
            .await
            .map_err(|error| format!("target unreachable: {}", shared::error_chain(&error)))?;
        match response.status() {
            status if status.is_success() => Ok(()),
            status => Err(format!("target answered {status}")),
        }
    }

    /// The source's step of the post path: a batch just stored in `shard` (and logged) for
    /// an exported ISU also goes to the target before the device's 202. A failure is a 503:
    /// the device posts again, and both sides skip what they hold.
    pub async fn forward(
        &self,
        cells: &Cells,
        shard: &Shard,
        uuid: &str,
        batch: &[NewCondition<'_>],
    ) -> Result<(), WorkerError> {
        // Nearly always: nothing is exported, and a post costs one atomic load here.
        if self.is_empty() {
            return Ok(());
        }
        let map = cells.map();
        let Some((target_url, migration)) = self.target_of(uuid, map.as_deref()) else {
            return Ok(());
        };
        let Some(entry) = shard.isu(uuid) else { return Ok(()) };
        let chunk = ImportChunk {
            generation: shard.generation,
            migration,
            isus: vec![ImportIsu {
                id: entry.id(),
                uuid: uuid.to_owned(),
                owner: entry.owner.to_string(),
                name: entry.name.to_string(),
                conditions: batch.iter().map(NewCondition::to_wire).collect(),
            }],
        };
        self.send(&target_url, &chunk).await.map_err(|error| {
            tracing::warn!(%error, uuid, migration, "forwarding a batch to the migration's target failed");
            WorkerError::Unavailable
        })
    }
}

/// This worker's steps in migrations (export, activate, forget; an import is a write, see
/// `write_path.rs`), over the parts of its state they use.
pub struct Migrations<'a> {
    pub store: &'a Store,
    pub journal: &'a Journal,
    pub cells: &'a Arc<Cells>,
    pub exports: &'a Exports,
}

impl Migrations<'_> {
    /// The source: registers the export, then copies the subject's history to the target.
    pub async fn export(&self, request: &ExportSubject) -> Result<ExportReport, WorkerError> {
        let shard = self.store.current(request.generation)?;
        let started = std::time::Instant::now();
        // Registered before the copy is taken: see the module documentation.
        self.exports.start(Export {
            migration: request.migration,
            subject: request.subject.clone(),
            target_url: request.target_url.clone(),
        });
        fail::fail_point!("export-copy");
        let map = self.cells.map();
        let entries = shard.isus_where(|uuid| request.subject.covers(uuid, map.as_deref()));
        let report = self
            .copy(
                request.generation,
                request.migration,
                &request.target_url,
                &shard,
                &entries,
            )
            .await?;
        tracing::info!(
            migration = request.migration,
            subject = %request.subject,
            isus = report.isus,
            conditions = report.conditions,
            chunks = report.chunks,
            millis = started.elapsed().as_millis() as u64,
            "history copied to the migration's target"
        );
        Ok(report)
    }

    /// Sends the whole history of `entries` to the target at `target_url`, in chunks.
    async fn copy(
        &self,
        generation: u64,
        migration: u64,
        target_url: &str,
        shard: &Shard,
        entries: &[Arc<IsuEntry>],
    ) -> Result<ExportReport, WorkerError> {
        let mut report = ExportReport {
            isus: entries.len(),
            ..ExportReport::default()
        };
        let mut chunk = Vec::new();
        let mut in_chunk = 0;
        let flush = async |chunk: &mut Vec<ImportIsu>, report: &mut ExportReport| {
            let body = ImportChunk {
                generation,
                migration,
                isus: std::mem::take(chunk),
            };
            self.exports.send(target_url, &body).await.map_err(|error| {
                tracing::warn!(%error, migration, "copying history to the migration's target failed");
                WorkerError::Unavailable
            })?;
            report.chunks += 1;
            Ok::<(), WorkerError>(())
        };
        for entry in entries {
            let history = shard.wire_history(entry);
            report.conditions += history.len();
            let mut rest = history.as_slice();
            loop {
                let take = rest.len().min(CHUNK_CONDITIONS - in_chunk);
                chunk.push(ImportIsu {
                    id: entry.id(),
                    uuid: entry.uuid.to_string(),
                    owner: entry.owner.to_string(),
                    name: entry.name.to_string(),
                    conditions: rest[..take].to_vec(),
                });
                in_chunk += take;
                rest = &rest[take..];
                if in_chunk >= CHUNK_CONDITIONS {
                    flush(&mut chunk, &mut report).await?;
                    in_chunk = 0;
                }
                if rest.is_empty() {
                    break;
                }
            }
        }
        if !chunk.is_empty() {
            flush(&mut chunk, &mut report).await?;
        }
        Ok(report)
    }

    /// The target, after the flip: the imported ISUs become visible.
    pub async fn activate(&self, request: &ActivateIsus) -> Result<(), WorkerError> {
        let shard = self.store.current(request.generation)?;
        fail::fail_point!("activate-stall");
        let mut missing = 0;
        for isu in &request.isus {
            if shard.publish(&isu.uuid, isu.id) {
                self.journal
                    .publish(&PublishIsu {
                        generation: request.generation,
                        uuid: isu.uuid.clone(),
                        id: isu.id,
                        character: String::new(),
                    })
                    .await?;
            } else {
                missing += 1;
            }
        }
        if missing > 0 {
            tracing::error!(missing, "activation names ISUs this worker did not import");
            return Err(WorkerError::Conflict("not imported"));
        }
        tracing::info!(isus = request.isus.len(), "imported ISUs activated");
        Ok(())
    }

    /// Both: drops the subject's ISUs `request.map` gives another cell, and ends the export.
    pub async fn forget(&self, request: ForgetSubject) -> Result<(), WorkerError> {
        let shard = self.store.current(request.generation)?;
        let cells = self.cells.clone();
        let map = request.map.clone();
        tokio::task::spawn_blocking(move || cells.update(map))
            .await
            .map_err(|error| WorkerError::Internal(error.to_string()))?
            .map_err(|error| WorkerError::Internal(format!("saving the placement map: {error}")))?;
        let exported_here = self.exports.end(request.migration);
        let entries = shard.isus_where(|uuid| {
            request.subject.covers(uuid, Some(&request.map)) && !self.cells.owns_in(&request.map, uuid)
        });
        if let Some(target_url) = request.target_url.as_deref().filter(|_| !exported_here) {
            // This process never held the export (it restarted, or replaced the one that
            // did): what it acknowledged since went nowhere else (nemesis seed 314159, a
            // source replaced between its copy and the flip). The target skips what it holds.
            let report = self
                .copy(request.generation, request.migration, target_url, &shard, &entries)
                .await?;
            tracing::warn!(
                migration = request.migration,
                subject = %request.subject,
                isus = report.isus,
                conditions = report.conditions,
                "this process holds no export of the migration it is the source of: history sent to the target again"
            );
        }
        let mut conditions = 0;
        for entry in &entries {
            if shard.forget(&entry.uuid).is_some() {
                conditions += entry.condition_count();
                self.journal
                    .rollback(&RollbackIsu {
                        generation: request.generation,
                        id: entry.id(),
                        uuid: entry.uuid.to_string(),
                    })
                    .await?;
            }
        }
        tracing::info!(
            migration = request.migration,
            subject = %request.subject,
            isus = entries.len(),
            conditions,
            "forgot the ISUs another cell owns"
        );
        Ok(())
    }
}

/// The target's first step for each ISU of an import chunk (see
/// `WritePath::import` in `write_path.rs`, which then stores its conditions): its
/// invisible entry, logged like a provisional registration, unless it is here already.
pub async fn admit(shard: &Shard, journal: &Journal, chunk: &ImportChunk, isu: &ImportIsu) -> Result<(), WorkerError> {
    match shard.import(&isu.uuid, &isu.owner, &isu.name, isu.id) {
        Ok(true) => {
            journal
                .provisional(
                    &ProvisionalIsu {
                        generation: chunk.generation,
                        id: isu.id,
                        uuid: isu.uuid.clone(),
                        owner: isu.owner.clone(),
                        name: isu.name.clone(),
                        request: None,
                    },
                    false,
                )
                .await?;
            Ok(())
        }
        Ok(false) => Ok(()),
        Err(ProvisionalError::AlreadyExists) => {
            tracing::error!(uuid = %isu.uuid, migration = chunk.migration, "import meets another registration of the UUID");
            Err(WorkerError::Conflict(shared::error::DUPLICATED_ISU))
        }
    }
}
