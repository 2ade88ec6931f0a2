//! The trend: built from every ISU's latest condition off the request path (one build at a
//! time, starts at least [`TREND_REBUILD_INTERVAL`] apart), cached as JSON and gzip in the
//! [`TrendCache`] each generation holds. It is rebuilt only while it is asked for: a
//! coordinator replica that serves no trend (nginx keeps each viewer on one replica) builds
//! none, and the first request after [`DEMAND_WINDOW`] without one builds it on the spot.
//! Out of demand, the first change drops the cached trend (45 MB at a million ISUs), which
//! the next request would build again anyway.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use super::model::Isu;

/// A generation's trend: the last one built and what it takes to build the next, one build
/// at a time, off the request path.
pub(super) struct TrendCache {
    /// Bumped whenever the trend may have changed.
    version: AtomicU64,
    /// The last built trend and the version it was built from (0: none, never built or
    /// dropped). Requests only clone it; building happens off the request path (see
    /// [`TrendCache::changed`]).
    built: Mutex<(u64, Trend)>,
    /// Set while a background rebuild runs: at most one at a time.
    rebuilding: AtomicBool,
    /// When the last rebuild started (held only by the one running builder).
    last_build: Mutex<Option<Instant>>,
    /// When the trend was last asked for while kept built, in milliseconds from `epoch`
    /// (0: never).
    demanded: AtomicU64,
    /// Held by a request that builds the trend on the spot (see [`TrendCache::trend`]).
    building_now: Mutex<()>,
    epoch: Instant,
}

impl TrendCache {
    /// A cache whose first build is yet to come (it serves an empty trend until then).
    pub(super) fn new() -> TrendCache {
        TrendCache {
            version: AtomicU64::new(1),
            built: Mutex::new((0, Trend::default())),
            rebuilding: AtomicBool::new(false),
            last_build: Mutex::new(None),
            demanded: AtomicU64::new(0),
            building_now: Mutex::new(()),
            epoch: Instant::now(),
        }
    }

    /// Whether the trend was asked for within [`DEMAND_WINDOW`].
    fn in_demand(&self) -> bool {
        let demanded = self.demanded.load(Ordering::Relaxed);
        demanded != 0 && self.millis() < demanded + DEMAND_WINDOW.as_millis() as u64
    }

