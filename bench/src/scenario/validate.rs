//! Independent checks of responses against what the simulated devices really sent.
//!
//! Each check returns the first problem it finds as a sentence; the caller counts it as one
//! error, as the official bench counts one error per failed verification.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use super::api::{ConditionItem, GraphPoint, Isu, IsuListItem, TrendEntry};
use crate::model::{expected_graph_data, is_valid_condition_string, Level, SentCondition, CHARACTERS};
use jia_sim::JiaHandle;

/// Largest page of `GET /api/condition`.
pub const CONDITION_PAGE_LIMIT: usize = 20;
/// Hours in a graph.
pub const GRAPH_HOURS: usize = 24;
const HOUR: i64 = 3600;

/// Where the validator looks up what a device sent.
pub trait SentLog {
    /// The condition the device of `isu_uuid` sent with exactly this timestamp.
    fn find(&self, isu_uuid: &str, timestamp: i64) -> Option<SentCondition>;
}

impl SentLog for JiaHandle {
    fn find(&self, isu_uuid: &str, timestamp: i64) -> Option<SentCondition> {
        self.find_sent(isu_uuid, timestamp)
    }
}

/// A [`SentLog`] that remembers the last condition found per ISU. Trend checks ask for each
/// ISU's latest condition again and again (every viewer, every poll); answering repeats from
/// this small, warm map spares a search of a log that is cold in the cache.
pub struct LastFound<L> {
    inner: L,
    last: std::sync::Mutex<HashMap<String, SentCondition>>,
}

impl<L: SentLog> LastFound<L> {
    pub fn new(inner: L) -> LastFound<L> {
        LastFound {
            inner,
            last: std::sync::Mutex::new(HashMap::new()),
        }
    }
}

impl<L: SentLog> SentLog for LastFound<L> {
    fn find(&self, isu_uuid: &str, timestamp: i64) -> Option<SentCondition> {
        let mut last = self.last.lock().expect("last found poisoned");
        if let Some(found) = last.get(isu_uuid).filter(|found| found.timestamp == timestamp) {
            return Some(*found);
        }
        let found = self.inner.find(isu_uuid, timestamp)?;
        match last.get_mut(isu_uuid) {
            Some(slot) => *slot = found,
            None => {
                last.insert(isu_uuid.to_owned(), found);
            }
        }
        Some(found)
    }
}

impl SentLog for HashMap<String, Vec<SentCondition>> {
    fn find(&self, isu_uuid: &str, timestamp: i64) -> Option<SentCondition> {
        self.get(isu_uuid)?
            .iter()
            .find(|condition| condition.timestamp == timestamp)
            .copied()
    }
}

/// What the bench registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedIsu {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub character: String,
}

/// `POST /api/isu` and `GET /api/isu/:uuid` bodies.
pub fn check_isu(isu: &Isu, expected: &ExpectedIsu) -> Result<(), String> {
    let actual = (isu.jia_isu_uuid.as_str(), isu.name.as_str(), isu.character.as_str());
    let wanted = (
        expected.uuid.as_str(),
        expected.name.as_str(),
        expected.character.as_str(),
    );
    if actual != wanted || (expected.id != 0 && isu.id != expected.id) {
        return Err(format!(
            "isu {} differs: got {isu:?}, expected {expected:?}",
            expected.uuid
        ));
    }
    Ok(())
}

/// `GET /api/isu`: exactly the user's ISUs, newest registration first, each latest condition real.
/// `registered` is in registration order.
pub fn check_isu_list(items: &[IsuListItem], registered: &[ExpectedIsu], log: &impl SentLog) -> Result<(), String> {
    if items.len() != registered.len() {
        return Err(format!(
            "isu list has {} ISUs, expected {}",
            items.len(),
            registered.len()
        ));
    }
    for (item, expected) in items.iter().zip(registered.iter().rev()) {
        let actual = Isu {
            id: item.id,
            jia_isu_uuid: item.jia_isu_uuid.clone(),
            name: item.name.clone(),
            character: item.character.clone(),
        };
        check_isu(&actual, expected).map_err(|problem| format!("isu list: {problem} (order is id descending)"))?;
        if let Some(latest) = &item.latest_isu_condition {
            check_condition(latest, expected, log)
                .map_err(|problem| format!("isu list latest condition: {problem}"))?;
        }
    }
    Ok(())
}

