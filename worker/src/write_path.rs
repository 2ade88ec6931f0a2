//! The write path: every batch of conditions this worker stores goes through here, by one
//! storing step (`WritePath::store`).
//!
//! A device batch (decoded, [`WritePath::post`]) is taken through, in order:
//! 1. the unknown-ISU check (404), then validation (400; the order of `shared::ingest`);
//! 2. **quota, lanes, shaping** ([`crate::ingest`]): the batch is counted against its ISU's
//!    quota and either enters one of its lanes, or is *shaped* (over its quota, or
//!    quarantined): logged and given to a migration's target (4) now, acknowledged, and
//!    stored later by the shaping lane through the same store step (3, without the log);
//! 3. the **store step**, inside the lane: the poison check (the blast-radius tests' fail
//!    points, `poison`), the shard (all or nothing; a published ISU whose batch brought a
//!    condition is queued for the **pusher** in the same step, [`crate::store::Shard::post`],
//!    so the coordinator's latest condition follows at the next push whatever stored it:
//!    a post, a publish or a replay), then the **log** ([`crate::journal`]; a repeat is
//!    already there) before the 202;
//! 4. during a migration of its ISU, the **migration's target** gets the batch too before
//!    the 202 ([`crate::migration::Exports::forward`]).
//!
//! Who calls it:
//! - the device server (`DeviceService` in `routes/device.rs`) and the main listener's
//!   `POST /api/condition/:uuid` (`routes/condition.rs`), where a post arrives that another
//!   cell forwarded (a stale route, or a device that kept its old URL);
//! - the shaping lane ([`crate::ingest::run_shaping_lane`] wired to
//!   [`WritePath::store_shaped`] at start): the shaped batches, logged already;
//! - a migration's target ([`WritePath::import`], `routes/migration.rs`): the source's copy
//!   of the history and the batches it forwards during the migration. Their entries are the
//!   migration's ([`crate::migration::admit`]); their conditions are stored and logged by
//!   the same step, not counted as stored device conditions (they were counted where the
//!   device posted them) and not forwarded on.

use std::time::Duration;

use shared::ingest::{validate_batch, PostedCondition};
use shared::protocol::ImportChunk;

use crate::cells::Cells;
use crate::error::WorkerError;
use crate::ingest::{Ingest, Route, ShapedBatch};
use crate::journal::Journal;
use crate::migration::{self, Exports};
use crate::store::{NewCondition, PostError, Shard, Store};

/// The stored-conditions counter, looked up once (after the recorder is installed: the
/// first device post comes after the node's start), not at every batch.
static CONDITIONS_STORED: std::sync::LazyLock<metrics::Counter> =
    std::sync::LazyLock::new(|| metrics::counter!(shared::telemetry::CONDITIONS_STORED));

/// How long a poisoned batch hangs (see `poison`).
pub const POISON_STALL: Duration = Duration::from_secs(5);

/// The write path over the parts of the worker's state it uses (borrowed: building one
/// costs nothing; the handlers get one from `Shared::write_path` in `state.rs`).
pub struct WritePath<'a> {
    pub store: &'a Store,
    pub journal: &'a Journal,
    pub ingest: &'a Ingest,
    pub exports: &'a Exports,
    pub cells: &'a Cells,
}

/// Where a batch comes from: what the store step does besides storing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A device batch in its lane: counted, logged.
    Lane,
    /// A shaped device batch, logged when it was accepted: counted.
    Shaped,
    /// A migration's chunk: logged.
    Import,
}

