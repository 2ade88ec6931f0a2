//! The worker's in-memory shard: ISUs (provisional or published) and their
//! condition history, indexed by level and timestamp.
//!
//! A condition is 16 bytes (timestamp, interned message id, flags); messages
//! are interned per shard because devices repeat a small set of them.
//! `Store` is a cheap-clone handle; a reset swaps the whole [`Shard`] at once,
//! so requests holding the old one finish against consistent data.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use dashmap::{DashMap, DashSet};
use parking_lot::{Mutex, RwLock};
use shared::domain::{Flags, Level, LevelSet};
use shared::graph::{hour_of, DataPoint, HourTotals, GRAPH_HOURS, HOUR};
use shared::protocol::ShardIsu;
use shared::wal::{Decoder, Encoder};

/// One stored condition. `Copy` and free of heap pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Condition {
    pub timestamp: i64,
    pub message: u32,
    pub flags: Flags,
}

/// A condition as posted, after validation.
#[derive(Debug, Clone, Copy)]
pub struct NewCondition<'a> {
    pub timestamp: i64,
    pub flags: Flags,
    pub message: &'a str,
}

impl<'a> From<&'a shared::protocol::WireCondition> for NewCondition<'a> {
    fn from(condition: &'a shared::protocol::WireCondition) -> Self {
        NewCondition {
            timestamp: condition.timestamp,
            flags: condition.flags,
            message: &condition.message,
        }
    }
}

impl NewCondition<'_> {
    pub fn to_wire(&self) -> shared::protocol::WireCondition {
        shared::protocol::WireCondition {
            timestamp: self.timestamp,
            flags: self.flags,
            message: self.message.to_owned(),
        }
    }
}

/// Condition history of one ISU: one timestamp-sorted vector per level, so a
/// level-filtered read never walks conditions of other levels.
#[derive(Debug, Default)]
struct History {
    by_level: [Vec<Condition>; 3],
}

impl History {
    /// Stores a batch given in any order, each level kept in timestamp order; returns how
    /// many conditions were new. A level that already holds a timestamp keeps its condition
    /// (a repeat), and of equal timestamps in one batch the first is kept. `message` gives a
    /// condition's message id and is called only for those stored, so a repeat interns no
    /// message. Conditions older than their level's newest are merged in once per level:
    /// k of them cost one pass over the newer part of the list, not k moves of it.
    fn insert_batch<M>(
        &mut self,
        batch: impl IntoIterator<Item = (i64, Flags, M)>,
        mut message: impl FnMut(M) -> u32,
    ) -> usize {
        let mut stored = 0;
        let mut late: [Vec<(i64, Flags, M)>; 3] = Default::default();
        for (timestamp, flags, text) in batch {
            let level = flags.level().index();
            let list = &mut self.by_level[level];
            if list.last().is_none_or(|last| last.timestamp < timestamp) {
                list.push(Condition {
                    timestamp,
                    flags,
                    message: message(text),
                });
                stored += 1;
            } else {
                late[level].push((timestamp, flags, text));
            }
        }
        for (list, mut late) in self.by_level.iter_mut().zip(late) {
            if late.is_empty() {
                continue;
            }
            // Stable: of equal timestamps the batch's first stays first, and is kept.
            late.sort_by_key(|(timestamp, ..)| *timestamp);
            late.dedup_by_key(|(timestamp, ..)| *timestamp);
            late.retain(|(timestamp, ..)| list.binary_search_by_key(timestamp, |stored| stored.timestamp).is_err());
            stored += late.len();
            let late: Vec<Condition> = late
                .into_iter()
                .map(|(timestamp, flags, text)| Condition {
                    timestamp,
                    flags,
                    message: message(text),
                })
                .collect();
            merge_older(list, &late);
        }
        stored
    }

    fn latest(&self) -> Option<Condition> {
        self.by_level
            .iter()
            .filter_map(|list| list.last().copied())
            .max_by_key(|condition| condition.timestamp)
    }

    fn len(&self) -> usize {
        self.by_level.iter().map(Vec::len).sum()
    }
}

/// Merges `late` (ascending, none of its timestamps in `list`) into ascending `list`, from
/// the back: only the part of `list` newer than `late`'s oldest moves, once.
fn merge_older(list: &mut Vec<Condition>, late: &[Condition]) {
    let Some(oldest) = late.first() else { return };
    let (old_len, start) = (
        list.len(),
        list.partition_point(|stored| stored.timestamp < oldest.timestamp),
    );
    list.resize(old_len + late.len(), *oldest);
    let (mut old, mut new) = (old_len, late.len());
    // Invariant: the next slot written from the back is old + new - 1.
    while new > 0 {
        if old > start && list[old - 1].timestamp > late[new - 1].timestamp {
            list[old + new - 1] = list[old - 1];
            old -= 1;
        } else {
            list[old + new - 1] = late[new - 1];
            new -= 1;
        }
    }
}

/// An ISU of this shard.
#[derive(Debug)]
pub struct IsuEntry {
    pub uuid: Box<str>,
    pub owner: Box<str>,
    pub name: Box<str>,
    id: AtomicI64,
    published: AtomicBool,
    /// Set while the ISU waits in the push queue, so it is queued once per batch.
    queued: AtomicBool,
    /// The entry a registration made provisional (not a migration's import): until it is
    /// published, a new leader of the coordinator replicas ends it (see
    /// [`Shard::unpublished_registrations`]).
    registration: Option<Registration>,
    history: RwLock<History>,
}

/// See [`Shard::rollback_unless_accepted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollbackRefused;

/// What a registration's provisional entry keeps of it.
#[derive(Debug)]
struct Registration {
    /// The registration request's id (replicas).
    request: Option<Box<str>>,
    /// JIA's acceptance as an earlier coordinator gave it: the coordinator's record that
    /// finishes the registration (see [`Shard::accept`]); set once.
    accepted: OnceLock<Box<str>>,
    /// The call that asks JIA (with the coordinator's record, character left out), once
    /// this worker started asking ([`Shard::activate`]): a worker that restarts with it and
    /// no answer asks again ([`Shard::asks_in_doubt`]).
    asked: OnceLock<Box<shared::protocol::JiaActivateIsu>>,
    /// The character JIA gave when this worker asked it; set once, after `asked`. With it,
    /// JIA accepted the registration and `asked`'s record finishes it.
    character: OnceLock<Box<str>>,
    /// One JIA call at a time for this registration (a repeated call waits for the first).
    asking: tokio::sync::Mutex<()>,
}

impl Registration {
    fn new(request: Option<&str>) -> Registration {
        Registration {
            request: request.map(Box::from),
            accepted: OnceLock::new(),
            character: OnceLock::new(),
            asking: tokio::sync::Mutex::new(()),
            asked: OnceLock::new(),
        }
    }

    /// The record that finishes the registration once JIA accepted it: an earlier
    /// coordinator's acceptance, or the asked call's with JIA's character.
    fn record(&self) -> Option<&str> {
        self.accepted.get().map(|record| &**record).or_else(|| {
            self.character.get()?;
            self.asked.get().map(|call| call.record.as_str())
        })
    }
}

impl IsuEntry {
    fn new(uuid: &str, owner: &str, name: &str) -> IsuEntry {
        IsuEntry {
            uuid: uuid.into(),
            owner: owner.into(),
            name: name.into(),
            id: AtomicI64::new(0),
            published: AtomicBool::new(false),
            queued: AtomicBool::new(false),
            registration: None,
            history: RwLock::new(History::default()),
        }
    }

    /// An unpublished entry of registration `id` (`registration`: made by the registration
    /// itself, not imported).
    fn provisional(uuid: &str, owner: &str, name: &str, id: i64, registration: Option<Registration>) -> Arc<IsuEntry> {
        let mut entry = IsuEntry::new(uuid, owner, name);
        entry.id.store(id, Ordering::Relaxed);
        entry.registration = registration;
        Arc::new(entry)
    }