/// One returned condition: right ISU, right name, really sent with identical fields, right level.
pub fn check_condition(item: &ConditionItem, isu: &ExpectedIsu, log: &impl SentLog) -> Result<SentCondition, String> {
    if item.jia_isu_uuid != isu.uuid {
        return Err(format!("condition of {} returned for {}", item.jia_isu_uuid, isu.uuid));
    }
    if item.isu_name != isu.name {
        return Err(format!(
            "condition of {} has isu_name {:?}, expected {:?}",
            isu.uuid, item.isu_name, isu.name
        ));
    }
    let Some(sent) = log.find(&isu.uuid, item.timestamp) else {
        return Err(format!(
            "condition of {} at {} was never sent",
            isu.uuid, item.timestamp
        ));
    };
    if item.is_sitting != sent.is_sitting || item.condition != sent.condition || item.message != sent.message {
        return Err(format!(
            "condition of {} at {} differs from the sent one: {item:?} vs {sent:?}",
            isu.uuid, item.timestamp
        ));
    }
    let level = Level::of_condition(&item.condition);
    if !is_valid_condition_string(&item.condition) || item.condition_level != level.as_str() {
        return Err(format!(
            "condition of {} at {} has level {:?}, expected {:?}",
            isu.uuid,
            item.timestamp,
            item.condition_level,
            level.as_str()
        ));
    }
    Ok(sent)
}

/// The parameters of one `GET /api/condition/:uuid`.
#[derive(Debug, Clone)]
pub struct ConditionQuery {
    pub end_time: i64,
    pub start_time: Option<i64>,
    pub levels: Vec<Level>,
}

impl ConditionQuery {
    /// The query string parameters of the request.
    pub fn params(&self) -> Vec<(&'static str, String)> {
        let levels: Vec<&str> = self.levels.iter().map(|level| level.as_str()).collect();
        let mut params = vec![
            ("end_time", self.end_time.to_string()),
            ("condition_level", levels.join(",")),
        ];
        if let Some(start_time) = self.start_time {
            params.push(("start_time", start_time.to_string()));
        }
        params
    }
}

/// A page: at most 20, strictly descending, inside the window, only requested levels, all real.
pub fn check_condition_page(
    items: &[ConditionItem],
    query: &ConditionQuery,
    isu: &ExpectedIsu,
    log: &impl SentLog,
) -> Result<(), String> {
    if items.len() > CONDITION_PAGE_LIMIT {
        return Err(format!(
            "condition list of {} has {} elements, limit {CONDITION_PAGE_LIMIT}",
            isu.uuid,
            items.len()
        ));
    }
    let mut previous: Option<i64> = None;
    for item in items {
        if previous.is_some_and(|previous| item.timestamp >= previous) {
            return Err(format!(
                "condition list of {} is not strictly descending at {}",
                isu.uuid, item.timestamp
            ));
        }
        previous = Some(item.timestamp);
        if item.timestamp >= query.end_time || query.start_time.is_some_and(|start| item.timestamp < start) {
            return Err(format!(
                "condition list of {}: {} is outside the window",
                isu.uuid, item.timestamp
            ));
        }
        let sent = check_condition(item, isu, log)?;
        if !query.levels.contains(&sent.level()) {
            return Err(format!(
                "condition list of {}: level {} was not requested",
                isu.uuid,
                sent.level().as_str()
            ));
        }
    }
    Ok(())
}

/// The window `[from, to)` of timestamps a response must contain if they exist.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub from: i64,
    pub to: i64,
}

impl Window {
    /// The part of a condition query that a page covers: down to its last element when the
    /// page is full, down to `start_time` otherwise.
    pub fn of_condition_page(items: &[ConditionItem], query: &ConditionQuery) -> Window {
        let from = if items.len() >= CONDITION_PAGE_LIMIT {
            items.last().map_or(i64::MIN, |item| item.timestamp)
        } else {
            query.start_time.unwrap_or(i64::MIN)
        };
        Window {
            from,
            to: query.end_time,
        }
    }
}

/// Conditions already returned must reappear in responses requested at least `grace` later
/// whose window covers them (§13.5: 1 s). `remembered`: timestamp → when it was first read.
pub fn check_remembered(
    returned: &HashSet<i64>,
    window: Window,
    remembered: &BTreeMap<i64, Instant>,
    requested_at: Instant,
    grace: std::time::Duration,
    what: &str,
) -> Result<(), String> {
    for (timestamp, read_at) in remembered.range(window.from..window.to) {
        if *read_at + grace <= requested_at && !returned.contains(timestamp) {
            return Err(format!(
                "{what}: condition at {timestamp}, returned earlier, is missing"
            ));
        }
    }
    Ok(())
}

