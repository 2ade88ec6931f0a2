//! The JIA simulator against a tiny device sink: activation answers, posted batches, the sent
//! log, and that devices stop by themselves and on shutdown.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use jia_sim::condition::{character_for_uuid, is_valid_condition_string, CHARACTERS};
use jia_sim::jwt::JwtSigner;
use jia_sim::signin::SignIn;
use jia_sim::{JiaConfig, JiaHandle, JiaSimulator, UrlPolicy, DEVICE_USER_AGENT, UNKNOWN_ISU_UUID};
use serde::Deserialize;
use serde_json::{json, Value};

const UUID: &str = "0694e4d7-dfce-4aec-b7ca-887ac42cfb8f";
const OTHER_UUID: &str = "5f4dcc3b-5aa7-4e0c-9a1d-2c6f1e8b7d3a";

/// One element of a posted batch, exactly the four wire fields.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Posted {
    is_sitting: bool,
    condition: String,
    message: String,
    timestamp: i64,
}

/// A stand-in for a worker's `POST /api/condition/:uuid`, recording every batch in order.
#[derive(Clone, Default)]
struct Sink {
    batches: Arc<Mutex<HashMap<String, Vec<Vec<Posted>>>>>,
    user_agents: Arc<Mutex<Vec<String>>>,
}

impl Sink {
    async fn spawn() -> (Sink, String) {
        let sink = Sink::default();
        let router = Router::new()
            .route("/api/condition/{uuid}", post(receive))
            .with_state(sink.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        (sink, url)
    }

    fn batches(&self, uuid: &str) -> Vec<Vec<Posted>> {
        self.batches.lock().unwrap().get(uuid).cloned().unwrap_or_default()
    }

    fn batch_count(&self) -> usize {
        self.batches.lock().unwrap().values().map(Vec::len).sum()
    }
}

async fn receive(
    State(sink): State<Sink>,
    Path(uuid): Path<String>,
    headers: HeaderMap,
    Json(batch): Json<Vec<Posted>>,
) -> StatusCode {
    let user_agent = headers
        .get("user-agent")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    sink.user_agents.lock().unwrap().push(user_agent.to_owned());
    sink.batches.lock().unwrap().entry(uuid).or_default().push(batch);
    StatusCode::ACCEPTED
}

async fn start_jia(config: JiaConfig) -> JiaHandle {
    JiaSimulator::start(config).await.unwrap()
}

fn config_knowing(uuid: &str, character: &str) -> JiaConfig {
    JiaConfig {
        catalog: HashMap::from([(uuid.to_owned(), character.to_owned())]),
        ..JiaConfig::default()
    }
}

struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

async fn activate_raw(jia: &JiaHandle, body: String) -> Answer {
    let response = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{}/api/activate", jia.url()))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    Answer {
        status,
        content_type,
        body: response.text().await.unwrap(),
    }
}

async fn activate(jia: &JiaHandle, target_base_url: &str, uuid: &str) -> Answer {
    activate_raw(
        jia,
        json!({"target_base_url": target_base_url, "isu_uuid": uuid}).to_string(),
    )
    .await
}

/// Polls `condition` every 10 ms until it holds or `timeout` passes.
async fn wait_until<F: Future<Output = bool>>(timeout: Duration, mut condition: impl FnMut() -> F) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    condition().await
}

#[tokio::test]
async fn the_simulator_exposes_its_bound_address() {
    let jia = start_jia(JiaConfig::default()).await;
    assert_eq!(jia.addr().ip().to_string(), "127.0.0.1");
    assert_ne!(jia.addr().port(), 0);
    assert_eq!(jia.url(), format!("http://{}", jia.addr()));
}

#[tokio::test]
async fn unknown_uuids_get_404_text() {
    let jia = start_jia(config_knowing(UUID, "のんき")).await;
    let answer = activate(&jia, "http://127.0.0.1:9", OTHER_UUID).await;
    assert_eq!(answer.status, 404);
    assert!(answer.content_type.starts_with("text/plain"), "{}", answer.content_type);
    assert!(jia.activations().is_empty());
}

