//! The append-only log (write-ahead log) both node kinds use for durability.
//!
//! A log file is a sequence of records, each `u32 length (LE) | u32 crc32 of
//! the payload (LE) | payload`. [`read_log`] stops at the first record that is
//! torn (shorter than its header says), corrupt (checksum mismatch) or empty
//! (a zero-filled tail left by a crash looks like length 0), reports it with
//! tracing, and truncates the file there: what follows is never replayed.
//!
//! [`Wal`] is the writer: an actor owning the file behind a bounded channel.
//! Callers frame and checksum their own payload (so that work is spread over
//! the request threads), send it, and wait until it is written. The actor
//! takes everything queued at once and writes it with one `write` (group
//! commit); under [`FsyncPolicy::Always`] it also `fdatasync`s before
//! acknowledging the group, under [`FsyncPolicy::Interval`] it acknowledges
//! once the OS has the bytes and syncs at most every interval, under
//! [`FsyncPolicy::Never`] it leaves flushing to the OS.
//!
//! Snapshots keep replay bounded: [`Wal::snapshot`] (and the actor itself, once
//! the file grows past its threshold) asks the owner's snapshot function for
//! one record holding the whole state, writes it to a fresh file, syncs it and
//! renames it over the log. The function runs inside the actor, after every
//! record queued before it was written, so each change is in the snapshot or
//! after it in the new file (a change may be in both: replay must be idempotent).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

/// Bytes before each payload: length and checksum.
pub const HEADER_BYTES: usize = 8;
/// Larger appended records are refused (a device batch is at most 2 MiB).
pub const MAX_RECORD_BYTES: usize = 1 << 30;
/// The longest record a frame holds (its length is 32 bits), and so the longest read back.
/// A snapshot may be longer than [`MAX_RECORD_BYTES`] (a large shard, the coordinator's
/// icons); one longer than this is refused and the log kept as it was. (The reader once
/// refused records over `MAX_RECORD_BYTES` as corrupt and truncated the log there, so a
/// snapshot between the two limits emptied the log at the next start.)
pub const MAX_FRAME_BYTES: usize = u32::MAX as usize;
/// Records queued for the writer before senders wait.
const QUEUE_DEPTH: usize = 4096;
/// At most this many bytes per group write.
const GROUP_BYTES: usize = 8 << 20;

/// When the log is flushed to stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// `fdatasync` before acknowledging each group: an acknowledged record survives power loss.
    Always,
    /// Acknowledge once written to the OS; `fdatasync` at most this often.
    Interval(Duration),
    /// Acknowledge once written to the OS; never sync (survives a process crash, not power loss).
    Never,
}

impl FromStr for FsyncPolicy {
    type Err = String;

    /// `always`, `never`, or `<N>ms` (for example `10ms`): N a whole number from 1, in plain
    /// digits (no sign, no leading zero, no spaces). The one syntax: the nodes' `--fsync`,
    /// isuctl's and a deployment inventory's `fsync` are all read here.
    fn from_str(text: &str) -> Result<FsyncPolicy, String> {
        match text {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            other => other
                .strip_suffix("ms")
                .filter(|millis| millis.bytes().all(|byte| byte.is_ascii_digit()) && !millis.starts_with('0'))
                .and_then(|millis| millis.parse::<u64>().ok())
                .map(|millis| FsyncPolicy::Interval(Duration::from_millis(millis)))
                .ok_or_else(|| format!("unknown fsync policy {text:?}: expected always, never or <N>ms")),
        }
    }
}

impl std::fmt::Display for FsyncPolicy {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FsyncPolicy::Always => formatter.write_str("always"),
            FsyncPolicy::Never => formatter.write_str("never"),
            FsyncPolicy::Interval(interval) => write!(formatter, "{}ms", interval.as_millis()),
        }
    }
}

/// Frames `payload` (at most [`MAX_FRAME_BYTES`]: callers check) as one record (header + payload).
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("callers keep a record within MAX_FRAME_BYTES");
    let mut record = Vec::with_capacity(HEADER_BYTES + payload.len());
    record.extend_from_slice(&length.to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    record.extend_from_slice(payload);
    record
}

/// What [`read_log`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadReport {
    /// Valid records handed to the callback.
    pub records: u64,
    /// Bytes of those records (the file's length after truncation).
    pub valid_bytes: u64,
    /// Bytes cut off the end because they were torn or corrupt.
    pub truncated_bytes: u64,
}

