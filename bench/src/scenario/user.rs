//! One signed-in bench user: signs up, registers ISUs, then reads and verifies in a loop.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::header::{AUTHORIZATION, SET_COOKIE};
use reqwest::multipart::{Form, Part};
use reqwest::Method;

use super::api::{Agent, ConditionItem, GraphPoint, Isu, IsuListItem, Me, TrendEntry};
use super::stats::{GraphGrade, MAX_ERRORS};
use super::validate::{
    check_condition_page, check_graph, check_isu, check_isu_list, check_remembered, check_trend, ConditionQuery,
    ExpectedIsu, TrendMemory, Window, CONDITION_PAGE_LIMIT,
};
use super::RunContext;
use crate::clock::jst_day_start;
use crate::model::{Level, CHARACTERS};

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
    trend: TrendMemory,
    rng: StdRng,
}

/// Runs one user until the caller drops the future (at the deadline) or the run has failed.
pub(super) async fn run_user(ctx: Arc<RunContext>, index: usize) {
    let agent = match Agent::new(&ctx.target, ctx.request_timeout, ctx.stats.clone()) {
        Ok(agent) => agent,
        Err(error) => {
            return ctx
                .stats
                .error(format!("user {index}: building the HTTP client: {error}"))
        }
    };
    let mut rng = StdRng::from_entropy();
    let suffix: String = (0..6)
        .map(|_| rng.sample(rand::distributions::Alphanumeric) as char)
        .collect();
    let jia_user_id = format!("bench{index:03}{}", suffix.to_lowercase());
    let mut user = User {
        ctx,
        agent,
        index,
        jia_user_id,
        isus: Vec::new(),
        trend: TrendMemory::default(),
        rng,
    };
    if !user.sign_in().await {
        return;
    }
    for number in 0..user.ctx.isus_per_user {
        user.register_isu(number).await;
    }
    let mut round = 0;
    while user.ctx.stats.errors() <= MAX_ERRORS {
        user.check_isu_list().await;
        if !user.isus.is_empty() {
            let which = round % user.isus.len();
            user.read_conditions(which).await;
            user.read_graphs(which).await;
        }
        user.check_trend().await;
        round += 1;
        tokio::time::sleep(LOOP_PAUSE).await;
    }
}

impl User {
    fn problem(&self, result: Result<(), String>) -> bool {
        match result {
            Ok(()) => false,
            Err(problem) => {
                self.ctx.stats.error(problem);
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
            self.ctx.stats.error("POST /api/auth: no Set-Cookie".to_owned());
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
            self.ctx.stats.error(problem);
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
        self.isus.push(UserIsu {
            expected,
            registered_at,
            last_read: i64::MIN,
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
                .error(format!("GET /api/isu/{uuid}/icon: not the registered image"));
        }
    }

    async fn check_isu_list(&self) {
        let request = self.agent.request(Method::GET, "/api/isu");
        let Some(items) = self.agent.json::<Vec<IsuListItem>>("GET /api/isu", request, 200).await else {
            return;
        };
        let registered: Vec<ExpectedIsu> = self.isus.iter().map(|isu| isu.expected.clone()).collect();
        self.problem(check_isu_list(&items, &registered, &self.ctx.jia));
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
                return self.ctx.stats.error(problem);
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

    /// Today's graph (checked only), then yesterday's once (checked and scored).
    async fn read_graphs(&mut self, which: usize) {
        let today = jst_day_start(self.ctx.jia.clock().now());
        self.graph(which, today).await;
        let yesterday = today - DAY;
        let isu = &self.isus[which];
        if yesterday < jst_day_start(isu.registered_at) || isu.scored_days.contains(&yesterday) {
            return;
        }
        if let Some(counts) = self.graph(which, yesterday).await {
            let fewest = counts.iter().copied().min().unwrap_or_default();
            self.ctx.stats.graph(GraphGrade::of(fewest));
            self.isus[which].scored_days.insert(yesterday);
        }
    }

    async fn graph(&mut self, which: usize, datetime: i64) -> Option<[usize; 24]> {
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
            Ok(counts) => {
                let mut newest: Vec<i64> = returned.into_iter().collect();
                newest.sort_unstable();
                let keep_from = newest.len().saturating_sub(CONDITION_PAGE_LIMIT);
                isu.remember(newest.split_off(keep_from), Instant::now());
                Some(counts)
            }
            Err(problem) => {
                self.ctx.stats.error(problem);
                None
            }
        }
    }

    async fn check_trend(&mut self) {
        let request = self.agent.request(Method::GET, "/api/trend");
        let Some(entries) = self.agent.json::<Vec<TrendEntry>>("GET /api/trend", request, 200).await else {
            return;
        };
        let known = self.ctx.registered.lock().expect("registered poisoned");
        let result = check_trend(&entries, &known, &self.ctx.jia, &mut self.trend);
        drop(known);
        self.problem(result);
    }
}

/// A small JPEG-looking blob (SOI marker, random bytes, EOI marker); the service stores icons as-is.
fn fake_jpeg(rng: &mut StdRng) -> Vec<u8> {
    let length = rng.gen_range(256..2048);
    let mut bytes = vec![0xff, 0xd8, 0xff, 0xe0];
    bytes.extend((0..length).map(|_| rng.gen::<u8>()));
    bytes.extend([0xff, 0xd9]);
    bytes
}
