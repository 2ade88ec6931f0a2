//! The control plane's placement: the current map (logged before anyone sees it), the
//! router's copy of it (the map file nginx starts from, rewritten on every change, and each
//! new version handed to nginx's control server: no reload), and the slot gate that keeps
//! registrations and migrations of the same slot apart.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::{Mutex, RwLock};
use shared::migration::Migration;
use shared::placement_map::{slot_of, Cell, PlacementMap, SLOTS};
use tokio::sync::Notify;

/// Where the router's map goes: its file, and nginx's control server if one is named.
#[derive(Debug, Clone)]
pub struct RouterFile {
    pub path: PathBuf,
    /// nginx's control server (`http://127.0.0.1:3099`): each new map is PUT to `/map`.
    pub url: Option<String>,
}

/// What the router was last given (see [`Placement::write_router`]); read without waiting
/// for an update in progress (which may wait on nginx).
#[derive(Default)]
struct RouterCopy {
    /// The version last written to the file.
    written: AtomicU64,
    /// The version nginx last took or said it holds (0: none yet, or nginx holds another).
    handed: AtomicU64,
}

/// One migration step as this replica applied it: its state after the step, and when.
#[derive(Debug, Clone)]
pub struct AppliedStep {
    /// Counts the steps this replica applied, from 1.
    pub seq: u64,
    pub at: SystemTime,
    pub migration: Migration,
}

/// How many applied steps [`Placement`] keeps for the console (about 6 a migration).
pub const APPLIED_STEPS: usize = 1024;

/// The map, the unfinished migrations and the router file (see the module documentation).
pub struct Placement {
    map: Arc<RwLock<Arc<PlacementMap>>>,
    /// Unfinished migrations by id (their last logged state).
    pub(crate) migrations: Arc<Mutex<BTreeMap<u64, Migration>>>,
    /// The last [`APPLIED_STEPS`] migration steps applied, each with its time: the console's
    /// record of migrations, steps and durations (none sampled, none missed).
    applied_steps: Mutex<VecDeque<AppliedStep>>,
    router: Option<RouterFile>,
    /// The cells this coordinator is configured with (`--worker`).
    configured: Vec<Cell>,
    /// What the router was last given.
    router_copy: RouterCopy,
    /// Router updates happen one at a time, in map order.
    router_update: tokio::sync::Mutex<()>,
    /// Migrations between their flip's commit and their target's activation, and the map
    /// from before the first of them ([`Placement::hold_router`]).
    router_holds: Mutex<RouterHolds>,
    router_client: reqwest::Client,
    secret: String,
    pub(super) gate: SlotGate,
}

impl Placement {
    /// The placement of a coordinator configured with `configured` cells, starting from
    /// `logged` (a converted journal's map and migrations) or a new map.
    pub fn new(
        configured: &[Cell],
        logged: Option<PlacementMap>,
        migrations: Vec<Migration>,
        router: Option<RouterFile>,
        secret: &str,
    ) -> anyhow::Result<Placement> {
        let map = starting_map(logged, configured)?;
        Ok(Placement {
            map: Arc::new(RwLock::new(Arc::new(map))),
            migrations: Arc::new(Mutex::new(
                migrations
                    .into_iter()
                    .map(|migration| (migration.id, migration))
                    .collect(),
            )),
            applied_steps: Mutex::default(),
            router,
            configured: configured.to_vec(),
            router_copy: RouterCopy::default(),
            router_update: tokio::sync::Mutex::new(()),
            router_holds: Mutex::default(),
            router_client: node_http::internal_client()
                .timeout(ROUTER_TIMEOUT)
                .build()
                .expect("a client without TLS settings builds"),
            secret: secret.to_owned(),
            gate: SlotGate::default(),
        })
    }

    /// The current map with the configured cells' URLs and any configured cell it lacks
    /// (see [`starting_map`]), when that differs from it: the leader commits it. An error
    /// when the map names a cell that is not configured.
    pub fn configured_map(&self) -> anyhow::Result<Option<PlacementMap>> {
        let current = self.map();
        let wanted = starting_map(Some((*current).clone()), &self.configured)?;
        Ok((wanted != *current).then_some(wanted))
    }

    pub fn map(&self) -> Arc<PlacementMap> {
        self.map.read().clone()
    }

    /// Replaces the map in memory (a committed map being applied).
    fn set_map(&self, map: PlacementMap) -> Arc<PlacementMap> {
        let map = Arc::new(map);
        *self.map.write() = map.clone();
        map
    }

