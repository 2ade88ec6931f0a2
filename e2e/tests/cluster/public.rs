//! The public nginx server: routing by the placement map, internal routes hidden, the front
//! end, and a dead worker's reads failing fast.

use std::time::{Duration, Instant};

use e2e::*;
use serde_json::json;
use shared::dataset::generated::ICONS;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_nginx_routes_by_parity_and_hides_internal_routes() {
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let run_dir = ScratchDir::new("public-nginx");
    let front = RouterFront::new(&run_dir.path, 2);
    let device_a = front.device_listens[0].clone();
    let cluster = spawn_cluster_with(ClusterOptions {
        device_urls: Some(front.device_urls()),
        ..ClusterOptions::default()
    })
    .await;
    let web = e2e::fixture_front_end();
    let (mut server, public) = public_nginx_at(&cluster, &nginx, &web.path, &front).await;
    let anonymous = Agent::new(Routes::Public(public.clone()));
    server.assert_running();

    let page = anonymous.get("/").await;
    assert_eq!(page.status.as_u16(), 200);
    assert!(page.content_type.starts_with("text/html"), "{}", page.content_type);
    let alice = sign_in_with(Agent::new(Routes::Public(public.clone())), &cluster.signer, "alice").await;
    assert_eq!(alice.me().await.json(200), json!({"jia_user_id": "alice"}));
    let isus = [cluster.known_uuid('a', 1), cluster.known_uuid('b', 2)];
    for uuid in &isus {
        alice.register(uuid, "nginx", Some(ICONS[2])).await.json(201);
        assert!(alice.icon(uuid).await.body == ICONS[2]);
    }
    // Devices post through the device servers; reads go through the public server, each
    // to the worker owning the UUID (the other worker would answer 404).
    for uuid in &isus {
        anonymous
            .conditions(uuid, &format!("end_time={FAR_FUTURE}&condition_level={ALL_LEVELS}"))
            .await
            .assert_error(401, NOT_SIGNED_IN);
        let items = alice
            .first_conditions(
                uuid,
                "device conditions are listed through nginx",
                Duration::from_secs(3),
            )
            .await;
        let newest = items[0]["timestamp"].as_i64().unwrap();
        let sent = cluster
            .jia
            .find_sent(uuid, newest)
            .expect("listed conditions were sent");
        assert_eq!(items[0], condition_item(uuid, "nginx", &sent));
        let graph = alice.graph(uuid, newest).await.json(200);
        let points = graph.as_array().unwrap();
        assert_eq!(points.len(), 24);
        assert!(
            points[0]["condition_timestamps"]
                .as_array()
                .unwrap()
                .contains(&json!(newest)),
            "{}",
            points[0]
        );
        alice
            .get(&format!("/api/isu/{uuid}/graph"))
            .await
            .assert_error(400, "missing: datetime");
    }
    let trend = parse_trend(&anonymous.trend().await.json(200));
    assert!(trend.len() >= 28, "{} ISUs in the trend", trend.len());
    assert_eq!(alice.isu_list().await.json(200).as_array().map(Vec::len), Some(2));

    // Internal, metrics, profiling and health routes never leave the cluster.
    let client = cluster.raw_client();
    let with_secret = |request: reqwest::RequestBuilder| request.header("x-cluster-secret", &cluster.secret);
    for (method, path) in [
        ("POST", "/internal/latest"),
        ("POST", "/internal/reset"),
        ("POST", "/internal/isu/provisional"),
        ("GET", "/metrics"),
        ("GET", "/debug/pprof/profile?seconds=1"),
        ("GET", "/healthz"),
    ] {
        let url = format!("{public}{path}");
        let request = match method {
            "POST" => client.post(&url).json(&json!({})),
            _ => client.get(&url),
        };
        let response = with_secret(request).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 404, "{method} {path} through nginx");
    }
    // The device servers take condition posts only.
    let device_root = client.get(format!("http://{device_a}/")).send().await.unwrap();
    assert_eq!(device_root.status().as_u16(), 404);
    server.assert_running();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontend_routes_serve_index_html_and_assets() {
    let fixture = e2e::fixture_front_end();
    let web = fixture.path.clone();
    let cluster = spawn_cluster_with(ClusterOptions {
        coordinator_args: vec!["--static-dir".into(), web.display().to_string()],
        ..ClusterOptions::default()
    })
    .await;
    let index = std::fs::read(web.join("index.html")).unwrap();
    let agent = cluster.agent();
    for path in [
        "/",
        "/?jwt=abc",
        "/isu/x",
        "/isu/x/condition",
        "/isu/x/graph",
        "/register",
    ] {
        let page = agent.get(path).await;
        assert_eq!(page.status.as_u16(), 200, "{path}");
        assert!(
            page.content_type.starts_with("text/html"),
            "{path}: {}",
            page.content_type
        );
        assert!(page.body == index, "{path} is not index.html");
    }
    let css = agent.get("/assets/app.css").await;
    assert_eq!(css.status.as_u16(), 200);
    assert!(css.body == std::fs::read(web.join("assets/app.css")).unwrap());
    assert_eq!(agent.get("/assets/missing.js").await.status.as_u16(), 404);
}

/// A dead worker: reads of its ISUs through nginx get a short text 503 at once, never a hang,
/// while the other worker's ISUs are served as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_reads_fail_fast_with_503_through_nginx_while_the_other_serves() {
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let mut cluster = spawn_cluster().await;
    let web = e2e::fixture_front_end();
    let (mut server, public) = public_nginx(&cluster, &nginx, &web.path).await;
    let isucon1 = sign_in_with(Agent::new(Routes::Public(public.clone())), &cluster.signer, "isucon1").await;
    let isus = dataset_isus_of("isucon1");
    let on = |even: bool| {
        isus.iter()
            .find(|isu| u8::from_str_radix(&isu.uuid[..1], 16).unwrap() % 2 == u8::from(!even))
            .map(|isu| isu.uuid.clone())
            .expect("isucon1 owns ISUs on both shards")
    };
    let (on_a, on_b) = (on(true), on(false));
    assert_eq!(
        isucon1
            .conditions(&on_a, "end_time=9999999999&condition_level=info")
            .await
            .status,
        200
    );

    cluster.kill_node(0);
    for _ in 0..5 {
        let started = Instant::now();
        let dead = isucon1
            .conditions(&on_a, "end_time=9999999999&condition_level=info")
            .await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
        dead.assert_error(503, "service unavailable");
        let graph = isucon1.get(&format!("/api/isu/{on_a}/graph?datetime=1627916400")).await;
        assert_eq!(graph.status.as_u16(), 503, "{}", graph.request);
        let alive = isucon1
            .conditions(&on_b, "end_time=9999999999&condition_level=info")
            .await;
        assert_eq!(alive.status.as_u16(), 200, "{}", alive.request);
        assert_eq!(isucon1.isu_list().await.status.as_u16(), 200);
    }
    server.assert_running();
}
