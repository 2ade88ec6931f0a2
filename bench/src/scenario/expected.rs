//! The initial data the bench expects after `POST /initialize` (API contract §2, §13.2):
//! users, their ISUs (id, UUID, name, character, icon md5) and every initial condition.
//!
//! Two sources: the official `initialize.json` (what the contest's bench knows), or the
//! project's own dataset (`generated`, `generated:N`), read raw from `shared::dataset`. Only
//! raw facts are taken from either; levels, graphs, trend and list order are computed by the
//! bench's own code ([`crate::model`], [`super::validate`]), never by `shared`'s maths.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use anyhow::{bail, Context};
use serde::Deserialize;

use super::validate::{ExpectedIsu, SentLog, TrendIsu};
use crate::model::{condition_string, Level, SentCondition, CHARACTERS};

/// md5 of the contest's default icon `NoImage.jpg` (API contract §1.6).
pub const OFFICIAL_DEFAULT_ICON_MD5: [u8; 16] = [
    0x58, 0x27, 0xc4, 0x61, 0x97, 0x39, 0xd8, 0x53, 0x97, 0x84, 0x4a, 0xf8, 0x7f, 0x9d, 0x2f, 0xe4,
];

/// One initial ISU.
#[derive(Debug, Clone)]
pub struct InitialIsu {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub character: String,
    pub owner: String,
    /// md5 of the icon the service must serve.
    pub icon_md5: [u8; 16],
    /// Every initial condition, oldest first, timestamps strictly increasing.
    pub conditions: Vec<SentCondition>,
}

impl InitialIsu {
    pub fn expected(&self) -> ExpectedIsu {
        ExpectedIsu {
            id: self.id,
            uuid: self.uuid.clone(),
            name: self.name.clone(),
            character: self.character.clone(),
        }
    }

    pub fn newest(&self) -> Option<&SentCondition> {
        self.conditions.last()
    }
}

/// One initial user that owns ISUs.
#[derive(Debug, Clone)]
pub struct InitialUser {
    pub jia_user_id: String,
    /// Indexes into [`ExpectedData::isus`], by id ascending (registration order).
    isu_indexes: Vec<usize>,
}

/// Everything the bench expects right after `POST /initialize`.
#[derive(Debug, Clone)]
pub struct ExpectedData {
    /// Where it came from (`project`, `generated:N`, or the JSON path), for reports.
    pub source: String,
    /// Every initial ISU, by id ascending.
    pub isus: Vec<InitialIsu>,
    /// Users owning ISUs, in the order of their first ISU (so `isucon1` first in both datasets).
    pub users: Vec<InitialUser>,
    /// md5 of the icon of an ISU registered without an image.
    pub default_icon_md5: [u8; 16],
    by_uuid: HashMap<String, usize>,
}

impl ExpectedData {
    /// `project` or `generated` (the coordinator's default dataset), `generated:N`, or a path
    /// to an official `initialize.json` (its default icon: `NoImage.jpg` beside it if present,
    /// else the contest's known md5).
    pub fn load(spec: &str) -> anyhow::Result<ExpectedData> {
        match spec {
            "" | "project" | "generated" => Self::from_project("generated"),
            _ if spec.starts_with("generated:") => Self::from_project(spec),
            path => Self::from_initialize_json_file(Path::new(path)),
        }
    }

    /// The project's dataset as the coordinator loads it, with the project's default icon.
    pub fn from_project(spec: &str) -> anyhow::Result<ExpectedData> {
        let source = shared::dataset::DatasetSource::parse(spec).map_err(anyhow::Error::msg)?;
        let dataset = source.load()?;
        Self::from_dataset(spec, &dataset, shared::dataset::DEFAULT_ICON)
    }

    /// Any `shared` dataset (raw facts only), with the icon the service uses for `image: None`.
    pub fn from_dataset(
        source: &str,
        dataset: &shared::dataset::Dataset,
        default_icon: &[u8],
    ) -> anyhow::Result<ExpectedData> {
        let default_icon_md5 = md5::compute(default_icon).0;
        let isus = dataset
            .isus
            .iter()
            .map(|isu| {
                let conditions = isu
                    .conditions
                    .iter()
                    .map(|condition| {
                        let flags = condition.flags;
                        SentCondition {
                            is_sitting: flags.is_sitting(),
                            condition: condition_string(flags.is_dirty(), flags.is_overweight(), flags.is_broken()),
                            message: intern(&condition.message),
                            timestamp: condition.timestamp,
                        }
                    })
                    .collect();
                InitialIsu {
                    id: isu.id,
                    uuid: isu.uuid.clone(),
                    name: isu.name.clone(),
                    character: isu.character.clone(),
                    owner: isu.owner.clone(),
                    icon_md5: isu
                        .image
                        .as_deref()
                        .map_or(default_icon_md5, |image| md5::compute(image).0),
                    conditions,
                }
            })
            .collect();
        Self::assemble(source.to_owned(), isus, default_icon_md5)
    }

