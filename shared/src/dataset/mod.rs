//! The initial data loaded by `POST /initialize`: the project's own
//! deterministic dataset ([`generated`]) or the official MySQL dump ([`mysql`]).

pub mod generated;
pub mod mysql;

use std::path::Path;

use crate::domain::{parse_condition, Flags};
use crate::protocol::WireCondition;

/// The project's own default icon (`shared/assets/default-icon.jpg`), served for ISUs without an image.
pub const DEFAULT_ICON: &[u8] = include_bytes!("../../assets/default-icon.jpg");

/// Everything `/initialize` restores. ISUs are in id order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dataset {
    /// Every user that exists after a reset (with or without ISUs), in a stable order.
    pub users: Vec<String>,
    pub isus: Vec<DatasetIsu>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetIsu {
    pub id: i64,
    pub uuid: String,
    pub name: String,
    pub character: String,
    pub owner: String,
    /// Icon bytes; `None` means the configured default icon.
    pub image: Option<Vec<u8>>,
    /// Conditions sorted by timestamp ascending.
    pub conditions: Vec<WireCondition>,
}

/// Where `/initialize` takes its data from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatasetSource {
    /// The project's own deterministic dataset.
    Generated,
    /// The project's dataset grown with bulk users to this many ISUs (`generated:N`, N ≥ 28),
    /// for load tests at scale.
    GeneratedWithIsus(usize),
    /// An official-format MySQL dump (`1_InitData.sql`).
    MysqlDump(std::path::PathBuf),
}

impl DatasetSource {
    /// Parses `generated`, `generated:N` (N ISUs in all, N ≥ 28) or a path to a `.sql`
    /// dump (optionally prefixed `mysql:`).
    pub fn parse(text: &str) -> Result<DatasetSource, String> {
        if text == "generated" || text.is_empty() {
            return Ok(DatasetSource::Generated);
        }
        if let Some(count) = text.strip_prefix("generated:") {
            return parse_generated_isu_count(count).map(DatasetSource::GeneratedWithIsus);
        }
        let path = text.strip_prefix("mysql:").unwrap_or(text);
        Ok(DatasetSource::MysqlDump(Path::new(path).to_path_buf()))
    }

    /// The dataset's ISUs handed to `each` one at a time, then its users: a generated one is
    /// never held whole (see [`generated::each_isu_with_count`]), a dump is loaded first.
    pub fn each_isu(&self, mut each: impl FnMut(DatasetIsu)) -> anyhow::Result<Vec<String>> {
        match self {
            DatasetSource::GeneratedWithIsus(isu_count) => Ok(generated::each_isu_with_count(*isu_count, each)),
            other => {
                let Dataset { users, isus } = other.load()?;
                isus.into_iter().for_each(&mut each);
                Ok(users)
            }
        }
    }

    pub fn load(&self) -> anyhow::Result<Dataset> {
        match self {
            DatasetSource::Generated => Ok(generated::generate()),
            DatasetSource::GeneratedWithIsus(isu_count) => Ok(generated::generate_with_isu_count(*isu_count)),
            DatasetSource::MysqlDump(path) => {
                let bytes =
                    std::fs::read(path).map_err(|error| anyhow::anyhow!("reading {}: {error}", path.display()))?;
                mysql::import(&bytes)
            }
        }
    }
}

/// The default dataset's own ISUs: `generated:N` cannot have fewer.
const MIN_GENERATED_ISUS: usize = 28;
/// A guard against a typo that would fill the memory (about 1 KiB per ISU).
const MAX_GENERATED_ISUS: usize = 1_000_000;

fn parse_generated_isu_count(text: &str) -> Result<usize, String> {
    let count: usize = text
        .parse()
        .map_err(|_| format!("invalid dataset 'generated:{text}': expected 'generated:N' with N a number of ISUs"))?;
    if !(MIN_GENERATED_ISUS..=MAX_GENERATED_ISUS).contains(&count) {
        return Err(format!(
            "invalid dataset 'generated:{text}': the number of ISUs must be between {MIN_GENERATED_ISUS} and {MAX_GENERATED_ISUS}"
        ));
    }
    Ok(count)
}

/// Builds a stored condition from the API's fields; `None` if the condition string is invalid.
pub fn wire_condition(timestamp: i64, is_sitting: bool, condition: &str, message: &str) -> Option<WireCondition> {
    let bits = parse_condition(condition)?;
    Some(WireCondition {
        timestamp,
        flags: Flags::new(is_sitting, bits),
        message: message.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_generated_with_an_isu_count() {
        assert_eq!(DatasetSource::parse("generated"), Ok(DatasetSource::Generated));
        assert_eq!(DatasetSource::parse(""), Ok(DatasetSource::Generated));
        assert_eq!(
            DatasetSource::parse("generated:10000"),
            Ok(DatasetSource::GeneratedWithIsus(10_000))
        );
        assert_eq!(
            DatasetSource::parse("generated:28"),
            Ok(DatasetSource::GeneratedWithIsus(28))
        );
        assert_eq!(
            DatasetSource::parse("mysql:/data/1_InitData.sql"),
            Ok(DatasetSource::MysqlDump("/data/1_InitData.sql".into()))
        );
    }

    #[test]
    fn parse_refuses_a_bad_isu_count_with_a_clear_message() {
        for text in ["generated:abc", "generated:", "generated:-5", "generated:10k"] {
            let error = DatasetSource::parse(text).unwrap_err();
            assert!(error.contains(text) && error.contains("generated:N"), "{text}: {error}");
        }
        for text in ["generated:27", "generated:0", "generated:1000001"] {
            let error = DatasetSource::parse(text).unwrap_err();
            assert!(error.contains("between 28 and 1000000"), "{text}: {error}");
        }
    }

    #[test]
    fn load_of_generated_with_isus_has_that_many_isus() {
        let dataset = DatasetSource::parse("generated:10000").unwrap().load().unwrap();
        assert_eq!(dataset.isus.len(), 10_000);
        assert!(dataset.isus.iter().map(|isu| isu.id).eq(1..=10_000));
        assert_eq!(DatasetSource::Generated.load().unwrap(), generated::generate());
    }
}
