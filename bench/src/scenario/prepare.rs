//! The compatibility check ("prepare", API contract §13.2), run once after `POST /initialize`
//! against the initial data, and the error checks (`loadErrorCheck`) run before and during
//! the load.
//!
//! Every request goes through the counting [`Agent`], so problems land in the run's
//! [`Stats`] with their [`ErrorKind`](super::stats::ErrorKind): a wrong status as `status`,
//! a wrong `Content-Type` as `content_type`, wrong data or error messages as `data`, and
//! another user's ISU seen as a critical error. Like the official bench, a check stops at
//! its first problem (one error per failed verification) and the next check goes on.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use reqwest::header::{AUTHORIZATION, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED, SET_COOKIE};
use reqwest::multipart::{Form, Part};
use reqwest::{Method, RequestBuilder};
use tokio_util::sync::CancellationToken;

use super::api::{Agent, ConditionItem, GraphPoint, Isu, IsuListItem, Me, Reply, TrendEntry};
use super::expected::{ExpectedData, InitialIsu};
use super::stats::Stats;
use super::validate::{
    check_condition, check_condition_page, check_graph, check_isu, check_isu_list, check_trend, ConditionQuery,
    ExpectedIsu, SentLog, TrendMemory, CONDITION_PAGE_LIMIT, GRAPH_HOURS,
};
use crate::model::{condition_string, Level, SentCondition, CHARACTERS};
use jia_sim::clock::{jst_day_start, VirtualClock};
use jia_sim::jwt::{InvalidJwt, JwtSigner};
use jia_sim::{JiaHandle, UNKNOWN_ISU_UUID};

/// Official timeout of every request of the compatibility check.
pub const PREPARE_TIMEOUT: Duration = Duration::from_secs(3);
/// Official timeout of the error checks during the load.
pub const LOAD_ERROR_CHECK_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between two error checks during the load (official: 500 ms).
pub const ERROR_CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// Users checked in the normal part of the compatibility check: `isucon1` and one other.
const PREPARE_USERS: usize = 2;
/// ISUs of a user checked in detail.
const ISUS_CHECKED_PER_USER: usize = 5;
const HOUR: i64 = 3600;
const DAY: i64 = 86_400;
/// Real time between two posts of the unregistered device (the official device interval).
const UNREGISTERED_POST_INTERVAL: Duration = Duration::from_millis(40);
const NOT_SIGNED_IN: &str = "you are not signed in";
const NOT_FOUND_ISU: &str = "not found: isu";

/// A problem was found and already counted in the stats; the current check stops.
#[derive(Debug, Clone, Copy)]
struct Recorded;

type Step<T = ()> = Result<T, Recorded>;

/// What the compatibility check needs.
#[derive(Clone)]
pub struct PrepareContext {
    /// Public base URL of the service.
    pub target: String,
    /// Timeout of every request (official: 3 s).
    pub timeout: Duration,
    pub signer: JwtSigner,
    /// The running JIA simulator (the one given to `POST /initialize`).
    pub jia: JiaHandle,
    pub stats: Arc<Stats>,
    pub expected: Arc<ExpectedData>,
    /// Seed of the random choices (users, ISUs, windows); `None` = fresh entropy.
    pub seed: Option<u64>,
}

impl PrepareContext {
    /// A context with the official timeout and the project's signing key.
    pub fn new(target: &str, jia: JiaHandle, stats: Arc<Stats>, expected: Arc<ExpectedData>) -> PrepareContext {
        PrepareContext {
            target: target.trim_end_matches('/').to_owned(),
            timeout: PREPARE_TIMEOUT,
            signer: JwtSigner::project_default(),
            jia,
            stats,
            expected,
            seed: None,
        }
    }

    fn agent(&self) -> Step<Agent> {
        new_agent(&self.target, self.timeout, &self.stats)
    }

    fn error_check_config(&self) -> ErrorCheckConfig {
        ErrorCheckConfig {
            target: self.target.clone(),
            timeout: self.timeout,
            signer: self.signer.clone(),
            clock: self.jia.clock(),
            stats: self.stats.clone(),
        }
    }
}

/// An ISU the compatibility check registered (the load may use or show it).
#[derive(Debug, Clone)]
pub struct RegisteredIsu {
    pub owner: String,
    pub isu: ExpectedIsu,
    /// Virtual time just before its registration.
    pub registered_at: i64,
}

/// The result of [`compatibility_check`].
#[derive(Debug, Clone)]
pub struct PrepareOutcome {
    /// No error and no timeout: the run may go on to the load (§13.7).
    pub passed: bool,
    /// Non-timeout errors counted during the check.
    pub errors: u64,
    pub timeouts: u64,
    /// ISUs registered by the check, in registration order (all owned by `isucon1`, or the
    /// first initial user).
    pub registered: Vec<RegisteredIsu>,
    /// A user the check signed up who owns no ISU (for the later error checks).
    pub no_isu_user: Option<String>,
}

/// Runs the compatibility check of §13.2 once, counting every problem into `ctx.stats`.
pub async fn compatibility_check(ctx: &PrepareContext) -> PrepareOutcome {
    let (errors_before, timeouts_before) = (ctx.stats.errors(), ctx.stats.timeouts());
    let mut rng = match ctx.seed {
        Some(seed) => StdRng::seed_from_u64(seed),
        None => StdRng::from_entropy(),
    };
    let mut registered = Vec::new();
    let mut no_isu_user = None;
    let _ = run_compatibility_check(ctx, &mut rng, &mut registered, &mut no_isu_user).await;
    let errors = ctx.stats.errors() - errors_before;
    let timeouts = ctx.stats.timeouts() - timeouts_before;
    PrepareOutcome {
        passed: errors == 0 && timeouts == 0,
        errors,
        timeouts,
        registered,
        no_isu_user,
    }
}

