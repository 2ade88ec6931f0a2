//! The internal API between nodes: the cluster secret, and latest-condition batches in
//! binary and JSON.

use e2e::*;
use serde_json::{json, Value};
use shared::dataset::generated::VIRTUAL_START;

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
