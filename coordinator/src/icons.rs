//! A replica group's icons, out of the raft log: content-addressed records appended to one
//! pack file (`<data-dir>/icons/icons.pack`) and held in memory by their SHA-256.
//!
//! The leader stores a registration's icon here and on at least one other replica before
//! it proposes the ISU's record, which names the icon by its hash only: the log and its
//! snapshots stay small, and a majority of a three-replica group holds every icon the log
//! names. A replica that applies a record naming an icon it lacks (it was down) fetches it
//! from a peer in the background; the icon route fetches it at once when asked first. A
//! fetched icon is taken only if its bytes hash to its name.
//!
//! Routes (cluster secret): `PUT /internal/icons/{hash}` stores the body (400 when it does
//! not hash to `hash`), `GET /internal/icons/{hash}` answers it (404 when absent).
//!
//! The pack. A store appends one record (`length: u32 LE`, `sha256: [u8; 32]`, the bytes)
//! and syncs its data before it answers; a sweep appends a record with no bytes (length
//! `u32::MAX`) for each icon it drops. Opening the store reads the whole pack back. One
//! file, rather than a file per icon, spares each store an inode, a rename and a directory
//! sync: written whole, with two fsyncs each, icon files were a quarter of an idle
//! follower's CPU under the bench. A record cut short at the end (a crash in an append) is
//! cut off at open with a warning; a record whose bytes do not hash to its name is left out
//! (logged, and fetched from a peer when needed); a pack that does not start with its
//! header, or a length no icon can have, stops the replica with the file and byte offset.
//! Icon files of the layout before the pack (`<sha256 hex>`) are taken into the pack at
//! open and removed.
//!
//! Icons no applied ISU names (a registration that failed after its icon was stored, the
//! ISUs of a generation that `/initialize` replaced) are dropped by [`IconStore::sweep`]
//! once they were last stored longer ago than a grace period, which covers a registration
//! between storing its icon and applying its record. Storing an icon that is already there
//! marks it stored again, under the same lock as the sweep's check and removal, so a sweep
//! never drops an icon a registration has just counted as stored. When the dropped records
//! outweigh the held ones (and pass [`COMPACT_AFTER_BYTES`]), the sweep writes the pack
//! again with the held icons only, syncs it and renames it into place.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use sha2::Digest as _;

/// An icon's name: the SHA-256 of its bytes.
pub type IconHash = [u8; 32];

/// The SHA-256 of `bytes`.
pub fn hash_of(bytes: &[u8]) -> IconHash {
    sha2::Sha256::digest(bytes).into()
}

/// `hash` as 64 lowercase hex digits (file names and URLs).
pub fn to_hex(hash: &IconHash) -> String {
    hex::encode(hash)
}

/// A hash from 64 hex digits; `None` for anything else.
pub fn parse_hex(text: &str) -> Option<IconHash> {
    if text.len() != 64 {
        return None;
    }
    let mut hash = [0u8; 32];
    hex::decode_to_slice(text, &mut hash).ok()?;
    Some(hash)
}

/// Where icons are stored or fetched from went wrong.
#[derive(Debug, thiserror::Error)]
pub enum IconError {
    #[error("storing icon {hash}: {source}")]
    Write { hash: String, source: std::io::Error },
    #[error("icon {hash} reached no other replica: {reasons}")]
    NotReplicated { hash: String, reasons: String },
}

/// The pack's file name in the store's directory.
pub const PACK_FILE: &str = "icons.pack";
/// What the pack starts with: its format's name and version.
const PACK_HEADER: &[u8; 12] = b"ISU-ICONS-1\n";
/// A record's length and hash, before its bytes.
const RECORD_HEAD: usize = 4 + 32;
/// No icon is longer (a registration form is at most 10 MiB); a longer length is damage.
const MAX_ICON_BYTES: usize = 16 << 20;
/// The length of a record that drops the icon its hash names (a sweep's), with no bytes.
const DROPPED_MARK: u32 = u32::MAX;
/// A sweep writes the pack again once its dropped records pass this and the held ones.
pub const COMPACT_AFTER_BYTES: u64 = 1 << 20;

