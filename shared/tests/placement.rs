//! Property tests of the placement map (`shared::placement_map`): whatever sequence of
//! changes an operator makes, the map covers all 256 slots with cells that exist, every ISU
//! has exactly one owner at each version, versions only grow, and a rebalance moves the
//! fewest slots that leave the cells balanced. Bounded cases: about a second.

use proptest::collection::vec;
use proptest::prelude::*;
use shared::placement::{shard_of, Shard};
use shared::placement_map::{slot_of, Cell, CellId, PlacementMap, SLOTS};

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn cell(index: usize) -> Cell {
    Cell {
        name: format!("cell-{index}"),
        internal_url: format!("http://10.0.0.{index}:3000"),
        device_url: format!("http://10.0.0.{index}:8080"),
    }
}

/// One operator action; cell numbers are taken modulo the cells the map has then.
#[derive(Debug, Clone)]
enum Change {
    AssignSlot(u8, u8),
    Pin(String, u8),
    Unpin(String),
    AddCell,
    Rebalance,
    Drain(u8),
}

fn uuid_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
        "[0-9a-fA-F]{0,3}",
        ".{0,4}",
    ]
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (any::<u8>(), any::<u8>()).prop_map(|(slot, cell)| Change::AssignSlot(slot, cell)),
        (uuid_like(), any::<u8>()).prop_map(|(uuid, cell)| Change::Pin(uuid, cell)),
        uuid_like().prop_map(Change::Unpin),
        Just(Change::AddCell),
        Just(Change::Rebalance),
        any::<u8>().prop_map(Change::Drain),
    ]
}

/// The invariants every map must hold, checked for `probes` UUIDs.
fn assert_well_formed(map: &PlacementMap, probes: &[String]) {
    assert_eq!(map.slots().len(), SLOTS);
    assert!(map.slots().iter().all(|cell| usize::from(*cell) < map.cells().len()));
    assert!(map.pins().values().all(|cell| usize::from(*cell) < map.cells().len()));
    assert_eq!(map.slot_counts().iter().sum::<usize>(), SLOTS);
    for uuid in probes {
        let owner = map.owner(uuid);
        assert!(usize::from(owner) < map.cells().len());
        // Exactly one owner: the pin, or else the slot's cell.
        let expected = map
            .pins()
            .get(uuid)
            .copied()
            .unwrap_or(map.slots()[usize::from(slot_of(uuid))]);
        assert_eq!(owner, expected, "{uuid:?}");
    }
}

