//! The inter-node protocol: every internal path, header and message body.
//!
//! Internal routes live under `/internal/`, require the cluster secret and are
//! never routed by the public nginx server. Bodies are JSON, except a latest batch's
//! binary form ([`LATEST_BINARY`]).

use serde::{Deserialize, Serialize};

use crate::domain::Flags;

pub mod cells;

/// Header carrying the cluster secret (`Authorization: Bearer <secret>` is accepted too,
/// so a Prometheus scraper can read `/metrics`).
pub const SECRET_HEADER: &str = "x-cluster-secret";

/// Header of a leading coordinator replica's control calls to the workers: the raft term it
/// leads in. A worker refuses (403) a control call of a term older than the newest it has
/// seen, so a replica that lost its leadership without knowing it (paused, cut off) can no
/// longer act on the workers once the next leader has. A lone coordinator sends none.
pub const TERM_HEADER: &str = "x-isu-leader-term";

/// Worker: replace the whole shard with the given data (`/initialize`, coordinator start).
pub const WORKER_RESET: &str = "/internal/reset";
/// Worker: learn users created on the coordinator.
pub const WORKER_USERS: &str = "/internal/users";
/// Worker: register an ISU provisionally (accepts posts, invisible to reads).
pub const WORKER_PROVISIONAL: &str = "/internal/isu/provisional";
/// Worker: mark a provisional ISU accepted by JIA, with the record that finishes its
/// registration ([`AcceptIsu`]); from then on the registration is finished, never rolled back.
/// Sent by coordinators before [`WORKER_JIA_ACTIVATE`] (asked JIA themselves); still taken, so
/// workers can be upgraded before their coordinators.
pub const WORKER_ACCEPT: &str = "/internal/isu/accept";
/// Worker: ask JIA to activate a provisional ISU and keep its answer with the registration
/// ([`JiaActivateIsu`], answered [`Activation`]): the worker that takes the device's posts holds
/// what finishes the registration before anyone hears JIA's answer, so a leader that dies
/// as JIA answers leaves nothing to roll back.
pub const WORKER_JIA_ACTIVATE: &str = "/internal/isu/jia-activate";
/// Worker: make a provisional ISU visible.
pub const WORKER_PUBLISH: &str = "/internal/isu/publish";
/// Worker: forget a provisional ISU and everything posted to it.
pub const WORKER_ROLLBACK: &str = "/internal/isu/rollback";
/// Worker: the registrations it holds provisionally, as [`UnpublishedIsu`]s (POST
/// `{"generation"}`): a new leader of the coordinator replicas ends each one.
pub const WORKER_UNPUBLISHED: &str = "/internal/isu/unpublished";
/// Worker: push the latest condition of every published ISU again (a restarted
/// coordinator restored its ISUs from its log, but not their latest conditions).
pub const WORKER_RESEND_LATEST: &str = "/internal/latest/resend";
/// Worker: the latest condition of every published ISU, now (POST `{"generation"}`, the
/// answer a binary batch as [`LATEST_BINARY`]): a coordinator replica that starts pulls it
/// from every worker before it serves.
pub const WORKER_LATEST_ALL: &str = "/internal/latest/all";
/// Worker: the coordinator's placement map (taken when newer than the worker's copy).
pub const WORKER_PLACEMENT: &str = "/internal/placement";
/// Coordinator: the current placement map (GET) and operations on it (cells API).
pub const COORDINATOR_PLACEMENT: &str = "/internal/placement";
/// Coordinator: every cell's share of the map and recent figures ([`cells::CellsSummary`]).
pub const COORDINATOR_CELLS: &str = "/internal/cells";
/// Coordinator replica: its role, term, applied index and leader ([`ReplicaAnswer`]).
pub const COORDINATOR_REPLICA: &str = "/internal/replica";

/// Coordinator replica (the leader; a follower forwards it): add or remove a replica
/// ([`MembershipRequest`]); answers the leader's [`ReplicaAnswer`] once committed.
pub const COORDINATOR_MEMBERS: &str = "/internal/replica/members";
/// Coordinator replica: `PUT`/`GET {COORDINATOR_ICONS}/{sha256 hex}`, an icon the log names
/// by its hash (stored by the leader on a peer before the record commits).
pub const COORDINATOR_ICONS: &str = "/internal/icons";

