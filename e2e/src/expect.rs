//! Expectations from the API contract and the generated dataset: the contract's error
//! bodies and condition strings, what `/initialize` restores (ISU lists, trend), and the
//! shape checks of a trend.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::OnceLock;

use jia_sim::condition::{condition_string, Level, SentCondition, CHARACTERS};
use serde_json::{json, Value};
use shared::dataset::{Dataset, DatasetIsu};
use shared::domain::Flags;
use shared::protocol::WireCondition;

/// The contract's error bodies, written out here rather than taken from the
/// product's constants, so that a typo there cannot hide.
pub const NOT_SIGNED_IN: &str = "you are not signed in";
pub const NOT_FOUND_ISU: &str = "not found: isu";
pub const DUPLICATED_ISU: &str = "duplicated: isu";
pub const JIA_SERVICE_ERROR: &str = "JIAService returned error";
pub const BAD_REQUEST_BODY: &str = "bad request body";

pub const INFO: &str = "is_dirty=false,is_overweight=false,is_broken=false";
pub const WARNING: &str = "is_dirty=true,is_overweight=false,is_broken=false";
pub const CRITICAL: &str = "is_dirty=true,is_overweight=true,is_broken=true";

/// Every level, as the bench asks for them.
pub const ALL_LEVELS: &str = "info,warning,critical";
/// An `end_time` after every timestamp a test produces.
pub const FAR_FUTURE: i64 = 9_999_999_999;

/// The generated dataset every `/initialize` restores.
pub fn dataset() -> &'static Dataset {
    static DATASET: OnceLock<Dataset> = OnceLock::new();
    DATASET.get_or_init(shared::dataset::generated::generate)
}

/// The dataset's ISUs owned by `user`, most recently registered first.
pub fn dataset_isus_of(user: &str) -> Vec<&'static DatasetIsu> {
    let mut isus: Vec<&DatasetIsu> = dataset().isus.iter().filter(|isu| isu.owner == user).collect();
    isus.sort_by_key(|isu| std::cmp::Reverse(isu.id));
    isus
}

/// A stored condition in the API's words: (is_sitting, condition string, level, message).
pub fn api_fields(condition: &WireCondition) -> (bool, &'static str, &'static str, &str) {
    let bits = condition.flags.0;
    let text = condition_string(
        bits & Flags::DIRTY != 0,
        bits & Flags::OVERWEIGHT != 0,
        bits & Flags::BROKEN != 0,
    );
    (
        bits & Flags::SITTING != 0,
        text,
        Level::of_condition(text).as_str(),
        &condition.message,
    )
}

/// The newest condition of a dataset ISU.
pub fn latest_of(isu: &DatasetIsu) -> &WireCondition {
    isu.conditions
        .iter()
        .max_by_key(|condition| condition.timestamp)
        .expect("every initial ISU has conditions")
}

/// `GET /api/isu` of `user` right after `/initialize`.
pub fn expected_isu_list(user: &str) -> Value {
    let items: Vec<Value> = dataset_isus_of(user)
        .into_iter()
        .map(|isu| {
            let latest = latest_of(isu);
            let (is_sitting, condition, level, message) = api_fields(latest);
            json!({
                "id": isu.id,
                "jia_isu_uuid": isu.uuid,
                "name": isu.name,
                "character": isu.character,
                "latest_isu_condition": {
                    "jia_isu_uuid": isu.uuid,
                    "isu_name": isu.name,
                    "timestamp": latest.timestamp,
                    "is_sitting": is_sitting,
                    "condition": condition,
                    "condition_level": level,
                    "message": message,
                },
            })
        })
        .collect();
    Value::Array(items)
}

/// An item of `GET /api/condition` for a condition sent by a device.
pub fn condition_item(uuid: &str, isu_name: &str, sent: &SentCondition) -> Value {
    json!({
        "jia_isu_uuid": uuid,
        "isu_name": isu_name,
        "timestamp": sent.timestamp,
        "is_sitting": sent.is_sitting,
        "condition": sent.condition,
        "condition_level": sent.level().as_str(),
        "message": sent.message,
    })
}

/// Where an ISU stands in the trend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrendSpot {
    pub character: String,
    pub level: String,
    pub timestamp: i64,
}

/// The trend right after `/initialize`: every initial ISU at its newest condition.
pub fn expected_trend() -> BTreeMap<i64, TrendSpot> {
    dataset()
        .isus
        .iter()
        .map(|isu| {
            let latest = latest_of(isu);
            let (_, _, level, _) = api_fields(latest);
            let spot = TrendSpot {
                character: isu.character.clone(),
                level: level.to_owned(),
                timestamp: latest.timestamp,
            };
            (isu.id, spot)
        })
        .collect()
}

/// Checks the shape of a trend (the 25 characters once each, exactly the three
/// lists, newest first, each ISU once) and returns where each ISU stands.
#[track_caller]
pub fn parse_trend(trend: &Value) -> BTreeMap<i64, TrendSpot> {
    let entries = trend.as_array().expect("the trend is an array");
    let mut characters = HashSet::new();
    let mut spots = BTreeMap::new();
    for entry in entries {
        let object = entry.as_object().expect("a trend entry is an object");
        let keys: BTreeSet<&str> = object.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["character", "critical", "info", "warning"]),
            "fields of {entry}"
        );
        let character = entry["character"].as_str().expect("character is a string");
        assert!(CHARACTERS.contains(&character), "unknown character {character:?}");
        assert!(characters.insert(character.to_owned()), "{character} listed twice");
        for level in ["info", "warning", "critical"] {
            let list = entry[level].as_array().expect("a trend list is an array");
            let timestamps: Vec<i64> = list
                .iter()
                .map(|item| item["timestamp"].as_i64().expect("timestamp is an integer"))
                .collect();
            assert!(
                timestamps.windows(2).all(|pair| pair[0] >= pair[1]),
                "{character}/{level} not newest first: {timestamps:?}"
            );
            for item in list {
                let fields: BTreeSet<&str> = item.as_object().expect("object").keys().map(String::as_str).collect();
                assert_eq!(fields, BTreeSet::from(["isu_id", "timestamp"]), "fields of {item}");
                let id = item["isu_id"].as_i64().expect("isu_id is an integer");
                let spot = TrendSpot {
                    character: character.to_owned(),
                    level: level.to_owned(),
                    timestamp: item["timestamp"].as_i64().expect("timestamp is an integer"),
                };
                assert!(spots.insert(id, spot).is_none(), "ISU {id} listed twice");
            }
        }
    }
    assert_eq!(characters.len(), 25, "every character once: {characters:?}");
    spots
}

/// Conditions of a test's own making, with static strings as the wire type wants.
pub fn sent(timestamp: i64, is_sitting: bool, condition: &'static str, message: &'static str) -> SentCondition {
    SentCondition {
        is_sitting,
        condition,
        message,
        timestamp,
    }
}

/// Timestamps of a condition list, as returned.
pub fn timestamps_of(items: &[Value]) -> Vec<i64> {
    items
        .iter()
        .map(|item| item["timestamp"].as_i64().expect("timestamp is an integer"))
        .collect()
}