/// One replica's icons (the pack, and the icons held in memory), and its calls to its peers'.
pub struct IconStore {
    client: reqwest::Client,
    secret: String,
    inner: Arc<Inner>,
}

struct Inner {
    /// The icons held, by hash; their bytes are shared with the ISUs that name them.
    held: parking_lot::RwLock<HashMap<IconHash, Held>>,
    /// The pack, appended under this lock. A sweep holds it while it checks, drops and
    /// compacts, and a store while it finds an icon present (and marks it stored again).
    pack: parking_lot::Mutex<Pack>,
}

struct Held {
    bytes: Bytes,
    /// When it was last stored (opening the store counts as storing every icon it reads).
    stored_at: SystemTime,
}

struct Pack {
    path: PathBuf,
    file: File,
    /// The pack's length: where the next record goes.
    len: u64,
    /// Bytes of records no held icon is in (dropped, damaged, or stored twice).
    dropped: u64,
}

/// What one sweep dropped and kept.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Icons no applied ISU names, stored longer ago than the grace period.
    pub removed: usize,
    pub removed_bytes: u64,
    /// Icons no applied ISU names, stored within the grace period.
    pub kept_recent: usize,
    /// Bytes the pack shrank by, when the sweep wrote it again.
    pub compacted_bytes: u64,
}

/// A peer's store answers within this (an icon is at most a registration form, 10 MiB).
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

impl IconStore {
    /// The store in `dir` (made if missing): reads its pack back, and takes in the icon
    /// files of the layout before the pack. An error names what is wrong and where.
    pub fn open(dir: &Path, secret: &str) -> anyhow::Result<IconStore> {
        std::fs::create_dir_all(dir).map_err(|error| anyhow::anyhow!("creating {}: {error}", dir.display()))?;
        let (pack, icons) = Pack::open(&dir.join(PACK_FILE))?;
        let stored_at = SystemTime::now();
        let held = icons.into_iter().map(|(hash, bytes)| (hash, Held { bytes, stored_at }));
        let inner = Arc::new(Inner {
            held: parking_lot::RwLock::new(held.collect()),
            pack: parking_lot::Mutex::new(pack),
        });
        take_in_icon_files(dir, &inner).map_err(|error| anyhow::anyhow!("{}: {error}", dir.display()))?;
        Ok(IconStore {
            client: node_http::internal_client().timeout(PEER_TIMEOUT).build()?,
            secret: secret.to_owned(),
            inner,
        })
    }

    /// The icon if this replica holds it.
    pub fn local(&self, hash: &IconHash) -> Option<Bytes> {
        self.inner.held.read().get(hash).map(|held| held.bytes.clone())
    }

    /// Stores `bytes` here (durably: appended to the pack, its data synced) unless already
    /// stored; `hash` must be theirs.
    pub async fn store_local(&self, hash: IconHash, bytes: Bytes) -> Result<(), IconError> {
        let inner = self.inner.clone();
        let written = tokio::task::spawn_blocking(move || inner.store(hash, bytes))
            .await
            .map_err(|error| std::io::Error::other(error.to_string()))
            .and_then(|written| written);
        written.map_err(|source| IconError::Write {
            hash: to_hex(&hash),
            source,
        })
    }

    /// Stores `bytes` here and on at least one of `peers`, both at once (every peer is
    /// asked; the first to store it is enough). With no peer (a group of one) this replica
    /// alone holds it. A failure here may leave a copy on a peer: no ISU names it, and the
    /// sweep removes it.
    pub async fn store(&self, bytes: Bytes, peers: &[String]) -> Result<IconHash, IconError> {
        let hash = hash_of(&bytes);
        let (here, elsewhere) = tokio::join!(
            self.store_local(hash, bytes.clone()),
            self.store_on_a_peer(&hash, bytes, peers)
        );
        here?;
        elsewhere?;
        Ok(hash)
    }