    fn millis(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Records that the trend of `isus` changed and rebuilds it in the background. One
    /// rebuild runs at a time; it loops while changes keep arriving, so the cached trend is
    /// at most one build behind.
    pub(super) fn changed(self: &Arc<Self>, isus: &Arc<RwLock<Vec<Arc<Isu>>>>) {
        self.version.fetch_add(1, Ordering::SeqCst);
        if self.in_demand() {
            self.rebuild_in_background(isus);
        } else {
            self.drop_stale();
        }
    }

    /// Drops the cached trend when it is out of demand and stale: the next request builds
    /// one after it came in any case. Not while a request builds or takes one (it holds
    /// `building_now`, and puts the trend in demand before it lets go).
    fn drop_stale(&self) {
        // Nothing kept (the usual case on a replica serving no trend): one lock, then done.
        if self.built.lock().0 == 0 {
            return;
        }
        let Some(_building) = self.building_now.try_lock() else {
            return;
        };
        if self.in_demand() {
            return;
        }
        let dropped = {
            let mut built = self.built.lock();
            if built.0 == 0 || built.0 == self.version.load(Ordering::SeqCst) {
                return;
            }
            std::mem::take(&mut *built)
        };
        drop(dropped); // freed outside the lock
    }

    /// Builds the trend now if it is in demand (kept built), or else drops a stale one.
    pub(super) fn rebuild_if_in_demand(&self, isus: &RwLock<Vec<Arc<Isu>>>) {
        if self.in_demand() {
            self.rebuild(isus);
        } else {
            self.drop_stale();
        }
    }

    /// Starts the background rebuild unless one runs.
    fn rebuild_in_background(self: &Arc<Self>, isus: &Arc<RwLock<Vec<Arc<Isu>>>>) {
        // SeqCst on the flag and the version: the builder's "clear flag, then
        // re-read version" must not pass a writer's "bump version, then test flag".
        if self.rebuilding.swap(true, Ordering::SeqCst) {
            return; // the running rebuild will see the new version
        }
        let (cache, isus) = (self.clone(), isus.clone());
        tokio::task::spawn_blocking(move || loop {
            cache.wait_for_build_slot();
            let built = {
                let _clear = ClearOnDrop(&cache.rebuilding);
                cache.rebuild(&isus)
            };
            if cache.version.load(Ordering::SeqCst) == built {
                return;
            }
            if cache.rebuilding.swap(true, Ordering::SeqCst) {
                return; // a newer change started its own rebuild
            }
        });
    }

    /// Keeps rebuild starts at least [`TREND_REBUILD_INTERVAL`] apart (a blocking sleep: this
    /// runs on the blocking pool, in the one builder there is).
    fn wait_for_build_slot(&self) {
        let mut last = self.last_build.lock();
        if let Some(next) = last.map(|last| last + TREND_REBUILD_INTERVAL) {
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
        }
        *last = Some(Instant::now());
    }

    /// Builds the trend of `isus` at the current version into the cache; returns that version.
    pub(super) fn rebuild(&self, isus: &RwLock<Vec<Arc<Isu>>>) -> u64 {
        self.build(isus).0
    }

    /// [`TrendCache::rebuild`], also returning the trend built.
    fn build(&self, isus: &RwLock<Vec<Arc<Isu>>>) -> (u64, Trend) {
        let version = self.version.load(Ordering::SeqCst);
        // Serialise outside the lock: registrations wait for its write side.
        let isus = isus.read().clone();
        let json = build_trend(&isus);
        let trend = Trend {
            gzip: gzip(&json).map(Bytes::from),
            json: Bytes::from(json),
        };
        let mut built = self.built.lock();
        if built.0 <= version {
            *built = (version, trend.clone());
        }
        (version, trend)
    }

    /// The trend as of the last build, which is at most one build behind while the trend is
    /// asked for; the first request after a while without one builds it first.
    pub(super) fn trend(self: &Arc<Self>, isus: &Arc<RwLock<Vec<Arc<Isu>>>>) -> Trend {
        if self.in_demand() {
            self.demanded.store(self.millis(), Ordering::Relaxed);
            let kept = {
                let built = self.built.lock();
                (built.0 != 0).then(|| (built.1.clone(), built.0 == self.version.load(Ordering::SeqCst)))
            };
            if let Some((trend, current)) = kept {
                if !current {
                    self.rebuild_in_background(isus);
                }
                return trend;
            }
            // Dropped as the last demand window ended: built below.
        }
        // Not kept built: the answer is a build that began after this request came, this
        // one's or a concurrent request's (one build at a time; the others wait for it).
        // In demand only once it is built: clients moved here from another replica all at
        // once must not get a build from before they came (one from seconds ago, say).
        let arrived = self.version.load(Ordering::SeqCst);
        let _building = self.building_now.lock();
        let fresh = {
            let built = self.built.lock();
            (built.0 != 0 && built.0 >= arrived).then(|| built.1.clone())
        };
        let trend = fresh.unwrap_or_else(|| self.build(isus).1);
        self.demanded.store(self.millis(), Ordering::Relaxed);
        trend
    }
}

/// Shortest time between the starts of two trend rebuilds. Workers push every 10 ms each, so
/// without it the trend would be rebuilt (and compressed) after nearly every push, a third of
/// the coordinator's CPU under load; with it the cached trend is at most this much staler.
const TREND_REBUILD_INTERVAL: Duration = Duration::from_millis(25);

/// How long the trend is kept built after it was last asked for.
const DEMAND_WINDOW: Duration = Duration::from_secs(2);

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
    // Kept in the cache as long as the trend: without the room reserved and not used (a
    // quarter of the JSON, for about a twelfth used: 6.6 MB at a million ISUs).
    let mut compressed = encoder.finish().ok()?;
    compressed.shrink_to_fit();
    Some(compressed)
}

