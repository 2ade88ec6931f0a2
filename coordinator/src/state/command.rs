//! What is replicated: [`Command`] is the closed list of every change to the coordinator's
//! authoritative state, and its encoding.
//!
//! A coordinator is a group of replicas on one raft log (a lone coordinator is a group of
//! one). Handlers and the leader's duties propose commands; every replica applies the
//! committed ones in log order ([`super::apply`]), and nothing else changes what a command
//! names. That is, in full:
//! - the generation: `/initialize` and a new group's first state ([`Command::Snapshot`], the
//!   whole state: generation id, JIA's URL, users, registered ISUs, the placement map, the
//!   unfinished migrations);
//! - users ([`Command::User`], a sign-in that created one);
//! - registrations: the ids a leader may give them ([`Command::Ids`]), an ISU accepted with
//!   its character ([`Command::Isu`]), one whose publish failed ([`Command::Removed`]), those
//!   a new leader rolled back ([`Command::Abandoned`]);
//! - the placement map and its pins ([`Command::Map`]);
//! - each step of a migration ([`Command::Migration`]).
//!
//! Membership changes are openraft's own entries, not commands. Soft state (the latest
//! conditions, the trend, sessions, icon bytes in a data directory's store) is outside the
//! log; `docs/architecture.md` says how each is rebuilt.
//!
//! # Encoding
//! A command is `[0xC0 + version][tag][fields]`, fields little-endian (strings and byte
//! strings with a u32 length; maps and migrations as JSON). This is version 1. A payload
//! that starts with a tag (1 to 9) instead is version 0, written by builds before
//! 2026-12-06 (the lone coordinator's journal and the replicas' logs): the same tags and
//! fields, still read. A later version that changes a command's fields gets a new version
//! byte and keeps reading the older ones.

use bytes::Bytes;
use shared::migration::Migration;
use shared::placement_map::PlacementMap;
use shared::wal::{Decoder, Encoder};

/// The version this build writes (see the module documentation).
pub const VERSION: u8 = 1;
/// The first byte of a versioned command is this plus its version.
const VERSION_BASE: u8 = 0xC0;

const SNAPSHOT_TAG: u8 = 1;
const USER_TAG: u8 = 2;
const ISU_TAG: u8 = 3;
const REMOVED_TAG: u8 = 4;
const MAP_TAG: u8 = 5;
const MIGRATION_TAG: u8 = 6;
const REGISTERING_TAG: u8 = 7;
const PUBLISHED_TAG: u8 = 8;
const ABANDONED_TAG: u8 = 9;
const IDS_TAG: u8 = 10;

/// One change to the coordinator's authoritative state. A command of a generation other
/// than the current one is a no-op when applied (a registration that raced an
/// `/initialize`); every other rule of applying is idempotent too, so a command committed
/// twice (a forward whose answer was lost) changes nothing the second time.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// The whole state: a new generation, or a group's first.
    Snapshot(Snapshot),
    /// A user created by its first sign-in.
    User { generation: u64, user: String },
    /// A registered ISU, accepted by JIA with its character; `request` is the registration
    /// request's id (a request sent again is answered from its outcome).
    Isu {
        generation: u64,
        isu: LoggedIsu,
        request: Option<String>,
    },
    /// A registered ISU whose publish failed, removed again.
    Removed { generation: u64, uuid: String },
    /// Registrations a new leader found provisional on their workers and rolled back (their
    /// ISUs never committed): their request ids, so a request sent again is answered from
    /// its outcome (a 503) instead of asking JIA again.
    Abandoned {
        generation: u64,
        registrations: Vec<Unfinished>,
    },
    /// Registration ids up to `up_to` that the leader may give, committed before it gives
    /// any of them: a registration's id reaches its worker before the ISU is logged, so a
    /// later leader starts above every id reserved (two ISUs of one id, after a takeover
    /// while a worker held the old leader's registration: nemesis seed 271828, 2026-12-07).
    Ids { generation: u64, up_to: i64 },
    /// A new placement map (committed before it is published anywhere).
    Map(PlacementMap),
    /// A migration's state after a step.
    Migration(Migration),
    /// Read only: a registration's start, written by builds before 2026-12-04.
    Registering { generation: u64, unfinished: Unfinished },
    /// A registration left started by a build before 2026-12-04 that a leader published.
    Published { generation: u64, uuid: String },
}