async fn run_compatibility_check(
    ctx: &PrepareContext,
    rng: &mut StdRng,
    registered: &mut Vec<RegisteredIsu>,
    no_isu_user: &mut Option<String>,
) -> Step {
    // Counted from here: the stats may hold earlier problems (a caller's own checks).
    let baseline = (ctx.stats.errors(), ctx.stats.timeouts());
    let failed_so_far = || (ctx.stats.errors(), ctx.stats.timeouts()) != baseline;
    let expected = &ctx.expected;
    let Some(first_user) = expected
        .user("isucon1")
        .or_else(|| expected.users.first())
        .map(|user| user.jia_user_id.clone())
    else {
        ctx.stats
            .data_error("the expected data has no user owning ISUs".to_owned());
        return Err(Recorded);
    };

    // A device posts for an ISU that is not registered yet, during the whole normal part.
    let unregistered = UnregisteredDevice::start(ctx, rng);

    let mut users = vec![first_user.clone()];
    let others: Vec<&str> = expected
        .users
        .iter()
        .map(|user| user.jia_user_id.as_str())
        .filter(|user| *user != first_user)
        .collect();
    if let Some(other) = others.choose(rng) {
        users.push((*other).to_owned());
    }
    users.truncate(PREPARE_USERS);
    // The two users run in parallel, as in the official bench.
    let (first_seed, other_seed) = (rng.gen(), rng.gen());
    let other_user = async {
        match users.get(1) {
            Some(other) => check_initial_user(ctx, other, other_seed).await,
            None => Ok(()),
        }
    };
    let _ = tokio::join!(check_initial_user(ctx, &users[0], first_seed), other_user);
    let _ = check_initial_trend(ctx).await;
    if failed_so_far() {
        unregistered.stop().await;
        return Err(Recorded);
    }

    // Error checks, with the first user and a new user who owns nothing.
    let mut checker = ErrorChecker::new(ctx.error_check_config())?;
    let owned = ErrorCheckUser {
        jia_user_id: first_user.clone(),
        isu_uuids: expected
            .user(&first_user)
            .map(|user| expected.isus_of(user).map(|isu| isu.uuid.clone()).collect())
            .unwrap_or_default(),
    };
    checker.check(&owned).await;
    *no_isu_user = Some(checker.no_isu_user.clone());

    unregistered.stop().await;
    check_registrations(ctx, rng, &first_user, &mut checker, &unregistered, registered).await?;
    if failed_so_far() {
        return Err(Recorded);
    }
    Ok(())
}

// ------------------------------------------------------------------ the normal part

/// One initial user: pages, sign-in, `/api/user/me`, the exact ISU list, then up to five
/// ISUs in detail, and sign-out twice.
async fn check_initial_user(ctx: &PrepareContext, jia_user_id: &str, seed: u64) -> Step {
    let mut rng = StdRng::seed_from_u64(seed);
    let stats = &ctx.stats;
    let expected = &ctx.expected;
    let Some(user) = expected.user(jia_user_id) else {
        stats.data_error(format!("the expected data has no user {jia_user_id}"));
        return Err(Recorded);
    };
    let agent = ctx.agent()?;
    browse(&agent, "/", "GET /", true).await?;
    let token = ctx.signer.sign(jia_user_id);
    browse(&agent, &format!("/?jwt={token}"), "GET /?jwt=", true).await?;
    sign_in_with_token(&agent, &token).await?;
    let me = get_json::<Me>(&agent, "GET /api/user/me", "/api/user/me", &[]).await?;
    if me.jia_user_id != jia_user_id {
        stats.data_error(format!(
            "GET /api/user/me: jia_user_id {:?}, expected {jia_user_id:?}",
            me.jia_user_id
        ));
        return Err(Recorded);
    }
    let isus: Vec<&InitialIsu> = expected.isus_of(user).collect();
    let list = get_json::<Vec<IsuListItem>>(&agent, "GET /api/isu", "/api/isu", &[]).await?;
    data(stats, check_exact_isu_list(&list, &isus, expected))?;

    let mut chosen = isus.clone();
    chosen.shuffle(&mut rng);
    chosen.truncate(ISUS_CHECKED_PER_USER);
    for isu in chosen {
        check_initial_isu(ctx, &agent, isu, &mut rng).await?;
    }

    let signout = agent.request(Method::POST, "/api/signout");
    agent
        .send("POST /api/signout", signout, &[200])
        .await
        .map_err(|_| Recorded)?;
    let again = agent.request(Method::POST, "/api/signout");
    expect_error(&agent, "POST /api/signout", again, 401, NOT_SIGNED_IN).await
}