    /// Sends `bytes` to every one of `peers`; done when the first has stored them.
    async fn store_on_a_peer(&self, hash: &IconHash, bytes: Bytes, peers: &[String]) -> Result<(), IconError> {
        if peers.is_empty() {
            return Ok(());
        }
        let name = to_hex(hash);
        let mut puts: futures_util::stream::FuturesUnordered<_> = peers
            .iter()
            .map(|peer| {
                let request = self
                    .client
                    .put(format!(
                        "{}{}/{name}",
                        peer.trim_end_matches('/'),
                        shared::protocol::COORDINATOR_ICONS
                    ))
                    .header(shared::protocol::SECRET_HEADER, &self.secret)
                    .body(bytes.clone());
                async move {
                    match request.send().await {
                        Ok(response) if response.status().is_success() => Ok(()),
                        Ok(response) => Err(format!("{peer}: {}", response.status())),
                        Err(error) => Err(format!("{peer}: {}", shared::error_chain(&error))),
                    }
                }
            })
            .collect();
        let mut reasons = Vec::new();
        while let Some(answer) = futures_util::StreamExt::next(&mut puts).await {
            match answer {
                Ok(()) => return Ok(()),
                Err(reason) => reasons.push(reason),
            }
        }
        Err(IconError::NotReplicated {
            hash: name,
            reasons: reasons.join("; "),
        })
    }

    /// The icon from here, or else from the first of `peers` that holds it intact (then
    /// stored here too).
    pub async fn fetch(&self, hash: IconHash, peers: &[String]) -> Option<Bytes> {
        if let Some(bytes) = self.local(&hash) {
            return Some(bytes);
        }
        let name = to_hex(&hash);
        for peer in peers {
            let answer = self
                .client
                .get(format!(
                    "{}{}/{name}",
                    peer.trim_end_matches('/'),
                    shared::protocol::COORDINATOR_ICONS
                ))
                .header(shared::protocol::SECRET_HEADER, &self.secret)
                .send()
                .await;
            let Ok(response) = answer else { continue };
            if !response.status().is_success() {
                continue;
            }
            let Ok(bytes) = response.bytes().await else {
                continue;
            };
            if hash_of(&bytes) != hash {
                tracing::warn!(icon = %name, %peer, "a peer's icon does not match its hash");
                continue;
            }
            if let Err(error) = self.store_local(hash, bytes.clone()).await {
                tracing::warn!(%error, "keeping a fetched icon failed");
            }
            tracing::info!(icon = %name, %peer, "fetched an icon from a peer");
            return Some(bytes);
        }
        None
    }
}

impl Inner {
    /// Appends `bytes` to the pack and holds them; when held already, only marks them
    /// stored now, so that a sweep keeps them for another grace period.
    fn store(&self, hash: IconHash, bytes: Bytes) -> std::io::Result<()> {
        let mut pack = self.pack.lock();
        if let Some(held) = self.held.write().get_mut(&hash) {
            held.stored_at = SystemTime::now();
            return Ok(());
        }
        pack.append(&hash, &bytes)?;
        let stored_at = SystemTime::now();
        self.held.write().insert(hash, Held { bytes, stored_at });
        Ok(())
    }
}

