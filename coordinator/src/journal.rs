//! The coordinator's durable log (`--data-dir`): `<data-dir>/coordinator.wal`
//! (see [`shared::wal`]) holds what the dataset does not: the generation id,
//! JIA's URL, the users and the registered ISUs with their icons. It is
//! replayed on start, so a restarted coordinator keeps its generation and the
//! workers keep their data (they are asked to push their latest conditions again).
//!
//! Records (first byte = tag, then little-endian fields):
//! - `1` snapshot: generation, JIA URL, every user, every registered ISU; written
//!   at start, by `POST /initialize` (a fresh log) and on compaction;
//! - `2` user, `3` ISU (icon bytes, or none for the default icon), `4` removed
//!   ISU (its publish failed): each carries its generation, and replay skips
//!   records of another generation (a registration that raced an `/initialize`);
//! - `5` placement map (JSON) and `6` migration (JSON, its state after each step): these
//!   belong to the cluster, not to a generation, so `/initialize` keeps them. The snapshot
//!   ends with the current map and the migrations that have not finished.
//!
//! A user is logged before the sign-in is answered; an ISU after JIA activated
//! it and before it is published on its worker, so a registered ISU is never
//! acknowledged without being logged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use shared::migration::Migration;
use shared::placement_map::PlacementMap;
use shared::wal::{read_log, Decoder, Encoder, FsyncPolicy, SnapshotFn, Wal, WalError, WalOptions};

const SNAPSHOT_TAG: u8 = 1;
const USER_TAG: u8 = 2;
const ISU_TAG: u8 = 3;
const REMOVED_TAG: u8 = 4;
const MAP_TAG: u8 = 5;
const MIGRATION_TAG: u8 = 6;
const REGISTERING_TAG: u8 = 7;
const PUBLISHED_TAG: u8 = 8;
const ABANDONED_TAG: u8 = 9;

/// A registration the replicated log has seen start and not end (replicas only): its ISU is
/// provisional on its worker and maybe activated at JIA (`accepted: false`), or logged with
/// its character and maybe not yet published on its worker (`accepted: true`). A new leader
/// rolls back the first kind and publishes the second.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Unfinished {
    pub uuid: String,
    pub id: i64,
    pub owner: String,
    pub accepted: bool,
    /// The request's id (`x-isu-request-id`, set by nginx and kept by a forwarding replica):
    /// the same request sent again is answered from its outcome instead of run twice.
    #[serde(default)]
    pub request: Option<String>,
}

/// A registered ISU as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedIsu {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub character: String,
    pub owner: String,
    /// `None`: the default icon, or the icon named by `icon`.
    pub image: Option<Bytes>,
    /// Replicas: the icon's hash (its bytes are in the replicas' icon stores, not in the
    /// record: see [`crate::icons`]).
    pub icon: Option<crate::icons::IconHash>,
}

impl LoggedIsu {
    fn encode(&self, encoder: &mut Encoder) {
        encoder
            .i64(self.id)
            .str(&self.uuid)
            .str(&self.name)
            .str(&self.character)
            .str(&self.owner);
        match (&self.icon, &self.image) {
            (Some(hash), _) => encoder.u8(2).bytes(hash),
            (None, Some(image)) => encoder.u8(1).bytes(image),
            (None, None) => encoder.u8(0),
        };
    }

    fn decode(decoder: &mut Decoder<'_>) -> Option<LoggedIsu> {
        Some(LoggedIsu {
            id: decoder.i64()?,
            uuid: decoder.str()?.to_owned(),
            name: decoder.str()?.to_owned(),
            character: decoder.str()?.to_owned(),
            owner: decoder.str()?.to_owned(),
            image: None,
            icon: None,
        })
        .and_then(|mut isu| {
            match decoder.u8()? {
                0 => {}
                1 => isu.image = Some(Bytes::copy_from_slice(decoder.bytes()?)),
                2 => isu.icon = Some(decoder.bytes()?.try_into().ok()?),
                _ => return None,
            }
            Some(isu)
        })
    }
}

