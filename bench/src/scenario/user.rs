//! One signed-in bench user: signs up, registers ISUs, then reads and verifies in a loop.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::header::{AUTHORIZATION, SET_COOKIE};
use reqwest::multipart::{Form, Part};
use reqwest::Method;

use super::api::{Agent, ConditionItem, GraphPoint, Isu, IsuListItem, Me};
use super::front_end::FrontEndFile;
use super::stats::{GraphGrade, Tag};
use super::validate::{
    check_condition_page, check_graph, check_isu, check_isu_list, check_remembered, ConditionQuery, ExpectedIsu,
    Window, CONDITION_PAGE_LIMIT,
};
use super::RunContext;
use crate::model::{Level, CHARACTERS};
use jia_sim::clock::jst_day_start;

/// A condition once returned must reappear within this much real time (§13.5).
const CONSISTENCY_GRACE: Duration = Duration::from_secs(1);
/// Timestamps remembered per ISU for the consistency check.
const REMEMBERED_PER_ISU: usize = 100;
/// Condition pages read per ISU visit before moving on.
const MAX_PAGES_PER_VISIT: usize = 5;
/// Attempts of `POST /api/isu` (retried only after a timeout).
const REGISTRATION_ATTEMPTS: usize = 3;
/// One ISU in this many is registered without an image (default icon).
const WITHOUT_IMAGE_EVERY: usize = 5;
/// Past days' graphs one visit reads at most (the rest wait for the next visit).
const MAX_PAST_GRAPHS_PER_VISIT: usize = 7;
/// Pause between two loop iterations of a user.
const LOOP_PAUSE: Duration = Duration::from_millis(10);
const DAY: i64 = 86_400;

/// An ISU this user registered, and what the user has read of it.
struct UserIsu {
    expected: ExpectedIsu,
    /// Virtual time just before registration.
    registered_at: i64,
    /// Newest condition timestamp read through the condition list.
    last_read: i64,
    /// Newest bad (warning/critical) condition seen; a newer one makes the user repair the ISU.
    last_bad_read: i64,
    /// `latest_isu_condition` of the last ISU list.
    latest_listed: i64,
    /// Days (JST midnights) before this one have complete graphs (§13.6 "completion").
    complete_before: i64,
    /// Timestamp → real time it was first returned (condition list or graph).
    remembered: BTreeMap<i64, Instant>,
    /// Virtual days whose graph was already scored.
    scored_days: HashSet<i64>,
}

impl UserIsu {
    fn remember(&mut self, timestamps: impl IntoIterator<Item = i64>, read_at: Instant) {
        for timestamp in timestamps {
            self.remembered.entry(timestamp).or_insert(read_at);
        }
        while self.remembered.len() > REMEMBERED_PER_ISU {
            self.remembered.pop_first();
        }
    }
}

pub(super) struct User {
    ctx: Arc<RunContext>,
    agent: Agent,
    index: usize,
    jia_user_id: String,
    isus: Vec<UserIsu>,
    rng: StdRng,
    /// Signing in again failed: the user has no session and stops.
    signed_out: bool,
}

