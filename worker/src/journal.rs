//! The worker's durable log (`--data-dir`): every change to the shard is
//! appended to `<data-dir>/worker-<cell>.wal` (see [`shared::wal`]) before the
//! change is acknowledged, and replayed on start.
//!
//! Records (first byte = tag, then little-endian fields):
//! - `1` snapshot: the whole shard ([`Shard::snapshot`]); a reset writes one
//!   to a fresh file (`POST /initialize` starts a fresh log), and the writer
//!   writes one when the file outgrows `--compact-after-mb`;
//! - `2` users, `3` provisional, `4` publish, `5` rollback: the coordinator's
//!   internal messages, so replayed conditions find their ISU;
//! - `6` post: one accepted device batch.
//!
//! Every record after a snapshot carries the generation it was applied to;
//! replay skips records of another generation (a post that raced a reset),
//! so old and new data never mix. A change is applied in memory first and then
//! logged, and only acknowledged once logged; replay is idempotent (a repeated
//! condition is stored once), so a change both in a snapshot and after it is harmless.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use shared::protocol::{ProvisionalIsu, PublishIsu, RollbackIsu};
use shared::wal::{read_log, Decoder, Encoder, FsyncPolicy, Wal, WalError, WalOptions};

use crate::store::{NewCondition, Shard, Store, SNAPSHOT_TAG};

const USERS_TAG: u8 = 2;
const PROVISIONAL_TAG: u8 = 3;
const PUBLISH_TAG: u8 = 4;
const ROLLBACK_TAG: u8 = 5;
const POST_TAG: u8 = 6;

/// Cheap-clone handle to the log; disabled (every call a no-op) without `--data-dir`.
#[derive(Clone, Default)]
pub struct Journal {
    wal: Option<Wal>,
}

/// What replay found, for the start-up log line.
#[derive(Debug)]
pub struct Replayed {
    pub path: PathBuf,
    pub records: u64,
    pub skipped: u64,
    pub truncated_bytes: u64,
    pub conditions: usize,
    pub millis: u128,
}

impl Journal {
    pub fn disabled() -> Journal {
        Journal { wal: None }
    }

    /// Replays the log of cell `cell` in `data_dir` into `store`, then opens it for appending.
    pub async fn open(
        data_dir: &Path,
        cell: &str,
        policy: FsyncPolicy,
        compact_after_bytes: u64,
        store: &Store,
    ) -> anyhow::Result<(Journal, Replayed)> {
        std::fs::create_dir_all(data_dir)?;
        let path = data_dir.join(format!("worker-{cell}.wal"));
        let replay_path = path.clone();
        let (replayed, state) = tokio::task::spawn_blocking(move || replay(&replay_path)).await??;
        store.replace(state);
        let snapshot_store = store.clone();
        let wal = Wal::open(
            &path,
            WalOptions {
                policy,
                compact_after_bytes,
                snapshot: Arc::new(move || snapshot_store.shard().snapshot()),
            },
        )?;
        Ok((Journal { wal: Some(wal) }, replayed))
    }

    async fn append(&self, record: impl FnOnce() -> Encoder) -> Result<(), WalError> {
        match &self.wal {
            Some(wal) => wal.append(&record().bytes).await,
            None => Ok(()),
        }
    }

    /// After a reset: a fresh log holding the new shard.
    pub async fn reset(&self) -> Result<(), WalError> {
        match &self.wal {
            Some(wal) => wal.snapshot().await,
            None => Ok(()),
        }
    }

