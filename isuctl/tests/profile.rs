//! `isuctl profile` against stand-in nodes: the node list comes from the run directory's
//! `cluster.json` for any number of cells, every node is asked at once with the cluster
//! secret, and a node that does not answer fails the command after the others are written.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use isuctl::local::{ClusterFile, RunDir, WorkerEntry};
use isuctl::output::Format;
use isuctl::profile::{self, ProfileFormat};

const SECRET: &str = "stand-in-secret";

/// One request a stand-in node saw: its name, the secret header and the query.
type Seen = Arc<Mutex<Vec<(String, Option<String>, String)>>>;

/// Starts one stand-in node per name on its own port (a thread with its own runtime, since
/// `isuctl profile` runs one of its own); `failing` answers 500.
fn stand_in_nodes(names: &[&str], failing: Option<&str>) -> (Vec<SocketAddr>, Seen) {
    let seen: Seen = Arc::default();
    let (sender, receiver) = std::sync::mpsc::channel();
    let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
    let failing = failing.map(str::to_owned);
    let shared = seen.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut addresses = Vec::new();
            for name in names {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addresses.push(listener.local_addr().unwrap());
                let fails = failing.as_deref() == Some(name.as_str());
                let app = axum::Router::new()
                    .route(
                        "/debug/pprof/profile",
                        get(
                            move |State((name, seen)): State<(String, Seen)>,
                                  headers: HeaderMap,
                                  RawQuery(query): RawQuery| async move {
                                let secret = headers
                                    .get("x-cluster-secret")
                                    .and_then(|value| value.to_str().ok())
                                    .map(str::to_owned);
                                seen.lock()
                                    .unwrap()
                                    .push((name.clone(), secret, query.unwrap_or_default()));
                                if fails {
                                    return (StatusCode::INTERNAL_SERVER_ERROR, "profiler busy".to_owned());
                                }
                                (StatusCode::OK, format!("profile of {name}"))
                            },
                        ),
                    )
                    .with_state((name, shared.clone()));
                tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
            }
            sender.send(addresses).unwrap();
            std::future::pending::<()>().await;
        });
    });
    (receiver.recv().unwrap(), seen)
}

/// A run directory describing a cluster of `cells` workers at the stand-in addresses.
fn run_dir_of(addresses: &[SocketAddr], cells: &[&str]) -> (tempfile::TempDir, RunDir) {
    let dir = tempfile::tempdir().unwrap();
    let cluster = ClusterFile {
        public_url: "http://127.0.0.1:1".to_owned(),
        coordinator_url: format!("http://{}", addresses[0]),
        replicas: Vec::new(),
        workers: cells
            .iter()
            .zip(&addresses[1..])
            .map(|(cell, address)| WorkerEntry {
                cell: cell.to_string(),
                url: format!("http://{address}"),
                device_url: String::new(),
            })
            .collect(),
        jia_url: None,
        prometheus_url: None,
        durable: false,
        ops_token_file: None,
    };
    std::fs::write(
        dir.path().join("cluster.json"),
        serde_json::to_string(&cluster).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.path().join("secret"), format!("{SECRET}\n")).unwrap();
    let run_dir = RunDir::new(dir.path());
    (dir, run_dir)
}

#[test]
fn every_node_of_three_cells_is_profiled_at_once_with_the_secret() {
    let names = ["coordinator", "worker-a", "worker-b", "worker-c"];
    let (addresses, seen) = stand_in_nodes(&names, None);
    let (_dir, run_dir) = run_dir_of(&addresses, &["a", "b", "c"]);
    let out = tempfile::tempdir().unwrap();
    let args = profile::Args {
        seconds: 2,
        format: ProfileFormat::Pb,
        out: Some(out.path().to_owned()),
    };

    profile::run_in(&run_dir, args, Format::Json).unwrap();

    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    let expected: Vec<_> = names
        .iter()
        .map(|name| {
            (
                name.to_string(),
                Some(SECRET.to_owned()),
                "seconds=2&format=pb".to_owned(),
            )
        })
        .collect();
    assert_eq!(seen, expected);
    for name in names {
        let written = std::fs::read_to_string(out.path().join(format!("{name}.pb"))).unwrap();
        assert_eq!(written, format!("profile of {name}"));
    }
}

#[test]
fn a_node_that_does_not_answer_fails_the_command_after_the_others_are_written() {
    let names = ["coordinator", "worker-a", "worker-b"];
    let (addresses, _seen) = stand_in_nodes(&names, Some("worker-b"));
    let (_dir, run_dir) = run_dir_of(&addresses, &["a", "b"]);
    let out = tempfile::tempdir().unwrap();
    let args = profile::Args {
        seconds: 1,
        format: ProfileFormat::Svg,
        out: Some(out.path().to_owned()),
    };

    let error = profile::run_in(&run_dir, args, Format::Human).unwrap_err().to_string();

    assert!(
        error.contains("worker-b") && error.contains("500") && error.contains("profiler busy"),
        "{error}"
    );
    assert!(out.path().join("coordinator.svg").is_file());
    assert!(out.path().join("worker-a.svg").is_file());
    assert!(!out.path().join("worker-b.svg").exists());
}

#[test]
fn without_a_cluster_the_command_says_how_to_start_one() {
    let dir = tempfile::tempdir().unwrap();
    let args = profile::Args {
        seconds: 1,
        format: ProfileFormat::Svg,
        out: Some(dir.path().join("out")),
    };
    let error = profile::run_in(&RunDir::new(dir.path()), args, Format::Human)
        .unwrap_err()
        .to_string();
    assert!(error.contains("cluster up"), "{error}");
}
