//! Condition strings, flags and levels: parsing and formatting as the API contract defines them.

use serde::{Deserialize, Serialize};

/// Bit set of a condition's boolean fields. Stored instead of the condition
/// string: a valid string is fully determined by its three flags, so the
/// exact bytes can always be rebuilt with [`condition_string`].
/// Serialised as its `u8`; decoding refuses bits above [`Flags::ALL`], which
/// would give a level that disagrees with the condition string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(transparent)]
pub struct Flags(pub u8);

impl<'de> Deserialize<'de> for Flags {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Flags, D::Error> {
        let bits = u8::deserialize(deserializer)?;
        if bits & !Flags::ALL != 0 {
            return Err(serde::de::Error::custom(format!(
                "condition flags {bits} have bits above {}",
                Flags::ALL
            )));
        }
        Ok(Flags(bits))
    }
}

impl Flags {
    pub const SITTING: u8 = 1;
    pub const DIRTY: u8 = 2;
    pub const OVERWEIGHT: u8 = 4;
    pub const BROKEN: u8 = 8;
    /// Every defined bit.
    pub const ALL: u8 = Self::SITTING | Self::DIRTY | Self::OVERWEIGHT | Self::BROKEN;

    /// Builds flags from a condition's `is_sitting` and its parsed condition bits.
    pub fn new(is_sitting: bool, condition_bits: u8) -> Flags {
        Flags(condition_bits & (Self::DIRTY | Self::OVERWEIGHT | Self::BROKEN) | u8::from(is_sitting))
    }

    pub fn is_sitting(self) -> bool {
        self.0 & Self::SITTING != 0
    }
    pub fn is_dirty(self) -> bool {
        self.0 & Self::DIRTY != 0
    }
    pub fn is_overweight(self) -> bool {
        self.0 & Self::OVERWEIGHT != 0
    }
    pub fn is_broken(self) -> bool {
        self.0 & Self::BROKEN != 0
    }

    /// Number of `=true` values in the condition string.
    pub fn bad_count(self) -> u32 {
        (self.0 >> 1).count_ones()
    }

    pub fn level(self) -> Level {
        match self.bad_count() {
            0 => Level::Info,
            3 => Level::Critical,
            _ => Level::Warning,
        }
    }

    /// The exact condition string these flags were parsed from.
    pub fn condition_string(self) -> &'static str {
        CONDITION_STRINGS[usize::from(self.0 >> 1) & 7]
    }
}

/// Indexed by `dirty | overweight << 1 | broken << 2`.
const CONDITION_STRINGS: [&str; 8] = [
    "is_dirty=false,is_overweight=false,is_broken=false",
    "is_dirty=true,is_overweight=false,is_broken=false",
    "is_dirty=false,is_overweight=true,is_broken=false",
    "is_dirty=true,is_overweight=true,is_broken=false",
    "is_dirty=false,is_overweight=false,is_broken=true",
    "is_dirty=true,is_overweight=false,is_broken=true",
    "is_dirty=false,is_overweight=true,is_broken=true",
    "is_dirty=true,is_overweight=true,is_broken=true",
];

/// Parses a condition string (`is_dirty=<bool>,is_overweight=<bool>,is_broken=<bool>`,
/// this order, lowercase, nothing else) into its flag bits (without `SITTING`).
/// Returns `None` for anything else.
pub fn parse_condition(condition: &str) -> Option<u8> {
    let rest = condition.strip_prefix("is_dirty=")?;
    let (dirty, rest) = parse_bool_prefix(rest)?;
    let rest = rest.strip_prefix(",is_overweight=")?;
    let (overweight, rest) = parse_bool_prefix(rest)?;
    let rest = rest.strip_prefix(",is_broken=")?;
    let (broken, rest) = parse_bool_prefix(rest)?;
    if !rest.is_empty() {
        return None;
    }
    Some(u8::from(dirty) * Flags::DIRTY + u8::from(overweight) * Flags::OVERWEIGHT + u8::from(broken) * Flags::BROKEN)
}

fn parse_bool_prefix(text: &str) -> Option<(bool, &str)> {
    if let Some(rest) = text.strip_prefix("true") {
        Some((true, rest))
    } else {
        text.strip_prefix("false").map(|rest| (false, rest))
    }
}

/// Condition level: 0 bad flags → info, 1–2 → warning, 3 → critical.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn from_name(name: &str) -> Option<Level> {
        match name {
            "info" => Some(Level::Info),
            "warning" => Some(Level::Warning),
            "critical" => Some(Level::Critical),
            _ => None,
        }
    }
}

