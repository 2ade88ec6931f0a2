//! `POST /initialize`: its answer, what it resets, a restore while devices post, and the
//! contest's own data (dump, key, icon) served as the official `initialize.json` says.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use e2e::*;
use serde_json::{json, Value};
use shared::dataset::generated::VIRTUAL_START;

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

/// The folder of the contest's data beside the checkout, if present.
pub(super) fn official_data_dir() -> Option<std::path::PathBuf> {
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

/// A cluster on the contest's dump, JWT key pair and default icon from `dir`.
pub(super) async fn spawn_official_cluster(dir: &std::path::Path) -> Cluster {
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