    pub fn is_published(&self) -> bool {
        self.published.load(Ordering::Acquire)
    }

    /// Whether it is a registration's entry JIA accepted (see [`Shard::accept`] and
    /// [`Shard::activate`]).
    fn is_accepted(&self) -> bool {
        self.registration
            .as_ref()
            .is_some_and(|registration| registration.record().is_some())
    }

    /// Whether JIA accepted the registration or is being asked to ([`Shard::activate`]):
    /// either way its device may be posting, and nothing may roll it back or replace it.
    fn is_up_to_jia(&self) -> bool {
        self.is_accepted()
            || self
                .registration
                .as_ref()
                .is_some_and(|registration| registration.asking.try_lock().is_err())
    }

    pub fn id(&self) -> i64 {
        self.id.load(Ordering::Relaxed)
    }

    pub fn latest(&self) -> Option<Condition> {
        self.history.read().latest()
    }

    pub fn condition_count(&self) -> usize {
        self.history.read().len()
    }

    /// Up to `limit` conditions with `start <= timestamp < end` whose level is in
    /// `levels`, newest first.
    pub fn conditions_desc(&self, start: i64, end: i64, levels: LevelSet, limit: usize) -> Vec<Condition> {
        let history = self.history.read();
        // Per selected level, the slice inside the window; then merge from the newest end.
        let mut slices: Vec<&[Condition]> = Level::ALL
            .iter()
            .filter(|level| levels.contains(**level))
            .map(|level| window(&history.by_level[level.index()], start, end))
            .collect();
        let mut out = Vec::with_capacity(limit.min(64));
        while out.len() < limit {
            let newest = slices
                .iter()
                .enumerate()
                .filter_map(|(index, slice)| slice.last().map(|condition| (index, condition.timestamp)))
                .max_by_key(|(_, timestamp)| *timestamp);
            let Some((index, _)) = newest else { break };
            let slice = &mut slices[index];
            out.push(slice[slice.len() - 1]);
            *slice = &slice[..slice.len() - 1];
        }
        out
    }

    /// The 24 hourly points starting at the hour containing `datetime`.
    pub fn graph(&self, datetime: i64) -> Vec<GraphHour> {
        let first_hour = hour_of(datetime);
        let end = first_hour.saturating_add(HOUR * GRAPH_HOURS as i64);
        let mut hours: Vec<GraphHour> = (0..GRAPH_HOURS as i64)
            .map(|hour| GraphHour {
                start_at: first_hour + hour * HOUR,
                totals: HourTotals::default(),
                timestamps: Vec::new(),
            })
            .collect();
        let history = self.history.read();
        for list in &history.by_level {
            for condition in window(list, first_hour, end) {
                let slot = ((condition.timestamp - first_hour) / HOUR) as usize;
                let hour = &mut hours[slot];
                hour.totals.add(condition.flags);
                hour.timestamps.push(condition.timestamp);
            }
        }
        drop(history);
        for hour in &mut hours {
            // Each level's slice was ascending; three short runs merge quickly.
            hour.timestamps.sort_unstable();
        }
        hours
    }
}

/// One point of a graph before serialisation.
#[derive(Debug, Clone)]
pub struct GraphHour {
    pub start_at: i64,
    pub totals: HourTotals,
    pub timestamps: Vec<i64>,
}

impl GraphHour {
    pub fn data_point(&self) -> Option<DataPoint> {
        self.totals.data_point()
    }
}

/// The part of a timestamp-sorted slice with `start <= timestamp < end`.
fn window(list: &[Condition], start: i64, end: i64) -> &[Condition] {
    let from = list.partition_point(|condition| condition.timestamp < start);
    let to = list.partition_point(|condition| condition.timestamp < end);
    if from >= to {
        return &[];
    }
    &list[from..to]
}

/// Interned condition messages of one shard. Lock order: an ISU's history, then the
/// messages (a post interns the messages it stores while it holds its ISU's history);
/// nothing takes an ISU's history while it holds the messages.
#[derive(Debug, Default)]
pub struct Messages {
    inner: RwLock<MessageTable>,
}

#[derive(Debug, Default)]
struct MessageTable {
    ids: HashMap<Arc<str>, u32>,
    texts: Vec<Arc<str>>,
}

impl Messages {
    pub fn intern(&self, message: &str) -> u32 {
        if let Some(id) = self.inner.read().ids.get(message) {
            return *id;
        }
        let mut table = self.inner.write();
        if let Some(id) = table.ids.get(message) {
            return *id;
        }
        let id = u32::try_from(table.texts.len()).expect("fewer than 2^32 distinct messages");
        let text: Arc<str> = message.into();
        table.texts.push(text.clone());
        table.ids.insert(text, id);
        id
    }

    /// A read view resolving message ids (one lock for a whole response; never held across `.await`).
    pub fn view(&self) -> MessageView<'_> {
        MessageView {
            table: self.inner.read(),
        }
    }
}

pub struct MessageView<'a> {
    table: parking_lot::RwLockReadGuard<'a, MessageTable>,
}

impl MessageView<'_> {
    pub fn text(&self, id: u32) -> &str {
        self.table.texts.get(id as usize).map(|text| &**text).unwrap_or("")
    }
}

/// Everything a worker holds for one dataset generation.
#[derive(Debug)]
pub struct Shard {
    pub generation: u64,
    isus: DashMap<Box<str>, Arc<IsuEntry>>,
    users: DashSet<Box<str>>,
    pub messages: Messages,
    push_queue: Mutex<PushQueue>,
}

#[derive(Debug, Default)]
struct PushQueue {
    entries: Vec<Arc<IsuEntry>>,
    oldest: Option<Instant>,
}

/// What a provisional registration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provisional {
    /// A new entry (to be logged).
    Created,
    /// This registration's entry was already there (nothing changed in memory).
    Repeated,
}

/// Why a provisional registration was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum ProvisionalError {
    AlreadyExists,
}

/// Why a post was refused (the caller maps these to the API's statuses).
#[derive(Debug, PartialEq, Eq)]
pub enum PostError {
    UnknownIsu,
}

impl Shard {
    pub fn new(generation: u64) -> Shard {
        Shard {
            generation,
            isus: DashMap::new(),
            users: DashSet::new(),
            messages: Messages::default(),
            push_queue: Mutex::new(PushQueue::default()),
        }
    }

    /// Builds a shard from a reset message; initial ISUs are published.
    pub fn from_reset(generation: u64, users: &[String], isus: &[ShardIsu]) -> Shard {
        let shard = Shard::new(generation);
        for user in users {
            shard.users.insert(user.as_str().into());
        }
        for isu in isus {
            let entry = IsuEntry::new(&isu.uuid, &isu.owner, &isu.name);
            entry.id.store(isu.id, Ordering::Relaxed);
            entry.published.store(true, Ordering::Release);
            entry.history.write().insert_batch(
                isu.conditions
                    .iter()
                    .map(|condition| (condition.timestamp, condition.flags, condition.message.as_str())),
                |message| shard.messages.intern(message),
            );
            shard.isus.insert(isu.uuid.as_str().into(), Arc::new(entry));
        }
        shard
    }

    /// Conditions stored in every ISU of the shard.
    pub fn condition_count(&self) -> usize {
        self.isus.iter().map(|entry| entry.condition_count()).sum()
    }