/// Body of [`COORDINATOR_MEMBERS`]: `{"add": {"id": 4, "url": "http://host:port"}}` or
/// `{"remove": 4}`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum MembershipRequest {
    Add { id: u64, url: String },
    Remove(u64),
}

/// Coordinator replica: the registered ISUs of its generation, as it holds them (`GET`, a
/// JSON list of [`HeldIsu`], in registration order).
pub const COORDINATOR_REPLICA_ISUS: &str = "/internal/replica/isus";

/// A registered ISU: what a replica holds ([`COORDINATOR_REPLICA_ISUS`]), and what the bench
/// got a 201 for (its report's `acknowledged_registrations`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct HeldIsu {
    pub uuid: String,
    pub owner: String,
    /// SHA-256 (hex) of its icon's bytes; `None`: the default icon.
    pub icon_sha256: Option<String>,
}

/// What a coordinator replica says of itself: its raft role, term, how far it has applied
/// and whom it follows.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplicaStatus {
    pub id: u64,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: String,
    pub term: u64,
    /// The leader it knows of, if any.
    pub leader: Option<u64>,
    pub last_log_index: u64,
    pub applied_index: u64,
    /// The voters of its group.
    pub members: Vec<u64>,
}

/// Answer of [`COORDINATOR_REPLICA`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ReplicaAnswer {
    #[serde(flatten)]
    pub status: ReplicaStatus,
    /// Serving (`/healthz` 200): it has applied its group's generation (a leader: and brought
    /// the workers to it).
    pub ready: bool,
    /// Hex hash of the replicated state (generation, users, ISUs with their icons, the map):
    /// replicas that applied the same log show the same.
    pub state_hash: String,
}
/// Coordinator: migrate a slot or a pinned ISU (`{"slot"|"isu", "to"}`).
pub const COORDINATOR_MIGRATE: &str = "/internal/cells/migrate";
/// Coordinator: move every slot and pin of a cell elsewhere (`{"cell"}`).
pub const COORDINATOR_DRAIN: &str = "/internal/cells/drain";
/// Coordinator: even out the slots over every cell.
pub const COORDINATOR_REBALANCE: &str = "/internal/cells/rebalance";
/// Header of a request one worker forwarded to another (the owner): never forwarded again.
pub const FORWARDED_HEADER: &str = "x-isu-forwarded-by";
/// Worker (a migration's source): start forwarding the subject's new batches to the target
/// and copy its history there; answers once the target holds all of it.
pub const WORKER_EXPORT: &str = "/internal/migration/export";
/// Worker (a migration's target): take ISUs and conditions, invisible until activated.
pub const WORKER_IMPORT: &str = "/internal/migration/import";
/// Worker (a migration's target, after the flip): make the imported registered ISUs visible.
pub const WORKER_ACTIVATE: &str = "/internal/migration/activate";
/// Worker: drop the subject's ISUs this worker does not own in the given map (the source
/// after the grace period, or the target of a rolled-back migration).
pub const WORKER_FORGET: &str = "/internal/migration/forget";
/// Coordinator: a worker's batch of latest conditions.
pub const COORDINATOR_LATEST: &str = "/internal/latest";
/// Coordinator: a worker's stream of latest batches, one request for as long as it lasts
/// (see [`LATEST_STREAM`]).
pub const COORDINATOR_LATEST_STREAM: &str = "/internal/latest/stream";
/// Every node: liveness and readiness (`200` once the node can serve).
pub const HEALTH: &str = "/healthz";
/// Every node: CPU profile (`?seconds=N&format=svg|pb`).
pub const PPROF_PROFILE: &str = "/debug/pprof/profile";
/// The last profile taken by [`PPROF_PROFILE`], in either format (`?format=pb|svg`): one
/// sampling period gives both a flamegraph and a protobuf.
pub const PPROF_LAST: &str = "/debug/pprof/last";
/// Every node: Prometheus text metrics.
pub const METRICS: &str = "/metrics";

/// One stored condition in its compact form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireCondition {
    pub timestamp: i64,
    pub flags: Flags,
    pub message: String,
}

