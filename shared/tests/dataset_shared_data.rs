//! Cross-checks the MySQL dump importer against the official data the benchmarker knows
//! (`shared/data/isucon11-qualify/initialize.json`), field by field.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::Value;
use shared::dataset::{mysql, Dataset, DatasetIsu};
use shared::domain::{Level, CHARACTERS};

fn official_data_folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/isucon11-qualify")
}

/// One condition as `initialize.json` spells it.
#[derive(Debug, PartialEq, Eq)]
struct ExpectedCondition {
    timestamp: i64,
    is_sitting: bool,
    is_dirty: bool,
    is_overweight: bool,
    is_broken: bool,
    message: String,
}

/// `initialize.json` files each condition under its level (`info` / `warning` /
/// `critical`, a list or `null`) and repeats the level as the bit `condition_level`
/// (1 / 2 / 4); both must agree with the flags.
fn expected_conditions(isu: &Value) -> Vec<ExpectedCondition> {
    let by_level = isu["conditions"].as_object().expect("conditions is an object");
    assert_eq!(by_level.len(), 3, "conditions has exactly info, warning and critical");
    let mut conditions = Vec::new();
    for (level_name, list) in by_level {
        let level = Level::from_name(level_name).unwrap_or_else(|| panic!("unknown level {level_name:?}"));
        let Some(list) = list.as_array() else {
            assert!(list.is_null(), "{level_name} is a list or null");
            continue;
        };
        for condition in list {
            let flag = |name: &str| condition[name].as_bool().unwrap_or_else(|| panic!("{name} is a bool"));
            let expected = ExpectedCondition {
                timestamp: condition["timestamp"].as_i64().expect("timestamp is an integer"),
                is_sitting: flag("is_sitting"),
                is_dirty: flag("is_dirty"),
                is_overweight: flag("is_overweight"),
                is_broken: flag("is_broken"),
                message: condition["message"].as_str().expect("message is a string").to_owned(),
            };
            let bad_count = [expected.is_dirty, expected.is_overweight, expected.is_broken]
                .into_iter()
                .filter(|flag| *flag)
                .count();
            let level_from_flags = match bad_count {
                0 => Level::Info,
                3 => Level::Critical,
                _ => Level::Warning,
            };
            assert_eq!(level, level_from_flags, "{condition}");
            assert_eq!(
                condition["condition_level"].as_i64(),
                Some(1 << level.index()),
                "{condition}"
            );
            conditions.push(expected);
        }
    }
    conditions.sort_by_key(|condition| condition.timestamp);
    conditions
}

fn actual_conditions(isu: &DatasetIsu) -> Vec<ExpectedCondition> {
    isu.conditions
        .iter()
        .map(|condition| ExpectedCondition {
            timestamp: condition.timestamp,
            is_sitting: condition.flags.is_sitting(),
            is_dirty: condition.flags.is_dirty(),
            is_overweight: condition.flags.is_overweight(),
            is_broken: condition.flags.is_broken(),
            message: condition.message.clone(),
        })
        .collect()
}

fn check_isu(owner: &str, uuid: &str, expected: &Value, actual: &DatasetIsu) {
    assert_eq!(actual.uuid, uuid);
    assert_eq!(Some(actual.id), expected["id"].as_i64(), "id of {uuid}");
    assert_eq!(Some(actual.name.as_str()), expected["name"].as_str(), "name of {uuid}");
    assert_eq!(
        Some(actual.character.as_str()),
        expected["character"].as_str(),
        "character of {uuid}"
    );
    assert_eq!(actual.owner, owner, "owner of {uuid}");

    let hash: Vec<u8> = expected["image_file_hash"]
        .as_array()
        .expect("image_file_hash is an array")
        .iter()
        .map(|byte| u8::try_from(byte.as_u64().expect("a byte")).expect("a byte"))
        .collect();
    assert_eq!(hash.len(), 16, "image_file_hash of {uuid} is an md5");
    let image = actual.image.as_deref().unwrap_or_else(|| panic!("{uuid} has an image"));
    assert!(image.starts_with(&[0xff, 0xd8, 0xff]), "{uuid}'s image is a JPEG");
    assert_eq!(
        hex::encode(md5::compute(image).0),
        hex::encode(&hash),
        "md5 of the image of {uuid}"
    );

    let expected_conditions = expected_conditions(expected);
    let actual_conditions = actual_conditions(actual);
    assert_eq!(
        actual_conditions.len(),
        expected_conditions.len(),
        "condition count of {uuid}"
    );
    for (index, (actual, expected)) in actual_conditions.iter().zip(&expected_conditions).enumerate() {
        assert_eq!(actual, expected, "condition {index} of {uuid}");
    }
}