/// Calls `apply` with each valid record's payload in order, stops at the first
/// torn or corrupt one and truncates the file there. A missing file is an empty log.
pub fn read_log(path: &Path, apply: impl FnMut(&[u8])) -> io::Result<ReadReport> {
    read_log_from(path, 0, Tail::Truncate, apply)
}

/// What [`read_log_from`] does with a torn or corrupt tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Cut it off (the log's writer is gone: the tail can never be completed).
    Truncate,
    /// Leave it: another process may be writing it (a read ahead of a hand-over).
    Keep,
    /// Cut off only a torn last group write (a record shorter than its header says, within
    /// one group's length of the end, or a zero-filled tail: a write cut short by a crash,
    /// so never synced nor acknowledged); anything else (a complete record that fails its
    /// checksum, a length pointing far past the end, a zero length before other bytes) is
    /// an error, because the records after it may have been acknowledged. For logs that must never lose an acknowledged record silently
    /// (a raft log: a replica that forgets what it acknowledged breaks the quorum's promise).
    Strict,
}

/// [`read_log`] from byte `from` (the end of a valid record, or 0): `valid_bytes` in the
/// report is then the offset where the valid records end, counted from the file's start.
/// A file shorter than `from` is an error (it is not the log that was read up to there).
pub fn read_log_from(path: &Path, from: u64, tail: Tail, mut apply: impl FnMut(&[u8])) -> io::Result<ReadReport> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut file) => {
            if file.metadata()?.len() < from {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} is shorter than the {from} bytes already read", path.display()),
                ));
            }
            file.seek(io::SeekFrom::Start(from))?;
            file.read_to_end(&mut bytes)?;
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound && from == 0 => return Ok(ReadReport::default()),
        Err(error) => return Err(error),
    }
    let mut report = ReadReport::default();
    let mut offset = 0usize;
    let problem = loop {
        let rest = &bytes[offset..];
        if rest.is_empty() {
            break None;
        }
        if rest.len() < HEADER_BYTES {
            break Some("torn header");
        }
        let length = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        let checksum = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
        // Any other length is one a frame can hold: torn or corrupt shows below.
        if length == 0 {
            break Some("bad length");
        }
        let Some(payload) = rest.get(HEADER_BYTES..HEADER_BYTES + length) else {
            break Some("torn record");
        };
        if crc32fast::hash(payload) != checksum {
            break Some("checksum mismatch");
        }
        apply(payload);
        report.records += 1;
        offset += HEADER_BYTES + length;
    };
    report.valid_bytes = from + offset as u64;
    // Strict: a torn last group write is at most one group long, and a crash may leave its
    // space zero-filled; anything else is damage to records that may have been acknowledged.
    let rest = &bytes[offset..];
    let torn_tail = match problem {
        Some("torn header") => true,
        Some("torn record") => rest.len() <= GROUP_BYTES + HEADER_BYTES,
        Some("bad length") => rest.iter().all(|byte| *byte == 0),
        _ => false,
    };
    let problem = match (problem, tail) {
        (Some(problem), Tail::Strict) if !torn_tail => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is damaged at byte {} ({problem}) with {} bytes after it; refusing to \
                     start from it",
                    path.display(),
                    report.valid_bytes,
                    bytes.len() - offset
                ),
            ));
        }
        (problem, _) => problem,
    };
    if let (Some(problem), Tail::Truncate | Tail::Strict) = (problem, tail) {
        report.truncated_bytes = (bytes.len() - offset) as u64;
        tracing::warn!(
            path = %path.display(),
            problem,
            offset = report.valid_bytes,
            truncated_bytes = report.truncated_bytes,
            records_kept = report.records,
            "log tail torn or corrupt; truncating it"
        );
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(report.valid_bytes)?;
        file.sync_all()?;
    }
    Ok(report)
}

/// Builds one record holding the owner's whole state (see the module doc).
pub type SnapshotFn = Arc<dyn Fn() -> Vec<u8> + Send + Sync>;

/// How a [`Wal`] writes.
#[derive(Clone)]
pub struct WalOptions {
    pub policy: FsyncPolicy,
    /// Snapshot once the file is larger than this (and than twice the last snapshot).
    pub compact_after_bytes: u64,
    pub snapshot: SnapshotFn,
}