impl Pack {
    /// Opens the pack at `path` (made with its header if missing) and reads its icons.
    fn open(path: &Path) -> anyhow::Result<(Pack, HashMap<IconHash, Bytes>)> {
        let shown = path.display();
        let mut file = match File::options().read(true).append(true).open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let mut file = File::options().read(true).append(true).create_new(true).open(path)?;
                file.write_all(PACK_HEADER)?;
                file.sync_all()?;
                sync_dir(path)?;
                file
            }
            Err(error) => anyhow::bail!("opening {shown}: {error}"),
        };
        let mut contents = Vec::new();
        file.seek(std::io::SeekFrom::Start(0))
            .and_then(|_| file.read_to_end(&mut contents))
            .map_err(|error| anyhow::anyhow!("reading {shown}: {error}"))?;
        if contents.len() < PACK_HEADER.len() || contents[..PACK_HEADER.len()] != PACK_HEADER[..] {
            anyhow::bail!(
                "{shown} is not an icon pack (it does not start with {:?}); move it aside and the \
                 replica fetches its icons from its peers",
                String::from_utf8_lossy(PACK_HEADER).trim_end()
            );
        }
        let mut icons: HashMap<IconHash, Bytes> = HashMap::new();
        let mut dropped = 0u64;
        let mut at = PACK_HEADER.len();
        while at < contents.len() {
            let rest = &contents[at..];
            let length = rest
                .get(..4)
                .map(|length| u32::from_le_bytes(length.try_into().expect("4 bytes")));
            let mark = length == Some(DROPPED_MARK);
            let length = length.unwrap_or_default() as usize;
            if length > MAX_ICON_BYTES && !mark {
                anyhow::bail!(
                    "{shown} is damaged at byte {at}: a record of {length} bytes (icons are at most \
                     {MAX_ICON_BYTES}); move it aside and the replica fetches its icons from its peers"
                );
            }
            let whole = rest.len() >= RECORD_HEAD && (mark || rest.len() >= RECORD_HEAD + length);
            if !whole {
                // An append cut short by a crash: it was never acknowledged.
                tracing::warn!(pack = %shown, at, bytes = rest.len(), "cutting off a record cut short at the pack's end");
                file.set_len(at as u64)?;
                file.sync_all()?;
                contents.truncate(at);
                break;
            }
            let hash: IconHash = rest[4..RECORD_HEAD].try_into().expect("32 bytes");
            if mark {
                if let Some(bytes) = icons.remove(&hash) {
                    dropped += (RECORD_HEAD + bytes.len()) as u64;
                }
                dropped += RECORD_HEAD as u64;
                at += RECORD_HEAD;
                continue;
            }
            let bytes = &rest[RECORD_HEAD..RECORD_HEAD + length];
            let record = (RECORD_HEAD + length) as u64;
            if hash_of(bytes) != hash {
                tracing::error!(pack = %shown, at, icon = %to_hex(&hash), "an icon in the pack does not match its hash; left out (fetched again from a peer)");
                dropped += record;
            } else if icons.insert(hash, Bytes::copy_from_slice(bytes)).is_some() {
                dropped += record;
            }
            at += RECORD_HEAD + length;
        }
        let pack = Pack {
            path: path.to_owned(),
            file,
            len: contents.len() as u64,
            dropped,
        };
        Ok((pack, icons))
    }

    /// Appends one record and syncs it.
    fn append(&mut self, hash: &IconHash, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.len() > MAX_ICON_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("an icon of {} bytes (at most {MAX_ICON_BYTES})", bytes.len()),
            ));
        }
        let mut record = Vec::with_capacity(RECORD_HEAD + bytes.len());
        record.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        record.extend_from_slice(hash);
        record.extend_from_slice(bytes);
        self.write_synced(&record)
    }

    /// Appends `records` and syncs them; on a failure the pack is cut back to where it was.
    fn write_synced(&mut self, records: &[u8]) -> std::io::Result<()> {
        let written = self.file.write_all(records).and_then(|()| self.file.sync_data());
        if let Err(error) = written {
            let _ = self.file.set_len(self.len);
            return Err(error);
        }
        self.len += records.len() as u64;
        Ok(())
    }

    /// Appends a dropped mark for each of `hashes` and syncs them.
    fn append_dropped(&mut self, hashes: &[IconHash]) -> std::io::Result<()> {
        let mut records = Vec::with_capacity(RECORD_HEAD * hashes.len());
        for hash in hashes {
            records.extend_from_slice(&DROPPED_MARK.to_le_bytes());
            records.extend_from_slice(hash);
        }
        self.write_synced(&records)?;
        self.dropped += records.len() as u64;
        Ok(())
    }

    /// Writes the pack again with `held` only (to a temporary file, synced, renamed over it).
    fn compact(&mut self, held: &HashMap<IconHash, Held>) -> std::io::Result<()> {
        let temporary = self.path.with_extension("pack.tmp");
        let mut file = File::create(&temporary)?;
        let mut writer = std::io::BufWriter::new(&mut file);
        writer.write_all(PACK_HEADER)?;
        let mut len = PACK_HEADER.len() as u64;
        for (hash, held) in held {
            writer.write_all(&(held.bytes.len() as u32).to_le_bytes())?;
            writer.write_all(hash)?;
            writer.write_all(&held.bytes)?;
            len += (RECORD_HEAD + held.bytes.len()) as u64;
        }
        writer.flush()?;
        drop(writer);
        file.sync_all()?;
        drop(file);
        // Opened before the rename: appends follow the new pack whatever happens next.
        let appending = File::options().read(true).append(true).open(&temporary)?;
        std::fs::rename(&temporary, &self.path)?;
        sync_dir(&self.path)?;
        self.file = appending;
        self.len = len;
        self.dropped = 0;
        Ok(())
    }
}

