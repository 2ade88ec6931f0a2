//! ISUs: the lists of new and initial users, registration on both shards (icons,
//! duplicates, JIA refusals, concurrent attempts), and device posts around a registration.

use std::time::Duration;

use e2e::*;
use serde_json::{json, Value};
use shared::dataset::generated::{ICONS, VIRTUAL_START};
use shared::dataset::DEFAULT_ICON;

/// The unknown UUID the official bench registers (its JIA answers 404).
const UNKNOWN_AT_JIA: &str = "9e5c1109-beff-4598-b8f1-658d1994d55f";

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

    // The character JIA gave each ISU at activation.
    let characters: std::collections::HashMap<String, String> = cluster
        .jia
        .activations()
        .into_iter()
        .map(|activation| (activation.isu_uuid, activation.character))
        .collect();

    // The list: newest registration first, exact fields, latest condition null or really sent.
    let list = alice.isu_list().await.json(200);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), registered.len());
    for (item, (uuid, name, id)) in list.iter().zip(registered.iter().rev()) {
        assert_eq!(item["id"], *id);
        assert_eq!(item["jia_isu_uuid"], uuid.as_str());
        assert_eq!(item["name"], name.as_str());
        assert_eq!(item["character"], characters[uuid].as_str());
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
        assert_eq!(
            alice.isu(uuid).await.json(200),
            json!({"id": id, "jia_isu_uuid": uuid, "name": name, "character": characters[uuid]})
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