/// Why an append was not acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("writing the log failed: {0}")]
    Io(String),
    #[error("the log writer stopped")]
    Stopped,
    #[error("record of {0} bytes is too large")]
    TooLarge(usize),
}

enum Command {
    Append {
        record: Vec<u8>,
        done: oneshot::Sender<Result<(), String>>,
    },
    Snapshot {
        done: oneshot::Sender<Result<(), String>>,
    },
    /// Ends the writer once everything queued before it is written (see [`Wal::close`]).
    Close {
        done: oneshot::Sender<()>,
    },
}

/// Cheap-clone handle to the log writer.
#[derive(Clone)]
pub struct Wal {
    sender: mpsc::Sender<Command>,
}

impl Wal {
    /// Opens `path` for appending (creating it) and starts the writer on the current runtime.
    pub fn open(path: &Path, options: WalOptions) -> io::Result<Wal> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let size = file.metadata()?.len();
        // A log opened past the threshold is compacted after its first write.
        let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
        let writer = Writer {
            path: path.to_owned(),
            file: Arc::new(file),
            size,
            compact_at: options.compact_after_bytes,
            options,
            dirty: false,
            last_sync: Instant::now(),
        };
        tokio::spawn(writer.run(receiver));
        Ok(Wal { sender })
    }

    /// Appends one record; returns once it is written (and synced, under `always`).
    pub async fn append(&self, payload: &[u8]) -> Result<(), WalError> {
        if payload.is_empty() || payload.len() > MAX_RECORD_BYTES {
            return Err(WalError::TooLarge(payload.len()));
        }
        let record = frame(payload);
        self.call(|done| Command::Append { record, done })
            .await?
            .map_err(WalError::Io)
    }

    /// Ends the writer: every record queued before this call is written, a compaction it
    /// started is finished (its rename done) and the file synced; later appends get
    /// [`WalError::Stopped`]. A process handing its log over to another (a replacement in
    /// place) calls it before it lets the other read and append: a compaction renaming a
    /// snapshot over the log afterwards would orphan the other's appends.
    pub async fn close(&self) -> Result<(), WalError> {
        self.call(|done| Command::Close { done }).await
    }

    /// Replaces the log with a snapshot of the state as it is once every record
    /// queued before this call is written (used after a reset: a fresh log).
    pub async fn snapshot(&self) -> Result<(), WalError> {
        self.call(|done| Command::Snapshot { done })
            .await?
            .map_err(WalError::Io)
    }

    /// Sends the writer the command `command` builds around its answer's sender, and waits
    /// for the answer; a writer gone is [`WalError::Stopped`].
    async fn call<T>(&self, command: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, WalError> {
        let (done, answer) = oneshot::channel();
        self.sender.send(command(done)).await.map_err(|_| WalError::Stopped)?;
        answer.await.map_err(|_| WalError::Stopped)
    }
}

struct Writer {
    path: PathBuf,
    file: Arc<File>,
    size: u64,
    compact_at: u64,
    options: WalOptions,
    /// Written since the last sync.
    dirty: bool,
    last_sync: Instant,
}

impl Writer {
    async fn run(mut self, mut receiver: mpsc::Receiver<Command>) {
        let tick = match self.options.policy {
            FsyncPolicy::Interval(interval) => interval,
            _ => Duration::from_secs(3600),
        };
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let closed = loop {
            tokio::select! {
                command = receiver.recv() => {
                    let Some(command) = command else { break None };
                    if let Some(done) = self.handle(command, &mut receiver).await {
                        break Some(done);
                    }
                }
                _ = ticker.tick(), if self.dirty => {
                    self.sync().await;
                }
            }
        };
        if self.dirty {
            self.sync().await;
        }
        if let Some(done) = closed {
            let _ = done.send(());
        }
    }