/// A registration the log has seen start and not end (written before 2026-12-04): its ISU
/// is provisional on its worker and maybe activated at JIA (`accepted: false`), or logged
/// with its character and maybe not yet published (`accepted: true`). A new leader rolls
/// back the first kind and publishes the second. Also the shape of [`Command::Abandoned`]'s
/// registrations.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Unfinished {
    pub uuid: String,
    pub id: i64,
    pub owner: String,
    pub accepted: bool,
    /// The request's id (`x-isu-request-id`, set by nginx and kept by a forwarding replica).
    #[serde(default)]
    pub request: Option<String>,
}

/// A registered ISU as the log holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedIsu {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub character: String,
    pub owner: String,
    /// `None`: the default icon, or the icon named by `icon`.
    pub image: Option<Bytes>,
    /// With a data directory: the icon's hash (its bytes are in the icon stores, not in the
    /// command: see [`crate::icons`]).
    pub icon: Option<crate::icons::IconHash>,
}

/// The whole authoritative state (see [`Command::Snapshot`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub generation: u64,
    pub jia_service_url: String,
    pub users: Vec<String>,
    /// In registration order.
    pub isus: Vec<LoggedIsu>,
    /// The placement map (`None` in a log written before maps existed).
    pub placement: Option<PlacementMap>,
    /// The last state of every migration that had not finished.
    pub migrations: Vec<Migration>,
    /// Registrations started and not ended (logs written before 2026-12-04).
    pub unfinished: Vec<Unfinished>,
    /// The registration ids reserved so far (see [`Command::Ids`]; 0 in a snapshot written
    /// before 2026-12-07).
    pub ids_reserved: i64,
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
        let mut isu = LoggedIsu {
            id: decoder.i64()?,
            uuid: decoder.str()?.to_owned(),
            name: decoder.str()?.to_owned(),
            character: decoder.str()?.to_owned(),
            owner: decoder.str()?.to_owned(),
            image: None,
            icon: None,
        };
        match decoder.u8()? {
            0 => {}
            1 => isu.image = Some(Bytes::copy_from_slice(decoder.bytes()?)),
            2 => isu.icon = Some(decoder.bytes()?.try_into().ok()?),
            _ => return None,
        }
        Some(isu)
    }
}

impl Command {
    /// The generation the command changes (`None`: the map and migrations, which outlive
    /// a generation).
    pub fn generation(&self) -> Option<u64> {
        match self {
            Command::Snapshot(snapshot) => Some(snapshot.generation),
            Command::User { generation, .. }
            | Command::Isu { generation, .. }
            | Command::Removed { generation, .. }
            | Command::Abandoned { generation, .. }
            | Command::Ids { generation, .. }
            | Command::Registering { generation, .. }
            | Command::Published { generation, .. } => Some(*generation),
            Command::Map(_) | Command::Migration(_) => None,
        }
    }