#[tokio::test]
async fn bodies_that_are_not_the_activation_json_get_400_text() {
    let jia = start_jia(config_knowing(UUID, "のんき")).await;
    for body in [
        "",
        "not json",
        "[]",
        r#"{"isu_uuid": "0694e4d7-dfce-4aec-b7ca-887ac42cfb8f"}"#,
        r#"{"target_base_url": 1, "isu_uuid": "x"}"#,
    ] {
        let answer = activate_raw(&jia, body.to_owned()).await;
        assert_eq!(answer.status, 400, "{body:?}");
        assert!(answer.content_type.starts_with("text/plain"), "{body:?}");
    }
    let answer = activate(&jia, "not a url", UUID).await;
    assert_eq!(answer.status, 400);
    assert!(jia.activations().is_empty());
}

#[tokio::test]
async fn the_official_policy_refuses_other_urls() {
    let jia = start_jia(JiaConfig {
        url_policy: UrlPolicy::Official,
        ..config_knowing(UUID, "のんき")
    })
    .await;
    for url in [
        "http://isucondition-1.t.isucon.dev",
        "https://127.0.0.3",
        "https://isucondition-4.t.isucon.dev",
        "https://isucondition-2.t.isucon.dev:443",
        "https://isucondition-2.t.isucon.dev:8443",
    ] {
        let answer = activate(&jia, url, UUID).await;
        assert_eq!(answer.status, 400, "{url}");
        assert!(answer.content_type.starts_with("text/plain"));
    }
    assert!(jia.activations().is_empty());
    let answer = activate(&jia, "https://isucondition-2.t.isucon.dev", UUID).await;
    assert_eq!(answer.status, 202, "{}", answer.body);
    jia.shutdown().await;
}

#[tokio::test]
async fn activation_answers_202_with_the_character_after_the_delay() {
    let (_sink, sink_url) = Sink::spawn().await;
    let jia = start_jia(config_knowing(UUID, "のんき")).await;
    let started = Instant::now();
    let answer = activate(&jia, &sink_url, UUID).await;
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(answer.status, 202);
    assert!(
        answer.content_type.starts_with("application/json"),
        "{}",
        answer.content_type
    );
    assert_eq!(
        serde_json::from_str::<Value>(&answer.body).unwrap(),
        json!({"character": "のんき"})
    );
    let activations = jia.activations();
    assert_eq!(activations.len(), 1);
    assert_eq!(
        (activations[0].isu_uuid.as_str(), activations[0].character.as_str()),
        (UUID, "のんき")
    );
    assert_eq!(jia.repeated_activations(), 0);
    jia.shutdown().await;
}