    /// Takes a map from the log: a newer version, or another lineage (a group that started
    /// over). Applying the same map again is a no-op.
    pub(super) fn adopt_map(&self, map: PlacementMap) {
        let current = self.map();
        if map.lineage() != current.lineage() || map.version() > current.version() {
            self.set_map(map);
        }
    }

    /// Keeps a migration's latest state while it is unfinished.
    pub(super) fn record_migration(&self, migration: &Migration) {
        // Noted before the unfinished set changes: a reader of both, in that order, finds
        // the step of every migration the set no longer holds.
        {
            let mut steps = self.applied_steps.lock();
            let seq = steps.back().map_or(1, |last| last.seq + 1);
            if steps.len() == APPLIED_STEPS {
                steps.pop_front();
            }
            steps.push_back(AppliedStep {
                seq,
                at: SystemTime::now(),
                migration: migration.clone(),
            });
        }
        let mut migrations = self.migrations.lock();
        if migration.is_finished() {
            migrations.remove(&migration.id);
        } else {
            migrations.insert(migration.id, migration.clone());
        }
    }

    /// The migration steps applied after step `seq`, in order (as many as are kept).
    pub fn applied_steps_since(&self, seq: u64) -> Vec<AppliedStep> {
        let steps = self.applied_steps.lock();
        let first = steps.partition_point(|step| step.seq <= seq);
        steps.range(first..).cloned().collect()
    }

    /// The unfinished migrations of a snapshot, in place of those held.
    pub(super) fn replace_migrations(&self, migrations: &[Migration]) {
        *self.migrations.lock() = migrations
            .iter()
            .map(|migration| (migration.id, migration.clone()))
            .collect();
    }

    /// The unfinished migrations (a snapshot holds them).
    pub(super) fn migrations(&self) -> Vec<Migration> {
        self.migrations.lock().values().cloned().collect()
    }

    /// Gives the router the current map, if it is newer than what the router has: writes
    /// the map file (nginx starts from it), then PUTs the same text to nginx's control
    /// server, which routes by it from its next request on (no reload, no connection
    /// closed). A failed hand-over is logged and tried again by [`Placement::keep_router`];
    /// meanwhile the router routes by the map it has, and a worker forwards a stale route.
    pub async fn write_router(&self) {
        self.update_router(true).await;
    }

