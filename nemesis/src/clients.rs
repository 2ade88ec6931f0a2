//! The clients that record the history, through nginx as a browser and devices would:
//! users sign in, register an ISU every 20 s (some UUIDs another user also tries), read
//! lists, details, conditions, graphs, the trend, sign out and in again; a device posts for
//! every ISU JIA activated; a viewer polls the trend; an observer reads the placement map's version from
//! the leader. Each client keeps its connections alive and never sends a POST twice (no
//! retry: a POST without an answer is recorded as such, indeterminate).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jia_sim::JiaHandle;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use crate::history::{Answer, Call, Op};

/// How long a client waits for an answer (the official bench: 1 s to 10 s by endpoint).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Most ISUs one user registers.
const ISUS_PER_USER: usize = 40;
/// How often a user registers another ISU: registrations all through the run, under
/// every kind of fault.
const REGISTER_EVERY: Duration = Duration::from_secs(20);
/// How often a device posts.
const POST_EVERY: Duration = Duration::from_millis(500);
/// Condition timestamps start here (2021-08-08 00:00 JST), one a minute per ISU.
const FIRST_TIMESTAMP: i64 = 1_628_348_400;
/// Past every condition posted, for the condition reads.
const END_TIME: i64 = 2_000_000_000;
const CONDITIONS: [&str; 4] = [
    "is_dirty=false,is_overweight=false,is_broken=false",
    "is_dirty=true,is_overweight=false,is_broken=false",
    "is_dirty=true,is_overweight=true,is_broken=false",
    "is_dirty=true,is_overweight=true,is_broken=true",
];

/// Where operations are recorded, on one clock.
pub struct Recorder {
    start: Instant,
    next: AtomicU64,
    ops: Mutex<Vec<Op>>,
    pub stop: AtomicBool,
}

