//! The router (the real nginx, rendered from the project's template) over the placement map:
//! it takes each new map from the coordinator without a reload while readers and devices go
//! through it on kept-alive connections and never send a request twice, and it needs no
//! coordinator: with the coordinator killed it routes by the map it has, a worker restarted
//! meanwhile forwards by the map copy it saved, and an nginx restarted meanwhile starts
//! from the map file.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use super::cells::{cells_call, placement, Devices};
use super::durability::own_timestamps;
use e2e::*;

/// Readers through the public router until stopped, like Go's client: kept-alive
/// connections, and a request that fails is not sent again. Anything but a 200 is an error;
/// a read a worker had to forward (a stale route) is counted.
struct Readers {
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicUsize>,
    forwarded: Arc<AtomicUsize>,
    errors: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Readers {
    fn start(agent: &Agent, uuids: &[String], count: usize) -> Readers {
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicUsize::new(0));
        let forwarded = Arc::new(AtomicUsize::new(0));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..count)
            .map(|reader| {
                let (agent, stop, reads, forwarded, errors) = (
                    agent.clone(),
                    stop.clone(),
                    reads.clone(),
                    forwarded.clone(),
                    errors.clone(),
                );
                let uuids = uuids.to_vec();
                tokio::spawn(async move {
                    let mut turn = reader;
                    while !stop.load(Ordering::Relaxed) {
                        let uuid = &uuids[turn % uuids.len()];
                        turn += 1;
                        let path = match turn % 2 {
                            0 => format!("/api/condition/{uuid}?end_time=2000000000&condition_level={ALL_LEVELS}"),
                            _ => format!("/api/isu/{uuid}/graph?datetime=1628000000"),
                        };
                        let answer = agent.try_get(&path).await;
                        reads.fetch_add(1, Ordering::Relaxed);
                        match answer {
                            Ok(reply) if reply.status == StatusCode::OK => {
                                if reply.served_by.is_some() {
                                    forwarded.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            Ok(reply) => errors.lock().unwrap().push(format!("{path}: {}", reply.status)),
                            Err(error) => errors.lock().unwrap().push(format!("{path}: {error:?}")),
                        }
                    }
                })
            })
            .collect();
        Readers {
            stop,
            reads,
            forwarded,
            errors,
            tasks,
        }
    }

    /// Stops; (reads, forwarded reads, errors).
    async fn stop(self) -> (usize, usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        let errors = self.errors.lock().unwrap().clone();
        (
            self.reads.load(Ordering::Relaxed),
            self.forwarded.load(Ordering::Relaxed),
            errors,
        )
    }
}

/// nginx's master (from its pid file) and its worker processes.
fn nginx_processes(pid_file: &std::path::Path) -> (u32, Vec<u32>) {
    let master: u32 = std::fs::read_to_string(pid_file)
        .expect("nginx's pid file")
        .trim()
        .parse()
        .expect("a pid");
    let mut workers = deploy::supervise::children_of(master);
    workers.sort_unstable();
    (master, workers)
}

/// The map nginx routes by, from its control server: (version, text).
async fn router_map(front: &RouterFront, secret: &str) -> (u64, String) {
    let response = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("{}/map", front.control_url()))
        .header(shared::protocol::SECRET_HEADER, secret)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .expect("nginx's control server answers");
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    let version = shared::router::RouterMap::parse(&text)
        .expect("the router's map parses")
        .version;
    (version, text)
}

/// `router_map_versions_behind` of the coordinator (`None` while it does not answer or has not
/// set it yet).
async fn versions_behind(cluster: &Cluster) -> Option<f64> {
    let metrics = cluster
        .internal_get(&format!("{}/metrics", cluster.coordinator))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    metrics
        .lines()
        .any(|line| line.starts_with("router_map_versions_behind"))
        .then(|| metric_sum(&metrics, "router_map_versions_behind", &[]))
}

