//! One dataset generation: its users and ISUs (by UUID, by owner and in id order), the
//! latest condition of each ISU, and the registrations in flight. `/initialize` builds a new
//! one and swaps it in, so no request ever sees half a reset. It holds its trend's
//! [`TrendCache`] and tells it when the ISUs or their latest conditions change.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use dashmap::DashMap;
use parking_lot::{Mutex, RwLock};
use shared::dataset::{Dataset, DatasetIsu};
use shared::protocol::LatestItem;
use tokio::sync::watch;

use super::command::{LoggedIsu, Snapshot, Unfinished};
use super::model::{Isu, Latest, Outcome, OwnIcon, SharedStr};
use super::trend::{Trend, TrendCache};

/// Generations alive in this process: one, but for moments while `/initialize` builds the
/// next (a leader kept the one it took over with, about 290 MiB at a million ISUs, until
/// 2026-12-07).
pub const GENERATIONS_ALIVE: &str = "coordinator_generations_alive";

/// The most early latest conditions a generation keeps (ISUs registered moments ago).
const EARLY_LATEST_LIMIT: usize = 10_000;

/// Everything that `/initialize` resets.
pub struct Generation {
    pub id: u64,
    pub(super) users: RwLock<HashSet<String>>,
    /// Keyed by the ISU's own UUID (the ISU is the key: no copy).
    pub(crate) by_uuid: UuidIndex,
    /// Keyed by the owner every ISU of theirs shares.
    pub(super) by_owner: DashMap<SharedStr, Vec<Arc<Isu>>>,
    /// The characters ISUs have, each string held once.
    characters: Mutex<HashSet<SharedStr>>,
    /// All ISUs in id order (the trend is built from them).
    pub(super) all: Arc<RwLock<Vec<Arc<Isu>>>>,
    /// Registrations in flight, by UUID.
    pub(super) pending: Mutex<HashMap<String, watch::Receiver<Outcome>>>,
    /// Latest conditions pushed for ISUs this node does not know yet (a replica that has not
    /// applied their registration when the worker's push arrives), taken when it does; at
    /// most [`EARLY_LATEST_LIMIT`].
    early_latest: Mutex<HashMap<Box<str>, Latest>>,
    /// Registrations the log has seen start and not end, by UUID (logs written before 2026-12-04).
    pub(super) unfinished: Mutex<std::collections::BTreeMap<String, Unfinished>>,
    /// The UUID and owner each registration request (by its id) was for, since the
    /// generation began.
    pub(super) requests: Mutex<HashMap<String, (String, String)>>,
    pub(super) next_id: AtomicI64,
    /// Ids up to this one may have been given to registrations by a leader (committed as
    /// [`Command::Ids`](super::command::Command::Ids) before any was given).
    pub(super) ids_reserved: AtomicI64,
    /// Ids from here on are registrations (below: the dataset's ISUs).
    pub(super) first_registered_id: i64,
    /// The trend of `all`, rebuilt in the background after each change.
    trend_cache: Arc<TrendCache>,
}

impl Drop for Generation {
    fn drop(&mut self) {
        metrics::gauge!(GENERATIONS_ALIVE).decrement(1.0);
    }
}

impl Generation {
    /// The dataset's generation. Its trend is built when first asked for (see
    /// [`TrendCache::trend`]): at a million ISUs it is 45 MB that a replica serving no
    /// trend would hold for nothing.
    pub(super) fn from_dataset(id: u64, dataset: &Dataset, default_icon: &Bytes) -> Generation {
        Generation::from_isus(
            id,
            |each| {
                dataset.isus.iter().for_each(each);
                dataset.users.clone()
            },
            default_icon,
        )
    }

