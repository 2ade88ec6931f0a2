//! Worker integration tests: a real worker on 127.0.0.1:0, driven over HTTP,
//! with a stand-in coordinator that records the latest-condition pushes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use parking_lot::Mutex;
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::protocol::{
    decode_latest, LatestBatch, LatestFrames, LatestItem, ResetShard, ShardIsu, StreamAnswer, WireCondition,
    LATEST_BINARY, LATEST_STREAM, SECRET_HEADER,
};
use shared::session::{SessionKey, COOKIE_NAME};
use worker::config::Config;
use worker::Application;

const SECRET: &str = "test-secret-of-24-bytes";
const GENERATION: u64 = 77;
const INFO: &str = "is_dirty=false,is_overweight=false,is_broken=false";
const WARNING: &str = "is_dirty=true,is_overweight=false,is_broken=false";
const CRITICAL: &str = "is_dirty=true,is_overweight=true,is_broken=true";
/// Owned by alice, even first digit (shard A).
const ISU: &str = "0b104b95-3532-4828-8550-89da717b9667";

/// A worker of shard A on a free port, memory only, without a device server.
fn test_config(coordinator_url: String) -> Config {
    use clap::Parser;
    // Every other setting at its default, as a worker started with these flags has it.
    Config::parse_from([
        "worker",
        "--cell",
        "a",
        "--listen",
        "127.0.0.1:0",
        "--coordinator-url",
        &coordinator_url,
        "--cluster-secret",
        SECRET,
        "--push-interval-ms",
        "10",
    ])
}

/// A metrics handle that is not the global recorder (tests run side by side).
fn unregistered_metrics() -> metrics_exporter_prometheus::PrometheusHandle {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .build_recorder()
        .handle()
}

struct TestWorker {
    base: String,
    /// The device server's base URL (`http://` or `https://`), when it was asked for.
    device_base: Option<String>,
    client: reqwest::Client,
    pushes: Arc<Mutex<Vec<LatestBatch>>>,
    /// Of the pushes, those that came in the binary form; and those refused.
    binary_pushes: Arc<AtomicUsize>,
    /// The stand-in takes JSON only while this is set (see [`TestWorker::spawn_with`]).
    json_only: Arc<AtomicBool>,
    refused_pushes: Arc<AtomicUsize>,
    /// Streams opened to the stand-in, and the batches that came as their frames (by stream).
    streams: Arc<AtomicUsize>,
    streamed: Arc<Mutex<Vec<(usize, LatestBatch)>>>,
    /// While set, the stand-in ends the stream at its next frame (503), without taking it.
    cut_stream: Arc<AtomicBool>,
    /// While set, the stand-in's streams go deaf: they take no frame and acknowledge nothing
    /// for the rest of their life (as if their frames sat in a silent network's buffers).
    deaf: Arc<AtomicBool>,
    key: SessionKey,
}

impl TestWorker {
    async fn spawn() -> TestWorker {
        TestWorker::spawn_with_device(None).await
    }

    /// With `Some(tls)`, also a device server on its own port (`Some(None)`: plain HTTP;
    /// `Some(Some((cert, key)))`: TLS with that certificate).
    async fn spawn_with_device(device: Option<Option<(std::path::PathBuf, std::path::PathBuf)>>) -> TestWorker {
        TestWorker::spawn_with(device, false).await
    }

    /// `json_only`: the stand-in coordinator takes latest batches in JSON only, as a build
    /// older than the binary form did (anything else is 400), and has no stream route.
    async fn spawn_with(
        device: Option<Option<(std::path::PathBuf, std::path::PathBuf)>>,
        json_only: bool,
    ) -> TestWorker {
        TestWorker::spawn_configured(device, json_only, |_| {}).await
    }

