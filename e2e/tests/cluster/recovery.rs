//! Cells under failure: a migration interrupted by a kill -9 of the coordinator, the source
//! or the target at an exact step (fail points, `node_http::fail_points_from_env`) is rolled
//! back or resumed when the node comes back, never half-applied; and a worker added to a
//! running (durable) cluster gets its share by a rebalance. Devices post all along.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::cells::{cells_call, local_status, placement, try_cells_call, Devices};
use super::durability::own_timestamps;
use e2e::*;

/// Which node the test kills.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Victim {
    Coordinator,
    /// The leader of three coordinator replicas (the next leader ends the migration).
    Leader,
    Source,
    Target,
}

/// How long a fail point holds its step: time enough to kill a node there.
const HOLD: &str = "sleep(4000)";

/// The cell index the map gives `slot` (two hex digits).
fn slot_owner(placement: &Value, slot: &str) -> u64 {
    let index = usize::from_str_radix(slot, 16).unwrap();
    placement["map"]["slots"][index].as_u64().expect("a slot's cell")
}

/// Every acknowledged condition is stored, and nothing else (read page by page, so a
/// duplicate would show).
async fn assert_exactly_acknowledged(agent: &Agent, uuid: &str, acknowledged: &BTreeSet<i64>) {
    assert!(
        acknowledged.len() >= 20,
        "{uuid}: only {} acknowledged",
        acknowledged.len()
    );
    let stored = own_timestamps(agent, uuid).await;
    let missing: Vec<_> = acknowledged.difference(&stored).take(5).collect();
    assert!(
        missing.is_empty(),
        "{uuid}: acknowledged but lost: {missing:?} ({} of {} lost; {} stored, from {:?} to {:?})",
        acknowledged.difference(&stored).count(),
        acknowledged.len(),
        stored.len(),
        stored.first(),
        stored.last()
    );
    let extra: Vec<_> = stored.difference(acknowledged).take(5).collect();
    assert!(extra.is_empty(), "{uuid}: stored but never acknowledged: {extra:?}");
}