/// Runs one user until the caller drops the future (at the deadline) or the run has failed.
pub(super) async fn run_user(ctx: Arc<RunContext>, index: usize) {
    let agent = match Agent::new(&ctx.target, ctx.request_timeout, ctx.stats.clone()) {
        Ok(agent) => agent,
        Err(error) => {
            return ctx
                .stats
                .data_error(format!("user {index}: building the HTTP client: {error}"))
        }
    };
    let mut rng = StdRng::from_entropy();
    let suffix: String = (0..6)
        .map(|_| rng.sample(rand::distributions::Alphanumeric) as char)
        .collect();
    let jia_user_id = format!("bench{index:03}{}", suffix.to_lowercase());
    let isu_count = rng.gen_range(1..=ctx.max_isus_per_user);
    let mut user = User {
        ctx,
        agent,
        index,
        jia_user_id,
        isus: Vec::new(),
        rng,
        signed_out: false,
    };
    // A browser's first visit: the top page, whose trend request nobody waits for.
    user.top_page().await;
    let trend = user.agent.request(Method::GET, "/api/trend");
    let _ignored = user.agent.send("GET /api/trend", trend, &[200]).await;
    if !user.sign_in().await {
        return;
    }
    for number in 0..isu_count {
        user.register_isu(number).await;
    }
    if user.isus.is_empty() {
        return;
    }
    let ready = super::prepare::ErrorCheckUser {
        jia_user_id: user.jia_user_id.clone(),
        isu_uuids: user.isus.iter().map(|isu| isu.expected.uuid.clone()).collect(),
    };
    user.ctx.ready_users.lock().expect("ready users poisoned").push(ready);
    let mut which = 0;
    while !user.ctx.over() && !user.signed_out {
        let started = Instant::now();
        user.visit(which).await;
        which = (which + 1) % user.isus.len();
        user.ctx.offer_viewer();
        tokio::time::sleep_until((started + LOOP_PAUSE).into()).await;
    }
}

impl User {
    /// The three steps of one ISU (§13.4), each after the ISU list and the ISU's page, each
    /// possibly followed by signing out and in again.
    async fn visit(&mut self, which: usize) {
        for step in 0..3 {
            if self.ctx.over() {
                return;
            }
            let Some(items) = self.check_isu_list().await else {
                return;
            };
            let uuid = self.isus[which].expected.uuid.clone();
            if let Some(latest) = items
                .iter()
                .find(|item| item.jia_isu_uuid == uuid)
                .and_then(|item| item.latest_isu_condition.as_ref())
            {
                self.isus[which].latest_listed = latest.timestamp;
            }
            let Some(read_back) = self.get_isu(&uuid).await else {
                return;
            };
            if self.problem(check_isu(&read_back, &self.isus[which].expected)) {
                return;
            }
            self.check_icon(&uuid, None).await;
            match step {
                0 => {
                    if self.isus[which].latest_listed <= self.isus[which].last_read {
                        return;
                    }
                    self.read_conditions(which).await;
                }
                1 => self.read_bad_conditions(which).await,
                _ => self.read_graphs(which).await,
            }
            if self.rng.gen_ratio(1, 5) && !self.sign_out_and_in().await {
                // Without a session every later request would fail again: like the official
                // bench's user, this one ends (its failure is already counted).
                self.signed_out = true;
                return;
            }
        }
    }

    /// `GET /` as `text/html`.
    async fn top_page(&self) -> bool {
        let request = self.agent.request(Method::GET, "/");
        let Ok(reply) = self.agent.send("GET /", request, &[200]).await else {
            return false;
        };
        self.agent.count_front_end(FrontEndFile::Page, &reply);
        if !reply.content_type.starts_with("text/html") {
            self.ctx.stats.error(
                super::stats::ErrorKind::ContentType,
                format!("GET /: content-type {:?}, expected text/html", reply.content_type),
            );
            return false;
        }
        true
    }

    /// Signs out (200, or 401 if the session was already gone), checks the session is gone,
    /// loads the top page and signs in again.
    async fn sign_out_and_in(&mut self) -> bool {
        let request = self.agent.request(Method::POST, "/api/signout");
        if self
            .agent
            .send("POST /api/signout", request, &[200, 401])
            .await
            .is_err()
        {
            return false;
        }
        self.ctx.stats.add(Tag::SignOut);
        let request = self.agent.request(Method::GET, "/api/user/me");
        let Ok(reply) = self.agent.send("GET /api/user/me", request, &[401]).await else {
            return false;
        };
        if !self
            .agent
            .expect_text("GET /api/user/me", &reply, "you are not signed in")
        {
            return false;
        }
        self.top_page().await && self.sign_in().await
    }

    fn problem(&self, result: Result<(), String>) -> bool {
        match result {
            Ok(()) => false,
            Err(problem) => {
                self.ctx.stats.data_error(problem);
                true
            }
        }
    }