/// The state a log describes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    pub generation: u64,
    pub jia_service_url: String,
    pub users: Vec<String>,
    /// In registration order.
    pub isus: Vec<LoggedIsu>,
    /// The last logged placement map (`None` in a log written before maps existed).
    pub placement: Option<PlacementMap>,
    /// The last state of every migration that had not finished, by id.
    pub migrations: Vec<Migration>,
    /// Registrations started and not ended (replicas only).
    pub unfinished: Vec<Unfinished>,
}

/// One record holding `restored` whole.
pub fn snapshot_record(restored: &Restored) -> Vec<u8> {
    let mut encoder = Encoder::new(SNAPSHOT_TAG);
    encoder
        .u64(restored.generation)
        .str(&restored.jia_service_url)
        .u32(restored.users.len() as u32);
    for user in &restored.users {
        encoder.str(user);
    }
    encoder.u32(restored.isus.len() as u32);
    for isu in &restored.isus {
        isu.encode(&mut encoder);
    }
    match &restored.placement {
        Some(map) => encoder
            .u8(1)
            .str(&serde_json::to_string(map).expect("a map serialises")),
        None => encoder.u8(0),
    };
    encoder.u32(restored.migrations.len() as u32);
    for migration in &restored.migrations {
        encoder.str(&serde_json::to_string(migration).expect("a migration serialises"));
    }
    // Written since replicas: a snapshot without it has no unfinished registration.
    encoder.str(&serde_json::to_string(&restored.unfinished).expect("registrations serialise"));
    encoder.bytes
}

/// Cheap-clone handle to the log: the local file (`--data-dir`), the replicated log of the
/// coordinator replicas (`--replica`), or disabled (every call a no-op).
#[derive(Clone, Default)]
pub struct Journal {
    backend: Backend,
}

#[derive(Clone, Default)]
enum Backend {
    #[default]
    Off,
    Local(Wal),
    Replicated(Arc<Replicated>),
}

/// The replicated backend: records are commands of the replicas' raft log, committed by the
/// leader (a follower forwards them); a snapshot record is proposed like any other.
struct Replicated {
    proposer: OnceLock<consensus::Proposer>,
    snapshot: SnapshotFn,
}

/// How long a replicated record took to be committed (and applied here).
pub const RAFT_COMMIT_SECONDS: &str = "coordinator_raft_commit_seconds";

/// Why a record was not made durable.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error(transparent)]
    Local(#[from] WalError),
    #[error(transparent)]
    NotCommitted(#[from] consensus::ProposeError),
    #[error("the replicated log is not started yet")]
    NotStarted,
}

/// The log's path in `data_dir`.
pub fn log_path(data_dir: &Path) -> PathBuf {
    data_dir.join("coordinator.wal")
}

/// One record of the log, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Snapshot(Restored),
    User {
        generation: u64,
        user: String,
    },
    /// A registered ISU; `request` is the registration request's id (replicas).
    Isu {
        generation: u64,
        isu: LoggedIsu,
        request: Option<String>,
    },
    Removed {
        generation: u64,
        uuid: String,
    },
    /// Written by replicas before 2026-12-04 (a registration's start and end); still read.
    Registering {
        generation: u64,
        unfinished: Unfinished,
    },
    Published {
        generation: u64,
        uuid: String,
    },
    /// Registrations a new leader found provisional on their workers and rolled back there
    /// (their ISUs never committed): their request ids, so a request sent again is answered
    /// from its outcome (a 503) instead of asking JIA again.
    Abandoned {
        generation: u64,
        registrations: Vec<Unfinished>,
    },
    Map(PlacementMap),
    Migration(Migration),
}

