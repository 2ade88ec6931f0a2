//! The router (the real nginx, rendered from the project's template) over the placement map:
//! it follows migrations by graceful reloads while readers and devices go through it, and
//! it needs no coordinator: with the coordinator killed, reads and device posts of existing
//! ISUs go on, and a worker restarted meanwhile forwards by the map copy it saved.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use super::cells::{cells_call, local_status, placement, Devices};
use super::durability::own_timestamps;
use e2e::*;

/// Readers through the public router until stopped: a GET that meets a connection nginx
/// closed as an old worker process left (a reload) is sent once more, as browsers and Go's
/// client do; anything else that is not a 200 is an error.
struct Readers {
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicUsize>,
    retries: Arc<AtomicUsize>,
    errors: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Readers {
    fn start(agent: &Agent, uuids: &[String], count: usize) -> Readers {
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicUsize::new(0));
        let retries = Arc::new(AtomicUsize::new(0));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..count)
            .map(|reader| {
                let (agent, stop, reads, retries, errors) = (
                    agent.clone(),
                    stop.clone(),
                    reads.clone(),
                    retries.clone(),
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
                        let mut answer = agent.try_get(&path).await;
                        if answer.is_err() {
                            retries.fetch_add(1, Ordering::Relaxed);
                            answer = agent.try_get(&path).await;
                        }
                        reads.fetch_add(1, Ordering::Relaxed);
                        match answer {
                            Ok(reply) if reply.status == StatusCode::OK => {}
                            Ok(reply) => errors.lock().unwrap().push(format!("{path}: {}", reply.status)),
                            Err(error) => errors.lock().unwrap().push(format!("{path}: {error}")),
                        }
                    }
                })
            })
            .collect();
        Readers {
            stop,
            reads,
            retries,
            errors,
            tasks,
        }
    }

    /// Stops; (reads, retried GETs, errors).
    async fn stop(self) -> (usize, usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        let errors = self.errors.lock().unwrap().clone();
        (
            self.reads.load(Ordering::Relaxed),
            self.retries.load(Ordering::Relaxed),
            errors,
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_follows_migrations_by_reloads_under_load_and_needs_no_coordinator() {
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    // nginx's files (and the placement include the coordinator rewrites) in a directory
    // known before the cluster starts; devices post through nginx's device servers.
    let run_dir = ScratchDir::new("router");
    let placement_file = run_dir.path.join("placement.conf");
    let pid_file = run_dir.path.join("nginx.pid");
    let device_listens: Vec<String> = (0..2).map(|_| format!("127.0.0.1:{}", free_ports::<1>()[0])).collect();
    let mut cluster = spawn_cluster_with(ClusterOptions {
        durable: true,
        device_urls: Some(device_listens.iter().map(|listen| format!("http://{listen}")).collect()),
        coordinator_args: vec![
            "--migration-grace-ms".into(),
            "300".into(),
            "--router-map".into(),
            placement_file.display().to_string(),
            // nginx's own pid file (the rendered configuration's `pid`): the coordinator
            // sends its master SIGHUP; before nginx runs there is nothing to signal.
            "--router-pid-file".into(),
            pid_file.display().to_string(),
        ],
        ..ClusterOptions::default()
    })
    .await;
    let web = fixture_front_end();
    let (mut server, public) = public_nginx_at(&cluster, &nginx, &web.path, &run_dir.path, &device_listens).await;
    let workers_before = nginx_workers(&pid_file);

    let alice = cluster.sign_in("alice").await;
    let uuids: Vec<String> = (0..6u8)
        .map(|step| cluster.known_uuid_in_slot(step * 41, 0x90 + u32::from(step)))
        .collect();
    for uuid in &uuids {
        alice.register(uuid, "routed", None).await.json(201);
    }
    let through_router = alice.with_routes(Routes::Public(public.clone()));
    // The URL JIA was given at activation: the cell's nginx device server.
    let devices_of = |uuids: &[String]| -> Vec<(String, String)> {
        uuids
            .iter()
            .map(|uuid| {
                (
                    uuid.clone(),
                    format!("http://{}", device_listens[default_cell(uuid, 2)]),
                )
            })
            .collect()
    };
    let readers = Readers::start(&through_router, &uuids, 3);
    let devices = Devices::start(&devices_of(&uuids));
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Each ISU's slot moves to the other cell and back: 12 map versions, each written to the
    // router file and reloaded (at most one reload a second).
    let started = Instant::now();
    for round in 0..2 {
        for uuid in &uuids {
            let to = match (default_cell(uuid, 2) + round) % 2 {
                0 => "b",
                _ => "a",
            };
            let (status, answer) = cells_call(
                &cluster,
                "/internal/cells/migrate",
                json!({"slot": &uuid[..2], "to": to}),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{answer}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    // And the first ISU's slot (of cell a) stays on b: a non-default map for what follows.
    let away = &uuids[0];
    assert_eq!(default_cell(away, 2), 0);
    let (status, answer) = cells_call(
        &cluster,
        "/internal/cells/migrate",
        json!({"slot": &away[..2], "to": "b"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let migrating = started.elapsed();
    let coordinator_log = cluster.node_log(cluster.workers.len());
    let reloads = coordinator_log.matches("router reloaded").count();
    assert!(reloads >= 3, "the router reloaded {reloads} times:\n{coordinator_log}");
    assert!(!coordinator_log.contains("router reload failed"), "{coordinator_log}");
    // The signal reached nginx: its master started new worker processes.
    let workers_after = nginx_workers(&pid_file);
    assert!(
        workers_after.iter().any(|worker| !workers_before.contains(worker)),
        "nginx's workers were {workers_before:?} and are {workers_after:?}: no reload reached it"
    );
    server.assert_running();
    let rendered = std::fs::read_to_string(&placement_file).unwrap();
    let version = placement(&cluster).await["map"]["version"].as_u64().unwrap();
    assert!(
        rendered.contains(&format!("version {version} ")),
        "the router file holds map v{version}:\n{}",
        &rendered[..rendered.len().min(400)]
    );

    // The control plane goes away: the router and the cells go on without it.
    let coordinator = cluster.workers.len();
    cluster.kill_node(coordinator);
    let reads_before = readers.reads.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let reads_without = readers.reads.load(Ordering::Relaxed) - reads_before;
    let (reads, retries, errors) = readers.stop().await;
    let (mut acknowledged, refused, closed) = devices.stop().await;
    assert!(
        reads_without >= 20,
        "only {reads_without} reads without the coordinator"
    );
    assert!(
        errors.is_empty(),
        "{} of {reads} reads failed: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert_eq!(refused, 0, "device posts refused through the router");
    // A post on a kept-alive connection that an nginx worker closed as it left (a reload)
    // fails before any answer and is sent again: at most a few per reload.
    assert!(
        closed <= reloads * 6,
        "{closed} posts met a closed connection in {reloads} reloads"
    );

    // A worker restarted meanwhile (its cell is unavailable while it restarts) forwards by
    // the map it saved: a's default map would have it answer 404 for the ISU whose slot
    // moved to b (it forgot its copy).
    cluster.restart_worker(0);
    assert_eq!(
        local_status(&cluster, &alice, 0, away, true).await,
        404,
        "a holds no copy"
    );
    assert_eq!(
        local_status(&cluster, &alice, 0, away, false).await,
        200,
        "a forwards to b"
    );
    let readers = Readers::start(&through_router, &uuids, 3);
    let devices = Devices::start_at(uuids.len() as i64, &devices_of(&uuids));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (reads_after, _, errors) = readers.stop().await;
    let (acknowledged_after, refused, _) = devices.stop().await;
    assert!(
        errors.is_empty(),
        "{} of {reads_after} reads failed after the restart: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert_eq!(refused, 0, "device posts refused after the restart");
    for (all, after) in acknowledged.iter_mut().zip(acknowledged_after) {
        assert!(after.len() >= 10, "devices went on posting without the coordinator");
        all.extend(after);
    }

    let map = placement_after_restart(&mut cluster).await;
    // The router file already holds the restarted coordinator's map: nginx is not reloaded
    // (a reload would close every idle kept-alive client connection for nothing).
    let coordinator = cluster.workers.len();
    cluster
        .wait_for_log(
            coordinator,
            &format!("router map unchanged: not reloaded version={version}"),
        )
        .await;
    for uuid in &uuids {
        let owner = map["map"]["slots"][usize::from_str_radix(&uuid[..2], 16).unwrap()]
            .as_u64()
            .unwrap() as usize;
        let expected = if uuid == away { 1 } else { default_cell(uuid, 2) };
        assert_eq!(owner, expected, "{uuid}");
    }
    for (uuid, acknowledged) in uuids.iter().zip(&acknowledged) {
        // Straight to the workers (the router's routes were checked above).
        assert_eq!(&own_timestamps(&alice, uuid).await, acknowledged, "{uuid}");
    }
    eprintln!(
        "router: {reloads} reloads in {migrating:?}; {reads} reads, {retries} retried once after a reload, 0 errors; {closed} device posts sent again after a reload closed their connection, 0 refused; {reads_after} more reads after a worker restart without the coordinator"
    );
    server.assert_running();
    cluster.assert_no_crash();
}

/// The worker processes of the nginx master that `pid_file` names.
fn nginx_workers(pid_file: &std::path::Path) -> Vec<u32> {
    let pid = std::fs::read_to_string(pid_file).expect("nginx's pid file");
    let pid = pid.trim();
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|child| child.parse().ok())
        .collect()
}

/// The coordinator started again (its log has everything); its placement answer.
async fn placement_after_restart(cluster: &mut Cluster) -> serde_json::Value {
    let coordinator = cluster.workers.len();
    cluster.start_node(coordinator);
    let cluster = &*cluster;
    wait_until(
        "the coordinator answers again",
        Duration::from_secs(10),
        || async move {
            let response = cluster
                .internal_get(&format!("{}/internal/placement", cluster.coordinator))
                .await
                .ok()?;
            response.json::<serde_json::Value>().await.ok()
        },
    )
    .await
}
