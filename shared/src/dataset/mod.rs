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
    /// An official-format MySQL dump (`1_InitData.sql`).
    MysqlDump(std::path::PathBuf),
}

impl DatasetSource {
    /// Parses `generated` or a path to a `.sql` dump (optionally prefixed `mysql:`).
    pub fn parse(text: &str) -> Result<DatasetSource, String> {
        if text == "generated" || text.is_empty() {
            return Ok(DatasetSource::Generated);
        }
        let path = text.strip_prefix("mysql:").unwrap_or(text);
        Ok(DatasetSource::MysqlDump(Path::new(path).to_path_buf()))
    }

    pub fn load(&self) -> anyhow::Result<Dataset> {
        match self {
            DatasetSource::Generated => Ok(generated::generate()),
            DatasetSource::MysqlDump(path) => {
                let bytes =
                    std::fs::read(path).map_err(|error| anyhow::anyhow!("reading {}: {error}", path.display()))?;
                mysql::import(&bytes)
            }
        }
    }
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
