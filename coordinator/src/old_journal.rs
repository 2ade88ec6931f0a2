//! Conversion of a journal written by builds before 2026-12-06: a lone coordinator kept its
//! state in `<data-dir>/coordinator.wal` (a snapshot, then users, ISUs, removals, maps and
//! migration steps); every coordinator now keeps it in its group's raft log
//! (`raft.log`, `raft.snapshot`).
//!
//! A data directory that holds such a journal is converted once, at start: the journal is
//! read into one snapshot, the coordinator starts its group of one with that state, the
//! group's first leader commits it as the group's first command, and the journal is renamed
//! `coordinator.wal.converted` (kept for the operator, never read again). A start that stops
//! before the commit converts again; one that stops after it finds the state in the log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use shared::migration::Migration;
use shared::wal::read_log;

use crate::state::command::{Command, LoggedIsu, Snapshot};

/// The journal's path in `data_dir`.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("coordinator.wal")
}

/// Where a converted journal is kept.
pub fn converted_path(data_dir: &Path) -> PathBuf {
    data_dir.join("coordinator.wal.converted")
}

/// Reads the journal in `data_dir`: `None` when there is none; an error naming the file
/// when it cannot be read or holds no snapshot (it is left as it is).
pub fn read(data_dir: &Path) -> anyhow::Result<Option<Snapshot>> {
    let path = path(data_dir);
    if !path.exists() {
        return Ok(None);
    }
    let mut state: Option<Snapshot> = None;
    // uuid → (id, ISU), so a removal finds its ISU; migrations by id, their last state.
    let mut isus: BTreeMap<String, (i64, LoggedIsu)> = BTreeMap::new();
    let mut migrations: BTreeMap<u64, Migration> = BTreeMap::new();
    let mut skipped = 0u64;
    let report = read_log(&path, |payload| {
        let applied = match Command::decode(payload) {
            Some(Command::Snapshot(snapshot)) => {
                migrations = snapshot
                    .migrations
                    .iter()
                    .map(|migration| (migration.id, migration.clone()))
                    .collect();
                isus = snapshot
                    .isus
                    .iter()
                    .map(|isu| (isu.uuid.clone(), (isu.id, isu.clone())))
                    .collect();
                state = Some(snapshot);
                true
            }
            Some(command) => state.as_mut().is_some_and(|state| match command {
                Command::Map(map) => {
                    state.placement = Some(map);
                    true
                }
                Command::Migration(migration) => {
                    migrations.insert(migration.id, migration);
                    true
                }
                Command::User { generation, user } if generation == state.generation => {
                    state.users.push(user);
                    true
                }
                Command::Isu { generation, isu, .. } if generation == state.generation => {
                    isus.insert(isu.uuid.clone(), (isu.id, isu));
                    true
                }
                Command::Removed { generation, uuid } if generation == state.generation => {
                    isus.remove(&uuid);
                    true
                }
                // Of another generation (a registration that raced an `/initialize`).
                _ => false,
            }),
            None => false,
        };
        skipped += u64::from(!applied);
    })
    .map_err(|error| anyhow::anyhow!("reading {}: {error}", path.display()))?;
    let Some(mut state) = state else {
        anyhow::bail!(
            "{} is a coordinator journal of an earlier build that holds no snapshot, so it cannot be converted: move it away to start with a new state",
            path.display()
        );
    };
    let mut registered: Vec<(i64, LoggedIsu)> = isus.into_values().collect();
    registered.sort_by_key(|(id, _)| *id);
    state.isus = registered.into_iter().map(|(_, isu)| isu).collect();
    state.migrations = migrations
        .into_values()
        .filter(|migration| !migration.is_finished())
        .collect();
    state.users.sort();
    state.users.dedup();
    tracing::warn!(
        path = %path.display(),
        records = report.records,
        skipped,
        truncated_bytes = report.truncated_bytes,
        generation = state.generation,
        users = state.users.len(),
        isus = state.isus.len(),
        "converting a coordinator journal of an earlier build into this coordinator's raft log"
    );
    Ok(Some(state))
}