/// One character's entry while it is built.
struct TrendEntry<'a> {
    character: &'a str,
    /// Info, warning, critical.
    levels: [Vec<TrendCondition>; 3],
}

#[derive(Clone, Copy)]
struct TrendCondition {
    isu_id: i64,
    timestamp: i64,
}

/// One entry per character of any registered ISU; each ISU with a condition
/// appears once, under its latest condition's level; lists newest first.
///
/// Written by hand, not with serde: at a million ISUs the JSON is 41 MB, and the entries
/// found by the character string's address (a generation holds each once) rather than by
/// comparing it. The same bytes as `serde_json` wrote (a test checks).
fn build_trend(isus: &[Arc<Isu>]) -> Vec<u8> {
    let mut entries: Vec<TrendEntry<'_>> = Vec::new();
    // Each character string seen (by address) and its entry's index.
    let mut seen: Vec<(*const Box<str>, usize)> = Vec::new();
    for isu in isus {
        let address = isu.character.address();
        let index = match seen.iter().find(|(seen, _)| *seen == address) {
            Some((_, index)) => *index,
            None => {
                let index = entry_of(&mut entries, &isu.character);
                seen.push((address, index));
                index
            }
        };
        let Some((timestamp, flags)) = isu.latest_key() else {
            continue;
        };
        let level = match flags.level() {
            shared::domain::Level::Info => 0,
            shared::domain::Level::Warning => 1,
            shared::domain::Level::Critical => 2,
        };
        entries[index].levels[level].push(TrendCondition {
            isu_id: isu.id,
            timestamp,
        });
    }
    entries.sort_unstable_by(|one, other| one.character.cmp(other.character));
    let listed: usize = entries.iter().flat_map(|entry| &entry.levels).map(Vec::len).sum();
    // `{"isu_id":…,"timestamp":…}` is 40 bytes or so for ids below a million.
    let mut json = Vec::with_capacity(listed * 42 + entries.len() * 96 + 2);
    json.push(b'[');
    let mut numbers = itoa::Buffer::new();
    for (position, entry) in entries.iter_mut().enumerate() {
        if position > 0 {
            json.push(b',');
        }
        json.extend_from_slice(b"{\"character\":");
        serde_json::to_writer(&mut json, entry.character).expect("a string serialises into memory");
        for (name, list) in ["info", "warning", "critical"].iter().zip(&mut entry.levels) {
            list.sort_unstable_by_key(|item| std::cmp::Reverse(item.timestamp));
            json.extend_from_slice(b",\"");
            json.extend_from_slice(name.as_bytes());
            json.extend_from_slice(b"\":[");
            for (index, item) in list.iter().enumerate() {
                if index > 0 {
                    json.push(b',');
                }
                json.extend_from_slice(b"{\"isu_id\":");
                json.extend_from_slice(numbers.format(item.isu_id).as_bytes());
                json.extend_from_slice(b",\"timestamp\":");
                json.extend_from_slice(numbers.format(item.timestamp).as_bytes());
                json.push(b'}');
            }
            json.push(b']');
        }
        json.push(b'}');
    }
    json.push(b']');
    json
}

/// The index of `character`'s entry, made when there is none.
fn entry_of<'a>(entries: &mut Vec<TrendEntry<'a>>, character: &'a str) -> usize {
    if let Some(index) = entries.iter().position(|entry| entry.character == character) {
        return index;
    }
    entries.push(TrendEntry {
        character,
        levels: Default::default(),
    });
    entries.len() - 1
}