/// An ISU as a worker knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardIsu {
    pub id: i64,
    pub uuid: String,
    pub owner: String,
    pub name: String,
    pub character: String,
    pub conditions: Vec<WireCondition>,
}

/// Body of [`WORKER_RESET`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResetShard {
    /// Random per reset; sessions signed in this generation are valid without a user lookup.
    pub generation: u64,
    /// Every user that exists right after the reset.
    pub users: Vec<String>,
    pub isus: Vec<ShardIsu>,
}

/// A [`ShardIsu`] written from borrowed parts, without copying them: the coordinator
/// writes a reset of a million ISUs this way. Its JSON is a [`ShardIsu`]'s.
#[derive(Debug, Serialize)]
pub struct ShardIsuRef<'a> {
    pub id: i64,
    pub uuid: &'a str,
    pub owner: &'a str,
    pub name: &'a str,
    pub character: &'a str,
    pub conditions: ConditionsRef<'a>,
}

/// A [`ShardIsu`]'s conditions: a borrowed run, then maybe one more.
#[derive(Debug)]
pub struct ConditionsRef<'a> {
    pub known: &'a [WireCondition],
    pub then: Option<WireCondition>,
}

impl Serialize for ConditionsRef<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.known.iter().chain(&self.then))
    }
}

/// A [`ResetShard`] written from an iterator of borrowed ISUs (see [`ShardIsuRef`]); the
/// iterator is cloned to write them, so it may be written more than once.
#[derive(Debug, Serialize)]
pub struct ResetShardRef<'a, I: Iterator<Item = ShardIsuRef<'a>> + Clone> {
    pub generation: u64,
    pub users: &'a [String],
    #[serde(serialize_with = "serialize_iter")]
    pub isus: I,
}

fn serialize_iter<'a, I, S>(isus: &I, serializer: S) -> Result<S::Ok, S::Error>
where
    I: Iterator<Item = ShardIsuRef<'a>> + Clone,
    S: serde::Serializer,
{
    serializer.collect_seq(isus.clone())
}

/// Body of [`WORKER_USERS`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserSync {
    pub generation: u64,
    pub users: Vec<String>,
}

/// Body of [`WORKER_PROVISIONAL`]. `409` when the UUID is already on the worker.
/// Every message carrying a `generation` is refused with `412` when it is not the worker's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProvisionalIsu {
    pub generation: u64,
    /// The id the registration will publish; ties later messages to this registration.
    pub id: i64,
    pub uuid: String,
    pub owner: String,
    pub name: String,
    /// The registration request's id (replicas): kept with the provisional ISU, so a new
    /// leader that rolls it back can answer that request, sent again, from its outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

/// One registration a worker holds provisionally (see [`WORKER_UNPUBLISHED`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnpublishedIsu {
    pub uuid: String,
    pub id: i64,
    pub owner: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The coordinator's record, once JIA accepted the registration: it is finished from it,
    /// never rolled back (its device's posts were acknowledged). With `character`, the record
    /// of [`JiaActivateIsu`] (whose character is JIA's, below); without, that of [`AcceptIsu`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<String>,
    /// The character JIA gave when this worker asked it ([`WORKER_JIA_ACTIVATE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub character: Option<String>,
    /// Its device posted to it: JIA activated it, whether or not its acceptance came.
    #[serde(default)]
    pub posted: bool,
}

/// Body of [`WORKER_ACCEPT`]: applies only to the provisional entry of registration `id`.
/// `404` when the worker holds no such entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AcceptIsu {
    pub generation: u64,
    pub uuid: String,
    pub id: i64,
    /// What the coordinator logs to register the ISU (its accepted command, base64): opaque
    /// to the worker, which keeps it and gives it back with [`UnpublishedIsu`].
    pub record: String,
}

/// Body of [`WORKER_JIA_ACTIVATE`]: applies only to the provisional entry of registration `id`
/// (`404` when the worker holds no such entry). A repeat while JIA is asked waits for that
/// answer; one after it is answered from it (JIA is asked again only after a failure).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JiaActivateIsu {
    pub generation: u64,
    pub uuid: String,
    pub id: i64,
    /// What the coordinator logs to register the ISU once JIA accepted it (base64), with the
    /// character left out: opaque to the worker, which keeps it with JIA's character and
    /// gives both back with [`UnpublishedIsu`].
    pub record: String,
    /// JIA's URL (`POST {jia_service_url}/api/activate`).
    pub jia_service_url: String,
    /// The URL JIA's device posts to: the owning cell's device URL.
    pub target_base_url: String,
}