    /// `POST /api/auth` with the bare JWT (no `Bearer`), then `/api/user/me` and the empty ISU list.
    async fn sign_in(&mut self) -> bool {
        let token = self.ctx.signer.sign(&self.jia_user_id);
        let request = self
            .agent
            .request(Method::POST, "/api/auth")
            .header(AUTHORIZATION, token);
        let Ok(reply) = self.agent.send("POST /api/auth", request, &[200]).await else {
            return false;
        };
        if !reply.headers.contains_key(SET_COOKIE) {
            self.ctx.stats.data_error("POST /api/auth: no Set-Cookie".to_owned());
            return false;
        }
        let request = self.agent.request(Method::GET, "/api/user/me");
        let Some(me) = self.agent.json::<Me>("GET /api/user/me", request, 200).await else {
            return false;
        };
        if me.jia_user_id != self.jia_user_id {
            let problem = format!(
                "GET /api/user/me: {:?}, expected {:?}",
                me.jia_user_id, self.jia_user_id
            );
            self.ctx.stats.data_error(problem);
            return false;
        }
        self.check_isu_list().await;
        true
    }

    /// Registers one ISU (known to JIA first), then reads it back and checks its icon.
    async fn register_isu(&mut self, number: usize) {
        let uuid = uuid::Uuid::new_v4().to_string();
        let character = CHARACTERS[self.rng.gen_range(0..CHARACTERS.len())];
        let name = format!("ベンチいす{}-{number}", self.index);
        self.ctx.jia.add_isu(&uuid, character);
        let image = (number % WITHOUT_IMAGE_EVERY != WITHOUT_IMAGE_EVERY - 1).then(|| fake_jpeg(&mut self.rng));
        let mut expected = ExpectedIsu {
            id: 0,
            uuid: uuid.clone(),
            name: name.clone(),
            character: character.to_owned(),
        };
        let registered_at = self.ctx.jia.clock().now();

        let mut created: Option<Isu> = None;
        let mut timed_out = false;
        for attempt in 0..REGISTRATION_ATTEMPTS {
            let mut form = Form::new()
                .text("jia_isu_uuid", uuid.clone())
                .text("isu_name", name.clone());
            if let Some(image) = &image {
                let part = Part::bytes(image.clone())
                    .file_name("image.jpeg")
                    .mime_str("image/jpeg");
                form = form.part("image", part.expect("image/jpeg is a valid MIME type"));
            }
            let request = self.agent.request(Method::POST, "/api/isu").multipart(form);
            if attempt > 0 {
                *self
                    .ctx
                    .resent_registrations
                    .lock()
                    .expect("resent poisoned")
                    .entry(uuid.clone())
                    .or_default() += 1;
            }
            // A retry may find the first attempt committed: 409 then means success.
            let expected_statuses: &[u16] = if attempt == 0 { &[201] } else { &[201, 409] };
            match self.agent.send("POST /api/isu", request, expected_statuses).await {
                Ok(reply) if reply.status.as_u16() == 201 => {
                    created = self.agent.decode("POST /api/isu", &reply);
                    break;
                }
                Ok(_conflict) => {
                    created = self.get_isu(&uuid).await;
                    break;
                }
                Err(super::api::Failure::Timeout) => timed_out = true,
                Err(super::api::Failure::Error) => return,
            }
        }
        if created.is_none() && timed_out {
            // The last attempt may have been committed after all; the ISU list must then show it.
            created = self.find_isu(&uuid).await;
        }
        let Some(created) = created else { return };
        if self.problem(check_isu(&created, &expected)) {
            return;
        }
        expected.id = created.id;
        if let Some(read_back) = self.get_isu(&uuid).await {
            self.problem(check_isu(&read_back, &expected));
        }
        self.check_icon(&uuid, image.as_deref()).await;
        let trend_isu = super::validate::TrendIsu {
            uuid,
            character: character.to_owned(),
        };
        self.ctx
            .registered
            .lock()
            .expect("registered poisoned")
            .insert(created.id, trend_isu);
        self.ctx
            .acknowledged
            .lock()
            .expect("acknowledged poisoned")
            .push(shared::protocol::HeldIsu {
                uuid: created.jia_isu_uuid.clone(),
                owner: self.jia_user_id.clone(),
                icon_sha256: image.as_deref().map(|image| {
                    use sha2::Digest as _;
                    hex::encode(sha2::Sha256::digest(image))
                }),
            });
        self.ctx.stats.add(Tag::IsuInit);
        self.isus.push(UserIsu {
            expected,
            registered_at,
            last_read: i64::MIN,
            last_bad_read: i64::MIN,
            latest_listed: i64::MIN,
            complete_before: i64::MIN,
            remembered: BTreeMap::new(),
            scored_days: HashSet::new(),
        });
    }