    /// The generation of the dataset `each_isu` hands one ISU at a time (then its users, as
    /// [`super::seed::Seed::each_isu`] does), without the whole dataset in memory; its trend
    /// is built when first asked for.
    pub(super) fn from_isus(
        id: u64,
        each_isu: impl FnOnce(&mut dyn FnMut(&DatasetIsu)) -> Vec<String>,
        default_icon: &Bytes,
    ) -> Generation {
        metrics::gauge!(GENERATIONS_ALIVE).increment(1.0);
        let mut generation = Generation {
            id,
            users: RwLock::new(HashSet::new()),
            by_uuid: UuidIndex::default(),
            by_owner: DashMap::new(),
            characters: Mutex::default(),
            all: Arc::new(RwLock::new(Vec::new())),
            pending: Mutex::new(HashMap::new()),
            early_latest: Mutex::new(HashMap::new()),
            unfinished: Mutex::new(std::collections::BTreeMap::new()),
            requests: Mutex::new(HashMap::new()),
            next_id: AtomicI64::new(1),
            ids_reserved: AtomicI64::new(0),
            first_registered_id: 1,
            trend_cache: Arc::new(TrendCache::new()),
        };
        let mut max_id = 0;
        let users = each_isu(&mut |isu| {
            max_id = max_id.max(isu.id);
            let latest = isu
                .conditions
                .iter()
                .max_by_key(|condition| condition.timestamp)
                .map(|condition| Latest {
                    timestamp: condition.timestamp,
                    flags: condition.flags,
                    message: condition.message.as_str().into(),
                });
            if !generation.has_user(&isu.owner) {
                generation.users.write().insert(isu.owner.clone());
            }
            generation.insert(Isu {
                id: isu.id,
                uuid: isu.uuid.as_str().into(),
                name: isu.name.as_str().into(),
                character: generation.held_character(&isu.character),
                owner: generation.held_owner(&isu.owner),
                icon: OwnIcon::of(
                    isu.image.as_ref().map(|image| Bytes::from(image.clone())),
                    None,
                    default_icon,
                ),
                latest: Mutex::new(latest),
            });
        });
        generation.users.get_mut().extend(users);
        generation.next_id = AtomicI64::new(max_id + 1);
        generation.first_registered_id = max_id + 1;
        // Each owner's list holds what it was given, not the room its growth left (a third
        // more for ten ISUs an owner, as the generated dataset has).
        generation
            .by_owner
            .iter_mut()
            .for_each(|mut owned| owned.shrink_to_fit());
        generation
    }

    /// The dataset's generation with the users and registered ISUs of a snapshot.
    pub(super) fn from_snapshot(
        snapshot: &Snapshot,
        each_isu: impl FnOnce(&mut dyn FnMut(&DatasetIsu)) -> Vec<String>,
        default_icon: &Bytes,
    ) -> Generation {
        let generation = Generation::from_isus(snapshot.generation, each_isu, default_icon);
        generation.users.write().extend(snapshot.users.iter().cloned());
        for isu in &snapshot.isus {
            generation.next_id.fetch_max(isu.id + 1, Ordering::AcqRel);
            generation.insert(isu_of(isu, default_icon));
        }
        *generation.unfinished.lock() = snapshot
            .unfinished
            .iter()
            .map(|unfinished| (unfinished.uuid.clone(), unfinished.clone()))
            .collect();
        generation.ids_reserved.store(snapshot.ids_reserved, Ordering::Release);
        generation
    }

    /// What the log must hold to rebuild this generation: users and registered ISUs (the
    /// caller adds the placement).
    pub(super) fn to_snapshot(&self, jia_service_url: &str) -> Snapshot {
        let mut users: Vec<String> = self.users.read().iter().cloned().collect();
        users.sort();
        let isus = self.registered().iter().map(|isu| logged(isu)).collect();
        Snapshot {
            generation: self.id,
            jia_service_url: jia_service_url.to_owned(),
            users,
            isus,
            unfinished: self.unfinished.lock().values().cloned().collect(),
            ids_reserved: self.ids_reserved.load(Ordering::Acquire),
            ..Snapshot::default()
        }
    }

    /// The character string the generation holds for `character`, or a new one (kept by
    /// [`Generation::insert`]): loading a dataset copies no character or owner string it
    /// holds already.
    fn held_character(&self, character: &str) -> SharedStr {
        self.characters
            .lock()
            .get(character)
            .cloned()
            .unwrap_or_else(|| character.into())
    }

    /// The owner string the generation holds for `owner`, or a new one (see above).
    fn held_owner(&self, owner: &str) -> SharedStr {
        self.by_owner
            .get(owner)
            .map_or_else(|| owner.into(), |owned| owned.key().clone())
    }