/// The answer to [`WORKER_JIA_ACTIVATE`] (200): JIA's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Activation {
    /// JIA activated the ISU (202) with this character; the worker holds it.
    Activated { character: String },
    /// JIA answered this status instead (the API passes it through).
    Refused { status: u16 },
}

/// Body of [`WORKER_PUBLISH`]: applies only to the provisional entry of registration `id`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PublishIsu {
    pub generation: u64,
    pub uuid: String,
    pub id: i64,
    pub character: String,
}

/// Body of [`WORKER_ROLLBACK`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RollbackIsu {
    pub generation: u64,
    /// Only the entry of this registration is removed (a late rollback of an
    /// earlier attempt must not remove a newer registration of the UUID).
    pub id: i64,
    pub uuid: String,
}

/// Body of [`WORKER_RESEND_LATEST`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResendLatest {
    pub generation: u64,
}

/// Latest condition of one ISU, pushed by its worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatestCondition {
    pub uuid: String,
    pub condition: WireCondition,
}

/// Body of [`COORDINATOR_LATEST`]: the latest condition of each ISU that changed
/// since the previous batch. Refused with 412 when `generation` is not current.
/// Workers send it in the binary form ([`LATEST_BINARY`], [`encode_latest`]); JSON is still
/// taken, and sent to a coordinator that refuses the binary form (an older build).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatestBatch {
    pub generation: u64,
    pub items: Vec<LatestCondition>,
}

/// `Content-Type` of a latest batch in its binary form. Layout, little-endian: the version
/// byte [`LATEST_BINARY_VERSION`], the generation (u64), the item count (u32), then per item
/// the UUID, the timestamp (i64), the flags (u8) and the message; strings are a u32 byte
/// length and UTF-8. Under device load the coordinator decoded a JSON item per device post
/// (three strings allocated for it), and the worker encoded one: the binary form is read in
/// place.
pub const LATEST_BINARY: &str = "application/x-isu-latest";
pub const LATEST_BINARY_VERSION: u8 = 1;

/// One item of a latest batch, borrowed from the batch's body (or from a [`LatestBatch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatestItem<'a> {
    pub uuid: &'a str,
    pub timestamp: i64,
    pub flags: Flags,
    pub message: &'a str,
}

impl LatestItem<'_> {
    /// The item as the JSON form carries it.
    pub fn to_condition(&self) -> LatestCondition {
        LatestCondition {
            uuid: self.uuid.to_owned(),
            condition: WireCondition {
                timestamp: self.timestamp,
                flags: self.flags,
                message: self.message.to_owned(),
            },
        }
    }
}

impl LatestBatch {
    /// Its items, borrowed.
    pub fn borrowed(&self) -> Vec<LatestItem<'_>> {
        self.items
            .iter()
            .map(|item| LatestItem {
                uuid: &item.uuid,
                timestamp: item.condition.timestamp,
                flags: item.condition.flags,
                message: &item.condition.message,
            })
            .collect()
    }
}

/// Where the item count sits: after the version byte and the generation.
const LATEST_COUNT_AT: usize = 1 + 8;

/// Writes a binary latest batch of `items` (what [`decode_latest`] reads).
pub fn encode_latest<'a>(generation: u64, items: impl IntoIterator<Item = LatestItem<'a>>) -> Vec<u8> {
    let items = items.into_iter();
    // About 96 bytes an item: a 36-character UUID and a short message.
    let mut encoder = crate::wal::Encoder {
        bytes: Vec::with_capacity(LATEST_COUNT_AT + 4 + items.size_hint().0 * 96),
    };
    encoder.u8(LATEST_BINARY_VERSION).u64(generation).u32(0);
    let mut count = 0u32;
    for item in items {
        encoder
            .str(item.uuid)
            .i64(item.timestamp)
            .u8(item.flags.0)
            .str(item.message);
        count += 1;
    }
    encoder.bytes[LATEST_COUNT_AT..LATEST_COUNT_AT + 4].copy_from_slice(&count.to_le_bytes());
    encoder.bytes
}

