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

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
        let (path, dir) = (self.path(&hash), self.dir.clone());
        let written = tokio::task::spawn_blocking(move || write_whole(&dir, &path, &bytes))
            .await
            .map_err(|error| std::io::Error::other(error.to_string()))
            .and_then(|written| written);
        written.map_err(|source| IconError::Write {
            hash: to_hex(&hash),
            source,
        })
    }

    /// Stores `bytes` here and on at least one of `peers` (all are asked at once; the first
    /// to store it is enough). With no peer (a group of one) this replica alone holds it.
    pub async fn store(&self, bytes: Bytes, peers: &[String]) -> Result<IconHash, IconError> {
        let hash = hash_of(&bytes);
        self.store_local(hash, bytes.clone()).await?;
        if peers.is_empty() {
            return Ok(hash);
        }
        let name = to_hex(&hash);
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
                Ok(()) => return Ok(hash),
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

/// Writes `bytes` to `path` whole (nothing when it exists already: its name is its hash).
fn write_whole(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if path.exists() {
        return Ok(());
    }
    let temporary = path.with_extension(format!("tmp-{}", rand::random::<u32>()));
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)?;
    std::fs::File::open(dir)?.sync_all()
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
}
