//! Conditions as simulated devices send them: the 25 characters, condition strings, their
//! level (§7.2, §7.3) and the log entry of one sent condition.

use serde::Serialize;

/// The 25 ISU characters, spelled exactly as the API contract (§10) requires.
pub const CHARACTERS: [&str; 25] = [
    "いじっぱり",
    "うっかりや",
    "おくびょう",
    "おだやか",
    "おっとり",
    "おとなしい",
    "がんばりや",
    "きまぐれ",
    "さみしがり",
    "しんちょう",
    "すなお",
    "ずぶとい",
    "せっかち",
    "てれや",
    "なまいき",
    "のうてんき",
    "のんき",
    "ひかえめ",
    "まじめ",
    "むじゃき",
    "やんちゃ",
    "ゆうかん",
    "ようき",
    "れいせい",
    "わんぱく",
];

/// FNV-1a: a stable hash, so a UUID maps to the same character and random stream in every run.
pub fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The character a simulator that accepts any UUID gives to `uuid`.
pub fn character_for_uuid(uuid: &str) -> &'static str {
    CHARACTERS[(stable_hash(uuid) % CHARACTERS.len() as u64) as usize]
}

/// Condition level as the API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    Info,
    Warning,
    Critical,
}

impl Level {
    pub const ALL: [Level; 3] = [Level::Info, Level::Warning, Level::Critical];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warning => "warning",
            Level::Critical => "critical",
        }
    }

    pub fn from_name(name: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|level| level.as_str() == name)
    }

    /// Level of a condition string: the number of `=true` occurrences (§7.3).
    pub fn of_condition(condition: &str) -> Level {
        match condition.matches("=true").count() {
            0 => Level::Info,
            1 | 2 => Level::Warning,
            _ => Level::Critical,
        }
    }
}

/// Whether `condition` is exactly `is_dirty=<b>,is_overweight=<b>,is_broken=<b>` (§7.2).
pub fn is_valid_condition_string(condition: &str) -> bool {
    let mut pairs = condition.split(',');
    for key in ["is_dirty", "is_overweight", "is_broken"] {
        let Some(pair) = pairs.next() else { return false };
        let Some(value) = pair.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')) else {
            return false;
        };
        if value != "true" && value != "false" {
            return false;
        }
    }
    pairs.next().is_none()
}

/// Builds the condition string of three flags.
pub fn condition_string(dirty: bool, overweight: bool, broken: bool) -> &'static str {
    match (dirty, overweight, broken) {
        (false, false, false) => "is_dirty=false,is_overweight=false,is_broken=false",
        (true, false, false) => "is_dirty=true,is_overweight=false,is_broken=false",
        (false, true, false) => "is_dirty=false,is_overweight=true,is_broken=false",
        (true, true, false) => "is_dirty=true,is_overweight=true,is_broken=false",
        (false, false, true) => "is_dirty=false,is_overweight=false,is_broken=true",
        (true, false, true) => "is_dirty=true,is_overweight=false,is_broken=true",
        (false, true, true) => "is_dirty=false,is_overweight=true,is_broken=true",
        (true, true, true) => "is_dirty=true,is_overweight=true,is_broken=true",
    }
}

/// One condition a simulated device sent, exactly as it went on the wire (it serialises to
/// the element of a `POST /api/condition/:uuid` body). `Copy`, so snapshots of a device's
/// log are a plain memory copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SentCondition {
    pub is_sitting: bool,
    pub condition: &'static str,
    pub message: &'static str,
    pub timestamp: i64,
}

impl SentCondition {
    pub fn level(&self) -> Level {
        Level::of_condition(self.condition)
    }

    fn has(&self, flag: &str) -> bool {
        self.condition
            .split(',')
            .any(|pair| pair.strip_prefix(flag) == Some("=true"))
    }

    pub fn is_dirty(&self) -> bool {
        self.has("is_dirty")
    }

    pub fn is_overweight(&self) -> bool {
        self.has("is_overweight")
    }

    pub fn is_broken(&self) -> bool {
        self.has("is_broken")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_count_true_values() {
        assert_eq!(Level::of_condition(condition_string(false, false, false)), Level::Info);
        assert_eq!(
            Level::of_condition(condition_string(true, false, false)),
            Level::Warning
        );
        assert_eq!(Level::of_condition(condition_string(true, true, false)), Level::Warning);
        assert_eq!(Level::of_condition(condition_string(true, true, true)), Level::Critical);
    }

    #[test]
    fn condition_strings_are_valid_and_others_are_not() {
        for bits in 0..8 {
            assert!(is_valid_condition_string(condition_string(
                bits & 1 != 0,
                bits & 2 != 0,
                bits & 4 != 0
            )));
        }
        for bad in [
            "",
            "is_dirty=true,is_overweight=false",
            "is_overweight=false,is_dirty=true,is_broken=false",
            "is_dirty=True,is_overweight=false,is_broken=false",
            "is_dirty=true,is_overweight=false,is_brokan=false",
            "is_dirty=true,is_overweight=false,is_broken=false,",
            "is_dirty:true,is_overweight=false,is_broken=false",
        ] {
            assert!(!is_valid_condition_string(bad), "{bad}");
        }
    }

    #[test]
    fn characters_for_uuids_are_stable_and_valid() {
        let uuid = "0694e4d7-dfce-4aec-b7ca-887ac42cfb8f";
        assert_eq!(character_for_uuid(uuid), character_for_uuid(uuid));
        assert!(CHARACTERS.contains(&character_for_uuid(uuid)));
    }
}