    /// The command as the log holds it (this build's [`VERSION`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut encoder = Encoder::new(VERSION_BASE + VERSION);
        match self {
            Command::Snapshot(snapshot) => {
                encoder.u8(SNAPSHOT_TAG);
                encode_snapshot(snapshot, &mut encoder);
            }
            Command::User { generation, user } => {
                encoder.u8(USER_TAG).u64(*generation).str(user);
            }
            Command::Isu {
                generation,
                isu,
                request,
            } => {
                encoder.u8(ISU_TAG).u64(*generation);
                isu.encode(&mut encoder);
                if let Some(request) = request {
                    encoder.str(request);
                }
            }
            Command::Removed { generation, uuid } => {
                encoder.u8(REMOVED_TAG).u64(*generation).str(uuid);
            }
            Command::Abandoned {
                generation,
                registrations,
            } => {
                encoder.u8(ABANDONED_TAG).u64(*generation).str(&json(registrations));
            }
            Command::Ids { generation, up_to } => {
                encoder.u8(IDS_TAG).u64(*generation).i64(*up_to);
            }
            Command::Map(map) => {
                encoder.u8(MAP_TAG).str(&json(map));
            }
            Command::Migration(migration) => {
                encoder.u8(MIGRATION_TAG).str(&json(migration));
            }
            Command::Registering { generation, unfinished } => {
                encoder.u8(REGISTERING_TAG).u64(*generation).str(&json(unfinished));
            }
            Command::Published { generation, uuid } => {
                encoder.u8(PUBLISHED_TAG).u64(*generation).str(uuid);
            }
        }
        encoder.bytes
    }

    /// Decodes a command of this version or an earlier one; `None` for one this build
    /// cannot read (a later version, or damaged).
    pub fn decode(payload: &[u8]) -> Option<Command> {
        let mut decoder = Decoder::new(payload);
        let mut tag = decoder.u8()?;
        if tag > VERSION_BASE {
            if tag - VERSION_BASE > VERSION {
                return None;
            }
            tag = decoder.u8()?;
        }
        Some(match tag {
            SNAPSHOT_TAG => Command::Snapshot(decode_snapshot(&mut decoder)?),
            MAP_TAG => Command::Map(serde_json::from_str(decoder.str()?).ok()?),
            MIGRATION_TAG => Command::Migration(serde_json::from_str(decoder.str()?).ok()?),
            USER_TAG => Command::User {
                generation: decoder.u64()?,
                user: decoder.str()?.to_owned(),
            },
            ISU_TAG => Command::Isu {
                generation: decoder.u64()?,
                isu: LoggedIsu::decode(&mut decoder)?,
                // Absent in records written before requests were kept.
                request: match decoder.is_empty() {
                    true => None,
                    false => Some(decoder.str()?.to_owned()),
                },
            },
            REMOVED_TAG => Command::Removed {
                generation: decoder.u64()?,
                uuid: decoder.str()?.to_owned(),
            },
            REGISTERING_TAG => Command::Registering {
                generation: decoder.u64()?,
                unfinished: serde_json::from_str(decoder.str()?).ok()?,
            },
            PUBLISHED_TAG => Command::Published {
                generation: decoder.u64()?,
                uuid: decoder.str()?.to_owned(),
            },
            ABANDONED_TAG => Command::Abandoned {
                generation: decoder.u64()?,
                registrations: serde_json::from_str(decoder.str()?).ok()?,
            },
            IDS_TAG => Command::Ids {
                generation: decoder.u64()?,
                up_to: decoder.i64()?,
            },
            _ => return None,
        })
    }

    /// The command's kind, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Snapshot(_) => "snapshot",
            Command::User { .. } => "user",
            Command::Isu { .. } => "isu",
            Command::Removed { .. } => "removed",
            Command::Abandoned { .. } => "abandoned",
            Command::Ids { .. } => "ids",
            Command::Map(_) => "map",
            Command::Migration(_) => "migration",
            Command::Registering { .. } => "registering",
            Command::Published { .. } => "published",
        }
    }
}

/// JSON of the values some commands carry (plain data: they serialise).
fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("a command's values serialise")
}

fn encode_snapshot(snapshot: &Snapshot, encoder: &mut Encoder) {
    encoder
        .u64(snapshot.generation)
        .str(&snapshot.jia_service_url)
        .u32(snapshot.users.len() as u32);
    for user in &snapshot.users {
        encoder.str(user);
    }
    encoder.u32(snapshot.isus.len() as u32);
    for isu in &snapshot.isus {
        isu.encode(encoder);
    }
    match &snapshot.placement {
        Some(map) => encoder.u8(1).str(&json(map)),
        None => encoder.u8(0),
    };
    encoder.u32(snapshot.migrations.len() as u32);
    for migration in &snapshot.migrations {
        encoder.str(&json(migration));
    }
    encoder.str(&json(&snapshot.unfinished));
    encoder.i64(snapshot.ids_reserved);
}