/// Decodes one record's payload; `None` for one this build cannot read.
pub fn decode(payload: &[u8]) -> Option<Record> {
    let mut decoder = Decoder::new(payload);
    Some(match decoder.u8()? {
        SNAPSHOT_TAG => Record::Snapshot(decode_snapshot(&mut decoder)?),
        MAP_TAG => Record::Map(serde_json::from_str(decoder.str()?).ok()?),
        MIGRATION_TAG => Record::Migration(serde_json::from_str(decoder.str()?).ok()?),
        USER_TAG => Record::User {
            generation: decoder.u64()?,
            user: decoder.str()?.to_owned(),
        },
        ISU_TAG => Record::Isu {
            generation: decoder.u64()?,
            isu: LoggedIsu::decode(&mut decoder)?,
            // Written since replicas dropped the start record: absent in older records.
            request: match decoder.is_empty() {
                true => None,
                false => Some(decoder.str()?.to_owned()),
            },
        },
        REMOVED_TAG => Record::Removed {
            generation: decoder.u64()?,
            uuid: decoder.str()?.to_owned(),
        },
        REGISTERING_TAG => Record::Registering {
            generation: decoder.u64()?,
            unfinished: serde_json::from_str(decoder.str()?).ok()?,
        },
        PUBLISHED_TAG => Record::Published {
            generation: decoder.u64()?,
            uuid: decoder.str()?.to_owned(),
        },
        ABANDONED_TAG => Record::Abandoned {
            generation: decoder.u64()?,
            registrations: serde_json::from_str(decoder.str()?).ok()?,
        },
        _ => return None,
    })
}

/// Reads the log in `data_dir`; `None` when there is none (or it holds no snapshot).
pub fn replay(data_dir: &Path) -> std::io::Result<Option<Restored>> {
    std::fs::create_dir_all(data_dir)?;
    let mut restored: Option<Restored> = None;
    // uuid → position in `isus`, so a removal finds its ISU.
    let mut isus: BTreeMap<String, (i64, LoggedIsu)> = BTreeMap::new();
    let mut migrations: BTreeMap<u64, Migration> = BTreeMap::new();
    let mut skipped = 0u64;
    let report = read_log(&log_path(data_dir), |payload| {
        let applied = match decode(payload) {
            Some(Record::Snapshot(snapshot)) => {
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
                restored = Some(snapshot);
                Some(())
            }
            Some(record) => restored.as_mut().and_then(|state| {
                match record {
                    Record::Map(map) => state.placement = Some(map),
                    Record::Migration(migration) => {
                        migrations.insert(migration.id, migration);
                    }
                    Record::User { generation, user } if generation == state.generation => state.users.push(user),
                    Record::Isu { generation, isu, .. } if generation == state.generation => {
                        isus.insert(isu.uuid.clone(), (isu.id, isu));
                    }
                    Record::Removed { generation, uuid } if generation == state.generation => {
                        isus.remove(&uuid);
                    }
                    // A record of another generation (a registration that raced an `/initialize`).
                    _ => return None,
                }
                Some(())
            }),
            None => None,
        };
        if applied.is_none() {
            skipped += 1;
        }
    })?;
    let Some(mut restored) = restored else {
        return Ok(None);
    };
    let mut registered: Vec<(i64, LoggedIsu)> = isus.into_values().collect();
    registered.sort_by_key(|(id, _)| *id);
    restored.isus = registered.into_iter().map(|(_, isu)| isu).collect();
    restored.migrations = migrations
        .into_values()
        .filter(|migration| !migration.is_finished())
        .collect();
    restored.users.sort();
    restored.users.dedup();
    tracing::info!(
        records = report.records,
        skipped,
        truncated_bytes = report.truncated_bytes,
        generation = restored.generation,
        users = restored.users.len(),
        isus = restored.isus.len(),
        "log replayed"
    );
    Ok(Some(restored))
}

fn decode_snapshot(decoder: &mut Decoder<'_>) -> Option<Restored> {
    let generation = decoder.u64()?;
    let jia_service_url = decoder.str()?.to_owned();
    let users = (0..decoder.u32()?)
        .map(|_| decoder.str().map(str::to_owned))
        .collect::<Option<Vec<_>>>()?;
    let isus = (0..decoder.u32()?)
        .map(|_| LoggedIsu::decode(decoder))
        .collect::<Option<Vec<_>>>()?;
    // A snapshot written before placement maps existed ends here.
    let (placement, migrations) = if decoder.is_empty() {
        (None, Vec::new())
    } else {
        let placement = match decoder.u8()? {
            0 => None,
            _ => Some(serde_json::from_str(decoder.str()?).ok()?),
        };
        let migrations = (0..decoder.u32()?)
            .map(|_| serde_json::from_str(decoder.str()?).ok())
            .collect::<Option<Vec<Migration>>>()?;
        (placement, migrations)
    };
    let unfinished = match decoder.is_empty() {
        true => Vec::new(),
        false => serde_json::from_str(decoder.str()?).ok()?,
    };
    Some(Restored {
        generation,
        jia_service_url,
        users,
        isus,
        placement,
        migrations,
        unfinished,
    })
}