/// The cell that owns `uuid`'s slot in the coordinator's placement answer.
fn owner_in(placement: &serde_json::Value, uuid: &str) -> usize {
    placement["map"]["slots"][usize::from_str_radix(&uuid[..2], 16).unwrap()]
        .as_u64()
        .unwrap() as usize
}

/// The warnings and errors every node of `cluster` logged (workers, then the coordinator),
/// for a failed assertion's message.
fn warnings(cluster: &Cluster) -> String {
    (0..=CELLS)
        .flat_map(|node| {
            cluster
                .node_log(node)
                .lines()
                .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
                .map(|line| format!("node {node}: {line}"))
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const CELLS: usize = 3;
const MIGRATIONS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_takes_100_migrations_without_a_reload_or_a_failed_request_and_needs_no_coordinator() {
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let run_dir = ScratchDir::new("router");
    let front = RouterFront::new(&run_dir.path, CELLS);
    let mut coordinator_args: Vec<String> = vec!["--migration-grace-ms".into(), "200".into()];
    coordinator_args.extend(front.coordinator_args());
    let mut cluster = spawn_cluster_with(ClusterOptions {
        workers: CELLS,
        durable: true,
        device_urls: Some(front.device_urls()),
        coordinator_args,
        ..ClusterOptions::default()
    })
    .await;
    let web = fixture_front_end();
    let (server, public) = public_nginx_at(&cluster, &nginx, &web.path, &front).await;
    let pid_file = front.run_dir.join("nginx.pid");
    let processes_before = nginx_processes(&pid_file);

    let alice = cluster.sign_in("alice").await;
    // Nine ISUs in nine slots, three of each cell's.
    let uuids: Vec<String> = (0..9u8)
        .map(|step| cluster.known_uuid_in_slot(step * 29 + 3, 0x100 + u32::from(step)))
        .collect();
    for uuid in &uuids {
        alice.register(uuid, "routed", None).await.json(201);
    }
    let through_router = alice.with_routes(Routes::Public(public.clone()));
    // Each device keeps the URL JIA gave it (its cell's nginx device server) for good.
    let devices_of = |uuids: &[String]| -> Vec<(String, String)> {
        let urls = front.device_urls();
        uuids
            .iter()
            .map(|uuid| (uuid.clone(), urls[default_cell(uuid, CELLS)].clone()))
            .collect()
    };
    let readers = Readers::start(&through_router, &uuids, 3);
    let devices = Devices::start(&devices_of(&uuids));
    tokio::time::sleep(Duration::from_millis(300)).await;

    // 100 slot moves, round robin over the ISUs, each to the next cell.
    let mut owners: Vec<usize> = uuids.iter().map(|uuid| default_cell(uuid, CELLS)).collect();
    let started = Instant::now();
    for step in 0..MIGRATIONS {
        let index = step % uuids.len();
        let to = (owners[index] + 1) % CELLS;
        let (status, answer) = cells_call(
            &cluster,
            "/internal/cells/migrate",
            json!({"slot": &uuids[index][..2], "to": CELL_NAMES[to]}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "migration {step}: {answer}");
        owners[index] = to;
    }
    let migrating = started.elapsed();
    // The last flips reach the router (the hand-over follows each flip).
    let version = placement(&cluster).await["map"]["version"].as_u64().unwrap();
    let cluster_ref = &cluster;
    let front_ref = &front;
    wait_until("the router holds the last map", Duration::from_secs(5), || async move {
        let (routed, _) = router_map(front_ref, &cluster_ref.secret).await;
        (routed == version).then_some(())
    })
    .await;
    // Readers and devices go on a moment on the final map: no stale route is left.
    let forwarded_before_settled = readers.forwarded.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (reads, forwarded, errors) = readers.stop().await;
    let (acknowledged, refused, closed) = devices.stop().await;
    assert!(
        errors.is_empty(),
        "{} of {reads} reads failed: {:?}; the nodes' warnings:\n{}",
        errors.len(),
        &errors[..errors.len().min(5)],
        warnings(&cluster)
    );
    assert_eq!(refused, 0, "device posts refused through the router");
    assert_eq!(closed, 0, "device posts met a connection closed under them");
    assert_eq!(
        nginx_processes(&pid_file),
        processes_before,
        "nginx's master and workers are the ones that started: no reload, no restart"
    );
    let error_log = std::fs::read_to_string(front.run_dir.join("nginx-error.log")).unwrap_or_default();
    assert!(!error_log.contains("[error]"), "nginx logged errors:\n{error_log}");
    let coordinator_log = cluster.node_log(CELLS);
    assert!(
        !coordinator_log.contains("nginx refused the router map"),
        "{coordinator_log}"
    );
    let map = placement(&cluster).await;
    for (uuid, owner) in uuids.iter().zip(&owners) {
        assert_eq!(owner_in(&map, uuid), *owner, "{uuid}");
    }
    // Every acknowledged condition is readable through the router from its new cell.
    for (uuid, acknowledged) in uuids.iter().zip(&acknowledged) {
        assert!(acknowledged.len() >= 20, "{uuid}: only {} batches", acknowledged.len());
        assert_eq!(&own_timestamps(&through_router, uuid).await, acknowledged, "{uuid}");
    }
    eprintln!(
        "router: {MIGRATIONS} migrations in {migrating:?} (map v{version}), {reads} reads ({forwarded} forwarded by a worker, {forwarded_before_settled} of them before the last map), {} device batches, 0 errors, 0 closed connections, nginx not reloaded",
        acknowledged.iter().map(|set| set.len()).sum::<usize>()
    );

    // The control plane goes away: the router and the cells go on without it.
    cluster.kill_node(CELLS);
    tokio::time::sleep(Duration::from_secs(10)).await;
    cluster.restart_worker(0);
    let readers = Readers::start(&through_router, &uuids, 3);
    let devices = Devices::start_at(uuids.len() as i64, &devices_of(&uuids));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (reads_without, forwarded_without, errors) = readers.stop().await;
    let (_, refused, closed) = devices.stop().await;
    assert!(
        errors.is_empty(),
        "{} of {reads_without} reads failed without the coordinator: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert_eq!((refused, closed), (0, 0), "device posts without the coordinator");
    assert_eq!(
        forwarded_without, 0,
        "the router routes by the last map: nothing to forward"
    );
    assert_eq!(router_map(&front, &cluster.secret).await.0, version);

    // nginx restarted while the coordinator is down starts from the map file, not from a
    // default: the ISUs that moved are routed straight to their new cells.
    drop(server);
    let config = front.run_dir.join("nginx.conf");
    let mut server = Nginx::start(&nginx, &front.run_dir, &config);
    let front_ref = &front;
    let secret = cluster.secret.clone();
    let secret = &secret;
    wait_until("the restarted nginx answers", Duration::from_secs(10), || async move {
        let client = reqwest::Client::builder().no_proxy().build().ok()?;
        let response = client
            .get(format!("{}/map", front_ref.control_url()))
            .header(shared::protocol::SECRET_HEADER, secret)
            .send()
            .await
            .ok()?;
        (response.status() == StatusCode::OK).then_some(())
    })
    .await;
    assert_eq!(router_map(&front, &cluster.secret).await.0, version);
    let moved: Vec<&String> = uuids
        .iter()
        .zip(&owners)
        .filter(|(uuid, owner)| default_cell(uuid, CELLS) != **owner)
        .map(|(uuid, _)| uuid)
        .collect();
    assert!(!moved.is_empty());
    for uuid in &moved {
        let reply = through_router
            .get(&format!(
                "/api/condition/{uuid}?end_time=2000000000&condition_level={ALL_LEVELS}"
            ))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{uuid}");
        assert_eq!(reply.served_by, None, "{uuid}: routed by the saved map, not forwarded");
    }
    server.assert_running();

    // The coordinator back: nginx already holds its map (the hand-over is a no-op).
    cluster.start_node(CELLS);
    cluster
        .wait_for_log(CELLS, &format!("placement map version {version} unchanged"))
        .await;
    assert_eq!(router_map(&front, &cluster.secret).await.0, version);
    server.assert_running();

    // nginx down while the map changes: the coordinator says nginx lags (the metric the
    // RouterMapBehind alert watches), and the nginx that starts again routes by the map
    // file, which already holds the new version; the lag is gone. (The restarted worker is
    // brought to the coordinator's generation first: until then it refuses an export.)
    cluster.wait_until_healthy().await;
    drop(server);
    let (status, answer) = cells_call(
        &cluster,
        "/internal/cells/migrate",
        json!({"slot": &uuids[0][..2], "to": CELL_NAMES[(owners[0] + 1) % CELLS]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let newest = version + 1;
    wait_until("the coordinator sees nginx lag", Duration::from_secs(5), || async {
        versions_behind(&cluster).await.filter(|behind| *behind >= 1.0)
    })
    .await;
    let server = Nginx::start(&nginx, &front.run_dir, &config);
    wait_until("nginx in step again", Duration::from_secs(10), || async {
        versions_behind(&cluster).await.filter(|behind| *behind == 0.0)
    })
    .await;
    assert_eq!(router_map(&front, &cluster.secret).await.0, newest);
    drop(server);
    cluster.assert_no_crash();
}

/// A stand-in cell: answers every request on a kept-alive connection with its name.
async fn fake_cell(name: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // Requests without bodies: one ends at its blank line.
                    while !buffer.windows(4).any(|window| window == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
                        }
                    }
                    let end = buffer.windows(4).position(|window| window == b"\r\n\r\n").unwrap() + 4;
                    buffer.drain(..end);
                    let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{name}", name.len());
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
}

/// A map text for cells a, b, c (see `shared::router`).
fn map_text(version: u64, slots: &str, pins: &[(&str, &str)]) -> String {
    let mut text = format!("# a test's map\nversion {version}\ncell 0 a\ncell 1 b\ncell 2 c\nslots {slots}\n");
    for (uuid, cell) in pins {
        text.push_str(&format!("pin {uuid} {cell}\n"));
    }
    text
}

/// 256 slot digits: every slot on `cell`, but slot `slot` on `other`.
fn slots_with(cell: char, slot: usize, other: char) -> String {
    (0..256).map(|index| if index == slot { other } else { cell }).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_server_takes_newer_maps_only_and_every_nginx_worker_routes_by_the_next_request() {
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let cells = vec![
        ("a".to_owned(), fake_cell("a").await),
        ("b".to_owned(), fake_cell("b").await),
        ("c".to_owned(), fake_cell("c").await),
    ];
    let run_dir = ScratchDir::new("router-control");
    let front = RouterFront::new(&run_dir.path, cells.len());
    let web = fixture_front_end();
    let secret = "router-control-test-secret";
    let (mut server, public) = start_front(&FrontSetup {
        nginx: &nginx,
        static_dir: &web.path,
        front: &front,
        secret,
        coordinators: &["127.0.0.1:9".to_owned()],
        cells: &cells,
        // Two worker processes, each with its own copy of the map.
        worker_processes: 2,
    })
    .await;
    let processes = nginx_processes(&front.run_dir.join("nginx.pid"));
    assert_eq!(processes.1.len(), 2, "two nginx workers");

    // Each routed request on a new connection, so the workers share them.
    let fresh = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let pinned = "00000042-0000-4000-8000-000000000042";
    let routed_to = |uuid: &'static str| {
        let (fresh, public) = (fresh.clone(), public.clone());
        async move {
            let response = fresh
                .get(format!("{public}/api/isu/{uuid}/graph"))
                .send()
                .await
                .expect("the router answers");
            assert_eq!(response.status(), StatusCode::OK);
            response.text().await.unwrap()
        }
    };
    let control = reqwest::Client::builder().no_proxy().build().unwrap();
    let map_url = format!("{}/map", front.control_url());
    let put = |text: String, secret: Option<&'static str>| {
        let mut request = control.put(&map_url).body(text);
        if let Some(secret) = secret {
            request = request.header(shared::protocol::SECRET_HEADER, secret);
        }
        async move {
            let response = request.send().await.expect("the control server answers");
            (response.status(), response.text().await.unwrap())
        }
    };
    let secret: &'static str = "router-control-test-secret";
    let names = ["a", "b", "c"];

    // The default map (version 1): slot 00 is cell a's.
    assert_eq!(router_map(&front, secret).await.0, 1);
    assert_eq!(routed_to(pinned).await, "a");

    // Newer maps: every worker routes by each from the next request on.
    let mut version = 1;
    let mut longest = Duration::ZERO;
    for round in 0..20 {
        version += 1;
        let target = (round + 1) % 3;
        let started = Instant::now();
        let digit = char::from(b'0' + target as u8);
        let (status, answer) = put(map_text(version, &slots_with('0', 0, digit), &[]), Some(secret)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert!(answer.contains(&format!("version {version} stored")), "{answer}");
        for _ in 0..10 {
            assert_eq!(routed_to(pinned).await, names[target], "map v{version}");
        }
        longest = longest.max(started.elapsed());
    }
    // A pin wins over its slot, whatever the UUID's case.
    version += 1;
    let current = map_text(version, &slots_with('0', 0, '0'), &[(pinned, "c")]);
    let (status, answer) = put(current.clone(), Some(secret)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(routed_to(pinned).await, "c");
    assert_eq!(routed_to("00000042-0000-4000-8000-00000000004A").await, "a");
    assert_eq!(routed_to("00000043-0000-4000-8000-000000000043").await, "a");
    let upper: &'static str = Box::leak(pinned.to_uppercase().into_boxed_str());
    assert_eq!(routed_to(upper).await, "c");

    // Bad input: refused with a short reason, the current map kept.
    let refusals: Vec<(String, Option<&'static str>, StatusCode, &str)> = vec![
        (
            map_text(version + 1, &slots_with('1', 0, '1'), &[]),
            None,
            StatusCode::UNAUTHORIZED,
            "secret is required",
        ),
        (
            map_text(version + 1, &slots_with('1', 0, '1'), &[]),
            Some("wrong"),
            StatusCode::FORBIDDEN,
            "wrong cluster secret",
        ),
        (
            "hello".to_owned(),
            Some(secret),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown line",
        ),
        (String::new(), Some(secret), StatusCode::BAD_REQUEST, "no map"),
        (
            map_text(version + 1, &slots_with('1', 0, '1'), &[]).replace("cell 2 c", "cell 2 d"),
            Some(secret),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown cell d",
        ),
        (
            map_text(version + 1, &slots_with('1', 7, '3'), &[]),
            Some(secret),
            StatusCode::UNPROCESSABLE_ENTITY,
            "slot 07 names cell id 3",
        ),
        (
            map_text(version + 1, &"1".repeat(255), &[]),
            Some(secret),
            StatusCode::UNPROCESSABLE_ENTITY,
            "256 lowercase hex digits",
        ),
        (
            map_text(version + 1, &slots_with('1', 0, '1'), &[]).replace(&format!("version {}\n", version + 1), ""),
            Some(secret),
            StatusCode::UNPROCESSABLE_ENTITY,
            "no version",
        ),
        (
            map_text(version + 1, &slots_with('1', 0, '1'), &[(pinned, "z")]),
            Some(secret),
            StatusCode::UNPROCESSABLE_ENTITY,
            "does not have",
        ),
        (
            map_text(version - 1, &slots_with('1', 0, '1'), &[]),
            Some(secret),
            StatusCode::CONFLICT,
            "older than the router's",
        ),
        (
            map_text(version, &slots_with('1', 0, '1'), &[]),
            Some(secret),
            StatusCode::CONFLICT,
            "already holds another map",
        ),
        ("x".repeat(2 << 20), Some(secret), StatusCode::PAYLOAD_TOO_LARGE, ""),
    ];
    for (text, presented, expected, reason) in refusals {
        let shown = text.chars().take(60).collect::<String>();
        let (status, answer) = put(text, presented).await;
        assert_eq!(status, expected, "{shown:?}: {answer}");
        assert!(answer.contains(reason), "{shown:?}: {answer}");
        assert!(answer.len() < 400, "a short message: {answer}");
    }
    let deleted = control
        .delete(&map_url)
        .header(shared::protocol::SECRET_HEADER, secret)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::METHOD_NOT_ALLOWED);
    let unauthenticated = control.get(&map_url).send().await.unwrap();
    assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(router_map(&front, secret).await, (version, current.clone()));
    assert_eq!(routed_to(pinned).await, "c");
    // The same map again is no change, whatever its comments say.
    let (status, answer) = put(format!("# handed over again\n{current}"), Some(secret)).await;
    assert_eq!(
        (status, answer.trim()),
        (StatusCode::OK, &*format!("placement map version {version} unchanged"))
    );

    // A new history (a coordinator that started without its log) replaces the map whatever
    // its version; within it, older versions are refused again.
    let in_lineage = |text: String| text.replace("version 1\n", "version 1\nlineage beef\n");
    let renewed = in_lineage(map_text(1, &slots_with('2', 0, '2'), &[]));
    let (status, answer) = put(renewed.clone(), Some(secret)).await;
    assert_eq!(
        (status, answer.trim()),
        (StatusCode::OK, "placement map version 1 stored")
    );
    assert_eq!(routed_to(pinned).await, "c");
    let (status, answer) = put(in_lineage(map_text(1, &slots_with('1', 0, '1'), &[])), Some(secret)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(router_map(&front, secret).await, (1, renewed));

    server.assert_running();
    assert_eq!(
        nginx_processes(&front.run_dir.join("nginx.pid")),
        processes,
        "no reload, no restart"
    );
    eprintln!("router control: 20 maps, each routed by both nginx workers from the next request (longest update + 10 routed requests: {longest:?})");
}

/// Past 16 cells the map file writes two hex digits a slot; nginx's router reads them: with
/// 64 fake cells, the coordinator's map text for a map that moved slots around routes each
/// slot's reads to its cell, from the file at start and from the control server after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_cells_route_by_two_hex_digits_a_slot() {
    use shared::placement_map::{Cell, PlacementMap, MAX_CELLS};
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let names: Vec<&'static str> = (0..MAX_CELLS)
        .map(|index| &*Box::leak(format!("c{index}").into_boxed_str()))
        .collect();
    let mut cells = Vec::new();
    for name in &names {
        cells.push((name.to_string(), fake_cell(name).await));
    }
    let mut map = PlacementMap::new(
        cells
            .iter()
            .map(|(name, address)| Cell {
                name: name.clone(),
                internal_url: format!("http://{address}"),
                device_url: String::new(),
            })
            .collect(),
    )
    .unwrap();
    let run_dir = ScratchDir::new("router-64");
    let front = RouterFront::new(&run_dir.path, cells.len());
    std::fs::create_dir_all(&front.run_dir).unwrap();
    std::fs::write(front.map_file(), shared::router::map_text(&map, "a test")).unwrap();
    let web = fixture_front_end();
    let secret = "router-64-test-secret";
    let (mut server, public) = start_front(&FrontSetup {
        nginx: &nginx,
        static_dir: &web.path,
        front: &front,
        secret,
        coordinators: &["127.0.0.1:9".to_owned()],
        cells: &cells,
        worker_processes: 1,
    })
    .await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let route_every_slot = |map: PlacementMap| {
        let (client, public, names) = (client.clone(), public.clone(), names.clone());
        async move {
            for slot in 0..=255u8 {
                let uuid = format!("{slot:02x}000042-0000-4000-8000-000000000042");
                let answer = client
                    .get(format!("{public}/api/isu/{uuid}/graph"))
                    .send()
                    .await
                    .expect("the router answers");
                assert_eq!(answer.status(), StatusCode::OK);
                let owner = names[usize::from(map.slots()[usize::from(slot)])];
                assert_eq!(
                    answer.text().await.unwrap(),
                    owner,
                    "slot {slot:02x}, map v{}",
                    map.version()
                );
            }
        }
    };
    // The file's map: slot s on cell s × 64 / 256.
    assert_eq!(map.slots()[255], 63);
    route_every_slot(map.clone()).await;

    // A newer map through the control server: slots moved to the highest cells.
    for slot in (0..=255u8).step_by(5) {
        map.assign_slot(slot, 63 - slot % 47).unwrap();
    }
    let text = shared::router::map_text(&map, "a test");
    assert_eq!(
        text.lines().find_map(|line| line.strip_prefix("slots ")).unwrap().len(),
        512
    );
    let stored = client
        .put(format!("{}/map", front.control_url()))
        .header(shared::protocol::SECRET_HEADER, secret)
        .body(text)
        .send()
        .await
        .unwrap();
    assert_eq!(stored.status(), StatusCode::OK, "{}", stored.text().await.unwrap());
    assert_eq!(router_map(&front, secret).await.0, map.version());
    route_every_slot(map).await;
    server.assert_running();
}

/// Issue 38's second nemesis finding: a read answered 404 after a 201, when nginx was handed
/// a flipped map before the migration's target had activated the ISU. nginx is now held on
/// the old map from the flip's commit until the target's activation: with the activation
/// stalled longer than the router's hand-over retry (1 s), nginx still routes by the old
/// map, and every read through it is answered from the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_takes_a_flipped_map_only_once_the_target_shows_its_isus() {
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    const STALL_MS: u64 = 2500;
    let run_dir = ScratchDir::new("router-hold");
    let front = RouterFront::new(&run_dir.path, 2);
    let mut coordinator_args: Vec<String> = vec!["--migration-grace-ms".into(), "200".into()];
    coordinator_args.extend(front.coordinator_args());
    let cluster = spawn_cluster_with(ClusterOptions {
        workers: 2,
        durable: true,
        device_urls: Some(front.device_urls()),
        coordinator_args,
        fail_points: Some(format!("activate-stall=sleep({STALL_MS})")),
        ..ClusterOptions::default()
    })
    .await;
    let web = fixture_front_end();
    let (_server, public) = public_nginx_at(&cluster, &nginx, &web.path, &front).await;
    let alice = cluster.sign_in("alice").await;
    let uuid = cluster.known_uuid_in_slot(7, 0x200);
    alice.register(&uuid, "held", None).await.json(201);
    let through_router = alice.with_routes(Routes::Public(public.clone()));
    let cluster_ref = &cluster;
    let front_ref = &front;
    let before = placement(&cluster).await["map"]["version"].as_u64().unwrap();
    wait_until("the router holds the map", Duration::from_secs(5), || async move {
        (router_map(front_ref, &cluster_ref.secret).await.0 == before).then_some(())
    })
    .await;
    let readers = Readers::start(&through_router, std::slice::from_ref(&uuid), 2);
    let to = 1 - default_cell(&uuid, 2);
    let migrating = cells_call(
        &cluster,
        "/internal/cells/migrate",
        json!({"slot": &uuid[..2], "to": CELL_NAMES[to]}),
    );
    let sampling = async {
        // Past the flip's commit and a hand-over retry, inside the target's stalled activation.
        tokio::time::sleep(Duration::from_millis(1700)).await;
        router_map(front_ref, &cluster_ref.secret).await.0
    };
    let ((status, answer), routed_while_activating) = tokio::join!(migrating, sampling);
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        routed_while_activating, before,
        "nginx was handed the flipped map before the target activated the ISU"
    );
    let after = placement(&cluster).await["map"]["version"].as_u64().unwrap();
    assert!(after > before);
    wait_until(
        "the router takes the flipped map",
        Duration::from_secs(5),
        || async move { (router_map(front_ref, &cluster_ref.secret).await.0 == after).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (reads, _, errors) = readers.stop().await;
    assert!(reads > 10, "{reads} reads");
    assert!(
        errors.is_empty(),
        "{} of {reads} reads failed: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
}
