//! The per-ISU quota's sketch and the lanes' shuffle sharding, as properties and as the
//! figures `docs/benchmarks.md` quotes (false positives among 100,000 ISUs; exposure to a poisonous
//! ISU's lanes).

use std::collections::HashMap;

use proptest::collection::vec;
use proptest::prelude::*;
use shared::shuffle::{lane_sets, lanes_of};
use shared::sketch::CountMinSketch;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(200))]

    /// Whatever is counted, no key is ever estimated below its true count, and a small
    /// sketch's estimate stays within the classic bound of the total.
    #[test]
    fn a_sketch_never_underestimates(adds in vec((0u16..300, 1u32..50), 1..400), seed in any::<u64>()) {
        let sketch = CountMinSketch::new(4, 256, seed);
        let mut exact: HashMap<u16, u32> = HashMap::new();
        for (key, count) in &adds {
            sketch.add(&key.to_le_bytes(), *count);
            *exact.entry(*key).or_default() += count;
        }
        let total: u32 = exact.values().sum();
        for (key, count) in &exact {
            let estimate = sketch.estimate(&key.to_le_bytes());
            prop_assert!(estimate >= *count, "key {key}: {estimate} < {count}");
            prop_assert!(estimate <= total);
        }
    }

    #[test]
    fn lane_sets_are_distinct_in_range_and_stable(key in vec(any::<u8>(), 0..40), seed in any::<u64>(), lanes in 1usize..20, choices in 1usize..5) {
        let picked = lanes_of(&key, seed, lanes, choices);
        prop_assert_eq!(picked.len(), choices.min(lanes));
        prop_assert!(picked.iter().all(|lane| *lane < lanes));
        let mut sorted = picked.clone();
        sorted.sort_unstable();
        sorted.dedup();
        prop_assert_eq!(sorted.len(), picked.len());
        prop_assert_eq!(picked, lanes_of(&key, seed, lanes, choices));
    }
}

fn uuid(serial: u32) -> String {
    // Random-looking, like JIA's: the serial spread by a multiplicative hash.
    let mixed = (serial as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        mixed >> 32,
        (mixed >> 16) & 0xffff,
        mixed & 0xfff,
        (mixed >> 20) & 0xfff,
        serial
    )
}

/// 100,000 ISUs each counted at a normal device's 10-second volume (250 conditions), plus
/// one flooding ISU at 100 times that, in one window of the sketch (ε = 0.00005,
/// δ = 0.00001) with the default quota (10,000 per window): how many normal ISUs would be
/// shaped by mistake.
#[test]
fn false_positives_among_100000_normal_isus_stay_under_a_tenth_of_a_percent() {
    let sketch = CountMinSketch::for_error(0.00005, 0.00001, 11);
    let quota = 10_000;
    let isus = 100_000;
    for serial in 0..isus {
        // Posted as a device does: batches of 10.
        for _ in 0..25 {
            sketch.add(uuid(serial).as_bytes(), 10);
        }
    }
    assert!(sketch.add(b"flooding", 25_000) > quota, "the flood is seen");
    let shaped_by_mistake = (0..isus)
        .filter(|serial| sketch.estimate(uuid(*serial).as_bytes()) > quota)
        .count();
    let worst = (0..isus)
        .map(|serial| sketch.estimate(uuid(serial).as_bytes()))
        .max()
        .unwrap();
    eprintln!(
        "sketch: {isus} ISUs, total {} conditions, worst normal estimate {worst} (true 250), shaped by mistake {shaped_by_mistake}",
        isus as u64 * 250 + 25_000
    );
    assert!(
        (shaped_by_mistake as f64) < 0.001 * isus as f64,
        "{shaped_by_mistake} normal ISUs over the quota"
    );
}

/// With one poisonous ISU jamming its 2 lanes of 8, the ISUs whose lanes are both among
/// them: 1 in C(8, 2) = 28 expected; with a single shared lane, every ISU.
#[test]
fn the_share_of_isus_fully_exposed_to_one_poisonous_isu_matches_the_combinatorics() {
    let seed = 5;
    let poison = lanes_of(b"poisonous", seed, 8, 2);
    let isus = 100_000;
    let exposed = (0..isus)
        .filter(|serial| {
            lanes_of(uuid(*serial).as_bytes(), seed, 8, 2)
                .iter()
                .all(|lane| poison.contains(lane))
        })
        .count();
    let share = exposed as f64 / isus as f64;
    let expected = 1.0 / lane_sets(8, 2) as f64;
    eprintln!(
        "lanes: {exposed} of {isus} ISUs share both lanes of the poisonous one ({share:.4}; 1/28 = {expected:.4})"
    );
    assert!((share - expected).abs() < 0.1 * expected, "{share} vs {expected}");
    let single = (0..1000)
        .filter(|serial| lanes_of(uuid(*serial).as_bytes(), seed, 1, 1) == lanes_of(b"poisonous", seed, 1, 1))
        .count();
    assert_eq!(single, 1000, "one shared queue exposes every ISU");
}
