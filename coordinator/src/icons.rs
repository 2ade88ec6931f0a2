//! A replica group's icons, out of the raft log: content-addressed files
//! (`<data-dir>/icons/<sha256 hex>`), written whole, synced and renamed into place.
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
//! Icons no applied ISU names (a registration that failed after its icon was stored, the
//! ISUs of a generation that `/initialize` replaced) are removed by [`IconStore::sweep`]
//! once they were last stored longer ago than a grace period, which covers a registration
//! between storing its icon and applying its record. Storing an icon that is already there
//! marks it stored again, under the same lock as the sweep's check and removal, so a sweep
//! never removes an icon a registration has just counted as stored.

use std::collections::HashSet;
use std::io::Write as _;
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

/// One replica's icon files, and its calls to its peers'.
pub struct IconStore {
    dir: PathBuf,
    client: reqwest::Client,
    secret: String,
    /// Held while a file is put in place or found present (and marked stored again), and
    /// while the sweep checks and removes one.
    placing: Arc<parking_lot::Mutex<()>>,
}

/// What one sweep removed and kept.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Icons no applied ISU names, stored longer ago than the grace period.
    pub removed: usize,
    pub removed_bytes: u64,
    /// Icons no applied ISU names, stored within the grace period.
    pub kept_recent: usize,
    /// Temporary files of writes that never finished (a crash), as old as the grace period.
    pub removed_temporary: usize,
}

/// A peer's store answers within this (an icon is at most a registration form, 10 MiB).
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

impl IconStore {
    /// The store in `dir` (made if missing).
    pub fn open(dir: &Path, secret: &str) -> anyhow::Result<IconStore> {
        std::fs::create_dir_all(dir).map_err(|error| anyhow::anyhow!("creating {}: {error}", dir.display()))?;
        Ok(IconStore {
            dir: dir.to_owned(),
            client: node_http::internal_client().timeout(PEER_TIMEOUT).build()?,
            secret: secret.to_owned(),
            placing: Arc::default(),
        })
    }

    fn path(&self, hash: &IconHash) -> PathBuf {
        self.dir.join(to_hex(hash))
    }

    /// The icon if this replica holds it intact (a file whose bytes do not hash to its name
    /// is treated as absent, and logged).
    pub fn local(&self, hash: &IconHash) -> Option<Bytes> {
        let bytes = std::fs::read(self.path(hash)).ok()?;
        if hash_of(&bytes) != *hash {
            tracing::error!(icon = %to_hex(hash), "an icon file does not match its hash; fetched again from a peer");
            return None;
        }
        Some(Bytes::from(bytes))
    }

