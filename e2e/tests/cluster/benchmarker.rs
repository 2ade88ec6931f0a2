//! The bench's own checks against the sandbox through the real nginx: its compatibility
//! check and error checks (the project's data and the contest's), and its capacity ramp.

use std::time::Duration;

use e2e::*;

use super::initialize::{official_data_dir, spawn_official_cluster};
use serde_json::json;

/// The bench's compatibility check (§13.2) and its error checks, against the real cluster
/// behind the real nginx, with the project's dataset: not a single error or timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_compatibility_check_and_error_checks_pass_through_nginx() {
    use bench::scenario::expected::ExpectedData;
    use bench::scenario::prepare::{
        compatibility_check, run_error_checks, ErrorCheckConfig, ErrorCheckUser, PrepareContext,
        LOAD_ERROR_CHECK_TIMEOUT,
    };
    use bench::scenario::stats::Stats;
    use std::sync::Arc;

    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let cluster = spawn_cluster().await;
    // The built front end when there is one (its index.html references /assets/ files).
    let web = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../web");
    let static_dir = if web.join("dist/index.html").is_file() {
        web.join("dist")
    } else {
        web
    };
    let (mut server, public) = public_nginx(&cluster, &nginx, &static_dir).await;

    let stats = Arc::new(Stats::default());
    let expected = Arc::new(ExpectedData::load("project").expect("the project's dataset"));
    let ctx = PrepareContext {
        signer: cluster.signer.clone(),
        ..PrepareContext::new(&public, cluster.jia.clone(), stats.clone(), expected.clone())
    };
    let outcome = compatibility_check(&ctx).await;
    let snapshot = stats.snapshot();
    assert!(outcome.passed, "{snapshot}\n{}", snapshot.error_samples.join("\n"));
    assert_eq!(outcome.registered.len(), 3);
    println!("compatibility check: {snapshot}");
    assert!(snapshot.requests > 100, "only {} requests", snapshot.requests);
    if static_dir.ends_with("dist") {
        assert!(snapshot.latencies.contains_key("GET /assets/*"), "no asset fetched");
    }

    // The load's error checks: 1 s timeout, every 500 ms, with isucon1's ISUs old and new.
    let isucon1 = expected.user("isucon1").unwrap();
    let mut isu_uuids: Vec<String> = expected.isus_of(isucon1).map(|isu| isu.uuid.clone()).collect();
    isu_uuids.extend(outcome.registered.iter().map(|isu| isu.isu.uuid.clone()));
    let user = ErrorCheckUser {
        jia_user_id: "isucon1".into(),
        isu_uuids,
    };
    let config = ErrorCheckConfig {
        target: public.clone(),
        timeout: LOAD_ERROR_CHECK_TIMEOUT,
        signer: cluster.signer.clone(),
        clock: cluster.jia.clock(),
        stats: stats.clone(),
    };
    let requests_before = stats.snapshot().requests;
    let checks = run_error_checks(config, move || Some(user.clone()), Duration::from_millis(500));
    // Until the checks have sent more than 80 requests (about two rounds, 2 s on a quiet
    // machine), for at most 15 s: a busy machine makes the rounds slower, not wrong.
    tokio::pin!(checks);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while stats.snapshot().requests - requests_before <= 80 && tokio::time::Instant::now() < deadline {
        tokio::select! {
            _ = &mut checks => break,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    let snapshot = stats.snapshot();
    assert_eq!(snapshot.error_count(), 0, "{:?}", snapshot.error_samples);
    assert_eq!(snapshot.timeouts, 0);
    println!("with the error checks: {snapshot}");
    assert!(
        snapshot.requests - requests_before > 80,
        "{} requests in the error checks",
        snapshot.requests - requests_before
    );
    server.assert_running();
}

/// The same compatibility check with the contest's data: the official dump, key and default
/// icon on the cluster, and the official `initialize.json` as the bench's expectation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_compatibility_check_passes_on_the_official_data_shared_data() {
    use bench::scenario::expected::ExpectedData;
    use bench::scenario::prepare::{compatibility_check, PrepareContext};
    use bench::scenario::stats::Stats;
    use std::sync::Arc;

    let Some(dir) = official_data_dir() else { return };
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let cluster = spawn_official_cluster(&dir).await;
    let web = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../web");
    let (mut server, public) = public_nginx(&cluster, &nginx, &web).await;
    let stats = Arc::new(Stats::default());
    let expected =
        ExpectedData::load(&dir.join("initialize.json").display().to_string()).expect("the official initialize.json");
    let ctx = PrepareContext {
        signer: cluster.signer.clone(),
        ..PrepareContext::new(&public, cluster.jia.clone(), stats.clone(), Arc::new(expected))
    };
    let outcome = compatibility_check(&ctx).await;
    let snapshot = stats.snapshot();
    assert!(outcome.passed, "{snapshot}\n{}", snapshot.error_samples.join("\n"));
    assert!(outcome.registered.iter().all(|isu| isu.isu.id > 28));
    server.assert_running();
}

