//! Node crashes under load (what `scripts/faults` checked by hand): a durable cluster
//! (`--data-dir`, fsync always) behind the real nginx, loaded by users who register ISUs
//! whose simulated devices post every 40 ms and by readers through nginx, a dataset user's
//! ISU on each worker as probes, and one node SIGKILLed by its PID for a few seconds, then
//! started again on the same data.
//!
//! - worker: while worker A is down, worker B's ISU is posted to and read without an error,
//!   reads of worker A's ISU through nginx fail with a 5xx within 2 s, and every condition
//!   worker A acknowledged before, during and after the kill is readable after its restart;
//! - coordinator: while it is down both workers take device posts (the newest condition of
//!   each probe among them); once it is back, every ISU of the trend (the load's
//!   registrations too) is there again and the newest conditions reach the ISU list within 3 s.
//!
//! The load's own errors caused by the fault are printed, not judged (as the script did).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::*;
use reqwest::StatusCode;
use serde_json::Value;
use shared::dataset::generated::VIRTUAL_START;

use super::durability::{device_client, own_timestamps, post_and_record, Posted, CONDITIONS_PER_BATCH};

/// How long the killed node stays down.
const DOWN: Duration = Duration::from_secs(3);
/// Users of the load, each registering [`ISUS_PER_LOAD_USER`] ISUs (both workers).
const LOAD_USERS: u32 = 4;
const ISUS_PER_LOAD_USER: u32 = 2;
/// The dataset user whose ISUs are the probes.
const PROBE_USER: &str = "isucon1";

/// A durable cluster (fsync always, the workers' default) behind the public nginx, under load,
/// with the probe user signed in through nginx and its probe ISUs on worker A and B.
struct Faults {
    cluster: Cluster,
    nginx: Nginx,
    _front_end: ScratchDir,
    load: Load,
    probe: Agent,
    probe_a: String,
    probe_b: String,
}

impl Faults {
    async fn start() -> Option<Faults> {
        let nginx_binary = nginx_or_skip()?;
        let cluster = spawn_cluster_with(ClusterOptions {
            durable: true,
            ..ClusterOptions::default()
        })
        .await;
        let front_end = fixture_front_end();
        let (nginx, public) = public_nginx(&cluster, &nginx_binary, &front_end.path).await;
        let load = Load::start(&cluster, &public).await;
        let probe = sign_in_with(Agent::new(Routes::Public(public)), &cluster.signer, PROBE_USER).await;
        let on = |worker: usize| {
            dataset_isus_of(PROBE_USER)
                .into_iter()
                .find(|isu| shard_index(&isu.uuid) == worker)
                .map(|isu| isu.uuid.clone())
                .expect("the probe user has an ISU on each worker")
        };
        let (probe_a, probe_b) = (on(0), on(1));
        Some(Faults {
            cluster,
            nginx,
            _front_end: front_end,
            load,
            probe,
            probe_a,
            probe_b,
        })
    }

    /// `GET /api/condition/<uuid>` through nginx as the probe user: the status and how long it took.
    async fn timed_read(&self, uuid: &str) -> (Option<StatusCode>, Duration) {
        let started = Instant::now();
        let path = format!(
            "/api/condition/{uuid}?end_time={}&condition_level=info",
            VIRTUAL_START * 2
        );
        let status = self.probe.try_get(&path).await.ok().map(|reply| reply.status);
        (status, started.elapsed())
    }

    /// The number of ISUs in the trend, read through nginx.
    async fn trend_size(&self) -> usize {
        let trend = self.probe.trend().await.json(200);
        trend
            .as_array()
            .expect("the trend is an array")
            .iter()
            .map(|entry| {
                ["info", "warning", "critical"]
                    .iter()
                    .map(|level| entry[*level].as_array().map_or(0, Vec::len))
                    .sum::<usize>()
            })
            .sum()
    }

    /// Stops the load (saying what it got) and checks that nothing crashed.
    async fn finish(mut self) {
        let (reads, errors) = self.load.stop().await;
        let [sent, accepted, ..] = self.cluster.jia.device_posts();
        eprintln!(
            "load: {reads} reads ({} errors, first: {:?}), {sent} device posts ({accepted} accepted)",
            errors.len(),
            errors.first()
        );
        assert!(
            reads > 0 && accepted > 0,
            "the load ran: {reads} reads, {accepted} device posts accepted"
        );
        self.nginx.assert_running();
        self.cluster.assert_no_crash();
    }
}

