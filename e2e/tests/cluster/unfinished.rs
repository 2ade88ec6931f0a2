//! A registration whose worker stops answering half-way, sent by a client that gives up
//! after a second and sends it again as the bench does (`bench/src/scenario/user.rs`): what
//! the client concludes and what the coordinator lists afterwards agree, and an ISU JIA
//! activated and the log accepted is published on its worker once the worker answers again
//! (the leader's sweep never rolls it back, and sweeps a worker as soon as it answers again).

use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::*;
use serde_json::Value;

/// The bench's client timeout, and how many times it sends one registration.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(1);
const ATTEMPTS: usize = 3;
/// How long a registration is held once its ISU is logged accepted (its worker is stopped
/// meanwhile, before the publish).
const HELD_ACCEPTED_MS: u64 = 2_000;
/// How long worker A stays stopped: longer than the coordinator's calls to it take to give
/// up (a publish, then whatever follows it), like the system test's 10-s network cut.
const STOPPED_FOR: Duration = Duration::from_secs(9);
/// How soon a worker that answers again is swept (the sweep of a worker that answered all
/// along comes every 10 s).
const SWEPT_WHEN_BACK_WITHIN: Duration = Duration::from_secs(6);
/// Node index of worker A (cell a: UUIDs whose first hex digit is even).
const WORKER_A: usize = 0;

/// Two ISUs of cell a, both activated by JIA and logged accepted: one whose publish times
/// out against its stopped worker (the client, timing out meanwhile, reads it back as the
/// bench does and is shown it), one whose publish never reached its worker (a fail point).
/// Both stay registered, as the client was told, and are published on the worker once it
/// answers again; neither is rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_logged_before_their_worker_stopped_stay_and_are_published_when_it_answers() {
    let timed_out = test_uuid('c', 91);
    let lost = test_uuid('e', 92);
    let mut cluster = spawn_cluster_with(ClusterOptions {
        fail_points: Some(format!(
            "registration-accepted=return({timed_out}/{HELD_ACCEPTED_MS});registration-publish-lost=return({lost})"
        )),
        ..ClusterOptions::default()
    })
    .await;
    cluster.make_known(&timed_out);
    cluster.make_known(&lost);
    let coordinator = cluster.workers.len();
    let alice = Arc::new(cluster.sign_in("alice").await);

    // Answered while worker A holds it provisionally (its publish was lost).
    let lost_believed = register_like_the_bench(&alice, &lost).await;
    let client = tokio::spawn({
        let (alice, uuid) = (alice.clone(), timed_out.clone());
        async move { register_like_the_bench(&alice, &uuid).await }
    });
    // JIA activated the ISU and the log accepted it (the coordinator shows it); its worker
    // stops before it hears of the publish.
    cluster.wait_for_log(coordinator, "held at a fail point").await;
    cluster.signal_node(WORKER_A, "STOP");
    let stopped_at = Instant::now();
    let timed_out_believed = client.await.expect("the client's task");
    tokio::time::sleep(STOPPED_FOR.saturating_sub(stopped_at.elapsed())).await;
    cluster.signal_node(WORKER_A, "CONT");
    let resumed_at = Instant::now();

    for (uuid, believed) in [(&timed_out, timed_out_believed), (&lost, lost_believed)] {
        eprintln!("the client concluded {believed:?}");
        let listed = listed_isu(&alice, uuid).await;
        assert_eq!(
            listed.is_some(),
            believed.is_some(),
            "the client was told {believed:?}, the coordinator lists {listed:?}"
        );
        let listed = listed.expect("an ISU JIA activated and the log accepted stays registered");
        let believed = believed.expect("listed, so believed");
        for field in ["id", "jia_isu_uuid", "name", "character"] {
            assert_eq!(listed[field], believed[field], "{field} of {uuid}");
        }
    }

    // Once worker A answers, it serves both (published from the log), and they stay.
    let query = format!("end_time={FAR_FUTURE}&condition_level={ALL_LEVELS}");
    for uuid in [&timed_out, &lost] {
        wait_until(
            &format!("worker A serves {uuid} once it answers again"),
            SWEPT_WHEN_BACK_WITHIN.saturating_sub(resumed_at.elapsed()),
            || async { (alice.conditions(uuid, &query).await.status.as_u16() == 200).then_some(()) },
        )
        .await;
        assert!(listed_isu(&alice, uuid).await.is_some(), "{uuid} still listed");
    }
    eprintln!("worker A served both {:?} after it resumed", resumed_at.elapsed());
    // Its log line may come a moment after the worker served the ISU.
    let logged = |what: &str, uuid: &str, log: &str| log.lines().any(|line| line.contains(what) && line.contains(uuid));
    wait_until(
        "the sweep logs that it published the ISU whose publish was lost",
        Duration::from_secs(5),
        || async {
            logged(
                "published a registration left unfinished",
                &lost,
                &cluster.node_log(coordinator),
            )
            .then_some(())
        },
    )
    .await;
    let log = cluster.node_log(coordinator);
    for uuid in [&timed_out, &lost] {
        assert!(
            !logged("rolled back a registration", uuid, &log),
            "{uuid} was rolled back:\n{log}"
        );
    }
    cluster.assert_no_crash();
}

/// What the bench concludes of one registration: the ISU it was told exists (a 201; on a
/// re-send, a 409 and then the ISU's read), or, after timeouts, the ISU's read if it
/// answers 200; `None` when it was told of none.
async fn register_like_the_bench(agent: &Agent, uuid: &str) -> Option<Value> {
    let mut timed_out = false;
    for attempt in 0..ATTEMPTS {
        match agent.try_register(uuid, "chair", CLIENT_TIMEOUT).await {
            Ok(reply) if reply.status.as_u16() == 201 => return Some(reply.json(201)),
            Ok(reply) if attempt > 0 && reply.status.as_u16() == 409 => return read_isu(agent, uuid).await,
            Ok(reply) => {
                eprintln!("attempt {attempt}: {} {}", reply.status, reply.text());
                return None;
            }
            Err(error) if error.is_timeout() => timed_out = true,
            Err(error) => panic!("POST /api/isu: {error}"),
        }
    }
    match timed_out {
        true => read_isu(agent, uuid).await,
        false => None,
    }
}

/// `GET /api/isu/<uuid>`: the ISU when it answers 200.
async fn read_isu(agent: &Agent, uuid: &str) -> Option<Value> {
    let reply = agent.isu(uuid).await;
    (reply.status.as_u16() == 200).then(|| reply.json(200))
}

/// The ISU `uuid` in the signed-in user's list.
async fn listed_isu(agent: &Agent, uuid: &str) -> Option<Value> {
    let list = agent.isu_list().await.json(200);
    list.as_array()
        .expect("an ISU list is an array")
        .iter()
        .find(|isu| isu["jia_isu_uuid"] == uuid)
        .cloned()
}