/// `GET /api/isu/:uuid/graph?datetime=…`: 24 hours from the truncated hour, ascending real
/// timestamps inside each hour, `data` recomputed from them. Returns the count per hour.
pub fn check_graph(
    points: &[GraphPoint],
    datetime: i64,
    isu_uuid: &str,
    log: &impl SentLog,
) -> Result<[usize; GRAPH_HOURS], String> {
    if points.len() != GRAPH_HOURS {
        return Err(format!(
            "graph of {isu_uuid} has {} points, expected {GRAPH_HOURS}",
            points.len()
        ));
    }
    let first_hour = datetime.div_euclid(HOUR) * HOUR;
    let mut counts = [0; GRAPH_HOURS];
    for (hour, point) in points.iter().enumerate() {
        let start = first_hour + HOUR * hour as i64;
        if point.start_at != start || point.end_at != start + HOUR {
            return Err(format!(
                "graph of {isu_uuid} point {hour} spans [{}, {}), expected [{start}, {})",
                point.start_at,
                point.end_at,
                start + HOUR
            ));
        }
        let mut conditions = Vec::with_capacity(point.condition_timestamps.len());
        for (index, &timestamp) in point.condition_timestamps.iter().enumerate() {
            if index > 0 && timestamp <= point.condition_timestamps[index - 1] {
                return Err(format!("graph of {isu_uuid} point {hour}: timestamps not ascending"));
            }
            if !(start..start + HOUR).contains(&timestamp) {
                return Err(format!(
                    "graph of {isu_uuid} point {hour}: {timestamp} outside the hour"
                ));
            }
            let Some(sent) = log.find(isu_uuid, timestamp) else {
                return Err(format!(
                    "graph of {isu_uuid} point {hour}: condition at {timestamp} was never sent"
                ));
            };
            conditions.push(sent);
        }
        let expected = expected_graph_data(&conditions);
        if point.data != expected {
            return Err(format!(
                "graph of {isu_uuid} point {hour}: data {:?}, expected {expected:?}",
                point.data
            ));
        }
        counts[hour] = conditions.len();
    }
    Ok(counts)
}

/// What one trend watcher has seen so far.
#[derive(Debug, Default)]
pub struct TrendMemory {
    latest: HashMap<i64, i64>,
    most_isus: usize,
}

/// An ISU the bench registered, as the trend must show it.
#[derive(Debug, Clone)]
pub struct TrendIsu {
    pub uuid: String,
    pub character: String,
}