impl Recorder {
    pub fn new(start: Instant) -> Arc<Recorder> {
        Arc::new(Recorder {
            start,
            next: AtomicU64::new(0),
            ops: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        })
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Sends `request`, records it as `call` of `process` with what `read` makes of a 2xx
    /// body; returns the status and body.
    pub async fn send(
        &self,
        process: u64,
        call: Call,
        request: reqwest::RequestBuilder,
        read: impl FnOnce(&str) -> Answer,
    ) -> (Option<u16>, String) {
        let invoked = self.now();
        let sent = async {
            let response = request.send().await?;
            let status = response.status().as_u16();
            Ok::<_, reqwest::Error>((status, response.text().await?))
        };
        let (status, body, error) = match sent.await {
            Ok((status, body)) => (Some(status), body, None),
            Err(error) => (None, String::new(), Some(error.to_string())),
        };
        let answer = match status {
            Some(200..=299) => read(&body),
            _ => Answer::Nothing,
        };
        self.record(process, call, invoked, (status, error), answer);
        (status, body)
    }

    /// Records `call` of `process`, invoked at `invoked` and completed now, with its
    /// status (none: no answer, and the error) and what its answer said.
    fn record(&self, process: u64, call: Call, invoked: u64, outcome: (Option<u16>, Option<String>), answer: Answer) {
        let op = Op {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            process,
            call,
            invoked,
            completed: self.now(),
            status: outcome.0,
            answer,
            error: outcome.1,
        };
        self.ops.lock().expect("ops poisoned").push(op);
    }

    /// The operations so far.
    pub fn ops(&self) -> Vec<Op> {
        let mut ops = self.ops.lock().expect("ops poisoned").clone();
        ops.sort_by_key(|op| op.id);
        ops
    }
}

/// One client: its own connections and cookie jar, no proxy, no retry.
pub fn client() -> reqwest::Client {
    jia_sim::http::client_builder()
        .cookie_store(true)
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .expect("building an HTTP client")
}

/// The UUIDs users have tried, shared so that users sometimes try another's.
pub type Tried = Arc<Mutex<Vec<String>>>;

pub fn user_name(index: u64) -> String {
    format!("nemesis{index:03}")
}

/// Signs `user` in on `client` (a JWT signed with the project's key).
pub async fn sign_in(recorder: &Recorder, client: &reqwest::Client, base: &str, process: u64, user: &str) -> bool {
    let token = jia_sim::jwt::JwtSigner::project_default().sign(user);
    let request = client.post(format!("{base}/api/auth")).bearer_auth(token);
    let call = Call::SignIn { user: user.to_owned() };
    recorder.send(process, call, request, |_| Answer::Nothing).await.0 == Some(200)
}

/// A user until the recorder stops: process `index`.
pub async fn user(recorder: Arc<Recorder>, base: String, index: u64, seed: u64, tried: Tried) {
    let client = client();
    let user = user_name(index);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (index << 32));
    let mut mine: Vec<String> = Vec::new();
    let mut signed_in = sign_in(&recorder, &client, &base, index, &user).await;
    // The first registration at once, the next ones REGISTER_EVERY apart.
    let mut registered_at: Option<Instant> = None;
    while !recorder.stopped() {
        let pick = rng.gen_range(0..100);
        let uuid = (!mine.is_empty()).then(|| mine[rng.gen_range(0..mine.len())].clone());
        match (pick, uuid) {
            _ if !signed_in => {
                signed_in = sign_in(&recorder, &client, &base, index, &user).await;
            }
            (5..=24, _)
                if mine.len() < ISUS_PER_USER && registered_at.is_none_or(|at| at.elapsed() >= REGISTER_EVERY) =>
            {
                registered_at = Some(Instant::now());
                let uuid = choose_uuid(&mut rng, &tried);
                if !mine.contains(&uuid) {
                    mine.push(uuid.clone());
                }
                let form = reqwest::multipart::Form::new()
                    .text("jia_isu_uuid", uuid.clone())
                    .text("isu_name", format!("nemesis {index}"));
                let request = client.post(format!("{base}/api/isu")).multipart(form);
                let call = Call::Register {
                    user: user.clone(),
                    uuid,
                };
                recorder.send(index, call, request, |_| Answer::Nothing).await;
            }
            (25..=39, Some(uuid)) => {
                let request = client.get(format!("{base}/api/isu/{uuid}"));
                let call = Call::Detail {
                    user: user.clone(),
                    uuid,
                };
                recorder.send(index, call, request, |_| Answer::Nothing).await;
            }
            (40..=54, _) => {
                let request = client.get(format!("{base}/api/isu"));
                let call = Call::List { user: user.clone() };
                recorder.send(index, call, request, listed_uuids).await;
            }
            (55..=69, Some(uuid)) => {
                let request = client.get(format!(
                    "{base}/api/condition/{uuid}?end_time={END_TIME}&condition_level=info,warning,critical"
                ));
                let call = Call::Conditions {
                    user: user.clone(),
                    uuid,
                    graph: false,
                };
                recorder.send(index, call, request, timestamps).await;
            }
            (70..=79, Some(uuid)) => {
                let request = client.get(format!("{base}/api/isu/{uuid}/graph?datetime={FIRST_TIMESTAMP}"));
                let call = Call::Conditions {
                    user: user.clone(),
                    uuid,
                    graph: true,
                };
                recorder.send(index, call, request, |_| Answer::Nothing).await;
            }
            (80..=89, _) => {
                let request = client.get(format!("{base}/api/trend"));
                recorder.send(index, Call::Trend, request, trend).await;
            }
            (90..=94, _) => {
                let request = client.get(format!("{base}/api/user/me"));
                let call = Call::Me { user: user.clone() };
                recorder.send(index, call, request, |_| Answer::Nothing).await;
            }
            (95..=99, _) => {
                let request = client.post(format!("{base}/api/signout"));
                let call = Call::SignOut { user: user.clone() };
                let (status, _) = recorder.send(index, call, request, |_| Answer::Nothing).await;
                signed_in = status != Some(200);
            }
            _ => continue,
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(20..120))).await;
    }
}

/// A fresh UUID, or (one time in four) one another user has tried.
fn choose_uuid(rng: &mut ChaCha8Rng, tried: &Tried) -> String {
    let mut tried = tried.lock().expect("tried poisoned");
    if !tried.is_empty() && rng.gen_range(0..4) == 0 {
        return tried[rng.gen_range(0..tried.len())].clone();
    }
    let uuid = uuid::Uuid::from_u128(rng.gen()).to_string();
    tried.push(uuid.clone());
    uuid
}

fn listed_uuids(body: &str) -> Answer {
    let listed: Vec<Value> = serde_json::from_str(body).unwrap_or_default();
    Answer::Uuids {
        uuids: listed
            .iter()
            .filter_map(|isu| isu["jia_isu_uuid"].as_str().map(str::to_owned))
            .collect(),
    }
}

pub fn timestamps(body: &str) -> Answer {
    let conditions: Vec<Value> = serde_json::from_str(body).unwrap_or_default();
    Answer::Timestamps {
        timestamps: conditions
            .iter()
            .filter_map(|condition| condition["timestamp"].as_i64())
            .collect(),
    }
}