/// The fewest moves to a balanced map, by brute force over which active cells get the
/// larger share (independent of the planner's own choice).
fn fewest_moves(counts: &[usize], active: &[CellId]) -> usize {
    let base = SLOTS / active.len();
    let extra = SLOTS % active.len();
    let inactive: usize = (0..counts.len())
        .filter(|cell| !active.contains(&(*cell as CellId)))
        .map(|cell| counts[cell])
        .sum();
    let mut best = usize::MAX;
    for mask in 0u32..(1 << active.len()) {
        if mask.count_ones() as usize != extra {
            continue;
        }
        let moves: usize = active
            .iter()
            .enumerate()
            .map(|(rank, cell)| {
                let target = base + usize::from(mask & (1 << rank) != 0);
                counts[usize::from(*cell)].saturating_sub(target)
            })
            .sum();
        best = best.min(moves);
    }
    inactive + best
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn every_sequence_of_changes_keeps_a_whole_map_with_one_owner_per_isu(
        initial_cells in 1usize..=4,
        changes in vec(change(), 0..40),
        probes in vec(uuid_like(), 1..20),
    ) {
        let mut map = PlacementMap::new((0..initial_cells).map(cell).collect()).unwrap();
        assert_well_formed(&map, &probes);
        for change in changes {
            let before = map.clone();
            let count = map.cells().len() as u8;
            match change {
                Change::AssignSlot(slot, to) => { map.assign_slot(slot, to % count).unwrap(); }
                Change::Pin(uuid, to) => { map.pin(&uuid, to % count).unwrap(); }
                Change::Unpin(uuid) => { map.unpin(&uuid); }
                Change::AddCell => { let _ = map.add_cell(cell(map.cells().len())); }
                Change::Rebalance => {
                    let all: Vec<CellId> = (0..count).collect();
                    let plan = map.rebalance_plan(&all).unwrap();
                    map.apply(&plan).unwrap();
                }
                Change::Drain(which) => {
                    if let Ok(plan) = map.drain_plan(which % count) {
                        map.apply(&plan).unwrap();
                        prop_assert_eq!(map.slot_counts()[usize::from(which % count)], 0);
                    }
                }
            }
            assert_well_formed(&map, &probes);
            if map != before {
                prop_assert!(map.version() > before.version(), "a change without a new version");
            } else {
                prop_assert_eq!(map.version(), before.version());
            }
        }
    }

    #[test]
    fn a_rebalance_moves_the_fewest_slots_and_balances_the_active_cells(
        cell_count in 1usize..=8,
        assignment in vec(any::<u8>(), SLOTS),
        active_mask in 1u16..=255,
    ) {
        let mut map = PlacementMap::new((0..cell_count).map(cell).collect()).unwrap();
        for (slot, owner) in assignment.iter().enumerate() {
            map.assign_slot(slot as u8, owner % cell_count as u8).unwrap();
        }
        let active: Vec<CellId> = (0..cell_count as CellId).filter(|cell| active_mask & (1 << cell) != 0).collect();
        prop_assume!(!active.is_empty());
        let counts = map.slot_counts();
        let plan = map.rebalance_plan(&active).unwrap();
        prop_assert_eq!(plan.len(), fewest_moves(&counts, &active));
        // Each slot moves at most once, from its current owner.
        let mut seen = std::collections::BTreeSet::new();
        for step in &plan {
            prop_assert!(seen.insert(step.slot));
            prop_assert_eq!(map.slots()[usize::from(step.slot)], step.from);
            prop_assert!(active.contains(&step.to));
        }
        map.apply(&plan).unwrap();
        let counts = map.slot_counts();
        let active_counts: Vec<usize> = active.iter().map(|cell| counts[usize::from(*cell)]).collect();
        let (low, high) = (*active_counts.iter().min().unwrap(), *active_counts.iter().max().unwrap());
        prop_assert!(high - low <= 1, "unbalanced: {counts:?}");
        for cell in 0..cell_count as CellId {
            if !active.contains(&cell) {
                prop_assert_eq!(counts[usize::from(cell)], 0);
            }
        }
        prop_assert_eq!(map.rebalance_plan(&active).unwrap(), vec![]);
    }

    #[test]
    fn the_default_two_cell_map_agrees_with_the_parity_rule_on_any_string(uuid in ".{0,40}") {
        let map = PlacementMap::new((0..2).map(cell).collect()).unwrap();
        let expected = match shard_of(&uuid) { Shard::A => 0, Shard::B => 1 };
        prop_assert_eq!(map.owner(&uuid), expected);
    }

    #[test]
    fn a_map_survives_its_wire_form(changes in vec(change(), 0..20)) {
        let mut map = PlacementMap::new((0..2).map(cell).collect()).unwrap();
        for change in changes {
            let count = map.cells().len() as u8;
            match change {
                Change::AssignSlot(slot, to) => { map.assign_slot(slot, to % count).unwrap(); }
                Change::Pin(uuid, to) => { map.pin(&uuid, to % count).unwrap(); }
                Change::AddCell => { let _ = map.add_cell(cell(map.cells().len())); }
                _ => {}
            }
        }
        let wire = serde_json::to_vec(&map).unwrap();
        prop_assert_eq!(serde_json::from_slice::<PlacementMap>(&wire).unwrap(), map);
    }
}
