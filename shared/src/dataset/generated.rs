//! The project's own deterministic default dataset: the shape of the official initial
//! data (API contract §2) with our own users, UUIDs, names, icons and conditions.
//!
//! Everything comes from a hand-written splitmix64 generator with a fixed seed, so the
//! data never changes with a dependency's version or the machine it runs on.

use std::collections::HashSet;

use super::{Dataset, DatasetIsu};
use crate::domain::{Flags, CHARACTERS};
use crate::protocol::WireCondition;

/// Changing the seed changes every generated value; tests pin only properties.
const SEED: u64 = 0x15c0_2021_0808_c4a1;

/// 2021-08-08 00:00:00 JST, the bench's virtual start.
pub const VIRTUAL_START: i64 = 1_628_348_400;
/// Every generated condition lies in `[VIRTUAL_START - HALF_YEAR_SECONDS, VIRTUAL_START)`.
pub const HALF_YEAR_SECONDS: i64 = 182 * 86_400;

/// Every user after a reset, in this order. `isucon` and `isucon3` own nothing:
/// the bench signs in as `isucon` and registers its own ISUs.
pub const USERS: [&str; 7] = [
    "isucon",
    "isucon1",
    "isucon2",
    "isucon3",
    "quiet_maple",
    "sunny_kestrel",
    "gentle_harbor",
];

/// How many ISUs a user owns and what their condition history looks like.
struct OwnerPlan {
    user: &'static str,
    isu_count: usize,
    condition_count: usize,
    interval_seconds: i64,
}

/// ISUs get ids 1.. in this order.
const OWNER_PLANS: [OwnerPlan; 5] = [
    OwnerPlan {
        user: "isucon1",
        isu_count: 5,
        condition_count: 72,
        interval_seconds: 3600,
    },
    OwnerPlan {
        user: "isucon2",
        isu_count: 20,
        condition_count: 12,
        interval_seconds: 1800,
    },
    OwnerPlan {
        user: "quiet_maple",
        isu_count: 1,
        condition_count: 6,
        interval_seconds: 600,
    },
    OwnerPlan {
        user: "sunny_kestrel",
        isu_count: 1,
        condition_count: 6,
        interval_seconds: 600,
    },
    OwnerPlan {
        user: "gentle_harbor",
        isu_count: 1,
        condition_count: 6,
        interval_seconds: 600,
    },
];

/// Our own chair icons (96×96 JPEGs drawn with ImageMagick, `shared/assets/icons/`).
pub const ICONS: [&[u8]; 6] = [
    include_bytes!("../../assets/icons/chair-1.jpg"),
    include_bytes!("../../assets/icons/chair-2.jpg"),
    include_bytes!("../../assets/icons/chair-3.jpg"),
    include_bytes!("../../assets/icons/chair-4.jpg"),
    include_bytes!("../../assets/icons/chair-5.jpg"),
    include_bytes!("../../assets/icons/chair-6.jpg"),
];

/// About one ISU in ten has no image and shows the default icon: ids 7, 17 and 27.
fn has_default_icon(id: i64) -> bool {
    id % 10 == 7
}

const NAME_PREFIXES: [&str; 12] = [
    "ふかふか",
    "ぽかぽか",
    "木漏れ日",
    "桜色",
    "夜更かし",
    "宇宙",
    "琥珀",
    "雲海",
    "縁側",
    "青空",
    "月見",
    "ごろごろ",
];
const NAME_SUFFIXES: [&str; 10] = [
    "ソファ",
    "ロッキングチェア",
    "スツール",
    "座布団",
    "ベンチ",
    "リクライナー",
    "ハンモック",
    "玉座",
    "ビーズクッション",
    "オフィスチェア",
];