/// A set of levels, parsed from the `condition_level` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LevelSet(u8);

impl LevelSet {
    /// Parses a comma-separated list; unknown names match nothing and duplicates are harmless.
    pub fn parse(list: &str) -> LevelSet {
        let mut set = LevelSet::default();
        for name in list.split(',') {
            if let Some(level) = Level::from_name(name) {
                set.0 |= 1 << level.index();
            }
        }
        set
    }

    pub fn all() -> LevelSet {
        LevelSet(0b111)
    }

    pub fn contains(self, level: Level) -> bool {
        self.0 & (1 << level.index()) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// One condition as the API shows it: an item of `GET /api/condition/:uuid`
/// and the `latest_isu_condition` of `GET /api/isu` (the same shape, by contract).
#[derive(Debug, Clone, Serialize)]
pub struct ConditionView<'a> {
    pub jia_isu_uuid: &'a str,
    pub isu_name: &'a str,
    pub timestamp: i64,
    pub is_sitting: bool,
    pub condition: &'static str,
    pub condition_level: &'static str,
    pub message: &'a str,
}

impl<'a> ConditionView<'a> {
    pub fn new(jia_isu_uuid: &'a str, isu_name: &'a str, timestamp: i64, flags: Flags, message: &'a str) -> Self {
        ConditionView {
            jia_isu_uuid,
            isu_name,
            timestamp,
            is_sitting: flags.is_sitting(),
            condition: flags.condition_string(),
            condition_level: flags.level().as_str(),
            message,
        }
    }
}

/// The 25 ISU characters, spelled exactly as JIA spells them.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_valid_condition_string_round_trips() {
        for bits in 0..8u8 {
            let flags = Flags::new(bits & 1 == 1, bits << 1);
            let text = flags.condition_string();
            assert_eq!(parse_condition(text), Some(flags.0 & !Flags::SITTING), "{text}");
        }
    }

    #[test]
    fn invalid_condition_strings_are_rejected() {
        for text in [
            "",
            "is_dirty=true",
            "is_dirty=true,is_overweight=false",
            "is_dirty=true,is_overweight=false,",
            "is_dirty=true,is_overweight=false,is_broken=False",
            "is_dirty=true,is_overweight=false,is_brokan=false",
            "is_dirty:true,is_overweight=false,is_broken=false",
            "is_overweight=false,is_dirty=true,is_broken=false",
            "is_dirty=true,is_overweight=false,is_broken=false,",
            "is_dirty=true,is_overweight=false,is_broken=falsex",
            " is_dirty=true,is_overweight=false,is_broken=false",
            "is_dirty=true, is_overweight=false,is_broken=false",
            "is_dirty=true,is_overweight=false,is_broken=false,is_dirty=true",
        ] {
            assert_eq!(parse_condition(text), None, "{text:?}");
        }
    }

    #[test]
    fn level_counts_true_values() {
        let level = |text: &str| Flags::new(false, parse_condition(text).unwrap()).level();
        assert_eq!(level("is_dirty=false,is_overweight=false,is_broken=false"), Level::Info);
        assert_eq!(
            level("is_dirty=true,is_overweight=false,is_broken=false"),
            Level::Warning
        );
        assert_eq!(
            level("is_dirty=false,is_overweight=true,is_broken=true"),
            Level::Warning
        );
        assert_eq!(
            level("is_dirty=true,is_overweight=true,is_broken=true"),
            Level::Critical
        );
    }

    #[test]
    fn sitting_does_not_change_the_level_or_string() {
        let bits = parse_condition("is_dirty=true,is_overweight=true,is_broken=true").unwrap();
        let sitting = Flags::new(true, bits);
        assert!(sitting.is_sitting());
        assert_eq!(sitting.level(), Level::Critical);
        assert_eq!(
            sitting.condition_string(),
            "is_dirty=true,is_overweight=true,is_broken=true"
        );
    }

    #[test]
    fn flags_decode_only_defined_bits() {
        assert_eq!(serde_json::from_str::<Flags>("15").unwrap(), Flags(15));
        assert_eq!(serde_json::to_string(&Flags(9)).unwrap(), "9");
        for bad in ["16", "255", "-1", "256", "\"3\""] {
            assert!(serde_json::from_str::<Flags>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn level_set_parsing() {
        let set = LevelSet::parse("warning,critical,bogus,warning");
        assert!(!set.contains(Level::Info));
        assert!(set.contains(Level::Warning) && set.contains(Level::Critical));
        assert!(LevelSet::parse("nothing").is_empty());
        assert!(LevelSet::parse("").is_empty());
    }
}
