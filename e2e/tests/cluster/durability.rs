//! Durability and node failures: nodes with a durable log (`--data-dir`),
//! SIGKILLed by PID while devices post, and started again on the same data.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use shared::dataset::generated::VIRTUAL_START;

use e2e::*;

/// Conditions the tests post themselves, far before anything a simulated device sends.
const OWN_BASE: i64 = VIRTUAL_START - 50_000_000;
pub(super) const CONDITIONS_PER_BATCH: i64 = 5;

fn durable() -> ClusterOptions {
    ClusterOptions {
        durable: true,
        ..ClusterOptions::default()
    }
}

/// A device client with a short timeout: a dead worker must not stall the test.
pub(super) fn device_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("building an HTTP client")
}

/// Batch `serial` of poster `lane`: timestamps no other batch uses.
fn own_batch(lane: i64, serial: i64) -> Vec<jia_sim::condition::SentCondition> {
    assert!((0..40).contains(&lane), "own_timestamps reads lanes 0 to 39");
    (0..CONDITIONS_PER_BATCH)
        .map(|offset| {
            let timestamp = OWN_BASE + lane * 1_000_000 + serial * CONDITIONS_PER_BATCH + offset;
            sent(timestamp, offset % 2 == 0, INFO, "acknowledged")
        })
        .collect()
}

/// What became of one device post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Posted {
    /// 202: stored (and logged).
    Accepted,
    /// Any other answer, or no connection: what happened.
    Refused(String),
    /// The connection closed (or was reset) before an answer came: a kept-alive connection
    /// that the server (an nginx worker leaving at a reload) closed as the request went out.
    /// The device sends the batch again; nothing was acknowledged.
    Closed,
}

/// Posts batch `serial` of `lane` to `worker` for `uuid`; on a 202 records its timestamps in
/// `acknowledged`.
pub(super) async fn post_and_record(
    client: &reqwest::Client,
    worker: &str,
    uuid: &str,
    lane: i64,
    serial: i64,
    acknowledged: &Mutex<BTreeSet<i64>>,
) -> Posted {
    let batch = own_batch(lane, serial);
    let answer = client
        .post(format!("{worker}/api/condition/{uuid}"))
        .json(&batch)
        .send()
        .await;
    match answer {
        Ok(response) if response.status() == StatusCode::ACCEPTED => {
            acknowledged
                .lock()
                .unwrap()
                .extend(batch.iter().map(|condition| condition.timestamp));
            Posted::Accepted
        }
        Ok(response) => Posted::Refused(format!("{}", response.status())),
        Err(error) if bench::scenario::api::closed_before_answer(&error) => Posted::Closed,
        Err(error) => Posted::Refused(shared::error_chain(&error)),
    }
}

/// Posts batches to `worker` for `uuid` until a post fails; records the
/// timestamps of every batch answered 202.
async fn post_until_refused(worker: String, uuid: String, lane: i64, acknowledged: Arc<Mutex<BTreeSet<i64>>>) {
    let client = device_client();
    for serial in 0.. {
        if post_and_record(&client, &worker, &uuid, lane, serial, &acknowledged).await != Posted::Accepted {
            return;
        }
    }
}

/// Posts batch `serial` of `lane` to `worker`, asserts 202 and returns its timestamps.
async fn post_own_batch(worker: &str, uuid: &str, lane: i64, serial: i64) -> Vec<i64> {
    let batch = own_batch(lane, serial);
    let answer = device_client()
        .post(format!("{worker}/api/condition/{uuid}"))
        .json(&batch)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::ACCEPTED, "POST to {worker} for {uuid}");
    batch.iter().map(|condition| condition.timestamp).collect()
}

/// Waits until the (restarted) worker owning `uuid` serves it to its owner again. A transport
/// error counts as "not yet": the agent's pooled connection to the killed process may be
/// taken for a first try before the client notices it is closed.
async fn wait_until_served(agent: &Agent, uuid: &str) {
    wait_until("the worker serves the ISU again", Duration::from_secs(10), || async {
        let path = format!("/api/condition/{uuid}?end_time=1&condition_level={ALL_LEVELS}");
        let served = agent
            .try_get(&path)
            .await
            .is_ok_and(|reply| reply.status.as_u16() == 200);
        served.then_some(())
    })
    .await;
}

