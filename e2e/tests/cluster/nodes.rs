//! The nodes as processes: a restarted worker reset with its shard, no transparent huge
//! pages, the metrics they export, and a burst of sign-ins on a loaded machine.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use e2e::*;
use shared::dataset::generated::VIRTUAL_START;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_worker_is_reset_with_its_shard_and_serves_reads_again() {
    let mut cluster = spawn_cluster().await;
    let alice = cluster.sign_in("alice").await;
    let uuid = cluster.known_uuid('2', 1); // worker A
    alice.register(&uuid, "survivor", None).await.json(201);
    let isucon1 = cluster.sign_in("isucon1").await;
    let initial = dataset_isus_of("isucon1")
        .into_iter()
        .find(|isu| shard_index(&isu.uuid) == 0)
        .unwrap();
    let end_time = VIRTUAL_START + 100 * 86_400;
    let before = isucon1.condition_items(&initial.uuid, end_time).await;
    assert!(!before.is_empty());
    // The device's latest condition reaches the coordinator through the 10 ms push.
    let latest = wait_until(
        "the registered ISU has a latest condition",
        Duration::from_secs(3),
        || async {
            let list = alice.isu_list().await.json(200);
            let latest = list[0]["latest_isu_condition"].clone();
            (!latest.is_null()).then_some(latest)
        },
    )
    .await;

    cluster.restart_worker(0);
    // The coordinator notices the new worker's empty state and resets it.
    let items = wait_until(
        "the restarted worker serves the dataset again",
        Duration::from_secs(5),
        || async {
            let reply = isucon1
                .conditions(
                    &initial.uuid,
                    &format!("end_time={end_time}&condition_level=info,warning,critical"),
                )
                .await;
            (reply.status.as_u16() == 200).then(|| reply.json(200))
        },
    )
    .await;
    assert_eq!(items.as_array().unwrap(), &before, "the dataset's conditions are back");
    // The reset carries the latest condition the coordinator knew when it reset the worker:
    // `latest`, or a newer one if the device posted again in between (then the older
    // history is gone with the worker's memory, by design).
    let kept = alice.condition_items(&uuid, FAR_FUTURE).await;
    let newest = kept.first().expect("a registered ISU keeps its latest condition");
    assert!(
        newest["timestamp"].as_i64() >= latest["timestamp"].as_i64(),
        "a registered ISU keeps its latest condition (or a newer one): {newest} vs {latest}"
    );
    let end_time = latest["timestamp"].as_i64().unwrap() + 1;
    let survivor = alice.condition_items(&uuid, end_time).await;
    assert!(
        survivor.is_empty() || survivor.first() == Some(&latest),
        "what the worker holds up to that condition is that condition: {survivor:?}"
    );
    // The restarted worker accepts device posts for registered ISUs again.
    let newer = sent(
        latest["timestamp"].as_i64().unwrap() + 60,
        true,
        "is_dirty=false,is_overweight=false,is_broken=false",
        "",
    );
    cluster.post_conditions(&uuid, &[newer]).await.assert_empty(202);
    cluster.assert_processes_alive();
}

/// The coordinator runs with mimalloc's purge delay at 0, which it sets for itself at start
/// (see the coordinator's `with_allocator_options`); the workers keep mimalloc's default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinator_runs_with_mimalloc_s_purge_delay_at_0() {
    let mut cluster = spawn_cluster().await;
    for (name, pid) in cluster.node_pids() {
        let environment = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let set = environment
            .split(|byte| *byte == 0)
            .any(|variable| variable == b"MIMALLOC_PURGE_DELAY=0");
        assert_eq!(set, name.starts_with("coordinator"), "{name}");
    }
    cluster.assert_processes_alive();
}

/// Every node turns transparent huge pages off for itself at start (see
/// `shared::disable_transparent_huge_pages`): the kernel reports it per process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_run_without_transparent_huge_pages() {
    let mut cluster = spawn_cluster().await;
    for (name, pid) in cluster.node_pids() {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let Some(line) = status.lines().find(|line| line.starts_with("THP_enabled:")) else {
            eprintln!("skipped: this kernel does not report THP_enabled");
            return;
        };
        assert_eq!(line.split_whitespace().nth(1), Some("0"), "{name}: {line}");
    }
    cluster.assert_processes_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_route_and_status_and_measure_batches_and_push_lag() {
    let cluster = spawn_cluster().await;
    let alice = cluster.sign_in("alice").await;
    let uuid = cluster.known_uuid('4', 1); // worker A
    alice.register(&uuid, "measured", None).await.json(201);
    let condition = sent(
        VIRTUAL_START + 600,
        true,
        "is_dirty=false,is_overweight=false,is_broken=false",
        "",
    );
    // As the device posts: to its worker's device server (the request metrics count it there too).
    let client = cluster.raw_client();
    let posted = client
        .post(format!("{}/api/condition/{uuid}", cluster.device_servers[0]))
        .header("content-type", "application/json")
        .body(serde_json::to_string(&[condition]).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status().as_u16(), 202);
    cluster.agent().trend().await.json(200);
    let metrics = |base: String| {
        let (client, secret) = (client.clone(), cluster.secret.clone());
        async move {
            let response = client
                .get(format!("{base}/metrics"))
                .header("x-cluster-secret", secret)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 200);
            response.text().await.unwrap()
        }
    };
    // The push of the device's condition is measured once it reaches the coordinator.
    let worker = wait_until(
        "the worker has measured a latest push",
        Duration::from_secs(3),
        || async {
            let text = metrics(cluster.workers[0].clone()).await;
            text.contains("latest_push_lag_seconds_count").then_some(text)
        },
    )
    .await;
    for expected in [
        // Every metric names its node and cell first.
        r#"http_requests_total{node="worker-a",cell="a",route="/api/condition/{uuid}",status="202"}"#,
        r#"http_request_duration_seconds_bucket{node="worker-a",cell="a",route="/api/condition/{uuid}",status="202",le="#,
        "latest_batch_items_bucket",
        "latest_push_lag_seconds_bucket",
        "conditions_stored_total",
    ] {
        assert!(worker.contains(expected), "worker metrics lack {expected}:\n{worker}");
    }
    let coordinator = metrics(cluster.coordinator.clone()).await;
    for expected in [
        r#"http_requests_total{node="coordinator",cell="coordinator",route="/api/isu",status="201"}"#,
        r#"http_requests_total{node="coordinator",cell="coordinator",route="/api/trend",status="200"}"#,
        r#"http_request_duration_seconds_bucket{node="coordinator",cell="coordinator",route="/api/auth",status="200",le="#,
    ] {
        assert!(
            coordinator.contains(expected),
            "coordinator metrics lack {expected}:\n{coordinator}"
        );
    }
}