/// Why a binary latest batch was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LatestDecodeError {
    #[error("unknown latest batch version {0}")]
    Version(u8),
    #[error("the latest batch is cut short or malformed")]
    Malformed,
    #[error("condition flags {0} have bits above {all}", all = Flags::ALL)]
    Flags(u8),
}

/// `Content-Type` of a latest stream ([`COORDINATOR_LATEST_STREAM`]): a request body of
/// frames, each a u32 little-endian length and one binary latest batch ([`encode_latest`]).
/// The coordinator answers 200 at once and applies each frame as it arrives; its answer's
/// body, sent while the request's is still coming, is lines of [`StreamAnswer`]: how many
/// frames it has applied so far (an acknowledgment), and at last why the stream ended
/// (when the worker ended it, for another generation, for bad input, or because the
/// coordinator stops). A worker counts a frame as pushed only once it is acknowledged, ends
/// a stream whose acknowledgments stop coming, and starts each stream with the latest
/// condition of every published ISU, so a stream that broke loses nothing the next one does
/// not carry. A request that is refused before it starts (a missing secret, another
/// `Content-Type`) gets a plain 4xx.
///
/// Why a stream: every replica of a group takes every worker's batch each 10 ms. As one
/// request each, the HTTP exchange (parsing, routing, the answer, a wake-up each way) cost
/// more than applying the batch, and was most of an idle replica's CPU. Why
/// acknowledgments: across a network cut that drops packets silently, frames wait in the
/// connection's buffers, and a worker that counted them as pushed when it wrote them held
/// nothing back for the coordinator to be given again.
pub const LATEST_STREAM: &str = "application/x-isu-latest-stream";

/// One line of a latest stream's answer (see [`LATEST_STREAM`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamAnswer {
    /// `applied N`: the coordinator has applied the stream's first `N` frames.
    Applied(u64),
    /// `end STATUS REASON`: the stream ended; `STATUS` says why as an HTTP status would
    /// (200 when the worker ended it, 412 another generation, 400/413/415 bad input, 503 the
    /// coordinator stops). Frames after the acknowledged ones were not applied.
    End { status: u16, reason: String },
}

impl StreamAnswer {
    /// The line, with its newline.
    pub fn line(&self) -> String {
        match self {
            StreamAnswer::Applied(frames) => format!("applied {frames}\n"),
            StreamAnswer::End { status, reason } => format!("end {status} {reason}\n"),
        }
    }
}

/// Cuts a latest stream's answer, as it arrives in chunks of any size, into its lines.
#[derive(Debug, Default)]
pub struct StreamAnswers {
    buffer: Vec<u8>,
}

/// An answer line that is not one of [`StreamAnswer`]'s, or one over 1 KiB.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a latest stream answer: {0:?}")]
pub struct BadAnswer(pub String);

impl StreamAnswers {
    /// Takes the next chunk and returns the lines it completes.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<StreamAnswer>, BadAnswer> {
        self.buffer.extend_from_slice(chunk);
        let mut answers = Vec::new();
        while let Some(end) = self.buffer.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]).into_owned();
            answers.push(parse_answer(&line).ok_or(BadAnswer(line))?);
        }
        if self.buffer.len() > 1024 {
            return Err(BadAnswer(String::from_utf8_lossy(&self.buffer[..64]).into_owned()));
        }
        Ok(answers)
    }
}

fn parse_answer(line: &str) -> Option<StreamAnswer> {
    if let Some(frames) = line.strip_prefix("applied ") {
        return frames.parse().ok().map(StreamAnswer::Applied);
    }
    let rest = line.strip_prefix("end ")?;
    let (status, reason) = rest.split_once(' ').unwrap_or((rest, ""));
    let status: u16 = status.parse().ok()?;
    (100..600).contains(&status).then(|| StreamAnswer::End {
        status,
        reason: reason.to_owned(),
    })
}

/// A latest stream's request body ([`LATEST_STREAM`]): the frames ([`latest_frame`]) queued
/// for it, until the queue's sender is dropped. A worker's pusher and the bench's cell
/// simulator send their streams with it (`reqwest::Body::wrap`).
pub struct FrameBody(pub tokio::sync::mpsc::Receiver<bytes::Bytes>);

