//! The operator console's API (`/ops/api/*`) through the real coordinator: its own token
//! (not the cluster secret, not a user's session), the cookie, CSRF, the live state slot
//! for slot against the cells API, actions through the cells API's work, on a follower too,
//! and the plain answer without Prometheus.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::cells::placement;
use e2e::*;

pub(super) const TOKEN: &str = "ops-token-of-the-e2e-tests-0123456789";

/// A cluster whose coordinators read the operator token from a file; the file's folder.
pub(super) async fn cluster_with_console(coordinators: usize, workers: usize) -> (Cluster, ScratchDir) {
    let dir = ScratchDir::new("ops-token");
    let token_file = dir.path.join("ops-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let options = ClusterOptions {
        coordinators,
        workers,
        coordinator_args: vec![
            "--ops-token-file".into(),
            token_file.display().to_string(),
            "--migration-grace-ms".into(),
            "300".into(),
        ],
        ..ClusterOptions::default()
    };
    (spawn_cluster_with(options).await, dir)
}

/// A browser-like operator: a cookie jar, and the CSRF token once signed in.
pub(super) struct Operator {
    client: reqwest::Client,
    base: String,
    csrf: Option<String>,
}

impl Operator {
    pub(super) fn new(base: &str) -> Operator {
        let client = reqwest::Client::builder()
            .cookie_store(true)
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        Operator {
            client,
            base: base.to_owned(),
            csrf: None,
        }
    }

    pub(super) async fn sign_in(&mut self, token: &str) -> (StatusCode, Vec<String>, Value) {
        let answer = self
            .client
            .post(format!("{}/ops/api/signin", self.base))
            .json(&json!({ "token": token }))
            .send()
            .await
            .unwrap();
        let status = answer.status();
        let cookies = answer
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|value| value.to_str().unwrap().to_owned())
            .collect();
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        self.csrf = body["csrf"].as_str().map(str::to_owned);
        (status, cookies, body)
    }

    pub(super) async fn get(&self, path: &str) -> (StatusCode, String) {
        let answer = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
        (answer.status(), answer.text().await.unwrap())
    }

    pub(super) async fn post(&self, path: &str, body: Value, headers: &[(&str, &str)]) -> (StatusCode, Value) {
        let mut request = self.client.post(format!("{}{path}", self.base)).json(&body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let answer = request.send().await.unwrap();
        (answer.status(), answer.json().await.unwrap_or(Value::Null))
    }

    /// An action as the console sends it: the CSRF header, the same origin.
    async fn act(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let csrf = self.csrf.clone().expect("signed in");
        self.post(path, body, &[("x-ops-csrf", &csrf), ("sec-fetch-site", "same-origin")])
            .await
    }

    async fn state(&self) -> Value {
        let (status, body) = self.get("/ops/api/state").await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }
}

const GUARDED: [(&str, &str); 7] = [
    ("GET", "/ops/api/session"),
    ("GET", "/ops/api/state"),
    ("GET", "/ops/api/charts"),
    ("GET", "/ops/api/alerts"),
    ("POST", "/ops/api/migrate"),
    ("POST", "/ops/api/drain"),
    ("POST", "/ops/api/signout"),
];

