//! Reads: the trend (exact for the dataset, following new conditions, gzip), and condition
//! lists and graphs checked against the bench's independent graph maths.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bench::model::expected_graph_data;
use e2e::*;
use serde_json::{json, Value};
use shared::dataset::generated::VIRTUAL_START;

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