/// Moves the slot of an ISU of cell a to cell b while devices post; holds the migration at
/// `fail_point` (once `reached` says the published phase shows it is there), kills `victim`
/// with SIGKILL, starts it again, and checks that the migration ended with `flipped` (true:
/// resumed, b owns; false: rolled back, a owns) and nothing lost or duplicated anywhere.
async fn interrupt_a_migration(fail_point: &str, reached: fn(&Value) -> bool, victim: Victim, flipped: bool) {
    let mut cluster = spawn_cluster_with(ClusterOptions {
        durable: true,
        coordinators: if victim == Victim::Leader { 3 } else { 1 },
        coordinator_args: vec!["--migration-grace-ms".into(), "300".into()],
        fail_points: Some(format!("{fail_point}={HOLD}")),
        ..ClusterOptions::default()
    })
    .await;
    let workers = cluster.workers.len();
    // With replicas, the migration is asked of the leader itself (a follower would forward
    // it), and everything else of a follower that survives it.
    let (leader, survivor) = match victim {
        Victim::Leader => {
            let leader = super::replicas::agreed_leader(&cluster).await;
            (leader, (leader + 1) % 3)
        }
        _ => (0, 0),
    };
    let alice = match victim {
        Victim::Leader => sign_in_with(super::replicas::agent_of(&cluster, survivor), &cluster.signer, "alice").await,
        _ => cluster.sign_in("alice").await,
    };
    let moving = cluster.known_uuid('0', 0x51);
    let staying = cluster.known_uuid('1', 0x52);
    let slot = moving[..2].to_owned();
    for uuid in [&moving, &staying] {
        alice.register(uuid, "isu", None).await.json(201);
    }
    let devices = Devices::start(&[
        (moving.clone(), cluster.device_servers[0].clone()),
        (staying.clone(), cluster.device_servers[1].clone()),
    ]);
    tokio::time::sleep(Duration::from_millis(300)).await;

    if victim == Victim::Leader {
        cluster.coordinator = cluster.coordinators[leader].clone();
    }
    let migrate = {
        let (client, coordinator, secret) = (
            cluster.raw_client(),
            cluster.coordinator.clone(),
            cluster.secret.clone(),
        );
        let body = json!({"slot": slot, "to": "b"});
        tokio::spawn(
            async move { try_cells_call(&client, &coordinator, &secret, "/internal/cells/migrate", body).await },
        )
    };
    let cluster_ref = &cluster;
    wait_until(
        &format!("the migration reaches {fail_point}"),
        Duration::from_secs(10),
        || async move {
            let migrations = placement(cluster_ref).await["migrations"].clone();
            migrations
                .as_array()
                .and_then(|list| list.first())
                .is_some_and(reached)
                .then_some(())
        },
    )
    .await;
    // Inside the fail point's hold now (after the grace period, for the one after the flip);
    // devices go on posting meanwhile (forwarded to the target while it clones).
    tokio::time::sleep(Duration::from_millis(600)).await;

    let mut coordinator = workers;
    let node = match victim {
        Victim::Coordinator => coordinator,
        Victim::Leader => workers + leader,
        Victim::Source => 0,
        Victim::Target => 1,
    };
    cluster.kill_node(node);
    cluster.fail_points = None;
    if victim == Victim::Leader {
        cluster.coordinator = cluster.coordinators[survivor].clone();
        coordinator = workers + super::replicas::agreed_leader(&cluster).await;
        assert_ne!(coordinator, node, "another replica leads");
    }
    if !matches!(victim, Victim::Coordinator | Victim::Leader) && !flipped {
        // The export fails with its node gone; the coordinator rolls back while it is down.
        cluster.wait_for_log(coordinator, "rolling back a migration").await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.start_node(node);
    let answer = migrate.await.unwrap();
    match victim {
        // After the flip the call has answered; the rest happens in the background.
        Victim::Coordinator | Victim::Leader | Victim::Source if flipped => {
            assert_eq!(answer.expect("answered").0, StatusCode::OK)
        }
        Victim::Coordinator | Victim::Leader => {
            assert!(answer.is_err(), "the coordinator died under the call: {answer:?}")
        }
        _ => {
            let (status, body) = answer.expect("the coordinator answers");
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
            assert!(body["error"].as_str().unwrap().contains("rolled back"), "{body}");
        }
    }
    let cluster_ref = &cluster;
    wait_until(
        "the interrupted migration ends",
        Duration::from_secs(20),
        || async move {
            placement(cluster_ref).await["migrations"]
                .as_array()
                .is_some_and(|list| list.is_empty())
                .then_some(())
        },
    )
    .await;
    if matches!(victim, Victim::Coordinator | Victim::Leader) {
        let expected = match flipped {
            true => "resuming an interrupted migration after its flip",
            false => "rolling back an interrupted migration",
        };
        cluster.wait_for_log(coordinator, expected).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (acknowledged, refused, closed) = devices.stop().await;
    if matches!(victim, Victim::Coordinator | Victim::Leader) {
        assert_eq!(closed, 0, "no connection to a worker closed");
        assert_eq!(refused, 0, "devices never need the coordinator");
    }

    let (owner, other) = if flipped { (1, 0) } else { (0, 1) };
    let map = placement(&cluster).await;
    assert_eq!(slot_owner(&map, &slot), owner as u64, "slot {slot}: {}", map["map"]);
    assert_exactly_acknowledged(&alice, &moving, &acknowledged[0]).await;
    assert_exactly_acknowledged(&alice, &staying, &acknowledged[1]).await;
    assert_eq!(
        local_status(&cluster, &alice, owner, &moving, true).await,
        200,
        "the owner serves it"
    );
    assert_eq!(
        local_status(&cluster, &alice, other, &moving, true).await,
        404,
        "the other cell holds no copy"
    );
    assert_eq!(
        local_status(&cluster, &alice, other, &moving, false).await,
        200,
        "and forwards"
    );

    if !flipped {
        // Nothing is left half-done: the same migration now goes through.
        let (status, answer) = cells_call(&cluster, "/internal/cells/migrate", json!({"slot": slot, "to": "b"})).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(slot_owner(&placement(&cluster).await, &slot), 1);
        assert_eq!(own_timestamps(&alice, &moving).await, acknowledged[0]);
    }
    cluster.assert_no_crash();
}

fn cloning(migration: &Value) -> bool {
    migration["phase"] == "Cloning"
}

fn caught_up(migration: &Value) -> bool {
    migration["phase"] == "CaughtUp"
}

fn flipped(migration: &Value) -> bool {
    migration["phase"].get("Flipped").is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_before_the_flip_rolls_the_migration_back_on_restart() {
    interrupt_a_migration("migration-caught-up", caught_up, Victim::Coordinator, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_after_the_flip_resumes_the_migration_on_restart() {
    interrupt_a_migration("migration-before-forget", flipped, Victim::Coordinator, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_before_the_flip_leaves_the_next_leader_to_roll_the_migration_back() {
    interrupt_a_migration("migration-caught-up", caught_up, Victim::Leader, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_after_the_flip_leaves_the_next_leader_to_resume_the_migration() {
    interrupt_a_migration("migration-before-forget", flipped, Victim::Leader, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_killed_while_copying_rolls_the_migration_back() {
    interrupt_a_migration("export-copy", cloning, Victim::Source, false).await;
}

/// Nemesis seed 314159 (10 minutes): a migration's source was replaced after its copy,
/// while the flip waited for the target's activation; the new process held no export, took
/// posts for the subject under its old map and forwarded none, and the forget after the
/// grace period dropped them (3 acknowledged conditions lost). Now a source that holds no
/// export of the migration sends the target the subject's history again before it forgets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_restarted_after_the_flip_loses_nothing_it_took_meanwhile() {
    interrupt_a_migration("activate-stall", flipped, Victim::Source, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_killed_while_copying_rolls_the_migration_back() {
    interrupt_a_migration("export-copy", cloning, Victim::Target, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_added_to_a_running_cluster_gets_an_even_share_by_a_rebalance() {
    let mut cluster = spawn_cluster_with(ClusterOptions {
        durable: true,
        coordinator_args: vec!["--migration-grace-ms".into(), "200".into()],
        ..ClusterOptions::default()
    })
    .await;
    let alice = cluster.sign_in("alice").await;
    // ISUs spread over the slots (00, 11, ..., ff), each posting.
    let uuids: Vec<String> = (0..16u8)
        .map(|step| cluster.known_uuid_in_slot(step * 17, 0x60 + u32::from(step)))
        .collect();
    for uuid in &uuids {
        alice.register(uuid, "spread", None).await.json(201);
    }
    let devices = Devices::start(
        &uuids
            .iter()
            .map(|uuid| (uuid.clone(), cluster.device_servers[default_cell(uuid, 2)].clone()))
            .collect::<Vec<_>>(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;

    cluster.add_worker().await;
    let map = placement(&cluster).await;
    assert_eq!(map["slot_counts"], json!([128, 128, 0]), "the new cell starts empty");
    assert_eq!(map["map"]["cells"][2]["name"], "c");

    let (status, answer) = cells_call(&cluster, "/internal/cells/rebalance", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let moved = answer["migrations"].as_array().unwrap();
    let map = placement(&cluster).await;
    // The fewest moves for an even share: only c's slots move, from a and b.
    assert_eq!(moved.len() as u64, map["slot_counts"][2].as_u64().unwrap(), "{answer}");
    assert!(moved.iter().all(|migration| migration["to"] == "c"));
    let mut counts: Vec<u64> = map["slot_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|count| count.as_u64().unwrap())
        .collect();
    counts.sort_unstable();
    assert_eq!(counts, vec![85, 85, 86], "{}", map["slot_counts"]);

    // A newcomer's ISU lands where the map says, and its device URL is that cell's.
    let slot_of_c = (0..=255u8)
        .find(|slot| slot_owner(&map, &format!("{slot:02x}")) == 2)
        .unwrap();
    let newcomer = cluster.known_uuid_in_slot(slot_of_c, 0x700);
    alice.register(&newcomer, "newcomer", None).await.json(201);
    assert_eq!(local_status(&cluster, &alice, 2, &newcomer, true).await, 200);

    tokio::time::sleep(Duration::from_millis(500)).await;
    let (acknowledged, refused, closed) = devices.stop().await;
    assert_eq!((refused, closed), (0, 0), "no device post was refused");
    let mut on_c = 0;
    for (uuid, acknowledged) in uuids.iter().zip(&acknowledged) {
        assert_exactly_acknowledged(&alice, uuid, acknowledged).await;
        let owner = slot_owner(&map, &uuid[..2]) as usize;
        assert_eq!(local_status(&cluster, &alice, owner, uuid, true).await, 200, "{uuid}");
        on_c += usize::from(owner == 2);
    }
    assert!(on_c >= 1, "some of the spread ISUs moved to c");
    cluster.assert_no_crash();
}

/// A worker's `/healthz` map version.
async fn map_version_of(cluster: &Cluster, worker: usize) -> Option<u64> {
    let health: Value = cluster
        .raw_client()
        .get(format!("{}/healthz", cluster.workers[worker]))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    health["map_version"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_down_during_a_flip_gets_the_new_map_from_the_watch_when_it_returns() {
    let mut cluster = spawn_cluster_with(ClusterOptions {
        workers: 3,
        durable: true,
        coordinator_args: vec!["--migration-grace-ms".into(), "200".into()],
        ..ClusterOptions::default()
    })
    .await;
    let alice = cluster.sign_in("alice").await;
    let moving = cluster.known_uuid_in_slot(0x03, 0x71);
    assert_eq!(default_cell(&moving, 3), 0, "slot 03 starts on a");
    alice.register(&moving, "moving", None).await.json(201);

    // c is down while slot 03 moves from a to b: the flip's map never reaches it.
    cluster.kill_node(2);
    let (status, answer) = cells_call(&cluster, "/internal/cells/migrate", json!({"slot": "03", "to": "b"})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let version = answer["map_version"].as_u64().unwrap();
    wait_until("a forgets its copy", Duration::from_secs(5), || async {
        (local_status(&cluster, &alice, 0, &moving, true).await == 404).then_some(())
    })
    .await;

    // Back with the map it saved (older); the coordinator's watch sends the new one.
    cluster.start_node(2);
    let cluster_ref = &cluster;
    wait_until("c gets the current map", Duration::from_secs(5), || async move {
        (map_version_of(cluster_ref, 2).await == Some(version)).then_some(())
    })
    .await;
    // A stale route to c goes to b (by the old map it would go to a, which has forgotten).
    assert_eq!(local_status(&cluster, &alice, 2, &moving, false).await, 200);
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_during_a_migration_waits_for_it_and_leaves_a_consistent_cluster() {
    let cluster = spawn_cluster_with(ClusterOptions {
        coordinator_args: vec!["--migration-grace-ms".into(), "200".into()],
        fail_points: Some(format!("export-copy={HOLD}")),
        ..ClusterOptions::default()
    })
    .await;
    let alice = cluster.sign_in("alice").await;
    let moving = cluster.known_uuid_in_slot(0x00, 0x81);
    alice.register(&moving, "moving", None).await.json(201);
    let migrate = {
        let (client, coordinator, secret) = (
            cluster.raw_client(),
            cluster.coordinator.clone(),
            cluster.secret.clone(),
        );
        let body = json!({"slot": "00", "to": "b"});
        tokio::spawn(
            async move { try_cells_call(&client, &coordinator, &secret, "/internal/cells/migrate", body).await },
        )
    };
    let cluster_ref = &cluster;
    wait_until("the migration is cloning", Duration::from_secs(10), || async move {
        let migrations = placement(cluster_ref).await["migrations"].clone();
        migrations
            .as_array()
            .and_then(|list| list.first())
            .is_some_and(|migration| migration["phase"] == "Cloning")
            .then_some(())
    })
    .await;
    // The reset waits until the migration has flipped (or rolled back) ...
    let initialized = cluster.initialize().await;
    assert_eq!(initialized.json(200), json!({"language": "rust"}));
    let (status, answer) = migrate.await.unwrap().expect("the coordinator answers");
    assert_eq!(
        status,
        StatusCode::OK,
        "the migration finished before the reset: {answer}"
    );
    // ... so the slot's ISUs of the new generation (the dataset's among them) went to the
    // cell the map names, and the moved ISU is gone with the old generation.
    let map = placement(&cluster).await;
    assert_eq!(slot_owner(&map, "00"), 1);
    let isucon1 = cluster.sign_in("isucon1").await;
    for isu in dataset_isus_of("isucon1") {
        let path = format!(
            "/api/condition/{}?end_time=2000000000&condition_level={ALL_LEVELS}",
            isu.uuid
        );
        assert_eq!(isucon1.get(&path).await.status, 200, "{}", isu.uuid);
    }
    let alice = cluster.sign_in("alice").await;
    alice.isu(&moving).await.assert_error(404, NOT_FOUND_ISU);
    // Registrations in the slot work, land on b, and the slot moves back.
    alice.register(&moving, "again", None).await.json(201);
    assert_eq!(local_status(&cluster, &alice, 1, &moving, true).await, 200);
    wait_until("the migration ends", Duration::from_secs(10), || async move {
        placement(cluster_ref).await["migrations"]
            .as_array()
            .is_some_and(|list| list.is_empty())
            .then_some(())
    })
    .await;
    let (status, answer) = cells_call(&cluster, "/internal/cells/migrate", json!({"slot": "00", "to": "a"})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(local_status(&cluster, &alice, 0, &moving, true).await, 200);
    let mut cluster = cluster;
    cluster.assert_no_crash();
}