pub const INFO_MESSAGES: [&str; 7] = [
    "今日も快適です。",
    "ふかふかで気持ちいい！",
    "いい座り心地でしょ？",
    "ぽかぽかしてきました〜",
    "ばっちりです！",
    "のんびりしましょう",
    "",
];
pub const DIRTY_MESSAGES: [&str; 2] = ["ちょっと汚れてきたかも…", "拭いてくれると嬉しいな"];
pub const OVERWEIGHT_MESSAGES: [&str; 2] = ["う、重たい…", "少し休ませてください〜"];
pub const BROKEN_MESSAGES: [&str; 2] = ["脚がぐらぐらします", "どこかでギシギシ鳴ってます"];
pub const CRITICAL_MESSAGES: [&str; 3] = ["もう限界です…！", "修理と掃除をお願いします！", "助けてー！"];

/// Builds the default dataset; every call returns the same data.
pub fn generate() -> Dataset {
    let mut random = SplitMix64::new(SEED);
    let mut used_names = HashSet::new();
    let mut used_uuids = HashSet::new();
    let mut isus = Vec::new();

    for plan in &OWNER_PLANS {
        let history_seconds = (plan.condition_count as i64 - 1) * plan.interval_seconds;
        // The owner "registered" somewhere in the half-year; each ISU starts within the
        // first interval after that, so timestamps rarely tie across ISUs.
        let latest_base = VIRTUAL_START - history_seconds - plan.interval_seconds;
        let earliest_base = VIRTUAL_START - HALF_YEAR_SECONDS;
        let owner_base = earliest_base + random.below((latest_base - earliest_base) as u64) as i64;

        for _ in 0..plan.isu_count {
            let id = isus.len() as i64 + 1;
            let uuid = loop {
                let candidate = uuid_v4(&mut random, id % 2 == 1);
                if used_uuids.insert(candidate.clone()) {
                    break candidate;
                }
            };
            let name = loop {
                let candidate = format!(
                    "{}{}",
                    NAME_PREFIXES[random.below(NAME_PREFIXES.len() as u64) as usize],
                    NAME_SUFFIXES[random.below(NAME_SUFFIXES.len() as u64) as usize]
                );
                if used_names.insert(candidate.clone()) {
                    break candidate;
                }
            };
            let icon = ICONS[random.below(ICONS.len() as u64) as usize];
            let image = (!has_default_icon(id)).then(|| icon.to_vec());
            let start = owner_base + random.below(plan.interval_seconds as u64) as i64;
            let conditions = (0..plan.condition_count as i64)
                .map(|index| random_condition(&mut random, start + index * plan.interval_seconds))
                .collect();
            isus.push(DatasetIsu {
                id,
                uuid,
                name,
                character: character_of(id).to_owned(),
                owner: plan.user.to_owned(),
                image,
                conditions,
            });
        }
    }

    Dataset {
        users: USERS.iter().map(|user| (*user).to_owned()).collect(),
        isus,
    }
}

/// Owner of the extra ISUs of [`generate_with_isu_count`]: `bulk0001`, `bulk0002`, …
pub const BULK_USER_PREFIX: &str = "bulk";
/// ISUs per bulk user (the last bulk user may own fewer).
pub const BULK_ISUS_PER_USER: usize = 10;
/// Conditions per bulk ISU: enough for a latest condition and a short graph, light to load.
pub const BULK_CONDITIONS_PER_ISU: usize = 6;
const BULK_INTERVAL_SECONDS: i64 = 600;
/// A seed of its own, so the bulk part never disturbs the default dataset's sequence.
const BULK_SEED: u64 = SEED ^ 0xb01c_0000_0000_0001;

/// The default dataset plus deterministic bulk users owning [`BULK_ISUS_PER_USER`] ISUs
/// each, until there are `isu_count` ISUs in all (ids `1..=isu_count`), for load tests
/// at the scale of a busy contest (`--dataset generated:10000`). With 28 or fewer it is
/// exactly [`generate`]. Bulk ISUs cycle through the 25 characters, alternate the
/// parity of their UUIDs' first hex digit (so both shards get half) and use the default icon.
pub fn generate_with_isu_count(isu_count: usize) -> Dataset {
    let mut isus = Vec::with_capacity(isu_count);
    let users = each_isu_with_count(isu_count, |isu| isus.push(isu));
    Dataset { users, isus }
}

