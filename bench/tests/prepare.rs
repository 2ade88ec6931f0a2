//! The compatibility check and the error checks against a small fake service written here:
//! a correct fake gets no error; a fake that is wrong in one specific way is caught with the
//! right kind of error and a telling description. Also: the official `initialize.json` loads
//! with the facts we know of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Multipart, Path, Query, State};
use axum::http::header::{CONTENT_TYPE, COOKIE, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bench::model::CHARACTERS;
use bench::scenario::expected::ExpectedData;
use bench::scenario::prepare::{
    compatibility_check, error_check, run_error_checks, ErrorCheckConfig, ErrorCheckUser, PrepareContext,
    PrepareOutcome, LOAD_ERROR_CHECK_TIMEOUT,
};
use bench::scenario::stats::{ErrorKind, Snapshot, Stats};
use jia_sim::{JiaConfig, JiaHandle, JiaSimulator};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{json, Value};
use shared::dataset::{generated, wire_condition, Dataset, DEFAULT_ICON};

const PUBLIC_KEY_PEM: &str = include_str!("../../keys/jwt-public.pem");
const NOT_SIGNED_IN: &str = "you are not signed in";
const NOT_FOUND_ISU: &str = "not found: isu";
const HOUR: i64 = 3600;

/// The one way a fake service is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    None,
    /// The trend shows ISU 1 at its second newest condition (older than what it sent last).
    TrendBackInTime,
    /// Graph scores are one too high.
    GraphScoreOffByOne,
    /// Condition lists ignore `condition_level`.
    ConditionsIgnoreLevel,
    /// `GET /api/isu/:uuid` shows every user's ISUs.
    OthersIsuVisible,
    /// A missing `end_time` is answered `missing: end_time` (the contract says `bad format`).
    MissingEndTimeMessage,
    /// Sign-out answers 204 instead of 200.
    Signout204,
    /// `GET /api/user/me` is JSON sent as `text/plain`.
    MeAsTextPlain,
}

#[derive(Clone, Deserialize)]
struct PostedCondition {
    is_sitting: bool,
    condition: String,
    message: String,
    timestamp: i64,
}

#[derive(Clone)]
struct FakeCondition {
    timestamp: i64,
    is_sitting: bool,
    dirty: bool,
    overweight: bool,
    broken: bool,
    message: String,
}

impl FakeCondition {
    fn condition(&self) -> String {
        format!(
            "is_dirty={},is_overweight={},is_broken={}",
            self.dirty, self.overweight, self.broken
        )
    }

    fn bad(&self) -> usize {
        usize::from(self.dirty) + usize::from(self.overweight) + usize::from(self.broken)
    }

    fn level(&self) -> &'static str {
        match self.bad() {
            0 => "info",
            3 => "critical",
            _ => "warning",
        }
    }
}

struct FakeIsu {
    id: i64,
    uuid: String,
    name: String,
    character: String,
    owner: String,
    image: Vec<u8>,
    /// Oldest first.
    conditions: Vec<FakeCondition>,
}

struct Fake {
    bug: Bug,
    own_url: String,
    jia_url: String,
    /// Cookie token → user.
    sessions: HashMap<String, String>,
    next_session: u64,
    isus: Vec<FakeIsu>,
}

type Shared = Arc<Mutex<Fake>>;