/// The bench's capacity mode against the real cluster behind the real nginx: a short ramp of
/// small steps holds every objective (nothing is near saturation at 40 ISUs), each step
/// measured device posts at the official rate, reads and the CPU of every node, and the
/// report names the sustained ISUs and the cluster CPU per device post.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_capacity_ramp_measures_each_step_through_nginx() {
    use bench::capacity::{run, CapacityConfig};
    use bench::nodes::{Node, Nodes};

    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let cluster = spawn_cluster().await;
    let static_dir = fixture_front_end();
    let (mut server, public) = public_nginx(&cluster, &nginx, &static_dir.path).await;
    let nodes = [
        ("coordinator", &cluster.coordinator),
        ("worker-a", &cluster.workers[0]),
        ("worker-b", &cluster.workers[1]),
    ]
    .into_iter()
    .map(|(name, url)| bench::nodes::parse_node(&format!("{name}={url}")).unwrap())
    .collect::<Vec<Node>>();
    let config = CapacityConfig {
        target: public,
        jia: jia_sim::JiaConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            run_for: Duration::from_secs(60),
            ..jia_sim::JiaConfig::default()
        },
        signer: cluster.signer.clone(),
        nodes: Some(Nodes::new(nodes, cluster.secret.clone()).unwrap()),
        processes: Vec::new(),
        step_isus: 20,
        step_time: Duration::from_secs(1),
        max_isus: 40,
        cluster_cores: 2.0,
        // Generous: the test shares the machine with the others; the ramp's logic is what is tested.
        device_post_p99_limit: Duration::from_secs(5),
        read_p99_limit: Duration::from_secs(5),
        min_post_rate_share: 0.2,
        isus_per_reader: 10,
        read_pause: Duration::from_millis(100),
        request_timeout: Duration::from_secs(10),
    };
    let report = run(config).await.expect("the ramp runs");
    assert_eq!(report.steps.iter().map(|step| step.isus).collect::<Vec<_>>(), [20, 40]);
    for step in &report.steps {
        assert_eq!((step.errors, step.broken.as_deref()), (0, None), "{step:?}");
        // 20 ISUs post every 40 ms: about 500 posts a second (the machine is shared, so loosely).
        assert!(
            step.device_posts as f64 / step.seconds > 100.0 * (step.isus / 20) as f64,
            "{step:?}"
        );
        assert!(step.reads > 0 && step.read_p99_ms.is_some(), "{step:?}");
        for node in ["coordinator", "worker-a", "worker-b", "bench"] {
            let rate = step
                .cpu_per_second
                .iter()
                .find(|(name, _)| name == node)
                .and_then(|(_, rate)| *rate);
            assert!(rate.is_some_and(|rate| rate > 0.0), "{node}: {step:?}");
        }
        assert!(
            step.cluster_cpu_per_device_post_us.is_some_and(|us| us > 0.0),
            "{step:?}"
        );
    }
    let json = report.to_json();
    assert_eq!(json["capacity"]["sustained_isus"], json!(40));
    assert_eq!(json["capacity"]["isus_per_core"], json!(20.0));
    assert!(json["capacity"]["cluster_cpu_per_device_post_us"].as_f64().is_some());
    assert!(["cluster", "bench", "neither"].contains(&json["capacity"]["saturated"].as_str().unwrap()));
    server.assert_running();
}