/// The ISUs of [`generate_with_isu_count`], in the same order, handed to `each` one at a
/// time instead of held together, and then its users: a coordinator builds its generation
/// from them without a whole dataset in memory (about 690 bytes an ISU, 0.69 GB at a
/// million, freed in pieces among what the generation keeps).
pub fn each_isu_with_count(isu_count: usize, mut each: impl FnMut(DatasetIsu)) -> Vec<String> {
    let Dataset { mut users, isus } = generate();
    let missing = isu_count.saturating_sub(isus.len());
    let mut next_id = isus.len() as i64 + 1;
    // As their 128 bits, not as strings: the set is dropped at the end, and a million small
    // strings freed then would leave holes among what `each` keeps.
    let mut used_uuids: HashSet<u128> = isus
        .iter()
        .filter_map(|isu| u128::from_str_radix(&isu.uuid.replace('-', ""), 16).ok())
        .collect();
    isus.into_iter().for_each(&mut each);
    if missing == 0 {
        return users;
    }
    let mut random = SplitMix64::new(BULK_SEED);
    used_uuids.reserve(missing);
    users.reserve(missing.div_ceil(BULK_ISUS_PER_USER));

    let history_seconds = (BULK_CONDITIONS_PER_ISU as i64 - 1) * BULK_INTERVAL_SECONDS;
    let earliest_base = VIRTUAL_START - HALF_YEAR_SECONDS;
    let latest_base = VIRTUAL_START - history_seconds - BULK_INTERVAL_SECONDS;
    for user_index in 0..missing.div_ceil(BULK_ISUS_PER_USER) {
        let owner = format!("{BULK_USER_PREFIX}{:04}", user_index + 1);
        let owner_base = earliest_base + random.below((latest_base - earliest_base) as u64) as i64;
        let owned = BULK_ISUS_PER_USER.min(missing - user_index * BULK_ISUS_PER_USER);
        for _ in 0..owned {
            let id = next_id;
            next_id += 1;
            let uuid = loop {
                let candidate = uuid_v4_bytes(&mut random, id % 2 == 1);
                if used_uuids.insert(u128::from_be_bytes(candidate)) {
                    break uuid_text(&candidate);
                }
            };
            let name = format!(
                "{}{} {id}",
                NAME_PREFIXES[random.below(NAME_PREFIXES.len() as u64) as usize],
                NAME_SUFFIXES[random.below(NAME_SUFFIXES.len() as u64) as usize]
            );
            let start = owner_base + random.below(BULK_INTERVAL_SECONDS as u64) as i64;
            let conditions = (0..BULK_CONDITIONS_PER_ISU as i64)
                .map(|index| random_condition(&mut random, start + index * BULK_INTERVAL_SECONDS))
                .collect();
            each(DatasetIsu {
                id,
                uuid,
                name,
                character: CHARACTERS[(id - 1) as usize % CHARACTERS.len()].to_owned(),
                owner: owner.clone(),
                image: None,
                conditions,
            });
        }
        users.push(owner);
    }
    users
}

/// Ids 1..=25 carry the 25 characters in list order, so the trend shows all of them
/// from the start; later ids carry the first one, like the official data.
fn character_of(id: i64) -> &'static str {
    usize::try_from(id - 1)
        .ok()
        .and_then(|index| CHARACTERS.get(index))
        .copied()
        .unwrap_or(CHARACTERS[0])
}

/// A lowercase version-4-shaped UUID whose first hex digit has the requested parity,
/// so the default data splits evenly over the two shards (`placement::shard_of`).
fn uuid_v4(random: &mut SplitMix64, odd_first_digit: bool) -> String {
    uuid_text(&uuid_v4_bytes(random, odd_first_digit))
}

fn uuid_v4_bytes(random: &mut SplitMix64, odd_first_digit: bool) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&random.next_u64().to_be_bytes());
    bytes[8..].copy_from_slice(&random.next_u64().to_be_bytes());
    bytes[0] = (bytes[0] & !0x10) | if odd_first_digit { 0x10 } else { 0 };
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    bytes
}

