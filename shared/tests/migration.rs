//! Property tests of the migration state machine (`shared::migration`): whatever events
//! arrive, in any order and repeated, and whenever a node restarts, a migration is never
//! half-applied: the subject has exactly one owner, ownership moves only by the flip and only
//! after the target caught up, the source keeps its copy until after the flip, and a restart
//! rolls back before the flip and resumes after it.

use proptest::collection::vec;
use proptest::prelude::*;
use shared::migration::{Event, Migration, Phase, Recovery, Subject};

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        Just(Event::CloneStarted),
        Just(Event::CaughtUp),
        (1u64..4).prop_map(|map_version| Event::Flipped { map_version }),
        Just(Event::Forgotten),
        Just(Event::Failed),
    ]
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn any_event_sequence_keeps_one_owner_and_never_half_applies(events in vec(event(), 0..30)) {
        let mut migration = Migration::plan(1, Subject::Slot(0x42), 0, 1).unwrap();
        let mut caught_up = false;
        let mut flipped = false;
        for event in events {
            let before = migration.clone();
            match migration.apply(event) {
                Ok(next) => migration = next,
                Err(_) => {
                    // A refused event changes nothing.
                    prop_assert_eq!(&migration, &before);
                    continue;
                }
            }
            // A repeat is a no-op.
            prop_assert_eq!(migration.apply(event).unwrap(), migration.clone());
            caught_up |= migration.phase == Phase::CaughtUp;
            if matches!(migration.phase, Phase::Flipped { .. }) {
                prop_assert!(caught_up, "flipped before the target caught up");
                flipped = true;
            }
            // One owner, the source until the flip and the target after it, for good.
            let owner = migration.owner();
            prop_assert!(owner == migration.from || owner == migration.to);
            prop_assert_eq!(owner == migration.to, flipped);
            if flipped {
                prop_assert!(migration.phase != Phase::RolledBack, "rolled back after the flip");
            }
            // The data is somewhere at every moment: the source keeps it until it was flipped.
            prop_assert!(migration.source_holds_data() || flipped);
            prop_assert!(migration.source_holds_data() || migration.target_holds_data());
            // A crash between publishing the flipped map and logging the flip: the map wins.
            if migration.phase == Phase::CaughtUp {
                prop_assert_eq!(migration.on_restart(migration.to), Recovery::ResumeAfterFlip);
            }
            // A restart now leads to a state where the owner holds the data.
            match migration.on_restart(migration.owner()) {
                Recovery::RollBack => {
                    let rolled_back = migration.apply(Event::Failed).unwrap();
                    prop_assert_eq!(rolled_back.owner(), migration.from);
                    prop_assert!(rolled_back.source_holds_data());
                }
                Recovery::ResumeAfterFlip => {
                    prop_assert!(flipped);
                    let resumed = migration.apply(Event::Forgotten).unwrap();
                    prop_assert_eq!(resumed.owner(), migration.to);
                    prop_assert!(resumed.target_holds_data());
                }
                Recovery::Nothing => prop_assert!(migration.is_finished()),
            }
        }
    }

    #[test]
    fn a_migration_survives_its_wire_form(events in vec(event(), 0..10), pin in "[0-9a-f]{8}") {
        let mut migration = Migration::plan(9, Subject::Pin(pin), 3, 0).unwrap();
        for event in events {
            if let Ok(next) = migration.apply(event) {
                migration = next;
            }
        }
        let wire = serde_json::to_vec(&migration).unwrap();
        prop_assert_eq!(serde_json::from_slice::<Migration>(&wire).unwrap(), migration);
    }
}