    /// Like [`TestWorker::spawn_with`], with `configure` changing the worker's settings last.
    async fn spawn_configured(
        device: Option<Option<(std::path::PathBuf, std::path::PathBuf)>>,
        json_only: bool,
        configure: impl FnOnce(&mut Config),
    ) -> TestWorker {
        let json_only = Arc::new(AtomicBool::new(json_only));
        let refuse_binary = json_only.clone();
        let pushes: Arc<Mutex<Vec<LatestBatch>>> = Arc::default();
        let binary_pushes: Arc<AtomicUsize> = Arc::default();
        let refused_pushes: Arc<AtomicUsize> = Arc::default();
        let (recorded, binary, refused) = (pushes.clone(), binary_pushes.clone(), refused_pushes.clone());
        let coordinator = Router::new().route(
            shared::protocol::COORDINATOR_LATEST,
            post(move |headers: HeaderMap, body: Bytes| {
                let (recorded, binary, refused) = (recorded.clone(), binary.clone(), refused.clone());
                let json_only = refuse_binary.load(Ordering::SeqCst);
                async move {
                    let is_binary = headers.get("content-type").is_some_and(|value| value == LATEST_BINARY);
                    let batch = if is_binary && !json_only {
                        decode_latest(&body).ok().map(|(generation, items)| LatestBatch {
                            generation,
                            items: items.iter().map(LatestItem::to_condition).collect(),
                        })
                    } else {
                        serde_json::from_slice::<LatestBatch>(&body).ok()
                    };
                    let Some(batch) = batch else {
                        refused.fetch_add(1, Ordering::SeqCst);
                        return StatusCode::BAD_REQUEST;
                    };
                    if is_binary {
                        binary.fetch_add(1, Ordering::SeqCst);
                    }
                    recorded.lock().push(batch);
                    StatusCode::OK
                }
            }),
        );
        let streams: Arc<AtomicUsize> = Arc::default();
        let streamed: Arc<Mutex<Vec<(usize, LatestBatch)>>> = Arc::default();
        let cut_stream: Arc<AtomicBool> = Arc::default();
        let deaf: Arc<AtomicBool> = Arc::default();
        let coordinator = if json_only.load(Ordering::SeqCst) {
            coordinator
        } else {
            let (opened, recorded, all, cut, deaf) = (
                streams.clone(),
                streamed.clone(),
                pushes.clone(),
                cut_stream.clone(),
                deaf.clone(),
            );
            coordinator.route(
                shared::protocol::COORDINATOR_LATEST_STREAM,
                post(move |headers: HeaderMap, body: axum::body::Body| {
                    let (opened, recorded, all, cut, deaf) =
                        (opened.clone(), recorded.clone(), all.clone(), cut.clone(), deaf.clone());
                    async move {
                        use axum::response::IntoResponse as _;
                        use futures_util::StreamExt as _;
                        if headers.get("content-type").is_none_or(|value| value != LATEST_STREAM) {
                            return StatusCode::UNSUPPORTED_MEDIA_TYPE.into_response();
                        }
                        let stream = opened.fetch_add(1, Ordering::SeqCst) + 1;
                        // The answer's lines, sent while the request goes on.
                        let (answer, answers) = tokio::sync::mpsc::unbounded_channel::<StreamAnswer>();
                        tokio::spawn(async move {
                            let mut frames = LatestFrames::new(1 << 20);
                            let mut body = body.into_data_stream();
                            let mut applied = 0;
                            // Once deaf, for the rest of this stream.
                            let mut deafened = false;
                            let end = |status, reason: &str| StreamAnswer::End {
                                status,
                                reason: reason.into(),
                            };
                            while let Some(chunk) = body.next().await {
                                let Ok(chunk) = chunk else {
                                    let _ = answer.send(end(400, "broke"));
                                    return;
                                };
                                deafened |= deaf.load(Ordering::SeqCst);
                                if deafened {
                                    continue;
                                }
                                frames.push(&chunk);
                                while let Ok(Some(frame)) = frames.next_frame() {
                                    if cut.swap(false, Ordering::SeqCst) {
                                        let _ = answer.send(end(503, "cut"));
                                        return;
                                    }
                                    let Ok((generation, items)) = decode_latest(&frame) else {
                                        let _ = answer.send(end(400, "no batch"));
                                        return;
                                    };
                                    let batch = LatestBatch {
                                        generation,
                                        items: items.iter().map(LatestItem::to_condition).collect(),
                                    };
                                    recorded.lock().push((stream, batch.clone()));
                                    all.lock().push(batch);
                                    applied += 1;
                                    let _ = answer.send(StreamAnswer::Applied(applied));
                                }
                            }
                            let _ = answer.send(end(200, "ended"));
                        });
                        let lines = tokio_stream_of(answers)
                            .map(|answer| Ok::<_, std::convert::Infallible>(Bytes::from(answer.line())));
                        axum::body::Body::from_stream(lines).into_response()
                    }
                }),
            )
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let coordinator_addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, coordinator).await });

        let mut config = Config {
            device_listen: device.as_ref().map(|_| "127.0.0.1:0".parse().unwrap()),
            device_tls_cert: device.clone().flatten().map(|(cert, _)| cert),
            device_tls_key: device.clone().flatten().map(|(_, key)| key),
            ..test_config(format!("http://{coordinator_addr}"))
        };
        configure(&mut config);
        let application = Application::build(config, unregistered_metrics()).await.unwrap();
        let base = format!("http://{}", application.local_addr());
        let device_base = application.device_addr().map(|(address, tls)| {
            let scheme = if tls { "https" } else { "http" };
            format!("{scheme}://{address}")
        });
        tokio::spawn(application.run_until_stopped(std::future::pending()));
        let worker = TestWorker {
            base,
            device_base,
            client: reqwest::Client::new(),
            pushes,
            binary_pushes,
            json_only,
            refused_pushes,
            streams,
            streamed,
            cut_stream,
            deaf,
            key: SessionKey::from_secret(SECRET),
        };
        worker.reset().await;
        worker
    }

    /// Waits (2 s at most) until a pushed batch carries a condition of `timestamp`.
    async fn wait_for_push(&self, timestamp: i64) {
        let pushes = self.pushes.clone();
        wait_until("the push arrives", Duration::from_secs(2), || {
            pushes
                .lock()
                .iter()
                .any(|batch| batch.items.iter().any(|item| item.condition.timestamp == timestamp))
        })
        .await;
    }

    /// The stream (numbered from 1) whose frame first carried a condition of `timestamp`.
    fn stream_carrying(&self, timestamp: i64) -> usize {
        self.streamed
            .lock()
            .iter()
            .find(|(_, batch)| batch.items.iter().any(|item| item.condition.timestamp == timestamp))
            .map(|(stream, _)| *stream)
            .expect("a stream carried it")
    }

    /// Resets to one published ISU of alice with three conditions.
    async fn reset(&self) {
        let condition = |timestamp, text: &str, sitting| WireCondition {
            timestamp,
            flags: shared::domain::Flags::new(sitting, shared::domain::parse_condition(text).unwrap()),
            message: format!("m{timestamp}"),
        };
        let reset = ResetShard {
            generation: GENERATION,
            users: vec!["alice".into(), "bob".into()],
            isus: vec![ShardIsu {
                id: 1,
                uuid: ISU.into(),
                owner: "alice".into(),
                name: "椅子".into(),
                character: "すなお".into(),
                conditions: vec![
                    condition(1000, INFO, true),
                    condition(2000, WARNING, false),
                    condition(3000, CRITICAL, true),
                ],
            }],
        };
        let response = self
            .internal(shared::protocol::WORKER_RESET, &serde_json::to_value(reset).unwrap())
            .await;
        assert_eq!(response, StatusCode::OK);
    }

    async fn internal(&self, path: &str, body: &Value) -> StatusCode {
        self.client
            .post(format!("{}{path}", self.base))
            .header(SECRET_HEADER, SECRET)
            .json(body)
            .send()
            .await
            .unwrap()
            .status()
    }

    fn cookie(&self, user: &str, generation: u64) -> String {
        format!("{COOKIE_NAME}={}", self.key.sign(user, generation))
    }

    async fn get(&self, path: &str, user: Option<&str>) -> (StatusCode, String, String) {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let Some(user) = user {
            request = request.header("cookie", self.cookie(user, GENERATION));
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, content_type, response.text().await.unwrap())
    }

    async fn post_conditions(&self, uuid: &str, body: &str) -> StatusCode {
        self.client
            .post(format!("{}/api/condition/{uuid}", self.base))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap()
            .status()
    }

    async fn timestamps(&self, query: &str) -> Vec<i64> {
        let (status, _, body) = self.get(&format!("/api/condition/{ISU}?{query}"), Some("alice")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let items: Vec<Value> = serde_json::from_str(&body).unwrap();
        items.iter().map(|item| item["timestamp"].as_i64().unwrap()).collect()
    }
}

fn batch(conditions: &[(i64, &str)]) -> String {
    let items: Vec<Value> = conditions
        .iter()
        .map(|(timestamp, condition)| json!({"is_sitting": false, "condition": condition, "message": "hello", "timestamp": timestamp}))
        .collect();
    serde_json::to_string(&items).unwrap()
}

async fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn condition_list_filters_orders_and_shapes_items() {
    let worker = TestWorker::spawn().await;
    let (status, content_type, body) = worker
        .get(
            &format!("/api/condition/{ISU}?end_time=3001&condition_level=info,warning,critical"),
            Some("alice"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(content_type.starts_with("application/json"));
    let items: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        items[0],
        json!({"jia_isu_uuid": ISU, "isu_name": "椅子", "timestamp": 3000, "is_sitting": true,
               "condition": CRITICAL, "condition_level": "critical", "message": "m3000"})
    );
    assert_eq!(
        worker
            .timestamps("end_time=3000&condition_level=info,warning,critical")
            .await,
        vec![2000, 1000]
    );
    assert_eq!(
        worker
            .timestamps("end_time=9999&condition_level=warning,critical")
            .await,
        vec![3000, 2000]
    );
    assert_eq!(
        worker
            .timestamps("end_time=9999&condition_level=info&start_time=1000")
            .await,
        vec![1000]
    );
    assert_eq!(
        worker
            .timestamps("end_time=9999&condition_level=info,critical&start_time=1001")
            .await,
        vec![3000]
    );
    assert_eq!(
        worker.timestamps("end_time=9999&condition_level=nothing").await,
        Vec::<i64>::new()
    );
    assert_eq!(
        worker
            .timestamps("end_time=9999&condition_level=info&start_time=")
            .await,
        vec![1000]
    );
}

#[tokio::test]
async fn condition_list_limit_is_twenty_after_the_level_filter() {
    let worker = TestWorker::spawn().await;
    let posts: Vec<(i64, &str)> = (0..30)
        .map(|i| (10_000 + i, if i % 2 == 0 { INFO } else { WARNING }))
        .collect();
    assert_eq!(worker.post_conditions(ISU, &batch(&posts)).await, StatusCode::ACCEPTED);
    let warnings = worker.timestamps("end_time=99999&condition_level=warning").await;
    assert_eq!(warnings.len(), 16, "15 posted warnings plus the initial one");
    let all = worker
        .timestamps("end_time=99999&condition_level=info,warning,critical")
        .await;
    assert_eq!(all.len(), 20);
    assert_eq!(all[0], 10_029);
    assert!(all.windows(2).all(|pair| pair[0] > pair[1]), "strictly descending");
}

#[tokio::test]
async fn condition_list_errors_in_contract_order() {
    let worker = TestWorker::spawn().await;
    let cases = [
        (
            "condition_level=info",
            None,
            StatusCode::UNAUTHORIZED,
            "you are not signed in",
        ),
        (
            "condition_level=info",
            Some("alice"),
            StatusCode::BAD_REQUEST,
            "bad format: end_time",
        ),
        (
            "end_time=end_time&condition_level=info",
            Some("alice"),
            StatusCode::BAD_REQUEST,
            "bad format: end_time",
        ),
        (
            "end_time=10",
            Some("alice"),
            StatusCode::BAD_REQUEST,
            "missing: condition_level",
        ),
        (
            "end_time=10&condition_level=",
            Some("alice"),
            StatusCode::BAD_REQUEST,
            "missing: condition_level",
        ),
        (
            "end_time=10&condition_level=info&start_time=start_time",
            Some("alice"),
            StatusCode::BAD_REQUEST,
            "bad format: start_time",
        ),
        (
            "end_time=10&condition_level=info",
            Some("bob"),
            StatusCode::NOT_FOUND,
            "not found: isu",
        ),
    ];
    for (query, user, status, message) in cases {
        let (got_status, content_type, body) = worker.get(&format!("/api/condition/{ISU}?{query}"), user).await;
        assert_eq!((got_status, body.as_str()), (status, message), "{query} as {user:?}");
        assert!(content_type.starts_with("text/plain"), "{content_type}");
    }
    let (status, _, body) = worker
        .get(
            "/api/condition/ffffffff-0000-0000-0000-000000000000?end_time=1&condition_level=info",
            Some("alice"),
        )
        .await;
    assert_eq!((status, body.as_str()), (StatusCode::NOT_FOUND, "not found: isu"));
}

#[tokio::test]
async fn sessions_need_a_valid_signature_and_a_known_user_or_current_generation() {
    let worker = TestWorker::spawn().await;
    let path = format!("{}/api/condition/{ISU}?end_time=1&condition_level=info", worker.base);
    let status = |cookie: String| {
        let request = worker.client.get(&path).header("cookie", cookie);
        async move { request.send().await.unwrap().status() }
    };
    assert_eq!(
        status(worker.cookie("alice", GENERATION + 1)).await,
        StatusCode::OK,
        "known user, older session"
    );
    assert_eq!(
        status(worker.cookie("carol", GENERATION + 1)).await,
        StatusCode::UNAUTHORIZED,
        "unknown user from another generation"
    );
    assert_eq!(
        status(worker.cookie("carol", GENERATION)).await,
        StatusCode::NOT_FOUND,
        "new user of this generation"
    );
    let foreign = SessionKey::from_secret("other").sign("alice", GENERATION);
    assert_eq!(
        status(format!("{COOKIE_NAME}={foreign}")).await,
        StatusCode::UNAUTHORIZED
    );
    let synced = json!({"generation": GENERATION, "users": ["carol"]});
    assert_eq!(
        worker.internal(shared::protocol::WORKER_USERS, &synced).await,
        StatusCode::OK
    );
    assert_eq!(
        status(worker.cookie("carol", GENERATION + 1)).await,
        StatusCode::NOT_FOUND,
        "synced user"
    );
}

#[tokio::test]
async fn device_posts_are_all_or_nothing() {
    let worker = TestWorker::spawn().await;
    let bad_batch = format!(
        r#"[{{"is_sitting":true,"condition":"{INFO}","message":"ok","timestamp":5000}},
            {{"is_sitting":true,"condition":"is_dirty=true,is_overweight=false,is_brokan=false","message":"x","timestamp":5001}}]"#
    );
    assert_eq!(worker.post_conditions(ISU, &bad_batch).await, StatusCode::BAD_REQUEST);
    assert_eq!(worker.post_conditions(ISU, "[]").await, StatusCode::BAD_REQUEST);
    assert_eq!(worker.post_conditions(ISU, "not json").await, StatusCode::BAD_REQUEST);
    assert_eq!(
        worker.post_conditions(ISU, r#"[{"is_sitting":true}]"#).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        worker
            .post_conditions("eeeeeeee-0000-0000-0000-000000000000", &batch(&[(1, INFO)]))
            .await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        worker
            .timestamps("end_time=99999&condition_level=info,warning,critical")
            .await,
        vec![3000, 2000, 1000]
    );
    assert_eq!(
        worker
            .post_conditions(ISU, &batch(&[(5000, INFO), (4000, WARNING)]))
            .await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        worker
            .timestamps("end_time=99999&condition_level=info,warning,critical")
            .await,
        vec![5000, 4000, 3000, 2000, 1000]
    );
}

#[tokio::test]
async fn graph_has_twenty_four_hours_from_the_truncated_datetime() {
    let worker = TestWorker::spawn().await;
    let (status, content_type, body) = worker
        .get(&format!("/api/isu/{ISU}/graph?datetime=1800"), Some("alice"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(content_type.starts_with("application/json"));
    let points: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(points.len(), 24);
    assert_eq!(points[0]["start_at"], 0);
    assert_eq!(points[0]["end_at"], 3600);
    assert_eq!(points[0]["condition_timestamps"], json!([1000, 2000, 3000]));
    // info+sitting (3), warning (2), critical+sitting (1): raw 6 → 600/3/3 = 66.
    assert_eq!(
        points[0]["data"],
        json!({"score": 66, "percentage": {"sitting": 66, "is_broken": 33, "is_dirty": 66, "is_overweight": 33}})
    );
    assert_eq!(points[1]["data"], Value::Null);
    assert_eq!(points[1]["condition_timestamps"], json!([]));
    assert_eq!(points[23]["start_at"], 23 * 3600);

    for (query, user, status, message) in [
        ("datetime=1", None, StatusCode::UNAUTHORIZED, "you are not signed in"),
        ("", Some("alice"), StatusCode::BAD_REQUEST, "missing: datetime"),
        ("datetime=", Some("alice"), StatusCode::BAD_REQUEST, "missing: datetime"),
        (
            "datetime=datetime",
            Some("alice"),
            StatusCode::BAD_REQUEST,
            "bad format: datetime",
        ),
        ("datetime=1", Some("bob"), StatusCode::NOT_FOUND, "not found: isu"),
    ] {
        let (got, _, body) = worker.get(&format!("/api/isu/{ISU}/graph?{query}"), user).await;
        assert_eq!((got, body.as_str()), (status, message), "{query:?} as {user:?}");
    }
}

#[tokio::test]
async fn provisional_isus_accept_posts_but_stay_invisible_until_published() {
    let worker = TestWorker::spawn().await;
    let provisional = |uuid: &str, id: i64| json!({"generation": GENERATION, "id": id, "uuid": uuid, "owner": "alice", "name": "new"});
    let accept = |uuid: &str, id: i64| json!({"generation": GENERATION, "id": id, "uuid": uuid, "record": format!("record-{id}")});
    let call = |path: &'static str, body: Value| {
        let worker = &worker;
        async move { worker.internal(path, &body).await }
    };
    use shared::protocol::{WORKER_ACCEPT, WORKER_PROVISIONAL, WORKER_PUBLISH, WORKER_ROLLBACK, WORKER_UNPUBLISHED};
    let uuid = "2a000000-0000-4000-8000-000000000000";
    assert_eq!(
        call(WORKER_PROVISIONAL, provisional(uuid, 29)).await,
        StatusCode::CREATED
    );
    assert_eq!(
        call(WORKER_PROVISIONAL, provisional(uuid, 29)).await,
        StatusCode::OK,
        "a repeated message (the coordinator retries a call whose answer it lost)"
    );
    let other_owner = json!({"generation": GENERATION, "id": 29, "uuid": uuid, "owner": "mallory", "name": "new"});
    assert_eq!(
        call(WORKER_PROVISIONAL, other_owner).await,
        StatusCode::CONFLICT,
        "the same id with other fields is not a repeat"
    );
    // A later registration replaces the unpublished leftover of an earlier one that JIA did
    // not accept.
    assert_eq!(
        call(WORKER_PROVISIONAL, provisional(uuid, 30)).await,
        StatusCode::CREATED
    );
    // JIA's device posts before JIA answers: taken at once.
    assert_eq!(
        worker.post_conditions(uuid, &batch(&[(100, INFO)])).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        call(WORKER_ACCEPT, accept(uuid, 29)).await,
        StatusCode::NOT_FOUND,
        "the replaced registration"
    );
    assert_eq!(call(WORKER_ACCEPT, accept(uuid, 30)).await, StatusCode::OK);
    assert_eq!(
        call(WORKER_ACCEPT, accept(uuid, 30)).await,
        StatusCode::OK,
        "idempotent"
    );
    assert_eq!(
        call(WORKER_PROVISIONAL, provisional(uuid, 31)).await,
        StatusCode::CONFLICT,
        "a registration JIA accepted is never replaced"
    );
    let held = worker
        .client
        .post(format!("{}{WORKER_UNPUBLISHED}", worker.base))
        .header(SECRET_HEADER, SECRET)
        .json(&json!({"generation": GENERATION}))
        .send()
        .await
        .unwrap()
        .json::<Vec<shared::protocol::UnpublishedIsu>>()
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (held[0].id, held[0].accepted.as_deref()),
        (30, Some("record-30")),
        "the first record stays"
    );
    let list = format!("/api/condition/{uuid}?end_time=999&condition_level=info");
    assert_eq!(worker.get(&list, Some("alice")).await.0, StatusCode::NOT_FOUND);
    // A sweep that listed it before the acceptance came decides a rollback: refused, the
    // device's posts stay (the next sweep finishes the registration).
    let rollback_of = |id: i64| json!({"generation": GENERATION, "id": id, "uuid": uuid});
    assert_eq!(call(WORKER_ROLLBACK, rollback_of(30)).await, StatusCode::CONFLICT);
    assert_eq!(
        worker.post_conditions(uuid, &batch(&[(110, INFO)])).await,
        StatusCode::ACCEPTED,
        "still held"
    );
    let publish = |id: i64| json!({"generation": GENERATION, "uuid": uuid, "id": id, "character": "すなお"});
    assert_eq!(
        call(WORKER_PUBLISH, publish(29)).await,
        StatusCode::NOT_FOUND,
        "the replaced registration"
    );
    assert_eq!(call(WORKER_PUBLISH, publish(30)).await, StatusCode::OK);
    let (status, _, body) = worker.get(&list, Some("alice")).await;
    assert_eq!(status, StatusCode::OK);
    let listed = serde_json::from_str::<Value>(&body).unwrap();
    assert_eq!(
        (&listed[0]["timestamp"], &listed[1]["timestamp"]),
        (&json!(110), &json!(100))
    );
    assert_eq!(
        call(WORKER_PROVISIONAL, provisional(uuid, 31)).await,
        StatusCode::CONFLICT,
        "a published ISU stays"
    );

    let doomed = "4b000000-0000-4000-8000-000000000000";
    assert_eq!(
        call(WORKER_PROVISIONAL, provisional(doomed, 40)).await,
        StatusCode::CREATED
    );
    assert_eq!(
        worker.post_conditions(doomed, &batch(&[(100, INFO)])).await,
        StatusCode::ACCEPTED
    );
    let rollback = |id: i64| json!({"generation": GENERATION, "id": id, "uuid": doomed});
    assert_eq!(call(WORKER_ROLLBACK, rollback(39)).await, StatusCode::OK);
    assert_eq!(
        worker.post_conditions(doomed, &batch(&[(150, INFO)])).await,
        StatusCode::ACCEPTED,
        "another registration's rollback is ignored"
    );
    assert_eq!(call(WORKER_ROLLBACK, rollback(40)).await, StatusCode::OK);
    assert_eq!(
        worker.post_conditions(doomed, &batch(&[(200, INFO)])).await,
        StatusCode::NOT_FOUND
    );
    let stale = json!({"generation": GENERATION + 1, "id": 50, "uuid": "6c", "owner": "alice", "name": "x"});
    assert_eq!(call(WORKER_PROVISIONAL, stale).await, StatusCode::PRECONDITION_FAILED);

    // A leader deposed while JIA answered still hands over JIA's acceptance; its other
    // calls are fenced off.
    let in_term = |path: &'static str, term: u64, body: Value| {
        let worker = &worker;
        async move {
            worker
                .client
                .post(format!("{}{path}", worker.base))
                .header(SECRET_HEADER, SECRET)
                .header(shared::protocol::TERM_HEADER, term.to_string())
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let late = "5d000000-0000-4000-8000-000000000000";
    assert_eq!(
        in_term(WORKER_PROVISIONAL, 3, provisional(late, 60)).await,
        StatusCode::CREATED
    );
    assert_eq!(
        in_term(WORKER_UNPUBLISHED, 4, json!({"generation": GENERATION})).await,
        StatusCode::OK,
        "the next leader's sweep raises the term"
    );
    assert_eq!(
        in_term(WORKER_PROVISIONAL, 3, provisional("5e", 61)).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(in_term(WORKER_ACCEPT, 3, accept(late, 60)).await, StatusCode::OK);
    let rollback_late = json!({"generation": GENERATION, "id": 60, "uuid": late});
    assert_eq!(in_term(WORKER_ROLLBACK, 4, rollback_late).await, StatusCode::CONFLICT);
}

#[tokio::test]
async fn latest_condition_is_pushed_within_a_few_intervals_and_only_when_changed() {
    let worker = TestWorker::spawn().await;
    let posted_at = Instant::now();
    assert_eq!(
        worker
            .post_conditions(ISU, &batch(&[(7000, WARNING), (6000, INFO)]))
            .await,
        StatusCode::ACCEPTED
    );
    let pushes = worker.pushes.clone();
    worker.wait_for_push(7000).await;
    let lag = posted_at.elapsed();
    let batches = pushes.lock().clone();
    let pushed: Vec<_> = batches.iter().flat_map(|batch| batch.items.iter()).collect();
    assert_eq!(pushed.len(), 1, "one item per changed ISU: {pushed:?}");
    assert_eq!(pushed[0].uuid, ISU);
    assert_eq!(pushed[0].condition.message, "hello");
    assert!(batches.iter().all(|batch| batch.generation == GENERATION));
    eprintln!("post → push lag {lag:?}");
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(
        pushes.lock().len(),
        batches.len(),
        "nothing is pushed when nothing changed"
    );
}

#[tokio::test]
async fn latest_batches_go_binary_and_fall_back_to_json_for_an_older_coordinator() {
    // The current coordinator: binary batches, as frames of one stream.
    let worker = TestWorker::spawn().await;
    assert_eq!(
        worker.post_conditions(ISU, &batch(&[(7000, WARNING)])).await,
        StatusCode::ACCEPTED
    );
    let pushes = worker.pushes.clone();
    worker.wait_for_push(7000).await;
    assert_eq!(worker.streamed.lock().len(), pushes.lock().len());
    assert_eq!(worker.streams.load(Ordering::SeqCst), 1);
    assert_eq!(worker.binary_pushes.load(Ordering::SeqCst), 0);
    assert_eq!(worker.refused_pushes.load(Ordering::SeqCst), 0);

    // One that takes JSON only (a build without streams): the binary batch is refused once,
    // then sent again as JSON, and later ones are JSON too (also once the coordinator takes
    // binary again, for a while); nothing is lost.
    let worker = TestWorker::spawn_with(None, true).await;
    let refused_at = Instant::now();
    for (timestamp, message) in [(7000, "first"), (8000, "second")] {
        if timestamp == 8000 {
            worker.json_only.store(false, Ordering::SeqCst);
        }
        let body = json!([{"is_sitting": false, "condition": INFO, "message": message, "timestamp": timestamp}]);
        assert_eq!(
            worker.post_conditions(ISU, &body.to_string()).await,
            StatusCode::ACCEPTED
        );
        let pushes = worker.pushes.clone();
        wait_until("the push arrives as JSON", Duration::from_secs(2), || {
            pushes.lock().iter().any(|batch| {
                batch
                    .items
                    .iter()
                    .any(|item| item.condition.timestamp == timestamp && item.condition.message == message)
            })
        })
        .await;
    }
    assert_eq!(worker.refused_pushes.load(Ordering::SeqCst), 1);
    assert_eq!(worker.binary_pushes.load(Ordering::SeqCst), 0);
    assert!(refused_at.elapsed() < worker::pusher::JSON_FOR);

    // After that while, the binary form is tried again, and taken.
    let after_the_while = worker::pusher::JSON_FOR + Duration::from_millis(300);
    tokio::time::sleep(after_the_while.saturating_sub(refused_at.elapsed())).await;
    assert_eq!(
        worker.post_conditions(ISU, &batch(&[(9000, WARNING)])).await,
        StatusCode::ACCEPTED
    );
    worker.wait_for_push(9000).await;
    assert_eq!(worker.binary_pushes.load(Ordering::SeqCst), 1);
    assert_eq!(worker.refused_pushes.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_latest_stream_that_ends_loses_nothing_the_next_starts_with_every_isu() {
    let worker = TestWorker::spawn().await;
    assert_eq!(
        worker.post_conditions(ISU, &batch(&[(7000, WARNING)])).await,
        StatusCode::ACCEPTED
    );
    worker.wait_for_push(7000).await;
    assert_eq!(worker.streams.load(Ordering::SeqCst), 1);
    // The first frame of a stream holds every published ISU (here the one), changed or not.
    let first = worker.streamed.lock()[0].clone();
    assert_eq!((first.0, first.1.items[0].uuid.as_str()), (1, ISU));

    // The coordinator ends the stream at the frame carrying 8000, without taking it: the
    // worker opens another, whose first frame carries it.
    worker.cut_stream.store(true, Ordering::SeqCst);
    assert_eq!(
        worker.post_conditions(ISU, &batch(&[(8000, INFO)])).await,
        StatusCode::ACCEPTED
    );
    worker.wait_for_push(8000).await;
    assert!(!worker.cut_stream.load(Ordering::SeqCst), "the stream was cut");
    assert_eq!(worker.stream_carrying(8000), 2, "carried by the next stream");
    assert_eq!(
        worker.streamed.lock().iter().filter(|(stream, _)| *stream == 2).count(),
        1,
        "as its first frame"
    );
    assert_eq!(
        worker.binary_pushes.load(Ordering::SeqCst),
        0,
        "never one request per batch"
    );
}

/// The lines of a stream's answer as a stream, until their sender is dropped.
fn tokio_stream_of(
    mut answers: tokio::sync::mpsc::UnboundedReceiver<StreamAnswer>,
) -> impl futures_util::Stream<Item = StreamAnswer> {
    futures_util::stream::poll_fn(move |context| answers.poll_recv(context))
}

#[tokio::test]
async fn a_latest_stream_whose_acknowledgments_stop_is_dropped_and_the_next_carries_its_frames() {
    let worker = TestWorker::spawn().await;
    assert_eq!(
        worker.post_conditions(ISU, &batch(&[(7000, WARNING)])).await,
        StatusCode::ACCEPTED
    );
    worker.wait_for_push(7000).await;
    assert_eq!(worker.streams.load(Ordering::SeqCst), 1);

    // The coordinator's end of the stream goes silent: the frame carrying 8000 is neither
    // taken nor acknowledged. After `ACK_WAIT` the worker drops the stream, and the next
    // one carries 8000 in its first frame.
    worker.deaf.store(true, Ordering::SeqCst);
    let deaf_at = Instant::now();
    assert_eq!(
        worker.post_conditions(ISU, &batch(&[(8000, INFO)])).await,
        StatusCode::ACCEPTED
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    worker.deaf.store(false, Ordering::SeqCst);
    let pushes = worker.pushes.clone();
    wait_until(
        "8000 is carried by another stream",
        worker::pusher::ACK_WAIT + Duration::from_secs(3),
        || {
            pushes
                .lock()
                .iter()
                .any(|batch| batch.items.iter().any(|item| item.condition.timestamp == 8000))
        },
    )
    .await;
    assert!(deaf_at.elapsed() >= worker::pusher::ACK_WAIT);
    assert_eq!(worker.stream_carrying(8000), 2, "carried by the next stream");
    assert_eq!(worker.streams.load(Ordering::SeqCst), 2);
}

/// A second coordinator (a replica) that records the binary batches it takes.
fn recording_replica() -> (Router, Arc<Mutex<Vec<LatestBatch>>>) {
    let pushes: Arc<Mutex<Vec<LatestBatch>>> = Arc::default();
    let recorded = pushes.clone();
    let router = Router::new().route(
        shared::protocol::COORDINATOR_LATEST,
        post(move |body: Bytes| {
            let recorded = recorded.clone();
            async move {
                let Ok((generation, items)) = decode_latest(&body) else {
                    return StatusCode::BAD_REQUEST;
                };
                recorded.lock().push(LatestBatch {
                    generation,
                    items: items.iter().map(LatestItem::to_condition).collect(),
                });
                StatusCode::OK
            }
        }),
    );
    (router, pushes)
}

#[tokio::test]
async fn latest_conditions_reach_every_replica_and_one_that_was_down_gets_them_when_it_is_up() {
    // The replica's address, free until it starts.
    let reserved = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let replica_addr = reserved.local_addr().unwrap();
    drop(reserved);
    let worker = TestWorker::spawn_configured(None, false, |config| {
        config.coordinator_url.push(format!("http://{replica_addr}"));
    })
    .await;
    assert_eq!(
        worker.post_conditions(ISU, &batch(&[(7000, WARNING)])).await,
        StatusCode::ACCEPTED
    );
    // The replica that is up takes it at once, whatever the other does.
    worker.wait_for_push(7000).await;

    let (router, replica_pushes) = recording_replica();
    let listener = tokio::net::TcpListener::bind(replica_addr).await.unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let pushes = replica_pushes.clone();
    wait_until(
        "the replica that was down gets the latest",
        Duration::from_secs(3),
        || {
            pushes
                .lock()
                .iter()
                .any(|batch| batch.items.iter().any(|item| item.condition.timestamp == 7000))
        },
    )
    .await;
    // From then on both get every change.
    assert_eq!(
        worker.post_conditions(ISU, &batch(&[(8000, INFO)])).await,
        StatusCode::ACCEPTED
    );
    worker.wait_for_push(8000).await;
    let pushes = replica_pushes.clone();
    wait_until("the replica gets the next change", Duration::from_secs(2), || {
        pushes
            .lock()
            .iter()
            .any(|batch| batch.items.iter().any(|item| item.condition.timestamp == 8000))
    })
    .await;
}

#[tokio::test]
async fn control_calls_of_a_deposed_leaders_term_are_refused() {
    use shared::protocol::{TERM_HEADER, WORKER_PROVISIONAL, WORKER_ROLLBACK, WORKER_USERS};
    let worker = TestWorker::spawn().await;
    let call = |path: &'static str, body: Value, secret: Option<&'static str>, term: Option<&'static str>| {
        let worker = &worker;
        async move {
            let mut request = worker.client.post(format!("{}{path}", worker.base)).json(&body);
            if let Some(secret) = secret {
                request = request.header(SECRET_HEADER, secret);
            }
            if let Some(term) = term {
                request = request.header(TERM_HEADER, term);
            }
            let response = request.send().await.unwrap();
            (response.status(), response.text().await.unwrap())
        }
    };
    let users = || json!({"generation": GENERATION, "users": ["dave"]});
    assert_eq!(
        call(WORKER_USERS, users(), Some(SECRET), Some("5")).await.0,
        StatusCode::OK
    );
    // Without the secret a term is not even read: it must not raise the fence.
    assert_eq!(
        call(WORKER_USERS, users(), None, Some("900")).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(WORKER_USERS, users(), Some("wrong"), Some("900")).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(WORKER_USERS, users(), Some(SECRET), Some("6")).await.0,
        StatusCode::OK
    );
    // The old leader (term 5) wakes up and goes on with a registration: refused, and the
    // provisional ISU is never made.
    let uuid = "3b000000-0000-4000-8000-000000000000";
    let provisional = json!({"generation": GENERATION, "id": 41, "uuid": uuid, "owner": "alice", "name": "old"});
    let (status, message) = call(WORKER_PROVISIONAL, provisional.clone(), Some(SECRET), Some("5")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(message, "fenced: leader term 5 is older than term 6");
    let (status, message) = call(WORKER_PROVISIONAL, provisional.clone(), Some(SECRET), Some("later")).await;
    assert_eq!(
        (status, message.as_str()),
        (StatusCode::BAD_REQUEST, "x-isu-leader-term is not a term")
    );
    let rollback = json!({"generation": GENERATION, "id": 41, "uuid": uuid});
    assert_eq!(
        call(WORKER_ROLLBACK, rollback, Some(SECRET), Some("5")).await.0,
        StatusCode::FORBIDDEN
    );
    // The current leader's call, and a lone coordinator's (no term), are taken.
    assert_eq!(
        call(WORKER_PROVISIONAL, provisional, Some(SECRET), Some("6")).await.0,
        StatusCode::CREATED
    );
    let lone = json!({"generation": GENERATION, "id": 42, "uuid": "3c000000-0000-4000-8000-000000000000", "owner": "alice", "name": "lone"});
    assert_eq!(
        call(WORKER_PROVISIONAL, lone, Some(SECRET), None).await.0,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn internal_routes_require_the_cluster_secret() {
    let worker = TestWorker::spawn().await;
    for path in ["/internal/reset", "/internal/isu/provisional", "/internal/users"] {
        let response = worker
            .client
            .post(format!("{}{path}", worker.base))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    for path in ["/metrics", "/debug/pprof/profile?seconds=1"] {
        let response = worker
            .client
            .get(format!("{}{path}", worker.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let metrics = worker
        .client
        .get(format!("{}/metrics", worker.base))
        .header("authorization", format!("Bearer {SECRET}"))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
}

#[tokio::test]
async fn profile_endpoint_returns_a_flamegraph() {
    let worker = TestWorker::spawn().await;
    // Keep the worker busy while it is profiled, so the flamegraph has samples.
    let deadline = Instant::now() + Duration::from_millis(1500);
    let load = {
        let (client, base) = (worker.client.clone(), worker.base.clone());
        tokio::spawn(async move {
            let mut timestamp = 100_000;
            while Instant::now() < deadline {
                timestamp += 1;
                let body = batch(&[(timestamp, INFO)]);
                let _ = client
                    .post(format!("{base}/api/condition/{ISU}"))
                    .body(body)
                    .send()
                    .await;
            }
        })
    };
    let response = worker
        .client
        .get(format!("{}/debug/pprof/profile?seconds=1&format=svg", worker.base))
        .header(SECRET_HEADER, SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.text().await.unwrap();
    assert!(body.contains("<svg"), "{}", &body[..body.len().min(200)]);
    load.await.unwrap();
    let protobuf = worker
        .client
        .get(format!("{}/debug/pprof/profile?seconds=1", worker.base))
        .header(SECRET_HEADER, SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(protobuf.status(), StatusCode::OK);
    assert!(!protobuf.bytes().await.unwrap().is_empty());
    let bad = worker
        .client
        .get(format!("{}/debug/pprof/profile?seconds=0", worker.base))
        .header(SECRET_HEADER, SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
}

/// `POST {device}/api/condition/{uuid}` with a JSON body.
async fn device_post(client: &reqwest::Client, device: &str, uuid: &str, body: String) -> reqwest::Response {
    client
        .post(format!("{device}/api/condition/{uuid}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// Every path and method the device server must not serve: reads, internal, metrics, profiling.
async fn assert_device_server_serves_posts_only(worker: &TestWorker, client: &reqwest::Client) {
    let device = worker.device_base.as_deref().expect("a device server");
    let accepted = device_post(client, device, ISU, batch(&[(5000, INFO), (5001, CRITICAL)])).await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
    assert_eq!(
        worker.timestamps("end_time=9999&condition_level=info,critical").await[..2],
        [5001, 5000]
    );
    // The same limits and all-or-nothing validation as on the main listener.
    let refused = device_post(client, device, ISU, batch(&[(6000, INFO), (6001, "is_dirty=maybe")])).await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(refused.text().await.unwrap(), "bad request body");
    assert!(!worker
        .timestamps("end_time=9999&condition_level=info")
        .await
        .contains(&6000));
    let unknown = device_post(
        client,
        device,
        "ffffffff-0000-4000-8000-000000000000",
        batch(&[(7000, INFO)]),
    )
    .await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let too_large = device_post(
        client,
        device,
        ISU,
        " ".repeat(shared::ingest::CONDITION_BODY_LIMIT + 1),
    )
    .await;
    assert_eq!(too_large.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // The path's UUID percent-decoded, as the main listener's route takes it.
    let encoded = ISU.replacen('-', "%2D", 1);
    let decoded = device_post(client, device, &encoded, batch(&[(5002, INFO)])).await;
    assert_eq!(decoded.status(), StatusCode::ACCEPTED);
    assert_eq!(
        worker.timestamps("end_time=9999&condition_level=info,critical").await[0],
        5002
    );

    let read = client
        .get(format!(
            "{device}/api/condition/{ISU}?end_time=9999&condition_level=info"
        ))
        .header("cookie", worker.cookie("alice", GENERATION))
        .send()
        .await
        .unwrap();
    assert_eq!(
        read.status(),
        StatusCode::METHOD_NOT_ALLOWED,
        "no reads on the device server"
    );
    for path in [
        shared::protocol::WORKER_RESET,
        shared::protocol::WORKER_USERS,
        shared::protocol::WORKER_PROVISIONAL,
        shared::protocol::METRICS,
        shared::protocol::PPROF_PROFILE,
        shared::protocol::HEALTH,
        "/api/isu/x/graph",
        "/",
    ] {
        for method in [reqwest::Method::GET, reqwest::Method::POST] {
            let response = client
                .request(method.clone(), format!("{device}{path}"))
                .header(SECRET_HEADER, SECRET)
                .body("{}")
                .send()
                .await
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::NOT_FOUND,
                "{method} {path} on the device server"
            );
        }
    }
}

#[tokio::test]
async fn the_device_server_takes_posts_and_nothing_else() {
    let worker = TestWorker::spawn_with_device(Some(None)).await;
    assert!(worker.device_base.as_deref().unwrap().starts_with("http://"));
    assert_device_server_serves_posts_only(&worker, &reqwest::Client::new()).await;
}

/// A self-signed certificate for 127.0.0.1 and its key, written as PEM files in a fresh directory.
fn self_signed_certificate() -> (
    tempdir::Dir,
    std::path::PathBuf,
    std::path::PathBuf,
    reqwest::Certificate,
) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("generating a certificate");
    let dir = tempdir::Dir::new();
    let cert = dir.path.join("device.crt");
    let key = dir.path.join("device.key");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    let trusted = reqwest::Certificate::from_pem(certified.cert.pem().as_bytes()).unwrap();
    (dir, cert, key, trusted)
}

#[tokio::test]
async fn the_device_server_speaks_tls_with_http2_and_http1() {
    let (_dir, cert, key, trusted) = self_signed_certificate();
    let worker = TestWorker::spawn_with_device(Some(Some((cert, key)))).await;
    let device = worker.device_base.clone().unwrap();
    assert!(device.starts_with("https://"), "{device}");
    let http2 = reqwest::Client::builder()
        .add_root_certificate(trusted.clone())
        .build()
        .unwrap();
    let http1 = reqwest::Client::builder()
        .add_root_certificate(trusted)
        .http1_only()
        .build()
        .unwrap();
    for (client, version) in [(&http2, reqwest::Version::HTTP_2), (&http1, reqwest::Version::HTTP_11)] {
        let response = device_post(client, &device, ISU, batch(&[(4000, WARNING)])).await;
        assert_eq!((response.status(), response.version()), (StatusCode::ACCEPTED, version));
    }
    assert_device_server_serves_posts_only(&worker, &http2).await;
    // Plain HTTP to the TLS port gets no answer, and a client that does not trust the certificate is refused.
    let plain = reqwest::Client::new()
        .post(format!("{}/api/condition/{ISU}", device.replace("https://", "http://")))
        .body(batch(&[(4001, INFO)]))
        .send()
        .await;
    assert!(plain.map_or(true, |response| !response.status().is_success()));
    let untrusting = reqwest::Client::new()
        .post(format!("{device}/api/condition/{ISU}"))
        .body(batch(&[(4002, INFO)]))
        .send()
        .await;
    assert!(
        untrusting.is_err(),
        "an untrusted certificate is refused: {untrusting:?}"
    );
    assert!(!worker
        .timestamps("end_time=9999&condition_level=info")
        .await
        .contains(&4001));
}

/// Reads from `stream` until it closes (at most 5 s); what it sent, and when it closed.
async fn read_until_closed(stream: &mut tokio::net::TcpStream) -> (String, Instant) {
    use tokio::io::AsyncReadExt;
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut received))
        .await
        .expect("the device server closes the connection within 5 s")
        .expect("reading from the device server");
    (String::from_utf8_lossy(&received).into_owned(), Instant::now())
}

/// Devices reach the device server from outside: a connection that sends no request, half a
/// head or a trickled body is closed after `--device-read-timeout-ms` (a late body gets 408
/// first and stores nothing), while a kept-alive connection that posts in time is served.
#[tokio::test]
async fn the_device_server_closes_stalled_connections_and_answers_a_late_body_408() {
    use tokio::io::AsyncWriteExt;
    const TIMEOUT: Duration = Duration::from_millis(400);
    let worker = TestWorker::spawn_configured(Some(None), false, |config| {
        config.device_read_timeout_ms = TIMEOUT.as_millis() as u64;
    })
    .await;
    let address = worker
        .device_base
        .as_deref()
        .unwrap()
        .trim_start_matches("http://")
        .to_owned();
    let connect = || tokio::net::TcpStream::connect(address.clone());

    // Nothing sent, and half a head: closed without an answer, not before the timeout.
    for sent in ["", "POST /api/condition/x HTTP/1.1\r\nHost: device\r\n"] {
        let mut stream = connect().await.unwrap();
        let opened = Instant::now();
        stream.write_all(sent.as_bytes()).await.unwrap();
        let (received, closed) = read_until_closed(&mut stream).await;
        assert!(!received.starts_with("HTTP/1.1 2"), "{sent:?}: {received:?}");
        assert!(
            closed - opened >= TIMEOUT - Duration::from_millis(50),
            "{sent:?} closed early"
        );
    }

    // A whole head, then only part of the body it announces: 408, closed, nothing stored.
    let body = batch(&[(8100, INFO)]);
    let mut stream = connect().await.unwrap();
    let head = format!(
        "POST /api/condition/{ISU} HTTP/1.1\r\nHost: device\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body.as_bytes()[..body.len() / 2]).await.unwrap();
    let (received, _) = read_until_closed(&mut stream).await;
    assert!(received.starts_with("HTTP/1.1 408"), "{received:?}");
    assert!(
        received.to_ascii_lowercase().contains("connection: close"),
        "{received:?}"
    );
    assert!(received.ends_with("request body timed out"), "{received:?}");
    assert!(!worker
        .timestamps("end_time=9999&condition_level=info")
        .await
        .contains(&8100));

    // Posts on one kept-alive connection, each sooner than the timeout, are all served.
    let client = reqwest::Client::builder().pool_max_idle_per_host(1).build().unwrap();
    for timestamp in [8200, 8201, 8202] {
        let posted = device_post(
            &client,
            worker.device_base.as_deref().unwrap(),
            ISU,
            batch(&[(timestamp, INFO)]),
        )
        .await;
        assert_eq!(posted.status(), StatusCode::ACCEPTED);
        tokio::time::sleep(TIMEOUT / 2).await;
    }
    assert_eq!(
        worker.timestamps("end_time=9999&condition_level=info").await[..3],
        [8202, 8201, 8200]
    );
}

#[tokio::test]
async fn a_bad_device_certificate_stops_the_worker_at_start_with_a_clear_error() {
    let dir = tempdir::Dir::new();
    let cert = dir.path.join("missing.crt");
    let key = dir.path.join("missing.key");
    let config = Config {
        device_listen: Some("127.0.0.1:0".parse().unwrap()),
        device_tls_cert: Some(cert.clone()),
        device_tls_key: Some(key),
        ..test_config("http://127.0.0.1:9".into())
    };
    let error = match Application::build(config, unregistered_metrics()).await {
        Ok(_) => panic!("a worker started with a missing certificate"),
        Err(error) => format!("{error:#}"),
    };
    assert!(error.contains(&cert.display().to_string()), "{error}");
}

/// A scratch directory removed when dropped.
mod tempdir {
    pub struct Dir {
        pub path: std::path::PathBuf,
    }

    impl Dir {
        pub fn new() -> Dir {
            let path = std::env::temp_dir().join(format!("worker-test-{}", uuid::Uuid::new_v4().simple()));
            std::fs::create_dir_all(&path).unwrap();
            Dir { path }
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
