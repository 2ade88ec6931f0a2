//! Inside a cell: the per-ISU quota (a flooding ISU is shaped, never dropped; 429 when the
//! shaping lane is full), quarantine of a poisonous ISU, and the blast radius of a poison
//! pill with shuffle-sharded lanes against one shared queue. Poison comes from fail points
//! (`ingest-stall=return(UUID)`: storing that ISU's batches hangs for 5 s).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use shared::shuffle::{lane_sets, lanes_of};

use super::durability::own_timestamps;
use e2e::*;

const SEED: u64 = 7;

/// A batch of `count` conditions from `first` (timestamps the helpers read back).
fn batch(first: i64, count: i64) -> Vec<jia_sim::condition::SentCondition> {
    (first..first + count)
        .map(|timestamp| sent(timestamp, true, INFO, "flood"))
        .collect()
}

/// Posts `conditions` for `uuid` to `device`; the status, `Retry-After` and the time taken.
async fn post(
    client: &reqwest::Client,
    device: &str,
    uuid: &str,
    conditions: &[jia_sim::condition::SentCondition],
) -> (Option<StatusCode>, Option<String>, Duration) {
    let started = Instant::now();
    let answer = client
        .post(format!("{device}/api/condition/{uuid}"))
        .json(conditions)
        .send()
        .await;
    let elapsed = started.elapsed();
    match answer {
        Ok(response) => {
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned);
            (Some(response.status()), retry_after, elapsed)
        }
        Err(_) => (None, None, elapsed),
    }
}

fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(timeout).build().unwrap()
}