    /// Holds nginx and the workers on the map from before the hold until it is dropped: a
    /// migration takes it before it commits its flip and drops it once its target has
    /// activated the subject's ISUs, so that no read is sent to a target that does not show
    /// the ISU yet (404 after a 201): not by nginx, nor by a source that, given the new map,
    /// would forward the subject's reads to the target.
    pub fn hold_router(&self) -> RouterHold<'_> {
        let mut holds = self.router_holds.lock();
        if holds.count == 0 {
            holds.before = Some(self.map());
        }
        holds.count += 1;
        RouterHold(&self.router_holds)
    }

    /// The map nginx and the workers may be given now: the current one, or while a migration
    /// holds the map back (see [`Placement::hold_router`]), the one from before its flip.
    /// Every map that goes out goes through here, but the migration's own to the workers
    /// once its target has activated.
    pub fn map_for_workers(&self) -> Arc<PlacementMap> {
        // The current map first, then the hold: a migration takes its hold before it commits
        // its flip, so a flipped map read here is always seen held. Asked the other way
        // round, a flip could come in between.
        let current = self.map();
        self.router_holds.lock().before.clone().unwrap_or(current)
    }

    /// Writes the router's map file only (at start, before nginx may run: an nginx that
    /// starts reads it, and [`Placement::keep_router`] hands it to one that runs).
    pub async fn write_router_file(&self) {
        self.update_router(false).await;
    }

    async fn update_router(&self, hand: bool) {
        let Some(router) = &self.router else { return };
        let _one_at_a_time = self.router_update.lock().await;
        let copy = &self.router_copy;
        // Read once its turn came: one waiting on the lock must not take a map flipped
        // meanwhile. Neither nginx nor the file (an nginx that starts reads it) gets a map a
        // migration holds back.
        let map = self.map_for_workers();
        let version = map.version();
        let needs_file = copy.written.load(Ordering::Relaxed) < version;
        let needs_handing = hand && router.url.is_some() && copy.handed.load(Ordering::Relaxed) < version;
        if !needs_file && !needs_handing {
            return;
        }
        let text = shared::router::map_text(&map, "written by the coordinator");
        if needs_file {
            let (path, bytes) = (router.path.clone(), text.clone().into_bytes());
            let result = tokio::task::spawn_blocking(move || {
                if std::fs::read(&path).is_ok_and(|current| current == bytes) {
                    return Ok(());
                }
                shared::write_atomically(&path, &bytes)
            })
            .await;
            match result {
                Ok(Ok(())) => copy.written.store(version, Ordering::Relaxed),
                Ok(Err(error)) => {
                    // nginx must never start from a map older than one it was handed.
                    tracing::error!(%error, path = %router.path.display(), version, "writing the router map failed: not handed to nginx");
                    metrics::counter!("router_map_updates_total", "outcome" => "file_failed").increment(1);
                    return;
                }
                Err(error) => {
                    tracing::error!(%error, "writing the router map panicked");
                    return;
                }
            }
        }
        let Some(url) = router.url.as_ref().filter(|_| hand) else {
            tracing::info!(version, "router map written");
            return;
        };
        let started = std::time::Instant::now();
        match self.hand_over(url, text).await {
            Ok(answer) => {
                copy.handed.store(version, Ordering::Relaxed);
                metrics::counter!("router_map_updates_total", "outcome" => "taken").increment(1);
                metrics::gauge!("router_map_version").set(version as f64);
                set_versions_behind(self.map().version(), version);
                tracing::info!(
                    version,
                    micros = started.elapsed().as_micros() as u64,
                    answer = answer.trim(),
                    "router map handed to nginx"
                );
            }
            Err(HandOver::Refused(status, answer)) => {
                metrics::counter!("router_map_updates_total", "outcome" => "refused").increment(1);
                tracing::error!(version, %status, answer = answer.trim(), "nginx refused the router map");
            }
            Err(HandOver::Unreachable(error)) => {
                metrics::counter!("router_map_updates_total", "outcome" => "unreachable").increment(1);
                tracing::warn!(version, %error, "nginx's control server did not take the router map: it routes by its last map (tried again every second; a restarted nginx reads the file)");
            }
        }
    }

    /// PUTs a map text to the control server; a connection that fails is tried twice more.
    async fn hand_over(&self, url: &str, text: String) -> Result<String, HandOver> {
        let target = format!("{}/map", url.trim_end_matches('/'));
        let mut last_error = String::new();
        for attempt in 0..3u64 {
            if attempt > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(100 * attempt)).await;
            }
            let sent = self
                .router_client
                .put(&target)
                .header(shared::protocol::SECRET_HEADER, &self.secret)
                .body(text.clone())
                .send()
                .await;
            match sent {
                Ok(response) => {
                    let status = response.status();
                    let answer = response.text().await.unwrap_or_default();
                    return if status.is_success() {
                        Ok(answer)
                    } else {
                        Err(HandOver::Refused(status, answer))
                    };
                }
                Err(error) => last_error = error.to_string(),
            }
        }
        Err(HandOver::Unreachable(last_error))
    }

    /// What the router was last given (for the cells summary).
    pub fn router_copy(&self) -> Option<shared::protocol::cells::RouterCopy> {
        let router = self.router.as_ref()?;
        Some(shared::protocol::cells::RouterCopy {
            file_version: self.router_copy.written.load(Ordering::Relaxed),
            nginx_version: router
                .url
                .as_ref()
                .map(|_| self.router_copy.handed.load(Ordering::Relaxed)),
        })
    }

    /// What nginx says it routes by (`GET /map`'s headers): (version, lineage); `None` when
    /// it does not answer.
    async fn nginx_holds(&self, url: &str) -> Option<(u64, String)> {
        let response = self
            .router_client
            .get(format!("{}/map", url.trim_end_matches('/')))
            .header(shared::protocol::SECRET_HEADER, &self.secret)
            .send()
            .await
            .ok()?;
        let header = |name: &str| response.headers().get(name)?.to_str().ok().map(str::to_owned);
        let version = header("x-placement-version")?.parse().ok()?;
        Some((version, header("x-placement-lineage").unwrap_or_else(|| "0".to_owned())))
    }

    /// Hands the router every map it missed (nginx down or starting when it changed), and
    /// checks once a second that nginx holds the current map (another process may have
    /// written the file, nginx may have restarted from an older one): until the process ends.
    pub async fn keep_router(&self) {
        let Some(url) = self.router.as_ref().and_then(|router| router.url.clone()) else {
            return;
        };
        let mut tick = tokio::time::interval(ROUTER_RETRY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let map = self.map();
            let current = map.version();
            if self.router_copy.handed.load(Ordering::Relaxed) >= current {
                let lineage = format!("{:x}", map.lineage());
                match self.nginx_holds(&url).await {
                    Some((version, held)) if version == current && held == lineage => {}
                    Some((version, held)) => {
                        tracing::warn!(
                            version,
                            lineage = held,
                            current,
                            "nginx routes by another map than the coordinator's: handing it over again"
                        );
                        self.router_copy.handed.store(0, Ordering::Relaxed);
                    }
                    None => {}
                }
            }
            let handed = self.router_copy.handed.load(Ordering::Relaxed);
            set_versions_behind(current, handed);
            if handed < current {
                self.write_router().await;
            }
        }
    }
}