/// Syncs the directory `path` is in (its entry, after a create or a rename).
fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

/// Takes the icon files of the layout before the pack (`<sha256 hex>`, and the temporary
/// `<sha256 hex>.tmp-N` of a write that never finished) into the pack, and removes them
/// once the pack holds them. A file whose bytes do not hash to its name is removed too.
fn take_in_icon_files(dir: &Path, inner: &Inner) -> std::io::Result<()> {
    let mut taken = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let (stem, temporary) = match name.split_once('.') {
            Some((stem, extension)) if extension.starts_with("tmp-") => (stem, true),
            Some(_) => continue,
            None => (name, false),
        };
        let Some(hash) = parse_hex(stem) else { continue };
        if !temporary {
            let bytes = std::fs::read(entry.path())?;
            if hash_of(&bytes) == hash {
                inner.store(hash, Bytes::from(bytes))?;
            } else {
                tracing::error!(icon = %stem, "an icon file does not match its hash; removed (fetched again from a peer)");
            }
        }
        taken.push(entry.path());
    }
    for path in &taken {
        std::fs::remove_file(path)?;
    }
    if !taken.is_empty() {
        sync_dir(&dir.join(PACK_FILE))?;
        tracing::info!(files = taken.len(), "took the icon files into the pack");
    }
    Ok(())
}