#[cfg(test)]
mod tests {
    use super::super::model::tests::{condition, isu};
    use super::super::model::SharedStr;
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn trend_groups_by_character_and_level_newest_first() {
        let isus: Vec<Arc<Isu>> = vec![
            Arc::new(isu(1, "すなお")),
            Arc::new(isu(2, "すなお")),
            Arc::new(isu(3, "のんき")),
            Arc::new(isu(4, "てれや")),
        ];
        isus[0].offer_latest(&condition(100, "is_dirty=false,is_overweight=false,is_broken=false"));
        isus[1].offer_latest(&condition(300, "is_dirty=false,is_overweight=false,is_broken=false"));
        isus[2].offer_latest(&condition(200, "is_dirty=true,is_overweight=true,is_broken=true"));
        let trend: serde_json::Value = serde_json::from_slice(&build_trend(&isus)).unwrap();
        let entries = trend.as_array().unwrap();
        assert_eq!(entries.len(), 3, "a character without conditions is still listed");
        let find = |name: &str| entries.iter().find(|entry| entry["character"] == name).unwrap().clone();
        let sunao = find("すなお");
        assert_eq!(
            sunao["info"],
            serde_json::json!([{"isu_id": 2, "timestamp": 300}, {"isu_id": 1, "timestamp": 100}])
        );
        assert_eq!(sunao["warning"], serde_json::json!([]));
        assert_eq!(
            find("のんき")["critical"],
            serde_json::json!([{"isu_id": 3, "timestamp": 200}])
        );
        let te = find("てれや");
        assert_eq!(
            (te["info"].clone(), te["warning"].clone(), te["critical"].clone()),
            (serde_json::json!([]), serde_json::json!([]), serde_json::json!([]))
        );
    }