/// The load of a fault scenario: users who registered ISUs through nginx (their simulated
/// devices post every 40 ms to the workers' device servers) and readers through nginx.
struct Load {
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicUsize>,
    errors: Arc<Mutex<Vec<String>>>,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    async fn start(cluster: &Cluster, public: &str) -> Load {
        let mut users = Vec::new();
        for user in 0..LOAD_USERS {
            let agent = Agent::new(Routes::Public(public.to_owned()));
            let agent = sign_in_with(agent, &cluster.signer, &format!("load-{user}")).await;
            let mut uuids = Vec::new();
            for index in 0..ISUS_PER_LOAD_USER {
                let serial = 700 + user * ISUS_PER_LOAD_USER + index;
                let uuid = cluster.known_uuid(['2', '3'][index as usize % 2], serial);
                agent.register(&uuid, "load", None).await.json(201);
                uuids.push(uuid);
            }
            users.push((agent, uuids));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicUsize::new(0));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let readers = users
            .into_iter()
            .map(|(agent, uuids)| {
                let (stop, reads, errors) = (stop.clone(), reads.clone(), errors.clone());
                tokio::spawn(async move {
                    let mut turn = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        let uuid = &uuids[turn % uuids.len()];
                        let path = match turn % 3 {
                            0 => format!("/api/condition/{uuid}?end_time={FAR_FUTURE}&condition_level={ALL_LEVELS}"),
                            1 => "/api/isu".to_owned(),
                            _ => "/api/trend".to_owned(),
                        };
                        turn += 1;
                        reads.fetch_add(1, Ordering::Relaxed);
                        match agent.try_get(&path).await {
                            Ok(reply) if reply.status == StatusCode::OK => {}
                            Ok(reply) => errors.lock().unwrap().push(format!("{path}: {}", reply.status)),
                            Err(error) => errors.lock().unwrap().push(format!("{path}: {error}")),
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            })
            .collect();
        Load {
            stop,
            reads,
            errors,
            readers,
        }
    }

    /// Stops the readers; the reads made and the errors they met.
    async fn stop(&mut self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for reader in self.readers.drain(..) {
            reader.await.unwrap();
        }
        let errors = self.errors.lock().unwrap().clone();
        (self.reads.load(Ordering::Relaxed), errors)
    }
}

/// Posts batches of lane `lane` to `device_server` for `uuid` until stopped, recording the
/// timestamps of every batch answered 202 (refusals while the worker is down are expected).
fn keep_posting(
    device_server: String,
    uuid: String,
    lane: i64,
    stop: Arc<AtomicBool>,
    acknowledged: Arc<Mutex<BTreeSet<i64>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = device_client();
        let mut serial = 0;
        while !stop.load(Ordering::Relaxed) {
            if post_and_record(&client, &device_server, &uuid, lane, serial, &acknowledged).await != Posted::Accepted {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            serial += 1;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sigkilled_under_load_loses_no_acknowledged_condition_and_its_reads_fail_fast() {
    let Some(mut faults) = Faults::start().await else {
        return;
    };
    // The probe posts its own batches to worker A all along: before, during and after the kill.
    let stop_poster = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
    let poster = keep_posting(
        faults.cluster.device_servers[0].clone(),
        faults.probe_a.clone(),
        0,
        stop_poster.clone(),
        acknowledged.clone(),
    );
    wait_until("worker A acknowledged 50 batches", Duration::from_secs(20), || async {
        (acknowledged.lock().unwrap().len() >= 50 * CONDITIONS_PER_BATCH as usize).then_some(())
    })
    .await;

    faults.cluster.kill_node(0);
    let client = device_client();
    let recorded_b = Mutex::new(BTreeSet::new());
    let (mut rounds, mut errors_b) = (0, Vec::new());
    let (mut dead_statuses, mut slowest_dead_read) = (Vec::new(), Duration::ZERO);
    let down_until = Instant::now() + DOWN;
    while Instant::now() < down_until {
        let device_b = &faults.cluster.device_servers[1];
        let posted = post_and_record(&client, device_b, &faults.probe_b, 1, rounds, &recorded_b).await;
        if posted != Posted::Accepted {
            errors_b.push(format!("post {rounds}: {posted:?}"));
        }
        let (status, _) = faults.timed_read(&faults.probe_b).await;
        if status != Some(StatusCode::OK) {
            errors_b.push(format!("read {rounds}: {status:?}"));
        }
        let (status, took) = faults.timed_read(&faults.probe_a).await;
        dead_statuses.push(status);
        slowest_dead_read = slowest_dead_read.max(took);
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(rounds > 0);
    assert!(
        errors_b.is_empty(),
        "worker B served its ISU without an error while worker A was down ({rounds} posts and reads): {errors_b:?}"
    );
    assert!(
        dead_statuses
            .iter()
            .all(|status| status.is_some_and(|status| status.is_server_error())),
        "reads of worker A's ISU through nginx fail with a 5xx while it is down: {dead_statuses:?}"
    );
    assert!(
        slowest_dead_read < Duration::from_secs(2),
        "and fail fast: the slowest took {slowest_dead_read:?}"
    );

    faults.cluster.start_node(0);
    faults.cluster.wait_until_healthy().await;
    let before_restart = acknowledged.lock().unwrap().len();
    wait_until("worker A acknowledges posts again", Duration::from_secs(10), || async {
        (acknowledged.lock().unwrap().len() > before_restart).then_some(())
    })
    .await;
    stop_poster.store(true, Ordering::Relaxed);
    poster.await.unwrap();
    let acknowledged = acknowledged.lock().unwrap().clone();
    let present = wait_until("worker A serves its ISU again", Duration::from_secs(10), || async {
        let (status, _) = faults.timed_read(&faults.probe_a).await;
        match status == Some(StatusCode::OK) {
            true => Some(own_timestamps(&faults.probe, &faults.probe_a).await),
            false => None,
        }
    })
    .await;
    let missing: Vec<&i64> = acknowledged.difference(&present).collect();
    eprintln!(
        "worker-a SIGKILL: {} conditions acknowledged, {} present after restart, {} missing",
        acknowledged.len(),
        present.len(),
        missing.len()
    );
    assert!(missing.is_empty(), "acknowledged conditions lost: {missing:?}");
    assert!(
        faults.cluster.node_log(0).contains("log replayed"),
        "the restarted worker replayed its log"
    );
    faults.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_sigkilled_under_load_gets_every_trend_isu_back_and_the_newest_conditions_within_3_s() {
    let Some(mut faults) = Faults::start().await else {
        return;
    };
    // Every ISU is in the trend once its device has posted: the dataset's 28 and the load's.
    let expected = 28 + (LOAD_USERS * ISUS_PER_LOAD_USER) as usize;
    let trend_before = wait_until(
        "the trend holds the dataset's ISUs and every ISU of the load",
        Duration::from_secs(10),
        || async {
            let size = faults.trend_size().await;
            (size >= expected).then_some(size)
        },
    )
    .await;
    let coordinator = faults.cluster.workers.len();
    faults.cluster.kill_node(coordinator);

    let client = device_client();
    let recorded = Mutex::new(BTreeSet::new());
    let probes = [(0, faults.probe_a.clone()), (1, faults.probe_b.clone())];
    let (mut batches, mut refused) = (0, Vec::new());
    let down_until = Instant::now() + DOWN;
    let mut serial = 0;
    while Instant::now() < down_until {
        for (worker, uuid) in &probes {
            let device_server = &faults.cluster.device_servers[*worker];
            let posted = post_and_record(&client, device_server, uuid, 2, serial, &recorded).await;
            batches += 1;
            if posted != Posted::Accepted {
                refused.push(format!("{uuid}: {posted:?}"));
            }
        }
        serial += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let newest = VIRTUAL_START * 2;
    for (worker, uuid) in &probes {
        let batch = [sent(newest, true, INFO, "newest")];
        let answer = client
            .post(format!(
                "{}/api/condition/{uuid}",
                faults.cluster.device_servers[*worker]
            ))
            .json(&batch)
            .send()
            .await;
        batches += 1;
        match answer {
            Ok(response) if response.status() == StatusCode::ACCEPTED => {}
            other => refused.push(format!("{uuid}, newest: {other:?}")),
        }
    }
    assert!(
        refused.is_empty(),
        "workers accepted device posts while the coordinator was down ({batches} batches): {refused:?}"
    );

    faults.cluster.start_node(coordinator);
    faults.cluster.wait_until_healthy().await;
    let back = Instant::now();
    let probe_uuids: Vec<&str> = vec![&faults.probe_a, &faults.probe_b];
    wait_until(
        "the newest conditions reach the restarted coordinator's ISU list",
        Duration::from_secs(3),
        || async {
            let reply = faults.probe.isu_list().await;
            if reply.status != StatusCode::OK {
                return None;
            }
            let list: Value = reply.json(200);
            let caught_up = list.as_array()?.iter().filter(|isu| {
                probe_uuids.contains(&isu["jia_isu_uuid"].as_str().unwrap_or_default())
                    && isu["latest_isu_condition"]["timestamp"].as_i64().unwrap_or(0) >= newest
            });
            (caught_up.count() == probe_uuids.len()).then_some(())
        },
    )
    .await;
    eprintln!(
        "the newest conditions reached the ISU list {:?} after the coordinator was healthy",
        back.elapsed()
    );
    // The workers are asked to push every latest condition again when the coordinator
    // starts; the probes' newest conditions can arrive before the rest of that push, so the
    // trend is given the same 3 s to be whole again.
    wait_until(
        "every ISU of the trend (the load's registrations too) is back after the restart",
        Duration::from_secs(3),
        || async {
            let trend_after = faults.trend_size().await;
            (trend_after >= trend_before).then_some(())
        },
    )
    .await;
    eprintln!(
        "the trend was whole again ({trend_before} ISUs or more) {:?} after the coordinator was healthy",
        back.elapsed()
    );
    faults.finish().await;
}
