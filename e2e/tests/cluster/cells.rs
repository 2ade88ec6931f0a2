//! Cells: three workers, the placement map, live migration of slots and pinned ISUs under
//! device posts and reads, draining a cell, and requests that reach the wrong worker.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::durability::{device_client, own_timestamps, post_and_record, Posted};
use e2e::*;

fn three_cells() -> ClusterOptions {
    ClusterOptions {
        workers: 3,
        coordinator_args: vec!["--migration-grace-ms".into(), "300".into()],
        ..ClusterOptions::default()
    }
}

/// A cells API call on the coordinator (with the secret); the status and JSON answer.
pub(super) async fn cells_call(cluster: &Cluster, path: &str, body: Value) -> (StatusCode, Value) {
    try_cells_call(&cluster.raw_client(), &cluster.coordinator, &cluster.secret, path, body)
        .await
        .expect("calling the cells API")
}

/// [`cells_call`] for callers that expect the coordinator may die meanwhile.
pub(super) async fn try_cells_call(
    client: &reqwest::Client,
    coordinator: &str,
    secret: &str,
    path: &str,
    body: Value,
) -> Result<(StatusCode, Value), reqwest::Error> {
    let response = client
        .post(format!("{coordinator}{path}"))
        .header(shared::protocol::SECRET_HEADER, secret)
        .timeout(Duration::from_secs(60))
        .json(&body)
        .send()
        .await?;
    let status = response.status();
    Ok((status, response.json().await.unwrap_or(Value::Null)))
}

