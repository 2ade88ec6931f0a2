//! Three coordinator replicas (`--replica`): every replica serves the API, a follower
//! forwards what only the leader runs, the leader's death is survived and the killed
//! replica catches up when it starts again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::*;
use serde_json::Value;
use shared::dataset::generated::VIRTUAL_START;

/// The body of each replica's successful answer to `GET path` with the cluster secret
/// (`None`: it did not answer within a second; a paused replica never does). Each body is
/// read before the next replica is asked: the timeout covers the body too.
async fn ask_each_replica(cluster: &Cluster, path: &str) -> Vec<Option<bytes::Bytes>> {
    let mut answers = Vec::new();
    for base in &cluster.coordinators {
        let asked = cluster
            .raw_client()
            .get(format!("{base}{path}"))
            .header(shared::protocol::SECRET_HEADER, &cluster.secret)
            .timeout(Duration::from_secs(1))
            .send()
            .await;
        let body = match asked {
            Ok(response) if response.status().is_success() => response.bytes().await.ok(),
            _ => None,
        };
        answers.push(body);
    }
    answers
}

/// Each replica's `/internal/replica` answer (`None`: it did not answer within a second).
async fn statuses(cluster: &Cluster) -> Vec<Option<Value>> {
    ask_each_replica(cluster, "/internal/replica")
        .await
        .into_iter()
        .map(|body| serde_json::from_slice(&body?).ok())
        .collect()
}

/// The replica (0-based) every answering replica names as leader, once they agree.
pub(super) async fn agreed_leader(cluster: &Cluster) -> usize {
    wait_until("the replicas agree on a leader", Duration::from_secs(15), || async {
        let answers: Vec<Value> = statuses(cluster).await.into_iter().flatten().collect();
        let leader = answers.first()?["leader"].as_u64()?;
        let agreed = answers.iter().all(|answer| answer["leader"].as_u64() == Some(leader));
        let leads = answers
            .iter()
            .any(|answer| answer["id"].as_u64() == Some(leader) && answer["role"] == "leader");
        (agreed && leads).then_some(leader as usize - 1)
    })
    .await
}

/// Three coordinator replicas (`fail_points` on every node's first start) once they agree
/// on a leader: the cluster and its leader (0-based).
async fn three_replicas(fail_points: Option<String>) -> (Cluster, usize) {
    let cluster = spawn_cluster_with(ClusterOptions {
        coordinators: 3,
        fail_points,
        ..ClusterOptions::default()
    })
    .await;
    let leader = agreed_leader(&cluster).await;
    (cluster, leader)
}

/// An agent whose coordinator routes go to replica `replica`.
pub(super) fn agent_of(cluster: &Cluster, replica: usize) -> Agent {
    Agent::new(Routes::Direct {
        coordinator: cluster.coordinators[replica].clone(),
        workers: cluster.workers.clone(),
    })
}

/// Sends a registration as `agent` in the background: its answer comes after the takeover
/// the test causes meanwhile.
pub(super) fn register_in_background(
    agent: &Arc<Agent>,
    uuid: &str,
    name: &'static str,
) -> tokio::task::JoinHandle<Reply> {
    let (agent, uuid) = (agent.clone(), uuid.to_owned());
    tokio::spawn(async move { agent.register(&uuid, name, None).await })
}

/// Three replicas whose leader holds alice's registration of `uuid` (sent through a
/// follower) at the fail point `step`: the cluster, the leader, alice, and the
/// registration's answer to come.
async fn registration_held_at(
    step: &str,
    uuid: &str,
    name: &'static str,
) -> (Cluster, usize, Arc<Agent>, tokio::task::JoinHandle<Reply>) {
    let (cluster, leader) = three_replicas(Some(format!("{step}=return({uuid})"))).await;
    cluster.make_known(uuid);
    let follower = (leader + 1) % 3;
    let alice = Arc::new(sign_in_with(agent_of(&cluster, follower), &cluster.signer, "alice").await);
    let registering = register_in_background(&alice, uuid, name);
    cluster
        .wait_for_log(cluster.workers.len() + leader, "held at a fail point")
        .await;
    (cluster, leader, alice, registering)
}

/// Replica `replica`'s term, as its status says.
async fn term_of(cluster: &Cluster, replica: usize) -> u64 {
    statuses(cluster).await[replica].as_ref().unwrap()["term"]
        .as_u64()
        .unwrap()
}

/// Waits until a replica other than `old` leads in a term after `term_before` (with `ready`,
/// one that says it is ready too); that replica.
async fn another_leads(cluster: &Cluster, old: usize, term_before: u64, ready: bool) -> usize {
    let what = if ready {
        "another replica leads, ready, in a later term"
    } else {
        "another replica leads in a later term"
    };
    wait_until(what, Duration::from_secs(15), || async {
        let answers = statuses(cluster).await;
        (0..answers.len()).filter(|replica| *replica != old).find(|replica| {
            answers[*replica].as_ref().is_some_and(|answer| {
                answer["role"] == "leader"
                    && (!ready || answer["ready"] == true)
                    && answer["term"].as_u64() > Some(term_before)
            })
        })
    })
    .await
}

/// The condition the registration tests post while a registration is held: at
/// `VIRTUAL_START + 60`, acknowledged (202).
async fn post_held_condition(cluster: &Cluster, uuid: &str, message: &'static str) {
    let info = "is_dirty=false,is_overweight=false,is_broken=false";
    let posted = [sent(VIRTUAL_START + 60, true, info, message)];
    cluster.post_conditions(uuid, &posted).await.assert_empty(202);
}

/// Waits (at most `within`) until `agent` lists `uuid`.
async fn wait_listed(agent: &Agent, uuid: &str, within: Duration) {
    wait_until("the ISU is listed", within, || async move {
        listed(agent).await.filter(|uuids| uuids.contains(uuid)).map(drop)
    })
    .await;
}

/// Asserts that the condition [`post_held_condition`] posted reads back from `uuid` (beside
/// what JIA's device posted since, which comes after it).
async fn assert_held_condition_readable(agent: &Agent, uuid: &str) {
    let path = format!(
        "/api/condition/{uuid}?end_time={}&condition_level=info,warning,critical",
        VIRTUAL_START + 61
    );
    let conditions = wait_until("the conditions are readable", Duration::from_secs(10), || async {
        let reply = agent.try_get(&path).await.ok()?;
        (reply.status.as_u16() == 200).then(|| reply.json(200))
    })
    .await;
    let timestamps: Vec<i64> = conditions
        .as_array()
        .unwrap()
        .iter()
        .map(|condition| condition["timestamp"].as_i64().unwrap())
        .collect();
    assert!(timestamps.contains(&(VIRTUAL_START + 60)), "{timestamps:?}");
}

/// How many times JIA was asked to activate `uuid`.
pub(super) fn activations_of(cluster: &Cluster, uuid: &str) -> usize {
    let activations = cluster.jia.activations();
    activations
        .iter()
        .filter(|activation| activation.isu_uuid == uuid)
        .count()
}

/// The UUIDs of the signed-in user's ISUs as `agent`'s replica lists them (`None` when it
/// does not answer 200).
pub(super) async fn listed(agent: &Agent) -> Option<BTreeSet<String>> {
    let reply = agent.try_get("/api/isu").await.ok()?;
    if reply.status.as_u16() != 200 {
        return None;
    }
    Some(
        reply
            .json(200)
            .as_array()?
            .iter()
            .filter_map(|isu| isu["jia_isu_uuid"].as_str().map(str::to_owned))
            .collect(),
    )
}

/// The replicas seen leading, by term.
type LeadersPerTerm = Arc<Mutex<BTreeMap<u64, BTreeSet<u64>>>>;

