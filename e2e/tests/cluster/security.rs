//! Security and bad input, through the real nodes: the cluster secret on every internal
//! route of every node, nginx never routing them, sign-in tokens an attacker could craft,
//! forged session cookies, an isolation probe over every initial ISU, and the limits on
//! oversized or out-of-range input (a clear 4xx, never a 5xx or a crash), and calls between
//! nodes never taking a proxy the environment names.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::dataset::generated::VIRTUAL_START;
use shared::protocol::{
    COORDINATOR_CELLS, COORDINATOR_DRAIN, COORDINATOR_LATEST, COORDINATOR_MEMBERS, COORDINATOR_MIGRATE,
    COORDINATOR_PLACEMENT, COORDINATOR_REBALANCE, COORDINATOR_REPLICA, HEALTH, METRICS, PPROF_LAST, PPROF_PROFILE,
    SECRET_HEADER, WORKER_ACCEPT, WORKER_ACTIVATE, WORKER_EXPORT, WORKER_FORGET, WORKER_IMPORT, WORKER_JIA_ACTIVATE,
    WORKER_LATEST_ALL, WORKER_PLACEMENT, WORKER_PROVISIONAL, WORKER_PUBLISH, WORKER_RESEND_LATEST, WORKER_RESET,
    WORKER_ROLLBACK, WORKER_UNPUBLISHED, WORKER_USERS,
};
use shared::session::{SessionKey, COOKIE_NAME};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use e2e::*;

/// The public key the nodes verify sign-in tokens with, for the key-confusion attack.
const PROJECT_PUBLIC_KEY_PEM: &str = include_str!("../../../keys/jwt-public.pem");
/// The body of every refusal of an internal route.
const SECRET_REQUIRED: &str = "cluster secret required";
/// Where every inter-node path is declared; the tests below must cover each of them.
const PROTOCOL_SOURCE: &str = include_str!("../../../shared/src/protocol.rs");

/// Every `/internal/`, `/debug/` and metrics path `shared::protocol` declares, read from
/// its source, so that a route added later cannot be left out of these tests.
fn declared_secret_paths() -> std::collections::BTreeSet<String> {
    PROTOCOL_SOURCE
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub const "))
        .filter_map(|declaration| declaration.split_once(": &str = \"").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split_once('"').map(|(path, _)| path))
        .filter(|path| path.starts_with("/internal/") || path.starts_with("/debug/") || *path == METRICS)
        .map(str::to_owned)
        .collect()
}

// ------------------------------------------------------------------ the cluster secret

/// One internal or debug route of one node, with a body that would do harm if accepted.
struct InternalRequest {
    node: String,
    method: reqwest::Method,
    path: &'static str,
    body: Option<Value>,
}

/// The generation a node reports on `/healthz` (public on the node, hidden by nginx).
async fn generation_of(client: &reqwest::Client, node: &str) -> u64 {
    let health: Value = client
        .get(format!("{node}{HEALTH}"))
        .send()
        .await
        .expect("healthz answers")
        .json()
        .await
        .expect("healthz is JSON");
    health["generation"].as_u64().expect("a generation")
}

/// Every internal, metrics and profiling route of the three nodes, each with a message of
/// the current generation that would change the data if the node accepted it.
async fn every_internal_request(cluster: &Cluster, unregistered: &str) -> Vec<InternalRequest> {
    let client = cluster.raw_client();
    let isu1 = &dataset().isus[0];
    let coordinator_generation = generation_of(&client, &cluster.coordinator).await;
    let mut requests = vec![InternalRequest {
        node: cluster.coordinator.clone(),
        method: reqwest::Method::POST,
        path: COORDINATOR_LATEST,
        body: Some(
            json!({"generation": coordinator_generation, "items": [{"uuid": isu1.uuid, "condition":
            {"timestamp": VIRTUAL_START + 999_999, "flags": 15, "message": "forged"}}]}),
        ),
    }];
    requests.push(InternalRequest {
        node: cluster.coordinator.clone(),
        method: reqwest::Method::POST,
        path: shared::protocol::COORDINATOR_LATEST_STREAM,
        body: Some(json!({"generation": coordinator_generation})),
    });
    let coordinator_call = |method, path, body| InternalRequest {
        node: cluster.coordinator.clone(),
        method,
        path,
        body,
    };
    requests.push(coordinator_call(reqwest::Method::GET, COORDINATOR_PLACEMENT, None));
    requests.push(coordinator_call(reqwest::Method::GET, COORDINATOR_CELLS, None));
    requests.push(coordinator_call(reqwest::Method::GET, COORDINATOR_REPLICA, None));
    requests.push(coordinator_call(
        reqwest::Method::GET,
        shared::protocol::COORDINATOR_REPLICA_ISUS,
        None,
    ));
    let icon_path: &'static str =
        Box::leak(format!("{}/{}", shared::protocol::COORDINATOR_ICONS, "0".repeat(64)).into_boxed_str());
    requests.push(coordinator_call(reqwest::Method::GET, icon_path, None));
    requests.push(coordinator_call(reqwest::Method::PUT, icon_path, None));
    requests.push(coordinator_call(
        reqwest::Method::POST,
        COORDINATOR_MEMBERS,
        Some(json!({"remove": 1})),
    ));
    requests.push(coordinator_call(
        reqwest::Method::POST,
        COORDINATOR_MIGRATE,
        Some(json!({"slot": "00", "to": "b"})),
    ));
    requests.push(coordinator_call(
        reqwest::Method::POST,
        COORDINATOR_DRAIN,
        Some(json!({"cell": "a"})),
    ));
    requests.push(coordinator_call(
        reqwest::Method::POST,
        COORDINATOR_REBALANCE,
        Some(json!({})),
    ));
    for worker in &cluster.workers {
        let generation = generation_of(&client, worker).await;
        let victim = dataset()
            .isus
            .iter()
            .find(|isu| cluster.workers[shard_index(&isu.uuid)] == *worker)
            .expect("each worker owns initial ISUs");
        let post = |path, body| InternalRequest {
            node: worker.clone(),
            method: reqwest::Method::POST,
            path,
            body: Some(body),
        };
        requests.push(post(
            WORKER_RESET,
            json!({"generation": generation, "users": [], "isus": []}),
        ));
        requests.push(post(
            WORKER_USERS,
            json!({"generation": generation, "users": ["intruder"]}),
        ));
        requests.push(post(
            WORKER_PROVISIONAL,
            json!({"generation": generation, "id": 999, "uuid": unregistered, "owner": "intruder", "name": "x"}),
        ));
        requests.push(post(
            WORKER_ACCEPT,
            json!({"generation": generation, "uuid": unregistered, "id": 999, "record": "forged"}),
        ));
        requests.push(post(
            WORKER_JIA_ACTIVATE,
            json!({"generation": generation, "uuid": unregistered, "id": 999, "record": "forged",
                   "jia_service_url": "http://127.0.0.1:9", "target_base_url": "http://127.0.0.1:9"}),
        ));
        requests.push(post(
            WORKER_PUBLISH,
            json!({"generation": generation, "uuid": unregistered, "id": 999, "character": "すなお"}),
        ));
        requests.push(post(
            WORKER_ROLLBACK,
            json!({"generation": generation, "id": victim.id, "uuid": victim.uuid}),
        ));
        requests.push(post(WORKER_RESEND_LATEST, json!({"generation": generation})));
        requests.push(post(WORKER_UNPUBLISHED, json!({"generation": generation})));
        requests.push(post(WORKER_LATEST_ALL, json!({"generation": generation})));
        let map = json!({"version": 99, "cells": [{"name": "x", "internal_url": "http://127.0.0.1:9", "device_url": "http://127.0.0.1:9"}], "slots": vec![0; 256], "pins": {}});
        requests.push(post(WORKER_PLACEMENT, map.clone()));
        requests.push(post(
            WORKER_EXPORT,
            json!({"generation": generation, "migration": 1, "subject": {"Slot": 0}, "target_url": "http://127.0.0.1:9"}),
        ));
        requests.push(post(
            WORKER_IMPORT,
            json!({"generation": generation, "migration": 1, "isus": [{"id": 999, "uuid": unregistered, "owner": "intruder", "name": "x", "conditions": []}]}),
        ));
        requests.push(post(
            WORKER_ACTIVATE,
            json!({"generation": generation, "isus": [{"uuid": unregistered, "id": 999}]}),
        ));
        requests.push(post(
            WORKER_FORGET,
            json!({"generation": generation, "migration": 1, "subject": {"Slot": 0}, "map": map}),
        ));
    }
    for node in [&cluster.coordinator, &cluster.workers[0], &cluster.workers[1]] {
        for path in [METRICS, PPROF_LAST, "/debug/pprof/profile?seconds=1"] {
            requests.push(InternalRequest {
                node: node.clone(),
                method: reqwest::Method::GET,
                path,
                body: None,
            });
        }
    }
    let covered: std::collections::BTreeSet<String> = requests.iter().map(|request| route_of(request.path)).collect();
    let declared = declared_secret_paths();
    assert!(declared.len() >= 10, "{declared:?}");
    assert!(
        covered.is_superset(&declared),
        "not probed: {:?}",
        declared.difference(&covered)
    );
    assert!(covered.contains(PPROF_PROFILE));
    requests
}

