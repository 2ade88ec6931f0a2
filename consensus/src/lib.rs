//! The coordinators' replicated log, on openraft (0.9, pinned; `single-term-leader`, so a
//! term has at most one leader).
//!
//! Layout:
//! - [`log_store`]: the raft log and vote, durable (one file of checksummed records; every
//!   append is synced before openraft hears it is flushed). A damaged log stops the replica
//!   at start with the reason; only a torn last record, never acknowledged, is cut off.
//! - [`state_machine`]: applies committed commands to the application (an [`Applier`]) and
//!   keeps its snapshots durable (written whole, synced, renamed into place).
//! - [`network`]: the transport between replicas: `POST /internal/raft/{append,vote,snapshot}`
//!   with JSON bodies and the cluster secret, the client side and the axum routes.
//! - [`replica`]: one replica started from its options: the stores opened, the routes, the
//!   first membership of a new group.
//!
//! Commands and replies are opaque bytes here: the application (the coordinator) encodes
//! its own records, so this crate knows nothing of users or ISUs.

// openraft's traits fix the error types (`StorageError`, `RaftError`), which are large.
#![allow(clippy::result_large_err)]

pub mod log_store;
pub mod network;
pub mod replica;
pub mod state_machine;

use std::fmt;
use std::io::Cursor;

use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use openraft;
pub use replica::{MembershipError, ProposeError, Proposer, Replica, ReplicaOptions, Status, DEFAULT_HEARTBEAT_MS};
pub use state_machine::Applier;

/// A replica's id (1, 2, 3, …: unique in its group, never reused for another data directory).
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The coordinators' raft types: opaque commands and replies, replicas addressed by URL.
    pub TypeConfig:
        D = Command,
        R = Reply,
);

/// The raft handle of one replica.
pub type Raft = openraft::Raft<TypeConfig>;
/// A replica's address as the group stores it (`addr` is its base URL, `http://host:port`).
pub type Node = openraft::BasicNode;

/// One command of the application's, as the log holds it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command(#[serde(with = "base64_bytes")] pub Vec<u8>);

/// The application's answer to one applied command.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Reply(#[serde(with = "base64_bytes")] pub Vec<u8>);

impl fmt::Debug for Command {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "Command({} bytes)", self.0.len())
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "Reply({} bytes)", self.0.len())
    }
}

impl fmt::Display for Command {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, formatter)
    }
}

/// Bytes as base64 text in JSON (a byte array as numbers would be about four times longer).
mod base64_bytes {
    use super::*;

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

/// A storage error of openraft's from an I/O error while reading or writing the log.
fn log_error(error: impl std::error::Error + 'static, write: bool) -> openraft::StorageError<NodeId> {
    let error = openraft::AnyError::new(&error);
    let subject = openraft::ErrorSubject::Logs;
    let verb = if write {
        openraft::ErrorVerb::Write
    } else {
        openraft::ErrorVerb::Read
    };
    openraft::StorageIOError::new(subject, verb, error).into()
}