/// A UUID's bytes in the 8-4-4-4-12 form of lowercase hex digits.
fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Mostly info, some warning, a few critical; the message matches the flags.
fn random_condition(random: &mut SplitMix64, timestamp: i64) -> WireCondition {
    let is_sitting = random.below(100) < 60;
    let roll = random.below(100);
    let (bits, message) = if roll < 62 {
        (0, pick(random, &INFO_MESSAGES))
    } else if roll < 94 {
        let bad_flags = [Flags::DIRTY, Flags::OVERWEIGHT, Flags::BROKEN];
        let first = random.below(3) as usize;
        let mut bits = bad_flags[first];
        if random.below(100) < 30 {
            bits |= bad_flags[(first + 1 + random.below(2) as usize) % 3];
        }
        // The message speaks about the first problem found.
        let messages: &[&str] = match bad_flags[first] {
            Flags::DIRTY => &DIRTY_MESSAGES,
            Flags::OVERWEIGHT => &OVERWEIGHT_MESSAGES,
            _ => &BROKEN_MESSAGES,
        };
        (bits, pick(random, messages))
    } else {
        (
            Flags::DIRTY | Flags::OVERWEIGHT | Flags::BROKEN,
            pick(random, &CRITICAL_MESSAGES),
        )
    };
    WireCondition {
        timestamp,
        flags: Flags::new(is_sitting, bits),
        message: message.to_owned(),
    }
}

fn pick<'t>(random: &mut SplitMix64, table: &[&'t str]) -> &'t str {
    table[random.below(table.len() as u64) as usize]
}