    pub async fn post(&self, generation: u64, uuid: &str, batch: &[NewCondition<'_>]) -> Result<(), WalError> {
        self.append(|| {
            let mut encoder = Encoder::new(POST_TAG);
            encoder.u64(generation).str(uuid).u32(batch.len() as u32);
            for condition in batch {
                encoder
                    .i64(condition.timestamp)
                    .u8(condition.flags.0)
                    .str(condition.message);
            }
            encoder
        })
        .await
    }

    pub async fn users(&self, generation: u64, users: &[String]) -> Result<(), WalError> {
        self.append(|| {
            let mut encoder = Encoder::new(USERS_TAG);
            encoder.u64(generation).u32(users.len() as u32);
            for user in users {
                encoder.str(user);
            }
            encoder
        })
        .await
    }

    pub async fn provisional(&self, isu: &ProvisionalIsu) -> Result<(), WalError> {
        self.append(|| {
            let mut encoder = Encoder::new(PROVISIONAL_TAG);
            encoder
                .u64(isu.generation)
                .i64(isu.id)
                .str(&isu.uuid)
                .str(&isu.owner)
                .str(&isu.name);
            encoder
        })
        .await
    }

    pub async fn publish(&self, isu: &PublishIsu) -> Result<(), WalError> {
        self.append(|| {
            let mut encoder = Encoder::new(PUBLISH_TAG);
            encoder.u64(isu.generation).i64(isu.id).str(&isu.uuid);
            encoder
        })
        .await
    }

    pub async fn rollback(&self, isu: &RollbackIsu) -> Result<(), WalError> {
        self.append(|| {
            let mut encoder = Encoder::new(ROLLBACK_TAG);
            encoder.u64(isu.generation).i64(isu.id).str(&isu.uuid);
            encoder
        })
        .await
    }
}

/// Rebuilds the shard from the log at `path` (an empty shard of generation 0 if there is none).
pub fn replay(path: &Path) -> std::io::Result<(Replayed, Shard)> {
    let started = Instant::now();
    let mut shard = Shard::new(0);
    let mut skipped = 0u64;
    let report = read_log(path, |payload| {
        let mut decoder = Decoder::new(payload);
        let applied = match decoder.u8() {
            Some(SNAPSHOT_TAG) => Shard::from_snapshot(&mut decoder).map(|snapshot| shard = snapshot),
            Some(tag) => apply(&shard, tag, &mut decoder),
            None => None,
        };
        if applied.is_none() {
            skipped += 1;
        }
    })?;
    if skipped > 0 {
        tracing::warn!(skipped, path = %path.display(), "log records not applied (another generation, unknown ISU or unreadable)");
    }
    let conditions = shard.condition_count();
    Ok((
        Replayed {
            path: path.to_owned(),
            records: report.records,
            skipped,
            truncated_bytes: report.truncated_bytes,
            conditions,
            millis: started.elapsed().as_millis(),
        },
        shard,
    ))
}

/// Applies one non-snapshot record; `None` when it is of another generation or malformed.
fn apply(shard: &Shard, tag: u8, decoder: &mut Decoder<'_>) -> Option<()> {
    if decoder.u64()? != shard.generation {
        return None;
    }
    match tag {
        POST_TAG => {
            let uuid = decoder.str()?;
            let count = decoder.u32()? as usize;
            let mut batch = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                batch.push(NewCondition {
                    timestamp: decoder.i64()?,
                    flags: shared::domain::Flags(decoder.u8()?),
                    message: decoder.str()?,
                });
            }
            shard.post(uuid, &batch).ok().map(drop)
        }
        USERS_TAG => {
            let count = decoder.u32()?;
            let users = (0..count).map(|_| decoder.str()).collect::<Option<Vec<_>>>()?;
            shard.add_users(users);
            Some(())
        }
        PROVISIONAL_TAG => {
            let (id, uuid, owner, name) = (decoder.i64()?, decoder.str()?, decoder.str()?, decoder.str()?);
            shard.provisional(uuid, owner, name, id).ok().map(drop)
        }
        PUBLISH_TAG => {
            let (id, uuid) = (decoder.i64()?, decoder.str()?);
            shard.publish(uuid, id).then_some(())
        }
        ROLLBACK_TAG => {
            let (id, uuid) = (decoder.i64()?, decoder.str()?);
            shard.rollback(uuid, id);
            Some(())
        }
        _ => None,
    }
}