/// Samples every replica's role and term every 50 ms; the leaders seen per term.
fn sample_leaders(cluster: &Cluster) -> (LeadersPerTerm, tokio::task::JoinHandle<()>) {
    let seen: LeadersPerTerm = Arc::default();
    let (client, secret, bases) = (
        cluster.raw_client(),
        cluster.secret.clone(),
        cluster.coordinators.clone(),
    );
    let record = seen.clone();
    let sampler = tokio::spawn(async move {
        loop {
            for base in &bases {
                let answer = client
                    .get(format!("{base}/internal/replica"))
                    .header(shared::protocol::SECRET_HEADER, &secret)
                    .timeout(Duration::from_millis(200))
                    .send()
                    .await;
                let Ok(answer) = answer else { continue };
                let Ok(status) = answer.json::<Value>().await else {
                    continue;
                };
                if status["role"] == "leader" {
                    let (term, id) = (status["term"].as_u64().unwrap(), status["id"].as_u64().unwrap());
                    record.lock().unwrap().entry(term).or_default().insert(id);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    (seen, sampler)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_serve_the_api_survive_the_leader_s_death_and_catch_up() {
    let mut cluster = spawn_cluster_with(ClusterOptions {
        coordinators: 3,
        ..ClusterOptions::default()
    })
    .await;
    let (leaders_per_term, sampler) = sample_leaders(&cluster);
    let workers = cluster.workers.len();
    let leader = agreed_leader(&cluster).await;
    let follower = (leader + 1) % 3;

    // Through a follower: the sign-in commits the new user, the registration is forwarded
    // to the leader, and the follower's own list shows it at once.
    let alice = sign_in_with(agent_of(&cluster, follower), &cluster.signer, "alice").await;
    let first = cluster.known_uuid('a', 61);
    let request = [("x-isu-request-id", "e2e-request-1")];
    let reply = alice.register_with(&first, "first", None, &request).await;
    let created = reply.json(201);
    // How far the write was applied, for the client's next request on any replica.
    assert!(
        reply
            .set_cookies
            .iter()
            .any(|cookie| cookie.starts_with("isucondition_applied=")),
        "{:?}",
        reply.set_cookies
    );
    assert_eq!(listed(&alice).await, Some(BTreeSet::from([first.clone()])));
    // The same request sent again (nginx's retry, a forward whose answer was lost) is
    // answered from its outcome; another request for the same ISU is a duplicate.
    assert_eq!(
        alice.register_with(&first, "first", None, &request).await.json(201),
        created
    );
    assert_eq!(alice.register(&first, "first", None).await.status.as_u16(), 409);
    // Every replica lists it, with the latest condition its device posted to the worker.
    for replica in 0..3 {
        let reader = sign_in_with(agent_of(&cluster, replica), &cluster.signer, "alice").await;
        wait_until(
            "every replica lists the ISU with a condition",
            Duration::from_secs(10),
            || async {
                let reply = reader.try_get("/api/isu").await.ok()?;
                let list = reply.json(200);
                let isu = list
                    .as_array()?
                    .iter()
                    .find(|isu| isu["jia_isu_uuid"] == first.as_str())?;
                isu["latest_isu_condition"]["timestamp"].as_i64().map(|_| ())
            },
        )
        .await;
    }

    // The leader dies; the survivors elect another and take writes again.
    cluster.kill_node(workers + leader);
    let killed_at = Instant::now();
    let survivor = (leader + 2) % 3;
    let bob = agent_of(&cluster, survivor);
    let second = cluster.known_uuid('b', 62);
    wait_until("a survivor signs a new user in", Duration::from_secs(10), || async {
        let reply = bob.auth(Some(&cluster.signer.sign("bob"))).await;
        (reply.status.as_u16() == 200).then_some(())
    })
    .await;
    let signed_in_after = killed_at.elapsed();
    wait_until("a survivor registers an ISU", Duration::from_secs(10), || async {
        let reply = bob.register(&second, "second", None).await;
        (reply.status.as_u16() == 201).then_some(())
    })
    .await;
    let new_leader = agreed_leader(&cluster).await;
    assert_ne!(new_leader, leader);
    eprintln!("writes served again {signed_in_after:?} after the leader's death");

    // The killed replica starts again from its directory and catches up.
    cluster.start_node(workers + leader);
    let alice_there = sign_in_with(agent_of(&cluster, leader), &cluster.signer, "alice").await;
    let bob_there = sign_in_with(agent_of(&cluster, leader), &cluster.signer, "bob").await;
    wait_until(
        "the restarted replica has caught up",
        Duration::from_secs(15),
        || async {
            let caught_up = listed(&alice_there).await == Some(BTreeSet::from([first.clone()]))
                && listed(&bob_there).await == Some(BTreeSet::from([second.clone()]));
            caught_up.then_some(())
        },
    )
    .await;
    let answers: Vec<Value> = statuses(&cluster).await.into_iter().flatten().collect();
    assert_eq!(answers.len(), 3, "every replica answers: {answers:?}");
    // Ready, it had pulled every worker's latest conditions: its trend holds as many ISUs as
    // the leader's (the trend lists the ISUs that have a condition).
    let trend_size = |replica: usize| {
        let agent = agent_of(&cluster, replica);
        async move {
            let trend = agent.trend().await.json(200);
            trend
                .as_array()
                .unwrap()
                .iter()
                .map(|character| {
                    ["info", "warning", "critical"]
                        .iter()
                        .map(|level| character[*level].as_array().map_or(0, Vec::len))
                        .sum::<usize>()
                })
                .sum::<usize>()
        }
    };
    assert_eq!(trend_size(leader).await, trend_size(new_leader).await);

    // Membership: through a follower (forwarded to the leader) a replica leaves the group
    // and joins it again; bad requests get a clear 4xx.
    let leader = agreed_leader(&cluster).await;
    let (follower, other) = ((leader + 1) % 3, (leader + 2) % 3);
    let members_url = format!(
        "{}{}",
        cluster.coordinators[follower],
        shared::protocol::COORDINATOR_MEMBERS
    );
    let client = cluster.raw_client();
    let change = |body: Value| {
        client
            .post(&members_url)
            .header(shared::protocol::SECRET_HEADER, &cluster.secret)
            .json(&body)
            .send()
    };
    let removed = change(serde_json::json!({"remove": other + 1})).await.unwrap();
    assert_eq!(removed.status(), 200);
    let members = removed.json::<Value>().await.unwrap()["members"].clone();
    assert_eq!(members.as_array().unwrap().len(), 2, "{members}");
    let again = change(serde_json::json!({"remove": other + 1})).await.unwrap();
    assert_eq!(again.status(), 409, "not a member any more");
    let added = change(serde_json::json!({"add": {"id": other + 1, "url": cluster.coordinators[other]}}))
        .await
        .unwrap();
    assert_eq!(added.status(), 200);
    assert_eq!(
        added.json::<Value>().await.unwrap()["members"],
        serde_json::json!([1, 2, 3])
    );
    for bad in [
        serde_json::json!({"bogus": 1}),
        serde_json::json!({"add": {"id": 0, "url": "x"}}),
    ] {
        assert_eq!(change(bad.clone()).await.unwrap().status(), 400, "{bad}");
    }
    let without_secret = client
        .post(&members_url)
        .json(&serde_json::json!({"remove": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(without_secret.status(), 401);

    // JIA activated each ISU once; no term had two leaders.
    for uuid in [&first, &second] {
        assert_eq!(activations_of(&cluster, uuid), 1, "activations of {uuid}");
    }
    sampler.abort();
    let seen = leaders_per_term.lock().unwrap().clone();
    assert!(seen.len() >= 2, "a leader was seen in two terms at least: {seen:?}");
    assert!(
        seen.values().all(|leaders| leaders.len() == 1),
        "one leader per term: {seen:?}"
    );
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_leader_rolls_back_a_started_registration_and_publishes_an_accepted_one() {
    let rolled_back = test_uuid('c', 71);
    let published = test_uuid('d', 72);
    let (mut cluster, leader) = three_replicas(Some(format!(
        "registration-started=return({rolled_back});registration-accepted=return({published})"
    )))
    .await;
    cluster.make_known(&rolled_back);
    cluster.make_known(&published);
    let workers = cluster.workers.len();

    // The leader dies once the worker holds the ISU provisionally (before JIA hears of it);
    // nothing of it is in the log.
    let follower = (leader + 1) % 3;
    let alice = Arc::new(sign_in_with(agent_of(&cluster, follower), &cluster.signer, "alice").await);
    let registering = register_in_background(&alice, &rolled_back, "rolled back");
    cluster.wait_for_log(workers + leader, "held at a fail point").await;
    cluster.kill_node(workers + leader);
    // The follower sends it again to the next leader, which has rolled it back.
    let answer = registering.await.unwrap();
    assert_eq!(answer.status.as_u16(), 503, "{}", answer.text());
    assert_eq!(listed(&alice).await, Some(BTreeSet::new()));
    cluster.start_node(workers + leader);

    // The next leader dies after logging the ISU with its character (JIA activated it),
    // before its worker published it: the one after publishes it.
    let second_leader = agreed_leader(&cluster).await;
    let follower = (0..3).find(|replica| *replica != second_leader).unwrap();
    let bob = Arc::new(sign_in_with(agent_of(&cluster, follower), &cluster.signer, "bob").await);
    let registering = register_in_background(&bob, &published, "published");
    cluster
        .wait_for_log(workers + second_leader, "held at a fail point")
        .await;
    cluster.kill_node(workers + second_leader);
    let answer = registering.await.unwrap();
    let created = answer.json(201);
    assert_eq!(created["jia_isu_uuid"], published.as_str());
    assert_eq!(listed(&bob).await, Some(BTreeSet::from([published.clone()])));
    // Published on its worker: its conditions are readable there.
    wait_until(
        "the worker serves the published ISU",
        Duration::from_secs(10),
        || async {
            let path = format!("/api/condition/{published}?end_time=2000000000&condition_level=info,warning,critical");
            let reply = bob.try_get(&path).await.ok()?;
            (reply.status.as_u16() == 200).then_some(())
        },
    )
    .await;
    // JIA never heard of the rolled-back one and activated the other once.
    assert_eq!(
        (
            activations_of(&cluster, &rolled_back),
            activations_of(&cluster, &published)
        ),
        (0, 1)
    );
    cluster.start_node(workers + second_leader);
    agreed_leader(&cluster).await;
    cluster.assert_no_crash();
}

/// Issue 38's first nemesis finding: a leader lost the lead after JIA answered and before
/// the ISU was logged, the next leader rolled the registration back, and the conditions its
/// worker had acknowledged were lost. The fix then had the leader give the worker JIA's
/// acceptance, which left the leader's death between JIA's answer and that call (seeds
/// 8675309 and 271828: 5 and 48 acknowledged posts lost). Now the worker asks JIA itself and
/// keeps the answer before the leader hears it, and the next leader finishes the
/// registration from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_jia_accepted_is_finished_by_the_next_leader_with_its_acknowledged_posts() {
    let uuid = test_uuid('e', 73);
    // Held as soon as the leader has JIA's answer (from the worker), before the log has it.
    let (mut cluster, leader, alice, registering) =
        registration_held_at("registration-jia-answered", &uuid, "accepted").await;
    let workers = cluster.workers.len();
    post_held_condition(&cluster, &uuid, "before the leader died").await;
    cluster.kill_node(workers + leader);
    // The follower sends the registration again to the next leader, which finished it at its
    // takeover: the request is answered from that outcome.
    let answer = registering.await.unwrap();
    let created = answer.json(201);
    assert_eq!(created["jia_isu_uuid"], uuid.as_str());
    assert_eq!(created["character"], cluster.character_of(&uuid));
    assert_eq!(listed(&alice).await, Some(BTreeSet::from([uuid.clone()])));
    // The condition acknowledged before the leader died is there (beside what JIA's device
    // posted since, which comes after it).
    assert_held_condition_readable(&alice, &uuid).await;
    assert_eq!(activations_of(&cluster, &uuid), 1, "JIA was asked once");
    cluster.start_node(workers + leader);
    agreed_leader(&cluster).await;
    cluster.assert_no_crash();
}

/// Nemesis seed 4711 (10 minutes): a follower paused for 6 s stood for election as it
/// resumed, in a later term, just as JIA answered the leader's registration; the deposed
/// leader skipped the worker's acceptance, the next leader's sweep rolled the registration
/// back, and 7 conditions its worker had acknowledged were lost. Here the leader holds the
/// registration (4 s) once it has JIA's answer and is paused meanwhile until another
/// replica leads in a later term; the next leader's sweeps wait 5 s (a fail point). The
/// worker holds JIA's answer already: the deposed leader, resumed, leaves the registration
/// alone (no rollback), and the next leader finishes it.
#[tokio::test]
async fn a_leader_deposed_once_it_has_jia_s_answer_leaves_the_registration_to_the_next_one() {
    let uuid = test_uuid('e', 75);
    let mut cluster = spawn_cluster_with(ClusterOptions {
        coordinators: 3,
        fail_points: Some(format!(
            "registration-jia-answered=return({uuid}/4000);sweep-stall=return(5000)"
        )),
        ..ClusterOptions::default()
    })
    .await;
    cluster.make_known(&uuid);
    let workers = cluster.workers.len();
    let leader = agreed_leader(&cluster).await;
    let term_before = term_of(&cluster, leader).await;
    let through = (leader + 1) % 3;
    let alice = Arc::new(sign_in_with(agent_of(&cluster, through), &cluster.signer, "alice").await);
    let registering = register_in_background(&alice, &uuid, "deposed");
    cluster.wait_for_log(workers + leader, "held at a fail point").await;
    post_held_condition(&cluster, &uuid, "while JIA's answer was held").await;

    cluster.signal_node(workers + leader, "STOP");
    another_leads(&cluster, leader, term_before, false).await;
    cluster.signal_node(workers + leader, "CONT");

    // The next leader finishes the registration from the worker's copy of JIA's answer, with
    // the condition its worker acknowledged (the request itself may be answered 503: what
    // counts is its outcome).
    finished_with_its_post(&cluster, &alice, &uuid, registering, Duration::from_secs(20)).await;
    cluster.assert_no_crash();
}

/// Found in review of the worker's JIA call: a leader killed while its worker asked JIA
/// closed the connection, which dropped the worker's handler and JIA's answer with it; the
/// registration was rolled back with its device's posts after 20 s. The worker now runs the
/// call to its end whatever becomes of the caller, and the next leader finishes it.
#[tokio::test]
async fn a_leader_killed_while_its_worker_asks_jia_leaves_the_registration_to_be_finished() {
    let uuid = test_uuid('e', 79);
    let (mut cluster, leader, alice, registering) = held_before_jia(&uuid, 3000).await;
    cluster.kill_node(leader);
    // Well within the 20 s after which a registration with no answer is rolled back.
    finished_with_its_post(&cluster, &alice, &uuid, registering, Duration::from_secs(15)).await;
    cluster.start_node(leader);
    agreed_leader(&cluster).await;
    cluster.assert_no_crash();
}

/// Measured at a million ISUs (2026-12-07): after `/initialize` the leader held about
/// 290 MiB more than its followers, the generation it had taken over with (its leader
/// duties kept it for the whole leadership). Every replica ends with one generation.
#[tokio::test]
async fn after_initialize_every_replica_holds_one_generation() {
    let mut cluster = spawn_cluster_with(ClusterOptions {
        coordinators: 3,
        ..ClusterOptions::default()
    })
    .await;
    agreed_leader(&cluster).await;
    assert_eq!(cluster.initialize().await.status.as_u16(), 200);
    wait_until(
        "every replica holds one generation",
        Duration::from_secs(10),
        || async {
            let alive: Vec<Option<f64>> = ask_each_replica(&cluster, "/metrics")
                .await
                .into_iter()
                .map(|body| {
                    let text = String::from_utf8(body?.to_vec()).ok()?;
                    let line = text.lines().find(|line| {
                        line.strip_prefix("coordinator_generations_alive")
                            .is_some_and(|rest| rest.starts_with(['{', ' ']))
                    })?;
                    line.rsplit(' ').next()?.parse().ok()
                })
                .collect();
            alive.iter().all(|alive| *alive == Some(1.0)).then_some(())
        },
    )
    .await;
    cluster.assert_no_crash();
}

/// Nemesis seed 271828 (10 minutes, 2026-12-07): two ISUs had id 60 and the trend listed
/// it twice. A leader had given 60 to a registration and died while its worker held it;
/// that worker did not answer the next leader's takeover, which then gave 60 to another
/// registration, and its sweep published the first one with its own 60 once the worker
/// answered. Now a leader commits a reservation of ids before it gives any, and the next
/// one starts above it.
#[tokio::test]
async fn an_id_a_dead_leader_gave_a_registration_its_worker_holds_is_not_given_again() {
    let held = test_uuid('e', 82);
    let mut cluster = spawn_cluster_with(ClusterOptions {
        coordinators: 3,
        fail_points: Some(format!("jia-call-held=return({held}/6000)")),
        ..ClusterOptions::default()
    })
    .await;
    cluster.make_known(&held);
    let workers = cluster.workers.len();
    let held_worker = default_cell(&held, workers);
    let other = "0123456789abcdef"
        .chars()
        .map(|first| test_uuid(first, 83))
        .find(|uuid| default_cell(uuid, workers) != held_worker)
        .unwrap();
    cluster.make_known(&other);
    let leader = agreed_leader(&cluster).await;
    // Straight to the leader: no follower sends it again to the next one.
    let alice = Arc::new(sign_in_with(agent_of(&cluster, leader), &cluster.signer, "alice").await);
    let registering = {
        let (alice, held) = (alice.clone(), held.clone());
        tokio::spawn(async move { alice.try_register(&held, "held", Duration::from_secs(30)).await })
    };
    cluster.wait_for_log(held_worker, "held at a fail point").await;
    post_held_condition(&cluster, &held, "before its leader died").await;
    let term_before = term_of(&cluster, leader).await;
    // Its worker does not answer the next leader's takeover.
    cluster.signal_node(held_worker, "STOP");
    cluster.kill_node(workers + leader);
    let next = another_leads(&cluster, leader, term_before, true).await;
    let bob = sign_in_with(agent_of(&cluster, next), &cluster.signer, "bob").await;
    let other_id = bob.register(&other, "after the takeover", None).await.json(201)["id"]
        .as_i64()
        .unwrap();
    cluster.signal_node(held_worker, "CONT");
    assert!(registering.await.unwrap().is_err(), "its leader died before answering");
    let alice = sign_in_with(agent_of(&cluster, next), &cluster.signer, "alice").await;
    listed_with_its_post(&cluster, &alice, &held, Duration::from_secs(30)).await;
    let held_id = alice.isu(&held).await.json(200)["id"].as_i64().unwrap();
    assert_ne!(held_id, other_id, "two ISUs of one id");
    assert_eq!(bob.isu(&other).await.json(200)["id"].as_i64(), Some(other_id));
    cluster.start_node(workers + leader);
    agreed_leader(&cluster).await;
    cluster.assert_no_crash();
}

/// Nemesis seeds 4711 and 314159 (10 minutes, on the worker's JIA call): a worker SIGKILLed
/// while it asked JIA, after JIA had started the device and before the worker had logged
/// JIA's answer, restarted holding the registration with no answer and took the device's
/// posts; the sweep rolled the registration back after its 20 s, with them. Now the worker
/// logs that it asks before it does, and asks again when it restarts with no answer (JIA
/// answers a repeat with the same character and keeps the first device).
#[tokio::test]
async fn a_worker_killed_as_jia_answers_asks_again_once_restarted() {
    let repeats = worker_killed_while_asking_jia(test_uuid('e', 80), "jia-answer-held").await;
    assert_eq!(repeats, Some(1), "asked again after its worker died");
}

/// As above, the worker killed before JIA was asked: asked once, at the restart.
#[tokio::test]
async fn a_worker_killed_before_it_asks_jia_asks_once_restarted() {
    let repeats = worker_killed_while_asking_jia(test_uuid('e', 81), "jia-call-held").await;
    assert_eq!(repeats, None, "asked once");
}

/// Holds alice's registration of `uuid` on its (durable) worker at the fail point `point`,
/// once its device posted, kills the worker there and starts it again: the registration is
/// finished with what the device posted; how many times JIA was asked again for it.
async fn worker_killed_while_asking_jia(uuid: String, point: &str) -> Option<usize> {
    let mut cluster = spawn_cluster_with(ClusterOptions {
        coordinators: 3,
        durable: true,
        fail_points: Some(format!("{point}=return({uuid}/60000)")),
        ..ClusterOptions::default()
    })
    .await;
    cluster.make_known(&uuid);
    let workers = cluster.workers.len();
    let leader = agreed_leader(&cluster).await;
    let alice = Arc::new(sign_in_with(agent_of(&cluster, (leader + 1) % 3), &cluster.signer, "alice").await);
    let registering = register_in_background(&alice, &uuid, "asked again");
    let worker = default_cell(&uuid, workers);
    cluster.wait_for_log(worker, "held at a fail point").await;
    post_held_condition(&cluster, &uuid, "before its worker died").await;
    cluster.kill_node(worker);
    cluster.fail_points = None;
    cluster.start_node(worker);
    // Well within the 20 s after which a registration with no answer is rolled back.
    finished_with_its_post(&cluster, &alice, &uuid, registering, Duration::from_secs(15)).await;
    cluster.assert_no_crash();
    cluster.jia.repeated_activations_by_isu().get(&uuid).copied()
}

/// Three replicas whose leader is paused (SIGSTOP) while the worker asks JIA for alice's
/// registration of `uuid` (held there 8 s before JIA is asked), after the registration's
/// device posted (see [`post_held_condition`]), until the next leader awaits the
/// registration's acceptance: the cluster, the paused leader's node, alice (on a replica
/// that was a follower), and the registration's answer to come.
async fn paused_as_jia_answers(uuid: &str) -> (Cluster, usize, Arc<Agent>, tokio::task::JoinHandle<Reply>) {
    let (cluster, leader, alice, registering) = held_before_jia(uuid, 8000).await;
    let workers = cluster.workers.len();
    let term_before = term_of(&cluster, leader - workers).await;
    cluster.signal_node(leader, "STOP");
    let next = another_leads(&cluster, leader - workers, term_before, true).await;
    cluster.wait_for_log(workers + next, "awaits JIA's acceptance").await;
    (cluster, leader, alice, registering)
}

/// Three replicas and alice's registration of `uuid` (sent through a follower), held on its
/// worker `millis` before the worker asks JIA, once its device posted (see
/// [`post_held_condition`]): the cluster, the leader's node, alice, and the registration's
/// answer to come.
async fn held_before_jia(uuid: &str, millis: u64) -> (Cluster, usize, Arc<Agent>, tokio::task::JoinHandle<Reply>) {
    let cluster = spawn_cluster_with(ClusterOptions {
        coordinators: 3,
        fail_points: Some(format!("jia-call-held=return({uuid}/{millis})")),
        ..ClusterOptions::default()
    })
    .await;
    cluster.make_known(uuid);
    let workers = cluster.workers.len();
    let leader = agreed_leader(&cluster).await;
    let alice = Arc::new(sign_in_with(agent_of(&cluster, (leader + 1) % 3), &cluster.signer, "alice").await);
    let registering = register_in_background(&alice, uuid, "held before JIA");
    cluster
        .wait_for_log(default_cell(uuid, workers), "held at a fail point")
        .await;
    post_held_condition(&cluster, uuid, "before JIA was asked").await;
    (cluster, workers + leader, alice, registering)
}

/// The registration `registering` is answered 201 or 503 (what counts is its outcome), and
/// within `within` its ISU is listed with the condition [`post_held_condition`] posted, JIA
/// asked once.
async fn finished_with_its_post(
    cluster: &Cluster,
    alice: &Agent,
    uuid: &str,
    registering: tokio::task::JoinHandle<Reply>,
    within: Duration,
) {
    let answer = registering.await.unwrap();
    assert!(
        [201, 503].contains(&answer.status.as_u16()),
        "{} {}",
        answer.status,
        answer.text()
    );
    listed_with_its_post(cluster, alice, uuid, within).await;
}

/// Within `within` the ISU `uuid` is listed with the condition [`post_held_condition`]
/// posted, JIA asked once.
async fn listed_with_its_post(cluster: &Cluster, alice: &Agent, uuid: &str, within: Duration) {
    wait_listed(alice, uuid, within).await;
    assert_held_condition_readable(alice, uuid).await;
    assert_eq!(activations_of(cluster, uuid), 1, "JIA was asked once");
}

/// Nemesis seed 271828 (10 minutes): the leader was paused (6 s) while JIA answered its
/// registration, after the device's first posts; the next leader's takeover rolled the
/// registration back at once and the posts its worker had acknowledged were lost. Now the
/// sweeps leave a registration awaiting its acceptance (20 s): the worker keeps JIA's answer
/// once it comes, and the next sweep finishes the registration with it.
#[tokio::test]
async fn a_registration_whose_leader_is_paused_as_jia_answers_is_finished_once_jia_answered() {
    let uuid = test_uuid('e', 76);
    let (mut cluster, paused, alice, registering) = paused_as_jia_answers(&uuid).await;
    cluster.signal_node(paused, "CONT");
    finished_with_its_post(&cluster, &alice, &uuid, registering, Duration::from_secs(30)).await;
    cluster.assert_no_crash();
}

/// CI's leader pauses under the contest's load (2026-12-06): a client whose registration
/// timed out sent it again (a new request) while the next leader awaited the first one's
/// acceptance. The new one's provisional call met the worker's copy of the first and was
/// answered 409 at once, while the ISU read 404; the first was published once its leader
/// ran again, after the client had given up on it. Now a registration sent again waits
/// for the first one's outcome, and its 409 comes once the ISU reads 200.
#[tokio::test]
async fn a_registration_sent_again_while_the_first_awaits_its_acceptance_waits_for_its_outcome() {
    let uuid = test_uuid('e', 78);
    let (mut cluster, paused, alice, first) = paused_as_jia_answers(&uuid).await;
    let again = register_in_background(&alice, &uuid, "sent twice");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !again.is_finished(),
        "the registration sent again is answered only once the first one is over"
    );
    cluster.signal_node(paused, "CONT");

    let answer = again.await.unwrap();
    assert_eq!(answer.status.as_u16(), 409, "{}", answer.text());
    let read = alice.try_get(&format!("/api/isu/{uuid}")).await.unwrap();
    assert_eq!(
        read.status.as_u16(),
        200,
        "the ISU reads once its registration sent again is answered 409"
    );
    let answer = first.await.unwrap();
    assert!(
        [201, 503].contains(&answer.status.as_u16()),
        "{} {}",
        answer.status,
        answer.text()
    );
    assert_held_condition_readable(&alice, &uuid).await;
    assert_eq!(activations_of(&cluster, &uuid), 1, "JIA was asked once");
    cluster.assert_no_crash();
}

/// Nemesis seed 4711, run again on an earlier fix: the worker was down when its leader had
/// JIA's answer to give it, and a migration's sweep rolled the registration back with the
/// conditions the restarted worker had acknowledged. Now the worker asked JIA and logged its
/// answer before the leader heard it: a worker killed then and started again from its log
/// still holds it, the registration is answered 201 (logged), and the leader's sweep
/// publishes it once the worker answers again.
#[tokio::test]
async fn a_worker_killed_after_jia_answered_publishes_the_registration_once_back() {
    let uuid = test_uuid('e', 77);
    let mut cluster = spawn_cluster_with(ClusterOptions {
        coordinators: 3,
        durable: true,
        fail_points: Some(format!("registration-jia-answered=return({uuid}/2000)")),
        ..ClusterOptions::default()
    })
    .await;
    cluster.make_known(&uuid);
    let workers = cluster.workers.len();
    let leader = agreed_leader(&cluster).await;
    let alice = Arc::new(sign_in_with(agent_of(&cluster, leader), &cluster.signer, "alice").await);
    let registering = register_in_background(&alice, &uuid, "worker down");
    cluster.wait_for_log(workers + leader, "held at a fail point").await;
    post_held_condition(&cluster, &uuid, "before its worker died").await;
    let worker = default_cell(&uuid, workers);
    cluster.kill_node(worker);
    // Logged while its worker is down: answered 201 (the publish is the sweep's).
    let answer = registering.await.unwrap();
    assert_eq!(answer.status.as_u16(), 201, "{}", answer.text());
    cluster.start_node(worker);
    listed_with_its_post(&cluster, &alice, &uuid, Duration::from_secs(15)).await;
    cluster.assert_no_crash();
}

/// Worker `worker`'s `/healthz` answer (`None`: it did not answer).
async fn worker_health(cluster: &Cluster, worker: usize) -> Option<shared::protocol::Health> {
    let url = format!("{}{}", cluster.workers[worker], shared::protocol::HEALTH);
    cluster.internal_get(&url).await.ok()?.json().await.ok()
}

/// Makes `isu` provisional on worker `worker`, as a leader's registration would (it must
/// answer 2xx).
async fn hold_on(cluster: &Cluster, worker: usize, isu: &shared::protocol::ProvisionalIsu) {
    let url = format!("{}{}", cluster.workers[worker], shared::protocol::WORKER_PROVISIONAL);
    let answer = cluster
        .raw_client()
        .post(url)
        .header(shared::protocol::SECRET_HEADER, &cluster.secret)
        .json(isu)
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{}", answer.status());
}

/// What worker `worker` holds provisionally in `generation` (`None`: no answer).
async fn held_by(cluster: &Cluster, worker: usize, generation: u64) -> Option<Vec<shared::protocol::UnpublishedIsu>> {
    let url = format!("{}{}", cluster.workers[worker], shared::protocol::WORKER_UNPUBLISHED);
    cluster
        .raw_client()
        .post(url)
        .header(shared::protocol::SECRET_HEADER, &cluster.secret)
        .json(&serde_json::json!({ "generation": generation }))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()
}

/// A registration a worker holds provisionally that the log does not hold and that is not
/// in flight (a rollback its worker never got, a deposed leader's call) is rolled back by
/// the leader's periodic sweep, without a takeover; the UUID then registers as any other.
/// A worker that restarts from its log forgets the newest leader term: the leader's watch
/// raises it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_ends_a_registration_left_on_a_worker_without_a_takeover() {
    use shared::protocol::ProvisionalIsu;
    let mut cluster = spawn_cluster_with(ClusterOptions {
        coordinators: 3,
        durable: true,
        ..ClusterOptions::default()
    })
    .await;
    let leader = agreed_leader(&cluster).await;
    let workers = cluster.workers.len();
    let uuid = cluster.known_uuid('a', 91);
    let health = worker_health(&cluster, 0).await.unwrap();
    let term = term_of(&cluster, leader).await;
    assert_eq!(health.fence_term, term, "the leader's term on its worker");
    let generation = health.generation;
    let left = ProvisionalIsu {
        generation,
        id: 900_001,
        uuid: uuid.clone(),
        owner: "alice".into(),
        name: "left behind".into(),
        request: Some("left-behind-request".into()),
    };
    hold_on(&cluster, 0, &left).await;
    let unpublished = || held_by(&cluster, 0, generation);
    assert_eq!(unpublished().await.map(|held| held.len()), Some(1));
    // Left 20 s for an acceptance that never comes (`ACCEPTANCE_WAIT`), then ended by the
    // next sweep (every 10 s).
    wait_until(
        "the leader's sweep ends the registration left behind",
        Duration::from_secs(45),
        || async { unpublished().await.filter(Vec::is_empty).map(drop) },
    )
    .await;
    cluster
        .wait_for_log(workers + leader, "rolled back a registration left unfinished")
        .await;
    let alice = sign_in_with(agent_of(&cluster, leader), &cluster.signer, "alice").await;
    alice.register(&uuid, "chair", None).await.json(201);
    assert_eq!(listed(&alice).await, Some(BTreeSet::from([uuid.clone()])));
    assert_eq!(activations_of(&cluster, &uuid), 1);

    // Restarted from its log (same generation, nothing to reset), the worker has forgotten
    // the term until the leader's watch sees it.
    cluster.kill_node(0);
    cluster.start_node(0);
    cluster.wait_until_healthy().await;
    wait_until(
        "the leader raises the restarted worker's term",
        Duration::from_secs(5),
        || async {
            let health = worker_health(&cluster, 0).await?;
            (health.generation == generation && health.fence_term == term).then_some(())
        },
    )
    .await;
    cluster.assert_no_crash();
}

/// A registration a worker holds keeps its request id when the worker's log is rewritten
/// as a snapshot: restarted from that snapshot, the worker lists it with its request id
/// (the list a new leader's takeover and sweep end registrations from), not as an anonymous
/// provisional ISU. A lone coordinator, which never sweeps, leaves it there to be seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_restarted_from_a_snapshot_still_lists_the_registration_it_held() {
    use shared::protocol::ProvisionalIsu;
    // Worker a rewrites its log as one snapshot each time the log doubles.
    let mut cluster = spawn_cluster_with(ClusterOptions {
        durable: true,
        worker_args: ["--compact-after-mb", "0"].map(String::from).to_vec(),
        ..ClusterOptions::default()
    })
    .await;
    let generation = worker_health(&cluster, 0).await.unwrap().generation;
    let provisional = |number: u32, request: Option<&str>| ProvisionalIsu {
        generation,
        id: 900_000 + i64::from(number),
        uuid: test_uuid('a', number),
        owner: "alice".into(),
        name: format!("held {number}"),
        request: request.map(str::to_owned),
    };
    let snapshots = |cluster: &Cluster| cluster.node_log(0).matches("log snapshot written").count();
    let before = snapshots(&cluster);
    hold_on(&cluster, 0, &provisional(1, Some("held-request"))).await;
    // Anonymous provisional ISUs after it until the log is rewritten with it inside.
    let mut number = 2;
    while snapshots(&cluster) == before {
        assert!(number < 500, "no snapshot after {number} records");
        hold_on(&cluster, 0, &provisional(number, None)).await;
        number += 1;
    }

    cluster.kill_node(0);
    cluster.start_node(0);
    cluster.wait_until_healthy().await;
    let held = held_by(&cluster, 0, generation).await.unwrap();
    assert_eq!(held.len() as u32, number - 1, "{held:?}");
    let registration = held.iter().find(|isu| isu.uuid == test_uuid('a', 1)).unwrap();
    assert_eq!(registration.request.as_deref(), Some("held-request"));
    assert_eq!(registration.id, 900_001);
    assert!(held
        .iter()
        .filter(|isu| isu.uuid != registration.uuid)
        .all(|isu| isu.request.is_none()));
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_on_a_worker_absent_at_the_takeover_is_published_when_it_answers() {
    // Cell A (an even first digit): worker 0.
    let uuid = test_uuid('a', 75);
    // The leader dies once the ISU is logged with its character, before its worker
    // publishes it, and that worker is paused through the takeover.
    let (mut cluster, leader, alice, registering) = registration_held_at("registration-accepted", &uuid, "late").await;
    let workers = cluster.workers.len();
    cluster.signal_node(0, "STOP");
    cluster.kill_node(workers + leader);
    let new_leader = agreed_leader(&cluster).await;
    // The follower sends the registration again to the next leader, which answers it from
    // the log (its ISU is committed) though its worker does not answer.
    let created = registering.await.unwrap().json(201);
    assert_eq!(created["jia_isu_uuid"], uuid.as_str());
    assert_eq!(listed(&alice).await, Some(BTreeSet::from([uuid.clone()])));

    // The worker answers again: the leader's watch publishes the ISU there.
    cluster.signal_node(0, "CONT");
    wait_until("the worker serves the ISU", Duration::from_secs(10), || async {
        let path = format!("/api/condition/{uuid}?end_time=2000000000&condition_level=info,warning,critical");
        let reply = alice.try_get(&path).await.ok()?;
        (reply.status.as_u16() == 200).then_some(())
    })
    .await;
    // The watch ended it.
    cluster
        .wait_for_log(
            workers + new_leader,
            "ended the registrations a worker held provisionally",
        )
        .await;
    assert_eq!(activations_of(&cluster, &uuid), 1);
    cluster.start_node(workers + leader);
    agreed_leader(&cluster).await;
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_replaced_fenced_off_the_workers_and_follows_once_resumed() {
    let held = test_uuid('e', 73);
    let mut cluster = spawn_cluster_with(ClusterOptions {
        coordinators: 3,
        fail_points: Some(format!("registration-claimed=return({held}/2000)")),
        ..ClusterOptions::default()
    })
    .await;
    cluster.make_known(&held);
    let (leaders_per_term, sampler) = sample_leaders(&cluster);
    let workers = cluster.workers.len();
    let leader = agreed_leader(&cluster).await;
    let term_before = term_of(&cluster, leader).await;

    // A registration sent to the leader is held (2 s) before its worker hears of it, and the
    // leader is paused there: it still believes it leads when it wakes up.
    let alice = Arc::new(sign_in_with(agent_of(&cluster, leader), &cluster.signer, "alice").await);
    let registering = register_in_background(&alice, &held, "held");
    cluster.wait_for_log(workers + leader, "held at a fail point").await;
    cluster.signal_node(workers + leader, "STOP");
    let paused_at = Instant::now();

    // The other two elect a leader in a later term, which calls the workers with its term
    // (the held registration is nowhere yet: nothing to end).
    let new_leader = another_leads(&cluster, leader, term_before, true).await;
    eprintln!("a new leader was ready {:?} after the pause", paused_at.elapsed());
    let bob = sign_in_with(agent_of(&cluster, new_leader), &cluster.signer, "bob").await;
    let second = cluster.known_uuid('f', 74);
    assert_eq!(bob.register(&second, "second", None).await.status.as_u16(), 201);

    // The old leader wakes up and goes on with its registration under its old term: the
    // worker refuses it, and the client is told it failed.
    cluster.signal_node(workers + leader, "CONT");
    let answer = registering.await.unwrap();
    assert_eq!(answer.status.as_u16(), 503, "{}", answer.text());
    assert!(
        cluster
            .jia
            .activations()
            .iter()
            .all(|activation| activation.isu_uuid != held),
        "JIA never heard of the held registration"
    );
    let mut fenced = 0.0;
    for base in cluster.workers.clone() {
        let metrics = cluster
            .internal_get(&format!("{base}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        fenced += metric_sum(&metrics, "worker_fenced_calls_total", &[]);
    }
    assert!(fenced >= 1.0, "the old leader's call was refused by its worker");

    // It follows the new leader and reaches the same state; it serves again.
    wait_until(
        "the resumed replica follows with the same state",
        Duration::from_secs(15),
        || async {
            let answers: Vec<Value> = statuses(&cluster).await.into_iter().flatten().collect();
            let leaders = answers.iter().filter(|answer| answer["role"] == "leader").count();
            let same = answers.windows(2).all(|pair| {
                pair[0]["state_hash"] == pair[1]["state_hash"] && pair[0]["applied_index"] == pair[1]["applied_index"]
            });
            (answers.len() == 3 && leaders == 1 && same).then_some(())
        },
    )
    .await;
    let bob_there = sign_in_with(agent_of(&cluster, leader), &cluster.signer, "bob").await;
    assert_eq!(listed(&bob_there).await, Some(BTreeSet::from([second.clone()])));
    assert_eq!(listed(&alice).await, Some(BTreeSet::new()));
    sampler.abort();
    let seen = leaders_per_term.lock().unwrap().clone();
    assert!(
        seen.values().all(|leaders| leaders.len() == 1),
        "one leader per term: {seen:?}"
    );
    cluster.assert_no_crash();
}

/// The bytes of every file directly in a replica's data directory (its raft log and
/// snapshot; not its icons).
fn log_bytes(cluster: &Cluster, node: usize) -> u64 {
    std::fs::read_dir(cluster.data_dir(node))
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap())
        .filter(|metadata| metadata.is_file())
        .map(|metadata| metadata.len())
        .sum()
}

/// The icon `name` (SHA-256 hex) as replica `replica` holds it in its own store
/// (`GET /internal/icons/{hash}`: 404 when absent, never fetched from a peer).
async fn held_icon(cluster: &Cluster, replica: usize, name: &str) -> Option<Vec<u8>> {
    let reply = cluster
        .raw_client()
        .get(format!(
            "{}{}/{name}",
            cluster.coordinators[replica],
            shared::protocol::COORDINATOR_ICONS
        ))
        .header(shared::protocol::SECRET_HEADER, &cluster.secret)
        .send()
        .await
        .ok()?;
    if reply.status() != 200 {
        return None;
    }
    Some(reply.bytes().await.ok()?.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn icons_stay_out_of_the_log_on_two_replicas_at_least_and_one_that_missed_an_icon_fetches_it() {
    use sha2::Digest as _;
    // Icons no ISU names are swept every second once 5 s old (see the end).
    let mut cluster = spawn_cluster_with(ClusterOptions {
        coordinators: 3,
        coordinator_args: ["--icon-sweep-every-secs", "1", "--icon-grace-secs", "5"]
            .map(String::from)
            .to_vec(),
        ..ClusterOptions::default()
    })
    .await;
    let leader = agreed_leader(&cluster).await;
    let workers = cluster.workers.len();
    let (follower, down) = ((leader + 1) % 3, (leader + 2) % 3);
    cluster.kill_node(workers + down);

    // A registration with a 200 kB icon, through the follower, while one replica is down:
    // the raft logs grow by its record, not by its icon.
    let icon: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let name = hex::encode(sha2::Sha256::digest(&icon));
    let alice = sign_in_with(agent_of(&cluster, follower), &cluster.signer, "alice").await;
    let uuid = cluster.known_uuid('a', 81);
    let before = [leader, follower].map(|replica| log_bytes(&cluster, workers + replica));
    alice.register(&uuid, "iconic", Some(&icon)).await.json(201);
    let after = [leader, follower].map(|replica| log_bytes(&cluster, workers + replica));
    for (before, after) in before.into_iter().zip(after) {
        assert!(
            after - before < 20_000,
            "the registration grew a raft log by {} bytes: the icon is in it",
            after - before
        );
    }

    // Stored by its hash on both live replicas.
    for replica in [leader, follower] {
        assert_eq!(
            held_icon(&cluster, replica, &name).await,
            Some(icon.clone()),
            "replica {replica}"
        );
    }
    // The replica that was down applies the record, fetches the icon from a peer, and every
    // replica serves the same bytes.
    cluster.start_node(workers + down);
    for replica in 0..3 {
        let reader = sign_in_with(agent_of(&cluster, replica), &cluster.signer, "alice").await;
        let served = wait_until("the replica serves the icon", Duration::from_secs(15), || async {
            let reply = reader.try_get(&format!("/api/isu/{uuid}/icon")).await.ok()?;
            (reply.status.as_u16() == 200).then_some(reply.body)
        })
        .await;
        assert!(served[..] == icon[..], "replica {replica} serves other bytes");
    }
    wait_until(
        "the replica that was down keeps the icon",
        Duration::from_secs(10),
        || async { (held_icon(&cluster, down, &name).await? == icon).then_some(()) },
    )
    .await;
    // Each replica says it holds the ISU with its owner and its icon's hash (what the bench
    // compares with the registrations it got a 201 for).
    let expected = serde_json::json!([{"uuid": uuid, "owner": "alice", "icon_sha256": name}]);
    for base in &cluster.coordinators {
        let held = cluster
            .internal_get(&format!("{base}{}", shared::protocol::COORDINATOR_REPLICA_ISUS))
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        assert_eq!(held, expected, "{base}");
    }

    // The icon routes refuse bad input with a short message.
    let client = cluster.raw_client();
    let route = |hash: &str| {
        format!(
            "{}{}/{hash}",
            cluster.coordinators[follower],
            shared::protocol::COORDINATOR_ICONS
        )
    };
    let put = |hash: String, body: &'static [u8], secret: Option<&str>| {
        let mut request = client.put(route(&hash)).body(body);
        if let Some(secret) = secret {
            request = request.header(shared::protocol::SECRET_HEADER, secret);
        }
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let secret = Some(cluster.secret.as_str());
    assert_eq!(
        put(name.clone(), b"other bytes", secret).await,
        (400, "the icon's bytes do not hash to its name".to_owned())
    );
    assert_eq!(put("xyz".into(), b"x", secret).await.0, 400);
    assert_eq!(put(name.clone(), b"x", None).await.0, 401);
    let unknown = client
        .get(route(&"0".repeat(64)))
        .header(shared::protocol::SECRET_HEADER, &cluster.secret)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);

    // An icon that no ISU names (stored, and its registration never committed) is swept
    // from every replica after the grace period; the named one stays on all three.
    let orphan = b"an icon whose registration failed".as_slice();
    let orphan_name = hex::encode(sha2::Sha256::digest(orphan));
    for base in &cluster.coordinators {
        let stored = client
            .put(format!("{base}{}/{orphan_name}", shared::protocol::COORDINATOR_ICONS))
            .header(shared::protocol::SECRET_HEADER, &cluster.secret)
            .body(orphan)
            .send()
            .await
            .unwrap();
        assert!(stored.status().is_success(), "{base}: {}", stored.status());
    }
    for replica in 0..3 {
        assert_eq!(
            held_icon(&cluster, replica, &orphan_name).await.as_deref(),
            Some(orphan)
        );
    }
    wait_until(
        "every replica sweeps the orphan icon",
        Duration::from_secs(20),
        || async {
            for replica in 0..3 {
                if held_icon(&cluster, replica, &orphan_name).await.is_some() {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    for replica in 0..3 {
        assert_eq!(
            held_icon(&cluster, replica, &name).await,
            Some(icon.clone()),
            "replica {replica}"
        );
    }
    // A replica started again reads the named icon back from its own store, and not the
    // swept one.
    cluster.kill_node(workers + follower);
    cluster.start_node(workers + follower);
    let back = wait_until("the restarted replica answers", Duration::from_secs(15), || async {
        let reply = cluster
            .raw_client()
            .get(format!("{}/healthz", cluster.coordinators[follower]))
            .send()
            .await
            .ok()?;
        Some(reply.status())
    })
    .await;
    eprintln!("restarted replica answers its health check: {back}");
    assert_eq!(held_icon(&cluster, follower, &name).await, Some(icon.clone()));
    assert_eq!(held_icon(&cluster, follower, &orphan_name).await, None);
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_takes_writes_for_the_cells_that_answer_while_a_worker_is_down() {
    let (mut cluster, leader) = three_replicas(None).await;
    let workers = cluster.workers.len();
    // Worker b (odd first digits) goes down, then the leader.
    cluster.kill_node(1);
    cluster.kill_node(workers + leader);
    let survivor = (leader + 1) % 3;
    let alice = sign_in_with(agent_of(&cluster, survivor), &cluster.signer, "alice").await;
    let in_cell_a = cluster.known_uuid('a', 91);
    let registered_after = Instant::now();
    wait_until(
        "the next leader registers an ISU of cell a",
        Duration::from_secs(15),
        || async {
            let reply = alice.register(&in_cell_a, "cell a", None).await;
            (reply.status.as_u16() == 201).then_some(())
        },
    )
    .await;
    eprintln!(
        "registered in cell a {:?} after the leader's death, worker b down",
        registered_after.elapsed()
    );
    // Cell b's registrations fail cleanly meanwhile, and work once its worker is back (the
    // new leader's watch resets it).
    let in_cell_b = cluster.known_uuid('b', 92);
    assert!(alice
        .register(&in_cell_b, "cell b", None)
        .await
        .status
        .is_server_error());
    cluster.start_node(1);
    wait_until(
        "an ISU of cell b registers once its worker is back",
        Duration::from_secs(20),
        || async {
            let reply = alice.register(&in_cell_b, "cell b", None).await;
            (reply.status.as_u16() == 201).then_some(())
        },
    )
    .await;
    assert_eq!(
        listed(&alice).await,
        Some(BTreeSet::from([in_cell_a.clone(), in_cell_b.clone()]))
    );
    cluster.start_node(workers + leader);
    cluster.assert_no_crash();
}

/// `route`'s requests each replica has answered (0 from one that does not answer within a
/// second: a stopped one).
async fn served(cluster: &Cluster, route: &str) -> Vec<f64> {
    let label = format!("route=\"{route}\"");
    let mut counts = Vec::new();
    for body in ask_each_replica(cluster, "/metrics").await {
        let metrics = body
            .map(|body| String::from_utf8_lossy(&body).into_owned())
            .unwrap_or_default();
        counts.push(metric_sum(&metrics, "http_requests_total", &[&label]));
    }
    counts
}

/// The replicas whose count grew from `before` to `after`, and by how much.
fn grown(before: &[f64], after: &[f64]) -> Vec<(usize, f64)> {
    (0..before.len())
        .filter(|replica| after[*replica] > before[*replica])
        .map(|replica| (replica, after[replica] - before[replica]))
        .collect()
}

/// `count` trend reads through nginx without a session, each its own connection; how many
/// answered 200 within a second.
async fn trend_through(public: &str, count: usize) -> usize {
    let mut answered = 0;
    for _ in 0..count {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let response = client
            .get(format!("{public}/api/trend"))
            .timeout(Duration::from_secs(1))
            .send()
            .await;
        answered += usize::from(response.is_ok_and(|response| response.status() == 200));
    }
    answered
}

/// The replicas that answered `count` trend reads through nginx, and how many each; every
/// read answered 200 within a second.
async fn trend_reads_served_by(cluster: &Cluster, public: &str, count: usize) -> Vec<(usize, f64)> {
    let before = served(cluster, "/api/trend").await;
    assert_eq!(
        trend_through(public, count).await,
        count,
        "every read answered within a second"
    );
    grown(&before, &served(cluster, "/api/trend").await)
}

/// The replicas that answered `count` `GET /api/user/me` of `agent`, and how many each;
/// every one answered 200.
async fn me_served_by(cluster: &Cluster, agent: &Agent, count: usize) -> Vec<(usize, f64)> {
    let before = served(cluster, "/api/user/me").await;
    for _ in 0..count {
        agent.me().await.json(200);
    }
    grown(&before, &served(cluster, "/api/user/me").await)
}

/// Three replicas (and the leader's index) behind the project's public nginx: the front
/// end's directory (kept while the test runs), nginx, and its base URL.
async fn three_replicas_behind_nginx(nginx: &std::path::Path) -> (Cluster, usize, ScratchDir, Nginx, String) {
    let (cluster, leader) = three_replicas(None).await;
    let web = fixture_front_end();
    let (server, public) = public_nginx(&cluster, nginx, &web.path).await;
    (cluster, leader, web, server, public)
}

/// The follower nginx sends the public reads to, once it has heard from every replica (every
/// one of 10 reads answered there).
async fn preferred_follower(cluster: &Cluster, public: &str, leader: usize) -> usize {
    wait_until(
        "reads without a session reach one follower only",
        Duration::from_secs(10),
        || async {
            let before = served(cluster, "/api/trend").await;
            (trend_through(public, 10).await == 10).then_some(())?;
            let after = served(cluster, "/api/trend").await;
            match grown(&before, &after)[..] {
                [(replica, _)] if replica != leader => Some(replica),
                _ => None,
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_sends_every_client_to_one_follower_and_skips_a_stopped_replica() {
    let Some(nginx) = nginx_or_skip() else { return };
    let (mut cluster, leader, _web, mut server, public) = three_replicas_behind_nginx(&nginx).await;
    let workers = cluster.workers.len();

    // Once nginx has heard from every replica, the public requests go to one follower:
    // clients without a session and signed-in ones alike.
    let follower = preferred_follower(&cluster, &public, leader).await;
    assert_eq!(
        trend_reads_served_by(&cluster, &public, 20).await,
        vec![(follower, 20.0)]
    );
    let alice = sign_in_with(Agent::new(Routes::Public(public.clone())), &cluster.signer, "alice").await;
    assert_eq!(me_served_by(&cluster, &alice, 10).await, vec![(follower, 10.0)]);

    // A registration (the list and the registration share a location: nginx sends the POST
    // to its own, with a write's bound and retries) is listed at once.
    let uuid = cluster.known_uuid('a', 1);
    alice.register(&uuid, "nginx", None).await.json(201);
    let listed = alice.isu_list().await.json(200);
    let uuids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|isu| isu["jia_isu_uuid"].as_str())
        .collect();
    assert_eq!(uuids, vec![uuid.as_str()], "{listed}");

    // That follower hangs with its sockets open. A read sent to it at once (nginx has not
    // noticed yet: that takes two probes timing out in a row) waits half a second for an
    // answer and goes to another replica, answered within the client's second all the same.
    let before = served(&cluster, "/api/trend").await;
    cluster.signal_node(workers + follower, "STOP");
    let stopped_at = Instant::now();
    assert_eq!(trend_through(&public, 1).await, 1, "a read held by the stopped replica");
    let waited = stopped_at.elapsed();
    eprintln!("a read sent to the stopped replica answered after {waited:?}");
    if waited < Duration::from_millis(400) {
        // nginx writes its access log every 2 s: where the read went (`upstream:`).
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let access = std::fs::read_to_string(&server.access_log).unwrap_or_default();
        let trend_reads: Vec<&str> = access.lines().filter(|line| line.contains("/api/trend")).collect();
        panic!(
            "the read went to the stopped replica first: answered after {waited:?}; replicas {:?}, stopped {}; nginx's probes:\n{}\nthe last trend reads nginx logged:\n{}",
            cluster.coordinators,
            cluster.coordinators[follower],
            std::fs::read_to_string(&server.error_log).unwrap_or_default(),
            trend_reads[trend_reads.len().saturating_sub(3)..].join("\n")
        );
    }
    let after = served(&cluster, "/api/trend").await;
    let others: f64 = (0..3)
        .filter(|replica| *replica != follower)
        .map(|replica| after[replica] - before[replica])
        .sum();
    assert_eq!(others, 1.0, "answered by another replica: {before:?} -> {after:?}");

    // nginx's probe finds it silent and sends every client to the other follower, not the
    // leader, each read answered within a second.
    let other = (0..3)
        .find(|replica| *replica != leader && *replica != follower)
        .unwrap();
    wait_until("reads skip the stopped replica", Duration::from_secs(5), || async {
        (trend_through(&public, 1).await == 1).then_some(())
    })
    .await;
    eprintln!("reads answered again {:?} after the stop", stopped_at.elapsed());
    assert_eq!(
        trend_reads_served_by(&cluster, &public, 20).await,
        vec![(other, 20.0)],
        "the other follower"
    );
    assert_eq!(me_served_by(&cluster, &alice, 10).await, vec![(other, 10.0)]);

    // The stopped follower resumes and is ready again; the clients stay where they are
    // (each move may show a client a trend a push interval older).
    cluster.signal_node(workers + follower, "CONT");
    wait_until("the resumed follower is ready", Duration::from_secs(10), || async {
        (health_of(&cluster, follower).await == Some((200, true))).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        trend_reads_served_by(&cluster, &public, 10).await,
        vec![(other, 10.0)],
        "still the other follower"
    );
    server.assert_running();
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_late_probe_of_the_preferred_replica_moves_no_client() {
    let Some(nginx) = nginx_or_skip() else { return };
    let (mut cluster, leader, _web, mut server, public) = three_replicas_behind_nginx(&nginx).await;
    let workers = cluster.workers.len();
    let follower = preferred_follower(&cluster, &public, leader).await;
    // nginx numbers the replicas from 1, in the configured order.
    let late = format!(
        "replica {} ({}) is late",
        follower + 1,
        cluster.coordinators[follower].trim_start_matches("http://")
    );

    // The follower stops for 400 ms: a probe sent in the first 150 ms of the stop is
    // answered after more than its 250 ms (late), the next one, 250 ms later, in time. It
    // stops again until one probe was late.
    let mut stops: u64 = 0;
    loop {
        let logged_before = std::fs::metadata(&server.error_log).map_or(0, |log| log.len() as usize);
        // Each stop 100 ms later on the probes' 250-ms grid than the one before: of any
        // three stops in a row, one at least has a probe sent in its first 150 ms.
        tokio::time::sleep(Duration::from_millis(stops * 100 % 250)).await;
        cluster.signal_node(workers + follower, "STOP");
        tokio::time::sleep(Duration::from_millis(400)).await;
        cluster.signal_node(workers + follower, "CONT");
        stops += 1;
        // Two rounds of probes after the resume.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let log = std::fs::read_to_string(&server.error_log).unwrap_or_default();
        let logged = &log[logged_before..];
        assert!(
            !logged.contains("clients go to"),
            "stop {stops}: nginx moved the clients off a replica stopped for 400 ms:\n{logged}"
        );
        if logged.contains(&late) {
            break;
        }
        assert!(stops < 12, "no probe was late in {stops} stops of 400 ms:\n{log}");
    }
    eprintln!("a probe of the preferred replica was late at stop {stops}; its clients stayed");
    assert_eq!(
        trend_reads_served_by(&cluster, &public, 10).await,
        vec![(follower, 10.0)],
        "the clients stay on the replica whose probe was late once"
    );
    server.assert_running();
    cluster.assert_no_crash();
}

/// `/healthz` of replica `replica`: its status, and whether it says it is ready.
async fn health_of(cluster: &Cluster, replica: usize) -> Option<(u16, bool)> {
    let reply = cluster
        .raw_client()
        .get(format!("{}/healthz", cluster.coordinators[replica]))
        .send()
        .await
        .ok()?;
    let status = reply.status().as_u16();
    let body: Value = reply.json().await.ok()?;
    Some((status, body["ready"].as_bool()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_resumed_after_a_stop_serves_again_once_it_has_pulled_the_latest_conditions() {
    let (mut cluster, leader) = three_replicas(None).await;
    let workers = cluster.workers.len();
    let follower = (leader + 1) % 3;
    wait_until("the follower is ready", Duration::from_secs(10), || async {
        (health_of(&cluster, follower).await? == (200, true)).then_some(())
    })
    .await;

    // Stopped longer than a stall (1 s), while a device posts: the workers' pushes to it fail.
    let isu = &dataset().isus[0];
    cluster.signal_node(workers + follower, "STOP");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let posted = VIRTUAL_START + 500_000;
    assert_eq!(
        cluster
            .post_conditions(
                &isu.uuid,
                &[sent(
                    posted,
                    true,
                    "is_dirty=true,is_overweight=false,is_broken=false",
                    "paused"
                )]
            )
            .await
            .status
            .as_u16(),
        202
    );
    tokio::time::sleep(Duration::from_millis(1_400)).await;
    cluster.signal_node(workers + follower, "CONT");
    let resumed = Instant::now();

    // At once it says it is not ready (nginx sends its clients elsewhere), until it has
    // pulled the workers' latest conditions and waited for their pushes to resume.
    assert_eq!(health_of(&cluster, follower).await, Some((503, false)));
    wait_until("the resumed follower serves again", Duration::from_secs(10), || async {
        (health_of(&cluster, follower).await? == (200, true)).then_some(())
    })
    .await;
    let took = resumed.elapsed();
    eprintln!("the resumed follower served again after {took:?}");
    assert!(took >= Duration::from_secs(1), "ready again after {took:?}: no pull");
    // From its own state: the condition posted while it was stopped.
    // The dataset's first ISU is isucon1's.
    let owner = sign_in_with(agent_of(&cluster, follower), &cluster.signer, "isucon1").await;
    let list = owner.isu_list().await.json(200);
    let item = list
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["jia_isu_uuid"] == isu.uuid.as_str())
        .cloned()
        .unwrap();
    assert_eq!(item["latest_isu_condition"]["timestamp"], posted);
    cluster.assert_no_crash();
}