    async fn get_isu(&self, uuid: &str) -> Option<Isu> {
        let request = self.agent.request(Method::GET, &format!("/api/isu/{uuid}"));
        self.agent.json("GET /api/isu/:uuid", request, 200).await
    }

    /// `GET /api/isu/:uuid` where 404 (never registered) is a legitimate answer.
    async fn find_isu(&self, uuid: &str) -> Option<Isu> {
        let label = "GET /api/isu/:uuid";
        let request = self.agent.request(Method::GET, &format!("/api/isu/{uuid}"));
        let reply = self.agent.send(label, request, &[200, 404]).await.ok()?;
        (reply.status.as_u16() == 200)
            .then(|| self.agent.decode(label, &reply))
            .flatten()
    }

    /// The icon must be the uploaded bytes; the default icon is only checked to be non-empty.
    async fn check_icon(&self, uuid: &str, image: Option<&[u8]>) {
        let request = self.agent.request(Method::GET, &format!("/api/isu/{uuid}/icon"));
        let Ok(reply) = self.agent.send("GET /api/isu/:uuid/icon", request, &[200]).await else {
            return;
        };
        let matches = match image {
            Some(image) => md5::compute(image) == md5::compute(&reply.body),
            None => !reply.body.is_empty(),
        };
        if !matches {
            self.ctx
                .stats
                .data_error(format!("GET /api/isu/{uuid}/icon: not the registered image"));
        }
    }

    /// `GET /api/isu`, checked against this user's registrations; the list if it was right.
    async fn check_isu_list(&self) -> Option<Vec<IsuListItem>> {
        let request = self.agent.request(Method::GET, "/api/isu");
        let items = self
            .agent
            .json::<Vec<IsuListItem>>("GET /api/isu", request, 200)
            .await?;
        let registered: Vec<ExpectedIsu> = self.isus.iter().map(|isu| isu.expected.clone()).collect();
        (!self.problem(check_isu_list(&items, &registered, &self.ctx.jia))).then_some(items)
    }

    /// Pages through the newest conditions until reaching already-read ones (or a short page),
    /// counting the newly read ones per level.
    async fn read_conditions(&mut self, which: usize) {
        let clock = self.ctx.jia.clock();
        let isu = &mut self.isus[which];
        let uuid = isu.expected.uuid.clone();
        let label = "GET /api/condition/:uuid";
        let previously_read = isu.last_read;
        let mut end_time = clock.now();
        for _ in 0..MAX_PAGES_PER_VISIT {
            let query = ConditionQuery {
                end_time,
                start_time: None,
                levels: Level::ALL.to_vec(),
            };
            let requested_at = Instant::now();
            let request = self
                .agent
                .request(Method::GET, &format!("/api/condition/{uuid}"))
                .query(&[
                    ("end_time", end_time.to_string().as_str()),
                    ("condition_level", "info,warning,critical"),
                ]);
            let Some(items) = self.agent.json::<Vec<ConditionItem>>(label, request, 200).await else {
                return;
            };
            let returned: HashSet<i64> = items.iter().map(|item| item.timestamp).collect();
            let checked = check_condition_page(&items, &query, &isu.expected, &self.ctx.jia).and_then(|()| {
                let window = Window::of_condition_page(&items, &query);
                let what = format!("condition list of {uuid}");
                check_remembered(
                    &returned,
                    window,
                    &isu.remembered,
                    requested_at,
                    CONSISTENCY_GRACE,
                    &what,
                )
            });
            if let Err(problem) = checked {
                return self.ctx.stats.data_error(problem);
            }
            for item in items.iter().filter(|item| item.timestamp > previously_read) {
                self.ctx.stats.read(Level::of_condition(&item.condition));
                isu.last_read = isu.last_read.max(item.timestamp);
            }
            isu.remember(returned, Instant::now());
            let Some(oldest) = items.last() else { return };
            if items.len() < CONDITION_PAGE_LIMIT || oldest.timestamp <= previously_read {
                return;
            }
            end_time = oldest.timestamp;
        }
    }

