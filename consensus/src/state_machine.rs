//! The state machine side of a replica: committed commands go to the application's
//! [`Applier`] in log order; snapshots of the application's state are durable.
//!
//! The application's state lives in memory only. What makes it durable (with a data
//! directory; [`StateMachineStore::in_memory`] keeps its snapshots in memory) is the raft log
//! plus the last snapshot, `<data-dir>/raft.snapshot`: one checksummed record (the snapshot's
//! meta as JSON, then the application's bytes), written to a temporary file, synced and
//! renamed into place. At start the snapshot is restored and openraft applies the committed
//! entries after it again. A snapshot file that fails its checksum or does not decode stops
//! the replica with the reason: starting empty would apply the log after the snapshot to a
//! state that lacks what the snapshot held.
//!
//! One lock (`Applied`) covers applying a batch and taking a snapshot of the application,
//! so a snapshot's bytes are exactly the state at its `last_log_id`.

use std::io::{self, Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use parking_lot::Mutex;
use shared::wal::{frame, read_log_from, Tail};

use crate::{Node, NodeId, Reply, TypeConfig};

/// The snapshot file's name in a replica's data directory.
pub const SNAPSHOT_FILE: &str = "raft.snapshot";

/// The application a replica applies committed commands to. Its methods run on openraft's
/// state machine task and never block on I/O.
pub trait Applier: Send + Sync + 'static {
    /// Applies one committed command (at log `index`); the reply goes to the writer that
    /// proposed it (on the leader). A command the application cannot use is answered, not a
    /// panic: every replica applies the same log, so every one answers the same.
    fn apply(&self, index: u64, command: &[u8]) -> Vec<u8>;
    /// The whole state, as [`Applier::restore`] takes it back.
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the whole state with a snapshot's (an empty slice: the initial state).
    fn restore(&self, snapshot: &[u8]) -> Result<(), String>;
    /// Called once at start, when the entries the log held committed are applied again
    /// (openraft does that before the replica takes part in its group), or at once when there
    /// are none: work the replay deferred can be done then.
    fn replayed(&self) {}
}

/// Which entry the application has applied last, and the group's membership as of then.
#[derive(Default)]
struct Applied {
    last: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Node>,
}

/// A snapshot as kept in memory and on disk.
#[derive(Clone)]
struct Stored {
    meta: SnapshotMeta<NodeId, Node>,
    data: Arc<Vec<u8>>,
}

/// The state machine store of one replica (cheap to clone: the snapshot builder is a clone).
pub struct StateMachineStore<A: Applier> {
    applier: Arc<A>,
    applied: Arc<Mutex<Applied>>,
    /// At start: the last entry of the replay, until it is applied (see [`Applier::replayed`]).
    replay_until: Arc<Mutex<Option<u64>>>,
    current: Arc<Mutex<Option<Stored>>>,
    /// The snapshot file (`None`: snapshots are kept in memory only).
    path: Option<Arc<PathBuf>>,
}

impl<A: Applier> Clone for StateMachineStore<A> {
    fn clone(&self) -> Self {
        StateMachineStore {
            applier: self.applier.clone(),
            applied: self.applied.clone(),
            replay_until: self.replay_until.clone(),
            current: self.current.clone(),
            path: self.path.clone(),
        }
    }
}

/// Why the snapshot file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("{path}: {reason}; refusing to start from a damaged raft snapshot")]
    Damaged { path: String, reason: String },
}