/// Every timestamp of the test's own conditions of `uuid`, read page by page through the API.
pub(super) async fn own_timestamps(agent: &Agent, uuid: &str) -> BTreeSet<i64> {
    let mut seen = BTreeSet::new();
    // Past every lane's range (lane × 1,000,000; the tests use fewer than 40 lanes).
    let mut end_time = OWN_BASE + 40_000_000;
    loop {
        let query = format!("start_time={OWN_BASE}&end_time={end_time}&condition_level={ALL_LEVELS}");
        let page = agent.conditions(uuid, &query).await.json(200);
        let items = page.as_array().expect("a condition page is an array");
        let timestamps = timestamps_of(items);
        seen.extend(timestamps.iter().copied());
        match timestamps.last() {
            Some(oldest) if items.len() == 20 => end_time = *oldest,
            _ => return seen,
        }
    }
}

async fn wait_for_own_conditions(agent: &Agent, uuid: &str, count: usize) {
    wait_until("the posted conditions are readable", Duration::from_secs(5), || async {
        (own_timestamps(agent, uuid).await.len() >= count).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_keeps_every_acknowledged_condition_while_the_other_serves_on() {
    let mut cluster = spawn_cluster_with(durable()).await;
    let alice = cluster.sign_in("alice").await;
    let on_a = cluster.known_uuid('4', 31);
    let on_b = cluster.known_uuid('5', 31);
    alice.register(&on_a, "kept", None).await.json(201);
    alice.register(&on_b, "neighbour", None).await.json(201);

    // Four devices post to worker A at once (so the log commits groups) until it dies.
    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
    let posters: Vec<_> = (0..4)
        .map(|lane| {
            tokio::spawn(post_until_refused(
                cluster.workers[0].clone(),
                on_a.clone(),
                lane,
                acknowledged.clone(),
            ))
        })
        .collect();
    wait_until("worker A acknowledged 200 batches", Duration::from_secs(20), || async {
        (acknowledged.lock().unwrap().len() >= 200 * CONDITIONS_PER_BATCH as usize).then_some(())
    })
    .await;
    cluster.kill_node(0);
    for poster in posters {
        poster.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();

    // While A is down: B's ISU is read and written without a single error,
    // and a read of A's ISU fails fast instead of hanging.
    let client = device_client();
    for serial in 0..20 {
        post_own_batch(&cluster.workers[1], &on_b, 0, serial).await;
        let page = alice
            .conditions(
                &on_b,
                &format!("end_time={}&condition_level={ALL_LEVELS}", VIRTUAL_START * 2),
            )
            .await;
        assert_eq!(page.status.as_u16(), 200, "worker B keeps serving reads");
    }
    alice.isu_list().await.json(200);
    let started = Instant::now();
    let dead_read = client
        .get(alice.url(&format!("/api/condition/{on_a}?end_time=1&condition_level=info")))
        .send()
        .await;
    assert!(
        dead_read
            .as_ref()
            .map_or(true, |response| response.status().is_server_error()),
        "a read of the dead worker's ISU fails: {dead_read:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2), "and fails fast");

    cluster.start_node(0);
    wait_until_served(&alice, &on_a).await;
    let present = own_timestamps(&alice, &on_a).await;
    let missing: Vec<&i64> = acknowledged.difference(&present).collect();
    eprintln!(
        "worker SIGKILL: {} conditions acknowledged, {} present after restart, {} missing",
        acknowledged.len(),
        present.len(),
        missing.len()
    );
    assert!(missing.is_empty(), "acknowledged conditions lost: {missing:?}");
    let log = cluster.node_log(0);
    assert!(log.contains("log replayed"), "the restarted worker replayed its log");
    assert!(
        !log.contains("resetting it") && !cluster.node_log(2).contains("worker lost its state"),
        "the restarted worker kept its generation, so the coordinator did not reset it"
    );
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_log_tail_is_truncated_and_reported_and_earlier_records_survive() {
    let mut cluster = spawn_cluster_with(durable()).await;
    let alice = cluster.sign_in("alice").await;
    let uuid = cluster.known_uuid('6', 32);
    alice.register(&uuid, "torn", None).await.json(201);
    let mut posted = BTreeSet::new();
    for serial in 0..10 {
        posted.extend(post_own_batch(&cluster.workers[0], &uuid, 0, serial).await);
    }
    wait_for_own_conditions(&alice, &uuid, posted.len()).await;
    cluster.kill_node(0);

    // A record cut short by the crash: its header promises more bytes than follow.
    let log_path = cluster.data_dir(0).join("worker-a.wal");
    let intact = std::fs::metadata(&log_path).unwrap().len();
    let mut torn = 400u32.to_le_bytes().to_vec();
    torn.extend([0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7]);
    let mut bytes = std::fs::read(&log_path).unwrap();
    bytes.extend(&torn);
    std::fs::write(&log_path, &bytes).unwrap();

    cluster.start_node(0);
    wait_until_served(&alice, &uuid).await;
    assert_eq!(own_timestamps(&alice, &uuid).await, posted);
    let log = cluster.node_log(0);
    assert!(
        log.contains("log tail torn or corrupt; truncating it"),
        "the truncation is reported"
    );
    assert!(log.contains(&format!("truncated_bytes={}", torn.len())), "{log}");
    assert!(
        std::fs::metadata(&log_path).unwrap().len() >= intact,
        "only the torn tail was cut"
    );

    // Corrupt a byte inside the last record: that record and nothing after it is dropped.
    cluster.kill_node(0);
    let mut bytes = std::fs::read(&log_path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&log_path, &bytes).unwrap();
    cluster.start_node(0);
    wait_until_served(&alice, &uuid).await;
    assert!(cluster.node_log(0).matches("checksum mismatch").count() == 1);
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_coordinator_restores_users_and_isus_and_receives_the_latest_conditions() {
    let mut cluster = spawn_cluster_with(durable()).await;
    let alice = cluster.sign_in("alice").await;
    let on_a = cluster.known_uuid('8', 33);
    let on_b = cluster.known_uuid('9', 33);
    let icon: &[u8] = b"\x89PNG a logged icon";
    alice.register(&on_a, "with icon", Some(icon)).await.json(201);
    let registered_b = alice.register(&on_b, "default icon", None).await.json(201);
    let list_before = alice.isu_list().await.json(200);

    cluster.kill_node(2);
    // Workers keep accepting device posts and serving reads without the coordinator.
    for serial in 0..10 {
        post_own_batch(&cluster.workers[0], &on_a, 0, serial).await;
        post_own_batch(&cluster.workers[1], &on_b, 0, serial).await;
    }
    let newest = VIRTUAL_START * 2;
    for (index, uuid) in [(0, &on_a), (1, &on_b)] {
        let future = [sent(
            newest + index as i64,
            true,
            CRITICAL,
            "while the coordinator was down",
        )];
        let answer = device_client()
            .post(format!("{}/api/condition/{uuid}", cluster.workers[index]))
            .json(&future)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::ACCEPTED);
    }
    wait_for_own_conditions(&alice, &on_b, 50).await;

    cluster.start_node(2);
    let list = wait_until(
        "the restarted coordinator lists alice's ISUs with the newest conditions",
        Duration::from_secs(10),
        || async {
            // A pooled connection to the killed coordinator may fail a first try.
            let reply = alice.try_get("/api/isu").await.ok()?;
            if reply.status.as_u16() != 200 {
                return None;
            }
            let list = reply.json(200);
            let newest_seen = list
                .as_array()?
                .iter()
                .all(|isu| isu["latest_isu_condition"]["timestamp"].as_i64().unwrap_or(0) >= newest);
            newest_seen.then_some(list)
        },
    )
    .await;
    let names = |list: &serde_json::Value| -> Vec<(i64, String)> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|isu| (isu["id"].as_i64().unwrap(), isu["name"].as_str().unwrap().to_owned()))
            .collect()
    };
    assert_eq!(names(&list), names(&list_before), "alice and her ISUs are back");
    let icon_reply = alice.icon(&on_a).await;
    assert_eq!(icon_reply.status.as_u16(), 200);
    assert_eq!(&icon_reply.body[..], icon, "the icon is back");
    let default_icon = alice.icon(&on_b).await;
    assert_eq!(
        &default_icon.body[..],
        shared::dataset::DEFAULT_ICON,
        "the default icon is kept"
    );
    // The workers were not reset.
    cluster.wait_for_log(2, "worker kept its data").await;
    // Conditions the workers took while the coordinator was down are still there.
    assert!(own_timestamps(&alice, &on_a).await.len() >= 50);
    // Registration goes on above every id the dead process reserved (one of its
    // registrations a worker still held would keep its id: docs/replicas.md, "Ids").
    let next = cluster.known_uuid('a', 33);
    let created = alice.register(&next, "after the restart", None).await.json(201);
    assert!(created["id"].as_i64() > registered_b["id"].as_i64(), "{created}");
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_while_its_worker_is_down_fails_cleanly_and_a_retry_succeeds() {
    let mut cluster = spawn_cluster_with(durable()).await;
    let alice = cluster.sign_in("alice").await;
    let uuid = cluster.known_uuid('c', 34); // worker A
    cluster.kill_node(0);
    let started = Instant::now();
    let refused = alice.register(&uuid, "too early", None).await;
    assert!(refused.status.is_server_error(), "{}", refused.text());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the registration failed fast"
    );
    assert_eq!(
        alice.isu_list().await.json(200),
        serde_json::json!([]),
        "nothing half-registered"
    );
    assert_eq!(alice.isu(&uuid).await.status.as_u16(), 404);

    cluster.start_node(0);
    let created = wait_until("a retried registration succeeds", Duration::from_secs(10), || async {
        let reply = alice.register(&uuid, "retried", None).await;
        (reply.status.as_u16() == 201).then(|| reply.json(201))
    })
    .await;
    assert_eq!(created["name"], "retried");
    post_own_batch(&cluster.workers[0], &uuid, 0, 0).await;
    wait_for_own_conditions(&alice, &uuid, CONDITIONS_PER_BATCH as usize).await;
    // Restarted again, the worker replays the registration and the conditions.
    cluster.kill_node(0);
    cluster.start_node(0);
    wait_until_served(&alice, &uuid).await;
    assert_eq!(own_timestamps(&alice, &uuid).await.len(), CONDITIONS_PER_BATCH as usize);
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_starts_a_fresh_log_so_a_restart_never_brings_back_old_data() {
    let mut cluster = spawn_cluster_with(durable()).await;
    let alice = cluster.sign_in("alice").await;
    let uuid = cluster.known_uuid('e', 35); // worker A
    alice.register(&uuid, "before initialize", None).await.json(201);
    post_own_batch(&cluster.workers[0], &uuid, 0, 0).await;
    let isucon1 = dataset_isus_of("isucon1")
        .into_iter()
        .find(|isu| shard_index(&isu.uuid) == 0)
        .expect("isucon1 has an ISU on worker A");
    // Posts to a dataset ISU race the initialize: none may survive it.
    let poster = {
        let (worker, dataset_uuid) = (cluster.workers[0].clone(), isucon1.uuid.clone());
        tokio::spawn(async move {
            for serial in 0..200 {
                let _ = device_client()
                    .post(format!("{worker}/api/condition/{dataset_uuid}"))
                    .json(&own_batch(1, serial))
                    .send()
                    .await;
            }
        })
    };
    let reply = cluster.initialize().await;
    assert_eq!(reply.status.as_u16(), 200);
    poster.await.unwrap();
    let reader = cluster.sign_in("isucon1").await;
    let end_time = VIRTUAL_START + 100 * 86_400;
    let newest_before = reader.condition_items(&isucon1.uuid, end_time).await;
    let own_before = own_timestamps(&reader, &isucon1.uuid).await;

    for node in [0, 2] {
        cluster.kill_node(node);
        cluster.start_node(node);
    }
    let reader = cluster.sign_in("isucon1").await;
    wait_until_served(&reader, &isucon1.uuid).await;
    assert_eq!(
        reader.condition_items(&isucon1.uuid, end_time).await,
        newest_before,
        "the dataset's conditions as before the restart"
    );
    assert_eq!(
        own_timestamps(&reader, &isucon1.uuid).await,
        own_before,
        "only posts taken after the initialize, as before the restart"
    );
    let alice = cluster.sign_in("alice").await;
    assert_eq!(
        alice.isu_list().await.json(200),
        serde_json::json!([]),
        "alice's ISU is gone"
    );
    cluster.assert_no_crash();
}

/// Waits until node `index` has logged `text` more than `before` times (its log is kept
/// across restarts).
async fn wait_for_count(cluster: &Cluster, index: usize, text: &str, before: usize) {
    wait_until(
        &format!("node {index} logs {text:?} again"),
        Duration::from_secs(20),
        || async { (cluster.node_log(index).matches(text).count() > before).then_some(()) },
    )
    .await;
}

/// A lone coordinator is a group of one: SIGKILLed at each step of a registration (held
/// there by a fail point) and started again from its data directory, it ends the
/// registration as a next leader of three replicas does. Held before its worker heard of it,
/// or once its worker held it provisionally, the ISU is nowhere and JIA was never asked
/// (registering it again works); held once it was committed with the character JIA gave
/// it, the restarted coordinator publishes it on its worker. JIA is asked at most once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_durable_coordinator_killed_at_each_step_of_a_registration_ends_it_as_a_takeover_does() {
    use super::replicas::{activations_of, listed, register_in_background};
    let claimed = test_uuid('c', 91);
    let started = test_uuid('d', 92);
    let accepted = test_uuid('e', 93);
    let fail_points = format!(
        "registration-claimed=return({claimed});registration-started=return({started});registration-accepted=return({accepted})"
    );
    let mut cluster = spawn_cluster_with(ClusterOptions {
        durable: true,
        fail_points: Some(fail_points.clone()),
        ..ClusterOptions::default()
    })
    .await;
    // Restarted with the same fail points: each step is held in its turn.
    cluster.fail_points = Some(fail_points);
    for uuid in [&claimed, &started, &accepted] {
        cluster.make_known(uuid);
    }
    let coordinator = cluster.workers.len();
    let alice = Arc::new(cluster.sign_in("alice").await);
    for uuid in [&claimed, &started, &accepted] {
        let ready_before = cluster.node_log(coordinator).matches("the leader is ready").count();
        let registering = register_in_background(&alice, uuid, "killed");
        wait_until("the registration is held", Duration::from_secs(15), || async {
            let log = cluster.node_log(coordinator);
            log.lines()
                .any(|line| line.contains("held at a fail point") && line.contains(uuid.as_str()))
                .then_some(())
        })
        .await;
        cluster.kill_node(coordinator);
        // The client's connection died with the coordinator: no answer.
        let _ = registering.await;
        cluster.start_node(coordinator);
        wait_for_count(&cluster, coordinator, "the leader is ready", ready_before).await;
    }

    // Held before JIA: rolled back (or never on its worker), JIA never asked; held after
    // the commit: published, JIA asked once.
    assert_eq!(listed(&alice).await, Some(BTreeSet::from([accepted.clone()])));
    assert_eq!(
        [&claimed, &started, &accepted].map(|uuid| activations_of(&cluster, uuid)),
        [0, 0, 1]
    );
    assert!(
        cluster
            .node_log(coordinator)
            .contains("rolled back a registration left unfinished"),
        "the provisional registration was rolled back on its worker"
    );
    // Published on its worker: its conditions are readable there.
    wait_until_served(&alice, &accepted).await;
    // The two that were ended register as any other (the coordinator started again without
    // the fail points), and JIA hears of each once.
    cluster.fail_points = None;
    let ready_before = cluster.node_log(coordinator).matches("the leader is ready").count();
    cluster.kill_node(coordinator);
    cluster.start_node(coordinator);
    wait_for_count(&cluster, coordinator, "the leader is ready", ready_before).await;
    for uuid in [&claimed, &started] {
        alice.register(uuid, "again", None).await.json(201);
        assert_eq!(activations_of(&cluster, uuid), 1, "{uuid}");
    }
    let again = alice.register(&accepted, "again", None).await;
    assert_eq!(again.status.as_u16(), 409, "{}", again.text());
    cluster.assert_no_crash();
}

/// A journal as a coordinator built before 2026-12-06 wrote it (`coordinator.wal`, its
/// records unversioned): a snapshot of `generation` with JIA's URL, `users` and one
/// registered ISU with the default icon.
fn old_journal(generation: u64, jia_url: &str, users: &[&str], isu: &serde_json::Value, owner: &str) -> Vec<u8> {
    const SNAPSHOT_TAG: u8 = 1;
    let mut snapshot = shared::wal::Encoder::new(SNAPSHOT_TAG);
    snapshot.u64(generation).str(jia_url).u32(users.len() as u32);
    for user in users {
        snapshot.str(user);
    }
    snapshot
        .u32(1)
        .i64(isu["id"].as_i64().unwrap())
        .str(isu["jia_isu_uuid"].as_str().unwrap())
        .str(isu["name"].as_str().unwrap())
        .str(isu["character"].as_str().unwrap())
        .str(owner)
        .u8(0);
    shared::wal::frame(&snapshot.bytes)
}

/// A coordinator started on a data directory that holds an earlier build's journal takes
/// its state (the generation the workers hold, its users and ISUs) into its raft log, once:
/// the journal is kept as `coordinator.wal.converted`, and a later restart starts from the
/// raft log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_of_an_earlier_build_is_converted_once_into_the_raft_log() {
    let mut cluster = spawn_cluster_with(durable()).await;
    let coordinator = cluster.workers.len();
    let alice = cluster.sign_in("alice").await;
    let uuid = cluster.known_uuid('8', 41);
    let registered = alice.register(&uuid, "journaled", None).await.json(201);
    let health: shared::protocol::Health = cluster
        .internal_get(&format!("{}{}", cluster.workers[0], shared::protocol::HEALTH))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();

    // The coordinator's data directory as an earlier build left it: its journal only.
    cluster.kill_node(coordinator);
    let data_dir = cluster.data_dir(coordinator);
    for entry in std::fs::read_dir(&data_dir).unwrap() {
        let path = entry.unwrap().path();
        match path.is_dir() {
            true => std::fs::remove_dir_all(&path).unwrap(),
            false => std::fs::remove_file(&path).unwrap(),
        }
    }
    let jia_url = cluster.jia.url();
    let journal = old_journal(health.generation, &jia_url, &["alice"], &registered, "alice");
    std::fs::write(data_dir.join("coordinator.wal"), journal).unwrap();

    for restart in ["converting", "from the raft log"] {
        cluster.start_node(coordinator);
        wait_until("the coordinator is ready", Duration::from_secs(20), || async {
            let url = format!("{}{}", cluster.coordinators[0], shared::protocol::HEALTH);
            let health: shared::protocol::Health = cluster.internal_get(&url).await.ok()?.json().await.ok()?;
            health.ready.then_some(())
        })
        .await;
        // Alice's session (signed for the generation the journal holds) still works, her
        // ISU is listed, and the worker kept its data (the generation was the same).
        let listed = alice.isu_list().await.json(200);
        assert_eq!(listed[0]["jia_isu_uuid"], uuid.as_str(), "{restart}: {listed}");
        assert_eq!(listed[0]["character"], registered["character"], "{restart}");
        assert!(!data_dir.join("coordinator.wal").exists(), "{restart}: converted once");
        assert!(data_dir.join("coordinator.wal.converted").exists(), "{restart}: kept");
        assert!(data_dir.join("raft.log").exists(), "{restart}");
        cluster.kill_node(coordinator);
    }
    let log = cluster.node_log(coordinator);
    assert_eq!(
        log.matches("converting a coordinator journal of an earlier build")
            .count(),
        1
    );
    cluster.start_node(coordinator);
    cluster.assert_no_crash();
}