    /// Step 1: the newest warning/critical conditions; a bad one newer than any seen before
    /// makes the user repair the ISU (its later conditions are clean).
    async fn read_bad_conditions(&mut self, which: usize) {
        let query = ConditionQuery {
            end_time: self.ctx.jia.clock().now(),
            start_time: None,
            levels: vec![Level::Warning, Level::Critical],
        };
        let Some(items) = self.condition_page(which, &query).await else {
            return;
        };
        let isu = &mut self.isus[which];
        if let Some(newest) = items.first().filter(|item| item.timestamp > isu.last_bad_read) {
            isu.last_bad_read = newest.timestamp;
            self.ctx.jia.repair(&isu.expected.uuid);
            self.ctx.stats.add(Tag::RepairIsu);
        }
    }

    /// Step 2 (§13.4, §13.6): the graph of the virtual day before today (scored as "today's"),
    /// then earlier days back to the last scored one or the registration day, scoring those
    /// judged complete; then the conditions of one hour of the first graph.
    async fn read_graphs(&mut self, which: usize) {
        let today = jst_day_start(self.ctx.jia.clock().now());
        let first_day = jst_day_start(self.isus[which].registered_at);
        let newest_day = today - DAY;
        if newest_day < first_day {
            return;
        }
        let Some(points) = self.graph(which, newest_day).await else {
            return;
        };
        self.ctx.stats.add(GraphGrade::of(fewest(&points)).today_tag());
        self.note_completion(which, newest_day, &points);
        let hour_with_data = points.iter().rev().find(|point| !point.condition_timestamps.is_empty());
        let window = hour_with_data.map(|point| (point.start_at, point.end_at));

        let mut day = newest_day - DAY;
        let mut fetched = 0;
        while day >= first_day && fetched < MAX_PAST_GRAPHS_PER_VISIT && !self.ctx.over() {
            let isu = &self.isus[which];
            if isu.scored_days.contains(&day) {
                break;
            }
            let Some(points) = self.graph(which, day).await else {
                return;
            };
            fetched += 1;
            self.note_completion(which, day, &points);
            if day < self.isus[which].complete_before {
                self.ctx.stats.add(GraphGrade::of(fewest(&points)).past_tag());
                self.isus[which].scored_days.insert(day);
            }
            day -= DAY;
        }
        if let Some((start_at, end_at)) = window {
            let query = ConditionQuery {
                end_time: end_at,
                start_time: Some(start_at),
                levels: Level::ALL.to_vec(),
            };
            self.condition_page(which, &query).await;
        }
    }

    /// Data in the afternoon of day `G` completes every day before `G`; data in its morning,
    /// every day before `G − 1`.
    fn note_completion(&mut self, which: usize, day: i64, points: &[GraphPoint]) {
        let has_data = |range: std::ops::Range<usize>| points[range].iter().any(|point| point.data.is_some());
        let isu = &mut self.isus[which];
        if points.len() == 24 && has_data(12..24) {
            isu.complete_before = isu.complete_before.max(day);
        } else if points.len() == 24 && has_data(0..12) {
            isu.complete_before = isu.complete_before.max(day - DAY);
        }
    }