    pub fn add_users<'a>(&self, users: impl IntoIterator<Item = &'a str>) {
        for user in users {
            self.users.insert(user.into());
        }
    }

    pub fn has_user(&self, user: &str) -> bool {
        self.users.contains(user)
    }

    /// The published ISU `uuid` if `user` owns it.
    pub fn owned_isu(&self, uuid: &str, user: &str) -> Option<Arc<IsuEntry>> {
        let entry = self.isus.get(uuid)?;
        (entry.is_published() && &*entry.owner == user).then(|| entry.clone())
    }

    pub fn isu(&self, uuid: &str) -> Option<Arc<IsuEntry>> {
        self.isus.get(uuid).map(|entry| entry.clone())
    }

    /// Registers `uuid` provisionally for registration `id`. An unpublished
    /// entry of an earlier registration (its rollback lost) is replaced, with
    /// whatever was posted to it; a published one, or a newer registration's, is kept.
    /// The same registration sent again (the coordinator retries a call whose answer
    /// it lost) is [`Provisional::Repeated`]: the entry and what was posted to it stay.
    /// `request` is the registration request's id (see [`Shard::unpublished_registrations`]).
    pub fn provisional(
        &self,
        uuid: &str,
        owner: &str,
        name: &str,
        id: i64,
        request: Option<&str>,
    ) -> Result<Provisional, ProvisionalError> {
        self.insert_provisional(uuid, owner, name, id, Some(Registration::new(request)))
    }

    /// The entry of [`Shard::provisional`] without marking it a registration's (a replayed
    /// import).
    pub fn provisional_entry(
        &self,
        uuid: &str,
        owner: &str,
        name: &str,
        id: i64,
    ) -> Result<Provisional, ProvisionalError> {
        self.insert_provisional(uuid, owner, name, id, None)
    }

    fn insert_provisional(
        &self,
        uuid: &str,
        owner: &str,
        name: &str,
        id: i64,
        registration: Option<Registration>,
    ) -> Result<Provisional, ProvisionalError> {
        match self.isus.entry(uuid.into()) {
            dashmap::Entry::Occupied(occupied)
                if !occupied.get().is_published()
                    && occupied.get().id() == id
                    && &*occupied.get().owner == owner
                    && &*occupied.get().name == name =>
            {
                Ok(Provisional::Repeated)
            }
            // JIA accepted the earlier registration (or is being asked): it is finished, never replaced.
            dashmap::Entry::Occupied(occupied)
                if occupied.get().is_published() || occupied.get().id() >= id || occupied.get().is_up_to_jia() =>
            {
                Err(ProvisionalError::AlreadyExists)
            }
            dashmap::Entry::Occupied(mut occupied) => {
                occupied.insert(IsuEntry::provisional(uuid, owner, name, id, registration));
                Ok(Provisional::Created)
            }
            dashmap::Entry::Vacant(vacant) => {
                vacant.insert(IsuEntry::provisional(uuid, owner, name, id, registration));
                Ok(Provisional::Created)
            }
        }
    }

    /// Makes registration `id`'s provisional ISU visible (idempotent); false when
    /// the UUID is unknown or belongs to another registration.
    pub fn publish(&self, uuid: &str, id: i64) -> bool {
        let Some(entry) = self.isu(uuid) else { return false };
        if entry.id() != id {
            return false;
        }
        entry.published.store(true, Ordering::Release);
        if entry.latest().is_some() {
            self.enqueue(&entry);
        }
        true
    }

    /// Marks registration `id`'s provisional ISU accepted by JIA, keeping `record` (the
    /// coordinator's, which finishes the registration: see [`Shard::unpublished_registrations`]);
    /// from then on it is never replaced by another registration. Idempotent (a first record stays); false
    /// when the UUID is unknown, belongs to another registration, or is not a registration's.
    pub fn accept(&self, uuid: &str, id: i64, record: &str) -> bool {
        self.registration_of(uuid, id)
            .map(|entry| {
                entry
                    .registration
                    .as_ref()
                    .map(|registration| registration.accepted.set(record.into()))
            })
            .is_some()
    }

    /// The entry of registration `id` of `uuid`: `None` when the UUID is unknown, belongs to
    /// another registration, or is not a registration's (a migration's import).
    fn registration_of(&self, uuid: &str, id: i64) -> Option<Arc<IsuEntry>> {
        self.isu(uuid)
            .filter(|entry| entry.id() == id && entry.registration.is_some())
    }

    /// Asks JIA to activate the provisional ISU of `call`'s registration through `ask`,
    /// once: the call is kept first (`ask` is told whether it is new, to be logged before
    /// JIA is asked), then the character JIA gave, and from then on the registration is
    /// accepted with the call's record (see [`Shard::accept`]). A call while another asks
    /// waits for that one; a call after an answer gets it without asking; after a failure,
    /// the next call asks again. `None` as [`Shard::registration_of`], or when the entry was
    /// removed meanwhile. `Ok(true)`: this call asked and JIA activated it (to be logged).
    pub async fn activate<E, F>(
        &self,
        call: &shared::protocol::JiaActivateIsu,
        ask: impl FnOnce(bool) -> F,
    ) -> Option<Result<(String, bool), E>>
    where
        F: std::future::Future<Output = Result<String, E>>,
    {
        let entry = self.registration_of(&call.uuid, call.id)?;
        let registration = entry.registration.as_ref()?;
        let _asking = registration.asking.lock().await;
        if let Some(character) = registration.character.get() {
            return Some(Ok((character.to_string(), false)));
        }
        let answer = ask(registration.asked.set(Box::new(call.clone())).is_ok()).await;
        // Removed meanwhile (a reset, a migration's forget): nothing to keep JIA's answer in.
        if !self.isu(&call.uuid).is_some_and(|now| Arc::ptr_eq(&now, &entry)) {
            return None;
        }
        Some(answer.map(|character| {
            let _ = registration.character.set(character.as_str().into());
            (character, true)
        }))
    }

    /// Replays the start of [`Shard::activate`]: keeps `call` with its registration; false
    /// as `activate`'s `None`, or when one is kept already.
    pub fn asking(&self, call: &shared::protocol::JiaActivateIsu) -> bool {
        self.registration_of(&call.uuid, call.id)
            .and_then(|entry| entry.registration.as_ref()?.asked.set(Box::new(call.clone())).ok())
            .is_some()
    }

    /// The JIA calls this worker started and has no answer to (it restarted meanwhile):
    /// asked again at its start, since the device JIA may have started posts meanwhile.
    pub fn asks_in_doubt(&self) -> Vec<shared::protocol::JiaActivateIsu> {
        self.isus
            .iter()
            .filter(|entry| !entry.is_published())
            .filter_map(|entry| {
                let registration = entry.registration.as_ref()?;
                let call = registration.asked.get()?;
                registration.record().is_none().then(|| (**call).clone())
            })
            .collect()
    }

    /// Replays JIA's answer to [`Shard::activate`] for registration `id`: false as
    /// `activate`'s `None`, or when no call was kept (the answer has no record to go with).
    pub fn activated(&self, uuid: &str, id: i64, character: &str) -> bool {
        self.registration_of(uuid, id)
            .and_then(|entry| {
                let registration = entry.registration.as_ref()?;
                registration.asked.get()?;
                let _ = registration.character.set(character.into());
                Some(())
            })
            .is_some()
    }

    /// The registrations held provisionally, neither published nor rolled back (a
    /// migration's imports are not registrations): a new leader of the coordinator
    /// replicas publishes those its log accepted and rolls back the others.
    pub fn unpublished_registrations(&self) -> Vec<shared::protocol::UnpublishedIsu> {
        self.isus
            .iter()
            .filter(|entry| !entry.is_published())
            .filter_map(|entry| {
                let registration = entry.registration.as_ref()?;
                Some(shared::protocol::UnpublishedIsu {
                    uuid: entry.uuid.to_string(),
                    id: entry.id(),
                    owner: entry.owner.to_string(),
                    request: registration.request.as_deref().map(String::from),
                    accepted: registration.record().map(String::from),
                    character: registration.character.get().map(|character| character.to_string()),
                    posted: entry.condition_count() > 0,
                })
            })
            .collect()
    }

    /// Forgets registration `id`'s ISU and what was posted to it: a provisional
    /// one, or one whose publish reached this worker while the answer was lost
    /// (the coordinator has not registered it).
    pub fn rollback(&self, uuid: &str, id: i64) -> bool {
        self.isus.remove_if(uuid, |_, entry| entry.id() == id).is_some()
    }

    /// [`Shard::rollback`] asked by a coordinator: refused (`Err`) when JIA accepted the
    /// registration, whose device's posts this worker took, or is being asked (a leader whose
    /// call timed out rolls back while this worker still waits for JIA). The sweep finishes
    /// it instead once JIA answered.
    pub fn rollback_unless_accepted(&self, uuid: &str, id: i64) -> Result<bool, RollbackRefused> {
        let mut accepted = false;
        let removed = self.isus.remove_if(uuid, |_, entry| {
            accepted = entry.id() == id && entry.is_up_to_jia() && !entry.is_published();
            entry.id() == id && !accepted
        });
        if accepted {
            return Err(RollbackRefused);
        }
        Ok(removed.is_some())
    }

    /// Creates the invisible entry of an ISU a migration brings here (registration `id`);
    /// false when this registration's entry is here already (a repeated chunk, or the ISU
    /// came back). A different registration of the UUID here is a conflict.
    pub fn import(&self, uuid: &str, owner: &str, name: &str, id: i64) -> Result<bool, ProvisionalError> {
        match self.isus.entry(uuid.into()) {
            dashmap::Entry::Occupied(occupied) if occupied.get().id() == id => Ok(false),
            dashmap::Entry::Occupied(_) => Err(ProvisionalError::AlreadyExists),
            dashmap::Entry::Vacant(vacant) => {
                vacant.insert(IsuEntry::provisional(uuid, owner, name, id, None));
                Ok(true)
            }
        }
    }

    /// Every ISU whose UUID passes `keep`.
    pub fn isus_where(&self, keep: impl Fn(&str) -> bool) -> Vec<Arc<IsuEntry>> {
        self.isus
            .iter()
            .filter(|entry| keep(entry.key()))
            .map(|entry| entry.value().clone())
            .collect()
    }

    /// Removes `uuid` whatever its state (a migration's source forgetting it); its entry.
    pub fn forget(&self, uuid: &str) -> Option<Arc<IsuEntry>> {
        self.isus.remove(uuid).map(|(_, entry)| entry)
    }

    /// The history of `entry` in its wire form (messages resolved), oldest first per level.
    pub fn wire_history(&self, entry: &IsuEntry) -> Vec<shared::protocol::WireCondition> {
        let conditions: Vec<Condition> = {
            let history = entry.history.read();
            history.by_level.iter().flatten().copied().collect()
        };
        let messages = self.messages.view();
        conditions
            .into_iter()
            .map(|condition| shared::protocol::WireCondition {
                timestamp: condition.timestamp,
                flags: condition.flags,
                message: messages.text(condition.message).to_owned(),
            })
            .collect()
    }

    /// Stores a validated batch for `uuid`, all or nothing; returns how many conditions were
    /// new. A published ISU the batch brought a new condition is queued for the pusher in the
    /// same step (as a publish and a snapshot's load queue theirs), so whatever stores a
    /// batch (the write path, replay) keeps the coordinator's latest conditions in step.
    pub fn post(&self, uuid: &str, batch: &[NewCondition<'_>]) -> Result<usize, PostError> {
        poison_panic(uuid);
        let entry = self.isu(uuid).ok_or(PostError::UnknownIsu)?;
        let inserted = entry.history.write().insert_batch(
            batch
                .iter()
                .map(|condition| (condition.timestamp, condition.flags, condition.message)),
            |message| self.messages.intern(message),
        );
        if inserted > 0 && entry.is_published() {
            self.enqueue(&entry);
        }
        Ok(inserted)
    }

    fn enqueue(&self, entry: &Arc<IsuEntry>) {
        if entry.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut queue = self.push_queue.lock();
        queue.oldest.get_or_insert_with(Instant::now);
        queue.entries.push(entry.clone());
    }

    /// Takes the ISUs whose latest condition changed since the last call, with the time the
    /// oldest of them was queued. Their `queued` flag is cleared before the pusher reads their
    /// latest condition (when it builds a batch), so a concurrent post queues them again.
    pub fn take_queued(&self) -> (Vec<Arc<IsuEntry>>, Option<Instant>) {
        let (entries, oldest) = {
            let mut queue = self.push_queue.lock();
            (std::mem::take(&mut queue.entries), queue.oldest.take())
        };
        for entry in &entries {
            entry.queued.store(false, Ordering::Release);
        }
        (entries, oldest)
    }

    /// [`Shard::take_queued`] with each ISU's latest condition (the ones with one).
    #[cfg(test)]
    fn take_changed(&self) -> (Vec<(Arc<IsuEntry>, Condition)>, Option<Instant>) {
        let (entries, oldest) = self.take_queued();
        let changed = entries
            .into_iter()
            .filter_map(|entry| entry.latest().map(|latest| (entry, latest)))
            .collect();
        (changed, oldest)
    }

    /// Every published ISU with its latest condition (a coordinator replica pulls them all).
    pub fn published_latest(&self) -> Vec<(Arc<IsuEntry>, Condition)> {
        self.isus
            .iter()
            .filter(|entry| entry.is_published())
            .filter_map(|entry| entry.latest().map(|latest| (entry.value().clone(), latest)))
            .collect()
    }

    /// Queues every published ISU with a condition (the coordinator asked for all of them again).
    pub fn requeue_published(&self) -> usize {
        let published: Vec<Arc<IsuEntry>> = self
            .isus
            .iter()
            .filter(|entry| entry.is_published())
            .map(|entry| entry.value().clone())
            .collect();
        let count = published.len();
        for entry in published {
            self.enqueue(&entry);
        }
        count
    }

    /// Puts ISUs back in the push queue after a failed push, keeping the time the oldest of
    /// them was first queued: the push lag measured when a push finally succeeds (after a
    /// partition, say) is the real one, not the time since the last failed attempt.
    pub fn requeue(&self, entries: impl IntoIterator<Item = Arc<IsuEntry>>, queued_since: Option<Instant>) {
        for entry in entries {
            self.enqueue(&entry);
        }
        if let Some(since) = queued_since {
            let mut queue = self.push_queue.lock();
            queue.oldest = Some(queue.oldest.map_or(since, |oldest| oldest.min(since)));
        }
    }
}

