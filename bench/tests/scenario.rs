//! The scenario against a miniature in-memory service written here: a correct one must get no
//! error, a subtly wrong one must be caught, and a dead target must fail the run.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Multipart, Path, Query, State};
use axum::http::header::{CONTENT_TYPE, COOKIE, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bench::model::CHARACTERS;
use bench::scenario::{run, ScenarioConfig};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

const PUBLIC_KEY_PEM: &str = include_str!("../../keys/jwt-public.pem");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    None,
    /// Condition lists come back oldest first.
    AscendingConditions,
    /// Graph scores are one too high.
    GraphScoreOffByOne,
}

#[derive(Clone, Deserialize, Serialize)]
struct Condition {
    is_sitting: bool,
    condition: String,
    message: String,
    timestamp: i64,
}

struct MiniIsu {
    id: i64,
    uuid: String,
    name: String,
    character: String,
    owner: String,
    image: Vec<u8>,
    conditions: Vec<Condition>,
}

struct Mini {
    bug: Bug,
    own_url: String,
    jia_url: String,
    users: HashSet<String>,
    isus: Vec<MiniIsu>,
}

type Shared = Arc<Mutex<Mini>>;

fn text(status: StatusCode, body: &'static str) -> Response {
    (status, [(CONTENT_TYPE, "text/plain; charset=UTF-8")], body).into_response()
}

fn level(condition: &str) -> &'static str {
    match condition.matches("=true").count() {
        0 => "info",
        3 => "critical",
        _ => "warning",
    }
}

fn valid(condition: &str) -> bool {
    let parts: Vec<&str> = condition.split(',').collect();
    parts.len() == 3
        && ["is_dirty=", "is_overweight=", "is_broken="]
            .iter()
            .zip(&parts)
            .all(|(key, part)| {
                part.strip_prefix(key)
                    .is_some_and(|value| value == "true" || value == "false")
            })
}

fn user_of(mini: &Mini, headers: &HeaderMap) -> Option<String> {
    let cookies = headers.get(COOKIE)?.to_str().ok()?;
    let user = cookies.split("; ").find_map(|cookie| cookie.strip_prefix("mini="))?;
    mini.users.contains(user).then(|| user.to_owned())
}

fn condition_json(isu: &MiniIsu, condition: &Condition) -> Value {
    json!({
        "jia_isu_uuid": isu.uuid, "isu_name": isu.name, "timestamp": condition.timestamp,
        "is_sitting": condition.is_sitting, "condition": condition.condition,
        "condition_level": level(&condition.condition), "message": condition.message,
    })
}

fn latest(isu: &MiniIsu) -> Option<&Condition> {
    isu.conditions.iter().max_by_key(|condition| condition.timestamp)
}

fn reset(mini: &mut Mini) {
    mini.users.clear();
    // 25 initial ISUs, one per character, each with one condition, so the trend is complete.
    mini.isus = CHARACTERS
        .iter()
        .enumerate()
        .map(|(index, character)| MiniIsu {
            id: index as i64 + 1,
            uuid: format!("initial-{index}"),
            name: format!("initial {index}"),
            character: character.to_string(),
            owner: "isucon1".into(),
            image: vec![],
            conditions: vec![Condition {
                is_sitting: false,
                condition: "is_dirty=false,is_overweight=false,is_broken=false".into(),
                message: String::new(),
                timestamp: 1_600_000_000 + index as i64,
            }],
        })
        .collect();
}

async fn initialize(State(shared): State<Shared>, Json(body): Json<Value>) -> Response {
    let mut mini = shared.lock().unwrap();
    reset(&mut mini);
    mini.jia_url = body["jia_service_url"].as_str().unwrap_or_default().to_owned();
    Json(json!({"language": "mini"})).into_response()
}

async fn auth(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let token = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let token = token.strip_prefix("Bearer ").unwrap_or(token);
    let key = DecodingKey::from_ec_pem(PUBLIC_KEY_PEM.as_bytes()).unwrap();
    let Ok(data) = jsonwebtoken::decode::<Value>(token, &key, &Validation::new(Algorithm::ES256)) else {
        return text(StatusCode::FORBIDDEN, "forbidden");
    };
    let Some(user) = data.claims["jia_user_id"].as_str() else {
        return text(StatusCode::BAD_REQUEST, "invalid JWT payload");
    };
    shared.lock().unwrap().users.insert(user.to_owned());
    (StatusCode::OK, [(SET_COOKIE, format!("mini={user}; Path=/"))]).into_response()
}