#[tokio::test]
async fn the_console_needs_its_token_a_cookie_and_csrf_and_never_shows_the_secret() {
    let (cluster, _dir) = cluster_with_console(1, 2).await;
    let client = cluster.raw_client();
    let send = |method: &str, path: &str| {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        client.request(method, format!("{}{path}", cluster.coordinator))
    };
    // Nothing, the cluster secret (both spellings) and a user's session: 401.
    let user = cluster.sign_in("isucon").await;
    for (method, path) in GUARDED {
        let bare = send(method, path).json(&json!({})).send().await.unwrap();
        assert_eq!(bare.status(), 401, "{method} {path} without a cookie");
        let body: Value = bare.json().await.unwrap();
        assert_eq!(body["error"], "sign in with the operator token");
        for (name, value) in [
            (shared::protocol::SECRET_HEADER, cluster.secret.clone()),
            ("authorization", format!("Bearer {}", cluster.secret)),
        ] {
            let with_secret = send(method, path).header(name, value).send().await.unwrap();
            assert_eq!(
                with_secret.status(),
                401,
                "{method} {path} with the cluster secret in {name}"
            );
        }
        if method == "GET" {
            assert_eq!(user.get(path).await.status, 401, "{path} with a user's session");
        }
    }
    // A wrong token, the cluster secret as the token: 401 and no cookie.
    let mut operator = Operator::new(&cluster.coordinator);
    for wrong in ["", "not-the-operator-token-0123456789", cluster.secret.as_str()] {
        let (status, cookies, _) = operator.sign_in(wrong).await;
        assert_eq!(
            (status, cookies.len()),
            (StatusCode::UNAUTHORIZED, 0),
            "token {wrong:?}"
        );
    }
    // A sign-in from another origin: 403.
    let (status, _) = operator
        .post(
            "/ops/api/signin",
            json!({ "token": TOKEN }),
            &[("origin", "http://evil.example")],
        )
        .await;
    assert_eq!(status, 403);
    // The token: an HttpOnly, SameSite=Strict cookie on /ops, and the CSRF token.
    let (status, cookies, body) = operator.sign_in(TOKEN).await;
    assert_eq!(status, 200, "{body}");
    let cookie = cookies
        .iter()
        .find(|cookie| cookie.starts_with("isucondition_ops="))
        .expect("the operator cookie");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ops"] {
        assert!(cookie.contains(attribute), "{cookie} lacks {attribute}");
    }
    assert!(!cookie.contains(&cluster.secret));
    let (status, session) = operator.get("/ops/api/session").await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&session).unwrap()["csrf"], body["csrf"]);
    // The operator cookie is no user's session.
    let user_route = operator
        .client
        .get(format!("{}/api/user/me", cluster.coordinator))
        .send()
        .await
        .unwrap();
    assert_eq!(user_route.status(), 401);

    // Actions without the CSRF token, with a wrong one, or from another origin: 403, and
    // the map did not change.
    let before = placement(&cluster).await;
    let slot = json!({ "slot": "0b", "to": "a" });
    let csrf = operator.csrf.clone().unwrap();
    for headers in [
        vec![],
        vec![("x-ops-csrf", "forged")],
        vec![("x-ops-csrf", csrf.as_str()), ("origin", "http://evil.example")],
        vec![("x-ops-csrf", csrf.as_str()), ("sec-fetch-site", "cross-site")],
    ] {
        let (status, body) = operator.post("/ops/api/migrate", slot.clone(), &headers).await;
        assert_eq!(status, 403, "{headers:?}: {body}");
    }
    assert_eq!(placement(&cluster).await["map"], before["map"]);

    // Every answer the console gets, the secret in none.
    let mut seen = Vec::new();
    for path in [
        "/ops/api/session",
        "/ops/api/state",
        "/ops/api/charts",
        "/ops/api/alerts",
        "/ops",
    ] {
        let (_, body) = operator.get(path).await;
        seen.push(body);
    }
    for body in &seen {
        assert!(
            !body.contains(&cluster.secret),
            "an answer holds the cluster secret: {body}"
        );
    }
    // Without Prometheus the charts and alerts say so plainly.
    let (status, charts) = operator.get("/ops/api/charts?range=900").await;
    assert_eq!(status, 503);
    assert!(
        charts.contains("need Prometheus") && charts.contains("--prometheus"),
        "{charts}"
    );

    // Signed out: 401 again.
    let (status, _) = operator.act("/ops/api/signout", json!({})).await;
    assert_eq!(status, 204);
    assert_eq!(operator.get("/ops/api/state").await.0, 401);
}

#[tokio::test]
async fn without_a_token_file_the_console_is_off() {
    let cluster = spawn_cluster().await;
    let client = cluster.raw_client();
    for path in ["/ops/api/state", "/ops/api/signin", "/ops/api"] {
        let answer = client
            .post(format!("{}{path}", cluster.coordinator))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 404, "{path}");
        assert!(answer.text().await.unwrap().contains("--ops-token-file"));
    }
}