impl Journal {
    /// Opens the log in `data_dir` for appending; `snapshot` describes the current state.
    pub fn open(
        data_dir: &Path,
        policy: FsyncPolicy,
        compact_after_bytes: u64,
        snapshot: SnapshotFn,
    ) -> std::io::Result<Journal> {
        let wal = Wal::open(
            &log_path(data_dir),
            WalOptions {
                policy,
                compact_after_bytes,
                snapshot,
            },
        )?;
        Ok(Journal {
            backend: Backend::Local(wal),
        })
    }

    /// A journal whose records go to the replicas' raft log, once [`Journal::attach`] gives
    /// it this replica's proposer; `snapshot` describes the current state.
    pub fn replicated(snapshot: SnapshotFn) -> Journal {
        Journal {
            backend: Backend::Replicated(Arc::new(Replicated {
                proposer: OnceLock::new(),
                snapshot,
            })),
        }
    }

    /// Starts writing to the raft log (once the replica runs).
    pub fn attach(&self, proposer: consensus::Proposer) {
        if let Backend::Replicated(replicated) = &self.backend {
            let _ = replicated.proposer.set(proposer);
        }
    }

    /// This replica's raft, when the journal is replicated and attached.
    pub fn raft(&self) -> Option<&consensus::Raft> {
        match &self.backend {
            Backend::Replicated(replicated) => replicated.proposer.get().map(consensus::Proposer::raft),
            _ => None,
        }
    }

    /// Replicated: waits until this replica has applied what the leader had (see
    /// [`consensus::Proposer::catch_up`]); a local or disabled journal has nothing to wait for.
    pub async fn catch_up(&self) -> Result<(), JournalError> {
        if let Backend::Replicated(replicated) = &self.backend {
            let proposer = replicated.proposer.get().ok_or(JournalError::NotStarted)?;
            proposer.catch_up().await?;
        }
        Ok(())
    }

    /// Replicated, on the leader: waits until it has applied its whole log (see
    /// [`consensus::Proposer::settled`]); a local or disabled journal has nothing to wait for.
    pub async fn settled(&self) -> Result<(), JournalError> {
        if let Backend::Replicated(replicated) = &self.backend {
            let proposer = replicated.proposer.get().ok_or(JournalError::NotStarted)?;
            proposer.settled().await?;
        }
        Ok(())
    }

    async fn append(&self, record: impl FnOnce() -> Encoder) -> Result<(), JournalError> {
        match &self.backend {
            Backend::Off => Ok(()),
            Backend::Local(wal) => Ok(wal.append(&record().bytes).await?),
            Backend::Replicated(replicated) => replicated.propose(record().bytes, false).await,
        }
    }

    /// [`Journal::append`] of a step of a protocol only the leader runs: replicated, it is
    /// committed only while this replica leads (never forwarded).
    async fn append_as_leader(&self, record: impl FnOnce() -> Encoder) -> Result<(), JournalError> {
        match &self.backend {
            Backend::Replicated(replicated) => replicated.propose(record().bytes, true).await,
            _ => self.append(record).await,
        }
    }

    /// A fresh log holding the current state (at start and after `/initialize`); replicated,
    /// a snapshot record that every replica applies (a new generation reaches them so).
    pub async fn snapshot(&self) -> Result<(), JournalError> {
        match &self.backend {
            Backend::Off => Ok(()),
            Backend::Local(wal) => Ok(wal.snapshot().await?),
            Backend::Replicated(replicated) => replicated.propose((replicated.snapshot)(), true).await,
        }
    }

    /// Replicated: commits a snapshot record built by the caller (a new generation), which
    /// every replica applies.
    pub async fn propose_snapshot(&self, record: Vec<u8>) -> Result<(), JournalError> {
        match &self.backend {
            Backend::Replicated(replicated) => replicated.propose(record, true).await,
            _ => Err(JournalError::NotStarted),
        }
    }