impl http_body::Body for FrameBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        self.0
            .poll_recv(context)
            .map(|frame| frame.map(|bytes| Ok(http_body::Frame::data(bytes))))
    }
}

/// One frame of a latest stream: `batch` (an [`encode_latest`] output) after its length.
pub fn latest_frame(batch: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(4 + batch.len());
    frame.extend_from_slice(&(batch.len() as u32).to_le_bytes());
    frame.extend_from_slice(batch);
    frame
}

/// Cuts a latest stream's bytes, as they arrive in chunks of any size, into its frames.
#[derive(Debug)]
pub struct LatestFrames {
    buffer: bytes::BytesMut,
    max_frame: usize,
}

/// A frame longer than the reader takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a latest frame of {length} bytes (at most {max})")]
pub struct FrameTooLong {
    pub length: usize,
    pub max: usize,
}

impl LatestFrames {
    /// A reader refusing frames longer than `max_frame` bytes.
    pub fn new(max_frame: usize) -> LatestFrames {
        LatestFrames {
            buffer: bytes::BytesMut::new(),
            max_frame,
        }
    }

    /// Takes the next chunk of the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// The next whole frame (its batch), if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<bytes::Bytes>, FrameTooLong> {
        let Some(length) = self.buffer.get(..4) else {
            return Ok(None);
        };
        let length = u32::from_le_bytes(length.try_into().expect("4 bytes")) as usize;
        if length > self.max_frame {
            return Err(FrameTooLong {
                length,
                max: self.max_frame,
            });
        }
        if self.buffer.len() < 4 + length {
            return Ok(None);
        }
        let mut frame = self.buffer.split_to(4 + length);
        Ok(Some(frame.split_off(4).freeze()))
    }

    /// Whether the stream so far ends between frames.
    pub fn is_between_frames(&self) -> bool {
        self.buffer.is_empty()
    }
}

/// Reads a binary latest batch: its generation and items, borrowed from `bytes`. Anything
/// but exactly what [`encode_latest`] writes is refused.
pub fn decode_latest(bytes: &[u8]) -> Result<(u64, Vec<LatestItem<'_>>), LatestDecodeError> {
    use LatestDecodeError::Malformed;
    let mut decoder = crate::wal::Decoder::new(bytes);
    let version = decoder.u8().ok_or(Malformed)?;
    if version != LATEST_BINARY_VERSION {
        return Err(LatestDecodeError::Version(version));
    }
    let generation = decoder.u64().ok_or(Malformed)?;
    let count = decoder.u32().ok_or(Malformed)? as usize;
    // An item takes at least 4 + 8 + 1 + 4 bytes: a count beyond that is not believed.
    let mut items = Vec::with_capacity(count.min(bytes.len() / 17));
    for _ in 0..count {
        let uuid = decoder.str().ok_or(Malformed)?;
        let timestamp = decoder.i64().ok_or(Malformed)?;
        let flags = decoder.u8().ok_or(Malformed)?;
        if flags & !Flags::ALL != 0 {
            return Err(LatestDecodeError::Flags(flags));
        }
        let message = decoder.str().ok_or(Malformed)?;
        items.push(LatestItem {
            uuid,
            timestamp,
            flags: Flags(flags),
            message,
        });
    }
    if !decoder.is_empty() {
        return Err(Malformed);
    }
    Ok((generation, items))
}

/// Answer of [`HEALTH`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Health {
    pub role: String,
    pub ready: bool,
    pub generation: u64,
    /// Version of the worker's copy of the placement map (0: none); the coordinator's
    /// health check sends the current map to a worker whose copy is older.
    #[serde(default)]
    pub map_version: u64,
    /// A coordinator replica that leads its group and takes leader-only writes (nginx keeps
    /// clients without a session off it, see `nginx/router.lua`); absent elsewhere.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub leader: bool,
    /// A worker: the newest leader term it has seen (0: none, as after a restart); the
    /// leader's watch raises it again at once when it is older than its own.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fence_term: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// Whether a request's headers carry the cluster secret, either as