/// The store's own poison pill for the blast-radius tests (a fail point, off in any
/// deployment): `ingest-panic=return(UUID)` panics storing any batch of that ISU, wherever
/// it comes from (see the write path's poison check; replay skips such a record).
fn poison_panic(uuid: &str) {
    if node_http::fail_points_on() && fail::eval("ingest-panic", |target| target).flatten().as_deref() == Some(uuid) {
        panic!("poison pill for {uuid}");
    }
}

/// Tag of a snapshot record in the worker's log (`journal.rs`).
pub const SNAPSHOT_TAG: u8 = 1;

/// An ISU's state in a snapshot: unpublished (a migration's import), published, or
/// unpublished and a registration's (followed by its request id, empty if none; written
/// since replicas, so older snapshots hold only the first two).
const SNAPSHOT_PROVISIONAL: u8 = 0;
const SNAPSHOT_PUBLISHED: u8 = 1;
const SNAPSHOT_REGISTERING: u8 = 2;
/// A registration's entry JIA accepted: its request id, then its record (since 2026-12-06).
const SNAPSHOT_ACCEPTED: u8 = 3;
/// A registration's entry this worker asked JIA to activate ([`Shard::activate`]): its
/// request id, the call's record, JIA's URL and the device URL, then (`ACTIVATED`) JIA's
/// character or (`ASKING`) nothing: no answer yet (since 2026-12-07).
const SNAPSHOT_ACTIVATED: u8 = 4;
const SNAPSHOT_ASKING: u8 = 5;