    #[tokio::test]
    async fn the_trend_is_rebuilt_only_while_asked_for_and_fresh_when_asked_again() {
        let isus = Arc::new(RwLock::new(vec![Arc::new(isu(1, "すなお"))]));
        let cache = Arc::new(TrendCache::new());
        let info = "is_dirty=false,is_overweight=false,is_broken=false";
        isus.read()[0].offer_latest(&condition(100, info));
        cache.changed(&isus);
        // Never asked for: no build in the background.
        tokio::time::sleep(TREND_REBUILD_INTERVAL * 4).await;
        assert_eq!(cache.built.lock().0, 0, "built while nobody asked");
        // The first request builds it on the spot, from the latest state.
        let first: serde_json::Value = serde_json::from_slice(&cache.trend(&isus).json).unwrap();
        assert_eq!(first[0]["info"][0]["timestamp"], 100);
        // Asked for: a change is built in the background within a few intervals.
        isus.read()[0].offer_latest(&condition(200, info));
        cache.changed(&isus);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let trend: serde_json::Value = serde_json::from_slice(&cache.trend(&isus).json).unwrap();
            if trend[0]["info"][0]["timestamp"] == 200 {
                break;
            }
            assert!(Instant::now() < deadline, "the change was not built");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_trend_out_of_demand_is_dropped_at_the_next_change_and_built_again_when_asked() {
        let info = "is_dirty=false,is_overweight=false,is_broken=false";
        let isus = Arc::new(RwLock::new(vec![Arc::new(isu(1, "すなお"))]));
        isus.read()[0].offer_latest(&condition(100, info));
        let cache = Arc::new(TrendCache::new());
        let asked = cache.trend(&isus);
        assert!(!asked.json.is_empty());
        // In demand: a change keeps it (and rebuilds it in the background).
        isus.read()[0].offer_latest(&condition(200, info));
        cache.changed(&isus);
        assert_ne!(cache.built.lock().0, 0, "dropped while in demand");
        tokio::time::sleep(TREND_REBUILD_INTERVAL * 4).await;
        // The demand window passes with nothing changed: still kept (it is current).
        cache.demanded.store(0, Ordering::Relaxed);
        cache.rebuild_if_in_demand(&isus);
        assert_ne!(cache.built.lock().0, 0, "a current trend was dropped");
        // The next change drops it: nobody will be served it.
        isus.read()[0].offer_latest(&condition(300, info));
        cache.changed(&isus);
        {
            let built = cache.built.lock();
            assert_eq!(built.0, 0, "a stale trend out of demand was kept");
            assert!(built.1.json.is_empty());
        }
        // Asked again: built on the spot, from the latest state.
        let trend: serde_json::Value = serde_json::from_slice(&cache.trend(&isus).json).unwrap();
        assert_eq!(trend[0]["info"][0]["timestamp"], 300);
        // And a request in demand that finds it dropped builds it too.
        isus.read()[0].offer_latest(&condition(400, info));
        cache.demanded.store(0, Ordering::Relaxed);
        cache.changed(&isus);
        cache.demanded.store(cache.millis(), Ordering::Relaxed);
        let trend: serde_json::Value = serde_json::from_slice(&cache.trend(&isus).json).unwrap();
        assert_eq!(trend[0]["info"][0]["timestamp"], 400);
    }

    /// The trend as it was built before 2026-12-06 (serde, the characters in a map): the
    /// hand-written one must give the same bytes.
    fn build_trend_with_serde(isus: &[Arc<Isu>]) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct Entry<'a> {
            character: &'a str,
            info: Vec<Condition>,
            warning: Vec<Condition>,
            critical: Vec<Condition>,
        }
        #[derive(serde::Serialize)]
        struct Condition {
            isu_id: i64,
            timestamp: i64,
        }
        let mut by_character: BTreeMap<&str, Entry<'_>> = BTreeMap::new();
        for isu in isus {
            let entry = by_character.entry(&isu.character).or_insert_with(|| Entry {
                character: &isu.character,
                info: Vec::new(),
                warning: Vec::new(),
                critical: Vec::new(),
            });
            let Some((timestamp, flags)) = isu.latest_key() else {
                continue;
            };
            let item = Condition {
                isu_id: isu.id,
                timestamp,
            };
            match flags.level() {
                shared::domain::Level::Info => entry.info.push(item),
                shared::domain::Level::Warning => entry.warning.push(item),
                shared::domain::Level::Critical => entry.critical.push(item),
            }
        }
        let mut entries: Vec<Entry<'_>> = by_character.into_values().collect();
        for entry in &mut entries {
            for list in [&mut entry.info, &mut entry.warning, &mut entry.critical] {
                list.sort_unstable_by_key(|item| std::cmp::Reverse(item.timestamp));
            }
        }
        serde_json::to_vec(&entries).unwrap()
    }

    #[test]
    fn the_hand_written_trend_is_the_serde_one_byte_for_byte() {
        let levels = [
            "is_dirty=false,is_overweight=false,is_broken=false",
            "is_dirty=true,is_overweight=false,is_broken=false",
            "is_dirty=true,is_overweight=true,is_broken=true",
        ];
        // Characters shared and not (a string held twice), one needing escapes, ISUs
        // without a condition, equal timestamps, negative and large numbers.
        let shared_name = SharedStr::from("すなお");
        let isus: Vec<Arc<Isu>> = (1..=2_000i64)
            .map(|id| {
                let mut made = isu(id * 1_000_003, ["のんき", "a\"b\\c\n", "てれや"][(id % 3) as usize]);
                if id % 5 == 0 {
                    made.character = shared_name.clone();
                }
                if id % 11 != 0 {
                    made.offer_latest(&condition((id % 97) * 1_000_000_007 - 5, levels[(id % 3) as usize]));
                }
                Arc::new(made)
            })
            .collect();
        assert_eq!(
            String::from_utf8(build_trend(&isus)).unwrap(),
            String::from_utf8(build_trend_with_serde(&isus)).unwrap()
        );
        assert_eq!(build_trend(&[]), build_trend_with_serde(&[]));
    }

    /// This thread's CPU time (user and system).
    fn thread_cpu() -> Duration {
        let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD).unwrap();
        let micros = |time: nix::sys::time::TimeVal| time.tv_sec() as u64 * 1_000_000 + time.tv_usec() as u64;
        Duration::from_micros(micros(usage.user_time()) + micros(usage.system_time()))
    }

    /// The trend's build at a million ISUs (25 characters, as the generated dataset has,
    /// every ISU with a condition), in CPU time, each part the median of 5:
    /// `cargo test --release -p coordinator trend_build_cpu -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement (seconds in release, long in debug)"]
    fn trend_build_cpu_at_a_million_isus() {
        let levels = [
            "is_dirty=false,is_overweight=false,is_broken=false",
            "is_dirty=true,is_overweight=false,is_broken=false",
            "is_dirty=true,is_overweight=true,is_broken=true",
        ];
        let characters: Vec<SharedStr> = shared::domain::CHARACTERS
            .iter()
            .map(|name| SharedStr::from(*name))
            .collect();
        let isus: Vec<Arc<Isu>> = (1..=1_000_000i64)
            .map(|id| {
                let mut made = isu(id, "");
                made.character = characters[(id - 1) as usize % characters.len()].clone();
                made.offer_latest(&condition(
                    1_600_000_000 + (id * 7919) % 86_400,
                    levels[(id % 7 % 3) as usize],
                ));
                Arc::new(made)
            })
            .collect();
        let isus = RwLock::new(isus);
        let median = |mut times: Vec<Duration>| {
            times.sort_unstable();
            times[times.len() / 2]
        };
        let (mut json_times, mut gzip_times, mut whole_times) = (Vec::new(), Vec::new(), Vec::new());
        let (mut json_bytes, mut gzip_bytes) = (0, 0);
        let mut serde_times = Vec::new();
        for _ in 0..5 {
            let started = thread_cpu();
            let json = build_trend(&isus.read().clone());
            let built = thread_cpu();
            let compressed = gzip(&json).unwrap();
            json_times.push(built - started);
            gzip_times.push(thread_cpu() - built);
            (json_bytes, gzip_bytes) = (json.len(), compressed.len());
            // As before 2026-12-06: serde's JSON (the gzip is the same as now).
            let started = thread_cpu();
            let old = build_trend_with_serde(&isus.read().clone());
            serde_times.push(thread_cpu() - started);
            assert_eq!(old, json);
            let cache = TrendCache::new();
            let started = thread_cpu();
            cache.rebuild(&isus);
            whole_times.push(thread_cpu() - started);
        }
        println!(
            "trend at 1,000,000 ISUs, CPU medians of 5: JSON {:?} ({json_bytes} B), gzip {:?} ({gzip_bytes} B), a whole rebuild {:?}; before: serde JSON {:?}",
            median(json_times),
            median(gzip_times),
            median(whole_times),
            median(serde_times)
        );
    }

    #[test]
    fn clients_arriving_together_after_a_quiet_spell_all_get_a_fresh_trend() {
        // Built once with ISU 1 only, then not asked for while many more got conditions.
        let info = "is_dirty=false,is_overweight=false,is_broken=false";
        let isus = Arc::new(RwLock::new(vec![Arc::new(isu(1, "すなお"))]));
        isus.read()[0].offer_latest(&condition(100, info));
        let cache = Arc::new(TrendCache::new());
        cache.rebuild(&isus);
        for id in 2..=3_000 {
            let added = Arc::new(isu(id, "すなお"));
            added.offer_latest(&condition(100 + id, info));
            isus.write().push(added);
            cache.changed(&isus);
        }
        // Clients moved here at once: every answer lists all 3,000 ISUs.
        let start = std::sync::Barrier::new(8);
        let listed: Vec<usize> = std::thread::scope(|scope| {
            let askers: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        let trend: serde_json::Value = serde_json::from_slice(&cache.trend(&isus).json).unwrap();
                        trend[0]["info"].as_array().unwrap().len()
                    })
                })
                .collect();
            askers.into_iter().map(|asker| asker.join().unwrap()).collect()
        });
        assert_eq!(listed, vec![3_000; 8]);
    }
}