    /// Writes `first` and whatever else is queued as one group; a snapshot or close request
    /// ends the group. Returns a close request's answer, to send once the writer is done.
    async fn handle(&mut self, first: Command, receiver: &mut mpsc::Receiver<Command>) -> Option<oneshot::Sender<()>> {
        let mut buffer = Vec::new();
        let mut waiting = Vec::new();
        let mut snapshot = None;
        let mut close = None;
        let mut next = Some(first);
        while let Some(command) = next.take() {
            match command {
                Command::Append { record, done } => {
                    buffer.extend_from_slice(&record);
                    waiting.push(done);
                }
                Command::Snapshot { done } => {
                    snapshot = Some(done);
                    break;
                }
                Command::Close { done } => {
                    close = Some(done);
                    break;
                }
            }
            if buffer.len() < GROUP_BYTES {
                next = receiver.try_recv().ok();
            }
        }
        if !buffer.is_empty() {
            let sync = self.options.policy == FsyncPolicy::Always;
            let file = self.file.clone();
            let length = buffer.len() as u64;
            let written = tokio::task::spawn_blocking(move || -> io::Result<()> {
                (&*file).write_all(&buffer)?;
                if sync {
                    file.sync_data()?;
                }
                Ok(())
            })
            .await
            .map_err(|error| error.to_string())
            .and_then(|result| result.map_err(|error| error.to_string()));
            if let Err(error) = &written {
                tracing::error!(%error, path = %self.path.display(), "log write failed");
            }
            self.size += length;
            self.dirty = !sync;
            if sync {
                self.last_sync = Instant::now();
            }
            for done in waiting {
                let _ = done.send(written.clone());
            }
        }
        if let Some(done) = snapshot {
            let result = self.write_snapshot().await;
            let _ = done.send(result);
        } else if self.size > self.compact_at {
            if let Err(error) = self.write_snapshot().await {
                tracing::error!(%error, "log compaction failed");
            }
        }
        close
    }

    async fn sync(&mut self) {
        let file = self.file.clone();
        match tokio::task::spawn_blocking(move || file.sync_data()).await {
            Ok(Ok(())) => {
                self.dirty = false;
                self.last_sync = Instant::now();
            }
            Ok(Err(error)) => tracing::error!(%error, "log sync failed"),
            Err(error) => tracing::error!(%error, "log sync task failed"),
        }
    }

    /// Writes a snapshot to `<log>.next`, syncs it, renames it over the log and syncs the directory.
    async fn write_snapshot(&mut self) -> Result<(), String> {
        let started = Instant::now();
        let path = self.path.clone();
        let snapshot = self.options.snapshot.clone();
        let (file, size) = tokio::task::spawn_blocking(move || -> io::Result<(File, u64)> {
            let payload = snapshot();
            if payload.len() > MAX_FRAME_BYTES {
                return Err(io::Error::other(format!(
                    "the snapshot is {} bytes, more than a record holds ({MAX_FRAME_BYTES}); the log is kept as it was",
                    payload.len()
                )));
            }
            let next = path.with_extension("next");
            let mut file = File::create(&next)?;
            let record = frame(&payload);
            file.write_all(&record)?;
            file.sync_all()?;
            std::fs::rename(&next, &path)?;
            if let Some(directory) = path.parent() {
                File::open(directory)?.sync_all()?;
            }
            let file = OpenOptions::new().append(true).open(&path)?;
            Ok((file, record.len() as u64))
        })
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| error.to_string())?;
        self.file = Arc::new(file);
        self.size = size;
        self.dirty = false;
        self.compact_at = self.options.compact_after_bytes.max(size.saturating_mul(2));
        tracing::info!(
            path = %self.path.display(),
            bytes = size,
            millis = started.elapsed().as_millis() as u64,
            "log snapshot written"
        );
        Ok(())
    }
}

/// Little-endian encoder for record payloads.
#[derive(Debug, Default)]
pub struct Encoder {
    pub bytes: Vec<u8>,
}

impl Encoder {
    pub fn new(tag: u8) -> Encoder {
        Encoder { bytes: vec![tag] }
    }
    pub fn u8(&mut self, value: u8) -> &mut Self {
        self.bytes.push(value);
        self
    }
    pub fn u32(&mut self, value: u32) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }
    pub fn u64(&mut self, value: u64) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }
    pub fn i64(&mut self, value: i64) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }
    /// Length (u32) then the bytes.
    pub fn bytes(&mut self, value: &[u8]) -> &mut Self {
        self.u32(value.len() as u32);
        self.bytes.extend_from_slice(value);
        self
    }
    pub fn str(&mut self, value: &str) -> &mut Self {
        self.bytes(value.as_bytes())
    }
}

/// Reads what [`Encoder`] wrote; every getter is `None` past the end.
#[derive(Debug)]
pub struct Decoder<'a> {
    rest: &'a [u8],
}

