//! The raft log and vote of one replica: durable in `<data-dir>/raft.log`, written through
//! [`shared::wal`] (by default with `fdatasync` before every acknowledgement: an append's
//! callback, a saved vote) and read back whole at start; or in memory only
//! ([`LogStore::in_memory`], a lone coordinator without a data directory, whose state ends
//! with its process).
//!
//! The file is a sequence of checksummed records, each one JSON value after a tag byte:
//! entries appended, the vote, the committed id, a truncation (entries from an index on
//! dropped), a purge (entries up to a log id dropped). The in-memory copy (a `BTreeMap` of
//! the entries, the vote, the committed and purged ids) is changed first and then the record
//! written, so a compaction of the file (one snapshot record of the in-memory copy, renamed
//! over the log) holds every change either in the snapshot or after it; replaying a change
//! twice gives the same copy.
//!
//! Reading at start is strict ([`shared::wal::Tail::Strict`]): a torn last record (a group
//! write cut by a crash, never synced, so never acknowledged to a leader) is cut off; a
//! record that fails its checksum, or that does not decode, stops the replica with the
//! file, the byte offset and the reason. A replica that silently forgot entries it had
//! acknowledged could help elect a leader without them.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, RaftLogReader, StorageError, Vote};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use shared::wal::{read_log_from, FsyncPolicy, Tail, Wal, WalOptions};

use crate::{log_error, NodeId, TypeConfig};

/// The log file's name in a replica's data directory.
pub const LOG_FILE: &str = "raft.log";
/// The file is compacted (rewritten as one record of what it holds) past this size.
const COMPACT_AFTER_BYTES: u64 = 64 << 20;

/// One record of the log file.
#[derive(Serialize, Deserialize)]
enum Record {
    /// The whole in-memory copy (the first record after a compaction).
    Snapshot(Copy),
    Entries(Vec<Entry<TypeConfig>>),
    Vote(Vote<NodeId>),
    Committed(Option<LogId<NodeId>>),
    /// Entries from this index on are dropped (a new leader's log differs from there).
    Truncate(u64),
    /// Entries up to and including this id are dropped (they are in a state machine snapshot).
    Purge(LogId<NodeId>),
}

/// What the file describes.
#[derive(Default, Clone, Serialize, Deserialize)]
struct Copy {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
}

impl Copy {
    fn apply(&mut self, record: Record) {
        match record {
            Record::Snapshot(copy) => *self = copy,
            Record::Entries(entries) => {
                for entry in entries {
                    self.entries.insert(entry.log_id.index, entry);
                }
            }
            Record::Vote(vote) => self.vote = Some(vote),
            Record::Committed(committed) => self.committed = committed,
            Record::Truncate(index) => {
                self.entries.split_off(&index);
            }
            Record::Purge(log_id) => {
                if self.last_purged < Some(log_id) {
                    self.last_purged = Some(log_id);
                }
                self.entries = self.entries.split_off(&(log_id.index + 1));
            }
        }
    }
}

/// The durable raft log of one replica (a cheap-clone handle; openraft holds one as the
/// store and hands clones out as readers).
#[derive(Clone)]
pub struct LogStore {
    copy: Arc<Mutex<Copy>>,
    /// The file and where it is (`None`: in memory only).
    wal: Option<(Wal, Arc<PathBuf>)>,
}

/// Why the log could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("{path}: record {record} does not decode ({reason}); refusing to start from a damaged raft log")]
    Undecodable { path: String, record: u64, reason: String },
}

impl LogStore {
    /// Opens (or creates) the log in `data_dir` and reads it back, every write synced before
    /// it is acknowledged. Must run on a tokio runtime (the writer is a task).
    pub fn open(data_dir: &Path) -> Result<LogStore, OpenError> {
        LogStore::durable(data_dir, FsyncPolicy::Always)
    }

    /// A log held in memory only (nothing survives the process).
    pub fn in_memory() -> LogStore {
        LogStore {
            copy: Arc::default(),
            wal: None,
        }
    }

    /// [`LogStore::open`] with the given fsync policy (a lone coordinator's `--fsync`; a
    /// replica of a group must keep [`FsyncPolicy::Always`]: an entry it acknowledged and
    /// lost could be missing from a majority).
    pub fn durable(data_dir: &Path, policy: FsyncPolicy) -> Result<LogStore, OpenError> {
        let path = data_dir.join(LOG_FILE);
        let io_error = |source| OpenError::Io {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(data_dir).map_err(io_error)?;
        let mut copy = Copy::default();
        let mut problem = None;
        let mut read = 0u64;
        read_log_from(&path, 0, Tail::Strict, |payload| {
            read += 1;
            if problem.is_some() {
                return;
            }
            match serde_json::from_slice::<Record>(payload) {
                Ok(record) => copy.apply(record),
                Err(error) => problem = Some((read, error.to_string())),
            }
        })
        .map_err(io_error)?;
        if let Some((record, reason)) = problem {
            return Err(OpenError::Undecodable {
                path: path.display().to_string(),
                record,
                reason,
            });
        }
        tracing::info!(
            path = %path.display(),
            records = read,
            entries = copy.entries.len(),
            last_index = ?copy.entries.keys().next_back(),
            "raft log read"
        );
        let copy = Arc::new(Mutex::new(copy));
        let snapshot_of = copy.clone();
        let wal = Wal::open(
            &path,
            WalOptions {
                policy,
                compact_after_bytes: COMPACT_AFTER_BYTES,
                snapshot: Arc::new(move || encode(&Record::Snapshot(snapshot_of.lock().clone()))),
            },
        )
        .map_err(io_error)?;
        Ok(LogStore {
            copy,
            wal: Some((wal, Arc::new(path))),
        })
    }

    /// The index of the last entry known committed (0: none).
    pub fn committed_index(&self) -> u64 {
        self.copy.lock().committed.map_or(0, |log_id| log_id.index)
    }

    /// Where the log is (`None`: in memory only).
    pub fn path(&self) -> Option<&Path> {
        self.wal.as_ref().map(|(_, path)| path.as_path())
    }

    /// Changes the in-memory copy, then writes the record (synced) that makes the change durable.
    async fn write(&self, record: Record) -> Result<(), StorageError<NodeId>> {
        let Some((wal, _)) = &self.wal else {
            self.copy.lock().apply(record);
            return Ok(());
        };
        let bytes = encode(&record);
        self.copy.lock().apply(record);
        wal.append(&bytes).await.map_err(|error| log_error(error, true))
    }
}

fn encode(record: &Record) -> Vec<u8> {
    serde_json::to_vec(record).expect("raft records serialise")
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        Ok(self
            .copy
            .lock()
            .entries
            .range(range)
            .map(|(_, entry)| entry.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let copy = self.copy.lock();
        let last = copy.entries.values().next_back().map(|entry| entry.log_id);
        Ok(LogState {
            last_purged_log_id: copy.last_purged,
            last_log_id: last.or(copy.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.write(Record::Vote(*vote)).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.copy.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), StorageError<NodeId>> {
        self.write(Record::Committed(committed)).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.copy.lock().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        if entries.is_empty() {
            callback.log_io_completed(Ok(()));
            return Ok(());
        }
        match self.write(Record::Entries(entries)).await {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(error) => {
                callback.log_io_completed(Err(io::Error::other(error.to_string())));
                Err(error)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.write(Record::Truncate(log_id.index)).await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.write(Record::Purge(log_id)).await
    }
}