fn decode_snapshot(decoder: &mut Decoder<'_>) -> Option<Snapshot> {
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
    let ids_reserved = match decoder.is_empty() {
        true => 0,
        false => decoder.i64()?,
    };
    Some(Snapshot {
        generation,
        jia_service_url,
        users,
        isus,
        placement,
        migrations,
        unfinished,
        ids_reserved,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A registered ISU of alice's as the log holds it.
    pub(crate) fn isu(id: i64, uuid: &str, image: Option<&'static [u8]>) -> LoggedIsu {
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

    /// A map of two cells, slot 7 on the second.
    pub(crate) fn map_of_two_cells() -> PlacementMap {
        let cells = (0..2)
            .map(|index| shared::placement_map::Cell {
                name: format!("c{index}"),
                internal_url: format!("http://w{index}"),
                device_url: format!("http://d{index}"),
            })
            .collect();
        let mut map = PlacementMap::new(cells).unwrap();
        map.assign_slot(7, 1).unwrap();
        map
    }

    /// One command of every kind.
    fn every_kind() -> Vec<Command> {
        let map = map_of_two_cells();
        let migration = Migration::plan(1, shared::migration::Subject::Slot(7), 0, 1).unwrap();
        let unfinished = Unfinished {
            uuid: "uuid-13".into(),
            id: 13,
            owner: "alice".into(),
            accepted: false,
            request: Some("req-2".into()),
        };
        let mut named = isu(8, "u8", None);
        named.icon = Some(crate::icons::hash_of(b"icon"));
        vec![
            Command::Snapshot(Snapshot {
                generation: 7,
                jia_service_url: "http://jia".into(),
                users: vec!["alice".into()],
                isus: vec![isu(29, "u29", Some(b"png")), named.clone()],
                placement: Some(map.clone()),
                migrations: vec![migration.clone()],
                unfinished: vec![unfinished.clone()],
                ids_reserved: 199,
            }),
            Command::Ids {
                generation: 7,
                up_to: 299,
            },
            Command::User {
                generation: 7,
                user: "bob".into(),
            },
            Command::Isu {
                generation: 7,
                isu: named,
                request: Some("req-1".into()),
            },
            Command::Isu {
                generation: 7,
                isu: isu(9, "u9", None),
                request: None,
            },
            Command::Removed {
                generation: 7,
                uuid: "u9".into(),
            },
            Command::Abandoned {
                generation: 7,
                registrations: vec![unfinished.clone()],
            },
            Command::Map(map),
            Command::Migration(migration),
            Command::Registering {
                generation: 7,
                unfinished,
            },
            Command::Published {
                generation: 7,
                uuid: "uuid-13".into(),
            },
        ]
    }

    #[test]
    fn every_command_decodes_as_encoded_and_names_its_version() {
        for command in every_kind() {
            let bytes = command.encode();
            assert_eq!(bytes[0], VERSION_BASE + VERSION, "{}", command.kind());
            assert_eq!(Command::decode(&bytes), Some(command));
        }
    }

    #[test]
    fn an_unversioned_command_of_an_earlier_build_is_read_and_a_later_version_is_not() {
        for command in every_kind() {
            let bytes = command.encode();
            // Version 0: the same tag and fields without the version byte.
            assert_eq!(Command::decode(&bytes[1..]), Some(command.clone()));
            let mut later = bytes.clone();
            later[0] += 1;
            assert_eq!(Command::decode(&later), None, "{}", command.kind());
        }
    }

    #[test]
    fn a_snapshot_written_before_ids_were_reserved_reads_as_none_reserved() {
        let Some(Command::Snapshot(snapshot)) = every_kind().into_iter().next() else {
            panic!("the first kind is a snapshot")
        };
        let bytes = Command::Snapshot(snapshot.clone()).encode();
        let earlier = &bytes[..bytes.len() - 8];
        let expected = Snapshot {
            ids_reserved: 0,
            ..snapshot
        };
        assert_eq!(Command::decode(earlier), Some(Command::Snapshot(expected)));
    }

    #[test]
    fn an_isu_command_names_a_stored_icon_by_its_hash_without_its_bytes() {
        let bytes = vec![0xa5u8; 50_000];
        let mut named = isu(7, "uuid-7", None);
        named.icon = Some(crate::icons::hash_of(&bytes));
        let mut inline = isu(8, "uuid-8", None);
        inline.image = Some(Bytes::from(bytes.clone()));
        for logged in [named, inline, isu(9, "uuid-9", None)] {
            let command = Command::Isu {
                generation: 3,
                isu: logged.clone(),
                request: None,
            };
            let size = command.encode().len();
            // The command with a hash is as small as the one with the default icon, plus the hash.
            assert_eq!(size < 200, logged.image.is_none(), "{size} bytes");
        }
    }
}