fn trend(body: &str) -> Answer {
    let characters: Vec<Value> = serde_json::from_str(body).unwrap_or_default();
    let latest = characters
        .iter()
        .flat_map(|character| ["info", "warning", "critical"].map(|level| character[level].clone()))
        .filter_map(|list| list.as_array().cloned())
        .flatten()
        .filter_map(|entry| Some((entry["isu_id"].as_i64()?, entry["timestamp"].as_i64()?)))
        .collect();
    Answer::Trend { latest }
}

/// An anonymous viewer polling the trend every 300 ms: process `process`.
pub async fn viewer(recorder: Arc<Recorder>, base: String, process: u64) {
    let client = client();
    while !recorder.stopped() {
        let request = client.get(format!("{base}/api/trend"));
        recorder.send(process, Call::Trend, request, trend).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Starts a device for every ISU JIA activates, each posting 1 to 3 conditions every 500 ms
/// to the device URL JIA was given; processes from `first_process` on.
pub async fn devices(recorder: Arc<Recorder>, jia: JiaHandle, first_process: u64, seed: u64) {
    let mut started: HashSet<String> = HashSet::new();
    let mut devices = Vec::new();
    while !recorder.stopped() {
        for activation in jia.activations() {
            if started.insert(activation.isu_uuid.clone()) {
                let process = first_process + started.len() as u64;
                let url = format!(
                    "{}/api/condition/{}",
                    activation.target_base_url.trim_end_matches('/'),
                    activation.isu_uuid
                );
                let device = device(recorder.clone(), url, activation.isu_uuid, process, seed ^ process);
                devices.push(tokio::spawn(device));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for device in devices {
        let _ = device.await;
    }
}

async fn device(recorder: Arc<Recorder>, url: String, uuid: String, process: u64, seed: u64) {
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut next = FIRST_TIMESTAMP;
    while !recorder.stopped() {
        let count = rng.gen_range(1..=3);
        let batch: Vec<Value> = (0..count)
            .map(|offset| {
                serde_json::json!({
                    "is_sitting": rng.gen_bool(0.5),
                    "condition": CONDITIONS[rng.gen_range(0..CONDITIONS.len())],
                    "message": "nemesis",
                    "timestamp": next + 60 * offset,
                })
            })
            .collect();
        let timestamps: Vec<i64> = (0..count).map(|offset| next + 60 * offset).collect();
        next += 60 * count;
        let request = client
            .post(&url)
            .header(reqwest::header::USER_AGENT, jia_sim::DEVICE_USER_AGENT)
            .json(&batch);
        let call = Call::Post {
            uuid: uuid.clone(),
            timestamps,
        };
        recorder.send(process, call, request, |_| Answer::Nothing).await;
        tokio::time::sleep(POST_EVERY).await;
    }
}

/// After the final heal: each user signs in on a fresh client (process `first_process` +
/// its index) and pages through every condition of every ISU it tried.
pub async fn final_reads(
    recorder: Arc<Recorder>,
    base: String,
    users: u64,
    tried_by: Vec<Vec<String>>,
    first_process: u64,
) {
    for index in 1..=users {
        let client = client();
        let user = user_name(index);
        let process = first_process + index;
        sign_in(&recorder, &client, &base, process, &user).await;
        for uuid in tried_by[index as usize - 1].iter() {
            read_all(&recorder, &client, &base, process, &user, uuid).await;
        }
    }
}

/// Pages `GET /api/condition` newest first until an empty page: one op with every timestamp.
async fn read_all(recorder: &Recorder, client: &reqwest::Client, base: &str, process: u64, user: &str, uuid: &str) {
    let invoked = recorder.now();
    let mut end = END_TIME;
    let mut read = Vec::new();
    let mut outcome = (Some(200), None);
    loop {
        let url = format!("{base}/api/condition/{uuid}?end_time={end}&condition_level=info,warning,critical");
        let page = match client.get(url).send().await {
            Ok(response) if response.status() == 200 => response.text().await.map(|body| timestamps(&body)),
            Ok(response) => {
                outcome = (Some(response.status().as_u16()), None);
                break;
            }
            Err(error) => {
                outcome = (None, Some(error.to_string()));
                break;
            }
        };
        match page {
            Ok(Answer::Timestamps { timestamps }) if !timestamps.is_empty() => {
                end = *timestamps.iter().min().expect("not empty");
                read.extend(timestamps);
            }
            Ok(_) => break,
            Err(error) => {
                outcome = (None, Some(error.to_string()));
                break;
            }
        }
    }
    let call = Call::FinalConditions {
        user: user.to_owned(),
        uuid: uuid.to_owned(),
    };
    recorder.record(process, call, invoked, outcome, Answer::Timestamps { timestamps: read });
}