/// [`SECRET_HEADER`] or as `Authorization: Bearer <secret>`. Constant-time compare.
pub fn carries_secret(secret: &str, secret_header: Option<&[u8]>, authorization: Option<&[u8]>) -> bool {
    let bearer = authorization.and_then(|value| value.strip_prefix(b"Bearer "));
    [secret_header, bearer]
        .into_iter()
        .flatten()
        .any(|given| constant_time_eq(given, secret.as_bytes()))
}

/// Shortest cluster secret a node accepts.
pub const MIN_SECRET_LEN: usize = 16;
/// The built-in default of earlier builds: public, so refused like a short one.
const RETIRED_DEFAULT_SECRET: &str = "local-cluster-secret";

/// Refuses a secret shorter than [`MIN_SECRET_LEN`] bytes (an empty one would match an empty
/// header). There is no default: the secret guards the internal routes and also keys the
/// session cookies ([`crate::session::SessionKey::from_secret`]), which the public reaches
/// through nginx even when every node listens on loopback, so a secret anybody knows (a
/// built-in default, as there once was) or can guess would let anybody sign in as anyone.
pub fn check_cluster_secret(secret: &str) -> Result<(), String> {
    if secret.len() < MIN_SECRET_LEN || secret == RETIRED_DEFAULT_SECRET {
        return Err(format!(
            "the cluster secret must be at least {MIN_SECRET_LEN} bytes and not the old default \
             (set ISU_CLUSTER_SECRET); \
             it guards the internal routes and signs the session cookies"
        ));
    }
    Ok(())
}

