//! `isuctl cells` against a real local cluster, as a person runs it: status (table and JSON),
//! migrate, drain, rebalance and random, with their exit statuses.

mod support;

use shared::protocol::cells::{CellsAnswer, CellsSummary};
use support::{free_loopback_subnet, scratch, text, LocalCluster};

fn summary(cluster: &LocalCluster) -> CellsSummary {
    let output = cluster.isuctl(&["--json", "cells", "status", "--seconds", "0.1"]);
    assert!(output.status.success(), "{}", text(&output));
    serde_json::from_slice(&output.stdout).expect("the cells summary in JSON")
}

fn slots(summary: &CellsSummary) -> Vec<usize> {
    summary.cells.iter().map(|cell| cell.slots).collect()
}

/// `isuctl --json cells ARGS…`: the exit status and the coordinator's answer.
fn operate(cluster: &LocalCluster, args: &[&str]) -> (Option<i32>, CellsAnswer) {
    let mut all = vec!["--json", "cells"];
    all.extend_from_slice(args);
    let output = cluster.isuctl(&all);
    let answer = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| panic!("{error}: {}", text(&output)));
    (output.status.code(), answer)
}

#[test]
fn cells_commands_move_slots_show_the_map_and_fail_with_the_coordinators_reason() {
    let scratch = scratch("cells");
    let cluster = LocalCluster::up(&scratch, &free_loopback_subnet(), &[]);

    let before = summary(&cluster);
    assert_eq!(slots(&before), [128, 128]);
    assert!(before.cells.iter().all(|cell| cell.is_up()));
    let table = text(&cluster.isuctl(&["cells", "status", "--seconds", "0.1"]));
    assert!(
        table.starts_with("placement map version 1 (2 cells, 0 pins)"),
        "{table}"
    );
    assert!(!table.contains("-0"), "no negative zero: {table}");

    // Slot 0b is cell a's in the default map (first hex digit even).
    let (code, answer) = operate(&cluster, &["migrate", "--slot", "0b", "--to", "b"]);
    assert_eq!(code, Some(0), "{answer:?}");
    assert_eq!(answer.migrations.len(), 1, "{answer:?}");
    assert_eq!(
        (
            answer.migrations[0].from.as_str(),
            answer.migrations[0].subject.as_str()
        ),
        ("a", "slot 0b")
    );
    let version = answer.map_version.expect("a map version");
    // The map slot by slot: slot 0b (row 0, column b) is b's now, 0a still a's.
    let map = cluster.isuctl(&["--json", "cells", "map"]);
    assert!(map.status.success(), "{}", text(&map));
    let placement: shared::protocol::cells::PlacementAnswer = serde_json::from_slice(&map.stdout).unwrap();
    assert_eq!((placement.map.slots()[0x0a], placement.map.slots()[0x0b]), (0, 1));
    let grid = text(&cluster.isuctl(&["cells", "map"]));
    let row_0 = grid.lines().find(|line| line.starts_with("0_ ")).expect(&grid);
    assert_eq!(row_0.split_whitespace().nth(11), Some("a"), "{grid}");
    assert_eq!(row_0.split_whitespace().nth(12), Some("b"), "{grid}");
    let (code, again) = operate(&cluster, &["migrate", "--slot", "0b", "--to", "b"]);
    assert_eq!(
        (code, again.migrations.len()),
        (Some(0), 0),
        "already there: nothing moves"
    );

    // Refusals: exit 1 with the coordinator's reason, in the answer and on stderr.
    let output = cluster.isuctl(&["cells", "migrate", "--slot", "zz", "--to", "b"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output).contains("slot must be two hex digits"),
        "{}",
        text(&output)
    );
    let (code, answer) = operate(&cluster, &["drain", "z"]);
    assert_eq!(code, Some(1));
    assert_eq!(answer.error.as_deref(), Some("no cell named \"z\""));
    // Bad usage: exit 2 before any call.
    assert_eq!(
        cluster.isuctl(&["cells", "migrate", "--to", "b"]).status.code(),
        Some(2)
    );
    assert_eq!(cluster.isuctl(&["cells", "drain", "a b"]).status.code(), Some(2));

    let (code, drained) = operate(&cluster, &["drain", "a"]);
    assert_eq!(code, Some(0));
    assert!(drained
        .migrations
        .iter()
        .all(|migration| migration.from == "a" && migration.to == "b"));
    assert_eq!(slots(&summary(&cluster)), [0, 256]);

    let (code, _) = operate(&cluster, &["rebalance"]);
    assert_eq!(code, Some(0));
    assert_eq!(slots(&summary(&cluster)), [128, 128]);

    // Random: every call moves one slot, from its owner to the other cell.
    let mut last = version;
    for _ in 0..6 {
        let (code, answer) = operate(&cluster, &["random"]);
        assert_eq!(code, Some(0));
        assert_eq!(answer.migrations.len(), 1, "random always moves: {answer:?}");
        let moved = &answer.migrations[0];
        assert_ne!(moved.from, moved.to);
        assert!(answer.map_version.unwrap() > last);
        last = answer.map_version.unwrap();
    }
    let after = summary(&cluster);
    assert_eq!(after.map_version, last);
    assert_eq!(slots(&after).iter().sum::<usize>(), 256);

    drop(cluster);
    let _ = std::fs::remove_dir_all(&scratch);
}