    pub async fn user(&self, generation: u64, user: &str) -> Result<(), JournalError> {
        self.append(|| of_generation(USER_TAG, generation, user)).await
    }

    /// A registered ISU; `request` is the registration request's id (replicas).
    pub async fn isu(&self, generation: u64, isu: &LoggedIsu, request: Option<&str>) -> Result<(), JournalError> {
        self.append_as_leader(|| {
            let mut encoder = Encoder::new(ISU_TAG);
            encoder.u64(generation);
            isu.encode(&mut encoder);
            if let Some(request) = request {
                encoder.str(request);
            }
            encoder
        })
        .await
    }

    /// A new placement map (logged before it is published anywhere).
    pub async fn placement(&self, map: &PlacementMap) -> Result<(), JournalError> {
        self.append_json(MAP_TAG, map).await
    }

    /// A migration's state after a step.
    pub async fn migration(&self, migration: &Migration) -> Result<(), JournalError> {
        self.append_json(MIGRATION_TAG, migration).await
    }

    /// A record of `tag` holding `value` as JSON (a step of a migration or a map change, which
    /// only the leader runs).
    async fn append_json(&self, tag: u8, value: &impl serde::Serialize) -> Result<(), JournalError> {
        let json = serde_json::to_string(value).expect("placement records serialise");
        self.append_as_leader(|| {
            let mut encoder = Encoder::new(tag);
            encoder.str(&json);
            encoder
        })
        .await
    }

    /// Registrations a new leader rolled back on their workers (replicas only; see
    /// [`Record::Abandoned`]).
    pub async fn abandoned(&self, generation: u64, registrations: &[Unfinished]) -> Result<(), JournalError> {
        let json = serde_json::to_string(registrations).expect("registrations serialise");
        self.append_as_leader(|| of_generation(ABANDONED_TAG, generation, &json))
            .await
    }

    /// A registration ended: its ISU is published on its worker (replicas: ends a
    /// registration a log written before 2026-12-04 holds as started).
    pub async fn published(&self, generation: u64, uuid: &str) -> Result<(), JournalError> {
        self.append_as_leader(|| of_generation(PUBLISHED_TAG, generation, uuid))
            .await
    }

    pub async fn removed(&self, generation: u64, uuid: &str) -> Result<(), JournalError> {
        self.append_as_leader(|| of_generation(REMOVED_TAG, generation, uuid))
            .await
    }
}

/// A record of `tag` holding `generation` and one string (a user, a UUID, a JSON value).
fn of_generation(tag: u8, generation: u64, text: &str) -> Encoder {
    let mut encoder = Encoder::new(tag);
    encoder.u64(generation).str(text);
    encoder
}

