//! The trend: built from every ISU's latest condition off the request path (one build at a
//! time, starts at least [`TREND_REBUILD_INTERVAL`] apart), cached as JSON and gzip.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

use super::generation::{Generation, Isu};

impl Generation {
    /// Records that the trend changed and rebuilds it in the background. One
    /// rebuild runs at a time; it loops while changes keep arriving, so the
    /// cached trend is at most one build behind.
    pub(super) fn changed(self: &Arc<Self>) {
        self.trend_version.fetch_add(1, Ordering::SeqCst);
        // SeqCst on the flag and the version: the builder's "clear flag, then
        // re-read version" must not pass a writer's "bump version, then test flag".
        if self.trend_rebuilding.swap(true, Ordering::SeqCst) {
            return; // the running rebuild will see the new version
        }
        let generation = self.clone();
        tokio::task::spawn_blocking(move || loop {
            generation.wait_for_trend_build_slot();
            let built = {
                let _clear = ClearOnDrop(&generation.trend_rebuilding);
                generation.rebuild_trend()
            };
            if generation.trend_version.load(Ordering::SeqCst) == built {
                return;
            }
            if generation.trend_rebuilding.swap(true, Ordering::SeqCst) {
                return; // a newer change started its own rebuild
            }
        });
    }

    /// Keeps rebuild starts at least [`TREND_REBUILD_INTERVAL`] apart (a blocking sleep: this
    /// runs on the blocking pool, in the one builder there is).
    fn wait_for_trend_build_slot(&self) {
        let mut last = self.last_trend_build.lock();
        if let Some(next) = last.map(|last| last + TREND_REBUILD_INTERVAL) {
            let now = std::time::Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
        }
        *last = Some(std::time::Instant::now());
    }

    /// Builds the trend of the current version into the cache; returns that version.
    pub(super) fn rebuild_trend(&self) -> u64 {
        let version = self.trend_version.load(Ordering::SeqCst);
        // Serialise outside the lock: registrations wait for its write side.
        let isus = self.all.read().clone();
        let json = build_trend(&isus);
        let trend = Trend {
            gzip: gzip(&json).map(Bytes::from),
            json: Bytes::from(json),
        };
        let mut cache = self.trend_cache.lock();
        if cache.0 <= version {
            *cache = (version, trend);
        }
        version
    }

    /// The trend as of the last build (never built on the request path).
    pub fn trend(&self) -> Trend {
        self.trend_cache.lock().1.clone()
    }
}

/// Shortest time between the starts of two trend rebuilds. Workers push every 10 ms each, so
/// without it the trend would be rebuilt (and compressed) after nearly every push, a third of
/// the coordinator's CPU under load; with it the cached trend is at most this much staler.
const TREND_REBUILD_INTERVAL: Duration = Duration::from_millis(25);

/// Clears a flag when dropped, also while unwinding from a panic.
struct ClearOnDrop<'a>(&'a AtomicBool);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// The trend JSON, and the same gzip-compressed for clients that accept it
/// (at 10,000 ISUs the JSON is about 390 KB; copying it dominates a request).
#[derive(Debug, Clone, Default)]
pub struct Trend {
    pub json: Bytes,
    pub gzip: Option<Bytes>,
}

/// Bodies smaller than this are sent as they are.
const GZIP_MIN_BYTES: usize = 4096;

fn gzip(json: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    if json.len() < GZIP_MIN_BYTES {
        return None;
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(json.len() / 4), flate2::Compression::fast());
    encoder.write_all(json).ok()?;
    encoder.finish().ok()
}

#[derive(Serialize)]
struct TrendEntry<'a> {
    character: &'a str,
    info: Vec<TrendCondition>,
    warning: Vec<TrendCondition>,
    critical: Vec<TrendCondition>,
}

#[derive(Serialize, Clone, Copy)]
struct TrendCondition {
    isu_id: i64,
    timestamp: i64,
}

/// One entry per character of any registered ISU; each ISU with a condition
/// appears once, under its latest condition's level; lists newest first.
pub(super) fn build_trend(isus: &[Arc<Isu>]) -> Vec<u8> {
    let mut by_character: BTreeMap<&str, TrendEntry<'_>> = BTreeMap::new();
    for isu in isus {
        let entry = by_character.entry(&isu.character).or_insert_with(|| TrendEntry {
            character: &isu.character,
            info: Vec::new(),
            warning: Vec::new(),
            critical: Vec::new(),
        });
        let Some((timestamp, flags)) = isu.latest_key() else {
            continue;
        };
        let item = TrendCondition {
            isu_id: isu.id,
            timestamp,
        };
        match flags.level() {
            shared::domain::Level::Info => entry.info.push(item),
            shared::domain::Level::Warning => entry.warning.push(item),
            shared::domain::Level::Critical => entry.critical.push(item),
        }
    }
    let mut entries: Vec<TrendEntry<'_>> = by_character.into_values().collect();
    for entry in &mut entries {
        for list in [&mut entry.info, &mut entry.warning, &mut entry.critical] {
            list.sort_unstable_by_key(|item| std::cmp::Reverse(item.timestamp));
        }
    }
    serde_json::to_vec(&entries).unwrap_or_else(|_| b"[]".to_vec())
}