/// First timestamp of the tests' own conditions (before the generated dataset's).
const BASE: i64 = shared::dataset::generated::VIRTUAL_START - 40_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_isu_is_shaped_and_a_poisonous_one_quarantined_while_others_post_as_usual() {
    // All three on cell a; the poisonous ISU's UUID names the fail point's target.
    let poison = test_uuid('0', 0xdead);
    let (cluster, alice) = poisoned_cluster(
        &poison,
        &["--isu-quota", "300", "--shaping-queue", "400", "--lane-stall-ms", "300"],
    )
    .await;
    let poison_lanes = lanes_of(poison.as_bytes(), SEED, 8, 2);
    let flood = (0xf1..)
        .map(|serial| test_uuid('2', serial))
        .find(|uuid| lanes_of(uuid.as_bytes(), SEED, 8, 2) != poison_lanes)
        .unwrap();
    cluster.make_known(&flood);
    let normal = (0x41..)
        .map(|serial| test_uuid('4', serial))
        .find(|uuid| lanes_of(uuid.as_bytes(), SEED, 8, 2) != poison_lanes)
        .unwrap();
    cluster.make_known(&normal);
    for uuid in [&poison, &flood, &normal] {
        alice.register(uuid, "ingest", None).await.json(201);
    }
    let device = cluster.device_servers[0].clone();
    let patient = client(Duration::from_secs(20));

    // The poison pill jams one of its lanes; the watchdog leaves it behind and quarantines
    // the ISU (its next batch goes to the shaping lane, and jams that).
    let first_pill = {
        let (patient, device, poison) = (patient.clone(), device.clone(), poison.clone());
        tokio::spawn(async move { post(&patient, &device, &poison, &batch(BASE, 1)).await })
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    let metrics = worker_metrics(&cluster, 0).await;
    assert_eq!(metric_sum(&metrics, "ingest_lane_stalls_total{", &[]), 1.0, "{metrics}");
    assert_eq!(metric_sum(&metrics, "ingest_quarantined_isus{", &[]), 1.0, "{metrics}");
    let (status, _, took) = post(&patient, &device, &poison, &batch(BASE + 1, 1)).await;
    assert_eq!(status, Some(StatusCode::ACCEPTED), "shaped: acknowledged at once");
    assert!(took < Duration::from_secs(2), "{took:?}");

    // The flood: 100 conditions a batch against a quota of 300 per window.
    let mut statuses = Vec::new();
    let mut acknowledged = BTreeSet::new();
    for round in 0..10 {
        let conditions = batch(BASE + 1000 + round * 100, 100);
        let (status, retry_after, _) = post(&patient, &device, &flood, &conditions).await;
        match status {
            Some(StatusCode::ACCEPTED) => acknowledged.extend(conditions.iter().map(|condition| condition.timestamp)),
            Some(StatusCode::TOO_MANY_REQUESTS) => assert_eq!(retry_after.as_deref(), Some("1")),
            other => panic!("flood batch {round}: {other:?}"),
        }
        statuses.push(status.unwrap().as_u16());
    }
    let accepted = statuses.iter().take_while(|status| **status == 202).count();
    assert!(
        accepted >= 5,
        "3 within the quota, then shaped while the lane has room: {statuses:?}"
    );
    assert!(
        statuses[accepted..].iter().all(|status| *status == 429) && accepted < statuses.len(),
        "then 429 once the shaping lane is full: {statuses:?}"
    );
    // Within the quota: stored at once; shaped: not yet (the shaping lane is jammed).
    let visible = own_timestamps(&alice, &flood).await.len();
    assert_eq!(visible, 300, "only the batches within the quota are visible yet");

    // The normal ISU shares at most one lane with the poison: it posts as usual.
    let quick = client(Duration::from_secs(2));
    for round in 0..20 {
        let (status, _, took) = post(&quick, &device, &normal, &batch(BASE + 5000 + round * 10, 10)).await;
        assert_eq!(status, Some(StatusCode::ACCEPTED), "normal batch {round}");
        assert!(took < Duration::from_secs(1), "normal batch {round} took {took:?}");
    }

    // Once the pills have hung their time, everything acknowledged is stored, nothing else.
    assert_eq!(first_pill.await.unwrap().0, Some(StatusCode::ACCEPTED));
    let alice_ref = &alice;
    let flood_ref = flood.as_str();
    let expected = &acknowledged;
    wait_until(
        "the shaped batches are stored",
        Duration::from_secs(15),
        || async move { (own_timestamps(alice_ref, flood_ref).await == *expected).then_some(()) },
    )
    .await;
    let metrics = worker_metrics(&cluster, 0).await;
    let refused = metric_sum(&metrics, "ingest_rejected_batches_total{", &["reason=\"shaping_full\""]);
    assert!(refused >= 1.0, "{metrics}");
    let mut cluster = cluster;
    cluster.assert_no_crash();
}

/// A cluster whose workers take `worker_args` (and `--lane-seed` [`SEED`]) and treat
/// `poison` as a poison pill, with the simulator's devices silent (every batch is the
/// test's own); alice signed in, the poison known to JIA.
async fn poisoned_cluster(poison: &str, worker_args: &[&str]) -> (Cluster, Agent) {
    let mut args: Vec<String> = worker_args.iter().map(|arg| arg.to_string()).collect();
    args.extend(["--lane-seed".to_owned(), SEED.to_string()]);
    let cluster = spawn_cluster_with(ClusterOptions {
        worker_args: args,
        fail_points: Some(format!("ingest-stall=return({poison})")),
        device_run_for: Duration::ZERO,
        ..ClusterOptions::default()
    })
    .await;
    let alice = cluster.sign_in("alice").await;
    cluster.make_known(poison);
    (cluster, alice)
}

async fn worker_metrics(cluster: &Cluster, worker: usize) -> String {
    cluster
        .internal_get(&format!("{}/metrics", cluster.workers[worker]))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// One poisonous ISU posting all along (each of its batches hangs 5 s in its lane; no
/// quarantine, so it keeps jamming), and `isus` other ISUs posting every 50 ms for 3 s
/// with a device timeout of 500 ms. Returns (ISUs expected exposed by their lane sets,
/// ISUs that saw an error or a timeout, all ISUs).
async fn blast_radius(lanes: usize, choices: usize, isus: usize) -> (BTreeSet<String>, BTreeSet<String>) {
    let poison = test_uuid('0', 0xbad);
    let (lanes_flag, choices_flag) = (lanes.to_string(), choices.to_string());
    let (cluster, alice) = poisoned_cluster(
        &poison,
        &[
            "--ingest-lanes",
            &lanes_flag,
            "--lane-choices",
            &choices_flag,
            "--lane-permits",
            "1",
            "--lane-stall-ms",
            "3000",
            "--quarantine",
            "off",
        ],
    )
    .await;
    alice.register(&poison, "poison", None).await.json(201);
    let poison_lanes: BTreeSet<usize> = lanes_of(poison.as_bytes(), SEED, lanes, choices).into_iter().collect();
    // Every other ISU on the same cell (first digit even: a); a few of them, at least,
    // on exactly the poison's lanes (about 1 in C(n, k) would be, at random).
    let exposed_at_least = isus.div_ceil(lane_sets(lanes, choices) as usize).max(2).min(isus);
    let on_poison_lanes = |uuid: &String| {
        lanes_of(uuid.as_bytes(), SEED, lanes, choices)
            .iter()
            .all(|lane| poison_lanes.contains(lane))
    };
    let candidates = (0u32..).map(|serial| test_uuid(['2', '4', '6', '8'][serial as usize % 4], 0x5000 + serial));
    let mut others: Vec<String> = Vec::new();
    let mut exposed = 0;
    for uuid in candidates {
        if others.len() == isus {
            break;
        }
        let on = on_poison_lanes(&uuid);
        if on && exposed < exposed_at_least {
            exposed += 1;
            others.push(uuid);
        } else if !on && others.len() - exposed < isus - exposed_at_least {
            others.push(uuid);
        }
    }
    for uuid in &others {
        cluster.make_known(uuid);
        alice.register(uuid, "neighbour", None).await.json(201);
    }
    let expected: BTreeSet<String> = others.iter().filter(|uuid| on_poison_lanes(uuid)).cloned().collect();

    let device = cluster.device_servers[0].clone();
    let stop_at = Instant::now() + Duration::from_secs(3);
    let poisoner = {
        let (device, poison) = (device.clone(), poison.clone());
        tokio::spawn(async move {
            let patient = client(Duration::from_secs(30));
            let mut serial = 0;
            while Instant::now() < stop_at {
                // Each batch jams the lane it lands in (and waits there); a new one every
                // 100 ms keeps the poison's lanes jammed.
                let (patient, device, poison) = (patient.clone(), device.clone(), poison.clone());
                tokio::spawn(async move { post(&patient, &device, &poison, &batch(BASE + serial, 1)).await });
                serial += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let devices: Vec<_> = others
        .iter()
        .enumerate()
        .map(|(lane, uuid)| {
            let (device, uuid) = (device.clone(), uuid.clone());
            tokio::spawn(async move {
                let timeout = client(Duration::from_millis(500));
                let mut failed = false;
                let mut serial = 0;
                while Instant::now() < stop_at {
                    let first = BASE + 100_000 + lane as i64 * 10_000 + serial * 10;
                    let (status, _, _) = post(&timeout, &device, &uuid, &batch(first, 10)).await;
                    failed |= status != Some(StatusCode::ACCEPTED);
                    serial += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                (uuid, failed)
            })
        })
        .collect();
    let mut hurt = BTreeSet::new();
    for device in devices {
        let (uuid, failed) = device.await.unwrap();
        if failed {
            hurt.insert(uuid);
        }
    }
    poisoner.await.unwrap();
    (expected, hurt)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_pill_hurts_only_the_isus_that_share_both_its_lanes() {
    let isus = 56;
    let (expected, hurt) = blast_radius(8, 2, isus).await;
    eprintln!(
        "blast radius, 2 of 8 lanes: {} of {isus} ISUs hurt ({} put on both of the poison's lanes on purpose; at random 1 in {} is)",
        hurt.len(),
        expected.len(),
        lane_sets(8, 2)
    );
    assert!(
        hurt.is_subset(&expected),
        "hurt beyond the poison's lanes: {:?}",
        hurt.difference(&expected).collect::<Vec<_>>()
    );
    assert!(
        !expected.is_empty() && hurt == expected,
        "every ISU on the poison's two lanes is hurt: {hurt:?} vs {expected:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_shared_queue_a_poison_pill_hurts_every_isu() {
    let isus = 16;
    let (expected, hurt) = blast_radius(1, 1, isus).await;
    eprintln!("blast radius, one shared queue: {} of {isus} ISUs hurt", hurt.len());
    assert_eq!(expected.len(), isus);
    assert_eq!(hurt, expected);
}

/// A poison pill that panics the store itself (`ingest-panic`): in its lane the panic is
/// caught (500) and the ISU quarantined; its next batch is shaped (logged, 202) and panics
/// the shaping lane, caught too, so it stays in the log only. A restart must not replay
/// that record into a crash: it is skipped and reported, and the worker serves every other
/// ISU's acknowledged conditions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_panics_the_store_is_quarantined_and_skipped_at_replay_instead_of_crashing_the_worker() {
    let poison = test_uuid('0', 0xbad);
    let fail_points = format!("ingest-panic=return({poison})");
    let mut cluster = spawn_cluster_with(ClusterOptions {
        durable: true,
        fail_points: Some(fail_points.clone()),
        device_run_for: Duration::ZERO,
        ..ClusterOptions::default()
    })
    .await;
    let alice = cluster.sign_in("alice").await;
    cluster.make_known(&poison);
    let normal = test_uuid('2', 0x900d);
    cluster.make_known(&normal);
    for uuid in [&poison, &normal] {
        alice.register(uuid, "poison", None).await.json(201);
    }
    let device = cluster.device_servers[0].clone();
    let patient = client(Duration::from_secs(10));

    let (status, _, _) = post(&patient, &device, &poison, &batch(BASE, 1)).await;
    assert_eq!(
        status,
        Some(StatusCode::INTERNAL_SERVER_ERROR),
        "the lane's panic is caught"
    );
    let (status, _, _) = post(&patient, &device, &poison, &batch(BASE + 1, 1)).await;
    assert_eq!(
        status,
        Some(StatusCode::ACCEPTED),
        "quarantined: shaped, logged, acknowledged"
    );
    let mut acknowledged = BTreeSet::new();
    for round in 0..5 {
        let conditions = batch(BASE + 100 + round * 10, 10);
        let (status, _, _) = post(&patient, &device, &normal, &conditions).await;
        assert_eq!(status, Some(StatusCode::ACCEPTED), "normal batch {round}");
        acknowledged.extend(conditions.iter().map(|condition| condition.timestamp));
    }
    wait_until("the shaping lane met the pill", Duration::from_secs(10), || async {
        let metrics = worker_metrics(&cluster, 0).await;
        (metric_sum(&metrics, "ingest_lane_panics_total{", &[]) >= 2.0).then_some(())
    })
    .await;
    assert_eq!(own_timestamps(&alice, &normal).await, acknowledged);

    // Started again with the store still poisonous: the shaped batch's record panics the
    // replay's store too, and is skipped.
    cluster.kill_node(0);
    cluster.fail_points = Some(fail_points);
    cluster.start_node(0);
    let alice_ref = &alice;
    let normal_ref = normal.as_str();
    let expected = &acknowledged;
    wait_until("the worker serves again", Duration::from_secs(20), || async move {
        // A pooled connection to the killed worker may fail a first try.
        let path = format!("/api/condition/{normal_ref}?end_time=1&condition_level={ALL_LEVELS}");
        let reply = alice_ref.try_get(&path).await.ok()?;
        (reply.status.as_u16() == 200).then_some(())
    })
    .await;
    assert_eq!(own_timestamps(alice_ref, normal_ref).await, *expected);
    let log = cluster.node_log(0);
    let replayed = log
        .lines()
        .rfind(|line| line.contains("log replayed"))
        .expect("the restart replayed its log");
    assert!(replayed.contains(" poisoned=1 "), "{replayed}");
    assert!(
        log.contains("log records that panicked the store were skipped"),
        "{log}"
    );
    // The poisonous ISU itself is still served (what it stored before the pill: nothing).
    assert!(own_timestamps(&alice, &poison).await.is_empty());
}