fn text(status: StatusCode, body: &'static str) -> Response {
    (status, [(CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

fn session_of(fake: &Fake, headers: &HeaderMap) -> Option<(String, String)> {
    let cookies = headers.get(COOKIE)?.to_str().ok()?;
    let token = cookies.split("; ").find_map(|cookie| cookie.strip_prefix("fake="))?;
    let user = fake.sessions.get(token)?;
    Some((token.to_owned(), user.clone()))
}

fn user_of(fake: &Fake, headers: &HeaderMap) -> Option<String> {
    session_of(fake, headers).map(|(_, user)| user)
}

fn condition_json(isu: &FakeIsu, condition: &FakeCondition) -> Value {
    json!({
        "jia_isu_uuid": isu.uuid, "isu_name": isu.name, "timestamp": condition.timestamp,
        "is_sitting": condition.is_sitting, "condition": condition.condition(),
        "condition_level": condition.level(), "message": condition.message,
    })
}

fn isu_json(isu: &FakeIsu) -> Value {
    json!({"id": isu.id, "jia_isu_uuid": isu.uuid, "name": isu.name, "character": isu.character})
}

fn parse_condition(text: &str) -> Option<(bool, bool, bool)> {
    let mut values = [false; 3];
    let mut pairs = text.split(',');
    for (index, key) in ["is_dirty", "is_overweight", "is_broken"].iter().enumerate() {
        let value = pairs.next()?.strip_prefix(key)?.strip_prefix('=')?;
        values[index] = match value {
            "true" => true,
            "false" => false,
            _ => return None,
        };
    }
    pairs.next().is_none().then_some((values[0], values[1], values[2]))
}

async fn page(Path(_rest): Path<String>) -> Response {
    index().await
}

async fn index() -> Response {
    let html = r#"<!doctype html><html><head><script type="module" src="/assets/fake.js"></script></head><body></body></html>"#;
    ([(CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

async fn asset() -> Response {
    ([(CONTENT_TYPE, "text/javascript")], "console.log('fake')").into_response()
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
    let mut fake = shared.lock().unwrap();
    fake.next_session += 1;
    let session = format!("s{}", fake.next_session);
    fake.sessions.insert(session.clone(), user.to_owned());
    (StatusCode::OK, [(SET_COOKIE, format!("fake={session}; Path=/"))]).into_response()
}

async fn signout(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let mut fake = shared.lock().unwrap();
    let Some((token, _)) = session_of(&fake, &headers) else {
        return text(StatusCode::UNAUTHORIZED, NOT_SIGNED_IN);
    };
    fake.sessions.remove(&token);
    if fake.bug == Bug::Signout204 {
        return StatusCode::NO_CONTENT.into_response();
    }
    StatusCode::OK.into_response()
}

async fn me(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let fake = shared.lock().unwrap();
    let Some(user) = user_of(&fake, &headers) else {
        return text(StatusCode::UNAUTHORIZED, NOT_SIGNED_IN);
    };
    let body = json!({"jia_user_id": user}).to_string();
    let content_type = if fake.bug == Bug::MeAsTextPlain {
        "text/plain; charset=utf-8"
    } else {
        "application/json"
    };
    ([(CONTENT_TYPE, content_type)], body).into_response()
}

async fn isu_list(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let fake = shared.lock().unwrap();
    let Some(user) = user_of(&fake, &headers) else {
        return text(StatusCode::UNAUTHORIZED, NOT_SIGNED_IN);
    };
    let mut owned: Vec<&FakeIsu> = fake.isus.iter().filter(|isu| isu.owner == user).collect();
    owned.sort_by_key(|isu| std::cmp::Reverse(isu.id));
    let list: Vec<Value> = owned
        .iter()
        .map(|isu| {
            let mut item = isu_json(isu);
            item["latest_isu_condition"] = isu
                .conditions
                .last()
                .map_or(Value::Null, |condition| condition_json(isu, condition));
            item
        })
        .collect();
    Json(list).into_response()
}

async fn register(State(shared): State<Shared>, headers: HeaderMap, mut form: Multipart) -> Response {
    let (user, jia_url, own_url) = {
        let fake = shared.lock().unwrap();
        let Some(user) = user_of(&fake, &headers) else {
            return text(StatusCode::UNAUTHORIZED, NOT_SIGNED_IN);
        };
        (user, fake.jia_url.clone(), fake.own_url.clone())
    };
    let (mut uuid, mut name, mut image) = (String::new(), String::new(), DEFAULT_ICON.to_vec());
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
        let status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
        return text(status, "JIAService returned error");
    }
    let character = answer.json::<Value>().await.unwrap()["character"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut fake = shared.lock().unwrap();
    let id = fake.isus.iter().map(|isu| isu.id).max().unwrap_or(0) + 1;
    let isu = FakeIsu {
        id,
        uuid,
        name,
        character,
        owner: user,
        image,
        conditions: vec![],
    };
    let body = isu_json(&isu);
    fake.isus.push(isu);
    (StatusCode::CREATED, Json(body)).into_response()
}

/// 401 without a session, then `validate` (400s), then 404 unless the session user owns it.
fn with_owned_isu(
    shared: &Shared,
    headers: &HeaderMap,
    uuid: &str,
    validate: impl FnOnce() -> Option<Response>,
    answer: impl FnOnce(&Fake, &FakeIsu) -> Response,
) -> Response {
    let fake = shared.lock().unwrap();
    let Some(user) = user_of(&fake, headers) else {
        return text(StatusCode::UNAUTHORIZED, NOT_SIGNED_IN);
    };
    if let Some(refusal) = validate() {
        return refusal;
    }
    let visible = |isu: &&FakeIsu| isu.uuid == uuid && (isu.owner == user || fake.bug == Bug::OthersIsuVisible);
    match fake.isus.iter().find(visible) {
        Some(isu) => answer(&fake, isu),
        None => text(StatusCode::NOT_FOUND, NOT_FOUND_ISU),
    }
}

async fn isu(State(shared): State<Shared>, headers: HeaderMap, Path(uuid): Path<String>) -> Response {
    with_owned_isu(
        &shared,
        &headers,
        &uuid,
        || None,
        |_, isu| Json(isu_json(isu)).into_response(),
    )
}

async fn icon(State(shared): State<Shared>, headers: HeaderMap, Path(uuid): Path<String>) -> Response {
    with_owned_isu(
        &shared,
        &headers,
        &uuid,
        || None,
        |_, isu| isu.image.clone().into_response(),
    )
}

async fn post_conditions(
    State(shared): State<Shared>,
    Path(uuid): Path<String>,
    Json(batch): Json<Vec<PostedCondition>>,
) -> Response {
    let mut fake = shared.lock().unwrap();
    let Some(isu) = fake.isus.iter_mut().find(|isu| isu.uuid == uuid) else {
        return text(StatusCode::NOT_FOUND, NOT_FOUND_ISU);
    };
    let parsed: Option<Vec<FakeCondition>> = batch
        .iter()
        .map(|posted| {
            let (dirty, overweight, broken) = parse_condition(&posted.condition)?;
            Some(FakeCondition {
                timestamp: posted.timestamp,
                is_sitting: posted.is_sitting,
                dirty,
                overweight,
                broken,
                message: posted.message.clone(),
            })
        })
        .collect();
    let Some(parsed) = parsed.filter(|parsed| !parsed.is_empty()) else {
        return text(StatusCode::BAD_REQUEST, "bad request body");
    };
    isu.conditions.extend(parsed);
    isu.conditions.sort_by_key(|condition| condition.timestamp);
    StatusCode::ACCEPTED.into_response()
}

async fn conditions(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(uuid): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let bug = shared.lock().unwrap().bug;
    let end_time = query.get("end_time").map(|value| value.parse::<i64>());
    let levels: Vec<String> = query
        .get("condition_level")
        .map(|list| list.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let start_time = query.get("start_time").filter(|value| !value.is_empty());
    let validate = || match &end_time {
        None if bug == Bug::MissingEndTimeMessage => Some(text(StatusCode::BAD_REQUEST, "missing: end_time")),
        None | Some(Err(_)) => Some(text(StatusCode::BAD_REQUEST, "bad format: end_time")),
        _ if levels.iter().all(String::is_empty) => Some(text(StatusCode::BAD_REQUEST, "missing: condition_level")),
        _ if start_time.is_some_and(|value| value.parse::<i64>().is_err()) => {
            Some(text(StatusCode::BAD_REQUEST, "bad format: start_time"))
        }
        _ => None,
    };
    let end = end_time
        .as_ref()
        .and_then(|value| value.as_ref().ok())
        .copied()
        .unwrap_or(0);
    let start = start_time
        .and_then(|value| value.parse::<i64>().ok())
        .unwrap_or(i64::MIN);
    with_owned_isu(&shared, &headers, &uuid, validate, |_, isu| {
        let items: Vec<Value> = isu
            .conditions
            .iter()
            .rev()
            .filter(|c| c.timestamp < end && c.timestamp >= start)
            .filter(|c| bug == Bug::ConditionsIgnoreLevel || levels.iter().any(|level| level == c.level()))
            .take(20)
            .map(|condition| condition_json(isu, condition))
            .collect();
        Json(items).into_response()
    })
}

async fn graph(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(uuid): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let bug = shared.lock().unwrap().bug;
    let datetime = query.get("datetime").map(|value| value.parse::<i64>());
    let validate = || match &datetime {
        None => Some(text(StatusCode::BAD_REQUEST, "missing: datetime")),
        Some(Err(_)) => Some(text(StatusCode::BAD_REQUEST, "bad format: datetime")),
        Some(Ok(_)) => None,
    };
    let first_hour = datetime
        .as_ref()
        .and_then(|value| value.as_ref().ok())
        .map_or(0, |datetime| datetime.div_euclid(HOUR) * HOUR);
    with_owned_isu(&shared, &headers, &uuid, validate, |_, isu| {
        let points: Vec<Value> = (0..24)
            .map(|hour| {
                let start = first_hour + HOUR * hour;
                let inside: Vec<&FakeCondition> = isu
                    .conditions
                    .iter()
                    .filter(|c| (start..start + HOUR).contains(&c.timestamp))
                    .collect();
                let n = inside.len() as i64;
                let share =
                    |flag: fn(&FakeCondition) -> bool| inside.iter().filter(|c| flag(c)).count() as i64 * 100 / n;
                let data = (n > 0).then(|| {
                    let raw: i64 = inside
                        .iter()
                        .map(|c| match c.bad() {
                            0 => 3,
                            3 => 1,
                            _ => 2,
                        })
                        .sum();
                    let bonus = i64::from(bug == Bug::GraphScoreOffByOne);
                    json!({
                        "score": raw * 100 / 3 / n + bonus,
                        "percentage": {
                            "sitting": share(|c| c.is_sitting),
                            "is_broken": share(|c| c.broken),
                            "is_dirty": share(|c| c.dirty),
                            "is_overweight": share(|c| c.overweight),
                        }
                    })
                });
                json!({
                    "start_at": start, "end_at": start + HOUR, "data": data,
                    "condition_timestamps": inside.iter().map(|c| c.timestamp).collect::<Vec<_>>(),
                })
            })
            .collect();
        Json(points).into_response()
    })
}

async fn trend(State(shared): State<Shared>) -> Response {
    let fake = shared.lock().unwrap();
    let entries: Vec<Value> = CHARACTERS
        .iter()
        .map(|character| {
            let mut lists: HashMap<&str, Vec<(i64, i64)>> = HashMap::new();
            for isu in fake.isus.iter().filter(|isu| isu.character == *character) {
                let back = usize::from(fake.bug == Bug::TrendBackInTime && isu.id == 1);
                let Some(shown) = isu.conditions.iter().rev().nth(back) else { continue };
                lists.entry(shown.level()).or_default().push((shown.timestamp, isu.id));
            }
            let list = |name: &str| {
                let mut items = lists.get(name).cloned().unwrap_or_default();
                items.sort_by_key(|(timestamp, _)| std::cmp::Reverse(*timestamp));
                items
                    .iter()
                    .map(|(timestamp, id)| json!({"isu_id": id, "timestamp": timestamp}))
                    .collect::<Vec<_>>()
            };
            json!({"character": character, "info": list("info"), "warning": list("warning"), "critical": list("critical")})
        })
        .collect();
    Json(entries).into_response()
}

/// Serves `dataset` on a free loopback port; registrations go to the simulator at `jia_url`.
async fn spawn_fake(bug: Bug, dataset: &Dataset, jia_url: &str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let isus = dataset
        .isus
        .iter()
        .map(|isu| FakeIsu {
            id: isu.id,
            uuid: isu.uuid.clone(),
            name: isu.name.clone(),
            character: isu.character.clone(),
            owner: isu.owner.clone(),
            image: isu.image.clone().unwrap_or_else(|| DEFAULT_ICON.to_vec()),
            conditions: isu
                .conditions
                .iter()
                .map(|condition| FakeCondition {
                    timestamp: condition.timestamp,
                    is_sitting: condition.flags.is_sitting(),
                    dirty: condition.flags.is_dirty(),
                    overweight: condition.flags.is_overweight(),
                    broken: condition.flags.is_broken(),
                    message: condition.message.clone(),
                })
                .collect(),
        })
        .collect();
    let fake = Fake {
        bug,
        own_url: url.clone(),
        jia_url: jia_url.to_owned(),
        sessions: HashMap::new(),
        next_session: 0,
        isus,
    };
    let router = Router::new()
        .route("/", get(index))
        .route("/register", get(index))
        .route("/isu/{*rest}", get(page))
        .route("/assets/fake.js", get(asset))
        .route("/api/auth", post(auth))
        .route("/api/signout", post(signout))
        .route("/api/user/me", get(me))
        .route("/api/isu", get(isu_list).post(register))
        .route("/api/isu/{uuid}", get(isu))
        .route("/api/isu/{uuid}/icon", get(icon))
        .route("/api/isu/{uuid}/graph", get(graph))
        .route("/api/condition/{uuid}", get(conditions).post(post_conditions))
        .route("/api/trend", get(trend))
        .with_state(Arc::new(Mutex::new(fake)));
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

/// The project's dataset with every ISU's history replaced by one condition every 10 minutes
/// cycling info → warning → critical, so every hour holds all three levels and a query for
/// one level over an hour always has others to leave out.
fn dense_dataset() -> Dataset {
    let mut dataset = generated::generate();
    let messages = ["", "ok", "dusty", "heavy", "broken"];
    for isu in &mut dataset.isus {
        let base = generated::VIRTUAL_START - 2 * 86_400 + isu.id * 7;
        isu.conditions = (0..36i64)
            .map(|step| {
                let condition = match step % 3 {
                    0 => "is_dirty=false,is_overweight=false,is_broken=false",
                    1 => "is_dirty=true,is_overweight=false,is_broken=false",
                    _ => "is_dirty=true,is_overweight=true,is_broken=true",
                };
                let message = messages[(step as usize + isu.id as usize) % messages.len()];
                wire_condition(base + step * 600, step % 2 == 0, condition, message).unwrap()
            })
            .collect();
    }
    dataset
}

struct Setup {
    jia: JiaHandle,
    target: String,
    expected: Arc<ExpectedData>,
    stats: Arc<Stats>,
}

async fn setup(bug: Bug, dataset: Dataset) -> Setup {
    let jia = JiaSimulator::start(JiaConfig {
        run_for: Duration::from_secs(60),
        ..JiaConfig::default()
    })
    .await
    .unwrap();
    let target = spawn_fake(bug, &dataset, &jia.url()).await;
    let expected = ExpectedData::from_dataset("test", &dataset, DEFAULT_ICON).unwrap();
    Setup {
        jia,
        target,
        expected: Arc::new(expected),
        stats: Arc::new(Stats::default()),
    }
}

impl Setup {
    fn prepare_context(&self) -> PrepareContext {
        PrepareContext {
            seed: Some(0x5eed),
            ..PrepareContext::new(
                &self.target,
                self.jia.clone(),
                self.stats.clone(),
                self.expected.clone(),
            )
        }
    }

    fn error_check_config(&self) -> ErrorCheckConfig {
        ErrorCheckConfig {
            target: self.target.clone(),
            timeout: LOAD_ERROR_CHECK_TIMEOUT,
            signer: jia_sim::jwt::JwtSigner::project_default(),
            clock: self.jia.clock(),
            stats: self.stats.clone(),
        }
    }

    fn isucon1(&self) -> ErrorCheckUser {
        let user = self.expected.user("isucon1").unwrap();
        ErrorCheckUser {
            jia_user_id: "isucon1".into(),
            isu_uuids: self.expected.isus_of(user).map(|isu| isu.uuid.clone()).collect(),
        }
    }

    async fn prepare(&self) -> (PrepareOutcome, Snapshot) {
        let outcome = compatibility_check(&self.prepare_context()).await;
        (outcome, self.stats.snapshot())
    }

    async fn error_check(&self) -> Snapshot {
        error_check(&self.error_check_config(), &self.isucon1()).await;
        self.stats.snapshot()
    }
}

fn errors_of(snapshot: &Snapshot, kind: ErrorKind) -> u64 {
    snapshot.errors.get(&kind).copied().unwrap_or_default()
}

/// At least one error of `kind`, described with every word of `words`.
#[track_caller]
fn assert_caught(snapshot: &Snapshot, kind: ErrorKind, words: &[&str]) {
    let report = format!("{snapshot}\n{}", snapshot.error_samples.join("\n"));
    assert!(errors_of(snapshot, kind) > 0, "no {} error:\n{report}", kind.name());
    let tag = format!("[{}]", kind.name());
    assert!(
        snapshot
            .error_samples
            .iter()
            .any(|sample| sample.starts_with(&tag) && words.iter().all(|word| sample.contains(word))),
        "no {tag} error mentions {words:?}:\n{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_service_passes_the_compatibility_check_and_the_error_checks() {
    for dataset in [generated::generate(), dense_dataset()] {
        let setup = setup(Bug::None, dataset).await;
        let (outcome, snapshot) = setup.prepare().await;
        assert!(outcome.passed, "{snapshot}\n{}", snapshot.error_samples.join("\n"));
        assert_eq!(snapshot.error_count(), 0);
        assert!(snapshot.requests > 100, "only {} requests", snapshot.requests);
        // Default icon, own image, and the ISU whose device posted while unregistered.
        assert_eq!(outcome.registered.len(), 3);
        assert!(outcome
            .registered
            .iter()
            .all(|isu| isu.owner == "isucon1" && isu.isu.id > 28));
        assert_eq!(setup.jia.activations().len(), 3);
        assert!(outcome.no_isu_user.is_some());

        let snapshot = setup.error_check().await;
        assert_eq!(snapshot.error_count(), 0, "{:?}", snapshot.error_samples);
        assert_eq!(snapshot.timeouts, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_error_checks_keep_checking_until_dropped() {
    let setup = setup(Bug::None, generated::generate()).await;
    let user = setup.isucon1();
    let checks = run_error_checks(
        setup.error_check_config(),
        move || Some(user.clone()),
        Duration::from_millis(100),
    );
    let _ = tokio::time::timeout(Duration::from_millis(1500), checks).await;
    let snapshot = setup.stats.snapshot();
    assert_eq!(snapshot.error_count(), 0, "{:?}", snapshot.error_samples);
    // Each round sends about 40 requests; more than one round ran.
    assert!(snapshot.requests > 60, "{} requests", snapshot.requests);
    let auth = snapshot.latencies["POST /api/auth"].count;
    assert!(auth >= 2 * 11, "{auth} sign-ins");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trend_that_goes_back_in_time_fails_the_check() {
    let (outcome, snapshot) = setup(Bug::TrendBackInTime, dense_dataset()).await.prepare().await;
    assert!(!outcome.passed);
    assert_caught(&snapshot, ErrorKind::Data, &["trend shows isu 1", "back in time"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_graph_score_fails_the_check() {
    let (outcome, snapshot) = setup(Bug::GraphScoreOffByOne, dense_dataset()).await.prepare().await;
    assert!(!outcome.passed);
    assert_caught(&snapshot, ErrorKind::Data, &["graph of", "score"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_list_without_the_level_filter_fails_the_check() {
    let (outcome, snapshot) = setup(Bug::ConditionsIgnoreLevel, dense_dataset()).await.prepare().await;
    assert!(!outcome.passed);
    assert_caught(&snapshot, ErrorKind::Data, &["condition list of", "was not requested"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_isu_visible_is_critical() {
    let service = setup(Bug::OthersIsuVisible, generated::generate()).await;
    let snapshot = service.error_check().await;
    assert!(snapshot.critical, "{:?}", snapshot.error_samples);
    assert_caught(
        &snapshot,
        ErrorKind::Data,
        &["CRITICAL", "GET /api/isu/:uuid", "of another user"],
    );
    // The compatibility check runs the same checks, after the normal part passed.
    let fresh = setup(Bug::OthersIsuVisible, generated::generate()).await;
    let (outcome, snapshot) = fresh.prepare().await;
    assert!(!outcome.passed && snapshot.critical, "{:?}", snapshot.error_samples);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_error_message_is_a_data_error() {
    let snapshot = setup(Bug::MissingEndTimeMessage, generated::generate())
        .await
        .error_check()
        .await;
    assert_caught(
        &snapshot,
        ErrorKind::Data,
        &[
            "GET /api/condition/:uuid",
            "\"missing: end_time\"",
            "expected \"bad format: end_time\"",
        ],
    );
    assert_eq!(snapshot.error_count(), 1, "{:?}", snapshot.error_samples);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_204_signout_is_a_status_error() {
    let (outcome, snapshot) = setup(Bug::Signout204, generated::generate()).await.prepare().await;
    assert!(!outcome.passed);
    assert_caught(
        &snapshot,
        ErrorKind::Status,
        &["POST /api/signout", "status 204", "[200]"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_sent_as_text_is_a_content_type_error() {
    let (outcome, snapshot) = setup(Bug::MeAsTextPlain, generated::generate()).await.prepare().await;
    assert!(!outcome.passed);
    assert_caught(
        &snapshot,
        ErrorKind::ContentType,
        &["GET /api/user/me", "application/json"],
    );
}

/// The folder of the contest's data beside the checkout, if present.
fn official_data_dir() -> Option<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/isucon11-qualify");
    if dir.join("initialize.json").is_file() {
        Some(dir)
    } else {
        eprintln!("skipped: {} is absent (CI always has it)", dir.display());
        None
    }
}

#[test]
fn the_official_initialize_json_loads_with_its_known_facts_shared_data() {
    let Some(dir) = official_data_dir() else { return };
    let data = ExpectedData::load(dir.join("initialize.json").to_str().unwrap()).unwrap();
    assert!(data.isus.iter().map(|isu| isu.id).eq(1..=28));
    assert_eq!(data.condition_count(), 618);
    let owners: Vec<(&str, usize)> = data
        .users
        .iter()
        .map(|user| (user.jia_user_id.as_str(), data.isus_of(user).count()))
        .collect();
    assert_eq!(&owners[..2], &[("isucon1", 5), ("isucon2", 20)]);
    assert_eq!(owners.len(), 5);
    assert!(owners[2..].iter().all(|(_, count)| *count == 1));
    for (index, isu) in data.isus.iter().enumerate() {
        let character = CHARACTERS.get(index).copied().unwrap_or("いじっぱり");
        assert_eq!(isu.character, character, "isu {}", isu.id);
    }
    let isu = data.isu("15063e10-26fc-4dac-ae3a-1f195e0c6c4a").unwrap();
    assert_eq!(
        (isu.id, isu.name.as_str(), isu.owner.as_str()),
        (4, "カウンターカウチ", "isucon1")
    );
    assert_eq!(hex::encode(isu.icon_md5), "418971320ec00a156a791f3d7e4ec88f");
    assert_eq!(isu.conditions.len(), 72);
    assert_eq!(isu.conditions[0].timestamp, 1_622_703_549);
    let newest = isu.newest().unwrap();
    assert_eq!(newest.timestamp, 1_622_959_149);
    assert_eq!(newest.condition, "is_dirty=false,is_overweight=false,is_broken=true");
    assert_eq!(newest.message, "直していただけますか？");
    assert!(newest.is_sitting);
    let last = &data.isus[27];
    assert_eq!(
        (last.uuid.as_str(), last.conditions.len()),
        ("3af9b2b1-0111-4add-ab0c-5e122896bcda", 6)
    );
    assert_eq!(hex::encode(data.default_icon_md5), "5827c4619739d85397844af87f9d2fe4");
}