    /// Stores `bytes` here (durably: written to a temporary file, synced, renamed, the
    /// directory synced) unless already stored; `hash` must be theirs.
    pub async fn store_local(&self, hash: IconHash, bytes: Bytes) -> Result<(), IconError> {
        let (path, dir, placing) = (self.path(&hash), self.dir.clone(), self.placing.clone());
        let written = tokio::task::spawn_blocking(move || write_whole(&dir, &path, &bytes, &placing))
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

/// Writes `bytes` to `path` whole; when it exists already (its name is its hash), only marks
/// it stored now, so that a sweep keeps it for another grace period.
fn write_whole(dir: &Path, path: &Path, bytes: &[u8], placing: &parking_lot::Mutex<()>) -> std::io::Result<()> {
    {
        let _placing = placing.lock();
        if mark_stored(path)? {
            return Ok(());
        }
    }
    let temporary = path.with_extension(format!("{TEMPORARY_MARK}{}", rand::random::<u32>()));
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    {
        let _placing = placing.lock();
        std::fs::rename(&temporary, path)?;
    }
    std::fs::File::open(dir)?.sync_all()
}

/// Sets `path`'s modification time to now; `false` when there is no such file.
fn mark_stored(path: &Path) -> std::io::Result<bool> {
    match std::fs::File::options().write(true).open(path) {
        Ok(file) => file.set_modified(SystemTime::now()).map(|()| true),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

/// What a temporary file's extension starts with (`<hash>.tmp-<random>`).
const TEMPORARY_MARK: &str = "tmp-";

impl IconStore {
    /// Removes the icons that no hash of `referenced` names and that were last stored more
    /// than `grace` ago, and temporary files as old (the icons in flight are within it).
    /// `referenced` must come from a replica that has applied the log as far as its leader
    /// had committed when the sweep started (a ready replica), so that an icon is unnamed
    /// only if no committed record names it or its record was committed within `grace`.
    pub fn sweep(&self, referenced: &HashSet<IconHash>, grace: Duration) -> std::io::Result<Swept> {
        let mut swept = Swept::default();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let (stem, temporary) = match name.split_once('.') {
                Some((stem, extension)) if extension.starts_with(TEMPORARY_MARK) => (stem, true),
                Some(_) => continue,
                None => (name, false),
            };
            let Some(hash) = parse_hex(stem) else { continue };
            if !temporary && referenced.contains(&hash) {
                continue;
            }
            let _placing = self.placing.lock();
            let Ok(metadata) = entry.metadata() else { continue };
            let age = metadata
                .modified()
                .ok()
                .and_then(|modified| SystemTime::now().duration_since(modified).ok())
                .unwrap_or_default();
            if age <= grace {
                swept.kept_recent += usize::from(!temporary);
                continue;
            }
            match std::fs::remove_file(entry.path()) {
                Ok(()) if temporary => swept.removed_temporary += 1,
                Ok(()) => {
                    swept.removed += 1;
                    swept.removed_bytes += metadata.len();
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        Ok(swept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_read_back_from_their_hex_and_nothing_else_parses() {
        let hash = hash_of(b"icon");
        assert_eq!(parse_hex(&to_hex(&hash)), Some(hash));
        assert_eq!(parse_hex("abc"), None);
        assert_eq!(parse_hex(&"g".repeat(64)), None);
        assert_eq!(parse_hex(&"0".repeat(66)), None);
    }

    #[tokio::test]
    async fn an_icon_is_stored_once_and_a_damaged_file_is_not_served() {
        let dir = std::env::temp_dir().join(format!("icons-test-{}", rand::random::<u64>()));
        let store = IconStore::open(&dir, "secret").unwrap();
        let bytes = Bytes::from_static(b"\xff\xd8 a small jpeg");
        let hash = store.store(bytes.clone(), &[]).await.unwrap();
        assert_eq!(hash, hash_of(&bytes));
        assert_eq!(store.local(&hash), Some(bytes.clone()));
        // Stored again: the same file, no temporary left behind.
        store.store(bytes.clone(), &[]).await.unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::write(store.path(&hash), b"damaged").unwrap();
        assert_eq!(store.local(&hash), None);
        assert_eq!(store.fetch(hash, &[]).await, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn age(path: &Path, by: Duration) {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - by).unwrap();
    }

    #[tokio::test]
    async fn a_sweep_removes_only_old_icons_no_isu_names_and_a_store_again_renews_one() {
        let dir = std::env::temp_dir().join(format!("icons-sweep-{}", rand::random::<u64>()));
        let store = IconStore::open(&dir, "secret").unwrap();
        let grace = Duration::from_secs(60);
        let old = Duration::from_secs(3600);
        let named = store.store(Bytes::from_static(b"named"), &[]).await.unwrap();
        let orphan = store.store(Bytes::from_static(b"orphan"), &[]).await.unwrap();
        let recent = store.store(Bytes::from_static(b"recent"), &[]).await.unwrap();
        let renewed = store.store(Bytes::from_static(b"renewed"), &[]).await.unwrap();
        for hash in [named, orphan, renewed] {
            age(&store.path(&hash), old);
        }
        // Stored again (a new registration with the same icon): stored now, as far as the
        // sweep can tell.
        store.store(Bytes::from_static(b"renewed"), &[]).await.unwrap();
        // A write that never finished, and files that are no icon of this store.
        let temporary = store.path(&orphan).with_extension("tmp-12345");
        std::fs::write(&temporary, b"half").unwrap();
        age(&temporary, old);
        let young_temporary = store.path(&recent).with_extension("tmp-1");
        std::fs::write(&young_temporary, b"in flight").unwrap();
        let foreign = dir.join("notes.txt");
        std::fs::write(&foreign, b"kept").unwrap();
        age(&foreign, old);

        let swept = store.sweep(&HashSet::from([named]), grace).unwrap();
        assert_eq!(
            swept,
            Swept {
                removed: 1,
                removed_bytes: b"orphan".len() as u64,
                kept_recent: 2,
                removed_temporary: 1,
            }
        );
        assert_eq!(store.local(&orphan), None);
        for (hash, bytes) in [(named, &b"named"[..]), (recent, b"recent"), (renewed, b"renewed")] {
            assert_eq!(store.local(&hash).as_deref(), Some(bytes));
        }
        assert!(!temporary.exists() && young_temporary.exists() && foreign.exists());
        // Once nothing names it and the grace period passed, the named icon goes too.
        age(&store.path(&named), old);
        assert_eq!(store.sweep(&HashSet::new(), grace).unwrap().removed, 1);
        assert_eq!(store.local(&named), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