impl<'a> Decoder<'a> {
    pub fn new(payload: &'a [u8]) -> Decoder<'a> {
        Decoder { rest: payload }
    }
    fn take(&mut self, count: usize) -> Option<&'a [u8]> {
        if self.rest.len() < count {
            return None;
        }
        let (head, tail) = self.rest.split_at(count);
        self.rest = tail;
        Some(head)
    }
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|bytes| bytes[0])
    }
    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
    }
    pub fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|bytes| u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }
    pub fn i64(&mut self) -> Option<i64> {
        self.take(8)
            .map(|bytes| i64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let length = self.u32()? as usize;
        self.take(length)
    }
    pub fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let directory = std::env::temp_dir().join(format!("wal-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        directory.join("test.wal")
    }

    fn records(path: &Path) -> (Vec<Vec<u8>>, ReadReport) {
        let mut seen = Vec::new();
        let report = read_log(path, |payload| seen.push(payload.to_vec())).unwrap();
        (seen, report)
    }

    fn options(policy: FsyncPolicy, snapshot: &'static [u8]) -> WalOptions {
        WalOptions {
            policy,
            compact_after_bytes: u64::MAX,
            snapshot: Arc::new(move || snapshot.to_vec()),
        }
    }

    #[test]
    fn policies_parse_and_print() {
        assert_eq!("always".parse(), Ok(FsyncPolicy::Always));
        assert_eq!("never".parse(), Ok(FsyncPolicy::Never));
        assert_eq!("25ms".parse(), Ok(FsyncPolicy::Interval(Duration::from_millis(25))));
        assert!("0ms".parse::<FsyncPolicy>().is_err());
        assert!("sometimes".parse::<FsyncPolicy>().is_err());
        assert_eq!(FsyncPolicy::Interval(Duration::from_millis(25)).to_string(), "25ms");
    }

    /// The agreed syntax, as every reader of a policy (the nodes, isuctl, an inventory) takes
    /// it: what it accepts prints back the same.
    #[test]
    fn only_always_never_and_plain_positive_milliseconds_are_policies() {
        for good in ["always", "never", "1ms", "250ms", "10ms"] {
            let policy: FsyncPolicy = good.parse().unwrap_or_else(|error| panic!("{good}: {error}"));
            assert_eq!(policy.to_string(), good);
        }
        for bad in [
            "", "0ms", "ms", "10", "10s", "05ms", "+5ms", "-5ms", " 5ms", "5 ms", "always ", "Always",
        ] {
            let error = bad.parse::<FsyncPolicy>().unwrap_err();
            assert!(error.contains("expected always, never or <N>ms"), "{bad}: {error}");
        }
    }

    #[tokio::test]
    async fn appended_records_read_back_in_order_under_every_policy() {
        for policy in [
            FsyncPolicy::Always,
            FsyncPolicy::Never,
            FsyncPolicy::Interval(Duration::from_millis(5)),
        ] {
            let path = scratch(&format!("order-{policy}"));
            let wal = Wal::open(&path, options(policy, b"snap")).unwrap();
            let appends: Vec<_> = (0..100u32)
                .map(|index| {
                    let wal = wal.clone();
                    async move { wal.append(&index.to_le_bytes()).await }
                })
                .collect();
            for append in appends {
                append.await.unwrap();
            }
            let (seen, report) = records(&path);
            assert_eq!(report.records, 100);
            assert_eq!(report.truncated_bytes, 0);
            assert_eq!(seen[42], 42u32.to_le_bytes());
        }
    }

    /// A record longer than an append may be (a large snapshot) is read back, not taken for
    /// corruption and truncated away with everything after it. The file is sparse: the
    /// payload is zeros, checksummed in pieces.
    #[test]
    fn a_record_longer_than_an_append_may_be_is_read_back_whole() {
        let path = scratch("long");
        let length = MAX_RECORD_BYTES + 1;
        let mut checksum = crc32fast::Hasher::new();
        let zeros = vec![0u8; 1 << 20];
        let mut left = length;
        while left > 0 {
            let piece = left.min(zeros.len());
            checksum.update(&zeros[..piece]);
            left -= piece;
        }
        let mut file = File::create(&path).unwrap();
        file.write_all(&(length as u32).to_le_bytes()).unwrap();
        file.write_all(&checksum.finalize().to_le_bytes()).unwrap();
        file.set_len((HEADER_BYTES + length) as u64).unwrap();
        file.seek(io::SeekFrom::End(0)).unwrap();
        file.write_all(&frame(b"after it")).unwrap();
        drop(file);
        let mut lengths = Vec::new();
        let report = read_log(&path, |payload| lengths.push(payload.len())).unwrap();
        assert_eq!(lengths, vec![length, 8]);
        assert_eq!(report.truncated_bytes, 0);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            (2 * HEADER_BYTES + length + 8) as u64,
            "nothing was cut off"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_torn_or_corrupt_tail_is_truncated_and_never_replayed() {
        let path = scratch("torn");
        let mut bytes = frame(b"first");
        bytes.extend(frame(b"second"));
        let good = bytes.len();
        bytes.extend(&frame(b"third-torn")[..9]);
        std::fs::write(&path, &bytes).unwrap();
        let (seen, report) = records(&path);
        assert_eq!(seen, vec![b"first".to_vec(), b"second".to_vec()]);
        assert_eq!(report.truncated_bytes, 9);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good as u64);

        let mut corrupt = frame(b"first");
        let mut flipped = frame(b"second");
        *flipped.last_mut().unwrap() ^= 1;
        corrupt.extend(flipped);
        corrupt.extend(frame(b"after the corruption"));
        std::fs::write(&path, &corrupt).unwrap();
        let (seen, _) = records(&path);
        assert_eq!(
            seen,
            vec![b"first".to_vec()],
            "nothing after a corrupt record is replayed"
        );

        let mut zeros = frame(b"first");
        zeros.extend([0u8; 64]);
        std::fs::write(&path, &zeros).unwrap();
        let (seen, report) = records(&path);
        assert_eq!(
            (seen.len(), report.truncated_bytes),
            (1, 64),
            "a zero-filled tail is not a record"
        );
    }

    #[test]
    fn a_strict_read_cuts_a_torn_last_record_and_refuses_a_corrupt_one() {
        let path = scratch("strict");
        let mut bytes = frame(b"first");
        let good = bytes.len();
        bytes.extend(&frame(b"second-torn")[..12]);
        std::fs::write(&path, &bytes).unwrap();
        let mut seen = Vec::new();
        let report = read_log_from(&path, 0, Tail::Strict, |payload| seen.push(payload.to_vec())).unwrap();
        assert_eq!(seen, vec![b"first".to_vec()]);
        assert_eq!(report.truncated_bytes, 12);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good as u64);

        // A zero-filled tail (the space a crash left) is a torn write too.
        let mut zeros = frame(b"first");
        zeros.extend([0u8; 64]);
        std::fs::write(&path, &zeros).unwrap();
        let report = read_log_from(&path, 0, Tail::Strict, |_| {}).unwrap();
        assert_eq!((report.records, report.truncated_bytes), (1, 64));

        // A length that points past the end by more than a group write is a damaged header.
        let mut long = frame(b"first");
        let mut bogus = frame(b"second");
        bogus[3] = 0x7f;
        long.extend(bogus);
        long.extend(vec![7u8; GROUP_BYTES + 100]);
        for damaged in [
            {
                let mut flipped = frame(b"second");
                *flipped.last_mut().unwrap() ^= 1;
                flipped
            },
            {
                let mut zeros = vec![0u8; 64];
                zeros.extend(frame(b"not zero"));
                zeros
            },
        ] {
            let mut corrupt = frame(b"first");
            corrupt.extend(damaged);
            corrupt.extend(frame(b"after the damage"));
            std::fs::write(&path, &corrupt).unwrap();
            let error = read_log_from(&path, 0, Tail::Strict, |_| {}).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData);
            assert!(error.to_string().contains("damaged at byte"), "{error}");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                corrupt,
                "a refused log is left as it was"
            );
        }
        std::fs::write(&path, &long).unwrap();
        let error = read_log_from(&path, 0, Tail::Strict, |_| {}).unwrap_err();
        assert!(error.to_string().contains("damaged at byte"), "{error}");
    }

    #[test]
    fn a_read_ahead_keeps_a_tail_being_written_and_a_later_read_continues_from_its_end() {
        let path = scratch("ahead");
        let mut file = File::create(&path).unwrap();
        file.write_all(&frame(b"one")).unwrap();
        file.write_all(&frame(b"two")).unwrap();
        // A record half written by a writer that is still running.
        let three = frame(b"three");
        file.write_all(&three[..5]).unwrap();
        let mut seen = Vec::new();
        let ahead = read_log_from(&path, 0, Tail::Keep, |payload| seen.push(payload.to_vec())).unwrap();
        assert_eq!(seen, vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(ahead.valid_bytes, 2 * (HEADER_BYTES as u64 + 3));
        let length = std::fs::metadata(&path).unwrap().len();
        assert_eq!(length, ahead.valid_bytes + 5, "the tail being written is left alone");

        // The writer finishes its record and stops; the rest is read from where the read
        // ahead ended, and a torn tail now is cut off.
        file.write_all(&three[5..]).unwrap();
        file.write_all(&frame(b"four")[..3]).unwrap();
        let mut rest = Vec::new();
        let tail = read_log_from(&path, ahead.valid_bytes, Tail::Truncate, |payload| {
            rest.push(payload.to_vec())
        })
        .unwrap();
        assert_eq!(rest, vec![b"three".to_vec()]);
        assert_eq!(tail.records, 1);
        assert_eq!(tail.truncated_bytes, 3);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), tail.valid_bytes);
        let (all, _) = records(&path);
        assert_eq!(all.len(), 3);

        // A file shorter than what was read is another log: an error, not a silent skip.
        std::fs::write(&path, frame(b"new")).unwrap();
        assert!(read_log_from(&path, tail.valid_bytes, Tail::Truncate, |_| {}).is_err());
    }

    #[tokio::test]
    async fn a_snapshot_replaces_the_log_and_later_appends_follow_it() {
        let path = scratch("snapshot");
        let wal = Wal::open(&path, options(FsyncPolicy::Always, b"whole state")).unwrap();
        wal.append(b"old").await.unwrap();
        wal.snapshot().await.unwrap();
        wal.append(b"new").await.unwrap();
        let (seen, _) = records(&path);
        assert_eq!(seen, vec![b"whole state".to_vec(), b"new".to_vec()]);
    }

    #[tokio::test]
    async fn the_writer_compacts_a_log_past_its_threshold() {
        let path = scratch("compact");
        let mut options = options(FsyncPolicy::Never, b"compacted");
        options.compact_after_bytes = 1000;
        let wal = Wal::open(&path, options).unwrap();
        for _ in 0..30 {
            wal.append(&[7u8; 100]).await.unwrap();
        }
        let (seen, _) = records(&path);
        assert_eq!(seen[0], b"compacted".to_vec());
        assert!(std::fs::metadata(&path).unwrap().len() < 1200);
    }

    #[tokio::test]
    async fn close_returns_once_a_compaction_it_follows_has_renamed_its_snapshot_and_stops_the_writer() {
        let path = scratch("close");
        let mut options = options(FsyncPolicy::Interval(Duration::from_millis(50)), b"compacted");
        options.compact_after_bytes = 1000;
        let wal = Wal::open(&path, options).unwrap();
        // The tenth record (108 bytes each, framed) passes the threshold: its group is
        // acknowledged, then the writer compacts. Close right after must wait for that.
        for _ in 0..10 {
            wal.append(&[7u8; 100]).await.unwrap();
        }
        wal.close().await.unwrap();
        let (seen, _) = records(&path);
        assert_eq!(
            seen,
            vec![b"compacted".to_vec()],
            "the snapshot is in place when close returns"
        );
        assert!(matches!(wal.append(&[1]).await, Err(WalError::Stopped)));
        assert!(matches!(wal.close().await, Err(WalError::Stopped)));
    }

    #[test]
    fn encoder_and_decoder_agree() {
        let mut encoder = Encoder::new(9);
        encoder.u32(7).i64(-3).u64(u64::MAX).str("héllo").bytes(&[1, 2]);
        let mut decoder = Decoder::new(&encoder.bytes);
        assert_eq!(decoder.u8(), Some(9));
        assert_eq!(decoder.u32(), Some(7));
        assert_eq!(decoder.i64(), Some(-3));
        assert_eq!(decoder.u64(), Some(u64::MAX));
        assert_eq!(decoder.str(), Some("héllo"));
        assert_eq!(decoder.bytes(), Some(&[1u8, 2][..]));
        assert!(decoder.is_empty());
        assert_eq!(decoder.u8(), None);
    }
}