impl WritePath<'_> {
    /// A shaped ISU meeting a full shaping lane is refused (429) before its body is read.
    /// (The lane is nearly always empty: one atomic load, the sketch only when it is full.)
    pub fn refuse_shaped_early(&self, uuid: &str) -> Result<(), WorkerError> {
        if self.ingest.shaping_full() && self.ingest.is_shaped(uuid) {
            return Err(self.ingest.refuse_shaped());
        }
        Ok(())
    }

    /// A device batch for `uuid`, decoded: stored, all or nothing, through the ISU's lane,
    /// or shaped. `Ok` is the device's 202.
    pub async fn post(&self, uuid: String, posted: &[PostedCondition<'_>]) -> Result<(), WorkerError> {
        let shard = self.store.shard();
        if shard.isu(&uuid).is_none() {
            return Err(WorkerError::IsuNotFound);
        }
        let batch: Vec<NewCondition<'_>> = validate_batch(posted)?
            .into_iter()
            .map(|condition| NewCondition {
                timestamp: condition.timestamp,
                flags: condition.flags,
                message: condition.message,
            })
            .collect();
        match self.ingest.route(&uuid, batch.len()) {
            Route::Lane(lane) => {
                let _inside = self.ingest.enter(lane, &uuid).await?;
                let stored = async {
                    self.store(&shard, &uuid, &batch, Origin::Lane).await?;
                    self.exports.forward(self.cells, &shard, &uuid, &batch).await
                };
                self.ingest.guarded(&uuid, stored).await
            }
            Route::Shaped => {
                // Over its quota (or quarantined): logged and acknowledged now, stored when
                // the lanes have room; 429 when the shaping lane is full.
                let place = self.ingest.reserve_shaping(batch.len())?;
                self.journal.post(shard.generation, &uuid, &batch).await?;
                self.exports.forward(self.cells, &shard, &uuid, &batch).await?;
                let conditions = batch.iter().map(NewCondition::to_wire).collect();
                self.ingest.shape(
                    place,
                    ShapedBatch {
                        generation: shard.generation,
                        uuid,
                        conditions,
                    },
                );
                Ok(())
            }
        }
    }

    /// The shaping lane's store: a shaped batch (logged and acknowledged already) goes into
    /// the shard it was accepted for, if that is still the current one.
    pub async fn store_shaped(&self, batch: ShapedBatch) {
        let shard = self.store.shard();
        if shard.generation != batch.generation {
            return;
        }
        let conditions: Vec<NewCondition<'_>> = batch.conditions.iter().map(NewCondition::from).collect();
        // Its ISU may be gone meanwhile (rolled back, forgotten): nothing to store.
        let _ = self.store(&shard, &batch.uuid, &conditions, Origin::Shaped).await;
    }

    /// A migration's chunk on its target: each ISU's entry (the migration's), then its
    /// conditions.
    pub async fn import(&self, chunk: &ImportChunk) -> Result<(), WorkerError> {
        let shard = self.store.current(chunk.generation)?;
        for isu in &chunk.isus {
            migration::admit(&shard, self.journal, chunk, isu).await?;
            if isu.conditions.is_empty() {
                continue;
            }
            let batch: Vec<NewCondition<'_>> = isu.conditions.iter().map(NewCondition::from).collect();
            self.store(&shard, &isu.uuid, &batch, Origin::Import).await?;
        }
        Ok(())
    }

    /// The one storing step: poison check, the shard (which queues the ISU's latest for
    /// the pusher), the count of stored device conditions, the log (unless the batch was
    /// logged when it was shaped; a repeat is in the log already). Returns how many
    /// conditions were new.
    async fn store(
        &self,
        shard: &Shard,
        uuid: &str,
        batch: &[NewCondition<'_>],
        origin: Origin,
    ) -> Result<usize, WorkerError> {
        poison(uuid).await;
        let inserted = match shard.post(uuid, batch) {
            Ok(inserted) => inserted,
            // Rolled back (or forgotten) between the check and the insert.
            Err(PostError::UnknownIsu) => return Err(WorkerError::IsuNotFound),
        };
        if origin != Origin::Import {
            CONDITIONS_STORED.increment(inserted as u64);
        }
        if origin != Origin::Shaped && inserted > 0 {
            // Acknowledged only once logged.
            self.journal.post(shard.generation, uuid, batch).await?;
        }
        Ok(inserted)
    }
}

/// Poison pills for the blast-radius tests (fail points, off in any deployment):
/// `ingest-stall=return(UUID)` makes storing a batch of that ISU hang for
/// [`POISON_STALL`] (inside its lane); `ingest-panic=return(UUID)` makes the store itself
/// panic on it ([`crate::store::Shard::post`], wherever the batch is stored: lane, shaping
/// lane, import, replay).
async fn poison(uuid: &str) {
    if !node_http::fail_points_on() {
        return;
    }
    if fail::eval("ingest-stall", |target| target).flatten().as_deref() == Some(uuid) {
        tokio::time::sleep(POISON_STALL).await;
    }
}
