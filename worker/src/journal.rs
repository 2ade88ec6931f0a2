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
//! - `6` post: one accepted device batch;
//! - `7` accept: JIA accepted a provisional registration (with the coordinator's record
//!   that finishes it), as an earlier coordinator told it;
//! - `9` asking: this worker is about to ask JIA for a registration (the call, with the
//!   coordinator's record); a worker that restarts with such a registration and no answer
//!   asks again;
//! - `8` activated: JIA answered that call (its character; the record is the call's).
//!
//! Every record after a snapshot carries the generation it was applied to;
//! replay skips records of another generation (a post that raced a reset),
//! so old and new data never mix. A change is applied in memory first and then
//! logged, and only acknowledged once logged; replay is idempotent (a repeated
//! condition is stored once), so a change both in a snapshot and after it is harmless.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use shared::protocol::{AcceptIsu, JiaActivateIsu, ProvisionalIsu, PublishIsu, RollbackIsu};
use shared::wal::{read_log_from, Decoder, Encoder, FsyncPolicy, Tail, Wal, WalError, WalOptions};

use crate::store::{NewCondition, Shard, Store, SNAPSHOT_TAG};

const USERS_TAG: u8 = 2;
const PROVISIONAL_TAG: u8 = 3;
const PUBLISH_TAG: u8 = 4;
const ROLLBACK_TAG: u8 = 5;
const POST_TAG: u8 = 6;
const ACCEPT_TAG: u8 = 7;
const ACTIVATED_TAG: u8 = 8;
const ASKING_TAG: u8 = 9;

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
    /// Of `records`, those read ahead, while the previous process still wrote the log.
    pub records_ahead: u64,
    pub skipped: u64,
    /// Of `skipped`, the records that panicked the store and were skipped.
    pub poisoned: u64,
    pub truncated_bytes: u64,
    pub conditions: usize,
    /// How long the last read took (after a read ahead: only the rest's).
    pub millis: u128,
}

impl Journal {
    pub fn disabled() -> Journal {
        Journal { wal: None }
    }