    /// Adds an ISU (dataset loading); see [`Generation::publish`] for registrations. Its
    /// owner and character become the strings the generation holds already, if it does.
    pub(super) fn insert(&self, mut isu: Isu) -> Arc<Isu> {
        if let Some(owned) = self.by_owner.get(&*isu.owner) {
            isu.owner = owned.key().clone();
        }
        {
            let mut characters = self.characters.lock();
            match characters.get(&*isu.character) {
                Some(held) => isu.character = held.clone(),
                None => {
                    characters.insert(isu.character.clone());
                }
            }
        }
        let isu = Arc::new(isu);
        self.by_uuid.insert(isu.clone());
        let mut owned = self.by_owner.entry(isu.owner.clone()).or_default();
        let position = owned.partition_point(|other| other.id < isu.id);
        owned.insert(position, isu.clone());
        drop(owned);
        let mut all = self.all.write();
        let position = all.partition_point(|other| other.id < isu.id);
        all.insert(position, isu.clone());
        drop(all);
        isu
    }

    /// Adds a registered ISU of the log unless it is here already (a command committed
    /// twice, or a snapshot overlapping the commands after it).
    pub(super) fn publish_logged(&self, isu: &LoggedIsu, default_icon: &Bytes) {
        if self.by_uuid.contains_key(isu.uuid.as_str()) {
            return;
        }
        self.next_id.fetch_max(isu.id + 1, Ordering::AcqRel);
        self.publish(isu_of(isu, default_icon));
    }

    /// Adds a registered ISU and schedules a trend rebuild.
    pub(super) fn publish(&self, isu: Isu) -> Arc<Isu> {
        let isu = self.insert(isu);
        // Only now: a push that still missed it kept its condition early (see `keep_early`).
        self.adopt_early(&isu);
        self.changed();
        isu
    }

    /// Gives `isu` the condition a push kept for it before it was known, if newer.
    fn adopt_early(&self, isu: &Isu) -> bool {
        let Some(early) = self.early_latest.lock().remove(&*isu.uuid) else {
            return false;
        };
        let mut latest = isu.latest.lock();
        let newer = latest.as_ref().is_none_or(|known| known.timestamp < early.timestamp);
        if newer {
            *latest = Some(early);
        }
        newer
    }

    pub(super) fn remove(&self, uuid: &str) {
        let Some(isu) = self.by_uuid.remove(uuid) else {
            return;
        };
        if let Some(mut owned) = self.by_owner.get_mut(&*isu.owner) {
            owned.retain(|other| &*other.uuid != uuid);
        }
        self.all.write().retain(|other| &*other.uuid != uuid);
        self.changed();
    }

    /// The ISUs registered in this generation (not the dataset's), in registration order.
    pub(super) fn registered(&self) -> Vec<Arc<Isu>> {
        self.all
            .read()
            .iter()
            .filter(|isu| isu.id >= self.first_registered_id)
            .cloned()
            .collect()
    }

    /// How many registered ISUs `map` gives each of its cells.
    pub fn isus_per_cell(&self, map: &shared::placement_map::PlacementMap) -> Vec<usize> {
        let mut counts = vec![0; map.cells().len()];
        for isu in self.all.read().iter() {
            counts[usize::from(map.owner(&isu.uuid))] += 1;
        }
        counts
    }

    pub fn has_user(&self, user: &str) -> bool {
        self.users.read().contains(user)
    }

    /// Creates the user if absent; true when it was created.
    pub fn add_user(&self, user: &str) -> bool {
        if self.has_user(user) {
            return false;
        }
        self.users.write().insert(user.to_owned())
    }

    /// The ISU `uuid` if `user` owns it.
    pub fn owned_isu(&self, uuid: &str, user: &str) -> Option<Arc<Isu>> {
        self.by_uuid
            .get(uuid)
            .filter(|isu| &*isu.owner == user)
            .map(|isu| isu.clone())
    }

    /// The user's ISUs, most recently registered first.
    pub fn isus_of(&self, user: &str) -> Vec<Arc<Isu>> {
        self.by_owner
            .get(user)
            .map(|owned| owned.iter().rev().cloned().collect())
            .unwrap_or_default()
    }

