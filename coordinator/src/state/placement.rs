//! The control plane's placement: the current map (logged before anyone sees it), the
//! router's copy of it (an nginx include, rewritten on every change and reloaded by
//! [`crate::router_signal`]), and the slot gate that keeps registrations and migrations of
//! the same slot apart.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use shared::migration::Migration;
use shared::placement_map::{slot_of, Cell, PlacementMap, SLOTS};
use tokio::sync::Notify;

/// Where the router's map goes, and how nginx is told.
#[derive(Debug, Clone)]
pub struct RouterFile {
    pub path: PathBuf,
    /// nginx's pid file: its master gets SIGHUP after each rewrite (a graceful reload).
    pub nginx_pid_file: Option<PathBuf>,
}

/// The map, the unfinished migrations and the router file (see the module documentation).
pub struct Placement {
    map: Arc<RwLock<Arc<PlacementMap>>>,
    /// Unfinished migrations by id (their last logged state).
    pub(crate) migrations: Arc<Mutex<BTreeMap<u64, Migration>>>,
    router: Option<RouterFile>,
    /// Router rewrites happen one at a time, in map order: the version last written, and
    /// when nginx was last reloaded.
    router_lock: tokio::sync::Mutex<(u64, Option<std::time::Instant>)>,
    pub(super) gate: SlotGate,
}

impl Placement {
    pub fn new(map: PlacementMap, migrations: Vec<Migration>, router: Option<RouterFile>) -> Placement {
        Placement {
            map: Arc::new(RwLock::new(Arc::new(map))),
            migrations: Arc::new(Mutex::new(
                migrations
                    .into_iter()
                    .map(|migration| (migration.id, migration))
                    .collect(),
            )),
            router,
            router_lock: tokio::sync::Mutex::new((0, None)),
            gate: SlotGate::default(),
        }
    }

    pub fn map(&self) -> Arc<PlacementMap> {
        self.map.read().clone()
    }

    /// Replaces the map in memory (the caller logged it first).
    pub(super) fn set_map(&self, map: PlacementMap) -> Arc<PlacementMap> {
        let map = Arc::new(map);
        *self.map.write() = map.clone();
        map
    }

    /// What the log's snapshot needs: the map and the unfinished migrations, read when called.
    pub(super) fn snapshot_parts(&self) -> impl Fn() -> (PlacementMap, Vec<Migration>) + Send + Sync + 'static {
        let (map, migrations) = (self.map.clone(), self.migrations.clone());
        move || {
            let map = (**map.read()).clone();
            let migrations = migrations.lock().values().cloned().collect();
            (map, migrations)
        }
    }

    /// Writes the router's include for the current map (if it is newer than the last one
    /// written) and signals nginx to reload it, at most once per [`MIN_RELOAD_INTERVAL`]: the
    /// flips of a drain coalesce into a few reloads (each closes nginx's idle keep-alive
    /// connections). Failures are logged: the router keeps routing with the map it has, and
    /// a stale route is forwarded by the worker that receives it.
    pub async fn write_router(&self) {
        let Some(router) = &self.router else { return };
        let mut guard = self.router_lock.lock().await;
        let (written, last_reload) = &mut *guard;
        if let Some(last) = *last_reload {
            let wait = MIN_RELOAD_INTERVAL.saturating_sub(last.elapsed());
            tokio::time::sleep(wait).await;
        }
        let map = self.map();
        if *written >= map.version() {
            return;
        }
        let text = shared::router::nginx_include(&map);
        let path = router.path.clone();
        // A file that already holds this map (a coordinator restarted with an unchanged map)
        // is left as it is and nginx is not reloaded: a reload closes every idle kept-alive
        // client connection, and a request sent on one at that instant fails.
        let result = tokio::task::spawn_blocking(move || {
            if std::fs::read(&path).is_ok_and(|current| current == text.as_bytes()) {
                return Ok(false);
            }
            shared::write_atomically(&path, text.as_bytes()).map(|()| true)
        })
        .await;
        match result {
            Ok(Ok(false)) => {
                *written = map.version();
                tracing::info!(version = map.version(), "router map unchanged: not reloaded");
                return;
            }
            Ok(Ok(true)) => {
                *written = map.version();
                *last_reload = Some(std::time::Instant::now());
            }
            Ok(Err(error)) => {
                tracing::error!(%error, path = %router.path.display(), "writing the router map failed");
                return;
            }
            Err(error) => {
                tracing::error!(%error, "writing the router map panicked");
                return;
            }
        }
        let Some(pid_file) = &router.nginx_pid_file else {
            tracing::info!(version = map.version(), "router map written");
            return;
        };
        let started = std::time::Instant::now();
        match crate::router_signal::reload_nginx(pid_file).await {
            Ok(pid) => tracing::info!(
                version = map.version(),
                pid,
                millis = started.elapsed().as_millis() as u64,
                "router reloaded"
            ),
            Err(error) if error.is_not_running() => {
                tracing::warn!(version = map.version(), %error, "router map written, nginx not reloaded")
            }
            Err(error) => tracing::error!(version = map.version(), %error, "router reload failed"),
        }
    }
}

/// Reloads closer together than this are merged into one.
const MIN_RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The map a coordinator starts with: the log's, with the configured cells' current URLs
/// and any configured cell it does not name yet added (holding nothing); a new one when the
/// log has none. Refused when the log's map names a cell that is not configured (its ISUs
/// would have no worker).
pub fn starting_map(logged: Option<PlacementMap>, configured: &[Cell]) -> anyhow::Result<PlacementMap> {
    let Some(mut map) = logged else {
        return Ok(PlacementMap::new(configured.to_vec())?);
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