impl<A: Applier> StateMachineStore<A> {
    /// Reads the snapshot in `data_dir` (if any) into `applier`.
    pub fn open(data_dir: &Path, applier: Arc<A>) -> Result<StateMachineStore<A>, OpenError> {
        let path = data_dir.join(SNAPSHOT_FILE);
        let shown = path.display().to_string();
        std::fs::create_dir_all(data_dir).map_err(|source| OpenError::Io {
            path: shown.clone(),
            source,
        })?;
        let stored = read_snapshot(&path).map_err(|error| match error.kind() {
            io::ErrorKind::InvalidData => OpenError::Damaged {
                path: shown.clone(),
                reason: error.to_string(),
            },
            _ => OpenError::Io {
                path: shown.clone(),
                source: error,
            },
        })?;
        let mut applied = Applied::default();
        if let Some(stored) = &stored {
            applier.restore(&stored.data).map_err(|reason| OpenError::Damaged {
                path: shown.clone(),
                reason,
            })?;
            applied.last = stored.meta.last_log_id;
            applied.membership = stored.meta.last_membership.clone();
            tracing::info!(path = %shown, last = ?applied.last, bytes = stored.data.len(), "raft snapshot restored");
        }
        Ok(StateMachineStore {
            applier,
            applied: Arc::new(Mutex::new(applied)),
            replay_until: Arc::default(),
            current: Arc::new(Mutex::new(stored)),
            path: Some(Arc::new(path)),
        })
    }

    /// A store whose snapshots are kept in memory only (with an in-memory log).
    pub fn in_memory(applier: Arc<A>) -> StateMachineStore<A> {
        StateMachineStore {
            applier,
            applied: Arc::default(),
            replay_until: Arc::default(),
            current: Arc::default(),
            path: None,
        }
    }

    /// At start, before the raft runs: the replay ends once the entry at `committed` (the
    /// log's last committed one) is applied; at once if it is applied already.
    pub fn replay_until(&self, committed: u64) {
        if committed <= self.applied_index() {
            self.applier.replayed();
        } else {
            *self.replay_until.lock() = Some(committed);
        }
    }

    /// The application.
    pub fn applier(&self) -> &Arc<A> {
        &self.applier
    }

    /// The index of the last applied entry (0 before any).
    pub fn applied_index(&self) -> u64 {
        self.applied.lock().last.map_or(0, |log_id| log_id.index)
    }

    /// Writes `stored` as the durable snapshot, then keeps it as the current one.
    /// Under the current snapshot's lock, so a snapshot being built and one being installed
    /// never write the file at once, and an older one never replaces a newer one (openraft
    /// builds in a task of its own, and may have purged the log up to the newer one).
    fn keep(&self, stored: Stored) -> Result<(), StorageError<NodeId>> {
        let mut current = self.current.lock();
        if current
            .as_ref()
            .is_some_and(|held| held.meta.last_log_id >= stored.meta.last_log_id)
        {
            return Ok(());
        }
        if let Some(path) = &self.path {
            write_snapshot(path, &stored).map_err(|error| {
                StorageIOError::new(
                    ErrorSubject::Snapshot(Some(stored.meta.signature())),
                    ErrorVerb::Write,
                    AnyError::new(&error),
                )
            })?;
        }
        *current = Some(stored);
        Ok(())
    }
}

/// `frame(u32 meta length | meta JSON | data)`, replaced atomically.
fn write_snapshot(path: &Path, stored: &Stored) -> io::Result<()> {
    let meta = serde_json::to_vec(&stored.meta).expect("snapshot metas serialise");
    let mut payload = Vec::with_capacity(4 + meta.len() + stored.data.len());
    payload.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    payload.extend_from_slice(&meta);
    payload.extend_from_slice(&stored.data);
    if payload.len() > shared::wal::MAX_FRAME_BYTES {
        return Err(io::Error::other("snapshot larger than a record can hold"));
    }
    let temporary = path.with_extension("snapshot.new");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(&frame(&payload))?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    if let Some(directory) = path.parent() {
        std::fs::File::open(directory)?.sync_all()?;
    }
    Ok(())
}