/// Detail, icon (twice), the two graphs around the newest condition, three condition lists.
async fn check_initial_isu(ctx: &PrepareContext, agent: &Agent, isu: &InitialIsu, rng: &mut StdRng) -> Step {
    let stats = &ctx.stats;
    let uuid = &isu.uuid;
    browse(agent, &format!("/isu/{uuid}"), "GET /isu/:uuid", false).await?;
    let detail = get_json::<Isu>(agent, "GET /api/isu/:uuid", &format!("/api/isu/{uuid}"), &[]).await?;
    data(stats, check_isu(&detail, &isu.expected()))?;
    check_icon_twice(agent, uuid, isu.icon_md5).await?;

    let Some(newest) = isu.newest() else { return Ok(()) };
    // The official bench sends its host's local midnight, which need not be JST's: both
    // must work, since the service truncates to the hour only.
    let offset = if rng.gen_bool(0.5) { 0 } else { 9 * HOUR };
    let day = jst_day_start(newest.timestamp) + offset;
    let day = if day > newest.timestamp { day - DAY } else { day };
    for datetime in [day, day - DAY] {
        let points = get_json::<Vec<GraphPoint>>(
            agent,
            "GET /api/isu/:uuid/graph",
            &format!("/api/isu/{uuid}/graph"),
            &[("datetime", datetime.to_string())],
        )
        .await?;
        data(stats, check_exact_graph(&points, datetime, isu, &ctx.expected))?;
    }

    let all = Level::ALL.to_vec();
    let info: Vec<i64> = isu
        .conditions
        .iter()
        .filter(|condition| condition.level() == Level::Info)
        .map(|condition| condition.timestamp)
        .collect();
    let info_end = info.choose(rng).copied().unwrap_or(newest.timestamp);
    let level = Level::ALL[rng.gen_range(0..Level::ALL.len())];
    let queries = [
        ConditionQuery {
            end_time: newest.timestamp,
            start_time: None,
            levels: all.clone(),
        },
        ConditionQuery {
            end_time: info_end,
            start_time: Some(info_end - rng.gen_range(0..12) * HOUR),
            levels: all,
        },
        ConditionQuery {
            end_time: newest.timestamp,
            start_time: Some(newest.timestamp - HOUR),
            levels: vec![level],
        },
    ];
    for query in queries {
        browse(
            agent,
            &format!("/isu/{uuid}/condition"),
            "GET /isu/:uuid/condition",
            false,
        )
        .await?;
        let items = get_conditions(agent, uuid, &query).await?;
        data(stats, check_exact_condition_page(&items, &query, isu, &ctx.expected))?;
    }
    Ok(())
}

/// The trend as an anonymous viewer sees it, exact for the initial data.
async fn check_initial_trend(ctx: &PrepareContext) -> Step {
    let viewer = ctx.agent()?;
    browse(&viewer, "/", "GET /", true).await?;
    let entries = get_json::<Vec<TrendEntry>>(&viewer, "GET /api/trend", "/api/trend", &[]).await?;
    data(&ctx.stats, check_exact_trend(&entries, &ctx.expected))
}

// ------------------------------------------------------------------ registration

/// Registrations (default icon, own image, duplicates, JIA's 404, the ISU that posted while
/// unregistered) as `owner`, and the owner's list afterwards.
async fn check_registrations(
    ctx: &PrepareContext,
    rng: &mut StdRng,
    owner: &str,
    checker: &mut ErrorChecker,
    unregistered: &UnregisteredDevice,
    registered: &mut Vec<RegisteredIsu>,
) -> Step {
    let stats = &ctx.stats;
    let agent = ctx.agent()?;
    browse(&agent, "/register", "GET /register", false).await?;
    sign_in(&agent, &ctx.signer, owner).await?;

    let without_image = register_and_verify(ctx, &agent, owner, None, None, rng, registered).await?;
    let image = fake_jpeg(rng);
    register_and_verify(ctx, &agent, owner, None, Some(image), rng, registered).await?;

    // Without a session, by the owner again, by somebody else, and an ISU JIA does not know.
    let guest = ctx.agent()?;
    let request = register_request(&guest, &without_image.uuid, &without_image.name, None);
    expect_error(&guest, "POST /api/isu", request, 401, NOT_SIGNED_IN).await?;
    let request = register_request(&agent, &without_image.uuid, &without_image.name, None);
    expect_error(&agent, "POST /api/isu", request, 409, "duplicated: isu").await?;
    let other = checker.no_isu_agent().await?;
    let request = register_request(&other, &without_image.uuid, &without_image.name, None);
    expect_error(&other, "POST /api/isu", request, 409, "duplicated: isu").await?;
    let request = register_request(&agent, UNKNOWN_ISU_UUID, "isuname", None);
    expect_error(&agent, "POST /api/isu", request, 404, "JIAService returned error").await?;

    // The ISU whose device posted before it was registered: nothing of that may be stored.
    let posted_before = ctx.jia.clock().now();
    let image = fake_jpeg(rng);
    let prior = register_and_verify(
        ctx,
        &agent,
        owner,
        Some(unregistered.uuid.clone()),
        Some(image),
        rng,
        registered,
    )
    .await?;
    let query = ConditionQuery {
        end_time: posted_before,
        start_time: None,
        levels: Level::ALL.to_vec(),
    };
    let items = get_conditions(&agent, &prior.uuid, &query).await?;
    if let Some(item) = items.first() {
        stats.data_error(format!(
            "GET /api/condition/:uuid: {} returns {} condition(s) before its registration (newest at {}), \
             posted while it was not registered; they must never be stored",
            prior.uuid,
            items.len(),
            item.timestamp
        ));
        return Err(Recorded);
    }

    // Failed registrations left nothing behind: initial ISUs and the new ones, newest first.
    let mut owned: Vec<ExpectedIsu> = ctx
        .expected
        .user(owner)
        .map(|user| ctx.expected.isus_of(user).map(InitialIsu::expected).collect())
        .unwrap_or_default();
    owned.extend(registered.iter().map(|isu| isu.isu.clone()));
    let list = get_json::<Vec<IsuListItem>>(&agent, "GET /api/isu", "/api/isu", &[]).await?;
    let log = InitialOrSent {
        initial: &ctx.expected,
        jia: &ctx.jia,
    };
    data(stats, check_isu_list(&list, &owned, &log))
}