impl Shard {
    /// The whole shard as one log record: generation, users, ISUs (with their
    /// registration id, published flag and every condition), then the message
    /// table. Messages come last so every id an ISU refers to is in the table
    /// even while posts intern new ones.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut encoder = Encoder::new(SNAPSHOT_TAG);
        encoder.u64(self.generation);
        let users: Vec<Box<str>> = self.users.iter().map(|user| user.key().clone()).collect();
        encoder.u32(users.len() as u32);
        for user in &users {
            encoder.str(user);
        }
        let isus: Vec<Arc<IsuEntry>> = self.isus.iter().map(|entry| entry.value().clone()).collect();
        encoder.u32(isus.len() as u32);
        for isu in &isus {
            encoder.i64(isu.id()).str(&isu.uuid).str(&isu.owner).str(&isu.name);
            match (&isu.registration, isu.is_published()) {
                (_, true) => encoder.u8(SNAPSHOT_PUBLISHED),
                (None, false) => encoder.u8(SNAPSHOT_PROVISIONAL),
                (Some(registration), false) => {
                    let accepted = registration.accepted.get();
                    let character = registration.character.get();
                    let asked = registration.asked.get();
                    let kind = match (accepted, asked, character) {
                        (Some(_), _, _) => SNAPSHOT_ACCEPTED,
                        (None, Some(_), Some(_)) => SNAPSHOT_ACTIVATED,
                        (None, Some(_), None) => SNAPSHOT_ASKING,
                        (None, None, _) => SNAPSHOT_REGISTERING,
                    };
                    encoder.u8(kind).str(registration.request.as_deref().unwrap_or(""));
                    if let Some(record) = accepted {
                        encoder.str(record);
                    }
                    if let Some(call) = asked.filter(|_| accepted.is_none()) {
                        encoder
                            .str(&call.record)
                            .str(&call.jia_service_url)
                            .str(&call.target_base_url);
                        if let Some(character) = character {
                            encoder.str(character);
                        }
                    }
                    &mut encoder
                }
            };
            let history = isu.history.read();
            for list in &history.by_level {
                encoder.u32(list.len() as u32);
                for condition in list {
                    encoder
                        .i64(condition.timestamp)
                        .u32(condition.message)
                        .u8(condition.flags.0);
                }
            }
        }
        let table = self.messages.inner.read();
        encoder.u32(table.texts.len() as u32);
        for text in &table.texts {
            encoder.str(text);
        }
        encoder.bytes
    }

    /// Rebuilds a shard from [`Shard::snapshot`]'s record (without its tag); `None` if malformed.
    pub fn from_snapshot(decoder: &mut Decoder<'_>) -> Option<Shard> {
        let shard = Shard::new(decoder.u64()?);
        for _ in 0..decoder.u32()? {
            shard.users.insert(decoder.str()?.into());
        }
        let mut max_message = None;
        for _ in 0..decoder.u32()? {
            let (id, uuid, owner, name) = (decoder.i64()?, decoder.str()?, decoder.str()?, decoder.str()?);
            let mut entry = IsuEntry::new(uuid, owner, name);
            entry.id.store(id, Ordering::Relaxed);
            let published = match decoder.u8()? {
                SNAPSHOT_PROVISIONAL => false,
                SNAPSHOT_PUBLISHED => true,
                kind @ (SNAPSHOT_REGISTERING | SNAPSHOT_ACCEPTED | SNAPSHOT_ACTIVATED | SNAPSHOT_ASKING) => {
                    let request = decoder.str()?;
                    let registration = Registration::new((!request.is_empty()).then_some(request));
                    if kind == SNAPSHOT_ACCEPTED {
                        let _ = registration.accepted.set(decoder.str()?.into());
                    } else if kind != SNAPSHOT_REGISTERING {
                        let call = shared::protocol::JiaActivateIsu {
                            generation: shard.generation,
                            uuid: uuid.to_owned(),
                            id,
                            record: decoder.str()?.to_owned(),
                            jia_service_url: decoder.str()?.to_owned(),
                            target_base_url: decoder.str()?.to_owned(),
                        };
                        let _ = registration.asked.set(Box::new(call));
                        if kind == SNAPSHOT_ACTIVATED {
                            let _ = registration.character.set(decoder.str()?.into());
                        }
                    }
                    entry.registration = Some(registration);
                    false
                }
                _ => return None,
            };
            {
                let mut history = entry.history.write();
                for list in &mut history.by_level {
                    let count = decoder.u32()? as usize;
                    list.reserve_exact(count);
                    for _ in 0..count {
                        let condition = Condition {
                            timestamp: decoder.i64()?,
                            message: decoder.u32()?,
                            flags: Flags(decoder.u8()?),
                        };
                        max_message = max_message.max(Some(condition.message));
                        list.push(condition);
                    }
                }
            }
            let entry = Arc::new(entry);
            if published {
                entry.published.store(true, Ordering::Release);
                if entry.latest().is_some() {
                    shard.enqueue(&entry);
                }
            }
            shard.isus.insert(uuid.into(), entry);
        }
        let texts = decoder.u32()?;
        if max_message.is_some_and(|max| max >= texts) {
            return None;
        }
        for _ in 0..texts {
            shard.messages.intern(decoder.str()?);
        }
        Some(shard)
    }
}

/// A message meant for another generation of the data than the current shard's (see
/// [`Store::current`]).
#[derive(Debug, PartialEq, Eq)]
pub struct StaleGeneration;

/// Cheap-clone handle to the current shard.
#[derive(Debug, Clone)]
pub struct Store {
    current: Arc<RwLock<Arc<Shard>>>,
}

impl Store {
    pub fn new(shard: Shard) -> Store {
        Store {
            current: Arc::new(RwLock::new(Arc::new(shard))),
        }
    }

    pub fn shard(&self) -> Arc<Shard> {
        self.current.read().clone()
    }

    /// The current shard, for a message meant for data of `generation`: a message meant
    /// for another generation (sent before a reset and arriving after it, or the other way
    /// round) is refused, so old and new data never mix.
    pub fn current(&self, generation: u64) -> Result<Arc<Shard>, StaleGeneration> {
        let shard = self.shard();
        if shard.generation == generation {
            Ok(shard)
        } else {
            Err(StaleGeneration)
        }
    }

