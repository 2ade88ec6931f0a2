//! Cluster integration tests: the real coordinator and worker binaries as child
//! processes on 127.0.0.1, a JIA simulator from the bench crate in-process, and
//! the public API driven over HTTP exactly as browsers, the bench and devices do.
//! One test also goes through a real nginx rendered from the project's template.
//!
//! Run with `cargo build --workspace --bins && cargo test -p coordinator --test cluster`
//! (the worker binary is not built by `cargo test -p coordinator`).

#[path = "cluster/cells.rs"]
mod cells;
#[path = "cluster/durability.rs"]
mod durability;
#[path = "cluster/ingest.rs"]
mod ingest;
#[path = "cluster/recovery.rs"]
mod recovery;
#[path = "cluster/router.rs"]
mod router;
#[path = "cluster/security.rs"]
mod security;
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bench::model::expected_graph_data;
use jia_sim::jwt::{InvalidJwt, MALFORMED_TOKEN};
use serde_json::{json, Value};
use shared::dataset::generated::{ICONS, VIRTUAL_START};
use shared::dataset::DEFAULT_ICON;
use support::*;

/// The unknown UUID the official bench registers (its JIA answers 404).
const UNKNOWN_AT_JIA: &str = "9e5c1109-beff-4598-b8f1-658d1994d55f";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_answers_rust_and_rejects_undecodable_json() {
    let cluster = spawn_cluster().await;
    let reply = cluster.initialize().await;
    assert_eq!(reply.json(200), json!({"language": "rust"}));

    let anonymous = cluster.agent();
    for body in ["{", "not json", r#"{"jia_service_url": 5}"#, "[1, 2]"] {
        anonymous
            .post_json("/initialize", body)
            .await
            .assert_error(400, BAD_REQUEST_BODY);
    }
    // A refused initialize changed nothing: JIA is still reachable for registrations.
    let alice = cluster.sign_in("alice").await;
    let uuid = cluster.known_uuid('0', 1);
    let created = alice.register(&uuid, "椅子", None).await.json(201);
    assert_eq!(created["id"], 29);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_resets_users_sessions_isus_and_ids() {
    let cluster = spawn_cluster().await;
    let alice = cluster.sign_in("alice").await;
    let isucon1 = cluster.sign_in("isucon1").await;
    let even = cluster.known_uuid('2', 1);
    let odd = cluster.known_uuid('3', 2);
    assert_eq!(alice.register(&even, "alice", None).await.json(201)["id"], 29);
    assert_eq!(isucon1.register(&odd, "isucon1", None).await.json(201)["id"], 30);
    assert_eq!(alice.me().await.json(200), json!({"jia_user_id": "alice"}));

    let reply = cluster.initialize().await;
    assert_eq!(reply.json(200), json!({"language": "rust"}));

    // alice did not exist before the first sign-in: her old cookie is worthless now.
    alice.me().await.assert_error(401, NOT_SIGNED_IN);
    alice.isu_list().await.assert_error(401, NOT_SIGNED_IN);
    alice
        .conditions(&even, &format!("end_time={FAR_FUTURE}&condition_level={ALL_LEVELS}"))
        .await
        .assert_error(401, NOT_SIGNED_IN);
    // isucon1 exists in the dataset, so the session stays; the ISU registered since is gone.
    assert_eq!(isucon1.isu_list().await.json(200), expected_isu_list("isucon1"));
    isucon1.isu(&odd).await.assert_error(404, NOT_FOUND_ISU);
    isucon1.icon(&odd).await.assert_error(404, NOT_FOUND_ISU);

    let alice = cluster.sign_in("alice").await;
    assert_eq!(alice.isu_list().await.json(200), json!([]));
    // Ids restart after the 28 initial ISUs, and the UUIDs are free again.
    let fresh = cluster.known_uuid('4', 3);
    assert_eq!(alice.register(&fresh, "fresh", None).await.json(201)["id"], 29);
    assert_eq!(alice.register(&even, "again", None).await.json(201)["id"], 30);
    assert_eq!(isucon1.register(&odd, "again", None).await.json(201)["id"], 31);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_takes_bare_and_bearer_tokens_and_refuses_invalid_ones() {
    let cluster = spawn_cluster().await;
    let token = cluster.signer.sign("isucon1");

    let bench_agent = cluster.agent();
    let reply = bench_agent.auth(Some(&token)).await;
    reply.assert_empty(200);
    assert!(
        reply.set_cookies.iter().any(|cookie| !cookie.contains("Max-Age=0")),
        "{:?}",
        reply.set_cookies
    );
    assert_eq!(bench_agent.me().await.json(200), json!({"jia_user_id": "isucon1"}));

    let browser = cluster.agent();
    browser.auth(Some(&format!("Bearer {token}"))).await.assert_empty(200);
    assert_eq!(browser.me().await.json(200), json!({"jia_user_id": "isucon1"}));

    // Signing in is signing up; a second sign-in replaces the identity of the cookie.
    bench_agent
        .auth(Some(&cluster.signer.sign("newcomer")))
        .await
        .assert_empty(200);
    assert_eq!(bench_agent.me().await.json(200), json!({"jia_user_id": "newcomer"}));
    bench_agent.auth(Some(&token)).await.assert_empty(200);
    assert_eq!(bench_agent.me().await.json(200), json!({"jia_user_id": "isucon1"}));

    for case in InvalidJwt::ALL {
        let agent = cluster.agent();
        let token = cluster.signer.invalid_token(case, "isucon1");
        let reply = agent.auth(token.as_deref()).await;
        let (status, body) = if case.expected_status() == 403 {
            (403, "forbidden")
        } else {
            (400, "invalid JWT payload")
        };
        assert_eq!(
            (case.expected_status(), case.expected_body()),
            (status, body),
            "{case:?}"
        );
        reply.assert_error(status, body);
        assert!(reply.set_cookies.is_empty(), "{case:?} set a cookie");
        agent.me().await.assert_error(401, NOT_SIGNED_IN);
        if let Some(token) = token {
            agent
                .auth(Some(&format!("Bearer {token}")))
                .await
                .assert_error(status, body);
        }
    }
    let agent = cluster.agent();
    assert_eq!(MALFORMED_TOKEN, "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.");
    agent
        .auth(Some("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."))
        .await
        .assert_error(403, "forbidden");
    agent.auth(Some("")).await.assert_error(403, "forbidden");
    agent
        .auth(Some(&format!("Bearer Bearer {token}")))
        .await
        .assert_error(403, "forbidden");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signout_ends_only_its_session_and_session_routes_need_a_cookie() {
    let mut cluster = spawn_cluster().await;
    let first = cluster.sign_in("isucon1").await;
    let second = cluster.sign_in("isucon1").await;
    first.signout().await.assert_empty(200);
    first.me().await.assert_error(401, NOT_SIGNED_IN);
    first.signout().await.assert_error(401, NOT_SIGNED_IN);
    first.isu_list().await.assert_error(401, NOT_SIGNED_IN);
    assert_eq!(second.me().await.json(200), json!({"jia_user_id": "isucon1"}));
    assert_eq!(second.isu_list().await.json(200), expected_isu_list("isucon1"));

    // isucon1's ISUs 1 (odd: worker B) and 2 (even: worker A).
    let owned: Vec<String> = dataset_isus_of("isucon1")
        .iter()
        .filter(|isu| isu.id <= 2)
        .map(|isu| isu.uuid.clone())
        .collect();
    assert_eq!(
        owned.iter().map(|uuid| shard_index(uuid)).collect::<BTreeSet<_>>(),
        BTreeSet::from([0, 1])
    );
    let anonymous = cluster.agent();
    anonymous.me().await.assert_error(401, NOT_SIGNED_IN);
    anonymous.signout().await.assert_error(401, NOT_SIGNED_IN);
    anonymous.isu_list().await.assert_error(401, NOT_SIGNED_IN);
    let unregistered = cluster.known_uuid('5', 1);
    anonymous
        .register(&unregistered, "anonymous", Some(ICONS[0]))
        .await
        .assert_error(401, NOT_SIGNED_IN);
    assert!(
        cluster.jia.activations().is_empty(),
        "JIA was called for an anonymous registration"
    );
    for uuid in &owned {
        for path in [
            format!("/api/isu/{uuid}"),
            format!("/api/isu/{uuid}/icon"),
            format!("/api/isu/{uuid}/graph?datetime={VIRTUAL_START}"),
            // 401 comes before parameter validation.
            format!("/api/isu/{uuid}/graph"),
            format!("/api/isu/{uuid}/graph?datetime=datetime"),
            format!("/api/condition/{uuid}?end_time={FAR_FUTURE}&condition_level={ALL_LEVELS}"),
            format!("/api/condition/{uuid}"),
            format!("/api/condition/{uuid}?end_time=end_time&condition_level=info"),
        ] {
            anonymous.get(&path).await.assert_error(401, NOT_SIGNED_IN);
            first.get(&path).await.assert_error(401, NOT_SIGNED_IN);
        }
        // The coordinator's cookie opens the workers' routes too.
        assert_eq!(second.condition_items(uuid, FAR_FUTURE).await.len(), 20);
    }
    assert_eq!(second.isu_list().await.json(200), expected_isu_list("isucon1"));
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isu_lists_are_empty_for_new_users_and_match_the_dataset_for_initial_users() {
    let cluster = spawn_cluster().await;
    for user in ["isucon", "someone_new"] {
        let agent = cluster.sign_in(user).await;
        let reply = agent.isu_list().await;
        assert_eq!(reply.json(200), json!([]), "{user}");
    }
    let isucon1 = cluster.sign_in("isucon1").await;
    let list = isucon1.isu_list().await.json(200);
    assert_eq!(list.as_array().map(Vec::len), Some(5));
    assert_eq!(list, expected_isu_list("isucon1"));
    let isucon2 = cluster.sign_in("isucon2").await;
    assert_eq!(isucon2.isu_list().await.json(200), expected_isu_list("isucon2"));

    for isu in dataset_isus_of("isucon1") {
        assert_eq!(
            isucon1.isu(&isu.uuid).await.json(200),
            json!({"id": isu.id, "jia_isu_uuid": isu.uuid, "name": isu.name, "character": isu.character})
        );
        let icon = isucon1.icon(&isu.uuid).await;
        assert_eq!(icon.status.as_u16(), 200);
        let expected: &[u8] = isu.image.as_deref().unwrap_or(DEFAULT_ICON);
        assert!(icon.body == expected, "icon of ISU {} differs", isu.id);
        isucon2.isu(&isu.uuid).await.assert_error(404, NOT_FOUND_ISU);
        isucon2.icon(&isu.uuid).await.assert_error(404, NOT_FOUND_ISU);
    }
    // ISU 7 has no image in the dataset: it shows the default icon.
    let default_icon_isu = dataset().isus.iter().find(|isu| isu.image.is_none()).unwrap();
    let owner = cluster.sign_in(&default_icon_isu.owner).await;
    assert!(owner.icon(&default_icon_isu.uuid).await.body == DEFAULT_ICON);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_on_both_shards_icons_duplicates_and_jia_refusals() {
    let cluster = spawn_cluster().await;
    let alice = cluster.sign_in("alice").await;
    let bob = cluster.sign_in("bob").await;
    let even = cluster.known_uuid('a', 1);
    let odd = cluster.known_uuid('b', 2);
    let image = ICONS[3];
    let mut registered: Vec<(String, String, i64)> = Vec::new();

    let created = alice.register(&even, "アリスの椅子", None).await.json(201);
    assert_eq!(
        created,
        json!({"id": 29, "jia_isu_uuid": even, "name": "アリスの椅子", "character": cluster.character_of(&even)})
    );
    registered.push((even.clone(), "アリスの椅子".into(), 29));
    let created = alice.register(&odd, "二脚目", Some(image)).await.json(201);
    assert_eq!(
        created,
        json!({"id": 30, "jia_isu_uuid": odd, "name": "二脚目", "character": cluster.character_of(&odd)})
    );
    registered.push((odd.clone(), "二脚目".into(), 30));

    let icon = alice.icon(&even).await;
    assert_eq!(icon.status.as_u16(), 200);
    assert!(
        icon.body == DEFAULT_ICON,
        "registered without image: default icon expected"
    );
    let icon = alice.icon(&odd).await;
    assert_eq!(icon.status.as_u16(), 200);
    assert!(icon.body == image, "the uploaded image must come back unchanged");

    for uuid in [&even, &odd] {
        alice
            .register(uuid, "again", None)
            .await
            .assert_error(409, DUPLICATED_ISU);
        bob.register(uuid, "mine", Some(image))
            .await
            .assert_error(409, DUPLICATED_ISU);
    }

    // Initial ISUs are registered too, whoever asks.
    let initial = &dataset_isus_of("isucon1")[0].uuid;
    let isucon1 = cluster.sign_in("isucon1").await;
    for agent in [&isucon1, &bob] {
        agent
            .register(initial, "taken", None)
            .await
            .assert_error(409, DUPLICATED_ISU);
    }
    assert_eq!(isucon1.isu_list().await.json(200), expected_isu_list("isucon1"));

    // Unknown at JIA: its 404 passes through and nothing is left behind, on either shard.
    for (serial, uuid) in [(3, UNKNOWN_AT_JIA.to_owned()), (4, test_uuid('4', 4))] {
        alice
            .register(&uuid, "ghost", None)
            .await
            .assert_error(404, JIA_SERVICE_ERROR);
        alice.isu(&uuid).await.assert_error(404, NOT_FOUND_ISU);
        alice.icon(&uuid).await.assert_error(404, NOT_FOUND_ISU);
        let listed = alice.isu_list().await.json(200);
        assert!(
            listed
                .as_array()
                .unwrap()
                .iter()
                .all(|item| item["jia_isu_uuid"] != uuid.as_str()),
            "{uuid} listed after a refused activation"
        );
        // The worker kept no provisional ISU.
        cluster
            .post_conditions(&uuid, &[sent(VIRTUAL_START + 60, false, INFO, "")])
            .await
            .assert_error(404, NOT_FOUND_ISU);
        // Once JIA knows it, the same UUID registers normally.
        cluster.jia.add_isu(&uuid, "すなお");
        let name = format!("ghost {serial}");
        let created = alice.register(&uuid, &name, None).await.json(201);
        assert_eq!(created["character"], "すなお");
        assert_eq!(created["jia_isu_uuid"], uuid.as_str());
        let id = created["id"].as_i64().unwrap();
        registered.push((uuid.clone(), name, id));
    }
    let ids: Vec<i64> = registered.iter().map(|(_, _, id)| *id).collect();
    assert!(
        ids.windows(2).all(|pair| pair[0] < pair[1]),
        "ids strictly increase: {ids:?}"
    );

    // The list: newest registration first, exact fields, latest condition null or really sent.
    let list = alice.isu_list().await.json(200);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), registered.len());
    for (item, (uuid, name, id)) in list.iter().zip(registered.iter().rev()) {
        assert_eq!(item["id"], *id);
        assert_eq!(item["jia_isu_uuid"], uuid.as_str());
        assert_eq!(item["name"], name.as_str());
        let character = cluster
            .jia
            .activations()
            .into_iter()
            .find(|a| &a.isu_uuid == uuid)
            .unwrap()
            .character;
        assert_eq!(item["character"], character.as_str());
        let latest = &item["latest_isu_condition"];
        if !latest.is_null() {
            let timestamp = latest["timestamp"].as_i64().unwrap();
            let sent = cluster
                .jia
                .find_sent(uuid, timestamp)
                .expect("latest condition was sent");
            assert_eq!(*latest, condition_item(uuid, name, &sent));
        }
    }
    assert_eq!(bob.isu_list().await.json(200), json!([]));

    // Details and icons are private to the owner.
    for (uuid, name, id) in &registered {
        let character = cluster
            .jia
            .activations()
            .into_iter()
            .find(|a| &a.isu_uuid == uuid)
            .unwrap()
            .character;
        assert_eq!(
            alice.isu(uuid).await.json(200),
            json!({"id": id, "jia_isu_uuid": uuid, "name": name, "character": character})
        );
        bob.isu(uuid).await.assert_error(404, NOT_FOUND_ISU);
        bob.icon(uuid).await.assert_error(404, NOT_FOUND_ISU);
    }
    let unknown = test_uuid('c', 99);
    alice.isu(&unknown).await.assert_error(404, NOT_FOUND_ISU);
    alice.icon(&unknown).await.assert_error(404, NOT_FOUND_ISU);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_during_activation_are_kept_and_shown_after_the_201() {
    let cluster = spawn_cluster_with(ClusterOptions {
        activation_delay: Duration::from_millis(500),
        ..ClusterOptions::default()
    })
    .await;
    let alice = cluster.sign_in("alice").await;
    for (digit, serial) in [('6', 1), ('7', 2)] {
        let uuid = cluster.known_uuid(digit, serial);
        let name = format!("provisional {serial}");
        alice.register(&uuid, &name, None).await.json(201);
        let before_201 = cluster.jia.sent(&uuid);
        assert!(
            !before_201.is_empty(),
            "the simulator's device posted nothing during a 500 ms activation"
        );
        // The device never sends a condition twice: if the worker had refused the early
        // posts, these conditions would be lost for good.
        let earliest = &before_201[..before_201.len().min(20)];
        let end_time = earliest.last().unwrap().timestamp + 1;
        let expected_len = earliest.len();
        let alice = &alice;
        let uuid_ref = uuid.as_str();
        let items = wait_until(
            "the conditions posted during activation are listed",
            Duration::from_secs(2),
            move || async move {
                let items = alice.condition_items(uuid_ref, end_time).await;
                (items.len() == expected_len).then_some(items)
            },
        )
        .await;
        let expected: Vec<Value> = earliest
            .iter()
            .rev()
            .map(|condition| condition_item(&uuid, &name, condition))
            .collect();
        assert_eq!(items, expected, "posted before the 201 at {uuid}");

        let latest = wait_until(
            "the ISU list shows a latest condition",
            Duration::from_secs(2),
            move || async move {
                let list = alice.isu_list().await.json(200);
                let item = list
                    .as_array()?
                    .iter()
                    .find(|item| item["jia_isu_uuid"] == uuid_ref)?
                    .clone();
                let latest = item["latest_isu_condition"].clone();
                (!latest.is_null()).then_some(latest)
            },
        )
        .await;
        let sent = cluster
            .jia
            .find_sent(&uuid, latest["timestamp"].as_i64().unwrap())
            .expect("the latest condition was sent");
        assert_eq!(latest, condition_item(&uuid, &name, &sent));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_for_unregistered_isus_are_refused_and_never_stored() {
    let cluster = spawn_cluster().await;
    let alice = cluster.sign_in("alice").await;
    let early = [
        sent(VIRTUAL_START - 7200, true, INFO, "early"),
        sent(VIRTUAL_START - 3600, false, CRITICAL, ""),
    ];
    for (digit, serial) in [('8', 1), ('9', 2)] {
        let uuid = cluster.known_uuid(digit, serial);
        cluster
            .post_conditions(&uuid, &early)
            .await
            .assert_error(404, NOT_FOUND_ISU);
        let registered_at = cluster.jia.clock().now();
        alice.register(&uuid, "late", None).await.json(201);

        let before = alice
            .conditions(&uuid, &format!("end_time={registered_at}&condition_level={ALL_LEVELS}"))
            .await;
        assert_eq!(
            before.json(200),
            json!([]),
            "conditions before the registration of {uuid}"
        );
        let graph = alice.graph(&uuid, VIRTUAL_START - 7200).await.json(200);
        let points = graph.as_array().unwrap();
        assert_eq!(points.len(), 24);
        // The window also covers the device's first conditions, all after the registration.
        let graphed: Vec<i64> = points
            .iter()
            .flat_map(|point| point["condition_timestamps"].as_array().unwrap().clone())
            .map(|stamp| stamp.as_i64().unwrap())
            .collect();
        assert!(
            graphed.iter().all(|stamp| *stamp > registered_at),
            "graph holds conditions from before the registration of {uuid}: {graph}"
        );
        assert!(points[..2].iter().all(|point| point["data"].is_null()), "{graph}");

        // The device's own conditions arrive, all after the registration started.
        let items = alice
            .first_conditions(&uuid, "device conditions are listed", Duration::from_secs(2))
            .await;
        assert!(
            timestamps_of(&items).iter().all(|timestamp| *timestamp > registered_at),
            "{items:?}"
        );
        // Now that it is registered, the same batch is taken: the 404 was about registration.
        cluster.post_conditions(&uuid, &early).await.assert_empty(202);
        assert_eq!(
            timestamps_of(&alice.condition_items(&uuid, registered_at).await),
            vec![VIRTUAL_START - 3600, VIRTUAL_START - 7200]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trend_is_exact_for_the_dataset_and_follows_new_conditions_within_a_second() {
    let cluster = spawn_cluster().await;
    let anonymous = cluster.agent();
    let reply = anonymous.trend().await;
    let spots = parse_trend(&reply.json(200));
    assert_eq!(spots.len(), 28);
    assert_eq!(spots, expected_trend());

    let isucon1 = cluster.sign_in("isucon1").await;
    let mut expected = expected_trend();
    // ISU 1 lives on worker B, ISU 2 on worker A.
    for id in [1, 2] {
        let isu = &dataset().isus[id as usize - 1];
        let newer = VIRTUAL_START + 3600 * id;
        let batch = [
            sent(newer - 60, true, INFO, "older in the batch"),
            sent(newer, false, CRITICAL, "助けて"),
        ];
        cluster.post_conditions(&isu.uuid, &batch).await.assert_empty(202);
        let posted_at = Instant::now();
        expected.insert(
            id,
            TrendSpot {
                character: isu.character.clone(),
                level: "critical".into(),
                timestamp: newer,
            },
        );
        let (anonymous, expected_ref) = (&anonymous, &expected);
        let lag = wait_until(
            "the trend shows the new condition",
            Duration::from_secs(1),
            move || async move {
                let spots = parse_trend(&anonymous.trend().await.json(200));
                (spots == *expected_ref).then(|| posted_at.elapsed())
            },
        )
        .await;
        eprintln!(
            "trend lag for ISU {id} (worker {}): {lag:?}",
            ["A", "B"][shard_index(&isu.uuid)]
        );
        let list = isucon1.isu_list().await.json(200);
        let item = list.as_array().unwrap().iter().find(|item| item["id"] == id).unwrap();
        assert_eq!(
            item["latest_isu_condition"],
            condition_item(&isu.uuid, &isu.name, &batch[1]),
            "the ISU list shows the newest condition"
        );
    }

    // Latest means greatest timestamp, not last arrival. ISU 3 shares worker B with ISU 1
    // and serves as a barrier: once its condition shows, the older post was pushed too.
    let isu1 = &dataset().isus[0];
    let isu3 = &dataset().isus[2];
    assert_eq!(shard_index(&isu1.uuid), shard_index(&isu3.uuid));
    cluster
        .post_conditions(&isu1.uuid, &[sent(VIRTUAL_START + 60, true, INFO, "late arrival")])
        .await
        .assert_empty(202);
    let barrier = VIRTUAL_START + 7 * 3600;
    cluster
        .post_conditions(&isu3.uuid, &[sent(barrier, true, WARNING, "barrier")])
        .await
        .assert_empty(202);
    expected.insert(
        3,
        TrendSpot {
            character: isu3.character.clone(),
            level: "warning".into(),
            timestamp: barrier,
        },
    );
    let anonymous = &anonymous;
    let spots = wait_until(
        "the barrier shows in the trend",
        Duration::from_secs(1),
        move || async move {
            let spots = parse_trend(&anonymous.trend().await.json(200));
            (spots[&3].timestamp == barrier).then_some(spots)
        },
    )
    .await;
    assert_eq!(spots, expected, "an older condition moved the trend back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn condition_list_and_graph_through_the_cluster_agree() {
    let cluster = spawn_cluster().await;
    let alice = cluster.sign_in("alice").await;
    let bob = cluster.sign_in("bob").await;
    let isus = [
        (cluster.known_uuid('c', 1), "偶数の椅子".to_owned()),
        (cluster.known_uuid('d', 2), "奇数の椅子".to_owned()),
    ];
    for (uuid, name) in &isus {
        alice.register(uuid, name, None).await.json(201);
    }
    for (uuid, _) in &isus {
        let (alice, uuid) = (&alice, uuid.as_str());
        wait_until(
            "20 device conditions are stored",
            Duration::from_secs(5),
            move || async move { (alice.condition_items(uuid, FAR_FUTURE).await.len() == 20).then_some(()) },
        )
        .await;
    }
    // Stop the devices so that the data holds still while it is compared.
    cluster.jia.shutdown().await;

    for (uuid, name) in &isus {
        // A post that the shutdown cut short may still land: compare a snapshot that held still.
        let mut snapshot = None;
        for _attempt in 0..5 {
            let items = alice.condition_items(uuid, FAR_FUTURE).await;
            let oldest = items.last().and_then(|item| item["timestamp"].as_i64()).unwrap();
            let graph = alice.graph(uuid, oldest).await.json(200);
            if alice.condition_items(uuid, FAR_FUTURE).await == items {
                snapshot = Some((items, graph));
                break;
            }
        }
        let (items, graph) = snapshot.expect("the condition list kept changing after the devices stopped");
        let listed = timestamps_of(&items);
        assert_eq!(listed.len(), 20);
        assert!(
            listed.windows(2).all(|pair| pair[0] > pair[1]),
            "strictly descending: {listed:?}"
        );
        for item in &items {
            let timestamp = item["timestamp"].as_i64().unwrap();
            let sent = cluster
                .jia
                .find_sent(uuid, timestamp)
                .expect("listed conditions were sent");
            assert_eq!(*item, condition_item(uuid, name, &sent));
        }
        let oldest = *listed.last().unwrap();
        let first_hour = oldest.div_euclid(3600) * 3600;
        let points = graph.as_array().unwrap();
        assert_eq!(points.len(), 24);
        let mut graphed = Vec::new();
        for (hour, point) in points.iter().enumerate() {
            let start_at = first_hour + 3600 * hour as i64;
            assert_eq!(point["start_at"], start_at);
            assert_eq!(point["end_at"], start_at + 3600);
            let stamps: Vec<i64> = point["condition_timestamps"]
                .as_array()
                .expect("condition_timestamps is an array")
                .iter()
                .map(|value| value.as_i64().unwrap())
                .collect();
            assert!(stamps.windows(2).all(|pair| pair[0] < pair[1]), "ascending: {stamps:?}");
            assert!(stamps.iter().all(|stamp| (start_at..start_at + 3600).contains(stamp)));
            let conditions: Vec<_> = stamps
                .iter()
                .map(|stamp| {
                    cluster
                        .jia
                        .find_sent(uuid, *stamp)
                        .expect("graphed conditions were sent")
                })
                .collect();
            assert_eq!(
                point["data"],
                serde_json::to_value(expected_graph_data(&conditions)).unwrap(),
                "hour {hour} of {uuid}"
            );
            graphed.extend(stamps);
        }
        let graphed_since_oldest: BTreeSet<i64> = graphed.iter().copied().filter(|stamp| *stamp >= oldest).collect();
        assert_eq!(
            graphed_since_oldest,
            listed.iter().copied().collect::<BTreeSet<_>>(),
            "the list and the graph disagree for {uuid}"
        );
        // The next page continues exactly where the graph says.
        let next_page = alice.condition_items(uuid, oldest).await;
        let graphed_before: Vec<i64> = graphed.iter().copied().filter(|stamp| *stamp < oldest).collect();
        if let Some(newest_before) = graphed_before.last() {
            assert_eq!(
                next_page.first().map(|item| item["timestamp"].clone()),
                Some(json!(newest_before))
            );
        }
        let bad = alice
            .conditions(uuid, &format!("end_time={FAR_FUTURE}&condition_level=warning,critical"))
            .await
            .json(200);
        for item in bad.as_array().unwrap() {
            assert!(["warning", "critical"].contains(&item["condition_level"].as_str().unwrap()));
            let sent = cluster
                .jia
                .find_sent(uuid, item["timestamp"].as_i64().unwrap())
                .expect("listed conditions were sent");
            assert_eq!(*item, condition_item(uuid, name, &sent));
        }
    }

    // Exact maths on conditions of our own, far from the devices' timestamps.
    let base = 1_900_000_800;
    assert_eq!(base % 3600, 0);
    let posted = [
        sent(base + 10, true, INFO, "a"),
        sent(base + 20, true, WARNING, "b"),
        sent(base + 30, false, CRITICAL, "c"),
        sent(base + 3605, false, INFO, ""),
    ];
    for (uuid, name) in &isus {
        cluster.post_conditions(uuid, &posted).await.assert_empty(202);
        let graph = alice.graph(uuid, base + 1234).await.json(200);
        let points = graph.as_array().unwrap();
        assert_eq!(points.len(), 24);
        assert_eq!(
            points[0],
            json!({"start_at": base, "end_at": base + 3600,
                   "condition_timestamps": [base + 10, base + 20, base + 30],
                   "data": {"score": 66,
                            "percentage": {"sitting": 66, "is_broken": 33, "is_dirty": 66, "is_overweight": 33}}})
        );
        assert_eq!(
            points[1],
            json!({"start_at": base + 3600, "end_at": base + 7200, "condition_timestamps": [base + 3605],
                   "data": {"score": 100,
                            "percentage": {"sitting": 0, "is_broken": 0, "is_dirty": 0, "is_overweight": 0}}})
        );
        for point in &points[2..] {
            assert_eq!(point["data"], Value::Null);
            assert_eq!(point["condition_timestamps"], json!([]));
        }
        let window = alice
            .conditions(
                uuid,
                &format!(
                    "end_time={}&start_time={}&condition_level={ALL_LEVELS}",
                    base + 30,
                    base + 10
                ),
            )
            .await
            .json(200);
        assert_eq!(
            window,
            json!([
                condition_item(uuid, name, &posted[1]),
                condition_item(uuid, name, &posted[0])
            ])
        );
        let critical = alice
            .conditions(uuid, &format!("end_time={}&condition_level=critical", base + 7200))
            .await
            .json(200);
        assert_eq!(critical, json!([condition_item(uuid, name, &posted[2])]));

        // Another user's ISU is a missing one; validation errors keep their texts.
        bob.conditions(uuid, &format!("end_time={FAR_FUTURE}&condition_level={ALL_LEVELS}"))
            .await
            .assert_error(404, NOT_FOUND_ISU);
        bob.graph(uuid, base).await.assert_error(404, NOT_FOUND_ISU);
        alice
            .conditions(uuid, "condition_level=info")
            .await
            .assert_error(400, "bad format: end_time");
        alice
            .get(&format!("/api/isu/{uuid}/graph"))
            .await
            .assert_error(400, "missing: datetime");
    }
    for digit in ['e', 'f'] {
        let unknown = test_uuid(digit, 77);
        alice
            .conditions(&unknown, &format!("end_time={FAR_FUTURE}&condition_level={ALL_LEVELS}"))
            .await
            .assert_error(404, NOT_FOUND_ISU);
        alice.graph(&unknown, base).await.assert_error(404, NOT_FOUND_ISU);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_again_while_devices_post_restores_the_dataset_exactly() {
    let mut cluster = spawn_cluster().await;
    let isucon1 = cluster.sign_in("isucon1").await;
    let alice = cluster.sign_in("alice").await;
    let old = [
        cluster.known_uuid('0', 1),
        cluster.known_uuid('1', 2),
        cluster.known_uuid('e', 3),
    ];
    isucon1.register(&old[0], "old even", None).await.json(201);
    isucon1.register(&old[1], "old odd", None).await.json(201);
    alice.register(&old[2], "alice's", None).await.json(201);
    let isucon1_ref = &isucon1;
    wait_until(
        "conditions of the new ISUs reach the ISU list",
        Duration::from_secs(2),
        move || async move {
            let list = isucon1_ref.isu_list().await.json(200);
            let items = list.as_array()?;
            (items.len() == 7 && items[..2].iter().all(|item| !item["latest_isu_condition"].is_null())).then_some(())
        },
    )
    .await;

    for round in 1..=3 {
        let sent_before = cluster.jia.sent_total();
        let started = Instant::now();
        let reply = cluster.initialize().await;
        let took = started.elapsed();
        assert_eq!(reply.json(200), json!({"language": "rust"}));
        eprintln!("POST /initialize #{round} while devices post: {took:?}");
        assert!(took < Duration::from_secs(5), "initialize took {took:?}");

        let isucon1 = cluster.sign_in("isucon1").await;
        let anonymous = cluster.agent();
        // Hold for a while: stale pushes or posts for the old ISUs must not leak in.
        let hold_until = Instant::now() + Duration::from_millis(300);
        loop {
            assert_eq!(isucon1.isu_list().await.json(200), expected_isu_list("isucon1"));
            assert_eq!(parse_trend(&anonymous.trend().await.json(200)), expected_trend());
            if Instant::now() >= hold_until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            cluster.jia.sent_total() > sent_before,
            "the devices kept posting during round {round}"
        );
        for uuid in &old {
            isucon1
                .conditions(uuid, &format!("end_time={FAR_FUTURE}&condition_level={ALL_LEVELS}"))
                .await
                .assert_error(404, NOT_FOUND_ISU);
            isucon1
                .graph(uuid, VIRTUAL_START)
                .await
                .assert_error(404, NOT_FOUND_ISU);
            isucon1.isu(uuid).await.assert_error(404, NOT_FOUND_ISU);
            cluster
                .post_conditions(uuid, &[sent(VIRTUAL_START + 1, false, INFO, "")])
                .await
                .assert_error(404, NOT_FOUND_ISU);
        }
        alice.me().await.assert_error(401, NOT_SIGNED_IN);
        cluster.assert_no_crash();
    }

    // The old UUIDs register again from id 29; the still-running device feeds the new ISU.
    let isucon1 = cluster.sign_in("isucon1").await;
    let registered_at = cluster.jia.clock().now();
    assert_eq!(isucon1.register(&old[1], "reborn", None).await.json(201)["id"], 29);
    let items = isucon1
        .first_conditions(&old[1], "the re-registered ISU gets conditions", Duration::from_secs(2))
        .await;
    for item in &items {
        let timestamp = item["timestamp"].as_i64().unwrap();
        assert!(
            timestamp > registered_at - 3600,
            "a condition from before the reset survived: {item}"
        );
        let sent = cluster
            .jia
            .find_sent(&old[1], timestamp)
            .expect("listed conditions were sent");
        assert_eq!(*item, condition_item(&old[1], "reborn", &sent));
    }
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_registrations_of_one_uuid_give_one_201_and_one_409() {
    let cluster = spawn_cluster().await;
    let alice = cluster.sign_in("alice").await;
    let bob = cluster.sign_in("bob").await;
    let mut alice_owns = Vec::new();
    let mut bob_owns = Vec::new();
    for round in 0..6u32 {
        let uuid = cluster.known_uuid(['2', '3'][round as usize % 2], round + 1);
        let second = if round < 4 { &bob } else { &alice };
        let (first_reply, second_reply) = tokio::join!(
            alice.register(&uuid, "first", None),
            second.register(&uuid, "second", Some(ICONS[1]))
        );
        let statuses = [first_reply.status.as_u16(), second_reply.status.as_u16()];
        let (winner, loser) = match statuses {
            [201, 409] => (&first_reply, &second_reply),
            [409, 201] => (&second_reply, &first_reply),
            other => panic!("round {round}: statuses {other:?}, expected one 201 and one 409"),
        };
        loser.assert_error(409, DUPLICATED_ISU);
        let created = winner.json(201);
        if statuses[0] == 201 || round >= 4 {
            alice_owns.push(created["id"].as_i64().unwrap());
        } else {
            bob_owns.push(created["id"].as_i64().unwrap());
        }
    }
    let ids_of = |list: Value| -> Vec<i64> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|item| item["id"].as_i64().unwrap())
            .collect()
    };
    alice_owns.reverse();
    bob_owns.reverse();
    assert_eq!(ids_of(alice.isu_list().await.json(200)), alice_owns);
    assert_eq!(ids_of(bob.isu_list().await.json(200)), bob_owns);
    assert_eq!(cluster.jia.activations().len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_routes_need_the_cluster_secret() {
    let cluster = spawn_cluster().await;
    let client = cluster.raw_client();
    let isu1 = &dataset().isus[0];
    let forged = json!({"generation": 1, "items": [{"uuid": isu1.uuid, "condition": {
        "timestamp": VIRTUAL_START + 99_999, "flags": 15, "message": "forged"}}]});
    let latest_url = format!("{}/internal/latest", cluster.coordinator);
    let status = |request: reqwest::RequestBuilder| async move { request.send().await.unwrap().status().as_u16() };

    assert_eq!(status(client.post(&latest_url).json(&forged)).await, 401);
    assert_eq!(
        status(
            client
                .post(&latest_url)
                .header("x-cluster-secret", "wrong")
                .json(&forged)
        )
        .await,
        401
    );
    assert_eq!(
        status(client.post(&latest_url).bearer_auth("wrong").json(&forged)).await,
        401
    );
    // With the secret it is accepted as a message, refused only for its stale generation.
    assert_eq!(
        status(
            client
                .post(&latest_url)
                .header("x-cluster-secret", &cluster.secret)
                .json(&forged)
        )
        .await,
        412
    );
    for path in ["/metrics", "/debug/pprof/profile?seconds=1"] {
        assert_eq!(
            status(client.get(format!("{}{path}", cluster.coordinator))).await,
            401,
            "{path}"
        );
    }
    assert_eq!(
        status(
            client
                .get(format!("{}/metrics", cluster.coordinator))
                .bearer_auth(&cluster.secret)
        )
        .await,
        200
    );
    // The workers' internal routes too: an unauthenticated reset must not wipe anything.
    for worker in &cluster.workers {
        assert_eq!(
            status(
                client
                    .post(format!("{worker}/internal/reset"))
                    .json(&json!({"generation": 1, "users": [], "isus": []}))
            )
            .await,
            401
        );
    }
    assert_eq!(parse_trend(&cluster.agent().trend().await.json(200)), expected_trend());
    let isucon1 = cluster.sign_in("isucon1").await;
    assert_eq!(isucon1.condition_items(&isu1.uuid, FAR_FUTURE).await.len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_batches_are_taken_in_binary_and_json_and_bad_ones_change_nothing() {
    use shared::domain::Flags;
    use shared::protocol::{encode_latest, LatestItem, LATEST_BINARY};
    let cluster = spawn_cluster().await;
    let client = cluster.raw_client();
    let isu1 = &dataset().isus[0];
    let latest_url = format!("{}/internal/latest", cluster.coordinator);
    let health: Value = client
        .get(format!("{}/healthz", cluster.coordinator))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let generation = health["generation"].as_u64().unwrap();
    let binary = |generation: u64, timestamp: i64, message: &str| {
        let item = LatestItem {
            uuid: &isu1.uuid,
            timestamp,
            flags: Flags(Flags::SITTING | Flags::BROKEN),
            message,
        };
        encode_latest(generation, [item])
    };
    let post = |content_type: &'static str, body: Vec<u8>| {
        let request = client
            .post(&latest_url)
            .header("x-cluster-secret", &cluster.secret)
            .header("content-type", content_type)
            .body(body);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let isucon1 = cluster.sign_in("isucon1").await;
    let latest_of_isu1 = || async {
        let list = isucon1.isu_list().await.json(200);
        let item = list
            .as_array()
            .unwrap()
            .iter()
            .find(|item| item["jia_isu_uuid"] == isu1.uuid.as_str())
            .cloned()
            .unwrap();
        item["latest_isu_condition"].clone()
    };

    let far = VIRTUAL_START + 99_999;
    assert_eq!(post(LATEST_BINARY, binary(generation, far, "binary")).await, 200);
    let latest = latest_of_isu1().await;
    assert_eq!(latest["message"], "binary");
    assert_eq!(latest["timestamp"], far);
    assert_eq!(latest["condition"], "is_dirty=false,is_overweight=false,is_broken=true");
    assert_eq!(latest["condition_level"], "warning");
    assert_eq!(latest["is_sitting"], true);

    // Refused, each changing nothing: another generation (412), a version this build does not
    // know (415, so the worker sends JSON), a cut or padded body (400), an unknown binary type.
    assert_eq!(post(LATEST_BINARY, binary(generation ^ 1, far + 1, "stale")).await, 412);
    let mut unknown_version = binary(generation, far + 2, "v2");
    unknown_version[0] = 2;
    assert_eq!(post(LATEST_BINARY, unknown_version).await, 415);
    let whole = binary(generation, far + 3, "cut");
    assert_eq!(post(LATEST_BINARY, whole[..whole.len() - 1].to_vec()).await, 400);
    let mut padded = binary(generation, far + 4, "padded");
    padded.push(0);
    assert_eq!(post(LATEST_BINARY, padded).await, 400);
    assert_eq!(
        post("application/octet-stream", binary(generation, far + 5, "octets")).await,
        415
    );
    assert_eq!(post("text/plain", binary(generation, far + 6, "text")).await, 415);
    assert_eq!(latest_of_isu1().await["message"], "binary");

    // The type's case does not matter.
    assert_eq!(
        post("Application/X-ISU-Latest", binary(generation, far + 7, "cased")).await,
        200
    );
    assert_eq!(latest_of_isu1().await["message"], "cased");

    // JSON, as an older worker sends it.
    let json_batch = json!({"generation": generation, "items": [{"uuid": isu1.uuid, "condition": {
        "timestamp": far + 10, "flags": 0, "message": "json"}}]});
    assert_eq!(
        post("application/json", serde_json::to_vec(&json_batch).unwrap()).await,
        200
    );
    let latest = latest_of_isu1().await;
    assert_eq!(
        (latest["message"].clone(), latest["condition_level"].clone()),
        (json!("json"), json!("info"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_nginx_routes_by_parity_and_hides_internal_routes() {
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let [device_a_port, device_b_port] = free_ports::<2>();
    let device_a = format!("127.0.0.1:{device_a_port}");
    let device_b = format!("127.0.0.1:{device_b_port}");
    let cluster = spawn_cluster_with(ClusterOptions {
        device_urls: Some(vec![format!("http://{device_a}"), format!("http://{device_b}")]),
        ..ClusterOptions::default()
    })
    .await;
    let run_dir = cluster.scratch.path.join("nginx");
    let web = support::fixture_front_end();
    let (mut server, public) = public_nginx_at(
        &cluster,
        &nginx,
        &web.path,
        &run_dir,
        &[device_a.clone(), device_b.clone()],
    )
    .await;
    let anonymous = Agent::new(Routes::Public(public.clone()));
    server.assert_running();

    let page = anonymous.get("/").await;
    assert_eq!(page.status.as_u16(), 200);
    assert!(page.content_type.starts_with("text/html"), "{}", page.content_type);
    let alice = sign_in_with(Agent::new(Routes::Public(public.clone())), &cluster.signer, "alice").await;
    assert_eq!(alice.me().await.json(200), json!({"jia_user_id": "alice"}));
    let isus = [cluster.known_uuid('a', 1), cluster.known_uuid('b', 2)];
    for uuid in &isus {
        alice.register(uuid, "nginx", Some(ICONS[2])).await.json(201);
        assert!(alice.icon(uuid).await.body == ICONS[2]);
    }
    // Devices post through the device servers; reads go through the public server, each
    // to the worker owning the UUID (the other worker would answer 404).
    for uuid in &isus {
        anonymous
            .conditions(uuid, &format!("end_time={FAR_FUTURE}&condition_level={ALL_LEVELS}"))
            .await
            .assert_error(401, NOT_SIGNED_IN);
        let items = alice
            .first_conditions(
                uuid,
                "device conditions are listed through nginx",
                Duration::from_secs(3),
            )
            .await;
        let newest = items[0]["timestamp"].as_i64().unwrap();
        let sent = cluster
            .jia
            .find_sent(uuid, newest)
            .expect("listed conditions were sent");
        assert_eq!(items[0], condition_item(uuid, "nginx", &sent));
        let graph = alice.graph(uuid, newest).await.json(200);
        let points = graph.as_array().unwrap();
        assert_eq!(points.len(), 24);
        assert!(
            points[0]["condition_timestamps"]
                .as_array()
                .unwrap()
                .contains(&json!(newest)),
            "{}",
            points[0]
        );
        alice
            .get(&format!("/api/isu/{uuid}/graph"))
            .await
            .assert_error(400, "missing: datetime");
    }
    let trend = parse_trend(&anonymous.trend().await.json(200));
    assert!(trend.len() >= 28, "{} ISUs in the trend", trend.len());
    assert_eq!(alice.isu_list().await.json(200).as_array().map(Vec::len), Some(2));

    // Internal, metrics, profiling and health routes never leave the cluster.
    let client = cluster.raw_client();
    let with_secret = |request: reqwest::RequestBuilder| request.header("x-cluster-secret", &cluster.secret);
    for (method, path) in [
        ("POST", "/internal/latest"),
        ("POST", "/internal/reset"),
        ("POST", "/internal/isu/provisional"),
        ("GET", "/metrics"),
        ("GET", "/debug/pprof/profile?seconds=1"),
        ("GET", "/healthz"),
    ] {
        let url = format!("{public}{path}");
        let request = match method {
            "POST" => client.post(&url).json(&json!({})),
            _ => client.get(&url),
        };
        let response = with_secret(request).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 404, "{method} {path} through nginx");
    }
    // The device servers take condition posts only.
    let device_root = client.get(format!("http://{device_a}/")).send().await.unwrap();
    assert_eq!(device_root.status().as_u16(), 404);
    server.assert_running();
}

/// The folder of the contest's data beside the checkout, if present.
fn official_data_dir() -> Option<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/isucon11-qualify");
    if dir.join("1_InitData.sql").is_file() {
        Some(dir)
    } else {
        eprintln!("skipped: {} is absent (CI always has it)", dir.display());
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_dump_dataset_key_and_icon_serve_initialize_json_shared_data() {
    let Some(dir) = official_data_dir() else { return };
    let cluster = spawn_official_cluster(&dir).await;
    let reference: Value = serde_json::from_slice(&std::fs::read(dir.join("initialize.json")).unwrap()).unwrap();
    // Newest condition of every initial ISU, by uuid, from the contest's own record.
    let mut expected_ids = BTreeSet::new();
    for user in reference.as_array().unwrap() {
        let jia_user_id = user["jia_user_id"].as_str().unwrap();
        let agent = cluster.sign_in(jia_user_id).await;
        let list = agent.isu_list().await.json(200);
        let listed = list.as_array().unwrap();
        let isus = user["isu_list_by_id"].as_object().unwrap();
        assert_eq!(listed.len(), isus.len(), "{jia_user_id}");
        assert!(listed
            .windows(2)
            .all(|pair| pair[0]["id"].as_i64() > pair[1]["id"].as_i64()));
        for item in listed {
            let uuid = item["jia_isu_uuid"].as_str().unwrap();
            let isu = &isus[uuid];
            assert_eq!(
                (&item["id"], &item["name"], &item["character"]),
                (&isu["id"], &isu["name"], &isu["character"])
            );
            expected_ids.insert(isu["id"].as_i64().unwrap());
            let newest = ["info", "warning", "critical"]
                .iter()
                .filter_map(|level| isu["conditions"][level].as_array())
                .flatten()
                .max_by_key(|condition| condition["timestamp"].as_i64())
                .unwrap();
            let latest = &item["latest_isu_condition"];
            assert_eq!(latest["timestamp"], newest["timestamp"], "{uuid}");
            assert_eq!(latest["message"], newest["message"], "{uuid}");
            assert_eq!(latest["is_sitting"], newest["is_sitting"], "{uuid}");
            let icon = agent.icon(uuid).await;
            let hash: Vec<u8> = isu["image_file_hash"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u8)
                .collect();
            assert_eq!(md5::compute(&icon.body).0.to_vec(), hash, "icon of {uuid}");
        }
    }
    assert_eq!(expected_ids, (1..=28).collect::<BTreeSet<i64>>());
    let trend = cluster.agent().trend().await.json(200);
    let spots = parse_trend(&trend);
    assert_eq!(spots.keys().copied().collect::<BTreeSet<i64>>(), expected_ids);
    // The contest's default icon for an ISU registered without an image.
    let isucon = cluster.sign_in("isucon").await;
    let uuid = cluster.known_uuid('c', 1);
    assert_eq!(isucon.register(&uuid, "椅子", None).await.json(201)["id"], 29);
    assert_eq!(
        format!("{:x}", md5::compute(&isucon.icon(&uuid).await.body)),
        "5827c4619739d85397844af87f9d2fe4"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontend_routes_serve_index_html_and_assets() {
    let fixture = support::fixture_front_end();
    let web = fixture.path.clone();
    let cluster = spawn_cluster_with(ClusterOptions {
        coordinator_args: vec!["--static-dir".into(), web.display().to_string()],
        ..ClusterOptions::default()
    })
    .await;
    let index = std::fs::read(web.join("index.html")).unwrap();
    let agent = cluster.agent();
    for path in [
        "/",
        "/?jwt=abc",
        "/isu/x",
        "/isu/x/condition",
        "/isu/x/graph",
        "/register",
    ] {
        let page = agent.get(path).await;
        assert_eq!(page.status.as_u16(), 200, "{path}");
        assert!(
            page.content_type.starts_with("text/html"),
            "{path}: {}",
            page.content_type
        );
        assert!(page.body == index, "{path} is not index.html");
    }
    let css = agent.get("/assets/app.css").await;
    assert_eq!(css.status.as_u16(), 200);
    assert!(css.body == std::fs::read(web.join("assets/app.css")).unwrap());
    assert_eq!(agent.get("/assets/missing.js").await.status.as_u16(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trend_is_gzip_compressed_for_clients_that_accept_it_and_equal_to_the_plain_one() {
    // Large enough to be compressed: the generated dataset scaled to 1,000 ISUs.
    let cluster = spawn_cluster_with(ClusterOptions {
        coordinator_args: vec!["--dataset".into(), "generated:1000".into()],
        ..ClusterOptions::default()
    })
    .await;
    let client = cluster.raw_client();
    let url = format!("{}/api/trend", cluster.coordinator);
    let plain = client.get(&url).send().await.unwrap();
    assert_eq!(plain.headers().get("content-encoding"), None);
    let plain: Value = serde_json::from_slice(&plain.bytes().await.unwrap()).unwrap();
    let compressed = client
        .get(&url)
        .header("accept-encoding", "gzip, deflate, br")
        .send()
        .await
        .unwrap();
    assert_eq!(compressed.status().as_u16(), 200);
    assert_eq!(compressed.headers()["content-encoding"], "gzip");
    assert!(compressed.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let mut json = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&compressed.bytes().await.unwrap()[..]),
        &mut json,
    )
    .unwrap();
    let decoded: Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(decoded, plain);
    assert_eq!(parse_trend(&decoded).len(), 1000);
}

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

/// Starts the project's public nginx in front of `cluster`, serving `static_dir`, with a
/// device server per cell on fresh ports; returns it and its base URL once it answers.
async fn public_nginx(cluster: &Cluster, nginx: &std::path::Path, static_dir: &std::path::Path) -> (Nginx, String) {
    let device_listens: Vec<String> = cluster
        .workers
        .iter()
        .map(|_| format!("127.0.0.1:{}", free_ports::<1>()[0]))
        .collect();
    let run_dir = cluster.scratch.path.join("nginx");
    public_nginx_at(cluster, nginx, static_dir, &run_dir, &device_listens).await
}

/// The bench's compatibility check (§13.2) and its error checks, against the real cluster
/// behind the real nginx, with the project's dataset: not a single error or timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_compatibility_check_and_error_checks_pass_through_nginx() {
    use bench::scenario::expected::ExpectedData;
    use bench::scenario::prepare::{
        compatibility_check, run_error_checks, ErrorCheckConfig, ErrorCheckUser, PrepareContext,
        LOAD_ERROR_CHECK_TIMEOUT,
    };
    use bench::scenario::stats::Stats;
    use std::sync::Arc;

    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let cluster = spawn_cluster().await;
    // The built front end when there is one (its index.html references /assets/ files).
    let web = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../web");
    let static_dir = if web.join("dist/index.html").is_file() {
        web.join("dist")
    } else {
        web
    };
    let (mut server, public) = public_nginx(&cluster, &nginx, &static_dir).await;

    let stats = Arc::new(Stats::default());
    let expected = Arc::new(ExpectedData::load("project").expect("the project's dataset"));
    let ctx = PrepareContext {
        signer: cluster.signer.clone(),
        ..PrepareContext::new(&public, cluster.jia.clone(), stats.clone(), expected.clone())
    };
    let outcome = compatibility_check(&ctx).await;
    let snapshot = stats.snapshot();
    assert!(outcome.passed, "{snapshot}\n{}", snapshot.error_samples.join("\n"));
    assert_eq!(outcome.registered.len(), 3);
    println!("compatibility check: {snapshot}");
    assert!(snapshot.requests > 100, "only {} requests", snapshot.requests);
    if static_dir.ends_with("dist") {
        assert!(snapshot.latencies.contains_key("GET /assets/*"), "no asset fetched");
    }

    // The load's error checks: 1 s timeout, every 500 ms, with isucon1's ISUs old and new.
    let isucon1 = expected.user("isucon1").unwrap();
    let mut isu_uuids: Vec<String> = expected.isus_of(isucon1).map(|isu| isu.uuid.clone()).collect();
    isu_uuids.extend(outcome.registered.iter().map(|isu| isu.isu.uuid.clone()));
    let user = ErrorCheckUser {
        jia_user_id: "isucon1".into(),
        isu_uuids,
    };
    let config = ErrorCheckConfig {
        target: public.clone(),
        timeout: LOAD_ERROR_CHECK_TIMEOUT,
        signer: cluster.signer.clone(),
        clock: cluster.jia.clock(),
        stats: stats.clone(),
    };
    let requests_before = stats.snapshot().requests;
    let checks = run_error_checks(config, move || Some(user.clone()), Duration::from_millis(500));
    let _ = tokio::time::timeout(Duration::from_millis(2200), checks).await;
    let snapshot = stats.snapshot();
    assert_eq!(snapshot.error_count(), 0, "{:?}", snapshot.error_samples);
    assert_eq!(snapshot.timeouts, 0);
    println!("with the error checks: {snapshot}");
    assert!(
        snapshot.requests - requests_before > 80,
        "{} requests in the error checks",
        snapshot.requests - requests_before
    );
    server.assert_running();
}

/// The same compatibility check with the contest's data: the official dump, key and default
/// icon on the cluster, and the official `initialize.json` as the bench's expectation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_compatibility_check_passes_on_the_official_data_shared_data() {
    use bench::scenario::expected::ExpectedData;
    use bench::scenario::prepare::{compatibility_check, PrepareContext};
    use bench::scenario::stats::Stats;
    use std::sync::Arc;

    let Some(dir) = official_data_dir() else { return };
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let cluster = spawn_official_cluster(&dir).await;
    let web = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../web");
    let (mut server, public) = public_nginx(&cluster, &nginx, &web).await;
    let stats = Arc::new(Stats::default());
    let expected =
        ExpectedData::load(&dir.join("initialize.json").display().to_string()).expect("the official initialize.json");
    let ctx = PrepareContext {
        signer: cluster.signer.clone(),
        ..PrepareContext::new(&public, cluster.jia.clone(), stats.clone(), Arc::new(expected))
    };
    let outcome = compatibility_check(&ctx).await;
    let snapshot = stats.snapshot();
    assert!(outcome.passed, "{snapshot}\n{}", snapshot.error_samples.join("\n"));
    assert!(outcome.registered.iter().all(|isu| isu.isu.id > 28));
    server.assert_running();
}

/// A dead worker: reads of its ISUs through nginx get a short text 503 at once, never a hang,
/// while the other worker's ISUs are served as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_reads_fail_fast_with_503_through_nginx_while_the_other_serves() {
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let mut cluster = spawn_cluster().await;
    let web = support::fixture_front_end();
    let (mut server, public) = public_nginx(&cluster, &nginx, &web.path).await;
    let isucon1 = sign_in_with(Agent::new(Routes::Public(public.clone())), &cluster.signer, "isucon1").await;
    let isus = dataset_isus_of("isucon1");
    let on = |even: bool| {
        isus.iter()
            .find(|isu| u8::from_str_radix(&isu.uuid[..1], 16).unwrap() % 2 == u8::from(!even))
            .map(|isu| isu.uuid.clone())
            .expect("isucon1 owns ISUs on both shards")
    };
    let (on_a, on_b) = (on(true), on(false));
    assert_eq!(
        isucon1
            .conditions(&on_a, "end_time=9999999999&condition_level=info")
            .await
            .status,
        200
    );

    cluster.kill_node(0);
    for _ in 0..5 {
        let started = Instant::now();
        let dead = isucon1
            .conditions(&on_a, "end_time=9999999999&condition_level=info")
            .await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
        dead.assert_error(503, "service unavailable");
        let graph = isucon1.get(&format!("/api/isu/{on_a}/graph?datetime=1627916400")).await;
        assert_eq!(graph.status.as_u16(), 503, "{}", graph.request);
        let alive = isucon1
            .conditions(&on_b, "end_time=9999999999&condition_level=info")
            .await;
        assert_eq!(alive.status.as_u16(), 200, "{}", alive.request);
        assert_eq!(isucon1.isu_list().await.status.as_u16(), 200);
    }
    server.assert_running();
}

/// A cluster on the contest's dump, JWT key pair and default icon from `dir`.
async fn spawn_official_cluster(dir: &std::path::Path) -> Cluster {
    let arg = |name: &str| dir.join(name).display().to_string();
    spawn_cluster_with(ClusterOptions {
        coordinator_args: vec![
            "--dataset".into(),
            arg("1_InitData.sql"),
            "--jwt-public-key".into(),
            arg("ec256-public.pem"),
            "--default-icon".into(),
            arg("NoImage.jpg"),
        ],
        signer: Some(jia_sim::jwt::JwtSigner::from_file(&dir.join("ec256-private.pem")).unwrap()),
        ..ClusterOptions::default()
    })
    .await
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

/// The bench's capacity mode against the real cluster behind the real nginx: a short ramp of
/// small steps holds every objective (nothing is near saturation at 40 ISUs), each step
/// measured device posts at the official rate, reads and the CPU of every node, and the
/// report names the sustained ISUs and the cluster CPU per device post.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_capacity_ramp_measures_each_step_through_nginx() {
    use bench::capacity::{run, CapacityConfig};
    use bench::nodes::{Node, Nodes};

    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let cluster = spawn_cluster().await;
    let static_dir = fixture_front_end();
    let (mut server, public) = public_nginx(&cluster, &nginx, &static_dir.path).await;
    let nodes = [
        ("coordinator", &cluster.coordinator),
        ("worker-a", &cluster.workers[0]),
        ("worker-b", &cluster.workers[1]),
    ]
    .into_iter()
    .map(|(name, url)| bench::nodes::parse_node(&format!("{name}={url}")).unwrap())
    .collect::<Vec<Node>>();
    let config = CapacityConfig {
        target: public,
        jia: jia_sim::JiaConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            run_for: Duration::from_secs(60),
            ..jia_sim::JiaConfig::default()
        },
        signer: cluster.signer.clone(),
        nodes: Some(Nodes::new(nodes, cluster.secret.clone()).unwrap()),
        processes: Vec::new(),
        step_isus: 20,
        step_time: Duration::from_secs(1),
        max_isus: 40,
        cluster_cores: 2.0,
        // Generous: the test shares the machine with the others; the ramp's logic is what is tested.
        device_post_p99_limit: Duration::from_secs(5),
        read_p99_limit: Duration::from_secs(5),
        min_post_rate_share: 0.2,
        isus_per_reader: 10,
        read_pause: Duration::from_millis(100),
        request_timeout: Duration::from_secs(10),
    };
    let report = run(config).await.expect("the ramp runs");
    assert_eq!(report.steps.iter().map(|step| step.isus).collect::<Vec<_>>(), [20, 40]);
    for step in &report.steps {
        assert_eq!((step.errors, step.broken.as_deref()), (0, None), "{step:?}");
        // 20 ISUs post every 40 ms: about 500 posts a second (the machine is shared, so loosely).
        assert!(
            step.device_posts as f64 / step.seconds > 100.0 * (step.isus / 20) as f64,
            "{step:?}"
        );
        assert!(step.reads > 0 && step.read_p99_ms.is_some(), "{step:?}");
        for node in ["coordinator", "worker-a", "worker-b", "bench"] {
            let rate = step
                .cpu_per_second
                .iter()
                .find(|(name, _)| name == node)
                .and_then(|(_, rate)| *rate);
            assert!(rate.is_some_and(|rate| rate > 0.0), "{node}: {step:?}");
        }
        assert!(
            step.cluster_cpu_per_device_post_us.is_some_and(|us| us > 0.0),
            "{step:?}"
        );
    }
    let json = report.to_json();
    assert_eq!(json["capacity"]["sustained_isus"], json!(40));
    assert_eq!(json["capacity"]["isus_per_core"], json!(20.0));
    assert!(json["capacity"]["cluster_cpu_per_device_post_us"].as_f64().is_some());
    assert!(["cluster", "bench", "neither"].contains(&json["capacity"]["saturated"].as_str().unwrap()));
    server.assert_running();
}