impl Replicated {
    async fn propose(&self, record: Vec<u8>, as_leader: bool) -> Result<(), JournalError> {
        let proposer = self.proposer.get().ok_or(JournalError::NotStarted)?;
        let started = std::time::Instant::now();
        match as_leader {
            true => proposer.propose_as_leader(record).await?,
            false => proposer.propose(record).await?,
        };
        metrics::histogram!(RAFT_COMMIT_SECONDS).record(started.elapsed().as_secs_f64());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn isu(id: i64, uuid: &str, image: Option<&'static [u8]>) -> LoggedIsu {
        LoggedIsu {
            id,
            uuid: uuid.into(),
            name: format!("isu {id}"),
            character: "いじっぱり".into(),
            owner: "alice".into(),
            image: image.map(Bytes::from_static),
            icon: None,
        }
    }

    #[test]
    fn an_isu_record_names_a_stored_icon_by_its_hash_without_its_bytes() {
        let bytes = vec![0xa5u8; 50_000];
        let mut named = isu(7, "uuid-7", None);
        named.icon = Some(crate::icons::hash_of(&bytes));
        let mut inline = isu(8, "uuid-8", None);
        inline.image = Some(Bytes::from(bytes.clone()));
        for logged in [named.clone(), inline.clone(), isu(9, "uuid-9", None)] {
            let mut encoder = Encoder::new(ISU_TAG);
            logged.encode(&mut encoder);
            let size = encoder.bytes.len();
            let mut decoder = Decoder::new(&encoder.bytes[1..]);
            assert_eq!(LoggedIsu::decode(&mut decoder), Some(logged.clone()));
            // The record with a hash is as small as the one with the default icon, plus the hash.
            assert_eq!(size < 200, logged.image.is_none(), "{size} bytes");
        }
    }

    #[test]
    fn an_isu_record_carries_its_request_and_one_without_reads_as_none() {
        let logged = isu(12, "uuid-12", None);
        for request in [Some("req-1"), None] {
            let mut encoder = Encoder::new(ISU_TAG);
            encoder.u64(3);
            logged.encode(&mut encoder);
            if let Some(request) = request {
                encoder.str(request);
            }
            assert_eq!(
                decode(&encoder.bytes),
                Some(Record::Isu {
                    generation: 3,
                    isu: logged.clone(),
                    request: request.map(str::to_owned),
                })
            );
        }
        let abandoned = vec![Unfinished {
            uuid: "uuid-13".into(),
            id: 13,
            owner: "alice".into(),
            accepted: false,
            request: Some("req-2".into()),
        }];
        let json = serde_json::to_string(&abandoned).unwrap();
        assert_eq!(
            decode(&of_generation(ABANDONED_TAG, 3, &json).bytes),
            Some(Record::Abandoned {
                generation: 3,
                registrations: abandoned
            })
        );
    }

    #[tokio::test]
    async fn replay_restores_the_snapshot_and_later_records_of_its_generation_only() {
        let directory = std::env::temp_dir().join(format!("coordinator-journal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        assert_eq!(replay(&directory).unwrap(), None);
        let base = Restored {
            generation: 7,
            jia_service_url: "http://jia".into(),
            users: vec!["alice".into()],
            isus: vec![isu(29, "u29", None)],
            ..Restored::default()
        };
        let snapshot = snapshot_record(&base);
        let journal = Journal::open(
            &directory,
            FsyncPolicy::Always,
            u64::MAX,
            std::sync::Arc::new(move || snapshot.clone()),
        )
        .unwrap();
        journal.snapshot().await.unwrap();
        journal.user(7, "bob").await.unwrap();
        journal.isu(7, &isu(30, "u30", Some(b"icon")), None).await.unwrap();
        journal.isu(7, &isu(31, "u31", None), Some("request-31")).await.unwrap();
        journal.removed(7, "u31").await.unwrap();
        journal.user(6, "from another generation").await.unwrap();
        let cells = (0..2)
            .map(|index| shared::placement_map::Cell {
                name: format!("c{index}"),
                internal_url: format!("http://w{index}"),
                device_url: format!("http://d{index}"),
            })
            .collect();
        let mut map = PlacementMap::new(cells).unwrap();
        map.assign_slot(7, 1).unwrap();
        journal.placement(&map).await.unwrap();
        let planned = Migration::plan(1, shared::migration::Subject::Slot(7), 0, 1).unwrap();
        let cloning = planned.apply(shared::migration::Event::CloneStarted).unwrap();
        journal.migration(&planned).await.unwrap();
        journal.migration(&cloning).await.unwrap();
        let done = Migration::plan(2, shared::migration::Subject::Slot(8), 0, 1)
            .unwrap()
            .apply(shared::migration::Event::Failed)
            .unwrap();
        journal.migration(&done).await.unwrap();
        let restored = replay(&directory).unwrap().unwrap();
        assert_eq!(restored.placement.as_ref(), Some(&map));
        assert_eq!(
            restored.migrations,
            vec![cloning],
            "the last state of unfinished migrations only"
        );
        assert_eq!(restored.generation, 7);
        assert_eq!(restored.jia_service_url, "http://jia");
        assert_eq!(restored.users, vec!["alice".to_owned(), "bob".to_owned()]);
        assert_eq!(restored.isus, vec![isu(29, "u29", None), isu(30, "u30", Some(b"icon"))]);
        let _ = std::fs::remove_dir_all(&directory);
    }
}