    /// Applies a worker's batch; returns how many ISUs got a newer latest condition.
    pub fn apply_latest(&self, items: &[LatestItem<'_>]) -> usize {
        let changed = items
            .iter()
            .filter(|item| match self.by_uuid.get(item.uuid) {
                Some(isu) => isu.offer_latest(item),
                None => self.keep_early(item),
            })
            .count();
        if changed > 0 {
            self.changed();
        }
        changed
    }

    /// Keeps the newest pushed condition of an ISU not known yet (see `early_latest`). The
    /// ISU may have been published since it was looked up: then it takes the condition at
    /// once (true), as `publish` takes what was kept before its insert, so a condition
    /// pushed while the ISU is being published is never left behind.
    fn keep_early(&self, item: &LatestItem<'_>) -> bool {
        {
            let mut early = self.early_latest.lock();
            let full = early.len() >= EARLY_LATEST_LIMIT;
            let newer = early.get(item.uuid).is_none_or(|kept| kept.timestamp < item.timestamp);
            if !newer || (full && !early.contains_key(item.uuid)) {
                return false;
            }
            early.insert(
                item.uuid.into(),
                Latest {
                    timestamp: item.timestamp,
                    flags: item.flags,
                    message: item.message.into(),
                },
            );
        }
        let published = self.by_uuid.get(item.uuid).map(|isu| isu.clone());
        published.is_some_and(|isu| self.adopt_early(&isu))
    }

    /// Records that the trend may have changed (rebuilt in the background).
    fn changed(&self) {
        self.trend_cache.changed(&self.all);
    }

    /// Builds the trend now if it is asked for (a replica about to serve, after it took
    /// every latest condition); otherwise the next request builds it.
    pub(super) fn rebuild_trend_now(&self) {
        self.trend_cache.rebuild_if_in_demand(&self.all);
    }

    /// The trend as of the last build (see [`TrendCache::trend`]).
    pub fn trend(&self) -> Trend {
        self.trend_cache.trend(&self.all)
    }
}

/// The ISUs of a generation by UUID: a set of the ISUs themselves, hashed and compared by
/// their UUID, so an entry is one pointer (a map from a copy of the UUID was 24 bytes and
/// the copy's).
#[derive(Default)]
pub(crate) struct UuidIndex(DashMap<ByUuid, ()>);

/// An ISU as its UUID (see [`UuidIndex`]).
pub(crate) struct ByUuid(Arc<Isu>);

/// An ISU found in a [`UuidIndex`] (its shard is read-locked while this lives).
pub(crate) struct IndexedIsu<'a>(dashmap::mapref::one::Ref<'a, ByUuid, ()>);

impl std::ops::Deref for IndexedIsu<'_> {
    type Target = Arc<Isu>;
    fn deref(&self) -> &Arc<Isu> {
        &self.0.key().0
    }
}

impl std::borrow::Borrow<str> for ByUuid {
    fn borrow(&self) -> &str {
        &self.0.uuid
    }
}

impl PartialEq for ByUuid {
    fn eq(&self, other: &ByUuid) -> bool {
        self.0.uuid == other.0.uuid
    }
}

impl Eq for ByUuid {}

impl std::hash::Hash for ByUuid {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.uuid.hash(state);
    }
}

impl UuidIndex {
    /// The ISU of `uuid` (a `&str`), held while the guard lives.
    pub(crate) fn get<Q>(&self, uuid: &Q) -> Option<IndexedIsu<'_>>
    where
        ByUuid: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.0.get(uuid).map(IndexedIsu)
    }

    pub(crate) fn contains_key(&self, uuid: &str) -> bool {
        self.0.contains_key(uuid)
    }

    /// Adds `isu`, in place of the ISU of its UUID if one is held.
    fn insert(&self, isu: Arc<Isu>) {
        match self.0.entry(ByUuid(isu)) {
            dashmap::Entry::Occupied(held) => {
                held.replace_entry(());
            }
            dashmap::Entry::Vacant(vacant) => {
                vacant.insert(());
            }
        }
    }

    fn remove(&self, uuid: &str) -> Option<Arc<Isu>> {
        self.0.remove(uuid).map(|(held, ())| held.0)
    }
}

/// A logged ISU as a generation holds it, without a latest condition yet (the inverse of
/// [`logged`]).
fn isu_of(isu: &LoggedIsu, default_icon: &Bytes) -> Isu {
    Isu {
        id: isu.id,
        uuid: isu.uuid.as_str().into(),
        name: isu.name.as_str().into(),
        character: isu.character.as_str().into(),
        owner: isu.owner.as_str().into(),
        // An icon named by its hash whose bytes this replica lacks: fetched when asked.
        icon: OwnIcon::of(isu.image.clone(), isu.icon, default_icon),
        latest: Mutex::new(None),
    }
}