/// `router_map_versions_behind`: how many map versions nginx lags the coordinator's (0: it
/// routes by the current map). The alert `RouterMapBehind` watches it.
fn set_versions_behind(current: u64, handed: u64) {
    metrics::gauge!("router_map_versions_behind").set(current.saturating_sub(handed) as f64);
}

/// Why nginx did not take a map.
enum HandOver {
    /// It answered, and not with a success (the status and its short message).
    Refused(reqwest::StatusCode, String),
    /// No answer (not running, not listening yet, timed out).
    Unreachable(String),
}

/// How long a hand-over to nginx may take.
const ROUTER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// See [`Placement::hold_router`].
#[derive(Default)]
struct RouterHolds {
    count: usize,
    /// The map when the first of them was taken.
    before: Option<Arc<PlacementMap>>,
}

/// See [`Placement::hold_router`].
pub struct RouterHold<'a>(&'a Mutex<RouterHolds>);

impl Drop for RouterHold<'_> {
    fn drop(&mut self) {
        let mut holds = self.0.lock();
        holds.count -= 1;
        if holds.count == 0 {
            holds.before = None;
        }
    }
}

/// How often a map nginx missed is handed over again.
const ROUTER_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// The map a coordinator starts with: the log's, with the configured cells' current URLs
/// and any configured cell it does not name yet added (holding nothing); a new one when the
/// log has none. Refused when the log's map names a cell that is not configured (its ISUs
/// would have no worker).
fn starting_map(logged: Option<PlacementMap>, configured: &[Cell]) -> anyhow::Result<PlacementMap> {
    let Some(mut map) = logged else {
        let mut map = PlacementMap::new(configured.to_vec())?;
        map.new_lineage();
        return Ok(map);
    };
    for cell in map.cells() {
        if !configured.iter().any(|wanted| wanted.name == cell.name) {
            anyhow::bail!(
                "the logged placement map names cell {:?}, which is not configured: pass --worker {}=INTERNAL_URL,DEVICE_URL (drain it first to retire it)",
                cell.name,
                cell.name
            );
        }
    }
    for cell in configured {
        match map.cell_id(&cell.name) {
            Some(id) => {
                map.set_endpoints(id, &cell.internal_url, &cell.device_url)?;
            }
            None => {
                map.add_cell(cell.clone())?;
            }
        }
    }
    Ok(map)
}

/// Keeps registrations and migrations of one slot apart: a registration holds a pass on its
/// UUID's slot from its provisional call to its publish or rollback; a migration freezes the
/// slot (new registrations there wait) and waits for the passes in flight to end, so no
/// registration straddles a flip.
#[derive(Default)]
pub struct SlotGate {
    state: Mutex<GateState>,
    changed: Notify,
}

struct GateState {
    in_flight: [u32; SLOTS],
    frozen: [bool; SLOTS],
}

impl Default for GateState {
    fn default() -> Self {
        GateState {
            in_flight: [0; SLOTS],
            frozen: [false; SLOTS],
        }
    }
}

/// A registration's pass on a slot (see [`SlotGate`]).
pub struct SlotPass<'a> {
    gate: &'a SlotGate,
    slot: usize,
}

impl Drop for SlotPass<'_> {
    fn drop(&mut self) {
        self.gate.state.lock().in_flight[self.slot] -= 1;
        self.gate.changed.notify_waiters();
    }
}

/// A frozen slot; thawed when dropped.
pub struct Frozen<'a> {
    gate: &'a SlotGate,
    slot: usize,
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        self.gate.state.lock().frozen[self.slot] = false;
        self.gate.changed.notify_waiters();
    }
}