/// Registers one ISU (a new UUID unless given), then checks the 201 body, the detail and the icon.
async fn register_and_verify(
    ctx: &PrepareContext,
    agent: &Agent,
    owner: &str,
    uuid: Option<String>,
    image: Option<Vec<u8>>,
    rng: &mut StdRng,
    registered: &mut Vec<RegisteredIsu>,
) -> Step<ExpectedIsu> {
    let stats = &ctx.stats;
    let uuid = uuid.unwrap_or_else(|| uuid::Uuid::from_u128(rng.gen()).to_string());
    let character = CHARACTERS[rng.gen_range(0..CHARACTERS.len())];
    ctx.jia.add_isu(&uuid, character);
    let name = format!("互換チェックいす{}", registered.len() + 1);
    let registered_at = ctx.jia.clock().now();
    let request = register_request(agent, &uuid, &name, image.as_deref());
    let created = agent.json::<Isu>("POST /api/isu", request, 201).await.ok_or(Recorded)?;
    let mut expected = ExpectedIsu {
        id: 0,
        uuid: uuid.clone(),
        name,
        character: character.to_owned(),
    };
    data(stats, check_isu(&created, &expected))?;
    let floor = registered.last().map_or(ctx.expected.max_id(), |isu| isu.isu.id);
    if created.id <= floor {
        stats.data_error(format!(
            "POST /api/isu: {uuid} got id {}, expected more than {floor} (ids grow with registrations)",
            created.id
        ));
        return Err(Recorded);
    }
    expected.id = created.id;
    registered.push(RegisteredIsu {
        owner: owner.to_owned(),
        isu: expected.clone(),
        registered_at,
    });
    let detail = get_json::<Isu>(agent, "GET /api/isu/:uuid", &format!("/api/isu/{uuid}"), &[]).await?;
    data(stats, check_isu(&detail, &expected))?;
    let icon_md5 = image
        .as_deref()
        .map_or(ctx.expected.default_icon_md5, |image| md5::compute(image).0);
    check_icon_twice(agent, &uuid, icon_md5).await?;
    Ok(expected)
}

fn register_request(agent: &Agent, uuid: &str, name: &str, image: Option<&[u8]>) -> RequestBuilder {
    let mut form = Form::new()
        .text("jia_isu_uuid", uuid.to_owned())
        .text("isu_name", name.to_owned());
    if let Some(image) = image {
        let part = Part::bytes(image.to_vec())
            .file_name("image.jpeg")
            .mime_str("image/jpeg")
            .expect("image/jpeg is a valid MIME type");
        form = form.part("image", part);
    }
    agent.request(Method::POST, "/api/isu").multipart(form)
}

/// Bytes that start and end like a JPEG, random in between (the service stores them as given).
fn fake_jpeg(rng: &mut StdRng) -> Vec<u8> {
    let mut image = vec![0xff, 0xd8, 0xff, 0xe0];
    image.extend((0..rng.gen_range(512..4096)).map(|_| rng.gen::<u8>()));
    image.extend([0xff, 0xd9]);
    image
}

/// Looks a condition up in the initial data, then in what the simulator's devices sent.
struct InitialOrSent<'a> {
    initial: &'a ExpectedData,
    jia: &'a JiaHandle,
}

impl SentLog for InitialOrSent<'_> {
    fn find(&self, isu_uuid: &str, timestamp: i64) -> Option<SentCondition> {
        self.initial
            .find(isu_uuid, timestamp)
            .or_else(|| self.jia.find_sent(isu_uuid, timestamp))
    }
}