/// An ISU as the log holds it (the default icon is not copied into the log).
pub(super) fn logged(isu: &Isu) -> LoggedIsu {
    LoggedIsu {
        id: isu.id,
        uuid: isu.uuid.to_string(),
        name: isu.name.to_string(),
        character: isu.character.to_string(),
        owner: isu.owner.to_string(),
        image: isu
            .icon
            .as_ref()
            .filter(|icon| icon.hash.is_none())
            .map(|icon| icon.bytes.clone()),
        icon: isu.icon_hash(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::tests::{condition, isu};
    use super::*;

    #[test]
    fn an_isu_holds_only_an_icon_of_its_own_and_logs_it_as_it_came() {
        let default_icon = Bytes::from_static(b"default");
        let logged_as = |image: Option<&'static [u8]>, hash: Option<crate::icons::IconHash>| {
            let mut logged_isu = super::super::command::tests::isu(1, "u", image);
            logged_isu.icon = hash;
            let held = isu_of(&logged_isu, &default_icon);
            (held.icon.is_some(), logged(&held) == logged_isu)
        };
        // The default icon: none held, none logged.
        assert_eq!(logged_as(None, None), (false, true));
        // Bytes equal to the default icon's are the default icon.
        let (own, _) = logged_as(Some(b"default"), None);
        assert!(!own);
        // A lone coordinator's own icon (its bytes), a replica's by hash with or without its bytes.
        assert_eq!(logged_as(Some(b"mine"), None), (true, true));
        let hash = crate::icons::hash_of(b"mine");
        let with_bytes = super::super::command::tests::isu(1, "u", Some(b"mine"));
        let held = isu_of(
            &LoggedIsu {
                icon: Some(hash),
                ..with_bytes
            },
            &default_icon,
        );
        assert_eq!(held.icon.as_ref().map(|icon| &icon.bytes[..]), Some(&b"mine"[..]));
        assert_eq!((logged(&held).icon, logged(&held).image), (Some(hash), None));
        assert_eq!(logged_as(None, Some(hash)), (true, true));
    }

    #[test]
    fn isus_share_their_owner_character_and_index_key_strings() {
        let dataset = shared::dataset::generated::generate_with_isu_count(100);
        let generation = Generation::from_dataset(1, &dataset, &Bytes::new());
        let mine = generation.isus_of(&dataset.isus[50].owner);
        assert!(mine.len() > 1);
        assert!(mine
            .windows(2)
            .all(|pair| SharedStr::ptr_eq(&pair[0].owner, &pair[1].owner)));
        let owner_key = generation.by_owner.get(&*mine[0].owner).unwrap().key().clone();
        assert!(
            SharedStr::ptr_eq(&owner_key, &mine[0].owner),
            "the owner index holds the same string"
        );
        let indexed = generation.by_uuid.get(&*mine[0].uuid).unwrap().clone();
        assert!(Arc::ptr_eq(&indexed, &mine[0]), "the UUID index holds the ISU itself");
        let all = generation.all.read().clone();
        let same_character: Vec<_> = all.iter().filter(|isu| isu.character == all[0].character).collect();
        assert!(same_character.len() > 1);
        assert!(same_character
            .iter()
            .all(|isu| SharedStr::ptr_eq(&isu.character, &all[0].character)));
        // A registration later shares them too.
        let mut registered = isu(1_000, &all[0].character);
        registered.owner = mine[0].owner.to_string().as_str().into();
        let registered = generation.publish(registered);
        assert!(SharedStr::ptr_eq(&registered.owner, &mine[0].owner));
        assert!(SharedStr::ptr_eq(&registered.character, &all[0].character));
    }

    #[test]
    fn a_condition_pushed_while_its_isu_is_published_is_not_left_behind() {
        let generation = Generation::from_dataset(1, &Dataset::default(), &Bytes::new());
        let info = "is_dirty=false,is_overweight=false,is_broken=false";
        // Pushed before the ISU is known: kept early, taken when it is published.
        let early = LatestItem {
            uuid: "uuid-7",
            ..condition(100, info)
        };
        assert_eq!(generation.apply_latest(&[early]), 0);
        let published = generation.publish(isu(7, "すなお"));
        assert_eq!(published.latest_key().map(|(timestamp, _)| timestamp), Some(100));
        // A push that looked the ISU up before its insert and keeps its condition early
        // after it: the published ISU takes it at once.
        let late = LatestItem {
            uuid: "uuid-7",
            ..condition(200, info)
        };
        assert!(generation.keep_early(&late));
        assert_eq!(published.latest_key().map(|(timestamp, _)| timestamp), Some(200));
        assert!(generation.early_latest.lock().is_empty());
    }

    /// Where a generation's memory goes, per ISU, in bytes requested (the allocator's own
    /// rounding not counted): `cargo test --release -p coordinator generation_memory --
    /// --ignored --nocapture` (`ISUS`, default a million).
    #[test]
    #[ignore = "a measurement (seconds in release, long in debug)"]
    fn generation_memory_per_isu() {
        let isus: usize = std::env::var("ISUS").map_or(1_000_000, |count| count.parse().unwrap());
        let per_isu = |bytes: isize| bytes as f64 / isus as f64;
        let _profiler = dhat::Profiler::builder().testing().build();
        let start = crate::heap_live();
        let dataset = shared::dataset::generated::generate_with_isu_count(isus);
        let with_dataset = crate::heap_live();
        let mut generation = Generation::from_dataset(1, &dataset, &Bytes::new());
        let built = crate::heap_live();
        drop(dataset);
        let generation_bytes = crate::heap_live() - start;
        println!(
            "dataset {:.0} B/ISU; the build's allocations {:.0}; the generation alone {:.0}",
            per_isu(with_dataset - start),
            per_isu(built - with_dataset),
            per_isu(generation_bytes)
        );
        let before = crate::heap_live();
        let all = generation.all.read().clone();
        for chunk in all.chunks(1_000) {
            let batch: Vec<LatestItem<'_>> = chunk
                .iter()
                .map(|isu| LatestItem {
                    uuid: &isu.uuid,
                    timestamp: i64::MAX,
                    flags: shared::domain::Flags(0),
                    message: "simulated",
                })
                .collect();
            generation.apply_latest(&batch);
        }
        drop(all);
        let pushed = crate::heap_live() - before;
        // Asked for after the pushes: a trend in demand is rebuilt on a runtime's blocking
        // threads at each change.
        let before = crate::heap_live();
        let built_trend = generation.trend();
        drop(built_trend);
        let trend = crate::heap_live() - before;
        let sizes = |isu: &Isu| {
            let message = isu.latest.lock().as_ref().map_or(0, |latest| latest.message.len());
            (isu.uuid.len(), isu.name.len(), message)
        };
        let (uuids, names, messages) = generation
            .all
            .read()
            .iter()
            .map(|isu| sizes(isu))
            .fold((0, 0, 0), |sum, one| (sum.0 + one.0, sum.1 + one.1, sum.2 + one.2));
        println!(
            "  of which: Arc<Isu> {} B each; uuid {:.1}, name {:.1}, message {:.1} B/ISU (heap)",
            std::mem::size_of::<Isu>() + 16,
            per_isu(uuids as isize),
            per_isu(names as isize),
            per_isu(messages as isize)
        );
        let mut measure = |name: &str, take: &mut dyn FnMut(&mut Generation)| {
            let before = crate::heap_live();
            take(&mut generation);
            println!("  {name}: {:.1} B/ISU", per_isu(before - crate::heap_live()));
        };
        println!(
            "trend cache {:.1} B/ISU; latest conditions pushed (\"simulated\") {:+.1} B/ISU",
            per_isu(trend),
            per_isu(pushed)
        );
        measure("trend cache", &mut |generation| {
            generation.trend_cache = Arc::new(TrendCache::new())
        });
        measure("by_uuid", &mut |generation| generation.by_uuid = UuidIndex::default());
        measure("by_owner", &mut |generation| generation.by_owner = DashMap::new());
        measure("users", &mut |generation| *generation.users.write() = HashSet::new());
        measure("all (and the ISUs)", &mut |generation| {
            *generation.all.write() = Vec::new()
        });
        println!("  left: {:.1} B/ISU", per_isu(crate::heap_live() - start));
    }
}
