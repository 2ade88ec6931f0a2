//! Shuffle sharding of ingest lanes (`docs/cells.md`, "Inside a cell: quota and lanes"): each ISU gets a
//! stable set of `k` distinct lanes out of `n`, picked by a seeded hash of its UUID, and
//! uses the least loaded of them. An ISU that jams its lanes jams only its own `k`; another
//! ISU is cut off only if all its `k` lanes are among them, which for a random assignment is
//! one ISU in C(n, k) (1 in 28 for 2 of 8), where a single shared queue exposes every ISU.

use std::hash::{BuildHasher, Hasher};

/// The most lanes an assignment may draw from.
pub const MAX_LANES: usize = 64;

/// The `choices` distinct lanes (of `lanes`) of `key`, in a stable order (the first one
/// wins ties). `choices` is clamped to `1..=lanes`, `lanes` to `1..=MAX_LANES`.
pub fn lanes_of(key: &[u8], seed: u64, lanes: usize, choices: usize) -> Vec<usize> {
    let lanes = lanes.clamp(1, MAX_LANES);
    let choices = choices.clamp(1, lanes);
    let mut hasher =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().build_hasher();
    hasher.write_u64(seed);
    hasher.write(key);
    let mut state = hasher.finish();
    // A partial Fisher-Yates shuffle of 0..lanes driven by splitmix64.
    let mut order: Vec<usize> = (0..lanes).collect();
    for position in 0..choices {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut mixed = state;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        mixed ^= mixed >> 31;
        let pick = position + (mixed % (lanes - position) as u64) as usize;
        order.swap(position, pick);
    }
    order.truncate(choices);
    order
}

/// C(n, k): how many distinct lane sets there are; one ISU in this many shares all its
/// lanes with a given one.
pub fn lane_sets(lanes: usize, choices: usize) -> u64 {
    let choices = choices.min(lanes);
    let smaller = choices.min(lanes - choices) as u64;
    (0..smaller).fold(1u64, |sets, index| sets * (lanes as u64 - index) / (index + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_of_eight_makes_28_sets() {
        assert_eq!(lane_sets(8, 2), 28);
        assert_eq!(lane_sets(8, 1), 8);
        assert_eq!(lane_sets(1, 1), 1);
        assert_eq!(lane_sets(16, 3), 560);
    }

    #[test]
    fn an_assignment_is_stable_distinct_and_in_range() {
        let lanes = lanes_of(b"0a1b2c3d-0000-4000-8000-000000000001", 42, 8, 2);
        assert_eq!(lanes, lanes_of(b"0a1b2c3d-0000-4000-8000-000000000001", 42, 8, 2));
        assert_eq!(lanes.len(), 2);
        assert_ne!(lanes[0], lanes[1]);
        assert!(lanes.iter().all(|lane| *lane < 8));
        assert_eq!(lanes_of(b"x", 1, 1, 2), vec![0], "clamped to the lanes there are");
    }
}