    /// Reads an official `initialize.json`.
    pub fn from_initialize_json_file(path: &Path) -> anyhow::Result<ExpectedData> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let default_icon = path.parent().map(|dir| dir.join("NoImage.jpg"));
        let default_icon_md5 = match default_icon.and_then(|icon| std::fs::read(icon).ok()) {
            Some(icon) => md5::compute(icon).0,
            None => OFFICIAL_DEFAULT_ICON_MD5,
        };
        Self::from_initialize_json(&path.display().to_string(), &bytes, default_icon_md5)
            .with_context(|| format!("loading {}", path.display()))
    }

    /// Parses the official `initialize.json` format (users → `isu_list_by_id` → conditions by level).
    pub fn from_initialize_json(
        source: &str,
        bytes: &[u8],
        default_icon_md5: [u8; 16],
    ) -> anyhow::Result<ExpectedData> {
        let users: Vec<JsonUser> = serde_json::from_slice(bytes).context("not the initialize.json format")?;
        let mut isus = Vec::new();
        for user in users {
            for (uuid, isu) in user.isu_list_by_id {
                let mut conditions = Vec::new();
                for (listed_as, list) in [
                    (Level::Info, isu.conditions.info),
                    (Level::Warning, isu.conditions.warning),
                    (Level::Critical, isu.conditions.critical),
                ] {
                    for condition in list.unwrap_or_default() {
                        let text = condition_string(condition.is_dirty, condition.is_overweight, condition.is_broken);
                        if Level::of_condition(text) != listed_as {
                            bail!(
                                "isu {uuid}: the condition at {} is listed as {} but is {text}",
                                condition.timestamp,
                                listed_as.as_str()
                            );
                        }
                        conditions.push(SentCondition {
                            is_sitting: condition.is_sitting,
                            condition: text,
                            message: intern(&condition.message),
                            timestamp: condition.timestamp,
                        });
                    }
                }
                conditions.sort_by_key(|condition| condition.timestamp);
                isus.push(InitialIsu {
                    id: isu.id,
                    uuid,
                    name: isu.name,
                    character: isu.character,
                    owner: user.jia_user_id.clone(),
                    icon_md5: isu.image_file_hash,
                    conditions,
                });
            }
        }
        Self::assemble(source.to_owned(), isus, default_icon_md5)
    }

    fn assemble(source: String, mut isus: Vec<InitialIsu>, default_icon_md5: [u8; 16]) -> anyhow::Result<ExpectedData> {
        isus.sort_by_key(|isu| isu.id);
        let mut by_uuid = HashMap::with_capacity(isus.len());
        let mut users: Vec<InitialUser> = Vec::new();
        let mut user_index: HashMap<String, usize> = HashMap::new();
        let mut ids = HashSet::with_capacity(isus.len());
        for (index, isu) in isus.iter().enumerate() {
            if !ids.insert(isu.id) {
                bail!("isu id {} appears twice", isu.id);
            }
            if by_uuid.insert(isu.uuid.clone(), index).is_some() {
                bail!("isu {} appears twice", isu.uuid);
            }
            if !CHARACTERS.contains(&isu.character.as_str()) {
                bail!("isu {} has an unknown character {:?}", isu.uuid, isu.character);
            }
            if isu
                .conditions
                .windows(2)
                .any(|pair| pair[0].timestamp >= pair[1].timestamp)
            {
                bail!("isu {} has two conditions with one timestamp", isu.uuid);
            }
            let user = *user_index.entry(isu.owner.clone()).or_insert_with(|| {
                users.push(InitialUser {
                    jia_user_id: isu.owner.clone(),
                    isu_indexes: Vec::new(),
                });
                users.len() - 1
            });
            users[user].isu_indexes.push(index);
        }
        Ok(ExpectedData {
            source,
            isus,
            users,
            default_icon_md5,
            by_uuid,
        })
    }

    /// The service runs with another default icon (coordinator `--default-icon PATH`): ISUs
    /// registered without an image, and initial ISUs without one, must show these bytes.
    pub fn with_default_icon(mut self, icon: &[u8]) -> ExpectedData {
        let md5 = md5::compute(icon).0;
        for isu in &mut self.isus {
            if isu.icon_md5 == self.default_icon_md5 {
                isu.icon_md5 = md5;
            }
        }
        self.default_icon_md5 = md5;
        self
    }

    pub fn isu(&self, uuid: &str) -> Option<&InitialIsu> {
        self.by_uuid.get(uuid).map(|index| &self.isus[*index])
    }

    pub fn user(&self, jia_user_id: &str) -> Option<&InitialUser> {
        self.users.iter().find(|user| user.jia_user_id == jia_user_id)
    }

    /// The ISUs of `user`, by id ascending.
    pub fn isus_of<'a>(&'a self, user: &'a InitialUser) -> impl Iterator<Item = &'a InitialIsu> + 'a {
        user.isu_indexes.iter().map(|index| &self.isus[*index])
    }

    /// Every initial ISU as the trend validator knows it (id → uuid, character).
    pub fn trend_isus(&self) -> HashMap<i64, TrendIsu> {
        self.isus
            .iter()
            .map(|isu| {
                let known = TrendIsu {
                    uuid: isu.uuid.clone(),
                    character: isu.character.clone(),
                };
                (isu.id, known)
            })
            .collect()
    }

    pub fn max_id(&self) -> i64 {
        self.isus.last().map_or(0, |isu| isu.id)
    }

    pub fn condition_count(&self) -> usize {
        self.isus.iter().map(|isu| isu.conditions.len()).sum()
    }
}