impl IconStore {
    /// Drops the icons that no hash of `referenced` names and that were last stored more
    /// than `grace` ago, then writes the pack again if the dropped records outweigh the
    /// held ones. `referenced` must come from a replica that has applied the log as far as
    /// its leader had committed when the sweep started (a ready replica), so that an icon
    /// is unnamed only if no committed record names it or its record was committed within
    /// `grace`.
    pub fn sweep(&self, referenced: &HashSet<IconHash>, grace: Duration) -> std::io::Result<Swept> {
        let mut swept = Swept::default();
        let mut pack = self.inner.pack.lock();
        let now = SystemTime::now();
        let mut dropped = Vec::new();
        {
            let mut held = self.inner.held.write();
            held.retain(|hash, icon| {
                if referenced.contains(hash) {
                    return true;
                }
                let age = now.duration_since(icon.stored_at).unwrap_or_default();
                if age <= grace {
                    swept.kept_recent += 1;
                    return true;
                }
                swept.removed += 1;
                swept.removed_bytes += icon.bytes.len() as u64;
                pack.dropped += (RECORD_HEAD + icon.bytes.len()) as u64;
                dropped.push(*hash);
                false
            });
        }
        if !dropped.is_empty() {
            // Not read back at the next start (a compaction below leaves them out anyway).
            pack.append_dropped(&dropped)?;
        }
        let kept = pack.len - pack.dropped;
        if pack.dropped > COMPACT_AFTER_BYTES && pack.dropped > kept {
            let before = pack.len;
            // The stores wait (the pack's lock); the reads of held icons go on.
            pack.compact(&self.inner.held.read())?;
            swept.compacted_bytes = before - pack.len;
        }
        Ok(swept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temporary_dir(what: &str) -> PathBuf {
        std::env::temp_dir().join(format!("icons-{what}-{}", rand::random::<u64>()))
    }

    fn pack_len(dir: &Path) -> u64 {
        std::fs::metadata(dir.join(PACK_FILE)).unwrap().len()
    }

    /// Makes `hash` look stored `by` ago.
    fn age(store: &IconStore, hash: &IconHash, by: Duration) {
        store.inner.held.write().get_mut(hash).unwrap().stored_at = SystemTime::now() - by;
    }

    #[test]
    fn hashes_read_back_from_their_hex_and_nothing_else_parses() {
        let hash = hash_of(b"icon");
        assert_eq!(parse_hex(&to_hex(&hash)), Some(hash));
        assert_eq!(parse_hex("abc"), None);
        assert_eq!(parse_hex(&"g".repeat(64)), None);
        assert_eq!(parse_hex(&"0".repeat(66)), None);
    }

    #[tokio::test]
    async fn an_icon_is_stored_once_and_read_back_after_a_restart() {
        let dir = temporary_dir("store");
        let store = IconStore::open(&dir, "secret").unwrap();
        let bytes = Bytes::from_static(b"\xff\xd8 a small jpeg");
        let hash = store.store(bytes.clone(), &[]).await.unwrap();
        assert_eq!(hash, hash_of(&bytes));
        assert_eq!(store.local(&hash), Some(bytes.clone()));
        // Stored again: one record, no other file.
        let len = pack_len(&dir);
        store.store(bytes.clone(), &[]).await.unwrap();
        assert_eq!(pack_len(&dir), len);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let other = store.store(Bytes::from_static(b"another"), &[]).await.unwrap();
        drop(store);
        let store = IconStore::open(&dir, "secret").unwrap();
        assert_eq!(store.local(&hash), Some(bytes));
        assert_eq!(store.local(&other).as_deref(), Some(&b"another"[..]));
        assert_eq!(store.local(&hash_of(b"never stored")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_damaged_icon_is_left_out_a_cut_record_cut_off_and_a_foreign_file_refused() {
        let dir = temporary_dir("damage");
        let store = IconStore::open(&dir, "secret").unwrap();
        let first = store.store(Bytes::from_static(b"first icon"), &[]).await.unwrap();
        let second = store.store(Bytes::from_static(b"second icon"), &[]).await.unwrap();
        drop(store);
        // One byte of the first icon's bytes changes; a crash cuts an append short.
        let path = dir.join(PACK_FILE);
        let mut pack = std::fs::read(&path).unwrap();
        pack[PACK_HEADER.len() + RECORD_HEAD] ^= 0xff;
        pack.extend_from_slice(&100u32.to_le_bytes());
        pack.extend_from_slice(&[7; 40]);
        std::fs::write(&path, &pack).unwrap();

        let store = IconStore::open(&dir, "secret").unwrap();
        assert_eq!(store.local(&first), None);
        assert_eq!(store.fetch(first, &[]).await, None);
        assert_eq!(store.local(&second).as_deref(), Some(&b"second icon"[..]));
        assert_eq!(
            pack_len(&dir),
            (pack.len() - 4 - 40) as u64,
            "the cut record is cut off"
        );
        // Stored again, it is held again, and after the next restart too.
        store.store(Bytes::from_static(b"first icon"), &[]).await.unwrap();
        drop(store);
        let store = IconStore::open(&dir, "secret").unwrap();
        assert_eq!(store.local(&first).as_deref(), Some(&b"first icon"[..]));
        drop(store);

        // A length no icon has: the replica refuses to start, naming the file and offset.
        let mut pack = std::fs::read(&path).unwrap();
        let length = MAX_ICON_BYTES as u32 + 1;
        pack[PACK_HEADER.len()..PACK_HEADER.len() + 4].copy_from_slice(&length.to_le_bytes());
        std::fs::write(&path, &pack).unwrap();
        let error = IconStore::open(&dir, "secret").err().unwrap().to_string();
        assert!(error.contains("icons.pack is damaged at byte 12"), "{error}");
        // Not a pack at all.
        std::fs::write(&path, b"{\"json\": true}").unwrap();
        let error = IconStore::open(&dir, "secret").err().unwrap().to_string();
        assert!(error.contains("is not an icon pack"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn icon_files_of_the_layout_before_the_pack_are_taken_in() {
        let dir = temporary_dir("files");
        std::fs::create_dir_all(&dir).unwrap();
        let icon = b"an icon from a file".as_slice();
        let name = to_hex(&hash_of(icon));
        std::fs::write(dir.join(&name), icon).unwrap();
        std::fs::write(dir.join(format!("{name}.tmp-42")), b"half").unwrap();
        std::fs::write(dir.join(to_hex(&hash_of(b"other"))), b"damaged").unwrap();
        std::fs::write(dir.join("notes.txt"), b"kept").unwrap();
        let store = IconStore::open(&dir, "secret").unwrap();
        assert_eq!(store.local(&hash_of(icon)).as_deref(), Some(icon));
        assert_eq!(store.local(&hash_of(b"other")), None);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, [PACK_FILE, "notes.txt"]);
        drop(store);
        let store = IconStore::open(&dir, "secret").unwrap();
        assert_eq!(store.local(&hash_of(icon)).as_deref(), Some(icon));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_sweep_drops_only_old_icons_no_isu_names_and_a_store_again_renews_one() {
        let dir = temporary_dir("sweep");
        let store = IconStore::open(&dir, "secret").unwrap();
        let grace = Duration::from_secs(60);
        let old = Duration::from_secs(3600);
        let named = store.store(Bytes::from_static(b"named"), &[]).await.unwrap();
        let orphan = store.store(Bytes::from_static(b"orphan"), &[]).await.unwrap();
        let recent = store.store(Bytes::from_static(b"recent"), &[]).await.unwrap();
        let renewed = store.store(Bytes::from_static(b"renewed"), &[]).await.unwrap();
        for hash in [named, orphan, renewed] {
            age(&store, &hash, old);
        }
        // Stored again (a new registration with the same icon): stored now, as far as the
        // sweep can tell.
        store.store(Bytes::from_static(b"renewed"), &[]).await.unwrap();

        let swept = store.sweep(&HashSet::from([named]), grace).unwrap();
        assert_eq!(
            swept,
            Swept {
                removed: 1,
                removed_bytes: b"orphan".len() as u64,
                kept_recent: 2,
                compacted_bytes: 0,
            }
        );
        assert_eq!(store.local(&orphan), None);
        for (hash, bytes) in [(named, &b"named"[..]), (recent, b"recent"), (renewed, b"renewed")] {
            assert_eq!(store.local(&hash).as_deref(), Some(bytes));
        }
        // Once nothing names it and the grace period passed, the named icon goes too.
        age(&store, &named, old);
        assert_eq!(store.sweep(&HashSet::new(), grace).unwrap().removed, 1);
        assert_eq!(store.local(&named), None);
        // What a sweep dropped stays dropped after a restart.
        drop(store);
        let store = IconStore::open(&dir, "secret").unwrap();
        assert_eq!([named, orphan].map(|hash| store.local(&hash)), [None, None]);
        for (hash, bytes) in [(recent, &b"recent"[..]), (renewed, b"renewed")] {
            assert_eq!(store.local(&hash).as_deref(), Some(bytes));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_sweep_writes_the_pack_again_once_dropped_icons_outweigh_the_held_ones() {
        let dir = temporary_dir("compact");
        let store = IconStore::open(&dir, "secret").unwrap();
        let big = |seed: u8| Bytes::from(vec![seed; 600 << 10]);
        let kept = store.store(big(1), &[]).await.unwrap();
        let dropped = [
            store.store(big(2), &[]).await.unwrap(),
            store.store(big(3), &[]).await.unwrap(),
        ];
        let before = pack_len(&dir);
        for hash in [kept, dropped[0], dropped[1]] {
            age(&store, &hash, Duration::from_secs(3600));
        }
        let swept = store.sweep(&HashSet::from([kept]), Duration::from_secs(60)).unwrap();
        assert_eq!(swept.removed, 2);
        let record = (RECORD_HEAD + (600 << 10)) as u64;
        // The two records and the two marks the sweep appended for them.
        assert_eq!(swept.compacted_bytes, 2 * record + 2 * RECORD_HEAD as u64);
        assert_eq!(pack_len(&dir), before - 2 * record);
        // Appends go on in the new pack, and a restart reads exactly the held icons.
        let after = store.store(Bytes::from_static(b"after"), &[]).await.unwrap();
        drop(store);
        let store = IconStore::open(&dir, "secret").unwrap();
        assert_eq!(store.local(&kept), Some(big(1)));
        assert_eq!(store.local(&after).as_deref(), Some(&b"after"[..]));
        assert!(dropped.iter().all(|hash| store.local(hash).is_none()));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary pack left");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