/// Renames a journal being converted once its state is committed (this replica has applied
/// its group's first state); nothing when there is none. Runs until done or aborted.
pub async fn retire_once_committed(state: &crate::state::State, data_dir: &Path) {
    if !path(data_dir).exists() {
        return;
    }
    while !state.is_established() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    if let Err(error) = retire(data_dir) {
        tracing::error!(%error, path = %path(data_dir).display(), "renaming a converted journal failed");
    }
}

/// Renames the converted journal (once its state is committed).
pub fn retire(data_dir: &Path) -> std::io::Result<()> {
    std::fs::rename(path(data_dir), converted_path(data_dir))?;
    tracing::info!(
        kept_as = %converted_path(data_dir).display(),
        "the journal of an earlier build is converted"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::command::tests::{isu, map_of_two_cells};
    use shared::wal::{FsyncPolicy, Wal, WalOptions};

    /// The payload an earlier build wrote: version 0, no version byte.
    fn unversioned(command: Command) -> Vec<u8> {
        command.encode()[1..].to_vec()
    }

    #[tokio::test]
    async fn a_journal_converts_to_its_snapshot_and_later_records_of_its_generation_only() {
        let directory = tempfile::tempdir().unwrap();
        assert!(read(directory.path()).unwrap().is_none());
        let base = Snapshot {
            generation: 7,
            jia_service_url: "http://jia".into(),
            users: vec!["alice".into()],
            isus: vec![isu(29, "u29", None)],
            ..Snapshot::default()
        };
        let first = unversioned(Command::Snapshot(base));
        let wal = Wal::open(
            &path(directory.path()),
            WalOptions {
                policy: FsyncPolicy::Always,
                compact_after_bytes: u64::MAX,
                snapshot: std::sync::Arc::new(move || first.clone()),
            },
        )
        .unwrap();
        wal.snapshot().await.unwrap();
        let map = map_of_two_cells();
        let planned = Migration::plan(1, shared::migration::Subject::Slot(7), 0, 1).unwrap();
        let cloning = planned.apply(shared::migration::Event::CloneStarted).unwrap();
        let done = Migration::plan(2, shared::migration::Subject::Slot(8), 0, 1)
            .unwrap()
            .apply(shared::migration::Event::Failed)
            .unwrap();
        let user = |generation: u64, user: &str| Command::User {
            generation,
            user: user.into(),
        };
        let registered = |logged: LoggedIsu| Command::Isu {
            generation: 7,
            isu: logged,
            request: None,
        };
        for command in [
            user(7, "bob"),
            registered(isu(30, "u30", Some(b"icon"))),
            registered(isu(31, "u31", None)),
            Command::Removed {
                generation: 7,
                uuid: "u31".into(),
            },
            user(6, "from another generation"),
            Command::Map(map.clone()),
            Command::Migration(planned),
            Command::Migration(cloning.clone()),
            Command::Migration(done),
        ] {
            wal.append(&unversioned(command)).await.unwrap();
        }
        drop(wal);
        let state = read(directory.path()).unwrap().unwrap();
        assert_eq!(state.placement.as_ref(), Some(&map));
        assert_eq!(
            state.migrations,
            vec![cloning],
            "the last state of unfinished migrations only"
        );
        assert_eq!(state.generation, 7);
        assert_eq!(state.jia_service_url, "http://jia");
        assert_eq!(state.users, vec!["alice".to_owned(), "bob".to_owned()]);
        assert_eq!(state.isus, vec![isu(29, "u29", None), isu(30, "u30", Some(b"icon"))]);
        retire(directory.path()).unwrap();
        assert!(read(directory.path()).unwrap().is_none(), "converted once");
        assert!(converted_path(directory.path()).exists(), "kept for the operator");
    }

    #[test]
    fn a_journal_without_a_snapshot_is_refused_with_its_path() {
        let directory = tempfile::tempdir().unwrap();
        std::fs::write(path(directory.path()), b"").unwrap();
        let error = read(directory.path()).unwrap_err().to_string();
        assert!(error.contains("coordinator.wal"), "{error}");
        assert!(error.contains("move it away"), "{error}");
    }
}