pub(super) async fn placement(cluster: &Cluster) -> Value {
    cluster
        .internal_get(&format!("{}/internal/placement", cluster.coordinator))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The status of `GET /api/condition/<uuid>` asked of `worker` itself: with the forwarded
/// header it answers from its own store (404 when it holds nothing), without it a worker
/// that does not own the ISU forwards to the owner.
pub(super) async fn local_status(cluster: &Cluster, agent: &Agent, worker: usize, uuid: &str, forwarded: bool) -> u16 {
    let agent = agent.with_routes(Routes::Public(cluster.workers[worker].clone()));
    let path = format!("/api/condition/{uuid}?end_time=2000000000&condition_level={ALL_LEVELS}");
    let headers: Vec<(&str, &str)> = match forwarded {
        true => vec![(shared::protocol::FORWARDED_HEADER, "test")],
        false => Vec::new(),
    };
    agent.get_with(&path, &headers).await.status.as_u16()
}

/// Devices posting for some ISUs until stopped; what was acknowledged, per ISU.
pub(super) struct Devices {
    stop: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    acknowledged: Vec<Arc<Mutex<BTreeSet<i64>>>>,
    posters: Vec<tokio::task::JoinHandle<()>>,
}

impl Devices {
    /// One device per `(uuid, device URL)`, posting every 10 ms.
    pub(super) fn start(isus: &[(String, String)]) -> Devices {
        Devices::start_at(0, isus)
    }

    /// [`Devices::start`] with the devices' own timestamps taken from lanes `first_lane`...
    /// (devices started again after others stopped post conditions of their own).
    pub(super) fn start_at(first_lane: i64, isus: &[(String, String)]) -> Devices {
        let stop = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let acknowledged: Vec<Arc<Mutex<BTreeSet<i64>>>> = isus.iter().map(|_| Arc::default()).collect();
        let posters = isus
            .iter()
            .enumerate()
            .map(|(lane, (uuid, device_url))| {
                tokio::spawn(keep_posting(
                    device_url.clone(),
                    uuid.clone(),
                    first_lane + lane as i64,
                    stop.clone(),
                    acknowledged[lane].clone(),
                    refused.clone(),
                    closed.clone(),
                ))
            })
            .collect();
        Devices {
            stop,
            refused,
            closed,
            acknowledged,
            posters,
        }
    }

    /// Stops posting; the acknowledged timestamps per ISU, the count of refused posts and
    /// of posts whose connection closed under them (sent again, like refused ones).
    pub(super) async fn stop(self) -> (Vec<BTreeSet<i64>>, usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        for poster in self.posters {
            poster.await.unwrap();
        }
        let acknowledged = self
            .acknowledged
            .iter()
            .map(|set| set.lock().unwrap().clone())
            .collect();
        let (refused, closed) = (
            self.refused.load(Ordering::Relaxed),
            self.closed.load(Ordering::Relaxed),
        );
        (acknowledged, refused, closed)
    }
}

/// Posts batch after batch of `lane` to `device_url` (the URL JIA gave the ISU's device,
/// which never changes) until `stop`; records what was answered 202, counts refusals (any
/// other answer) and posts whose kept-alive connection closed under them (see [`Posted`]).
pub(super) async fn keep_posting(
    device_url: String,
    uuid: String,
    lane: i64,
    stop: Arc<AtomicBool>,
    acknowledged: Arc<Mutex<BTreeSet<i64>>>,
    refused: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
) {
    let client = device_client();
    let mut serial = 0;
    while !stop.load(Ordering::Relaxed) {
        // After a failure the same batch again: a device that got no 202 retries it.
        match post_and_record(&client, &device_url, &uuid, lane, serial, &acknowledged).await {
            Posted::Accepted => serial += 1,
            Posted::Refused(reason) => {
                if refused.fetch_add(1, Ordering::Relaxed) < 5 {
                    eprintln!("device post for {uuid} refused: {reason}");
                }
            }
            Posted::Closed => _ = closed.fetch_add(1, Ordering::Relaxed),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_and_pins_move_between_three_cells_under_load_losing_and_duplicating_nothing() {
    let cluster = spawn_cluster_with(three_cells()).await;
    let map = placement(&cluster).await;
    assert_eq!(map["slot_counts"], json!([96, 80, 80]), "first hex digit mod 3");

    let alice = cluster.sign_in("alice").await;
    // Slot 0a (cell a), an ISU of cell b to pin elsewhere, and one on c that stays.
    let moving = cluster.known_uuid('0', 0xa1);
    let pinned = cluster.known_uuid('4', 0xb2);
    let staying = cluster.known_uuid('2', 0xc3);
    assert!(moving.starts_with("0a") || moving.starts_with("00"), "{moving}");
    for (uuid, name) in [(&moving, "moving"), (&pinned, "pinned"), (&staying, "staying")] {
        alice.register(uuid, name, None).await.json(201);
    }

    // Devices keep posting to the device server they were given at activation; a reader
    // reads through the test's stale router (the default map) all along.
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let acknowledged: Vec<Arc<Mutex<BTreeSet<i64>>>> = (0..3).map(|_| Arc::default()).collect();
    let mut posters = Vec::new();
    for (lane, uuid) in [&moving, &pinned, &staying].into_iter().enumerate() {
        let device_url = cluster.device_servers[default_cell(uuid, 3)].clone();
        posters.push(tokio::spawn(keep_posting(
            device_url,
            uuid.clone(),
            lane as i64,
            stop.clone(),
            acknowledged[lane].clone(),
            refused.clone(),
            // No nginx here: a closed connection is a refusal too.
            refused.clone(),
        )));
    }
    let read_errors = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (alice, stop, read_errors, reads) = (alice.clone(), stop.clone(), read_errors.clone(), reads.clone());
        let uuids = [moving.clone(), pinned.clone(), staying.clone()];
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for uuid in &uuids {
                    let status = alice
                        .conditions(uuid, &format!("end_time=2000000000&condition_level={ALL_LEVELS}"))
                        .await
                        .status;
                    let graph = alice.graph(uuid, 1_628_000_000).await.status;
                    reads.fetch_add(2, Ordering::Relaxed);
                    if status != 200 || graph != 200 {
                        read_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let slot = &moving[..2];
    let (status, answer) = cells_call(&cluster, "/internal/cells/migrate", json!({"slot": slot, "to": "c"})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["migrations"][0]["from"], "a");
    assert!(answer["migrations"][0]["isus"].as_u64().unwrap() >= 1, "{answer}");

    let (status, answer) = cells_call(&cluster, "/internal/cells/migrate", json!({"isu": pinned, "to": "c"})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["migrations"][0]["isus"], 1, "{answer}");

    let (status, answer) = cells_call(&cluster, "/internal/cells/drain", json!({"cell": "a"})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer["migrations"].as_array().unwrap().len(),
        95,
        "the rest of a's slots"
    );

    // Bad requests get a clear 400.
    for body in [
        json!({"slot": "0a", "to": "zz"}),
        json!({"slot": "xyz", "to": "b"}),
        json!({"to": "b"}),
        json!({"isu": "not-registered", "to": "b"}),
    ] {
        let (status, answer) = cells_call(&cluster, "/internal/cells/migrate", body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} → {answer}");
        assert!(answer["error"].as_str().is_some_and(|error| !error.is_empty()));
    }
    let refused_without_secret = cluster
        .raw_client()
        .post(format!("{}/internal/cells/rebalance", cluster.coordinator))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(refused_without_secret, StatusCode::UNAUTHORIZED);

    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);
    for poster in posters {
        poster.await.unwrap();
    }
    reader.await.unwrap();

    assert_eq!(refused.load(Ordering::Relaxed), 0, "no device post was refused");
    assert_eq!(
        read_errors.load(Ordering::Relaxed),
        0,
        "no read failed ({} reads)",
        reads.load(Ordering::Relaxed)
    );
    for (lane, uuid) in [&moving, &pinned, &staying].into_iter().enumerate() {
        let posted = acknowledged[lane].lock().unwrap().clone();
        assert!(
            posted.len() >= 50,
            "{uuid}: only {} conditions acknowledged",
            posted.len()
        );
        // Read page by page: a duplicate would show as a repeated timestamp on a page.
        let stored = own_timestamps(&alice, uuid).await;
        let missing: Vec<_> = posted.difference(&stored).take(5).collect();
        assert!(missing.is_empty(), "{uuid}: acknowledged but lost: {missing:?}");
        assert_eq!(
            stored.len(),
            posted.len(),
            "{uuid}: stored conditions nobody acknowledged"
        );
    }

    let map = placement(&cluster).await;
    assert_eq!(map["slot_counts"][0], 0, "a holds nothing: {}", map["slot_counts"]);
    assert_eq!(map["map"]["pins"][&pinned], 2, "pinned to c");
    assert_eq!(map["migrations"], json!([]), "every migration finished");

    // The sources forgot their copies: asked without forwarding, a answers 404 for the
    // moved ISU; through it (a stale route), the owner answers.
    assert_eq!(
        local_status(&cluster, &alice, 0, &moving, true).await,
        404,
        "the source forgot it"
    );
    assert_eq!(
        local_status(&cluster, &alice, 0, &moving, false).await,
        200,
        "a stale route is forwarded"
    );
    assert_eq!(local_status(&cluster, &alice, 1, &pinned, true).await, 404);
    assert_eq!(local_status(&cluster, &alice, 2, &pinned, true).await, 200);

    // The latest condition still reaches the coordinator from the new owner.
    let moving_ref = moving.as_str();
    let alice_ref = &alice;
    let before = alice.isu_list().await.json(200);
    let latest_of = |list: &Value| -> i64 {
        list.as_array()
            .unwrap()
            .iter()
            .find(|item| item["jia_isu_uuid"] == moving_ref)
            .and_then(|item| item["latest_isu_condition"]["timestamp"].as_i64())
            .unwrap_or(0)
    };
    let first = latest_of(&before);
    wait_until(
        "the moved ISU's latest condition advances",
        Duration::from_secs(5),
        move || async move { (latest_of(&alice_ref.isu_list().await.json(200)) > first).then_some(()) },
    )
    .await;
    cluster_assert_no_crash(cluster);
}

fn cluster_assert_no_crash(mut cluster: Cluster) {
    cluster.assert_no_crash();
}

/// `GET /internal/cells?seconds=S` with the secret: its status and body.
async fn cells_table(cluster: &Cluster, seconds: &str) -> (StatusCode, String) {
    let response = cluster
        .internal_get(&format!("{}/internal/cells?seconds={seconds}", cluster.coordinator))
        .await
        .expect("the coordinator answers");
    (response.status(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cells_table_shows_what_each_cell_does_and_a_cell_that_is_down() {
    use shared::protocol::cells::{CellSummary, CellsSummary};
    let mut cluster = spawn_cluster_with(three_cells()).await;
    let alice = cluster.sign_in("alice").await;
    let on_b = cluster.known_uuid('1', 0x91);
    alice.register(&on_b, "busy", None).await.json(201);
    let devices = Devices::start(&[(on_b.clone(), cluster.device_servers[1].clone())]);
    let cell = |summary: &CellsSummary, name: &str| -> CellSummary {
        summary
            .cells
            .iter()
            .find(|cell| cell.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("no cell {name}: {summary:?}"))
    };
    let (status, text) = cells_table(&cluster, "0.5").await;
    assert_eq!(status, StatusCode::OK);
    let summary: CellsSummary = serde_json::from_str(&text).expect("the cells summary in JSON");
    let b = cell(&summary, "b");
    assert_eq!(b.slots, 80, "{text}");
    assert!(b.isus >= 1, "b has ISUs: {text}");
    let figures = b.figures.expect("b is up");
    assert!(figures.conditions > 0, "b stored conditions: {text}");
    assert!(figures.requests_per_second > 10.0, "b takes device posts: {text}");
    assert_eq!(figures.error_ratio, Some(0.0), "no 5xx: {text}");
    assert!(figures.p99.is_some(), "a p99: {text}");
    let c = cell(&summary, "c").figures.expect("c is up");
    assert_eq!(c.requests_per_second, 0.0, "c takes nothing: {text}");
    assert_eq!(c.error_ratio, None, "no request, no ratio: {text}");
    assert_eq!(
        (summary.map_version, summary.cells.len(), summary.pins),
        (1, 3, 0),
        "{text}"
    );
    // A span that is not a finite number is refused (it once panicked the handler).
    for seconds in ["NaN", "inf", "-inf"] {
        let (status, text) = cells_table(&cluster, seconds).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "seconds={seconds}");
        assert_eq!(text, "bad format: seconds");
    }

    cluster.kill_node(2);
    let (status, text) = cells_table(&cluster, "0.5").await;
    assert_eq!(status, StatusCode::OK);
    let summary: CellsSummary = serde_json::from_str(&text).expect("the cells summary in JSON");
    assert!(!cell(&summary, "c").is_up(), "{text}");
    assert!(cell(&summary, "b").is_up(), "{text}");
    let (_, refused, _) = devices.stop().await;
    assert_eq!(refused, 0);
}