    pub fn replace(&self, shard: Shard) {
        *self.current.write() = Arc::new(shard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::domain::parse_condition;

    fn flags(sitting: bool, condition: &str) -> Flags {
        Flags::new(sitting, parse_condition(condition).unwrap())
    }

    const INFO: &str = "is_dirty=false,is_overweight=false,is_broken=false";
    const WARN: &str = "is_dirty=true,is_overweight=false,is_broken=false";
    const CRIT: &str = "is_dirty=true,is_overweight=true,is_broken=true";

    fn shard_with(uuid: &str, conditions: &[(i64, &str)]) -> Shard {
        let shard = Shard::new(1);
        shard.provisional(uuid, "alice", "chair", 1, None).unwrap();
        shard.publish(uuid, 1);
        let batch: Vec<NewCondition> = conditions
            .iter()
            .map(|(timestamp, condition)| NewCondition {
                timestamp: *timestamp,
                flags: flags(true, condition),
                message: "m",
            })
            .collect();
        shard.post(uuid, &batch).unwrap();
        shard
    }

    #[test]
    fn conditions_are_newest_first_with_exclusive_end_and_inclusive_start() {
        let shard = shard_with("u", &[(10, INFO), (20, WARN), (30, CRIT), (40, INFO), (50, WARN)]);
        let isu = shard.owned_isu("u", "alice").unwrap();
        let stamps = |start, end, levels: &str, limit| -> Vec<i64> {
            isu.conditions_desc(start, end, LevelSet::parse(levels), limit)
                .iter()
                .map(|c| c.timestamp)
                .collect()
        };
        assert_eq!(stamps(0, 50, "info,warning,critical", 20), vec![40, 30, 20, 10]);
        assert_eq!(stamps(20, 51, "info,warning,critical", 20), vec![50, 40, 30, 20]);
        assert_eq!(stamps(0, 100, "warning,critical", 20), vec![50, 30, 20]);
        assert_eq!(stamps(0, 100, "info,warning,critical", 2), vec![50, 40]);
        assert_eq!(stamps(0, 100, "critical", 20), vec![30]);
        assert_eq!(stamps(0, 100, "bogus", 20), Vec::<i64>::new());
    }

    #[test]
    fn out_of_order_batches_keep_history_sorted_and_latest_by_timestamp() {
        let shard = shard_with("u", &[(100, INFO), (300, INFO)]);
        let batch = [NewCondition {
            timestamp: 200,
            flags: flags(false, INFO),
            message: "late",
        }];
        assert_eq!(shard.post("u", &batch), Ok(1));
        assert_eq!(shard.post("u", &batch), Ok(0), "a repeated report is stored once");
        let isu = shard.isu("u").unwrap();
        let all: Vec<i64> = isu
            .conditions_desc(0, 1000, LevelSet::all(), 20)
            .iter()
            .map(|c| c.timestamp)
            .collect();
        assert_eq!(all, vec![300, 200, 100]);
        assert_eq!(isu.latest().unwrap().timestamp, 300);
    }

    /// Batches in any order, with repeats inside a batch and of stored conditions, against a
    /// model: per level, the first condition seen for a timestamp is kept; each post reports
    /// how many it stored; the history reads back sorted, messages included.
    #[test]
    fn batches_in_any_order_store_what_a_model_keeps() {
        use rand::{Rng, SeedableRng};
        let mut random = rand::rngs::StdRng::seed_from_u64(12);
        let levels = [INFO, WARN, CRIT];
        let texts: Vec<String> = (0..1000).map(|index| format!("m{index}")).collect();
        for round in 0..40 {
            let shard = shard_with("u", &[]);
            let mut model: [std::collections::BTreeMap<i64, &str>; 3] = Default::default();
            // Early rounds: few timestamps (many repeats); later: long histories.
            let span = if round < 20 { 50 } else { 5_000 };
            for _ in 0..random.gen_range(1..30) {
                let batch: Vec<NewCondition> = (0..random.gen_range(1..200))
                    .map(|_| {
                        let level = random.gen_range(0..3);
                        NewCondition {
                            timestamp: random.gen_range(0..span),
                            flags: flags(false, levels[level]),
                            message: &texts[random.gen_range(0..texts.len())],
                        }
                    })
                    .collect();
                let mut expected = 0;
                for condition in &batch {
                    let level = condition.flags.level().index();
                    if let std::collections::btree_map::Entry::Vacant(slot) = model[level].entry(condition.timestamp) {
                        slot.insert(condition.message);
                        expected += 1;
                    }
                }
                assert_eq!(shard.post("u", &batch), Ok(expected), "round {round}");
            }
            let isu = shard.isu("u").unwrap();
            let history = isu.history.read();
            let messages = shard.messages.view();
            for (level, list) in history.by_level.iter().enumerate() {
                let stored: Vec<(i64, &str)> = list
                    .iter()
                    .map(|condition| (condition.timestamp, messages.text(condition.message)))
                    .collect();
                let wanted: Vec<(i64, &str)> = model[level]
                    .iter()
                    .map(|(timestamp, text)| (*timestamp, *text))
                    .collect();
                assert_eq!(stored, wanted, "round {round}, level {level}");
            }
        }
    }

    /// A repeated report stores nothing, and its message is not interned either (a device
    /// resending a stored timestamp with ever new messages does not grow the table).
    #[test]
    fn a_repeat_interns_no_message() {
        let shard = shard_with("u", &[(100, INFO), (300, INFO)]);
        let interned = || shard.messages.inner.read().texts.len();
        let before = interned();
        for index in 0..100 {
            let text = format!("new text {index}");
            let repeat = [
                NewCondition {
                    timestamp: 100,
                    flags: flags(true, INFO),
                    message: &text,
                },
                NewCondition {
                    timestamp: 300,
                    flags: flags(false, INFO),
                    message: &text,
                },
            ];
            assert_eq!(shard.post("u", &repeat), Ok(0));
        }
        assert_eq!(interned(), before);
        let stored = [NewCondition {
            timestamp: 200,
            flags: flags(true, INFO),
            message: "stored",
        }];
        assert_eq!(shard.post("u", &stored), Ok(1));
        assert_eq!(interned(), before + 1);
    }

    #[test]
    fn a_failed_push_keeps_the_time_its_isus_were_first_queued() {
        let shard = Shard::new(1);
        shard.provisional("p", "alice", "chair", 7, None).unwrap();
        assert!(shard.publish("p", 7));
        let batch = [NewCondition {
            timestamp: 1,
            flags: flags(false, INFO),
            message: "",
        }];
        shard.post("p", &batch).unwrap();
        let (changed, first) = shard.take_changed();
        let first = first.expect("queued");
        std::thread::sleep(std::time::Duration::from_millis(5));
        shard.requeue(changed.into_iter().map(|(entry, _)| entry), Some(first));
        let (changed, oldest) = shard.take_changed();
        assert_eq!(changed.len(), 1);
        assert_eq!(
            oldest,
            Some(first),
            "the lag counts from the first queueing, not the retry"
        );
    }

    #[test]
    fn unknown_isus_store_nothing_and_provisional_ones_are_invisible() {
        let shard = Shard::new(1);
        let batch = [NewCondition {
            timestamp: 1,
            flags: flags(false, INFO),
            message: "",
        }];
        assert_eq!(shard.post("nope", &batch), Err(PostError::UnknownIsu));
        shard.provisional("p", "alice", "chair", 7, None).unwrap();
        shard.post("p", &batch).unwrap();
        assert!(shard.owned_isu("p", "alice").is_none());
        assert!(shard.take_changed().0.is_empty(), "provisional ISUs are not pushed");
        assert!(shard.publish("p", 7));
        assert_eq!(shard.owned_isu("p", "alice").unwrap().id(), 7);
        assert!(shard.owned_isu("p", "bob").is_none());
        assert_eq!(
            shard.provisional("p", "bob", "x", 8, None),
            Err(ProvisionalError::AlreadyExists)
        );
        let (changed, oldest) = shard.take_changed();
        assert_eq!(changed.len(), 1);
        assert!(oldest.is_some());
        assert!(!shard.rollback("p", 6), "another registration's rollback is ignored");
        assert!(
            shard.rollback("p", 7),
            "a publish whose answer was lost can be rolled back"
        );
        assert!(shard.isu("p").is_none());
    }

    #[test]
    fn a_leftover_provisional_isu_is_replaced_with_its_conditions() {
        let shard = Shard::new(1);
        shard.provisional("p", "alice", "old", 1, None).unwrap();
        let batch = [NewCondition {
            timestamp: 5,
            flags: flags(false, INFO),
            message: "x",
        }];
        shard.post("p", &batch).unwrap();
        assert_eq!(
            shard.provisional("p", "late", "stale", 1, None),
            Err(ProvisionalError::AlreadyExists)
        );
        assert_eq!(
            shard.provisional("p", "alice", "old", 1, None),
            Ok(Provisional::Repeated),
            "the same registration sent again"
        );
        assert_eq!(
            shard.isu("p").unwrap().condition_count(),
            1,
            "a repeat keeps what was posted"
        );
        shard.provisional("p", "bob", "new", 2, None).unwrap();
        let entry = shard.isu("p").unwrap();
        assert_eq!((&*entry.owner, entry.condition_count()), ("bob", 0));
        assert!(!shard.publish("p", 1), "the old registration's publish is ignored");
        assert!(shard.publish("p", 2));
    }

    #[test]
    fn unpublished_registrations_are_the_provisional_ones_until_published_or_rolled_back() {
        let shard = Shard::new(1);
        shard.provisional("a", "alice", "chair", 7, Some("req-a")).unwrap();
        shard.provisional("b", "bob", "chair", 8, None).unwrap();
        shard.provisional("c", "carol", "chair", 9, None).unwrap();
        assert_eq!(shard.import("m", "dave", "moved", 3), Ok(true));
        assert!(shard.publish("b", 8));
        assert!(shard.rollback("c", 9));
        let held = shard.unpublished_registrations();
        assert_eq!(
            held,
            vec![shared::protocol::UnpublishedIsu {
                uuid: "a".into(),
                id: 7,
                owner: "alice".into(),
                request: Some("req-a".into()),
                accepted: None,
                character: None,
                posted: false,
            }],
            "neither a published one, a rolled-back one nor a migration's import"
        );
        // A later registration of the UUID replaces the leftover, with its own request.
        shard.provisional("a", "erin", "again", 10, Some("req-b")).unwrap();
        let held = shard.unpublished_registrations();
        assert_eq!((held[0].id, held[0].request.as_deref()), (10, Some("req-b")));
        assert!(!shard.rollback("a", 7), "the old registration's rollback is ignored");
        assert_eq!(shard.unpublished_registrations().len(), 1);
    }

    #[test]
    fn a_registration_jia_accepted_keeps_its_record_and_is_then_never_replaced() {
        let shard = Shard::new(1);
        shard.provisional("a", "alice", "chair", 7, Some("req-a")).unwrap();
        let entry = shard.isu("a").unwrap();
        assert!(!entry.is_accepted(), "a registration JIA has not accepted");
        assert!(!shard.accept("a", 6, "other"), "another registration's acceptance");
        assert!(!shard.accept("nope", 7, "record"));
        assert_eq!(shard.import("m", "dave", "moved", 3), Ok(true));
        assert!(!shard.accept("m", 3, "record"), "an import is no registration");
        assert!(shard.accept("a", 7, "first"));
        assert!(shard.accept("a", 7, "second"), "idempotent");
        assert!(entry.is_accepted());
        assert_eq!(
            shard.unpublished_registrations()[0].accepted.as_deref(),
            Some("first"),
            "the first record stays"
        );
        assert_eq!(
            shard.provisional("a", "erin", "again", 10, Some("req-b")),
            Err(ProvisionalError::AlreadyExists),
            "a later registration does not replace one JIA accepted"
        );
        assert_eq!(
            shard.provisional("a", "alice", "chair", 7, Some("req-a")),
            Ok(Provisional::Repeated)
        );
    }

    /// The JIA call of registration `id` of `uuid`, with `record`.
    fn jia_call(uuid: &str, id: i64, record: &str) -> shared::protocol::JiaActivateIsu {
        shared::protocol::JiaActivateIsu {
            generation: 4,
            uuid: uuid.into(),
            id,
            record: record.into(),
            jia_service_url: "http://jia".into(),
            target_base_url: "http://device".into(),
        }
    }

    #[tokio::test]
    async fn a_registration_asks_jia_once_keeps_its_answer_and_is_then_accepted() {
        let shard = Shard::new(1);
        shard.provisional("a", "alice", "chair", 7, Some("req-a")).unwrap();
        assert_eq!(shard.import("m", "dave", "moved", 3), Ok(true));
        let asked = std::sync::atomic::AtomicUsize::new(0);
        let ask = |answer: Result<&'static str, u16>| {
            let asked = &asked;
            move |_| async move {
                asked.fetch_add(1, Ordering::Relaxed);
                answer.map(String::from)
            }
        };
        assert!(
            shard.activate(&jia_call("m", 3, "r"), ask(Ok("x"))).await.is_none(),
            "an import"
        );
        assert!(
            shard.activate(&jia_call("a", 6, "r"), ask(Ok("x"))).await.is_none(),
            "another registration's"
        );
        assert!(shard.activate(&jia_call("nope", 7, "r"), ask(Ok("x"))).await.is_none());
        assert_eq!(asked.load(Ordering::Relaxed), 0, "JIA is asked for a registration only");

        assert_eq!(
            shard.activate(&jia_call("a", 7, "record"), ask(Err(404))).await,
            Some(Err(404))
        );
        assert!(!shard.isu("a").unwrap().is_accepted(), "a refusal accepts nothing");
        assert_eq!(
            shard.activate(&jia_call("a", 7, "record"), ask(Ok("いじっぱり"))).await,
            Some(Ok(("いじっぱり".to_owned(), true))),
            "asked again after a failure"
        );
        assert_eq!(
            shard.activate(&jia_call("a", 7, "other"), ask(Ok("ほかの"))).await,
            Some(Ok(("いじっぱり".to_owned(), false))),
            "answered from the first answer"
        );
        assert_eq!(asked.load(Ordering::Relaxed), 2);
        let held = &shard.unpublished_registrations()[0];
        assert_eq!(
            (held.accepted.as_deref(), held.character.as_deref()),
            (Some("record"), Some("いじっぱり"))
        );
        assert_eq!(shard.rollback_unless_accepted("a", 7), Err(RollbackRefused));
        assert_eq!(
            shard.provisional("a", "erin", "again", 10, None),
            Err(ProvisionalError::AlreadyExists),
            "never replaced once JIA activated it"
        );

        // While JIA is being asked, nothing rolls the registration back or replaces it.
        shard.provisional("b", "bob", "chair", 8, None).unwrap();
        let (answer, answered) = tokio::sync::oneshot::channel::<String>();
        let call_b = jia_call("b", 8, "record-b");
        let asking = shard.activate(
            &call_b,
            |_| async move { Ok::<_, u16>(answered.await.expect("answered")) },
        );
        let meanwhile = async {
            tokio::task::yield_now().await;
            let refused = shard.rollback_unless_accepted("b", 8);
            let replaced = shard.provisional("b", "erin", "again", 11, None);
            answer.send("すなお".to_owned()).unwrap();
            (refused, replaced)
        };
        let (asked, (refused, replaced)) = tokio::join!(asking, meanwhile);
        assert_eq!(refused, Err(RollbackRefused), "a rollback while JIA is asked");
        assert_eq!(
            replaced,
            Err(ProvisionalError::AlreadyExists),
            "a later registration meanwhile"
        );
        assert_eq!(asked, Some(Ok(("すなお".to_owned(), true))));
    }

    #[test]
    fn a_jia_call_started_without_an_answer_is_in_doubt_and_kept_by_a_snapshot() {
        let shard = Shard::new(4);
        let call = |uuid: &str, id: i64| jia_call(uuid, id, &format!("record-{uuid}"));
        shard.provisional("a", "alice", "chair", 7, Some("req-a")).unwrap();
        shard.provisional("b", "bob", "chair", 8, None).unwrap();
        assert!(!shard.asking(&call("a", 6)), "another registration's");
        assert!(!shard.asking(&call("z", 1)), "no such ISU");
        assert!(shard.asking(&call("a", 7)));
        assert!(!shard.asking(&call("a", 7)), "kept once (logged once)");
        assert!(shard.asking(&call("b", 8)));
        assert!(shard.activated("b", 8, "いじっぱり"));
        assert_eq!(shard.asks_in_doubt(), vec![call("a", 7)], "b has its answer");

        let snapshot = shard.snapshot();
        let mut decoder = Decoder::new(&snapshot);
        assert_eq!(decoder.u8(), Some(SNAPSHOT_TAG));
        let restored = Shard::from_snapshot(&mut decoder).expect("the snapshot reads back");
        assert!(decoder.is_empty());
        assert_eq!(restored.asks_in_doubt(), vec![call("a", 7)]);
        assert_eq!(restored.unpublished_registrations().len(), 2);
        assert!(restored.activated("a", 7, "すなお"));
        assert!(restored.asks_in_doubt().is_empty(), "answered");
    }

    #[test]
    fn a_coordinators_rollback_leaves_a_registration_jia_accepted() {
        let shard = Shard::new(1);
        shard.provisional("a", "alice", "chair", 7, Some("req-a")).unwrap();
        shard.provisional("b", "bob", "chair", 8, Some("req-b")).unwrap();
        assert!(shard.accept("a", 7, "record"));
        assert_eq!(shard.rollback_unless_accepted("a", 7), Err(RollbackRefused));
        assert!(shard.isu("a").is_some(), "the accepted registration stays");
        assert_eq!(
            shard.rollback_unless_accepted("a", 6),
            Ok(false),
            "another registration's rollback"
        );
        assert_eq!(shard.rollback_unless_accepted("b", 8), Ok(true));
        assert!(shard.isu("b").is_none());
        // A replayed rollback record is applied as logged.
        assert!(shard.rollback("a", 7));
    }

    #[test]
    fn a_snapshot_keeps_which_provisional_isus_are_registrations() {
        let shard = Shard::new(4);
        shard.provisional("a", "alice", "chair", 7, Some("req-a")).unwrap();
        shard.provisional("b", "bob", "chair", 8, None).unwrap();
        shard.provisional("c", "carol", "chair", 9, Some("req-c")).unwrap();
        shard.provisional("d", "dora", "chair", 11, Some("req-d")).unwrap();
        assert!(shard.accept("d", 11, "record-d"));
        shard.provisional("e", "emma", "chair", 12, Some("req-e")).unwrap();
        assert!(shard.asking(&jia_call("e", 12, "record-e")));
        assert!(shard.activated("e", 12, "いじっぱり"));
        assert!(shard.publish("c", 9));
        assert_eq!(shard.import("m", "dave", "moved", 3), Ok(true));
        let snapshot = shard.snapshot();
        let mut decoder = Decoder::new(&snapshot);
        assert_eq!(decoder.u8(), Some(SNAPSHOT_TAG));
        let restored = Shard::from_snapshot(&mut decoder).expect("the snapshot reads back");
        assert!(decoder.is_empty());
        let mut held = restored.unpublished_registrations();
        held.sort_by(|a, b| a.uuid.cmp(&b.uuid));
        type Held<'a> = (&'a str, i64, Option<&'a str>, Option<&'a str>, Option<&'a str>);
        let held: Vec<Held> = held
            .iter()
            .map(|isu| {
                (
                    &*isu.uuid,
                    isu.id,
                    isu.request.as_deref(),
                    isu.accepted.as_deref(),
                    isu.character.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            held,
            [
                ("a", 7, Some("req-a"), None, None),
                ("b", 8, None, None, None),
                ("d", 11, Some("req-d"), Some("record-d"), None),
                ("e", 12, Some("req-e"), Some("record-e"), Some("いじっぱり"))
            ]
        );
        assert!(restored.isu("e").unwrap().is_accepted(), "activated is accepted");
        assert!(restored.isu("d").unwrap().is_accepted(), "still accepted");
        assert!(!restored.isu("a").unwrap().is_accepted());
        assert!(restored.isu("c").unwrap().is_published());
        assert!(!restored.isu("m").unwrap().is_published());

        // A snapshot written before replicas: the state byte is 0 or 1, nothing follows it.
        let mut old = Encoder::new(SNAPSHOT_TAG);
        old.u64(4).u32(0).u32(2);
        for (id, uuid, published) in [(7, "a", 0), (9, "c", 1)] {
            old.i64(id).str(uuid).str("alice").str("chair").u8(published);
            for _ in 0..3 {
                old.u32(0);
            }
        }
        old.u32(0);
        let mut decoder = Decoder::new(&old.bytes[1..]);
        let restored = Shard::from_snapshot(&mut decoder).expect("an older snapshot reads");
        assert!(
            restored.unpublished_registrations().is_empty(),
            "unmarked: read as an import"
        );
        assert!(restored.isu("c").unwrap().is_published());

        // An unknown state byte is a malformed snapshot, not a guess.
        let mut bad = Encoder::new(SNAPSHOT_TAG);
        bad.u64(4).u32(0).u32(1).i64(7).str("a").str("alice").str("chair").u8(5);
        assert!(Shard::from_snapshot(&mut Decoder::new(&bad.bytes[1..])).is_none());
    }

    #[test]
    fn rollback_forgets_provisional_conditions() {
        let shard = Shard::new(1);
        shard.provisional("p", "alice", "chair", 7, None).unwrap();
        let batch = [NewCondition {
            timestamp: 5,
            flags: flags(false, INFO),
            message: "x",
        }];
        shard.post("p", &batch).unwrap();
        assert!(shard.rollback("p", 7));
        assert_eq!(shard.post("p", &batch), Err(PostError::UnknownIsu));
    }

    #[test]
    fn push_queue_holds_each_isu_once_per_batch() {
        let shard = shard_with("u", &[(1, INFO)]);
        let _ = shard.take_changed();
        let batch = |timestamp| {
            [NewCondition {
                timestamp,
                flags: flags(false, WARN),
                message: "",
            }]
        };
        shard.post("u", &batch(2)).unwrap();
        shard.post("u", &batch(3)).unwrap();
        let (changed, _) = shard.take_changed();
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].1.timestamp, 3);
        assert!(shard.take_changed().0.is_empty());
    }

    #[test]
    fn graph_buckets_by_hour_from_the_truncated_datetime() {
        let base = 1628348400;
        let shard = shard_with(
            "u",
            &[
                (base - 1, INFO),
                (base + 10, INFO),
                (base + 20, WARN),
                (base + 3599, CRIT),
                (base + 3600, INFO),
                (base + 24 * 3600, INFO),
            ],
        );
        let isu = shard.isu("u").unwrap();
        let graph = isu.graph(base + 1234);
        assert_eq!(graph.len(), 24);
        assert_eq!(graph[0].start_at, base);
        assert_eq!(graph[0].timestamps, vec![base + 10, base + 20, base + 3599]);
        assert_eq!(graph[0].data_point().unwrap().score, 66);
        assert_eq!(graph[1].timestamps, vec![base + 3600]);
        assert!(graph[2].data_point().is_none());
        assert_eq!(graph[23].start_at, base + 23 * 3600);
        assert!(graph[23].timestamps.is_empty());
    }

    #[test]
    fn a_condition_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Condition>(), 16);
    }

    #[test]
    fn reset_builds_published_isus_with_history() {
        let isus = vec![ShardIsu {
            id: 3,
            uuid: "u".into(),
            owner: "alice".into(),
            name: "n".into(),
            character: "c".into(),
            conditions: vec![shared::protocol::WireCondition {
                timestamp: 9,
                flags: flags(true, CRIT),
                message: "hi".into(),
            }],
        }];
        let shard = Shard::from_reset(42, &["alice".into()], &isus);
        assert!(shard.has_user("alice"));
        let isu = shard.owned_isu("u", "alice").unwrap();
        assert_eq!(isu.id(), 3);
        let latest = isu.latest().unwrap();
        assert_eq!(shard.messages.view().text(latest.message), "hi");
    }
}
