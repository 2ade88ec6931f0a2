//! The internal API between nodes: the cluster secret, and latest-condition batches in
//! binary and JSON.

use std::time::{Duration, Instant};

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

/// The generation the coordinator reports on `/healthz`.
async fn coordinator_generation(cluster: &Cluster) -> u64 {
    let health: Value = cluster
        .raw_client()
        .get(format!("{}/healthz", cluster.coordinator))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    health["generation"].as_u64().unwrap()
}

/// The latest condition of `uuid` in `agent`'s ISU list.
async fn latest_in_list(agent: &Agent, uuid: &str) -> Value {
    let list = agent.isu_list().await.json(200);
    let item = list
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["jia_isu_uuid"] == uuid)
        .cloned()
        .unwrap();
    item["latest_isu_condition"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_batches_are_taken_in_binary_and_json_and_bad_ones_change_nothing() {
    use shared::domain::Flags;
    use shared::protocol::{encode_latest, LatestItem, LATEST_BINARY};
    let cluster = spawn_cluster().await;
    let client = cluster.raw_client();
    let isu1 = &dataset().isus[0];
    let latest_url = format!("{}/internal/latest", cluster.coordinator);
    let generation = coordinator_generation(&cluster).await;
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
    let latest_of_isu1 = || latest_in_list(&isucon1, &isu1.uuid);

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
async fn a_latest_stream_applies_and_acknowledges_each_frame_as_it_comes_and_bad_input_changes_nothing() {
    use shared::domain::Flags;
    use shared::protocol::{encode_latest, latest_frame, LatestItem, COORDINATOR_LATEST_STREAM, LATEST_STREAM};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let cluster = spawn_cluster().await;
    let client = cluster.raw_client();
    let isu1 = &dataset().isus[0];
    let generation = coordinator_generation(&cluster).await;
    let frame = |generation: u64, timestamp: i64, message: &str| {
        let item = LatestItem {
            uuid: &isu1.uuid,
            timestamp,
            flags: Flags(Flags::SITTING),
            message,
        };
        latest_frame(&encode_latest(generation, [item]))
    };
    let isucon1 = cluster.sign_in("isucon1").await;
    let latest_message = || async {
        let latest = latest_in_list(&isucon1, &isu1.uuid).await;
        latest["message"].as_str().unwrap_or_default().to_owned()
    };
    let far = VIRTUAL_START + 99_999;

    // One request, open while frames come: answered 200 at once; each frame is applied when
    // it arrives and acknowledged in the answer, and a frame of another generation ends the
    // stream with 412.
    let address = cluster.coordinator.trim_start_matches("http://").to_owned();
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST {COORDINATOR_LATEST_STREAM} HTTP/1.1\r\nHost: {address}\r\nx-cluster-secret: {}\r\n\
         content-type: {LATEST_STREAM}\r\ntransfer-encoding: chunked\r\n\r\n",
        cluster.secret
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let (mut reader, mut socket) = socket.into_split();
    let mut answer = Vec::new();
    /// Reads the answer into `answer` until it holds `text` (5 s at most).
    async fn read_until(reader: &mut tokio::net::tcp::OwnedReadHalf, answer: &mut Vec<u8>, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut buffer = [0; 4096];
        while !String::from_utf8_lossy(answer).contains(text) {
            let left = deadline.saturating_duration_since(Instant::now());
            let read = tokio::time::timeout(left, reader.read(&mut buffer)).await;
            let Ok(Ok(read @ 1..)) = read else {
                panic!("no {text:?} in the answer: {}", String::from_utf8_lossy(answer));
            };
            answer.extend_from_slice(&buffer[..read]);
        }
    }
    read_until(&mut reader, &mut answer, "HTTP/1.1 200").await;
    let send_chunk = |bytes: Vec<u8>| {
        let mut chunk = format!("{:x}\r\n", bytes.len()).into_bytes();
        chunk.extend_from_slice(&bytes);
        chunk.extend_from_slice(b"\r\n");
        chunk
    };
    for (offset, message) in [(0, "streamed first"), (1, "streamed second")] {
        // A frame split over two chunks is applied once whole.
        let bytes = frame(generation, far + offset, message);
        let (one, two) = bytes.split_at(3);
        socket.write_all(&send_chunk(one.to_vec())).await.unwrap();
        socket.write_all(&send_chunk(two.to_vec())).await.unwrap();
        read_until(&mut reader, &mut answer, &format!("applied {}\n", offset + 1)).await;
        wait_until(
            "the frame is applied while the stream is open",
            Duration::from_secs(5),
            || async { (latest_message().await == message).then_some(()) },
        )
        .await;
    }
    socket
        .write_all(&send_chunk(frame(generation ^ 1, far + 2, "stale")))
        .await
        .unwrap();
    read_until(
        &mut reader,
        &mut answer,
        "end 412 a latest batch of another generation\n",
    )
    .await;
    assert!(!String::from_utf8_lossy(&answer).contains("applied 3"));
    assert_eq!(latest_message().await, "streamed second");

    // Whole bodies: each refused with a short reason, changing nothing; the secret and the
    // type are checked before the stream starts.
    let url = format!("{}{COORDINATOR_LATEST_STREAM}", cluster.coordinator);
    let send = |content_type: &'static str, body: Vec<u8>, secret: bool| {
        let mut request = client.post(&url).header("content-type", content_type).body(body);
        if secret {
            request = request.header("x-cluster-secret", &cluster.secret);
        }
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let unsent = frame(generation, far + 10, "refused");
    assert_eq!(send(LATEST_STREAM, unsent.clone(), false).await.0, 401);
    assert_eq!(
        send(shared::protocol::LATEST_BINARY, unsent.clone(), true).await,
        (415, "a latest stream is application/x-isu-latest-stream".to_owned())
    );
    let ended = |line: &str| (200, format!("{line}\n"));
    let mut no_batch = unsent.clone();
    no_batch[4] = 9;
    assert_eq!(
        send(LATEST_STREAM, no_batch, true).await,
        ended("end 415 a latest batch of an unknown version")
    );
    let mut padded = unsent.clone();
    padded[0] += 1;
    padded.push(0);
    assert_eq!(
        send(LATEST_STREAM, padded, true).await,
        ended("end 400 a latest frame that is no batch")
    );
    assert_eq!(
        send(LATEST_STREAM, u32::MAX.to_le_bytes().to_vec(), true).await,
        ended("end 413 a latest frame over the bound")
    );
    assert_eq!(
        send(LATEST_STREAM, unsent[..unsent.len() - 1].to_vec(), true).await,
        ended("end 400 the stream ends inside a frame")
    );
    assert_eq!(latest_message().await, "streamed second");
    // An empty stream, and a whole one, end as the worker ended them.
    assert_eq!(
        send(LATEST_STREAM, Vec::new(), true).await,
        ended("end 200 ended by the worker")
    );
    assert_eq!(
        send(LATEST_STREAM, frame(generation, far + 20, "whole"), true).await,
        (200, "applied 1\nend 200 ended by the worker\n".to_owned())
    );
    assert_eq!(latest_message().await, "whole");
}

/// A lone coordinator without a data directory is the one replica of its group: it answers
/// `/internal/replica` as its leader, and refuses another member (a replica that forgets its
/// log on a restart must not vote) with 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_coordinator_in_memory_leads_its_group_of_one_and_takes_no_member() {
    let mut cluster = spawn_cluster().await;
    let coordinator = cluster.coordinator.clone();
    let url = |path: &str| format!("{coordinator}{path}");
    let answer: Value = cluster
        .internal_get(&url(shared::protocol::COORDINATOR_REPLICA))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (answer["role"].as_str(), answer["members"].clone()),
        (Some("leader"), json!([1])),
        "{answer}"
    );
    let refused = cluster
        .raw_client()
        .post(url(shared::protocol::COORDINATOR_MEMBERS))
        .header(shared::protocol::SECRET_HEADER, &cluster.secret)
        .json(&json!({"add": {"id": 2, "url": "http://127.0.0.1:9"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 409);
    assert!(refused.text().await.unwrap().contains("no --data-dir"));
    cluster.assert_no_crash();
}