#[test]
fn official_dump_matches_initialize_json_shared_data() {
    let folder = official_data_folder();
    if !folder.is_dir() {
        eprintln!("skipping: the official data folder {} is absent", folder.display());
        return;
    }
    let dump = std::fs::read(folder.join("1_InitData.sql")).expect("read 1_InitData.sql");
    let json = std::fs::read(folder.join("initialize.json")).expect("read initialize.json");
    let dataset: Dataset = mysql::import(&dump).expect("the official dump imports");
    let users: Vec<Value> = serde_json::from_slice(&json).expect("initialize.json is a JSON array");

    // The dump holds only the users that own ISUs (sorted by primary key);
    // `isucon` and `isucon3` come into existence at their first sign-in.
    assert_eq!(
        dataset.users,
        [
            "confident_chatelet",
            "happy_haibt",
            "isucon1",
            "isucon2",
            "strange_dubinsky"
        ]
    );
    let mut json_user_ids: Vec<&str> = users
        .iter()
        .map(|user| user["jia_user_id"].as_str().expect("jia_user_id is a string"))
        .collect();
    json_user_ids.sort_unstable();
    assert_eq!(json_user_ids, dataset.users);

    let ids: Vec<i64> = dataset.isus.iter().map(|isu| isu.id).collect();
    assert_eq!(ids, (1..=28).collect::<Vec<_>>());
    for isu in &dataset.isus {
        let expected_character = CHARACTERS.get(isu.id as usize - 1).copied().unwrap_or(CHARACTERS[0]);
        assert_eq!(isu.character, expected_character, "character of isu {}", isu.id);
        assert!(
            isu.conditions
                .windows(2)
                .all(|pair| pair[0].timestamp < pair[1].timestamp),
            "conditions of isu {} strictly increase",
            isu.id
        );
    }

    let by_uuid: HashMap<&str, &DatasetIsu> = dataset.isus.iter().map(|isu| (isu.uuid.as_str(), isu)).collect();
    let mut checked_isus = 0;
    let mut checked_conditions = 0;
    for user in &users {
        let owner = user["jia_user_id"].as_str().expect("jia_user_id is a string");
        let isus = user["isu_list_by_id"].as_object().expect("isu_list_by_id is an object");
        for (uuid, expected) in isus {
            let actual = by_uuid
                .get(uuid.as_str())
                .unwrap_or_else(|| panic!("{uuid} of {owner} is in the dump"));
            check_isu(owner, uuid, expected, actual);
            checked_isus += 1;
            checked_conditions += actual.conditions.len();
        }
    }
    assert_eq!(checked_isus, 28, "every ISU of the dump is in initialize.json");
    assert_eq!(checked_conditions, 618);

    let per_owner = |owner: &str| {
        let owned: Vec<&DatasetIsu> = dataset.isus.iter().filter(|isu| isu.owner == owner).collect();
        let condition_counts: Vec<usize> = owned.iter().map(|isu| isu.conditions.len()).collect();
        (owned.len(), condition_counts)
    };
    assert_eq!(per_owner("isucon1"), (5, vec![72; 5]));
    assert_eq!(per_owner("isucon2"), (20, vec![12; 20]));
    for owner in ["confident_chatelet", "happy_haibt", "strange_dubinsky"] {
        assert_eq!(per_owner(owner), (1, vec![6]), "{owner}");
    }
}