/// A device that posts for a UUID known to JIA but not registered at the service, like the
/// official `prepareStartInvalidIsuPost`. Responses are ignored; nothing may be stored.
struct UnregisteredDevice {
    uuid: String,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl UnregisteredDevice {
    fn start(ctx: &PrepareContext, rng: &mut StdRng) -> UnregisteredDevice {
        let uuid = uuid::Uuid::from_u128(rng.gen()).to_string();
        let url = format!("{}/api/condition/{uuid}", ctx.target);
        let clock = ctx.jia.clock();
        let stop = CancellationToken::new();
        let seed = rng.gen();
        let task = tokio::spawn(post_while_unregistered(url, clock, stop.clone(), seed));
        UnregisteredDevice { uuid, stop, task }
    }

    async fn stop(&self) {
        self.stop.cancel();
        while !self.task.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for UnregisteredDevice {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn post_while_unregistered(url: String, clock: VirtualClock, stop: CancellationToken, seed: u64) {
    let Ok(client) = jia_sim::http::client_builder()
        .timeout(Duration::from_millis(100))
        .no_proxy()
        .build()
    else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut last = clock.now() - 10 * 60;
    let mut ticker = tokio::time::interval(UNREGISTERED_POST_INTERVAL);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let now = clock.now();
        let mut batch = Vec::new();
        while last + 60 <= now && batch.len() < 10 {
            last += 60;
            let bits: u8 = if rng.gen_bool(0.2) { rng.gen_range(1..8) } else { 0 };
            batch.push(SentCondition {
                is_sitting: rng.gen(),
                condition: condition_string(bits & 1 != 0, bits & 2 != 0, bits & 4 != 0),
                message: "まだ登録されていません",
                timestamp: last + rng.gen_range(-5..=5),
            });
        }
        if batch.is_empty() {
            continue;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = client.post(&url).json(&batch).send() => {}
        }
    }
}

// ------------------------------------------------------------------ exact checks

/// `GET /api/isu` of an initial user: every ISU, id descending, latest = newest initial condition.
pub fn check_exact_isu_list(items: &[IsuListItem], isus: &[&InitialIsu], log: &ExpectedData) -> Result<(), String> {
    if items.len() != isus.len() {
        return Err(format!(
            "isu list has {} ISUs, the initial data has {}",
            items.len(),
            isus.len()
        ));
    }
    for (item, isu) in items.iter().zip(isus.iter().rev()) {
        let actual = Isu {
            id: item.id,
            jia_isu_uuid: item.jia_isu_uuid.clone(),
            name: item.name.clone(),
            character: item.character.clone(),
        };
        let expected = isu.expected();
        check_isu(&actual, &expected).map_err(|problem| format!("isu list: {problem} (order is id descending)"))?;
        match (&item.latest_isu_condition, isu.newest()) {
            (None, None) => {}
            (None, Some(newest)) => {
                return Err(format!(
                    "isu list: {} has no latest_isu_condition, expected the one at {}",
                    isu.uuid, newest.timestamp
                ))
            }
            (Some(latest), None) => {
                return Err(format!(
                    "isu list: {} has a latest condition at {} but no initial condition",
                    isu.uuid, latest.timestamp
                ))
            }
            (Some(latest), Some(newest)) => {
                check_condition(latest, &expected, log)
                    .map_err(|problem| format!("isu list latest condition: {problem}"))?;
                if latest.timestamp != newest.timestamp {
                    return Err(format!(
                        "isu list: latest condition of {} is at {}, expected the newest at {}",
                        isu.uuid, latest.timestamp, newest.timestamp
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A graph over initial data: correct (recomputed by the bench) and complete (no initial
/// condition of those hours missing).
pub fn check_exact_graph(
    points: &[GraphPoint],
    datetime: i64,
    isu: &InitialIsu,
    log: &ExpectedData,
) -> Result<(), String> {
    check_graph(points, datetime, &isu.uuid, log)?;
    let first_hour = datetime.div_euclid(HOUR) * HOUR;
    for (hour, point) in points.iter().enumerate().take(GRAPH_HOURS) {
        let start = first_hour + HOUR * hour as i64;
        let wanted: Vec<i64> = isu
            .conditions
            .iter()
            .map(|condition| condition.timestamp)
            .filter(|timestamp| (start..start + HOUR).contains(timestamp))
            .collect();
        if point.condition_timestamps != wanted {
            return Err(format!(
                "graph of {} point {hour} lists {} condition(s), the initial data has {} there \
                 (no initial condition may be missing)",
                isu.uuid,
                point.condition_timestamps.len(),
                wanted.len()
            ));
        }
    }
    Ok(())
}

/// The conditions of `isu` a query must return, newest first.
pub fn expected_condition_page<'a>(isu: &'a InitialIsu, query: &ConditionQuery) -> Vec<&'a SentCondition> {
    isu.conditions
        .iter()
        .rev()
        .filter(|condition| {
            condition.timestamp < query.end_time
                && query.start_time.is_none_or(|start| condition.timestamp >= start)
                && query.levels.contains(&condition.level())
        })
        .take(CONDITION_PAGE_LIMIT)
        .collect()
}

/// A condition list over initial data: valid, and each element the next expected one.
pub fn check_exact_condition_page(
    items: &[ConditionItem],
    query: &ConditionQuery,
    isu: &InitialIsu,
    log: &ExpectedData,
) -> Result<(), String> {
    check_condition_page(items, query, &isu.expected(), log)?;
    let wanted = expected_condition_page(isu, query);
    for (index, (item, next)) in items.iter().zip(&wanted).enumerate() {
        if item.timestamp != next.timestamp {
            return Err(format!(
                "condition list of {}: element {index} is at {}, expected the next matching initial condition at {}",
                isu.uuid, item.timestamp, next.timestamp
            ));
        }
    }
    if items.len() != wanted.len() {
        return Err(format!(
            "condition list of {} has {} element(s), expected {} (initial conditions are missing)",
            isu.uuid,
            items.len(),
            wanted.len()
        ));
    }
    Ok(())
}

/// The trend right after initialize: valid, and exactly every initial ISU at its newest condition.
pub fn check_exact_trend(entries: &[TrendEntry], expected: &ExpectedData) -> Result<(), String> {
    check_trend(entries, &expected.trend_isus(), expected, &mut TrendMemory::default())?;
    let newest: HashMap<i64, &InitialIsu> = expected.isus.iter().map(|isu| (isu.id, isu)).collect();
    let mut listed = HashSet::new();
    for entry in entries {
        for item in entry.info.iter().chain(&entry.warning).chain(&entry.critical) {
            let Some(isu) = newest.get(&item.isu_id) else {
                return Err(format!(
                    "trend lists isu {}, which is not in the initial data",
                    item.isu_id
                ));
            };
            let Some(latest) = isu.newest() else {
                return Err(format!("trend lists isu {}, which has no condition", item.isu_id));
            };
            if item.timestamp != latest.timestamp {
                return Err(format!(
                    "trend shows isu {} at {}, but its latest condition is at {} (stale, or back in time)",
                    item.isu_id, item.timestamp, latest.timestamp
                ));
            }
            listed.insert(item.isu_id);
        }
    }
    let with_conditions = expected.isus.iter().filter(|isu| isu.newest().is_some()).count();
    if listed.len() != with_conditions {
        return Err(format!(
            "trend has {} ISUs, the initial data has {with_conditions} with conditions",
            listed.len()
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------ error checks

/// What the error checks need (official: 3 s timeout before the load, 1 s during it).
#[derive(Clone)]
pub struct ErrorCheckConfig {
    pub target: String,
    pub timeout: Duration,
    pub signer: JwtSigner,
    /// For plausible `datetime`/`end_time` values.
    pub clock: VirtualClock,
    pub stats: Arc<Stats>,
}

/// A user whose registrations are finished, and the UUIDs of its ISUs.
#[derive(Debug, Clone)]
pub struct ErrorCheckUser {
    pub jia_user_id: String,
    pub isu_uuids: Vec<String>,
}

/// Runs the error checks; keeps an anonymous agent and a signed-in user without ISUs.
pub struct ErrorChecker {
    config: ErrorCheckConfig,
    guest: Agent,
    no_isu: Option<Agent>,
    no_isu_user: String,
    rng: StdRng,
}

/// One round of the error checks of §13.2 for `user`.
pub async fn error_check(config: &ErrorCheckConfig, user: &ErrorCheckUser) {
    if let Ok(mut checker) = ErrorChecker::new(config.clone()) {
        checker.check(user).await;
    }
}

/// Error checks every `interval` until the future is dropped (e.g. at the end of the load),
/// each with a user `pick` returns (none yet: skipped).
pub async fn run_error_checks(
    config: ErrorCheckConfig,
    mut pick: impl FnMut() -> Option<ErrorCheckUser> + Send,
    interval: Duration,
) {
    let Ok(mut checker) = ErrorChecker::new(config) else {
        return;
    };
    loop {
        tokio::time::sleep(interval).await;
        if let Some(user) = pick() {
            checker.check(&user).await;
        }
    }
}

impl ErrorChecker {
    fn new(config: ErrorCheckConfig) -> Step<ErrorChecker> {
        let guest = new_agent(&config.target, config.timeout, &config.stats)?;
        let mut rng = StdRng::from_entropy();
        let no_isu_user = format!("noisu{}", random_suffix(&mut rng));
        Ok(ErrorChecker {
            config,
            guest,
            no_isu: None,
            no_isu_user,
            rng,
        })
    }

    /// Builds an error checker (fails only if the HTTP client cannot be built).
    pub fn build(config: ErrorCheckConfig) -> anyhow::Result<ErrorChecker> {
        ErrorChecker::new(config).map_err(|_| anyhow::anyhow!("building the error checker's HTTP client"))
    }

    /// The user without ISUs, signed in on first use.
    async fn no_isu_agent(&mut self) -> Step<Agent> {
        if let Some(agent) = &self.no_isu {
            return Ok(agent.clone());
        }
        let agent = new_agent(&self.config.target, self.config.timeout, &self.config.stats)?;
        sign_in(&agent, &self.config.signer, &self.no_isu_user).await?;
        self.no_isu = Some(agent.clone());
        Ok(agent)
    }

    /// One round: invalid sign-ins, no-session 401s, the empty list, other users' and unknown
    /// ISUs, and parameter errors. Each part stops at its first problem; the others go on.
    pub async fn check(&mut self, user: &ErrorCheckUser) {
        let config = self.config.clone();
        let Ok(login) = new_agent(&config.target, config.timeout, &config.stats) else {
            return;
        };
        if sign_in(&login, &config.signer, &user.jia_user_id).await.is_err() {
            return;
        }
        let _ = self.check_sign_in(user).await;
        let _ = self.check_no_session().await;
        let Ok(no_isu) = self.no_isu_agent().await else { return };
        let _ = self.check_empty_list(&no_isu).await;
        if user.isu_uuids.is_empty() {
            return;
        }
        let mut pick = || user.isu_uuids[self.rng.gen_range(0..user.isu_uuids.len())].clone();
        let (detail, icon, graph, conditions) = (pick(), pick(), pick(), pick());
        let _ = self.check_isu_detail(&login, &no_isu, &detail).await;
        let _ = self.check_icon(&login, &no_isu, &icon).await;
        let _ = self.check_graph(&login, &no_isu, &graph).await;
        let _ = self.check_conditions(&login, &no_isu, &conditions).await;
    }

    /// The eight invalid tokens, then two valid sign-ins of `user` from one agent.
    async fn check_sign_in(&mut self, user: &ErrorCheckUser) -> Step {
        let config = &self.config;
        for case in InvalidJwt::ALL {
            let agent = new_agent(&config.target, config.timeout, &config.stats)?;
            let someone = format!("user{}", random_suffix(&mut self.rng));
            let mut request = agent.request(Method::POST, "/api/auth");
            if let Some(token) = config.signer.invalid_token(case, &someone) {
                request = request.header(AUTHORIZATION, token);
            }
            let _ = expect_error(
                &agent,
                "POST /api/auth",
                request,
                case.expected_status(),
                case.expected_body(),
            )
            .await;
        }
        let agent = new_agent(&config.target, config.timeout, &config.stats)?;
        sign_in(&agent, &config.signer, &user.jia_user_id).await?;
        sign_in(&agent, &config.signer, &user.jia_user_id).await
    }

    async fn check_no_session(&self) -> Step {
        let signout = self.guest.request(Method::POST, "/api/signout");
        expect_error(&self.guest, "POST /api/signout", signout, 401, NOT_SIGNED_IN).await?;
        let me = self.guest.request(Method::GET, "/api/user/me");
        expect_error(&self.guest, "GET /api/user/me", me, 401, NOT_SIGNED_IN).await
    }

    async fn check_empty_list(&self, no_isu: &Agent) -> Step {
        let list = get_json::<Vec<IsuListItem>>(no_isu, "GET /api/isu", "/api/isu", &[]).await?;
        if !list.is_empty() {
            self.config.stats.critical(format!(
                "GET /api/isu: {} owns no ISU but sees {} (first: {})",
                self.no_isu_user,
                list.len(),
                list[0].jia_isu_uuid
            ));
            return Err(Recorded);
        }
        let request = self.guest.request(Method::GET, "/api/isu");
        expect_error(&self.guest, "GET /api/isu", request, 401, NOT_SIGNED_IN).await
    }

    async fn check_isu_detail(&self, login: &Agent, no_isu: &Agent, uuid: &str) -> Step {
        let label = "GET /api/isu/:uuid";
        let path = format!("/api/isu/{uuid}");
        let request = self.guest.request(Method::GET, &path);
        expect_error(&self.guest, label, request, 401, NOT_SIGNED_IN).await?;
        self.expect_hidden(no_isu, label, no_isu.request(Method::GET, &path), uuid)
            .await?;
        let unknown = login.request(Method::GET, &format!("/api/isu/{UNKNOWN_ISU_UUID}"));
        expect_error(login, label, unknown, 404, NOT_FOUND_ISU).await
    }

    async fn check_icon(&self, login: &Agent, no_isu: &Agent, uuid: &str) -> Step {
        let label = "GET /api/isu/:uuid/icon";
        let path = format!("/api/isu/{uuid}/icon");
        let request = self.guest.request(Method::GET, &path);
        expect_error(&self.guest, label, request, 401, NOT_SIGNED_IN).await?;
        self.expect_hidden(no_isu, label, no_isu.request(Method::GET, &path), uuid)
            .await?;
        let unknown = login.request(Method::GET, &format!("/api/isu/{UNKNOWN_ISU_UUID}/icon"));
        expect_error(login, label, unknown, 404, NOT_FOUND_ISU).await
    }

    async fn check_graph(&self, login: &Agent, no_isu: &Agent, uuid: &str) -> Step {
        let label = "GET /api/isu/:uuid/graph";
        let path = format!("/api/isu/{uuid}/graph");
        let datetime = jst_day_start(self.config.clock.now()).to_string();
        let query = [("datetime", datetime.as_str())];
        let request = self.guest.request(Method::GET, &path).query(&query);
        expect_error(&self.guest, label, request, 401, NOT_SIGNED_IN).await?;
        let request = login.request(Method::GET, &path);
        expect_error(login, label, request, 400, "missing: datetime").await?;
        let request = login.request(Method::GET, &path).query(&[("datetime", "datetime")]);
        expect_error(login, label, request, 400, "bad format: datetime").await?;
        let request = no_isu.request(Method::GET, &path).query(&query);
        self.expect_hidden(no_isu, label, request, uuid).await?;
        let unknown = format!("/api/isu/{UNKNOWN_ISU_UUID}/graph");
        let request = login.request(Method::GET, &unknown).query(&query);
        expect_error(login, label, request, 404, NOT_FOUND_ISU).await
    }

    async fn check_conditions(&self, login: &Agent, no_isu: &Agent, uuid: &str) -> Step {
        let label = "GET /api/condition/:uuid";
        let path = format!("/api/condition/{uuid}");
        let end_time = self.config.clock.now().to_string();
        let end_time = end_time.as_str();
        let levels = "info,warning,critical";
        let valid = [("end_time", end_time), ("condition_level", levels)];
        let request = self.guest.request(Method::GET, &path).query(&valid);
        expect_error(&self.guest, label, request, 401, NOT_SIGNED_IN).await?;
        let cases: [(&[(&str, &str)], &str); 4] = [
            (&[("condition_level", levels)], "bad format: end_time"),
            (
                &[("end_time", "end_time"), ("condition_level", levels)],
                "bad format: end_time",
            ),
            (&[("end_time", end_time)], "missing: condition_level"),
            (
                &[
                    ("end_time", end_time),
                    ("condition_level", levels),
                    ("start_time", "start_time"),
                ],
                "bad format: start_time",
            ),
        ];
        for (query, message) in cases {
            let request = login.request(Method::GET, &path).query(query);
            expect_error(login, label, request, 400, message).await?;
        }
        let request = no_isu.request(Method::GET, &path).query(&valid);
        self.expect_hidden(no_isu, label, request, uuid).await?;
        let unknown = format!("/api/condition/{UNKNOWN_ISU_UUID}");
        let request = login.request(Method::GET, &unknown).query(&valid);
        expect_error(login, label, request, 404, NOT_FOUND_ISU).await
    }

    /// Another user's ISU must be 404 `not found: isu`; a 200 shows it: a critical error.
    async fn expect_hidden(&self, no_isu: &Agent, label: &str, request: RequestBuilder, uuid: &str) -> Step {
        let reply = no_isu.send(label, request, &[404, 200]).await.map_err(|_| Recorded)?;
        if reply.status.as_u16() == 200 {
            self.config.stats.critical(format!(
                "{label}: user {} was shown the ISU {uuid} of another user",
                self.no_isu_user
            ));
            return Err(Recorded);
        }
        check_text(no_isu, label, &reply, NOT_FOUND_ISU)
    }
}

// ------------------------------------------------------------------ requests

fn new_agent(target: &str, timeout: Duration, stats: &Arc<Stats>) -> Step<Agent> {
    Agent::new(target, timeout, stats.clone()).map_err(|error| {
        stats.data_error(format!("building an HTTP client: {error}"));
        Recorded
    })
}

fn random_suffix(rng: &mut StdRng) -> String {
    (0..8).map(|_| char::from(b'a' + rng.gen_range(0..26u8))).collect()
}

/// Counts a validator's problem as a data error.
fn data<T>(stats: &Stats, result: Result<T, String>) -> Step<T> {
    result.map_err(|problem| {
        stats.data_error(problem);
        Recorded
    })
}

async fn get_json<T: serde::de::DeserializeOwned>(
    agent: &Agent,
    label: &str,
    path: &str,
    query: &[(&str, String)],
) -> Step<T> {
    let request = agent.request(Method::GET, path).query(query);
    agent.json(label, request, 200).await.ok_or(Recorded)
}

async fn get_conditions(agent: &Agent, uuid: &str, query: &ConditionQuery) -> Step<Vec<ConditionItem>> {
    let params = query.params();
    get_json(
        agent,
        "GET /api/condition/:uuid",
        &format!("/api/condition/{uuid}"),
        &params,
    )
    .await
}

/// Expects `status` with the exact `text/plain` body.
async fn expect_error(agent: &Agent, label: &str, request: RequestBuilder, status: u16, body: &str) -> Step {
    let reply = agent.send(label, request, &[status]).await.map_err(|_| Recorded)?;
    check_text(agent, label, &reply, body)
}

fn check_text(agent: &Agent, label: &str, reply: &Reply, body: &str) -> Step {
    if agent.expect_text(label, reply, body) {
        Ok(())
    } else {
        Err(Recorded)
    }
}

/// `POST /api/auth` with the bare JWT, as the official bench sends it; 200 with a cookie.
async fn sign_in(agent: &Agent, signer: &JwtSigner, jia_user_id: &str) -> Step {
    sign_in_with_token(agent, &signer.sign(jia_user_id)).await
}

async fn sign_in_with_token(agent: &Agent, token: &str) -> Step {
    let request = agent.request(Method::POST, "/api/auth").header(AUTHORIZATION, token);
    let reply = agent
        .send("POST /api/auth", request, &[200])
        .await
        .map_err(|_| Recorded)?;
    if !reply.headers.contains_key(SET_COOKIE) {
        agent
            .stats()
            .data_error("POST /api/auth: 200 without a Set-Cookie".to_owned());
        return Err(Recorded);
    }
    Ok(())
}

/// A front-end page: 200 `text/html`; with `assets`, also every `/assets/…` file it
/// references (our own front end: existence only, no contest checksums).
async fn browse(agent: &Agent, path: &str, label: &str, assets: bool) -> Step {
    let request = agent.request(Method::GET, path);
    let reply = agent.send(label, request, &[200]).await.map_err(|_| Recorded)?;
    if !reply.content_type.starts_with("text/html") {
        agent.stats().error(
            super::stats::ErrorKind::ContentType,
            format!("{label}: content-type {:?}, expected text/html", reply.content_type),
        );
        return Err(Recorded);
    }
    if !assets {
        return Ok(());
    }
    let html = String::from_utf8_lossy(&reply.body);
    for asset in asset_references(&html) {
        let request = agent.request(Method::GET, &asset);
        agent
            .send("GET /assets/*", request, &[200])
            .await
            .map_err(|_| Recorded)?;
    }
    Ok(())
}

/// The distinct `/assets/…` paths quoted in an HTML page, in order of appearance.
pub fn asset_references(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    for quote in ['"', '\''] {
        let opening = format!("{quote}/assets/");
        let mut rest = html;
        while let Some(start) = rest.find(&opening) {
            let after = &rest[start + 1..];
            let Some(end) = after.find(quote) else { break };
            let path = after[..end].to_owned();
            if !found.contains(&path) {
                found.push(path);
            }
            rest = &after[end..];
        }
    }
    found
}

/// The icon twice: the second request revalidates with the first one's validators (as a
/// browser cache would), so a 304 is accepted then and stands for the first body.
async fn check_icon_twice(agent: &Agent, uuid: &str, wanted_md5: [u8; 16]) -> Step {
    let label = "GET /api/isu/:uuid/icon";
    let path = format!("/api/isu/{uuid}/icon");
    let first = agent
        .send(label, agent.request(Method::GET, &path), &[200])
        .await
        .map_err(|_| Recorded)?;
    check_icon_md5(agent, uuid, &first.body, wanted_md5)?;
    let mut request = agent.request(Method::GET, &path);
    let mut revalidating = false;
    if let Some(etag) = first.headers.get(ETAG) {
        request = request.header(IF_NONE_MATCH, etag.clone());
        revalidating = true;
    }
    if let Some(modified) = first.headers.get(LAST_MODIFIED) {
        request = request.header(IF_MODIFIED_SINCE, modified.clone());
        revalidating = true;
    }
    let statuses: &[u16] = if revalidating { &[200, 304] } else { &[200] };
    let second = agent.send(label, request, statuses).await.map_err(|_| Recorded)?;
    if second.status.as_u16() == 200 {
        check_icon_md5(agent, uuid, &second.body, wanted_md5)?;
    }
    Ok(())
}

fn check_icon_md5(agent: &Agent, uuid: &str, body: &[u8], wanted: [u8; 16]) -> Step {
    let actual = md5::compute(body).0;
    if actual != wanted {
        agent.stats().data_error(format!(
            "GET /api/isu/:uuid/icon: the icon of {uuid} has md5 {}, expected {}",
            hex::encode(actual),
            hex::encode(wanted)
        ));
        return Err(Recorded);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asset_references_are_found_once_each() {
        let html = r#"<link href="/assets/a.css"><script src='/assets/b.js'></script>
            <link href="/assets/a.css"><img src="/logo.svg">"#;
        assert_eq!(asset_references(html), vec!["/assets/a.css", "/assets/b.js"]);
        assert!(asset_references("<p>none</p>").is_empty());
    }

    #[test]
    fn exact_pages_follow_the_initial_data() {
        let data = ExpectedData::load("project").unwrap();
        let isu = &data.isus[0];
        let newest = isu.newest().unwrap().timestamp;
        let query = ConditionQuery {
            end_time: newest,
            start_time: None,
            levels: Level::ALL.to_vec(),
        };
        let page = expected_condition_page(isu, &query);
        assert_eq!(page.len(), CONDITION_PAGE_LIMIT);
        assert!(page.windows(2).all(|pair| pair[0].timestamp > pair[1].timestamp));
        assert!(page[0].timestamp < newest);
        let item = |condition: &SentCondition| ConditionItem {
            jia_isu_uuid: isu.uuid.clone(),
            isu_name: isu.name.clone(),
            timestamp: condition.timestamp,
            is_sitting: condition.is_sitting,
            condition: condition.condition.to_owned(),
            condition_level: condition.level().as_str().to_owned(),
            message: condition.message.to_owned(),
        };
        let items: Vec<ConditionItem> = page.iter().map(|condition| item(condition)).collect();
        assert_eq!(check_exact_condition_page(&items, &query, isu, &data), Ok(()));
        let mut gap = items.clone();
        gap.remove(3);
        let problem = check_exact_condition_page(&gap, &query, isu, &data).unwrap_err();
        assert!(problem.contains("element 3"), "{problem}");
        let short = &items[..5];
        let problem = check_exact_condition_page(short, &query, isu, &data).unwrap_err();
        assert!(problem.contains("missing"), "{problem}");
    }
}