#[tokio::test]
async fn any_uuid_mode_picks_the_character_from_the_uuid() {
    let (_sink, sink_url) = Sink::spawn().await;
    let jia = start_jia(JiaConfig {
        accept_any_uuid: true,
        ..JiaConfig::default()
    })
    .await;
    let answer = activate(&jia, &sink_url, OTHER_UUID).await;
    assert_eq!(answer.status, 202);
    let character = serde_json::from_str::<Value>(&answer.body).unwrap()["character"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(character, character_for_uuid(OTHER_UUID));
    assert!(CHARACTERS.contains(&character.as_str()));
    jia.shutdown().await;
}

#[tokio::test]
async fn reactivation_answers_202_and_keeps_the_first_url() {
    let (sink, sink_url) = Sink::spawn().await;
    let jia = start_jia(config_knowing(UUID, "てれや")).await;
    assert_eq!(activate(&jia, &sink_url, UUID).await.status, 202);
    let again = activate(&jia, "http://127.0.0.1:9", UUID).await;
    assert_eq!(again.status, 202);
    assert_eq!(
        serde_json::from_str::<Value>(&again.body).unwrap(),
        json!({"character": "てれや"})
    );
    let activations = jia.activations();
    assert_eq!(activations.len(), 1);
    assert_eq!(
        jia.repeated_activations(),
        1,
        "the second request is counted as a repeat"
    );
    assert_eq!(jia.repeated_activations_by_isu(), HashMap::from([(UUID.to_owned(), 1)]));
    assert_eq!(activations[0].target_base_url.trim_end_matches('/'), sink_url);
    assert!(wait_until(Duration::from_secs(2), || async { sink.batch_count() >= 2 }).await);
    assert_eq!(jia.running_devices(), 1);
    jia.shutdown().await;
}

#[tokio::test]
async fn devices_post_valid_batches_that_match_the_sent_log() {
    let (sink, sink_url) = Sink::spawn().await;
    let jia = start_jia(config_knowing(UUID, "のんき")).await;
    assert_eq!(activate(&jia, &format!("{sink_url}/"), UUID).await.status, 202);
    assert!(wait_until(Duration::from_secs(3), || async { sink.batches(UUID).len() >= 8 }).await);
    jia.shutdown().await;

    let batches = sink.batches(UUID);
    let mut previous = i64::MIN;
    for batch in &batches {
        assert!(!batch.is_empty() && batch.len() <= 10, "batch of {}", batch.len());
        for pair in batch.windows(2) {
            let gap = pair[1].timestamp - pair[0].timestamp;
            assert!((50..=70).contains(&gap), "consecutive slots {gap} s apart");
        }
        for posted in batch {
            assert!(posted.timestamp > previous, "timestamps must strictly increase");
            assert!(is_valid_condition_string(&posted.condition), "{}", posted.condition);
            previous = posted.timestamp;
        }
    }
    // The virtual clock starts at 2021-08-08 00:00 JST and runs 30 000× faster.
    let first = batches[0][0].timestamp;
    assert!((1_628_348_400..1_628_348_400 + 86_400).contains(&first), "{first}");
    assert!(sink
        .user_agents
        .lock()
        .unwrap()
        .iter()
        .all(|agent| agent == DEVICE_USER_AGENT));

    let received: Vec<Posted> = batches.into_iter().flatten().collect();
    let sent: Vec<Posted> = jia
        .sent(UUID)
        .into_iter()
        .map(|sent| Posted {
            is_sitting: sent.is_sitting,
            condition: sent.condition.to_owned(),
            message: sent.message.to_owned(),
            timestamp: sent.timestamp,
        })
        .collect();
    // Recorded before sending: the log may hold one batch the shutdown cut short.
    assert!(sent.len() >= received.len() && sent.len() - received.len() <= 10);
    assert_eq!(&sent[..received.len()], &received[..]);
    let last = &sent[sent.len() - 1];
    assert_eq!(
        jia.find_sent(UUID, last.timestamp).map(|found| found.message),
        Some(last.message.as_str())
    );
    assert_eq!(jia.find_sent(UUID, last.timestamp + 1), None);
    assert!(jia.sent(OTHER_UUID).is_empty());
}

#[tokio::test]
async fn shutdown_stops_every_device_and_the_server() {
    let (sink, sink_url) = Sink::spawn().await;
    let catalog = HashMap::from([
        (UUID.to_owned(), "のんき".to_owned()),
        (OTHER_UUID.to_owned(), "まじめ".to_owned()),
    ]);
    let jia = start_jia(JiaConfig {
        catalog,
        ..JiaConfig::default()
    })
    .await;
    let addr: SocketAddr = jia.addr();
    assert_eq!(activate(&jia, &sink_url, UUID).await.status, 202);
    assert_eq!(activate(&jia, &sink_url, OTHER_UUID).await.status, 202);
    assert!(wait_until(Duration::from_secs(2), || async { sink.batches(OTHER_UUID).len() >= 2 }).await);
    assert_eq!(jia.running_devices(), 2);

    jia.shutdown().await;
    assert_eq!(jia.running_devices(), 0);
    let after_shutdown = sink.batch_count();
    let sent_after_shutdown = jia.sent_total();
    tokio::time::sleep(Duration::from_millis(200)).await; // five posting intervals
    assert_eq!(sink.batch_count(), after_shutdown);
    assert_eq!(jia.sent_total(), sent_after_shutdown);
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the server must be closed"
    );
}

