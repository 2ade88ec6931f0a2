//! The replica's stores against openraft's own storage test suite, and what they do with a
//! damaged log or snapshot at start.

mod common;

use std::sync::Arc;

use common::Recorder;
use consensus::log_store::{LogStore, LOG_FILE};
use consensus::state_machine::{StateMachineStore, SNAPSHOT_FILE};
use consensus::{Command, NodeId, TypeConfig};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{Entry, EntryPayload, LogId, RaftSnapshotBuilder, StorageError};
use tempfile::TempDir;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore<Recorder>, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore<Recorder>), StorageError<NodeId>> {
        let directory = TempDir::new().expect("a temporary directory");
        let log = LogStore::open(directory.path()).expect("a new log opens");
        let state_machine =
            StateMachineStore::open(directory.path(), Arc::new(Recorder::default())).expect("no snapshot yet");
        Ok((directory, log, state_machine))
    }
}

#[test]
fn the_stores_pass_openraft_storage_suite() {
    if let Err(error) = Suite::test_all(Builder) {
        panic!("openraft's storage suite failed: {error}");
    }
}

/// The stores of a group of one without a data directory.
struct InMemory;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore<Recorder>, ()> for InMemory {
    async fn build(&self) -> Result<((), LogStore, StateMachineStore<Recorder>), StorageError<NodeId>> {
        let state_machine = StateMachineStore::in_memory(Arc::new(Recorder::default()));
        Ok(((), LogStore::in_memory(), state_machine))
    }
}

#[test]
fn the_in_memory_stores_pass_openraft_storage_suite() {
    if let Err(error) = Suite::test_all(InMemory) {
        panic!("openraft's storage suite failed on the in-memory stores: {error}");
    }
}

fn entry(term: u64, index: u64, command: &[u8]) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(openraft::CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(Command(command.to_vec())),
    }
}

/// Appends `entries` and waits until openraft would hear they are flushed.
async fn append(log: &mut LogStore, entries: Vec<Entry<TypeConfig>>) {
    use openraft::storage::RaftLogStorageExt;
    log.blocking_append(entries).await.expect("appended");
}

#[tokio::test]
async fn the_log_and_vote_survive_a_reopen_and_a_corrupt_record_stops_the_start() {
    use openraft::RaftLogReader;
    let directory = TempDir::new().unwrap();
    {
        let mut log = LogStore::open(directory.path()).unwrap();
        append(&mut log, (1..=5).map(|index| entry(1, index, b"x")).collect()).await;
        log.truncate(LogId::new(openraft::CommittedLeaderId::new(1, 1), 4))
            .await
            .unwrap();
        log.purge(LogId::new(openraft::CommittedLeaderId::new(1, 1), 1))
            .await
            .unwrap();
        log.save_vote(&openraft::Vote::new(3, 2)).await.unwrap();
    }
    let mut log = LogStore::open(directory.path()).unwrap();
    let indexes: Vec<u64> = log
        .try_get_log_entries(0..100)
        .await
        .unwrap()
        .iter()
        .map(|entry| entry.log_id.index)
        .collect();
    assert_eq!(indexes, vec![2, 3], "truncated from 4, purged up to 1");
    assert_eq!(log.read_vote().await.unwrap(), Some(openraft::Vote::new(3, 2)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id.map(|id| id.index), Some(1));
    drop(log);

    // One byte of an early record flipped: the log after it may hold acknowledged entries.
    let path = directory.path().join(LOG_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[20] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let error = LogStore::open(directory.path())
        .err()
        .expect("a damaged log is refused");
    let message = error.to_string();
    assert!(message.contains("damaged at byte 0"), "{message}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the damaged log is left for the operator"
    );
}

#[tokio::test]
async fn a_torn_last_append_is_cut_off_and_the_acknowledged_ones_are_kept() {
    use openraft::RaftLogReader;
    let directory = TempDir::new().unwrap();
    {
        let mut log = LogStore::open(directory.path()).unwrap();
        append(&mut log, vec![entry(1, 1, b"kept")]).await;
        append(&mut log, vec![entry(1, 2, b"torn")]).await;
    }
    let path = directory.path().join(LOG_FILE);
    let length = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(length - 3).unwrap();
    let mut log = LogStore::open(directory.path()).unwrap();
    let entries = log.try_get_log_entries(0..100).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].log_id.index, 1);
}

#[tokio::test]
async fn a_snapshot_survives_a_restart_and_a_damaged_one_stops_the_start() {
    let directory = TempDir::new().unwrap();
    let recorder = Arc::new(Recorder::default());
    let mut state_machine = StateMachineStore::open(directory.path(), recorder.clone()).unwrap();
    let replies = state_machine
        .apply(vec![entry(1, 1, b"one"), entry(1, 2, b"two")])
        .await
        .unwrap();
    assert_eq!(replies[1].0, 2u64.to_le_bytes().to_vec());
    let mut builder = state_machine.get_snapshot_builder().await;
    let built = builder.build_snapshot().await.unwrap();
    assert_eq!(built.meta.last_log_id.map(|id| id.index), Some(2));

    let restored = Arc::new(Recorder::default());
    let mut reopened = StateMachineStore::open(directory.path(), restored.clone()).unwrap();
    assert_eq!(*restored.applied.lock(), vec![b"one".to_vec(), b"two".to_vec()]);
    let (last, _) = reopened.applied_state().await.unwrap();
    assert_eq!(last.map(|id| id.index), Some(2));

    let path = directory.path().join(SNAPSHOT_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let error = StateMachineStore::open(directory.path(), Arc::new(Recorder::default()))
        .err()
        .expect("a damaged snapshot is refused");
    assert!(error.to_string().contains("damaged raft snapshot"), "{error}");

    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let error = StateMachineStore::open(directory.path(), Arc::new(Recorder::default()))
        .err()
        .expect("a truncated snapshot is refused");
    assert!(error.to_string().contains("torn or corrupt"), "{error}");
}