/// A bench load starts (and grows) with a burst: many users sign in and register at once
/// while devices post. On a saturated machine that burst used to get 500s from
/// `POST /api/isu` (a provisional registration timing out, never retried) and lost user
/// syncs. Here two threads spin on every core the test may share while 120 users sign in
/// and register 240 ISUs on both shards at once, and the devices of earlier ISUs post.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_sign_ins_and_registrations_on_a_loaded_machine_gets_no_errors() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    const USERS: u32 = 120;
    const ISUS_PER_USER: u32 = 2;
    let mut cluster = spawn_cluster().await;
    // Devices posting: ISUs registered before the burst (their simulated devices post every 40 ms).
    let early = cluster.sign_in("early-user").await;
    for serial in 0..8u32 {
        let uuid = cluster.known_uuid(['4', '5'][serial as usize % 2], 9000 + serial);
        early.register(&uuid, "early", None).await.json(201);
    }
    // CPU hogs, bounded in time whatever happens to the test.
    let stop = Arc::new(AtomicBool::new(false));
    let hogs: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                let mut spin = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    spin = std::hint::black_box(spin.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();

    let uuids: Vec<Vec<String>> = (0..USERS)
        .map(|user| {
            (0..ISUS_PER_USER)
                .map(|index| {
                    let serial = user * ISUS_PER_USER + index;
                    cluster.known_uuid(['0', '1', 'a', 'b'][serial as usize % 4], serial + 1)
                })
                .collect()
        })
        .collect();
    let cluster_ref = &cluster;
    let outcomes = futures_util::future::join_all(uuids.iter().enumerate().map(|(user, uuids)| async move {
        let agent = cluster_ref.agent();
        let signed_in = agent
            .auth(Some(&cluster_ref.signer.sign(&format!("burst-{user}"))))
            .await;
        let mut statuses = vec![signed_in.status.as_u16()];
        let registrations =
            futures_util::future::join_all(uuids.iter().map(|uuid| agent.register(uuid, "burst", None))).await;
        statuses.extend(registrations.iter().map(|reply| reply.status.as_u16()));
        (agent, statuses)
    }))
    .await;
    stop.store(true, Ordering::Relaxed);
    for hog in hogs {
        hog.join().expect("a CPU hog thread");
    }

    let failures: Vec<(usize, Vec<u16>)> = outcomes
        .iter()
        .enumerate()
        .filter(|(_, (_, statuses))| statuses[0] != 200 || statuses[1..].iter().any(|status| *status != 201))
        .map(|(user, (_, statuses))| (user, statuses.clone()))
        .collect();
    assert!(
        failures.is_empty(),
        "sign-in (200) and registrations (201) that failed: {failures:?}"
    );
    for ((agent, _), uuids) in outcomes.iter().zip(&uuids) {
        let listed: BTreeSet<String> = agent
            .isu_list()
            .await
            .json(200)
            .as_array()
            .unwrap()
            .iter()
            .map(|isu| isu["jia_isu_uuid"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(listed, uuids.iter().cloned().collect::<BTreeSet<_>>());
    }

    // The users reached both workers, in batches rather than a call per user and worker.
    let metrics = cluster
        .raw_client()
        .get(format!("{}/metrics", cluster.coordinator))
        .header("x-cluster-secret", &cluster.secret)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for worker in ["worker-a", "worker-b"] {
        let peer = format!("peer=\"{worker}\"");
        let syncs = metric_sum(
            &metrics,
            "outgoing_call_duration_seconds_count",
            &[&peer, "path=\"/internal/users\"", "outcome=\"ok\""],
        );
        assert!(
            (1.0..f64::from(USERS)).contains(&syncs),
            "{syncs} user syncs to {worker} for {USERS} new users"
        );
    }
    let coordinator_log = cluster.node_log(2);
    assert!(
        !coordinator_log.contains("ERROR") && !coordinator_log.contains("user sync failed"),
        "the coordinator logged failures:\n{coordinator_log}"
    );
    cluster.assert_no_crash();
}