async fn top_page() -> Response {
    (
        [(CONTENT_TYPE, "text/html; charset=utf-8")],
        "<!DOCTYPE html><title>mini</title><script type=\"module\" src=\"/assets/app.js\"></script>",
    )
        .into_response()
}

async fn asset() -> Response {
    ([(CONTENT_TYPE, "text/javascript")], "export {};").into_response()
}

async fn signout(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    if user_of(&shared.lock().unwrap(), &headers).is_none() {
        return text(StatusCode::UNAUTHORIZED, "you are not signed in");
    }
    (StatusCode::OK, [(SET_COOKIE, "mini=; Path=/; Max-Age=0")]).into_response()
}

async fn me(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let mini = shared.lock().unwrap();
    let Some(user) = user_of(&mini, &headers) else {
        return text(StatusCode::UNAUTHORIZED, "you are not signed in");
    };
    Json(json!({"jia_user_id": user})).into_response()
}

async fn isu_list(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let mini = shared.lock().unwrap();
    let Some(user) = user_of(&mini, &headers) else {
        return text(StatusCode::UNAUTHORIZED, "you are not signed in");
    };
    let list: Vec<Value> = mini
        .isus
        .iter()
        .rev()
        .filter(|isu| isu.owner == user)
        .map(|isu| {
            json!({
                "id": isu.id, "jia_isu_uuid": isu.uuid, "name": isu.name, "character": isu.character,
                "latest_isu_condition": latest(isu).map(|condition| condition_json(isu, condition)),
            })
        })
        .collect();
    Json(list).into_response()
}