    /// Replays the log of cell `cell` in `data_dir` into `store`, then opens it for appending.
    /// `ahead`: what [`Journal::read_ahead`] read of it while its previous writer still ran
    /// (a replacement in place); only what was appended since is read now.
    pub async fn open(
        data_dir: &Path,
        cell: &str,
        policy: FsyncPolicy,
        compact_after_bytes: u64,
        store: &Store,
        ahead: Option<Replay>,
    ) -> anyhow::Result<(Journal, Replayed)> {
        std::fs::create_dir_all(data_dir)?;
        let path = log_path(data_dir, cell);
        let mut replay = ahead.unwrap_or_else(|| Replay::new(&path));
        let replay = tokio::task::spawn_blocking(move || replay.read(Tail::Truncate).map(|()| replay)).await??;
        let (replayed, state) = replay.finish();
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

    /// Reads the log of cell `cell` as far as it is written while another process of the
    /// cell still appends to it (before the data directory's lock is ours), so that
    /// [`Journal::open`] afterwards reads only the rest: the hand-over's gap does not grow
    /// with the log. A read that fails here is not fatal: `open` then reads everything.
    pub async fn read_ahead(data_dir: &Path, cell: &str) -> Replay {
        let path = log_path(data_dir, cell);
        let mut replay = Replay::new(&path);
        let read = tokio::task::spawn_blocking(move || replay.read(Tail::Keep).map(|()| replay))
            .await
            .map_err(std::io::Error::other)
            .and_then(|read| read);
        read.unwrap_or_else(|error| {
            tracing::warn!(%error, path = %path.display(), "reading the log ahead failed: it is read whole once it is handed over");
            Replay::new(&path)
        })
    }

    /// Ends the log writer once everything queued is written, and a compaction it started is
    /// finished (see [`Wal::close`]): before a replacement may read and append to the log.
    pub async fn close(&self) -> Result<(), WalError> {
        match &self.wal {
            Some(wal) => wal.close().await,
            None => Ok(()),
        }
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

    /// A provisional ISU: a registration's (`registration`, logged with its request id) or
    /// a migration's import.
    pub async fn provisional(&self, isu: &ProvisionalIsu, registration: bool) -> Result<(), WalError> {
        self.append(|| {
            let mut encoder = Encoder::new(PROVISIONAL_TAG);
            encoder
                .u64(isu.generation)
                .i64(isu.id)
                .str(&isu.uuid)
                .str(&isu.owner)
                .str(&isu.name);
            if registration {
                // Written since replicas: a record without it is read as an import.
                encoder.u8(1).str(isu.request.as_deref().unwrap_or(""));
            }
            encoder
        })
        .await
    }

    pub async fn accept(&self, isu: &AcceptIsu) -> Result<(), WalError> {
        self.append(|| {
            let mut encoder = Encoder::new(ACCEPT_TAG);
            encoder.u64(isu.generation).i64(isu.id).str(&isu.uuid).str(&isu.record);
            encoder
        })
        .await
    }

    pub async fn activated(&self, isu: &JiaActivateIsu, character: &str) -> Result<(), WalError> {
        self.append(|| {
            let mut encoder = Encoder::new(ACTIVATED_TAG);
            encoder.u64(isu.generation).i64(isu.id).str(&isu.uuid).str(character);
            encoder
        })
        .await
    }

    pub async fn asking(&self, call: &JiaActivateIsu) -> Result<(), WalError> {
        self.append(|| {
            let mut encoder = Encoder::new(ASKING_TAG);
            encoder
                .u64(call.generation)
                .i64(call.id)
                .str(&call.uuid)
                .str(&call.record)
                .str(&call.jia_service_url)
                .str(&call.target_base_url);
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

fn log_path(data_dir: &Path, cell: &str) -> PathBuf {
    data_dir.join(format!("worker-{cell}.wal"))
}

/// A replay in progress: the shard rebuilt from the log up to `offset` (an empty shard of
/// generation 0 while there is no log).
pub struct Replay {
    path: PathBuf,
    shard: Shard,
    /// The file read so far, as (device, inode): a snapshot (reset or compaction) replaces
    /// the file by renaming a new one over it, and a replaced file is read from its start.
    file: Option<(u64, u64)>,
    offset: u64,
    records: u64,
    /// Records read by the reads before the last one (a read ahead).
    records_ahead: u64,
    skipped: u64,
    /// Of `skipped`, the records whose applying panicked.
    poisoned: u64,
    truncated_bytes: u64,
    started: Instant,
}

impl Replay {
    fn new(path: &Path) -> Replay {
        Replay {
            path: path.to_owned(),
            shard: Shard::new(0),
            file: None,
            offset: 0,
            records: 0,
            records_ahead: 0,
            skipped: 0,
            poisoned: 0,
            truncated_bytes: 0,
            started: Instant::now(),
        }
    }

    /// Applies the records appended since the last read; `tail` as [`read_log_from`] takes it.
    fn read(&mut self, tail: Tail) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt as _;
        let file = match std::fs::metadata(&self.path) {
            Ok(metadata) => Some((metadata.dev(), metadata.ino())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => return Err(error),
        };
        if file != self.file || file.is_none() {
            if self.offset > 0 {
                tracing::info!(path = %self.path.display(), "the log was replaced since it was read ahead: reading it from its start");
            }
            *self = Replay {
                file,
                ..Replay::new(&self.path)
            };
        }
        self.records_ahead = self.records;
        self.started = Instant::now();
        let (shard, skipped, poisoned) = (&mut self.shard, &mut self.skipped, &mut self.poisoned);
        let report = read_log_from(&self.path, self.offset, tail, |payload| {
            let mut decoder = Decoder::new(payload);
            let applied = match decoder.u8() {
                Some(SNAPSHOT_TAG) => Shard::from_snapshot(&mut decoder).map(|snapshot| *shard = snapshot),
                // A record that panics the store (a poison pill: a shaped batch is logged
                // before the shaping lane stores it, and its panic there is caught) must not
                // stop the replay: the worker would never start again.
                Some(tag) => {
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| apply(shard, tag, &mut decoder))) {
                        Ok(applied) => applied,
                        Err(_) => {
                            *poisoned += 1;
                            None
                        }
                    }
                }
                None => None,
            };
            if applied.is_none() {
                *skipped += 1;
            }
        })?;
        self.offset = report.valid_bytes;
        self.records += report.records;
        self.truncated_bytes += report.truncated_bytes;
        Ok(())
    }

    fn finish(self) -> (Replayed, Shard) {
        if self.poisoned > 0 {
            tracing::error!(poisoned = self.poisoned, path = %self.path.display(), "log records that panicked the store were skipped (kept in the file until its next compaction)");
        }
        if self.skipped > 0 {
            tracing::warn!(skipped = self.skipped, path = %self.path.display(), "log records not applied (another generation, unknown ISU or unreadable)");
        }
        let replayed = Replayed {
            path: self.path,
            records: self.records,
            records_ahead: self.records_ahead,
            skipped: self.skipped,
            poisoned: self.poisoned,
            truncated_bytes: self.truncated_bytes,
            conditions: self.shard.condition_count(),
            millis: self.started.elapsed().as_millis(),
        };
        (replayed, self.shard)
    }
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
            if decoder.is_empty() {
                // A migration's import (or a registration logged before replicas).
                return shard.provisional_entry(uuid, owner, name, id).ok().map(drop);
            }
            let (_registration, request) = (decoder.u8()?, decoder.str()?);
            let request = (!request.is_empty()).then_some(request);
            shard.provisional(uuid, owner, name, id, request).ok().map(drop)
        }
        PUBLISH_TAG => {
            let (id, uuid) = (decoder.i64()?, decoder.str()?);
            shard.publish(uuid, id).then_some(())
        }
        ACCEPT_TAG => {
            let (id, uuid, record) = (decoder.i64()?, decoder.str()?, decoder.str()?);
            shard.accept(uuid, id, record).then_some(())
        }
        ASKING_TAG => {
            let call = JiaActivateIsu {
                generation: shard.generation,
                id: decoder.i64()?,
                uuid: decoder.str()?.to_owned(),
                record: decoder.str()?.to_owned(),
                jia_service_url: decoder.str()?.to_owned(),
                target_base_url: decoder.str()?.to_owned(),
            };
            shard.asking(&call).then_some(())
        }
        ACTIVATED_TAG => {
            let (id, uuid, character) = (decoder.i64()?, decoder.str()?, decoder.str()?);
            shard.activated(uuid, id, character).then_some(())
        }
        ROLLBACK_TAG => {
            let (id, uuid) = (decoder.i64()?, decoder.str()?);
            shard.rollback(uuid, id);
            Some(())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::domain::Flags;

    #[tokio::test]
    async fn an_acceptance_is_replayed_with_the_registration_s_posts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        let open = |store: Store| {
            let path = path.clone();
            async move {
                Journal::open(&path, "a", FsyncPolicy::Never, u64::MAX, &store, None)
                    .await
                    .unwrap()
                    .0
            }
        };
        let store = Store::new(Shard::new(0));
        let journal = open(store.clone()).await;
        // The reset's fresh log, for generation 3.
        store.replace(Shard::new(3));
        journal.reset().await.unwrap();
        let provisional = |uuid: &str, id: i64| ProvisionalIsu {
            generation: 3,
            id,
            uuid: uuid.into(),
            owner: "alice".into(),
            name: "chair".into(),
            request: Some(format!("req-{uuid}")),
        };
        journal.provisional(&provisional("a", 7), true).await.unwrap();
        journal.provisional(&provisional("b", 8), true).await.unwrap();
        journal.provisional(&provisional("c", 9), true).await.unwrap();
        let activation = JiaActivateIsu {
            generation: 3,
            uuid: "c".into(),
            id: 9,
            record: "record-c".into(),
            jia_service_url: "http://127.0.0.1:1".into(),
            target_base_url: "http://127.0.0.3:8080".into(),
        };
        journal.asking(&activation).await.unwrap();
        journal.activated(&activation, "いじっぱり").await.unwrap();
        journal.provisional(&provisional("d", 10), true).await.unwrap();
        let asked = JiaActivateIsu {
            uuid: "d".into(),
            id: 10,
            record: "record-d".into(),
            ..activation.clone()
        };
        journal.asking(&asked).await.unwrap();
        let acceptance = AcceptIsu {
            generation: 3,
            uuid: "a".into(),
            id: 7,
            record: "record-a".into(),
        };
        journal.accept(&acceptance).await.unwrap();
        let batch = [NewCondition {
            timestamp: 5,
            flags: Flags(0),
            message: "posted",
        }];
        journal.post(3, "a", &batch).await.unwrap();
        journal.close().await.unwrap();

        let replayed = Store::new(Shard::new(0));
        let _journal = open(replayed.clone()).await;
        let shard = replayed.shard();
        let mut held = shard.unpublished_registrations();
        held.sort_by(|a, b| a.uuid.cmp(&b.uuid));
        let held: Vec<(&str, Option<&str>, Option<&str>)> = held
            .iter()
            .map(|isu| (&*isu.uuid, isu.accepted.as_deref(), isu.character.as_deref()))
            .collect();
        assert_eq!(
            held,
            [
                ("a", Some("record-a"), None),
                ("b", None, None),
                ("c", Some("record-c"), Some("いじっぱり")),
                ("d", None, None)
            ]
        );
        assert_eq!(shard.asks_in_doubt(), vec![asked], "asked, no answer logged");
        assert_eq!(shard.isu("a").unwrap().condition_count(), 1, "its acknowledged post");
    }
}