impl SentLog for ExpectedData {
    fn find(&self, isu_uuid: &str, timestamp: i64) -> Option<SentCondition> {
        let conditions = &self.isu(isu_uuid)?.conditions;
        let index = conditions
            .binary_search_by_key(&timestamp, |condition| condition.timestamp)
            .ok()?;
        Some(conditions[index])
    }
}

/// [`SentCondition`] holds `&'static str` messages; initial messages come from a small set,
/// so each distinct one is leaked once and shared by every later load.
fn intern(text: &str) -> &'static str {
    static INTERNED: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut interned = INTERNED
        .get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        .expect("interned messages poisoned");
    if let Some(existing) = interned.get(text) {
        return existing;
    }
    let leaked: &'static str = Box::leak(text.to_owned().into_boxed_str());
    interned.insert(leaked);
    leaked
}

#[derive(Deserialize)]
struct JsonUser {
    jia_user_id: String,
    isu_list_by_id: HashMap<String, JsonIsu>,
}

#[derive(Deserialize)]
struct JsonIsu {
    id: i64,
    name: String,
    image_file_hash: [u8; 16],
    character: String,
    conditions: JsonConditions,
}

#[derive(Deserialize)]
struct JsonConditions {
    info: Option<Vec<JsonCondition>>,
    warning: Option<Vec<JsonCondition>>,
    critical: Option<Vec<JsonCondition>>,
}

#[derive(Deserialize)]
struct JsonCondition {
    timestamp: i64,
    is_sitting: bool,
    is_dirty: bool,
    is_overweight: bool,
    is_broken: bool,
    message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_project_dataset_has_the_official_shape() {
        let data = ExpectedData::load("project").unwrap();
        assert_eq!(data.isus.len(), 28);
        assert!(data.isus.iter().map(|isu| isu.id).eq(1..=28));
        assert_eq!(data.users[0].jia_user_id, "isucon1");
        assert_eq!(data.isus_of(&data.users[0]).count(), 5);
        assert!(data.isus.iter().all(|isu| !isu.conditions.is_empty()));
        assert_eq!(data.default_icon_md5, md5::compute(shared::dataset::DEFAULT_ICON).0);
        // Ids 7, 17 and 27 have no image: the default icon.
        assert_eq!(data.isus[6].icon_md5, data.default_icon_md5);
        assert_ne!(data.isus[0].icon_md5, data.default_icon_md5);
        let isu = &data.isus[3];
        let newest = isu.newest().unwrap();
        assert_eq!(data.find(&isu.uuid, newest.timestamp), Some(*newest));
        assert_eq!(data.find(&isu.uuid, newest.timestamp + 1), None);
    }

    #[test]
    fn another_default_icon_replaces_the_project_one() {
        let data = ExpectedData::load("project").unwrap().with_default_icon(b"other icon");
        assert_eq!(data.default_icon_md5, md5::compute(b"other icon").0);
        assert_eq!(data.isus[6].icon_md5, data.default_icon_md5);
        assert_ne!(data.isus[0].icon_md5, data.default_icon_md5);
    }

    #[test]
    fn generated_n_has_n_isus() {
        let data = ExpectedData::load("generated:40").unwrap();
        assert_eq!(data.isus.len(), 40);
        assert_eq!(data.max_id(), 40);
    }

    #[test]
    fn a_condition_listed_under_the_wrong_level_is_refused() {
        let json = r#"[{"jia_user_id":"u","isu_list_by_id":{"x":{"id":1,"name":"n","image_file_hash":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],
            "character":"のんき","conditions":{"info":[{"timestamp":1,"is_sitting":true,"is_dirty":true,"is_overweight":false,
            "is_broken":false,"message":"m","created_at":"","condition_level":1}],"warning":null,"critical":null}}}}]"#;
        let error = ExpectedData::from_initialize_json("test", json.as_bytes(), [0; 16]).unwrap_err();
        assert!(error.to_string().contains("listed as info"), "{error}");
    }
}