impl SlotGate {
    /// A pass on `uuid`'s slot; waits while a migration has it frozen.
    pub async fn enter(&self, uuid: &str) -> SlotPass<'_> {
        let slot = usize::from(slot_of(uuid));
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.state.lock();
                if !state.frozen[slot] {
                    state.in_flight[slot] += 1;
                    return SlotPass { gate: self, slot };
                }
            }
            changed.await;
        }
    }

    /// Freezes `slot` and waits until no registration holds a pass on it. One freezer per
    /// slot: a second waits for the first to thaw it.
    pub async fn freeze(&self, slot: u8) -> Frozen<'_> {
        let slot = usize::from(slot);
        let mut frozen = None;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.state.lock();
                if frozen.is_none() && !state.frozen[slot] {
                    state.frozen[slot] = true;
                    frozen = Some(Frozen { gate: self, slot });
                }
                if state.in_flight[slot] == 0 {
                    if let Some(frozen) = frozen.take() {
                        return frozen;
                    }
                }
            }
            changed.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_freeze_waits_for_passes_and_holds_new_ones() {
        let gate = Arc::new(SlotGate::default());
        let uuid = "0b104b95";
        let pass = gate.enter(uuid).await;
        let freezing = {
            let gate = gate.clone();
            tokio::spawn(async move {
                let _frozen = gate.freeze(0x0b).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !freezing.is_finished(),
            "the freeze waits for the registration in flight"
        );
        // Another slot is not affected.
        drop(gate.enter("1b").await);
        drop(pass);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let started = std::time::Instant::now();
        let later = gate.enter(uuid).await;
        assert!(
            started.elapsed() >= Duration::from_millis(20),
            "a new registration waits for the thaw"
        );
        drop(later);
        freezing.await.unwrap();
    }

    #[tokio::test]
    async fn an_update_waiting_for_its_turn_does_not_write_a_map_flipped_under_a_hold() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("router.map");
        let cells: Vec<Cell> = (0..2u16)
            .map(|cell| Cell {
                name: format!("{cell}"),
                internal_url: format!("http://127.0.0.1:{}", 1 + cell * 2),
                device_url: format!("http://127.0.0.1:{}", 2 + cell * 2),
            })
            .collect();
        let router = RouterFile {
            path: path.clone(),
            url: None,
        };
        let placement = Arc::new(Placement::new(&cells, None, Vec::new(), Some(router), "s").unwrap());
        placement.write_router_file().await;
        let first = placement.map().version();
        assert_eq!(placement.router_copy.written.load(Ordering::Relaxed), first);

        // An update in progress (one waiting on nginx, say) keeps the next one waiting.
        let in_progress = placement.router_update.lock().await;
        let waiting = {
            let placement = placement.clone();
            tokio::spawn(async move { placement.write_router_file().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Meanwhile a migration holds the router and flips.
        let hold = placement.hold_router();
        let mut next = (*placement.map()).clone();
        let slot = next.slots().iter().position(|cell| *cell == 0).unwrap() as u8;
        next.assign_slot(slot, 1).unwrap();
        placement.set_map(next);
        drop(in_progress);
        waiting.await.unwrap();
        assert_eq!(
            placement.router_copy.written.load(Ordering::Relaxed),
            first,
            "the flipped map waits for the hold"
        );
        // Nor does anything else that gives the workers a map (a forget, the watch).
        assert_eq!(placement.map_for_workers().version(), first);
        drop(hold);
        assert_eq!(placement.map_for_workers().version(), placement.map().version());
        placement.write_router_file().await;
        assert_eq!(
            placement.router_copy.written.load(Ordering::Relaxed),
            placement.map().version()
        );
    }

    #[test]
    fn the_starting_map_keeps_the_logged_one_and_adds_new_cells() {
        let cell = |name: &str, port: u16| Cell {
            name: name.into(),
            internal_url: format!("http://127.0.0.1:{port}"),
            device_url: format!("http://127.0.0.1:{}", port + 1),
        };
        let mut logged = PlacementMap::new(vec![cell("a", 1), cell("b", 3)]).unwrap();
        logged.assign_slot(0, 1).unwrap();
        let map = starting_map(Some(logged.clone()), &[cell("b", 5), cell("a", 1), cell("c", 7)]).unwrap();
        assert_eq!(map.slots()[0], 1, "the logged assignment is kept");
        assert_eq!(
            map.cell(1).unwrap().internal_url,
            "http://127.0.0.1:5",
            "new URLs are taken"
        );
        assert_eq!(map.cell_id("c"), Some(2));
        assert_eq!(map.slot_counts()[2], 0, "a new cell holds nothing until a rebalance");
        let error = starting_map(Some(logged), &[cell("a", 1)]).unwrap_err();
        assert!(error.to_string().contains("\"b\""), "{error}");
        assert_eq!(
            starting_map(None, &[cell("a", 1), cell("b", 3)]).unwrap().slot_counts(),
            [128, 128]
        );
    }
}