/// Credentials that are not the cluster secret, each as (header name, value).
fn wrong_credentials(secret: &str) -> Vec<Option<(&'static str, String)>> {
    let mut shorter = secret.to_owned();
    shorter.pop();
    vec![
        None,
        Some((SECRET_HEADER, String::new())),
        Some((SECRET_HEADER, "wrong".to_owned())),
        Some((SECRET_HEADER, shorter.clone())),
        Some((SECRET_HEADER, format!("{secret}x"))),
        Some((SECRET_HEADER, secret.to_uppercase())),
        Some(("authorization", format!("Bearer {shorter}"))),
        Some(("authorization", format!("bearer {secret}"))),
        Some(("authorization", format!("Bearer  {secret}"))),
        Some(("authorization", secret.to_owned())),
        Some(("authorization", format!("Basic {}", URL_SAFE_NO_PAD.encode(secret)))),
        Some(("cookie", format!("{SECRET_HEADER}={secret}"))),
    ]
}

/// The declared route a probed path belongs to: without its query, and without the icon's
/// hash of `/internal/icons/{hash}`.
fn route_of(path: &str) -> String {
    let path = path.split('?').next().unwrap_or_default();
    match path.rsplit_once('/') {
        Some((route, hash)) if hash.len() == 64 && hash.bytes().all(|byte| byte.is_ascii_hexdigit()) => {
            route.to_owned()
        }
        _ => path.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_internal_route_of_every_node_refuses_a_missing_or_wrong_secret() {
    let mut cluster = spawn_cluster().await;
    let client = cluster.raw_client();
    let unregistered = cluster.known_uuid('6', 77);
    let requests = every_internal_request(&cluster, &unregistered).await;
    let credentials = wrong_credentials(&cluster.secret);
    let mut refused = 0;
    for request in &requests {
        for credential in &credentials {
            let url = format!("{}{}", request.node, request.path);
            let mut builder = client.request(request.method.clone(), &url);
            if let Some(body) = &request.body {
                builder = builder.json(body);
            }
            if let Some((name, value)) = credential {
                builder = builder.header(*name, value);
            }
            let response = builder.send().await.expect("the node answers");
            let status = response.status();
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let body = response.text().await.unwrap_or_default();
            assert_eq!(
                (status.as_u16(), body.as_str()),
                (401, SECRET_REQUIRED),
                "{} {url} with {credential:?}",
                request.method
            );
            assert!(content_type.starts_with("text/plain"), "{url}: {content_type}");
            refused += 1;
        }
    }
    assert_eq!(requests.len(), 2 + 10 + 2 * 15 + 3 * 3);
    eprintln!(
        "internal routes: {refused} requests without the right secret, all refused ({} routes × {} credentials)",
        requests.len(),
        credentials.len()
    );

    // Nothing of it took effect: the trend is the dataset's, every initial ISU is
    // still served by its worker, the forged user does not exist, and the UUID the
    // forged provisional registration named is free.
    assert_eq!(parse_trend(&cluster.agent().trend().await.json(200)), expected_trend());
    let isucon1 = cluster.sign_in("isucon1").await;
    let isucon2 = cluster.sign_in("isucon2").await;
    for isu in &dataset().isus {
        let owner = match isu.owner.as_str() {
            "isucon1" => &isucon1,
            "isucon2" => &isucon2,
            _ => continue,
        };
        assert!(
            !owner.condition_items(&isu.uuid, FAR_FUTURE).await.is_empty(),
            "{}",
            isu.uuid
        );
    }
    let alice = cluster.sign_in("alice").await;
    assert_eq!(alice.register(&unregistered, "mine", None).await.json(201)["id"], 29);

    // The same routes do take the right secret (either header): the guard is the secret.
    for node in [&cluster.coordinator, &cluster.workers[0], &cluster.workers[1]] {
        for (name, value) in [
            (SECRET_HEADER, cluster.secret.clone()),
            ("authorization", format!("Bearer {}", cluster.secret)),
        ] {
            let response = client
                .get(format!("{node}{METRICS}"))
                .header(name, value)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{node}{METRICS} with {name}");
        }
    }
    // The workers' device servers serve none of these routes, even with the right secret.
    let mut hidden = 0;
    for device in &cluster.device_servers {
        for path in declared_secret_paths() {
            for method in [reqwest::Method::GET, reqwest::Method::POST] {
                let response = client
                    .request(method.clone(), format!("{device}{path}"))
                    .header(SECRET_HEADER, &cluster.secret)
                    .json(&json!({"generation": 1}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status().as_u16(), 404, "{method} {device}{path}");
                hidden += 1;
            }
        }
    }
    eprintln!("device servers: {hidden} requests for internal routes with the secret, all 404");
    let stale = client
        .post(format!("{}{WORKER_USERS}", cluster.workers[0]))
        .header(SECRET_HEADER, &cluster.secret)
        .json(&json!({"generation": 1, "users": ["intruder"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        stale.status().as_u16(),
        412,
        "with the secret, only the generation is wrong"
    );
    cluster.assert_no_crash();
}

/// Sends one raw HTTP/1.1 request line and headers (no client-side normalisation of the
/// path) and returns the status and the body's first bytes.
async fn raw_request(address: &str, method: &str, target: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.expect("connecting");
    let mut request = format!("{method} {target} HTTP/1.1\r\nHost: isucondition.test\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if method == "POST" {
        request.push_str("Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
    } else {
        request.push_str("\r\n");
    }
    stream.write_all(request.as_bytes()).await.expect("writing");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .expect("nginx answers within 5 s")
        .expect("reading");
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("{method} {target:.200}: not an HTTP response: {text:.200}"));
    let body = text.split_once("\r\n\r\n").map(|(_, body)| body).unwrap_or_default();
    (status, body.chars().take(200).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_never_routes_internal_routes_whatever_the_spelling() {
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let mut cluster = spawn_cluster().await;
    let web = fixture_front_end();
    let (mut server, public) = public_nginx(&cluster, &nginx, &web.path).await;
    let address = public.trim_start_matches("http://").to_owned();
    let secret = cluster.secret.clone();
    let bearer = format!("Bearer {secret}");
    // Whoever calls the public server with the secret in both headers reaches no internal route.
    let headers = [(SECRET_HEADER, secret.as_str()), ("Authorization", bearer.as_str())];
    let mut targets: Vec<(&str, String)> = Vec::new();
    let declared = declared_secret_paths();
    for path in [
        COORDINATOR_LATEST,
        shared::protocol::COORDINATOR_LATEST_STREAM,
        WORKER_RESET,
        WORKER_USERS,
        WORKER_PROVISIONAL,
        WORKER_ACCEPT,
        WORKER_JIA_ACTIVATE,
        WORKER_PUBLISH,
        WORKER_ROLLBACK,
        WORKER_RESEND_LATEST,
        WORKER_UNPUBLISHED,
        WORKER_LATEST_ALL,
        WORKER_PLACEMENT,
        WORKER_EXPORT,
        WORKER_IMPORT,
        WORKER_ACTIVATE,
        WORKER_FORGET,
        COORDINATOR_CELLS,
        COORDINATOR_MIGRATE,
        COORDINATOR_DRAIN,
        COORDINATOR_REBALANCE,
        COORDINATOR_MEMBERS,
    ] {
        targets.push(("POST", path.to_owned()));
        targets.push(("POST", format!("/{path}")));
        targets.push(("POST", path.replacen("/internal/", "/%69nternal/", 1)));
        targets.push(("POST", format!("/api/condition/../..{path}")));
        targets.push(("POST", format!("/api/condition/0/%2e%2e/%2e%2e{path}")));
        targets.push((
            "POST",
            format!("/api/condition/0/..%2F..%2F..{}", path.replace('/', "%2F")),
        ));
        targets.push(("POST", format!("/api/isu/0/../..{path}")));
    }
    for path in [
        METRICS,
        PPROF_LAST,
        "/debug/pprof/profile?seconds=1",
        HEALTH,
        COORDINATOR_REPLICA,
        shared::protocol::COORDINATOR_REPLICA_ISUS,
        "/internal/icons/0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        targets.push(("GET", path.to_owned()));
        targets.push(("GET", format!("/{path}")));
        targets.push(("GET", format!("/./{}", &path[1..])));
        targets.push(("GET", format!("/api/condition/../..{path}")));
        targets.push(("GET", format!("/api/isu/0/%2e%2e/%2e%2e{path}")));
        targets.push(("GET", path.replacen('/', "/%2F", 1)));
    }
    for (method, target) in &targets {
        let (status, body) = raw_request(&address, method, target, &headers).await;
        // nginx's own 404 (or the front end's index.html for a path it does not know):
        // never a node's answer.
        let served_index = status == 200 && body.starts_with("<!DOCTYPE html>\n<title>fixture</title>");
        assert!(
            status == 404 || status == 400 || served_index,
            "{method} {target} through nginx: {status} {body:?}"
        );
        assert!(
            !body.contains(SECRET_REQUIRED),
            "{method} {target} reached a node: {body:?}"
        );
    }
    let covered: std::collections::BTreeSet<String> = targets.iter().map(|(_, target)| route_of(target)).collect();
    assert!(
        covered.is_superset(&declared),
        "not tried: {:?}",
        declared.difference(&covered)
    );
    eprintln!(
        "nginx: {} spellings of internal routes, none reached a node",
        targets.len()
    );
    server.assert_running();
    assert_eq!(parse_trend(&cluster.agent().trend().await.json(200)), expected_trend());
    let isucon1 = cluster.sign_in("isucon1").await;
    assert_eq!(isucon1.isu_list().await.json(200), expected_isu_list("isucon1"));

    // The isolation probe again, through nginx (no cache of it may mix users up).
    let mut agents = Vec::new();
    for user in ["isucon1", "isucon2", "intruder"] {
        let agent = sign_in_with(Agent::new(Routes::Public(public.clone())), &cluster.signer, user).await;
        agents.push((user.to_owned(), agent));
    }
    let report = probe_isolation(&agents, &Agent::new(Routes::Public(public.clone()))).await;
    eprintln!(
        "isolation through nginx: {} probes, {} owner reads, {} leaks",
        report.probes,
        report.owner_reads,
        report.leaks.len()
    );
    report.assert_no_leak();
    assert_eq!(report.owner_reads, 25 * 4);
    server.assert_running();
    cluster.assert_no_crash();
}

/// The operator console through the real nginx: `/ops` is the front end, `/ops/api/` the
/// coordinator's, behind the operator token alone (the secret opens nothing there), and the
/// origin check holds with nginx's `Host` (no port) against the browser's `Origin` (a port).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_console_through_nginx_needs_its_token_and_its_own_origin() {
    let Some(nginx) = nginx_or_skip() else {
        return;
    };
    let (cluster, _token_dir) = super::ops::cluster_with_console(1, 2).await;
    let web = fixture_front_end();
    let (mut server, public) = public_nginx(&cluster, &nginx, &web.path).await;
    let address = public.trim_start_matches("http://").to_owned();
    let (status, body) = raw_request(&address, "GET", "/ops", &[]).await;
    assert!(
        status == 200 && body.starts_with("<!DOCTYPE html>\n<title>fixture</title>"),
        "{status} {body}"
    );
    let bearer = format!("Bearer {}", cluster.secret);
    let with_secret = [
        (SECRET_HEADER, cluster.secret.as_str()),
        ("Authorization", bearer.as_str()),
    ];
    for (method, target) in [
        ("GET", "/ops/api/state"),
        ("POST", "/ops/api/migrate"),
        ("POST", "/ops/api/drain"),
    ] {
        let (status, body) = raw_request(&address, method, target, &with_secret).await;
        assert_eq!(status, 401, "{method} {target} with the secret through nginx: {body}");
    }
    let operator = super::ops::Operator::new(&public);
    let same_origin = [("origin", public.as_str()), ("sec-fetch-site", "same-origin")];
    let (status, answer) = operator
        .post(
            "/ops/api/signin",
            serde_json::json!({ "token": super::ops::TOKEN }),
            &same_origin,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let csrf = answer["csrf"].as_str().unwrap().to_owned();
    let (status, state) = operator.get("/ops/api/state").await;
    assert_eq!(status, 200, "{state}");
    assert!(!state.contains(&cluster.secret));
    let owner = serde_json::from_str::<serde_json::Value>(&state).unwrap()["slots"][0x5a]
        .as_u64()
        .unwrap();
    let to = ["b", "a"][owner as usize];
    let body = serde_json::json!({ "slot": "5a", "to": to });
    // The same host on another port is another origin.
    let (host, port) = address.rsplit_once(':').unwrap();
    let other_port = format!("http://{host}:{}", port.parse::<u16>().unwrap() + 1);
    let forged = [("x-ops-csrf", csrf.as_str()), ("origin", other_port.as_str())];
    assert_eq!(operator.post("/ops/api/migrate", body.clone(), &forged).await.0, 403);
    let sent = [("x-ops-csrf", csrf.as_str()), ("origin", public.as_str())];
    let (status, answer) = operator.post("/ops/api/migrate", body, &sent).await;
    assert_eq!(status, 200, "{answer}");
    server.assert_running();
}

// ------------------------------------------------------------------ sign-in tokens

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A compact JWT from a header and claims, with this signature segment.
fn compact(header: &Value, claims: &Value, signature: &str) -> String {
    format!(
        "{}.{}.{signature}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_refuses_alg_none_key_confusion_future_and_tampered_tokens() {
    let mut cluster = spawn_cluster().await;
    let now = unix_now();
    let claims = json!({"jia_user_id": "isucon1", "iat": now - 1, "exp": now + 30});
    let genuine = cluster.signer.sign_claims(&claims);
    let genuine_signature = genuine.rsplit('.').next().unwrap().to_owned();
    let hs256_with_public_key = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(PROJECT_PUBLIC_KEY_PEM.as_bytes()),
    )
    .unwrap();
    let mut flipped = genuine.clone().into_bytes();
    let last = flipped.len() - 2;
    flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();

    let forbidden: Vec<(&str, String)> = vec![
        (
            "alg none, no signature",
            compact(&json!({"alg": "none", "typ": "JWT"}), &claims, ""),
        ),
        ("alg None", compact(&json!({"alg": "None", "typ": "JWT"}), &claims, "")),
        (
            "alg none with the genuine signature",
            compact(&json!({"alg": "none"}), &claims, &genuine_signature),
        ),
        (
            "alg es256 (lower case)",
            compact(&json!({"alg": "es256"}), &claims, &genuine_signature),
        ),
        ("no alg", compact(&json!({"typ": "JWT"}), &claims, &genuine_signature)),
        ("HS256 signed with the public key PEM", hs256_with_public_key),
        (
            "future iat",
            cluster
                .signer
                .sign_claims(&json!({"jia_user_id": "isucon1", "iat": now + 60, "exp": now + 90})),
        ),
        (
            "future nbf",
            cluster
                .signer
                .sign_claims(&json!({"jia_user_id": "isucon1", "nbf": now + 60, "exp": now + 90})),
        ),
        (
            "expired a second ago",
            cluster
                .signer
                .sign_claims(&json!({"jia_user_id": "isucon1", "iat": now - 40, "exp": now - 2})),
        ),
        (
            "exp a string",
            cluster
                .signer
                .sign_claims(&json!({"jia_user_id": "isucon1", "exp": "never"})),
        ),
        (
            "exp null",
            cluster
                .signer
                .sign_claims(&json!({"jia_user_id": "isucon1", "exp": null})),
        ),
        (
            "exp a fraction in the past",
            cluster
                .signer
                .sign_claims(&json!({"jia_user_id": "isucon1", "exp": now as f64 - 10.5})),
        ),
        (
            "nbf a string",
            cluster
                .signer
                .sign_claims(&json!({"jia_user_id": "isucon1", "nbf": "0", "exp": now + 30})),
        ),
        ("signature byte changed", flipped),
        (
            "signature removed",
            genuine.rsplit_once('.').unwrap().0.to_owned() + ".",
        ),
        ("signature only", genuine_signature.clone()),
        ("two segments", genuine.rsplit_once('.').unwrap().0.to_owned()),
        ("four segments", format!("{genuine}.{genuine_signature}")),
        ("claims changed after signing", {
            let (header, rest) = genuine.split_once('.').unwrap();
            let signature = rest.split_once('.').unwrap().1;
            let forged = json!({"jia_user_id": "isucon2", "iat": now - 1, "exp": now + 30});
            format!("{header}.{}.{signature}", URL_SAFE_NO_PAD.encode(forged.to_string()))
        }),
    ];
    for (case, token) in &forbidden {
        for authorization in [token.clone(), format!("Bearer {token}")] {
            let agent = cluster.agent();
            let reply = agent.auth(Some(&authorization)).await;
            assert_eq!(
                (reply.status.as_u16(), reply.text()),
                (403, "forbidden"),
                "{case}: {authorization}"
            );
            assert!(reply.content_type.starts_with("text/plain"), "{case}");
            assert!(reply.set_cookies.is_empty(), "{case} set a cookie");
            agent.me().await.assert_error(401, NOT_SIGNED_IN);
        }
    }
    // What Go's verifier accepts (§4.1): no exp at all, an iat/nbf in the past.
    for claims in [
        json!({"jia_user_id": "isucon1"}),
        json!({"jia_user_id": "isucon1", "iat": now - 1, "nbf": now - 1, "exp": now + 30}),
    ] {
        let agent = cluster.agent();
        agent
            .auth(Some(&cluster.signer.sign_claims(&claims)))
            .await
            .assert_empty(200);
        assert_eq!(
            agent.me().await.json(200),
            json!({"jia_user_id": "isucon1"}),
            "{claims}"
        );
    }
    cluster.assert_no_crash();
}

// ------------------------------------------------------------------ session cookies

/// The session cookie's value from a `Set-Cookie` list.
fn session_value(set_cookies: &[String]) -> String {
    set_cookies
        .iter()
        .find_map(|cookie| cookie.strip_prefix(&format!("{COOKIE_NAME}=")))
        .and_then(|rest| rest.split(';').next())
        .expect("a session cookie")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cookies_are_http_only_and_forged_ones_are_refused_on_every_node() {
    let mut cluster = spawn_cluster().await;
    let agent = cluster.agent();
    let reply = agent.auth(Some(&cluster.signer.sign("isucon2"))).await;
    reply.assert_empty(200);
    let set_cookie = reply.set_cookies.join("\n");
    for attribute in ["HttpOnly", "Path=/", "SameSite=Lax", "Max-Age=2592000"] {
        assert!(set_cookie.contains(attribute), "{attribute} missing: {set_cookie}");
    }
    let genuine = session_value(&reply.set_cookies);
    let leaving = cluster.sign_in("isucon2").await;
    let signout = leaving.signout().await;
    signout.assert_empty(200);
    let cleared = signout.set_cookies.join("\n");
    assert!(
        cleared.contains("HttpOnly") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );

    // isucon1's ISUs on both workers, and what the forgeries try to reach.
    let targets: Vec<String> = dataset_isus_of("isucon1")
        .iter()
        .flat_map(|isu| {
            [
                format!("/api/isu/{}", isu.uuid),
                format!("/api/isu/{}/graph?datetime={VIRTUAL_START}", isu.uuid),
                format!(
                    "/api/condition/{}?end_time={FAR_FUTURE}&condition_level={ALL_LEVELS}",
                    isu.uuid
                ),
            ]
        })
        .chain(["/api/user/me".to_owned(), "/api/isu".to_owned()])
        .collect();
    let (payload, signature) = genuine.rsplit_once('.').unwrap();
    let (user, generation) = payload.split_once('.').unwrap();
    let isucon1 = URL_SAFE_NO_PAD.encode("isucon1");
    let other_key = SessionKey::from_secret("not-the-cluster-secret");
    let generation_number = u64::from_str_radix(generation, 16).unwrap();
    let mut signature_flipped = signature.to_owned().into_bytes();
    signature_flipped[0] = if signature_flipped[0] == b'A' { b'B' } else { b'A' };
    let forgeries: Vec<(&str, String)> = vec![
        (
            "user replaced",
            format!("{COOKIE_NAME}={isucon1}.{generation}.{signature}"),
        ),
        (
            "generation replaced",
            format!("{COOKIE_NAME}={user}.{:x}.{signature}", generation_number ^ 1),
        ),
        (
            "signature changed",
            format!(
                "{COOKIE_NAME}={payload}.{}",
                String::from_utf8(signature_flipped).unwrap()
            ),
        ),
        ("signature removed", format!("{COOKIE_NAME}={payload}")),
        ("signature empty", format!("{COOKIE_NAME}={payload}.")),
        (
            "signature truncated",
            format!("{COOKIE_NAME}={payload}.{}", &signature[..signature.len() / 2]),
        ),
        (
            "signed with another key",
            format!("{COOKIE_NAME}={}", other_key.sign("isucon1", generation_number)),
        ),
        ("plain user name", format!("{COOKIE_NAME}=isucon1")),
        ("empty", format!("{COOKIE_NAME}=")),
        ("another cookie name", format!("isucondition_go={genuine}")),
        ("cookie name case", format!("{}={genuine}", COOKIE_NAME.to_uppercase())),
    ];
    let client = cluster.raw_client();
    let routes = cluster.routes();
    let mut probes = 0;
    for (case, cookie) in &forgeries {
        for target in &targets {
            let response = client
                .get(routes.url(target))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body = response.text().await.unwrap();
            assert_eq!((status, body.as_str()), (401, NOT_SIGNED_IN), "{case}: {target}");
            probes += 1;
        }
    }
    eprintln!("forged cookies: {probes} requests, all 401");

    // A forged cookie beside a genuine one changes nothing: the genuine user is used,
    // and that user still cannot see isucon1's ISUs.
    let genuine_cookie = format!("{COOKIE_NAME}={genuine}");
    let mixed = format!("{}; {genuine_cookie}", forgeries[0].1);
    let me = client
        .get(routes.url("/api/user/me"))
        .header("cookie", &mixed)
        .send()
        .await
        .unwrap();
    assert_eq!(me.json::<Value>().await.unwrap(), json!({"jia_user_id": "isucon2"}));
    for isu in dataset_isus_of("isucon1") {
        let response = client
            .get(routes.url(&format!("/api/isu/{}", isu.uuid)))
            .header("cookie", &mixed)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 404);
    }
    cluster.assert_no_crash();
}

// ------------------------------------------------------------------ isolation

/// What an isolation probe found.
struct IsolationReport {
    /// Requests by a user who does not own the ISU, or without a session.
    probes: usize,
    /// Requests by the owner (each must succeed, so the probe is not vacuous).
    owner_reads: usize,
    /// Every answer other than the contract's refusal, described.
    leaks: Vec<String>,
}

impl IsolationReport {
    #[track_caller]
    fn assert_no_leak(&self) {
        assert!(
            self.leaks.is_empty(),
            "{} leaks:\n{}",
            self.leaks.len(),
            self.leaks.join("\n")
        );
    }
}

/// Every per-ISU endpoint of every initial ISU, asked by each signed-in agent (404
/// `not found: isu` unless it owns the ISU, then 200) and by `anonymous` (401); and
/// every agent's ISU list, which must name only its own ISUs.
async fn probe_isolation(agents: &[(String, Agent)], anonymous: &Agent) -> IsolationReport {
    let mut report = IsolationReport {
        probes: 0,
        owner_reads: 0,
        leaks: Vec::new(),
    };
    for isu in &dataset().isus {
        let uuid = &isu.uuid;
        let endpoints = [
            format!("/api/isu/{uuid}"),
            format!("/api/isu/{uuid}/icon"),
            format!("/api/isu/{uuid}/graph?datetime={}", isu.conditions[0].timestamp),
            format!("/api/condition/{uuid}?end_time={FAR_FUTURE}&condition_level={ALL_LEVELS}"),
        ];
        for endpoint in &endpoints {
            for (user, agent) in agents {
                let reply = agent.get(endpoint).await;
                if *user == isu.owner {
                    assert_eq!(reply.status.as_u16(), 200, "owner {user}: {endpoint}");
                    report.owner_reads += 1;
                    continue;
                }
                report.probes += 1;
                let refused = reply.status.as_u16() == 404
                    && reply.text() == NOT_FOUND_ISU
                    && reply.content_type.starts_with("text/plain");
                if !refused {
                    report
                        .leaks
                        .push(format!("{user} → {endpoint}: {} {:?}", reply.status, reply.text()));
                }
            }
            report.probes += 1;
            let reply = anonymous.get(endpoint).await;
            let refused = reply.status.as_u16() == 401
                && reply.text() == NOT_SIGNED_IN
                && reply.content_type.starts_with("text/plain");
            if !refused {
                report
                    .leaks
                    .push(format!("no session → {endpoint}: {} {:?}", reply.status, reply.text()));
            }
        }
    }
    for (user, agent) in agents {
        let list = agent.isu_list().await.json(200);
        for item in list.as_array().unwrap() {
            let uuid = item["jia_isu_uuid"].as_str().unwrap();
            let owner = &dataset().isus.iter().find(|isu| isu.uuid == uuid).unwrap().owner;
            if owner != user {
                report.leaks.push(format!("{user}'s ISU list names {uuid} of {owner}"));
            }
        }
    }
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_probe_every_initial_isu_every_endpoint_other_users_and_no_session() {
    let mut cluster = spawn_cluster().await;
    let mut users: Vec<String> = dataset().users.clone();
    users.push("intruder".to_owned());
    let mut agents = Vec::new();
    for user in &users {
        agents.push((user.clone(), cluster.sign_in(user).await));
    }
    assert_eq!(dataset().isus.len(), 28);
    let report = probe_isolation(&agents, &cluster.agent()).await;
    eprintln!(
        "isolation: {} probes of 28 ISUs × 4 endpoints by {} other users and no session; {} owner reads; {} leaks",
        report.probes,
        users.len() - 1,
        report.owner_reads,
        report.leaks.len()
    );
    report.assert_no_leak();
    assert_eq!(report.probes, 28 * 4 * users.len());
    assert_eq!(report.owner_reads, 28 * 4);
    cluster.assert_no_crash();
}

// ------------------------------------------------------------------ limits

/// A JSON batch of `count` valid conditions from `first_timestamp`, one second apart.
fn batch_of(count: usize, first_timestamp: i64, message: &str) -> String {
    let items: Vec<Value> = (0..count as i64)
        .map(|offset| {
            json!({"is_sitting": false, "condition": INFO, "message": message, "timestamp": first_timestamp + offset})
        })
        .collect();
    Value::Array(items).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_batches_bodies_and_strings_get_a_clear_4xx_and_store_nothing() {
    let mut cluster = spawn_cluster().await;
    let alice = cluster.sign_in("alice").await;
    let device = cluster.agent();
    // Conditions of these tests lie far before anything the simulated devices send.
    let base = 1_000_000;
    for (digit, serial) in [('0', 1), ('1', 2)] {
        let uuid = cluster.known_uuid(digit, serial);
        alice.register(&uuid, "limits", None).await.json(201);
        let post = |body: String| {
            let device = device.clone();
            let path = format!("/api/condition/{uuid}");
            async move { device.post_json(&path, &body).await }
        };
        post(batch_of(1_001, base, "m"))
            .await
            .assert_error(413, "too many conditions in one batch");
        let oversized = format!("[{}]", " ".repeat(2 << 20));
        post(oversized).await.assert_error(413, "request body too large");
        let long_message = "m".repeat(256);
        let mut mixed: Vec<Value> = serde_json::from_str(&batch_of(5, base, "ok")).unwrap();
        mixed[4]["message"] = json!(long_message);
        post(Value::Array(mixed).to_string())
            .await
            .assert_error(400, BAD_REQUEST_BODY);
        let deep = "[".repeat(100_000);
        post(deep).await.assert_error(400, BAD_REQUEST_BODY);
        // Nothing of the refused batches was stored.
        let window = format!(
            "start_time={base}&end_time={}&condition_level={ALL_LEVELS}",
            base + 10_000
        );
        assert_eq!(alice.conditions(&uuid, &window).await.json(200), json!([]));

        // At the limits exactly, everything is stored.
        post(batch_of(1_000, base, "m")).await.assert_empty(202);
        let longest = "椅".repeat(255);
        post(batch_of(1, base + 5_000, &longest)).await.assert_empty(202);
        let items = alice.conditions(&uuid, &window).await.json(200);
        assert_eq!(items[0]["message"], json!(longest));
        assert_eq!(items.as_array().unwrap().len(), 20);

        // The worker's own device server, where devices post: the same limits and answers.
        let device_server = &cluster.device_servers[shard_index(&uuid)];
        let client = cluster.raw_client();
        let post_direct = |body: String| {
            let request = client
                .post(format!("{device_server}/api/condition/{uuid}"))
                .header("content-type", "application/json")
                .body(body);
            async move {
                let response = request.send().await.expect("the device server answers");
                (response.status().as_u16(), response.text().await.unwrap_or_default())
            }
        };
        let far = base + 100_000;
        assert_eq!(
            post_direct(batch_of(1_001, far, "m")).await,
            (413, "too many conditions in one batch".to_owned())
        );
        assert_eq!(
            post_direct(format!("[{}]", " ".repeat(2 << 20))).await,
            (413, "request body too large".to_owned())
        );
        assert_eq!(
            post_direct(batch_of(1, far, &"m".repeat(256))).await,
            (400, BAD_REQUEST_BODY.to_owned())
        );
        let window = format!(
            "start_time={far}&end_time={}&condition_level={ALL_LEVELS}",
            far + 10_000
        );
        assert_eq!(alice.conditions(&uuid, &window).await.json(200), json!([]));
        assert_eq!(post_direct(batch_of(3, far, "m")).await, (202, String::new()));
        assert_eq!(
            alice
                .conditions(&uuid, &window)
                .await
                .json(200)
                .as_array()
                .unwrap()
                .len(),
            3
        );
    }

    // Registration: names and UUIDs longer than the reference's columns, icons over the limit.
    let activations = cluster.jia.activations().len();
    let uuid = cluster.known_uuid('2', 3);
    alice
        .register(&uuid, &"n".repeat(256), None)
        .await
        .assert_error(400, "bad format: isu_name");
    alice
        .register(&format!("{uuid}0"), "name", None)
        .await
        .assert_error(400, "bad format: jia_isu_uuid");
    let huge_icon = vec![0xffu8; (10 << 20) + 1];
    alice
        .register(&uuid, "name", Some(&huge_icon))
        .await
        .assert_error(413, "request body too large");
    assert_eq!(cluster.jia.activations().len(), activations, "JIA was called");
    assert_eq!(alice.isu_list().await.json(200).as_array().unwrap().len(), 2);
    let longest_name = "椅".repeat(255);
    let created = alice
        .register(&uuid, &longest_name, Some(&[0xff; 1000]))
        .await
        .json(201);
    assert_eq!(created["name"], json!(longest_name));

    // /initialize is public; its body is bounded too.
    let big = format!("{{\"jia_service_url\": \"{}\"}}", "x".repeat(3 << 20));
    let reply = cluster.agent().post_json("/initialize", &big).await;
    assert_eq!(reply.status.as_u16(), 413, "{}", reply.text());
    cluster.assert_no_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_query_values_and_huge_requests_get_a_4xx_or_an_empty_answer() {
    let mut cluster = spawn_cluster().await;
    let isucon1 = cluster.sign_in("isucon1").await;
    let isu = dataset_isus_of("isucon1")[0];
    let uuid = &isu.uuid;
    let max = i64::MAX;
    let min = i64::MIN;
    let condition_cases: Vec<(String, Result<usize, &str>)> = vec![
        (format!("end_time={max}&condition_level={ALL_LEVELS}"), Ok(20)),
        (format!("end_time={min}&condition_level={ALL_LEVELS}"), Ok(0)),
        (format!("end_time=-1&condition_level={ALL_LEVELS}"), Ok(0)),
        (
            format!("end_time={max}&start_time={min}&condition_level={ALL_LEVELS}"),
            Ok(20),
        ),
        (
            format!("end_time={min}&start_time={max}&condition_level={ALL_LEVELS}"),
            Ok(0),
        ),
        (
            format!("end_time={max}&start_time={max}&condition_level={ALL_LEVELS}"),
            Ok(0),
        ),
        (
            "end_time=9223372036854775808&condition_level=info".to_owned(),
            Err("bad format: end_time"),
        ),
        (
            "end_time=-9223372036854775809&condition_level=info".to_owned(),
            Err("bad format: end_time"),
        ),
        (
            "end_time=1e9&condition_level=info".to_owned(),
            Err("bad format: end_time"),
        ),
        (
            "end_time=1.5&condition_level=info".to_owned(),
            Err("bad format: end_time"),
        ),
        (
            format!("end_time={}&condition_level=info", "9".repeat(5_000)),
            Err("bad format: end_time"),
        ),
        (
            format!("end_time={max}&start_time=9223372036854775808&condition_level=info"),
            Err("bad format: start_time"),
        ),
        (
            format!("end_time={max}&condition_level={}", vec!["critical"; 3_000].join(",")),
            Ok(isu
                .conditions
                .iter()
                .filter(|c| c.flags.level() == shared::domain::Level::Critical)
                .count()
                .min(20)),
        ),
        (format!("end_time={max}&condition_level={}", "x,".repeat(10_000)), Ok(0)),
        (format!("end_time={max}&condition_level=%00%ff%fe"), Ok(0)),
    ];
    for (query, expected) in &condition_cases {
        let reply = isucon1.conditions(uuid, query).await;
        match expected {
            Ok(count) => assert_eq!(reply.json(200).as_array().unwrap().len(), *count, "{query:.120}"),
            Err(message) => reply.assert_error(400, message),
        }
    }
    for datetime in [
        max.to_string(),
        min.to_string(),
        "9223372036854775808".to_owned(),
        "1e3".to_owned(),
    ] {
        isucon1
            .get(&format!("/api/isu/{uuid}/graph?datetime={datetime}"))
            .await
            .assert_error(400, "bad format: datetime");
    }
    for datetime in [-(1_i64 << 60), 1 << 60, -1, 0] {
        let points = isucon1.graph(uuid, datetime).await.json(200);
        let points = points.as_array().unwrap();
        assert_eq!(points.len(), 24, "{datetime}");
        assert_eq!(
            points[0]["start_at"],
            json!(datetime.div_euclid(3600) * 3600),
            "{datetime}"
        );
    }

    // Requests too large for the HTTP layer: a 4xx, and the node keeps serving.
    let client = cluster.raw_client();
    let routes = cluster.routes();
    let long_query = format!("end_time={max}&condition_level={}", "info,".repeat(20_000));
    let worker = cluster.workers[shard_index(uuid)]
        .trim_start_matches("http://")
        .to_owned();
    let (status, _) = raw_request(&worker, "GET", &format!("/api/condition/{uuid}?{long_query}"), &[]).await;
    assert_eq!(status, 414, "a 100 KB request target");
    let huge_cookie = format!("{COOKIE_NAME}={}", "a".repeat(1 << 20));
    for path in [
        "/api/user/me",
        &format!("/api/condition/{uuid}?end_time=1&condition_level=info"),
    ] {
        let answer = client.get(routes.url(path)).header("cookie", &huge_cookie).send().await;
        // hyper answers 431 or closes the connection; either way no 2xx/5xx.
        if let Ok(response) = answer {
            assert!(
                response.status().is_client_error(),
                "{path} with a 1 MiB cookie: {}",
                response.status()
            );
        }
    }
    let long_uuid = "0".repeat(30_000);
    for path in [
        format!("/api/isu/{long_uuid}"),
        format!("/api/isu/{long_uuid}/icon"),
        format!("/api/isu/{long_uuid}/graph?datetime=0"),
        format!("/api/condition/{long_uuid}?end_time=1&condition_level=info"),
    ] {
        isucon1.get(&path).await.assert_error(404, NOT_FOUND_ISU);
    }
    assert_eq!(isucon1.isu_list().await.json(200), expected_isu_list("isucon1"));

    // Devices may send any i64 timestamp: stored, listed, graphed and trended without overflow.
    let extremes = [min, -1, 0, max];
    let batch: Vec<Value> = extremes
        .iter()
        .map(|timestamp| json!({"is_sitting": true, "condition": CRITICAL, "message": "edge", "timestamp": timestamp}))
        .collect();
    cluster
        .agent()
        .post_json(&format!("/api/condition/{uuid}"), &Value::Array(batch).to_string())
        .await
        .assert_empty(202);
    let window = format!("start_time={min}&end_time=1&condition_level={ALL_LEVELS}");
    assert_eq!(
        timestamps_of(isucon1.conditions(uuid, &window).await.json(200).as_array().unwrap()),
        [0, -1, min]
    );
    let newest = isucon1
        .conditions(uuid, &format!("end_time={max}&condition_level=critical"))
        .await
        .json(200);
    assert!(
        newest
            .as_array()
            .unwrap()
            .iter()
            .all(|item| item["timestamp"] != json!(max)),
        "end_time is exclusive"
    );
    let points = isucon1.graph(uuid, -3600).await.json(200);
    assert_eq!(points[0]["condition_timestamps"], json!([-1]));
    assert_eq!(points[1]["condition_timestamps"], json!([0]));
    wait_until(
        "the ISU list shows the newest possible timestamp",
        Duration::from_secs(5),
        || async {
            let list = isucon1.isu_list().await.json(200);
            let item = list
                .as_array()?
                .iter()
                .find(|item| item["jia_isu_uuid"] == json!(uuid))?
                .clone();
            (item["latest_isu_condition"]["timestamp"] == json!(max)).then_some(())
        },
    )
    .await;
    let spots = parse_trend(&cluster.agent().trend().await.json(200));
    assert_eq!(spots[&isu.id].timestamp, max);
    assert_eq!(spots[&isu.id].level, "critical");
    cluster.assert_no_crash();
}

// ------------------------------------------------------------------ node configuration

/// Runs a node binary that must refuse its configuration; returns its stderr. Killed by
/// PID if it is still running after 10 s (it would be serving: the refusal failed).
fn refused_start(binary: &std::path::Path, args: &[&str]) -> String {
    let mut child = std::process::Command::new(binary)
        .args(args)
        .env_remove("ISU_CLUSTER_SECRET")
        .env_remove("ISU_LISTEN")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting the node");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("polling the node") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} {args:?} started instead of refusing", binary.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{args:?}: {status}");
    stderr
}

/// The secret also keys the session cookies, which the public reaches through nginx even
/// when every node listens on loopback: a node refuses to start without one (there is no
/// default), with one shorter than 16 bytes, or with the old built-in default, on any address.
#[test]
fn nodes_refuse_no_secret_a_short_one_and_the_old_default_on_any_address() {
    let coordinator = node_binary("coordinator");
    let worker = node_binary("worker");
    for (binary, base) in [(&coordinator, vec![]), (&worker, vec!["--shard", "a"])] {
        for listen in ["127.0.0.1:1", "10.255.255.1:3000"] {
            let stderr = refused_start(binary, &[base.as_slice(), &["--listen", listen]].concat());
            assert!(stderr.contains("--cluster-secret"), "{listen}, no secret: {stderr}");
            for secret in ["", "short-secret", "local-cluster-secret"] {
                let args: Vec<&str> = [base.as_slice(), &["--listen", listen, "--cluster-secret", secret]].concat();
                let stderr = refused_start(binary, &args);
                assert!(
                    stderr.contains("cluster secret must be at least 16 bytes"),
                    "{args:?}: {stderr}"
                );
            }
        }
    }
}

// ------------------------------------------------------------------ proxies

/// A stand-in HTTP proxy on loopback: counts the connections made to it and answers each
/// with 502, as a proxy that cannot reach the nodes would.
struct CountingProxy {
    url: String,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingProxy {
    async fn start() -> CountingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the proxy");
        let url = format!("http://{}", listener.local_addr().expect("the proxy's address"));
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut request)).await;
                    let _ = stream
                        .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .await;
                });
            }
        });
        CountingProxy { url, connections, task }
    }

    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Calls between nodes carry the cluster secret, so they must never take a proxy the
/// environment names (`HTTP_PROXY` and the rest, with `NO_PROXY` naming only JIA): the
/// initialization's resets, user syncs, provisional registration and publishing
/// (coordinator → worker), the latest pushes (worker → coordinator) and a device post
/// forwarded to its owner (worker → worker) all work, and the proxy sees no connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_between_nodes_never_take_a_proxy_the_environment_names() {
    let proxy = CountingProxy::start().await;
    let cluster = spawn_cluster_with(ClusterOptions {
        proxy: Some(proxy.url.clone()),
        ..ClusterOptions::default()
    })
    .await;
    let alice = cluster.sign_in("alice").await;
    let (even, odd) = (cluster.known_uuid('4', 1), cluster.known_uuid('7', 1));
    for uuid in [&even, &odd] {
        alice.register(uuid, "proxied", None).await.json(201);
    }
    // The simulator's devices post; their latest conditions reach the coordinator's list.
    for uuid in [&even, &odd] {
        alice
            .first_conditions(uuid, "the device's conditions are stored", Duration::from_secs(10))
            .await;
    }
    wait_until(
        "both latest conditions reach the ISU list",
        Duration::from_secs(10),
        || async {
            let list = alice.isu_list().await.json(200);
            let items = list.as_array().cloned().unwrap_or_default();
            (items.len() == 2 && items.iter().all(|item| !item["latest_isu_condition"].is_null())).then_some(())
        },
    )
    .await;
    // The odd ISU posted to worker A's device server: forwarded to worker B, its owner.
    let timestamp = VIRTUAL_START + 7 * 86_400;
    let forwarded = cluster
        .raw_client()
        .post(format!("{}/api/condition/{odd}", cluster.device_servers[0]))
        .header("content-type", "application/json")
        .body(json!([{"is_sitting": true, "condition": INFO, "message": "via A", "timestamp": timestamp}]).to_string())
        .send()
        .await
        .expect("worker A's device server answers");
    assert_eq!(forwarded.status(), StatusCode::ACCEPTED);
    let items = alice.condition_items(&odd, timestamp + 1).await;
    assert!(
        items
            .iter()
            .any(|item| item["timestamp"] == timestamp && item["message"] == "via A"),
        "the forwarded post is stored at worker B: {items:?}"
    );
    assert_eq!(proxy.connections(), 0, "no call between nodes went to the proxy");
}