async fn register(State(shared): State<Shared>, headers: HeaderMap, mut form: Multipart) -> Response {
    let (user, jia_url, own_url) = {
        let mini = shared.lock().unwrap();
        let Some(user) = user_of(&mini, &headers) else {
            return text(StatusCode::UNAUTHORIZED, "you are not signed in");
        };
        (user, mini.jia_url.clone(), mini.own_url.clone())
    };
    let (mut uuid, mut name, mut image) = (String::new(), String::new(), b"default".to_vec());
    while let Ok(Some(field)) = form.next_field().await {
        match field.name().unwrap_or_default().to_owned().as_str() {
            "jia_isu_uuid" => uuid = field.text().await.unwrap(),
            "isu_name" => name = field.text().await.unwrap(),
            "image" => image = field.bytes().await.unwrap().to_vec(),
            _ => {}
        }
    }
    if shared.lock().unwrap().isus.iter().any(|isu| isu.uuid == uuid) {
        return text(StatusCode::CONFLICT, "duplicated: isu");
    }
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let answer = client
        .post(format!("{jia_url}/api/activate"))
        .json(&json!({"target_base_url": own_url, "isu_uuid": uuid}))
        .send()
        .await
        .unwrap();
    if answer.status() != 202 {
        return text(
            StatusCode::from_u16(answer.status().as_u16()).unwrap(),
            "JIAService returned error",
        );
    }
    let character = answer.json::<Value>().await.unwrap()["character"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut mini = shared.lock().unwrap();
    let id = mini.isus.len() as i64 + 1;
    let body = json!({"id": id, "jia_isu_uuid": uuid, "name": name, "character": character});
    mini.isus.push(MiniIsu {
        id,
        uuid,
        name,
        character,
        owner: user,
        image,
        conditions: vec![],
    });
    (StatusCode::CREATED, Json(body)).into_response()
}

/// Runs `answer` on the session user's ISU `uuid`, or answers 401 / 404.
fn with_owned_isu(
    shared: &Shared,
    headers: &HeaderMap,
    uuid: &str,
    answer: impl FnOnce(&Mini, &MiniIsu) -> Response,
) -> Response {
    let mini = shared.lock().unwrap();
    let Some(user) = user_of(&mini, headers) else {
        return text(StatusCode::UNAUTHORIZED, "you are not signed in");
    };
    match mini.isus.iter().find(|isu| isu.uuid == uuid && isu.owner == user) {
        Some(isu) => answer(&mini, isu),
        None => text(StatusCode::NOT_FOUND, "not found: isu"),
    }
}

async fn isu(State(shared): State<Shared>, headers: HeaderMap, Path(uuid): Path<String>) -> Response {
    with_owned_isu(&shared, &headers, &uuid, |_, isu| {
        Json(json!({"id": isu.id, "jia_isu_uuid": isu.uuid, "name": isu.name, "character": isu.character}))
            .into_response()
    })
}

async fn icon(State(shared): State<Shared>, headers: HeaderMap, Path(uuid): Path<String>) -> Response {
    with_owned_isu(&shared, &headers, &uuid, |_, isu| isu.image.clone().into_response())
}

async fn post_conditions(
    State(shared): State<Shared>,
    Path(uuid): Path<String>,
    Json(batch): Json<Vec<Condition>>,
) -> Response {
    let mut mini = shared.lock().unwrap();
    let Some(isu) = mini.isus.iter_mut().find(|isu| isu.uuid == uuid) else {
        return text(StatusCode::NOT_FOUND, "not found: isu");
    };
    if batch.is_empty() || !batch.iter().all(|condition| valid(&condition.condition)) {
        return text(StatusCode::BAD_REQUEST, "bad request body");
    }
    isu.conditions.extend(batch);
    StatusCode::ACCEPTED.into_response()
}

async fn conditions(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(uuid): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(end_time) = query.get("end_time").and_then(|value| value.parse::<i64>().ok()) else {
        return text(StatusCode::BAD_REQUEST, "bad format: end_time");
    };
    let Some(levels) = query.get("condition_level") else {
        return text(StatusCode::BAD_REQUEST, "missing: condition_level");
    };
    let levels: Vec<String> = levels.split(',').map(str::to_owned).collect();
    let start_time = match query.get("start_time").map(|value| value.parse::<i64>()) {
        None => i64::MIN,
        Some(Ok(start_time)) => start_time,
        Some(Err(_)) => return text(StatusCode::BAD_REQUEST, "bad format: start_time"),
    };
    with_owned_isu(&shared, &headers, &uuid, |mini, isu| {
        let mut matching: Vec<&Condition> = isu
            .conditions
            .iter()
            .filter(|c| {
                c.timestamp < end_time && c.timestamp >= start_time && levels.iter().any(|l| l == level(&c.condition))
            })
            .collect();
        matching.sort_by_key(|condition| std::cmp::Reverse(condition.timestamp));
        matching.truncate(20);
        if mini.bug == Bug::AscendingConditions {
            matching.reverse();
        }
        Json(
            matching
                .iter()
                .map(|condition| condition_json(isu, condition))
                .collect::<Vec<_>>(),
        )
        .into_response()
    })
}

async fn graph(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(uuid): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(datetime) = query.get("datetime") else {
        return text(StatusCode::BAD_REQUEST, "missing: datetime");
    };
    let Ok(datetime) = datetime.parse::<i64>() else {
        return text(StatusCode::BAD_REQUEST, "bad format: datetime");
    };
    let first_hour = datetime.div_euclid(3600) * 3600;
    with_owned_isu(&shared, &headers, &uuid, |mini, isu| {
        let points: Vec<Value> = (0..24)
            .map(|hour| {
                let start = first_hour + 3600 * hour;
                let mut hour_conditions: Vec<&Condition> = isu
                    .conditions
                    .iter()
                    .filter(|c| (start..start + 3600).contains(&c.timestamp))
                    .collect();
                hour_conditions.sort_by_key(|condition| condition.timestamp);
                let n = hour_conditions.len() as i64;
                let count = |flag: &str| {
                    hour_conditions
                        .iter()
                        .filter(|c| c.condition.contains(&format!("{flag}=true")))
                        .count() as i64
                };
                let data = (n > 0).then(|| {
                    let raw: i64 = hour_conditions
                        .iter()
                        .map(|c| 3 - (c.condition.matches("=true").count() as i64 + 1) / 2)
                        .sum();
                    let bonus = i64::from(mini.bug == Bug::GraphScoreOffByOne);
                    json!({
                        "score": raw * 100 / 3 / n + bonus,
                        "percentage": {
                            "sitting": hour_conditions.iter().filter(|c| c.is_sitting).count() as i64 * 100 / n,
                            "is_broken": count("is_broken") * 100 / n,
                            "is_dirty": count("is_dirty") * 100 / n,
                            "is_overweight": count("is_overweight") * 100 / n,
                        }
                    })
                });
                json!({
                    "start_at": start, "end_at": start + 3600, "data": data,
                    "condition_timestamps": hour_conditions.iter().map(|c| c.timestamp).collect::<Vec<_>>(),
                })
            })
            .collect();
        Json(points).into_response()
    })
}

async fn trend(State(shared): State<Shared>) -> Response {
    let mini = shared.lock().unwrap();
    let entries: Vec<Value> = CHARACTERS
        .iter()
        .map(|character| {
            let mut lists: HashMap<&str, Vec<(i64, i64)>> = HashMap::new();
            for isu in mini.isus.iter().filter(|isu| isu.character == *character) {
                if let Some(condition) = latest(isu) {
                    lists.entry(level(&condition.condition)).or_default().push((condition.timestamp, isu.id));
                }
            }
            let list = |name: &str| {
                let mut items = lists.get(name).cloned().unwrap_or_default();
                items.sort_by_key(|(timestamp, _)| std::cmp::Reverse(*timestamp));
                items.iter().map(|(timestamp, id)| json!({"isu_id": id, "timestamp": timestamp})).collect::<Vec<_>>()
            };
            json!({"character": character, "info": list("info"), "warning": list("warning"), "critical": list("critical")})
        })
        .collect();
    Json(entries).into_response()
}

async fn spawn_mini(bug: Bug) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut mini = Mini {
        bug,
        own_url: url.clone(),
        jia_url: String::new(),
        users: HashSet::new(),
        isus: vec![],
    };
    reset(&mut mini);
    let router = Router::new()
        .route("/", get(top_page))
        .route("/assets/app.js", get(asset))
        .route("/api/signout", post(signout))
        .route("/initialize", post(initialize))
        .route("/api/auth", post(auth))
        .route("/api/user/me", get(me))
        .route("/api/isu", get(isu_list).post(register))
        .route("/api/isu/{uuid}", get(isu))
        .route("/api/isu/{uuid}/icon", get(icon))
        .route("/api/isu/{uuid}/graph", get(graph))
        .route("/api/condition/{uuid}", get(conditions).post(post_conditions))
        .route("/api/trend", get(trend))
        .with_state(Arc::new(Mutex::new(mini)));
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

fn short_run(target: &str) -> ScenarioConfig {
    ScenarioConfig {
        duration: Duration::from_millis(4500),
        users: 2,
        max_isus_per_user: 2,
        grow: false,
        // The mini service holds no initial data; tests/prepare.rs checks that phase.
        compatibility_check: false,
        ..ScenarioConfig::new(target, SocketAddr::from(([127, 0, 0, 1], 0)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_service_gets_no_error_and_earns_points() {
    let target = spawn_mini(Bug::None).await;
    let report = run(short_run(&target)).await.unwrap();
    println!("{report}");
    assert_eq!(report.stats.error_count(), 0, "{report}");
    assert_eq!(report.language, "mini");
    assert!((2..=4).contains(&report.activations), "{report}");
    assert!(report.sent_conditions > 0);
    assert!(report.stats.conditions_read() > 0, "{report}");
    assert!(report.passed(), "{report}");
    assert!(report.final_score() >= 1000, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misordered_condition_list_is_caught() {
    let target = spawn_mini(Bug::AscendingConditions).await;
    let report = run(short_run(&target)).await.unwrap();
    assert!(report.stats.error_count() > 0, "{report}");
    assert!(
        report
            .stats
            .error_samples
            .iter()
            .any(|sample| sample.contains("descending")),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_graph_score_is_caught() {
    let target = spawn_mini(Bug::GraphScoreOffByOne).await;
    let report = run(short_run(&target)).await.unwrap();
    assert!(
        report.stats.error_samples.iter().any(|sample| sample.contains("graph")),
        "{report}"
    );
}

#[tokio::test]
async fn a_target_that_does_not_initialize_fails_the_run() {
    let unused = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = format!("http://{}", unused.local_addr().unwrap());
    drop(unused);
    let report = run(short_run(&target)).await.unwrap();
    assert!(!report.passed());
    assert_eq!(report.final_score(), 0);
    let phase = report.failed_phase.clone().unwrap_or_default();
    assert!(phase.contains("POST /initialize"), "{report}");
}