fn read_snapshot(path: &Path) -> io::Result<Option<Stored>> {
    if !path.exists() {
        return Ok(None);
    }
    let mut payloads = Vec::new();
    // Strict, and a snapshot is one whole record: a torn one is as damaged as a corrupt one.
    let report = read_log_from(path, 0, Tail::Keep, |payload| payloads.push(payload.to_vec()))?;
    let length = std::fs::metadata(path)?.len();
    let damaged = |reason: String| io::Error::new(io::ErrorKind::InvalidData, reason);
    if payloads.len() != 1 || report.valid_bytes != length {
        return Err(damaged(format!(
            "{} whole record(s) in {length} bytes, expected exactly one (torn or corrupt)",
            payloads.len()
        )));
    }
    let payload = payloads.pop().expect("one record");
    let meta_length = payload
        .get(..4)
        .map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")) as usize)
        .ok_or_else(|| damaged("no meta length".into()))?;
    let meta = payload
        .get(4..4 + meta_length)
        .ok_or_else(|| damaged("meta longer than the record".into()))?;
    let meta: SnapshotMeta<NodeId, Node> =
        serde_json::from_slice(meta).map_err(|error| damaged(format!("meta does not decode: {error}")))?;
    Ok(Some(Stored {
        meta,
        data: Arc::new(payload[4 + meta_length..].to_vec()),
    }))
}

fn snapshot_of(stored: &Stored) -> Snapshot<TypeConfig> {
    Snapshot {
        meta: stored.meta.clone(),
        snapshot: Box::new(Cursor::new(stored.data.as_ref().clone())),
    }
}

impl<A: Applier> RaftSnapshotBuilder<TypeConfig> for StateMachineStore<A> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let (last, membership, data) = {
            let applied = self.applied.lock();
            (applied.last, applied.membership.clone(), self.applier.snapshot())
        };
        let snapshot_id = match last {
            Some(log_id) => format!("{}-{}", log_id.leader_id, log_id.index),
            None => "empty".to_owned(),
        };
        let stored = Stored {
            meta: SnapshotMeta {
                last_log_id: last,
                last_membership: membership,
                snapshot_id,
            },
            data: Arc::new(data),
        };
        let this = self.clone();
        let kept = stored.clone();
        tokio::task::spawn_blocking(move || this.keep(kept))
            .await
            .map_err(|error| StorageIOError::write_snapshot(None, &error))??;
        Ok(snapshot_of(&stored))
    }
}

impl<A: Applier> RaftStateMachine<TypeConfig> for StateMachineStore<A> {
    type SnapshotBuilder = StateMachineStore<A>;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, Node>), StorageError<NodeId>> {
        let applied = self.applied.lock();
        Ok((applied.last, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Reply>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut applied = self.applied.lock();
        let mut replies = Vec::new();
        for entry in entries {
            applied.last = Some(entry.log_id);
            replies.push(match entry.payload {
                EntryPayload::Blank => Reply::default(),
                EntryPayload::Normal(command) => Reply(self.applier.apply(entry.log_id.index, &command.0)),
                EntryPayload::Membership(membership) => {
                    applied.membership = StoredMembership::new(Some(entry.log_id), membership);
                    Reply::default()
                }
            });
        }
        let mut replay_until = self.replay_until.lock();
        if replay_until.is_some_and(|until| applied.last.is_some_and(|last| last.index >= until)) {
            *replay_until = None;
            self.applier.replayed();
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> StateMachineStore<A> {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Node>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let stored = Stored {
            meta: meta.clone(),
            data: Arc::new(snapshot.into_inner()),
        };
        // Durable before the state changes: a crash in between restarts from this snapshot.
        let this = self.clone();
        let kept = stored.clone();
        tokio::task::spawn_blocking(move || this.keep(kept))
            .await
            .map_err(|error| StorageIOError::write_snapshot(None, &error))??;
        let mut applied = self.applied.lock();
        self.applier
            .restore(&stored.data)
            .map_err(|reason| StorageIOError::read_snapshot(Some(meta.signature()), &io::Error::other(reason)))?;
        applied.last = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        Ok(self.current.lock().as_ref().map(snapshot_of))
    }
}