/// Sebastiano Vigna's splitmix64: tiny, fast and fixed forever, which is all a
/// reproducible dataset needs.
struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut value = self.state;
        value = (value ^ (value >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        value = (value ^ (value >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        value ^ (value >> 31)
    }

    /// A value in `0..bound` (`bound > 0`), by Lemire's multiply-shift.
    fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{wire_condition, DEFAULT_ICON};
    use crate::domain::Level;
    use crate::placement::{shard_of, Shard};

    fn is_jpeg(bytes: &[u8]) -> bool {
        bytes.starts_with(&[0xff, 0xd8, 0xff]) && bytes.ends_with(&[0xff, 0xd9])
    }

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // First outputs for seed 0 from Vigna's reference implementation.
        let mut random = SplitMix64::new(0);
        assert_eq!(random.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(random.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn generate_is_deterministic() {
        assert_eq!(generate(), generate());
    }

    #[test]
    fn twenty_eight_isus_with_ids_1_to_28_owned_as_planned() {
        let dataset = generate();
        assert_eq!(dataset.users, USERS);
        let ids: Vec<i64> = dataset.isus.iter().map(|isu| isu.id).collect();
        assert_eq!(ids, (1..=28).collect::<Vec<_>>());

        let shape = |owner: &str| -> Vec<(usize, Vec<i64>)> {
            dataset
                .isus
                .iter()
                .filter(|isu| isu.owner == owner)
                .map(|isu| {
                    let mut gaps: Vec<i64> = isu
                        .conditions
                        .windows(2)
                        .map(|pair| pair[1].timestamp - pair[0].timestamp)
                        .collect();
                    gaps.dedup();
                    (isu.conditions.len(), gaps)
                })
                .collect()
        };
        assert_eq!(shape("isucon1"), vec![(72, vec![3600]); 5]);
        assert_eq!(shape("isucon2"), vec![(12, vec![1800]); 20]);
        for owner in ["quiet_maple", "sunny_kestrel", "gentle_harbor"] {
            assert_eq!(shape(owner), vec![(6, vec![600])], "{owner}");
        }
        assert!(shape("isucon").is_empty() && shape("isucon3").is_empty());
        let owners: Vec<&str> = dataset.isus.iter().map(|isu| isu.owner.as_str()).collect();
        assert_eq!(owners[0..5], ["isucon1"; 5]);
        assert_eq!(owners[5..25], ["isucon2"; 20]);
        assert_eq!(owners[25..], ["quiet_maple", "sunny_kestrel", "gentle_harbor"]);
    }

    #[test]
    fn characters_follow_the_official_order() {
        let dataset = generate();
        for isu in &dataset.isus[..25] {
            assert_eq!(isu.character, CHARACTERS[isu.id as usize - 1], "isu {}", isu.id);
        }
        for isu in &dataset.isus[25..] {
            assert_eq!(isu.character, "いじっぱり", "isu {}", isu.id);
        }
        let present: HashSet<&str> = dataset.isus.iter().map(|isu| isu.character.as_str()).collect();
        assert_eq!(present, CHARACTERS.into_iter().collect());
    }

    #[test]
    fn conditions_are_valid_increasing_and_in_the_half_year() {
        let dataset = generate();
        let mut level_counts = [0usize; 3];
        for isu in &dataset.isus {
            assert!(!isu.conditions.is_empty(), "isu {} has conditions", isu.id);
            assert!(
                isu.conditions
                    .windows(2)
                    .all(|pair| pair[0].timestamp < pair[1].timestamp),
                "isu {} timestamps strictly increase",
                isu.id
            );
            for condition in &isu.conditions {
                assert!(
                    (VIRTUAL_START - HALF_YEAR_SECONDS..VIRTUAL_START).contains(&condition.timestamp),
                    "isu {}: {}",
                    isu.id,
                    condition.timestamp
                );
                // Round-trips through the API's condition string, so the flags are valid.
                let rebuilt = wire_condition(
                    condition.timestamp,
                    condition.flags.is_sitting(),
                    condition.flags.condition_string(),
                    &condition.message,
                );
                assert_eq!(rebuilt.as_ref(), Some(condition));
                let expected_table: &[&str] = match condition.flags.level() {
                    Level::Info => &INFO_MESSAGES,
                    Level::Critical => &CRITICAL_MESSAGES,
                    Level::Warning => &[DIRTY_MESSAGES, OVERWEIGHT_MESSAGES, BROKEN_MESSAGES].concat(),
                };
                assert!(expected_table.contains(&condition.message.as_str()), "{condition:?}");
                level_counts[condition.flags.level().index()] += 1;
            }
        }
        let [info, warning, critical] = level_counts;
        assert_eq!(info + warning + critical, 5 * 72 + 20 * 12 + 3 * 6);
        assert!(info > warning && warning > critical && critical > 0, "{level_counts:?}");
    }

    #[test]
    fn uuids_are_unique_v4_shaped_and_spread_over_both_shards() {
        let dataset = generate();
        let uuids: HashSet<&str> = dataset.isus.iter().map(|isu| isu.uuid.as_str()).collect();
        assert_eq!(uuids.len(), 28);
        for isu in &dataset.isus {
            let uuid = isu.uuid.as_bytes();
            assert_eq!(uuid.len(), 36, "{}", isu.uuid);
            for (index, byte) in uuid.iter().enumerate() {
                if [8, 13, 18, 23].contains(&index) {
                    assert_eq!(*byte, b'-', "{}", isu.uuid);
                } else {
                    assert!(matches!(byte, b'0'..=b'9' | b'a'..=b'f'), "{}", isu.uuid);
                }
            }
            assert_eq!(uuid[14], b'4', "{}", isu.uuid);
            assert!(b"89ab".contains(&uuid[19]), "{}", isu.uuid);
        }
        for owner in ["isucon1", "isucon2"] {
            let shards: HashSet<Shard> = dataset
                .isus
                .iter()
                .filter(|isu| isu.owner == owner)
                .map(|isu| shard_of(&isu.uuid))
                .collect();
            assert_eq!(shards.len(), 2, "{owner}'s ISUs live on both shards");
        }
        let on_b = dataset
            .isus
            .iter()
            .filter(|isu| shard_of(&isu.uuid) == Shard::B)
            .count();
        assert_eq!(on_b, 14);
        let first_digits: HashSet<u8> = dataset.isus.iter().map(|isu| isu.uuid.as_bytes()[0]).collect();
        assert!(first_digits.len() >= 8, "first hex digits vary: {first_digits:?}");
    }

    #[test]
    fn names_are_unique_and_icons_are_small_jpegs() {
        let dataset = generate();
        let names: HashSet<&str> = dataset.isus.iter().map(|isu| isu.name.as_str()).collect();
        assert_eq!(names.len(), 28);

        for icon in ICONS {
            assert!(is_jpeg(icon) && icon.len() < 4096);
            assert_ne!(icon, DEFAULT_ICON);
        }
        assert!(is_jpeg(DEFAULT_ICON) && DEFAULT_ICON.len() < 8192);

        let without_image: Vec<i64> = dataset
            .isus
            .iter()
            .filter(|isu| isu.image.is_none())
            .map(|isu| isu.id)
            .collect();
        assert_eq!(without_image, [7, 17, 27]);
        let used_icons: HashSet<&[u8]> = dataset.isus.iter().filter_map(|isu| isu.image.as_deref()).collect();
        assert!(used_icons.len() >= 4, "{} distinct icons", used_icons.len());
        assert!(used_icons.iter().all(|icon| ICONS.contains(icon)));
    }

    #[test]
    fn generate_with_isu_count_keeps_the_default_dataset_up_to_28() {
        assert_eq!(generate_with_isu_count(28), generate());
        assert_eq!(generate_with_isu_count(0), generate());
    }

    #[test]
    fn generate_with_isu_count_is_deterministic() {
        assert_eq!(generate_with_isu_count(1_003), generate_with_isu_count(1_003));
    }

    #[test]
    fn bulk_users_own_ten_light_isus_each_after_the_default_ones() {
        let default = generate();
        let dataset = generate_with_isu_count(10_000);
        assert_eq!(dataset.isus[..28], default.isus[..]);
        assert_eq!(dataset.users[..USERS.len()], default.users[..]);
        assert!(dataset.isus.iter().map(|isu| isu.id).eq(1..=10_000));

        let bulk = &dataset.isus[28..];
        let bulk_users = &dataset.users[USERS.len()..];
        assert_eq!(bulk_users.len(), 998);
        assert_eq!(
            (bulk_users[0].as_str(), bulk_users[997].as_str()),
            ("bulk0001", "bulk0998")
        );
        for (user_index, owned) in bulk.chunks(BULK_ISUS_PER_USER).enumerate() {
            assert!(owned.iter().all(|isu| isu.owner == bulk_users[user_index]));
        }
        // The last user gets the remainder: 9,972 = 997 × 10 + 2.
        assert_eq!(bulk.chunks(BULK_ISUS_PER_USER).last().map(<[DatasetIsu]>::len), Some(2));

        for isu in bulk {
            assert_eq!(isu.image, None, "isu {}", isu.id);
            assert_eq!(isu.character, CHARACTERS[(isu.id as usize - 1) % 25], "isu {}", isu.id);
            assert_eq!(isu.conditions.len(), BULK_CONDITIONS_PER_ISU, "isu {}", isu.id);
            assert!(isu
                .conditions
                .windows(2)
                .all(|pair| pair[0].timestamp < pair[1].timestamp));
            assert!(isu
                .conditions
                .iter()
                .all(|condition| (VIRTUAL_START - HALF_YEAR_SECONDS..VIRTUAL_START).contains(&condition.timestamp)));
        }
        let uuids: HashSet<&str> = dataset.isus.iter().map(|isu| isu.uuid.as_str()).collect();
        assert_eq!(uuids.len(), 10_000);
        let on_b = bulk.iter().filter(|isu| shard_of(&isu.uuid) == Shard::B).count();
        assert_eq!(on_b, bulk.len() / 2, "bulk ISUs split evenly over the shards");
        let levels: HashSet<usize> = bulk
            .iter()
            .filter_map(|isu| isu.conditions.last())
            .map(|condition| condition.flags.level().index())
            .collect();
        assert_eq!(levels.len(), 3, "latest conditions of every level");
    }
}
