//! A worker replaced in place: a second process of the same cell, started beside the first on
//! the same addresses and data directory, binds (`SO_REUSEPORT`), waits for the first to
//! finish, replays its complete log and serves. Real processes; clients post and read all
//! along, four with a fresh connection per request (is a connection ever refused, reset or
//! dropped unanswered?) and four kept-alive ones posting like devices (does a request ever
//! meet a connection being closed?): none may fail, and every condition acknowledged by
//! either process is there afterwards.

use std::io::Read as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::json;
use shared::protocol::{ResetShard, ShardIsu, SECRET_HEADER};
use shared::session::{SessionKey, COOKIE_NAME};

const SECRET: &str = "test-secret-of-24-bytes";
const GENERATION: u64 = 5;
const ISU: &str = "0b104b95-3532-4828-8550-89da717b9667";
/// Clients posting and reading during the hand-over, and how many of them open a fresh
/// connection per request.
const CLIENTS: i64 = 8;
const FRESH_CONNECTION_CLIENTS: i64 = 4;
const INFO: &str = "is_dirty=false,is_overweight=false,is_broken=false";

struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn_worker(data_dir: &Path, listen: u16, device: u16, log: &Path, replace: bool) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_worker"));
    if replace {
        command.arg("--replace");
    }
    command
        .args(["--cell", "a", "--listen", &format!("127.0.0.1:{listen}")])
        .args(["--device-listen", &format!("127.0.0.1:{device}")])
        .args(["--coordinator-url", "http://127.0.0.1:9", "--cluster-secret", SECRET])
        .arg("--data-dir")
        .arg(data_dir)
        .env("NO_COLOR", "1")
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn read(path: &Path) -> String {
    let mut text = String::new();
    std::fs::File::open(path).unwrap().read_to_string(&mut text).unwrap();
    text
}

async fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_beside_the_running_worker_takes_over_with_no_request_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (listen, device) = (free_port(), free_port());
    let base = format!("http://127.0.0.1:{listen}");
    let device_base = format!("http://127.0.0.1:{device}");
    let mut workers = Workers(vec![spawn_worker(
        dir.path(),
        listen,
        device,
        &dir.path().join("first.log"),
        false,
    )]);
    // A fresh connection per request: what is measured is whether a connection is ever
    // refused or dropped, not keep-alive races.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let health = || {
        let client = client.clone();
        let url = format!("{base}/healthz");
        async move { client.get(url).send().await.is_ok_and(|r| r.status().is_success()) }
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !health().await {
        assert!(Instant::now() < deadline, "the first worker never became healthy");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reset = ResetShard {
        generation: GENERATION,
        users: vec!["alice".into()],
        isus: vec![ShardIsu {
            id: 1,
            uuid: ISU.into(),
            owner: "alice".into(),
            name: "chair".into(),
            character: "すなお".into(),
            conditions: Vec::new(),
        }],
    };
    let reset = client
        .post(format!("{base}{}", shared::protocol::WORKER_RESET))
        .header(SECRET_HEADER, SECRET)
        .json(&reset)
        .send()
        .await
        .unwrap();
    assert!(reset.status().is_success());

    // Posts and reads all along: clients 0 to 3 open a connection per request, 4 to 7 keep
    // theirs alive; each posts its own timestamps.
    let acknowledged: Arc<Mutex<Vec<i64>>> = Arc::default();
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for index in 0..CLIENTS {
        let client = match index {
            0..FRESH_CONNECTION_CLIENTS => client.clone(),
            _ => reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        };
        let (acknowledged, failures, stop) = (acknowledged.clone(), failures.clone(), stop.clone());
        let (base, device_base) = (base.clone(), device_base.clone());
        load.push(tokio::spawn(async move {
            let mut timestamp = 1_000_000 * (index + 1);
            while !stop.load(Ordering::SeqCst) {
                timestamp += 1;
                let body = json!([{"is_sitting": false, "condition": INFO, "message": "m", "timestamp": timestamp}]);
                match client
                    .post(format!("{device_base}/api/condition/{ISU}"))
                    .json(&body)
                    .send()
                    .await
                {
                    Ok(response) if response.status().as_u16() == 202 => acknowledged.lock().push(timestamp),
                    Ok(response) => failures
                        .lock()
                        .push(format!("client {index} post: {}", response.status())),
                    Err(error) => failures.lock().push(format!("client {index} post: {error:?}")),
                }
                match client.get(format!("{base}/healthz")).send().await {
                    Ok(response) if response.status().is_success() => {}
                    Ok(response) => failures
                        .lock()
                        .push(format!("client {index} read: {}", response.status())),
                    Err(error) => failures.lock().push(format!("client {index} read: {error:?}")),
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The replacement binds beside the first and waits for the data directory.
    let second_log = dir.path().join("second.log");
    // Without --replace a second worker is refused: durable workers never share by mistake.
    let refused_log = dir.path().join("refused.log");
    let refused = spawn_worker(dir.path(), listen, device, &refused_log, false)
        .wait()
        .unwrap();
    assert!(!refused.success(), "a second worker without --replace must not start");
    workers
        .0
        .push(spawn_worker(dir.path(), listen, device, &second_log, true));
    wait_for(
        "the replacement to wait for the data directory",
        Duration::from_secs(10),
        || {
            let log = read(&second_log);
            assert!(!log.contains("Error"), "the replacement failed: {log}");
            log.contains("holds the data directory")
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first = workers.0[0].id();
    Command::new("kill")
        .args(["-TERM", &first.to_string()])
        .status()
        .unwrap();
    let exited = tokio::task::spawn_blocking(move || {
        let mut first = workers.0.remove(0);
        let status = first.wait();
        (workers, status)
    });
    let (workers, status) = exited.await.unwrap();
    assert!(status.unwrap().success(), "the first worker ends cleanly");
    wait_for("the hand-over", Duration::from_secs(10), || {
        read(&second_log).contains("data directory handed over")
    })
    .await;
    // The replacement read the log ahead while the first still wrote it, and then the rest.
    wait_for("the replacement's replay", Duration::from_secs(10), || {
        read(&second_log).contains("log replayed")
    })
    .await;
    let replayed = read(&second_log);
    let field = |name: &str| -> u64 {
        let line = replayed.lines().find(|line| line.contains("log replayed")).unwrap();
        let value = line.split(&format!(" {name}=")).nth(1).unwrap();
        value.split(' ').next().unwrap().parse().unwrap()
    };
    let (records, ahead) = (field("records"), field("records_read_ahead"));
    assert!(ahead > 0, "nothing was read ahead: {replayed}");
    assert!(records >= ahead, "{records} records replayed, {ahead} of them ahead");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    for client in load {
        client.await.unwrap();
    }

    let failures = failures.lock().clone();
    assert!(
        failures.is_empty(),
        "no request may fail during the hand-over: {failures:?}"
    );
    let acknowledged = acknowledged.lock().clone();
    for index in 0..CLIENTS {
        let range = 1_000_000 * (index + 1)..1_000_000 * (index + 2);
        let posted = acknowledged
            .iter()
            .filter(|&timestamp| range.contains(timestamp))
            .count();
        assert!(posted > 20, "client {index}'s load ran ({posted} posts)");
    }
    // Every acknowledged condition is served by the replacement.
    let cookie = format!(
        "{COOKIE_NAME}={}",
        SessionKey::from_secret(SECRET).sign("alice", GENERATION)
    );
    for timestamp in &acknowledged {
        let url = format!(
            "{base}/api/condition/{ISU}?start_time={timestamp}&end_time={}&condition_level=info,warning,critical",
            timestamp + 1
        );
        let response = client.get(url).header("cookie", &cookie).send().await.unwrap();
        assert!(response.status().is_success());
        let items: Vec<serde_json::Value> = response.json().await.unwrap();
        assert_eq!(items.len(), 1, "condition {timestamp} acknowledged and then lost");
    }
    drop(workers);
}