#[tokio::test]
async fn the_state_is_the_map_slot_for_slot_and_a_migration_from_the_console_flips_it() {
    let (cluster, _dir) = cluster_with_console(1, 3).await;
    let mut operator = Operator::new(&cluster.coordinator);
    assert_eq!(operator.sign_in(TOKEN).await.0, 200);
    let state = operator.state().await;
    let map = placement(&cluster).await;
    let names: Vec<&str> = state["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|cell| cell["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(state["slots"], map["map"]["slots"], "slot for slot");
    assert_eq!(state["map_version"], map["map"]["version"]);
    assert!(state["cells"].as_array().unwrap().iter().all(|cell| cell["up"] == true));
    let replicas = state["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 1);
    assert_eq!(replicas[0]["status"]["role"], "leader");
    assert_eq!(replicas[0]["lag"], 0);
    assert_eq!(state["prometheus"], false);

    // Slot 0b to another cell than its owner: the cells API's answer, and the new owner.
    let owner = state["slots"][0x0b].as_u64().unwrap() as usize;
    let to = names[(owner + 1) % 3];
    let (status, answer) = operator
        .act("/ops/api/migrate", json!({ "slot": "0b", "to": to }))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["migrations"][0]["to"], to);
    let state = operator.state().await;
    assert_eq!(state["slots"][0x0b].as_u64().unwrap() as usize, (owner + 1) % 3);
    assert_eq!(state["slots"], placement(&cluster).await["map"]["slots"]);
    // Seen in flight (flipped, in its grace period) or already among the recent ones.
    let listed = |state: &Value| {
        ["in_flight", "recent"]
            .iter()
            .flat_map(|list| state[*list].as_array().cloned().unwrap_or_default())
            .any(|migration| migration["subject"] == "slot 0b")
    };
    assert!(listed(&state), "{state}");
    let recent = wait_until("the migration is recent", Duration::from_secs(10), || {
        let operator = &operator;
        async move {
            let state = operator.state().await;
            let recent = state["recent"].as_array()?.first()?.clone();
            (recent["outcome"] == "done").then_some(recent)
        }
    })
    .await;
    assert_eq!(
        recent["steps"].as_array().unwrap().last().unwrap()["phase"],
        "forgotten"
    );

    // A refused action answers as the cells API does.
    let (status, answer) = operator
        .act("/ops/api/migrate", json!({ "slot": "0b", "to": "z" }))
        .await;
    assert_eq!(status, 400);
    assert_eq!(answer["error"], "no cell named \"z\"");
    // Drain cell c: it owns nothing after.
    let (status, answer) = operator.act("/ops/api/drain", json!({ "cell": "c" })).await;
    assert_eq!(status, 200, "{answer}");
    let state = operator.state().await;
    assert_eq!(state["cells"][2]["slots"], 0);
    assert!(state["slots"].as_array().unwrap().iter().all(|owner| owner != 2));
}

#[tokio::test]
async fn a_follower_shows_every_replica_and_forwards_an_action_to_the_leader() {
    let (cluster, _dir) = cluster_with_console(3, 2).await;
    // A follower: the replica that does not lead.
    let follower = wait_until("a follower is known", Duration::from_secs(10), || {
        let cluster = &cluster;
        async move {
            for url in &cluster.coordinators {
                let answer: Value = cluster
                    .internal_get(&format!("{url}/internal/replica"))
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()?;
                if answer["role"] == "follower" && answer["leader"].is_u64() {
                    return Some(url.clone());
                }
            }
            None
        }
    })
    .await;
    let mut operator = Operator::new(&follower);
    assert_eq!(operator.sign_in(TOKEN).await.0, 200);
    let state = operator.state().await;
    let replicas = state["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 3, "{state}");
    let leaders = replicas
        .iter()
        .filter(|replica| replica["status"]["role"] == "leader")
        .count();
    assert_eq!(leaders, 1, "{state}");
    assert!(replicas.iter().all(|replica| replica["lag"].is_u64()));
    let owner = state["slots"][0x2c].as_u64().unwrap() as usize;
    let to = ["a", "b"][1 - owner];
    let (status, answer) = operator
        .act("/ops/api/migrate", json!({ "slot": "2c", "to": to }))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        operator.state().await["slots"][0x2c].as_u64().unwrap() as usize,
        1 - owner
    );
}