#[tokio::test]
async fn devices_stop_by_themselves_when_the_run_is_over() {
    let (sink, sink_url) = Sink::spawn().await;
    let jia = start_jia(JiaConfig {
        run_for: Duration::from_millis(400),
        ..config_knowing(UUID, "のんき")
    })
    .await;
    assert_eq!(activate(&jia, &sink_url, UUID).await.status, 202);
    assert!(wait_until(Duration::from_secs(3), || async { jia.running_devices() == 0 }).await);
    assert!(sink.batch_count() > 0);
    let settled = sink.batch_count();
    tokio::time::sleep(Duration::from_millis(120)).await; // three posting intervals
    assert_eq!(sink.batch_count(), settled);
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_devices() {
    let (sink, sink_url) = Sink::spawn().await;
    let jia = start_jia(config_knowing(UUID, "のんき")).await;
    assert_eq!(activate(&jia, &sink_url, UUID).await.status, 202);
    assert!(wait_until(Duration::from_secs(2), || async { sink.batch_count() >= 1 }).await);
    drop(jia);
    // Cancelled devices stop at their next tick at the latest; then nothing more arrives.
    let quiet = Duration::from_millis(100);
    assert!(wait_until(Duration::from_secs(2), || stays_quiet(sink.clone(), quiet)).await);
}

/// Whether the sink receives nothing during `period`.
async fn stays_quiet(sink: Sink, period: Duration) -> bool {
    let before = sink.batch_count();
    tokio::time::sleep(period).await;
    sink.batch_count() == before
}

#[tokio::test]
async fn the_unknown_uuid_of_the_official_bench_is_refused_even_in_any_uuid_mode() {
    let jia = start_jia(JiaConfig {
        accept_any_uuid: true,
        ..JiaConfig::default()
    })
    .await;
    let answer = activate(&jia, "http://127.0.0.1:9", UNKNOWN_ISU_UUID).await;
    assert_eq!(answer.status, 404);
    assert!(jia.activations().is_empty());
}

#[tokio::test]
async fn devices_reach_resolved_host_names_without_dns() {
    let (sink, sink_url) = Sink::spawn().await;
    let sink_addr: SocketAddr = sink_url.trim_start_matches("http://").parse().unwrap();
    let jia = start_jia(JiaConfig {
        resolve: vec![("isucondition-2.t.isucon.dev".to_owned(), sink_addr)],
        ..config_knowing(UUID, "いじっぱり")
    })
    .await;
    let target = format!("http://isucondition-2.t.isucon.dev:{}", sink_addr.port());
    assert_eq!(activate(&jia, &target, UUID).await.status, 202);
    assert!(wait_until(Duration::from_secs(2), || async { !sink.batches(UUID).is_empty() }).await);
}

#[tokio::test]
async fn the_sign_in_page_redirects_back_with_a_token_the_project_key_verifies() {
    let jia = start_jia(JiaConfig {
        sign_in: Some(SignIn {
            signer: JwtSigner::project_default(),
            default_app_url: "http://127.0.0.2:8080/".to_owned(),
        }),
        ..JiaConfig::default()
    })
    .await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = client
        .get(format!("{}/?redirect=http://app.test/welcome?x=1", jia.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains(r#"action="/login""#), "{html}");
    assert!(html.contains(r#"value="http://app.test/welcome?x=1""#), "{html}");

    let login = client
        .get(format!(
            "{}/login?user=alice&redirect=http://app.test/welcome?x=1",
            jia.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 302);
    let location = login.headers()["location"].to_str().unwrap().to_owned();
    let (base, token) = location.split_once("&jwt=").expect("jwt appended to the query");
    assert_eq!(base, "http://app.test/welcome?x=1");
    let key = jsonwebtoken::DecodingKey::from_ec_pem(include_bytes!("../../keys/jwt-public.pem")).unwrap();
    let claims = jsonwebtoken::decode::<Value>(
        token,
        &key,
        &jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256),
    )
    .unwrap()
    .claims;
    assert_eq!(claims["jia_user_id"], "alice");

    for bad in [
        "/login?redirect=http://app.test/",
        "/login?user=alice&redirect=javascript:x",
        "/?redirect=ftp://x/",
    ] {
        let answer = client.get(format!("{}{bad}", jia.url())).send().await.unwrap();
        assert_eq!(answer.status(), 400, "{bad}");
    }
}