/// `GET /api/trend`: all 25 characters once, lists non-increasing, each ISU once, entries of the
/// bench's ISUs real (sent at that timestamp, that level, that character), no regression
/// since the previous poll of the same watcher. ISUs the bench does not know (initial data,
/// registrations in flight) are only checked for structure.
pub fn check_trend(
    entries: &[TrendEntry],
    known: &HashMap<i64, TrendIsu>,
    log: &impl SentLog,
    memory: &mut TrendMemory,
) -> Result<(), String> {
    let mut characters = HashSet::new();
    let mut isus = HashSet::new();
    for entry in entries {
        if !CHARACTERS.contains(&entry.character.as_str()) {
            return Err(format!("trend has an unknown character {:?}", entry.character));
        }
        if !characters.insert(entry.character.as_str()) {
            return Err(format!("trend lists character {} twice", entry.character));
        }
        for (level, items) in [
            (Level::Info, &entry.info),
            (Level::Warning, &entry.warning),
            (Level::Critical, &entry.critical),
        ] {
            if items.windows(2).any(|pair| pair[0].timestamp < pair[1].timestamp) {
                return Err(format!(
                    "trend {} {} is not in descending order",
                    entry.character,
                    level.as_str()
                ));
            }
            for item in items {
                if !isus.insert(item.isu_id) {
                    return Err(format!("trend lists isu {} twice", item.isu_id));
                }
                if memory
                    .latest
                    .get(&item.isu_id)
                    .is_some_and(|&seen| item.timestamp < seen)
                {
                    return Err(format!("trend of isu {} went back to {}", item.isu_id, item.timestamp));
                }
                let Some(isu) = known.get(&item.isu_id) else { continue };
                if isu.character != entry.character {
                    return Err(format!(
                        "trend lists isu {} under {}, not {}",
                        item.isu_id, entry.character, isu.character
                    ));
                }
                let Some(sent) = log.find(&isu.uuid, item.timestamp) else {
                    return Err(format!(
                        "trend: isu {} never sent a condition at {}",
                        item.isu_id, item.timestamp
                    ));
                };
                if sent.level() != level {
                    return Err(format!(
                        "trend: isu {} at {} is {}, listed as {}",
                        item.isu_id,
                        item.timestamp,
                        sent.level().as_str(),
                        level.as_str()
                    ));
                }
            }
        }
    }
    if characters.len() != CHARACTERS.len() {
        return Err(format!(
            "trend has {} characters, expected {}",
            characters.len(),
            CHARACTERS.len()
        ));
    }
    if isus.len() < memory.most_isus {
        return Err(format!("trend shrank from {} to {} ISUs", memory.most_isus, isus.len()));
    }
    memory.most_isus = isus.len();
    for entry in entries {
        for item in entry.info.iter().chain(&entry.warning).chain(&entry.critical) {
            memory.latest.insert(item.isu_id, item.timestamp);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{condition_string, GraphData, GraphPercentage};
    use crate::scenario::api::TrendItem;

    const UUID: &str = "3a8ae675-3702-45b5-b1eb-1e56e96738ea";

    fn isu() -> ExpectedIsu {
        ExpectedIsu {
            id: 29,
            uuid: UUID.into(),
            name: "いす".into(),
            character: "のんき".into(),
        }
    }

    fn sent(timestamp: i64, is_sitting: bool, dirty: bool, broken: bool) -> SentCondition {
        SentCondition {
            is_sitting,
            condition: condition_string(dirty, false, broken),
            message: "hi",
            timestamp,
        }
    }

    fn log(conditions: Vec<SentCondition>) -> HashMap<String, Vec<SentCondition>> {
        HashMap::from([(UUID.to_owned(), conditions)])
    }

    fn item(condition: &SentCondition) -> ConditionItem {
        ConditionItem {
            jia_isu_uuid: UUID.into(),
            isu_name: "いす".into(),
            timestamp: condition.timestamp,
            is_sitting: condition.is_sitting,
            condition: condition.condition.into(),
            condition_level: condition.level().as_str().into(),
            message: condition.message.into(),
        }
    }

    fn all_levels(end_time: i64) -> ConditionQuery {
        ConditionQuery {
            end_time,
            start_time: None,
            levels: Level::ALL.to_vec(),
        }
    }

    #[test]
    fn the_last_found_cache_answers_like_the_log_it_wraps() {
        let log = log(vec![sent(100, true, false, false), sent(160, false, true, false)]);
        let cached = LastFound::new(log.clone());
        for timestamp in [160, 160, 100, 160, 161, 99, 100] {
            assert_eq!(cached.find(UUID, timestamp), log.find(UUID, timestamp), "{timestamp}");
        }
        assert_eq!(cached.find("other", 100), None);
    }

    #[test]
    fn a_correct_condition_page_passes() {
        let conditions = vec![
            sent(100, true, false, false),
            sent(160, false, true, false),
            sent(220, false, true, true),
        ];
        let page: Vec<_> = conditions.iter().rev().map(item).collect();
        assert_eq!(
            check_condition_page(&page, &all_levels(221), &isu(), &log(conditions)),
            Ok(())
        );
    }

    #[test]
    fn condition_pages_with_invented_changed_or_misordered_data_fail() {
        let conditions = vec![sent(100, true, false, false), sent(160, false, true, false)];
        let log = log(conditions.clone());
        let good: Vec<_> = conditions.iter().rev().map(item).collect();

        let mut misordered = good.clone();
        misordered.reverse();
        assert!(check_condition_page(&misordered, &all_levels(1000), &isu(), &log).is_err());

        let mut changed = good.clone();
        changed[0].message = "other".into();
        assert!(check_condition_page(&changed, &all_levels(1000), &isu(), &log).is_err());

        let mut wrong_level = good.clone();
        wrong_level[0].condition_level = "info".into();
        assert!(check_condition_page(&wrong_level, &all_levels(1000), &isu(), &log).is_err());

        let mut invented = good.clone();
        invented[0].timestamp = 170;
        assert!(check_condition_page(&invented, &all_levels(1000), &isu(), &log).is_err());

        // end_time is exclusive.
        assert!(check_condition_page(&good, &all_levels(160), &isu(), &log).is_err());

        let warnings_only = ConditionQuery {
            levels: vec![Level::Warning],
            ..all_levels(1000)
        };
        assert!(check_condition_page(&good, &warnings_only, &isu(), &log).is_err());
    }

    #[test]
    fn remembered_conditions_must_reappear_after_the_grace_period() {
        let grace = std::time::Duration::from_secs(1);
        let read_at = Instant::now();
        let remembered = BTreeMap::from([(100, read_at), (200, read_at)]);
        let window = Window { from: 150, to: 300 };
        let returned = HashSet::from([250]);
        assert!(check_remembered(&returned, window, &remembered, read_at, grace, "list").is_ok());
        let later = read_at + grace;
        assert!(check_remembered(&returned, window, &remembered, later, grace, "list").is_err());
        assert!(check_remembered(&HashSet::from([200]), window, &remembered, later, grace, "list").is_ok());
    }

    #[test]
    fn graphs_are_recomputed_from_their_timestamps() {
        let day = 1_628_348_400;
        let conditions = vec![
            sent(day + 10, true, false, false),
            sent(day + 70, true, true, false),
            sent(day + 130, false, true, true),
        ];
        let log = log(conditions);
        let mut points: Vec<GraphPoint> = (0..24)
            .map(|hour| GraphPoint {
                start_at: day + 3600 * hour,
                end_at: day + 3600 * (hour + 1),
                data: None,
                condition_timestamps: vec![],
            })
            .collect();
        points[0].condition_timestamps = vec![day + 10, day + 70, day + 130];
        // info + warning + warning (dirty and broken): (3 + 2 + 2) * 100 / 3 / 3 = 77.
        points[0].data = Some(GraphData {
            score: 77,
            percentage: GraphPercentage {
                sitting: 66,
                is_broken: 33,
                is_dirty: 66,
                is_overweight: 0,
            },
        });
        let counts = check_graph(&points, day + 59, UUID, &log).unwrap();
        assert_eq!(counts[0], 3);
        assert_eq!(counts[1..].iter().sum::<usize>(), 0);

        let mut wrong = points.clone();
        wrong[0].data.as_mut().unwrap().score = 78;
        assert!(check_graph(&wrong, day, UUID, &log).is_err());
        let mut missing_data = points.clone();
        missing_data[0].data = None;
        assert!(check_graph(&missing_data, day, UUID, &log).is_err());
        assert!(
            check_graph(&points, day + 3600, UUID, &log).is_err(),
            "must start at the truncated hour"
        );
        assert!(check_graph(&points[..23], day, UUID, &log).is_err());
    }

    #[test]
    fn trends_need_every_character_order_and_no_regression() {
        let conditions = vec![sent(100, true, false, false), sent(160, false, true, false)];
        let log = log(conditions);
        let known = HashMap::from([(
            29,
            TrendIsu {
                uuid: UUID.into(),
                character: "のんき".into(),
            },
        )]);
        let trend = |timestamp: i64, warning: bool| -> Vec<TrendEntry> {
            CHARACTERS
                .iter()
                .map(|character| {
                    let items = if *character == "のんき" {
                        vec![TrendItem { isu_id: 29, timestamp }]
                    } else {
                        vec![]
                    };
                    let (info, warning) = if warning { (vec![], items) } else { (items, vec![]) };
                    TrendEntry {
                        character: character.to_string(),
                        info,
                        warning,
                        critical: vec![],
                    }
                })
                .collect()
        };
        let mut memory = TrendMemory::default();
        assert_eq!(check_trend(&trend(100, false), &known, &log, &mut memory), Ok(()));
        assert_eq!(check_trend(&trend(160, true), &known, &log, &mut memory), Ok(()));
        assert!(
            check_trend(&trend(100, false), &known, &log, &mut memory).is_err(),
            "went backwards"
        );
        assert!(
            check_trend(&trend(160, false), &known, &log, &mut TrendMemory::default()).is_err(),
            "wrong level"
        );
        assert!(
            check_trend(&trend(161, true), &known, &log, &mut TrendMemory::default()).is_err(),
            "never sent"
        );
        let mut incomplete = trend(160, true);
        incomplete.pop();
        assert!(check_trend(&incomplete, &known, &log, &mut TrendMemory::default()).is_err());
    }
}