fn constant_time_eq(left: &[u8], right: &[u8]) -> bool {
    left.len() == right.len() && left.iter().zip(right).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_reset_written_from_borrowed_parts_reads_back_as_the_owned_one() {
        let condition = |timestamp: i64, message: &str| WireCondition {
            timestamp,
            flags: crate::domain::Flags(3),
            message: message.to_owned(),
        };
        let known = vec![condition(10, "a \"quoted\" one"), condition(20, "椅子")];
        let users = vec!["alice".to_owned(), "bob".to_owned()];
        let isus = [(1, "u-1", Some(condition(30, "latest"))), (2, "u-2", None)];
        let borrowed = ResetShardRef {
            generation: 7,
            users: &users,
            isus: isus.iter().map(|(id, uuid, then)| ShardIsuRef {
                id: *id,
                uuid,
                owner: "alice",
                name: "isu",
                character: "いじっぱり",
                conditions: ConditionsRef {
                    known: &known,
                    then: then.clone(),
                },
            }),
        };
        let written = serde_json::to_vec(&borrowed).unwrap();
        assert_eq!(written, serde_json::to_vec(&borrowed).unwrap(), "written twice alike");
        let read: ResetShard = serde_json::from_slice(&written).unwrap();
        let owned = ResetShard {
            generation: 7,
            users,
            isus: isus
                .iter()
                .map(|(id, uuid, then)| ShardIsu {
                    id: *id,
                    uuid: (*uuid).to_owned(),
                    owner: "alice".to_owned(),
                    name: "isu".to_owned(),
                    character: "いじっぱり".to_owned(),
                    conditions: known.iter().cloned().chain(then.clone()).collect(),
                })
                .collect(),
        };
        assert_eq!(written, serde_json::to_vec(&owned).unwrap());
        assert_eq!(read.isus[0].conditions.len(), 3);
        assert_eq!(read.isus[1].conditions, known);
    }

    use super::*;

    #[test]
    fn latest_frames_are_read_back_whatever_the_chunks_and_a_long_one_is_refused() {
        let item = |timestamp| LatestItem {
            uuid: "0694e4d7-dfce-4aec-b7ca-887ac42cfb8f",
            timestamp,
            flags: Flags(Flags::SITTING),
            message: "ok",
        };
        let batches = [
            encode_latest(7, [item(1)]),
            encode_latest(7, []),
            encode_latest(8, [item(2), item(3)]),
        ];
        let stream: Vec<u8> = batches.iter().flat_map(|batch| latest_frame(batch)).collect();
        for chunk in [1, 3, 5, 64, stream.len()] {
            let mut frames = LatestFrames::new(1 << 10);
            let mut read = Vec::new();
            for piece in stream.chunks(chunk) {
                frames.push(piece);
                while let Some(frame) = frames.next_frame().unwrap() {
                    read.push(frame.to_vec());
                }
            }
            assert_eq!(read, batches, "chunks of {chunk}");
            assert!(frames.is_between_frames());
        }
        // A stream cut inside a frame is not between frames; a length over the bound is
        // refused before its bytes arrive.
        let mut frames = LatestFrames::new(1 << 10);
        frames.push(&stream[..stream.len() - 1]);
        while frames.next_frame().unwrap().is_some() {}
        assert!(!frames.is_between_frames());
        let mut frames = LatestFrames::new(16);
        frames.push(&latest_frame(&batches[0])[..6]);
        assert_eq!(
            frames.next_frame(),
            Err(FrameTooLong {
                length: batches[0].len(),
                max: 16
            })
        );
    }

    #[test]
    fn stream_answers_are_read_back_whatever_the_chunks_and_anything_else_is_refused() {
        let answers = [
            StreamAnswer::Applied(1),
            StreamAnswer::Applied(17),
            StreamAnswer::End {
                status: 412,
                reason: "a latest batch of another generation".into(),
            },
        ];
        let text: String = answers.iter().map(StreamAnswer::line).collect();
        for chunk in [1, 2, 7, text.len()] {
            let mut reader = StreamAnswers::default();
            let mut read = Vec::new();
            for piece in text.as_bytes().chunks(chunk) {
                read.extend(reader.push(piece).unwrap());
            }
            assert_eq!(read, answers, "chunks of {chunk}");
        }
        for bad in ["applied\n", "applied -1\n", "end\n", "end 99 x\n", "ok\n"] {
            assert!(StreamAnswers::default().push(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(StreamAnswers::default().push(&[b'a'; 2000]).is_err());
    }

    #[test]
    fn secret_in_either_header() {
        assert!(carries_secret("s3", Some(b"s3"), None));
        assert!(carries_secret("s3", None, Some(b"Bearer s3")));
        assert!(!carries_secret("s3", Some(b"s4"), Some(b"Bearer s")));
        assert!(!carries_secret("s3", None, Some(b"s3")));
        assert!(!carries_secret("s3", None, None));
    }

    #[test]
    fn secrets_shorter_than_16_bytes_are_refused() {
        let long = "0123456789abcdef";
        assert_eq!(check_cluster_secret(long), Ok(()));
        assert!(check_cluster_secret(&long[1..]).is_err());
        assert!(check_cluster_secret("").is_err());
        assert!(check_cluster_secret(RETIRED_DEFAULT_SECRET).is_err());
    }
}

/// Body of [`WORKER_EXPORT`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExportSubject {
    pub generation: u64,
    pub migration: u64,
    pub subject: crate::migration::Subject,
    /// Internal base URL of the target cell.
    pub target_url: String,
}

/// Answer of [`WORKER_EXPORT`]: what the target now holds of the subject.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportReport {
    pub isus: usize,
    pub conditions: usize,
    pub chunks: usize,
}

/// One ISU (or part of its history) in a [`WORKER_IMPORT`] body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportIsu {
    pub id: i64,
    pub uuid: String,
    pub owner: String,
    pub name: String,
    pub conditions: Vec<WireCondition>,
}

/// Body of [`WORKER_IMPORT`]: a chunk of history, or a batch the source accepted meanwhile.
/// Conditions the target holds already are skipped (same ISU, timestamp and level).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportChunk {
    pub generation: u64,
    pub migration: u64,
    pub isus: Vec<ImportIsu>,
}

/// An ISU by UUID and registration id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsuRef {
    pub uuid: String,
    pub id: i64,
}

/// Body of [`WORKER_ACTIVATE`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ActivateIsus {
    pub generation: u64,
    pub isus: Vec<IsuRef>,
}

/// Body of [`WORKER_FORGET`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForgetSubject {
    pub generation: u64,
    pub migration: u64,
    pub subject: crate::migration::Subject,
    /// The map that decides what the worker keeps (taken first, if newer than its copy).
    pub map: crate::placement_map::PlacementMap,
    /// To the migration's source: the target's internal URL. A source that holds no export
    /// of this migration (it restarted, or was replaced, since it exported) sends the
    /// target the subject's history again before dropping it: what it took meanwhile was
    /// not forwarded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_url: Option<String>,
}