    /// One checked page of `GET /api/condition/:uuid` for `query`.
    async fn condition_page(&mut self, which: usize, query: &ConditionQuery) -> Option<Vec<ConditionItem>> {
        let isu = &mut self.isus[which];
        let uuid = isu.expected.uuid.clone();
        let params = query.params();
        let requested_at = Instant::now();
        let request = self
            .agent
            .request(Method::GET, &format!("/api/condition/{uuid}"))
            .query(&params);
        let items = self
            .agent
            .json::<Vec<ConditionItem>>("GET /api/condition/:uuid", request, 200)
            .await?;
        let returned: HashSet<i64> = items.iter().map(|item| item.timestamp).collect();
        let checked = check_condition_page(&items, query, &isu.expected, &self.ctx.jia).and_then(|()| {
            // Remembered conditions of the requested levels must be in the covered window.
            let window = Window::of_condition_page(&items, query);
            let wanted: BTreeMap<i64, Instant> = isu
                .remembered
                .range(window.from..window.to)
                .filter(|(timestamp, _)| {
                    self.ctx
                        .jia
                        .find_sent(&uuid, **timestamp)
                        .is_some_and(|sent| query.levels.contains(&sent.level()))
                })
                .map(|(timestamp, at)| (*timestamp, *at))
                .collect();
            check_remembered(
                &returned,
                window,
                &wanted,
                requested_at,
                CONSISTENCY_GRACE,
                &format!("condition list of {uuid}"),
            )
        });
        if let Err(problem) = checked {
            self.ctx.stats.data_error(problem);
            return None;
        }
        isu.remember(returned, Instant::now());
        Some(items)
    }

    async fn graph(&mut self, which: usize, datetime: i64) -> Option<Vec<GraphPoint>> {
        let isu = &mut self.isus[which];
        let uuid = isu.expected.uuid.clone();
        let requested_at = Instant::now();
        let request = self
            .agent
            .request(Method::GET, &format!("/api/isu/{uuid}/graph"))
            .query(&[("datetime", datetime.to_string())]);
        let points = self
            .agent
            .json::<Vec<GraphPoint>>("GET /api/isu/:uuid/graph", request, 200)
            .await?;
        let returned: HashSet<i64> = points
            .iter()
            .flat_map(|point| point.condition_timestamps.iter().copied())
            .collect();
        let checked = check_graph(&points, datetime, &uuid, &self.ctx.jia).and_then(|counts| {
            let first_hour = datetime.div_euclid(3600) * 3600;
            let window = Window {
                from: first_hour,
                to: first_hour + DAY,
            };
            let what = format!("graph of {uuid}");
            check_remembered(
                &returned,
                window,
                &isu.remembered,
                requested_at,
                CONSISTENCY_GRACE,
                &what,
            )
            .map(|()| counts)
        });
        match checked {
            Ok(_counts) => {
                let mut newest: Vec<i64> = returned.into_iter().collect();
                newest.sort_unstable();
                let keep_from = newest.len().saturating_sub(CONDITION_PAGE_LIMIT);
                isu.remember(newest.split_off(keep_from), Instant::now());
                Some(points)
            }
            Err(problem) => {
                self.ctx.stats.data_error(problem);
                None
            }
        }
    }
}

/// Conditions in the sparsest hour of a graph (what grades it).
fn fewest(points: &[GraphPoint]) -> usize {
    points
        .iter()
        .map(|point| point.condition_timestamps.len())
        .min()
        .unwrap_or_default()
}

/// A small JPEG-looking blob (SOI marker, random bytes, EOI marker); the service stores icons as-is.
fn fake_jpeg(rng: &mut StdRng) -> Vec<u8> {
    let length = rng.gen_range(256..2048);
    let mut bytes = vec![0xff, 0xd8, 0xff, 0xe0];
    bytes.extend((0..length).map(|_| rng.gen::<u8>()));
    bytes.extend([0xff, 0xd9]);
    bytes
}
