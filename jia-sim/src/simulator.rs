//! The JIA simulator: `POST /api/activate` and one posting device per activated ISU.
//!
//! ```no_run
//! # async fn example() -> Result<(), jia_sim::StartError> {
//! use jia_sim::{JiaConfig, JiaSimulator};
//! let jia = JiaSimulator::start(JiaConfig { accept_any_uuid: true, ..JiaConfig::default() }).await?;
//! let jia_service_url = jia.url(); // send this in `POST /initialize`
//! // ... register ISUs through the service, then:
//! let sent = jia.sent("0694e4d7-dfce-4aec-b7ca-887ac42cfb8f");
//! jia.shutdown().await;
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Url;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use crate::clock::VirtualClock;
use crate::condition::{character_for_uuid, SentCondition};
use crate::device::{Device, DeviceTiming};
use crate::signin::{self, SignIn};

/// The hosts the official JIA accepts in a `target_base_url`.
pub const OFFICIAL_HOSTS: [&str; 3] = [
    "isucondition-1.t.isucon.dev",
    "isucondition-2.t.isucon.dev",
    "isucondition-3.t.isucon.dev",
];
/// User-Agent of the official devices.
pub const DEVICE_USER_AGENT: &str = "JIA-Members-Client/1.2";
/// The UUID the official bench registers to see JIA's 404 passed through; never activated.
pub const UNKNOWN_ISU_UUID: &str = "9e5c1109-beff-4598-b8f1-658d1994d55f";

/// Which `target_base_url`s the simulator accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UrlPolicy {
    /// Any URL that parses (local clusters post to plain-HTTP loopback addresses).
    #[default]
    AnyUrl,
    /// The official rule: `https`, a host among [`OFFICIAL_HOSTS`], no explicit port.
    Official,
}

impl UrlPolicy {
    /// Why the parsed `url` (written as `raw`) is refused, if it is.
    pub fn refusal(self, raw: &str, url: &Url) -> Option<&'static str> {
        match self {
            UrlPolicy::AnyUrl => None,
            UrlPolicy::Official if url.scheme() != "https" => Some("bad url scheme: scheme must be https"),
            UrlPolicy::Official if !url.host_str().is_some_and(|host| OFFICIAL_HOSTS.contains(&host)) => {
                Some("bad url: hostname must be isucondition-[1-3].t.isucon.dev")
            }
            UrlPolicy::Official if url.port().is_some() || has_explicit_port(raw) => {
                Some("bad port: no port may be given")
            }
            UrlPolicy::Official => None,
        }
    }
}

/// Whether the authority of `raw` names a port, even the scheme's default one that
/// [`Url`] normalises away (`https://host:443`).
fn has_explicit_port(raw: &str) -> bool {
    let after_scheme = raw.split_once("://").map_or(raw, |(_, rest)| rest);
    let authority = after_scheme.split(['/', '?', '#']).next().unwrap_or_default();
    let host_and_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    host_and_port
        .trim_start_matches('[')
        .rsplit_once(']')
        .map_or(host_and_port, |(_, rest)| rest)
        .contains(':')
}

/// How the simulator is built. `Default` is a local, bounded simulator that knows no UUID.
#[derive(Debug, Clone)]
pub struct JiaConfig {
    /// Where to listen (`127.0.0.1:0` picks a free port; see [`JiaHandle::addr`]).
    pub listen: SocketAddr,
    pub url_policy: UrlPolicy,
    /// Known ISUs: UUID → character. Others get 404 unless `accept_any_uuid`.
    pub catalog: HashMap<String, String>,
    /// Accept every UUID, picking its character deterministically from the UUID.
    pub accept_any_uuid: bool,
    /// Pause before answering an activation, while the device already runs (official: 50 ms).
    pub activation_delay: Duration,
    pub timing: DeviceTiming,
    /// The virtual clock of devices (default: 2021-08-08 00:00 JST at start, 30 000×).
    pub clock: VirtualClock,
    /// Devices stop posting this long after the simulator started, whatever happens.
    pub run_for: Duration,
    /// Seed of the devices' random streams (each device also mixes in its UUID).
    pub seed: u64,
    /// Serve the browser sign-in page (`GET /`, `GET /login`) with this signer.
    pub sign_in: Option<SignIn>,
    /// Host name → address overrides for device posts (no DNS needed for device FQDNs).
    pub resolve: Vec<(String, SocketAddr)>,
    /// Devices keep the log of what they sent (what validation reads); off for capacity runs.
    pub keep_sent_log: bool,
    /// Devices post on lean connections of their own (`crate::lean`) where the URL allows.
    pub lean_devices: bool,
    /// Activations of UUIDs starting with this get no device (a client of the measuring
    /// modes posts for them itself).
    pub silent_uuid_prefix: Option<String>,
}

impl Default for JiaConfig {
    fn default() -> Self {
        JiaConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            url_policy: UrlPolicy::AnyUrl,
            catalog: HashMap::new(),
            accept_any_uuid: false,
            activation_delay: Duration::from_millis(50),
            timing: DeviceTiming::default(),
            clock: VirtualClock::default(),
            run_for: Duration::from_secs(300),
            seed: 0x15c0_4d17,
            sign_in: None,
            resolve: Vec::new(),
            keep_sent_log: true,
            lean_devices: false,
            silent_uuid_prefix: None,
        }
    }
}

/// One accepted activation (the first one of its ISU; re-activations are not recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activation {
    pub isu_uuid: String,
    pub target_base_url: String,
    pub character: String,
}

/// Why the simulator cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("binding the JIA simulator to {listen}")]
    Bind { listen: SocketAddr, source: std::io::Error },
    #[error("building the devices' HTTP client")]
    Client(#[source] reqwest::Error),
}

/// Namespace for [`JiaSimulator::start`].
pub struct JiaSimulator;

impl JiaSimulator {
    /// Binds the listener, starts serving and returns the handle. Everything stops when
    /// [`JiaHandle::shutdown`] is called or the last clone of the handle is dropped.
    pub async fn start(config: JiaConfig) -> Result<JiaHandle, StartError> {
        let bind_error = |source| StartError::Bind {
            listen: config.listen,
            source,
        };
        let listener = TcpListener::bind(config.listen).await.map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let stop = CancellationToken::new();
        let mut client = crate::http::client_builder()
            .timeout(config.timing.post_timeout)
            .user_agent(DEVICE_USER_AGENT)
            .no_proxy();
        for (host, addr) in &config.resolve {
            client = client.resolve(host, *addr);
        }
        let client = client.build().map_err(StartError::Client)?;
        let shared = Arc::new(Shared {
            catalog: Mutex::new(config.catalog.clone()),
            devices: Mutex::new(HashMap::new()),
            activations: Mutex::new(Vec::new()),
            repeated_activations: Mutex::new(HashMap::new()),
            asks: Mutex::new(Vec::new()),
            running_devices: Arc::new(AtomicUsize::new(0)),
            error_posts: AtomicUsize::new(0),
            posts: Arc::default(),
            tracker: TaskTracker::new(),
            deadline: Instant::now() + config.run_for,
            stop: stop.clone(),
            client,
            config,
        });
        let mut router = Router::new()
            .route("/api/activate", post(activate))
            .with_state(shared.clone());
        if let Some(sign_in) = &shared.config.sign_in {
            router = router.merge(signin::routes(sign_in.clone()));
        }
        let server_stop = stop.clone();
        shared.tracker.spawn(async move {
            let serving = axum::serve(listener, router).with_graceful_shutdown(server_stop.cancelled_owned());
            if let Err(error) = serving.await {
                tracing::warn!(%error, "jia simulator server stopped");
            }
        });
        Ok(JiaHandle {
            shared,
            addr,
            _stop_on_drop: Arc::new(stop.drop_guard()),
        })
    }
}

/// Cheap-clone handle on a running simulator.
#[derive(Clone)]
pub struct JiaHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    /// Cancels the server and every device when the last clone goes away.
    _stop_on_drop: Arc<DropGuard>,
}

impl JiaHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, the `jia_service_url` to send in `POST /initialize`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The devices' virtual clock.
    pub fn clock(&self) -> VirtualClock {
        self.shared.config.clock
    }

    /// Makes a UUID known (before registering it through the service, as the official bench does).
    pub fn add_isu(&self, isu_uuid: &str, character: &str) {
        self.shared
            .catalog
            .lock()
            .expect("catalog poisoned")
            .insert(isu_uuid.to_owned(), character.to_owned());
    }

    /// Every condition the device of `isu_uuid` sent so far, oldest first (strictly increasing
    /// timestamps). Empty for an ISU that was never activated.
    pub fn sent(&self, isu_uuid: &str) -> Vec<SentCondition> {
        self.with_sent(isu_uuid, <[SentCondition]>::to_vec).unwrap_or_default()
    }

    /// Runs `inspect` on the sent log of `isu_uuid` without copying it; `None` if not activated.
    pub fn with_sent<R>(&self, isu_uuid: &str, inspect: impl FnOnce(&[SentCondition]) -> R) -> Option<R> {
        let log = self
            .shared
            .devices
            .lock()
            .expect("devices poisoned")
            .get(isu_uuid)
            .map(|device| device.log.clone())?;
        let log = log.lock().expect("sent log poisoned");
        Some(inspect(&log))
    }

    /// The condition the device of `isu_uuid` sent with exactly this timestamp.
    pub fn find_sent(&self, isu_uuid: &str, timestamp: i64) -> Option<SentCondition> {
        self.with_sent(isu_uuid, |log| find_in_log(log, timestamp)).flatten()
    }

    /// Total number of conditions sent by all devices.
    pub fn sent_total(&self) -> usize {
        let logs: Vec<_> = self
            .shared
            .devices
            .lock()
            .expect("devices poisoned")
            .values()
            .map(|device| device.log.clone())
            .collect();
        logs.iter()
            .map(|log| log.lock().expect("sent log poisoned").len())
            .sum()
    }

    /// Accepted activations, in order.
    pub fn activations(&self) -> Vec<Activation> {
        self.shared.activations.lock().expect("activations poisoned").clone()
    }

    /// Activation requests for an ISU that was already activated: a service activates each
    /// ISU once per registration request, so anything but 0 means one registration reached
    /// JIA twice, or a user sent it again.
    pub fn repeated_activations(&self) -> usize {
        self.repeated_activations_by_isu().values().sum()
    }

    /// The repeated activation requests per ISU (only ISUs asked for more than once).
    pub fn repeated_activations_by_isu(&self) -> HashMap<String, usize> {
        self.shared
            .repeated_activations
            .lock()
            .expect("repeats poisoned")
            .clone()
    }

    /// Every activation request of the ISUs asked more than once, in order: the ISU, the
    /// target it named, and when it came.
    pub fn asks_of_repeated(&self) -> Vec<(String, String, std::time::Instant)> {
        let repeated = self.repeated_activations_by_isu();
        self.shared
            .asks
            .lock()
            .expect("asks poisoned")
            .iter()
            .filter(|(uuid, _, _)| repeated.contains_key(uuid))
            .map(|(uuid, target, at)| (uuid.clone(), target.clone(), at.into_std()))
            .collect()
    }

    /// Number of device tasks currently running.
    pub fn running_devices(&self) -> usize {
        self.shared.running_devices.load(Ordering::SeqCst)
    }

    /// Repairs the ISU: its later conditions are clean again (a user saw a bad one).
    pub fn repair(&self, isu_uuid: &str) {
        if let Some(device) = self.shared.devices.lock().expect("devices poisoned").get(isu_uuid) {
            device.repair.store(true, Ordering::Relaxed);
        }
    }

    /// Once per `interval` until the simulator stops: posts, for a random activated ISU, a
    /// batch whose conditions each have one character altered and one element surely
    /// invalid (§13.3). The service must reject such batches whole; their timestamps are
    /// never in the sent log, so if one is ever stored, the validator finds an invented
    /// condition. Returns the number of batches posted, readable through [`Self::error_posts`].
    pub fn start_error_poster(&self, interval: Duration) {
        let shared = self.shared.clone();
        let stop = self.shared.stop.clone();
        self.shared.tracker.spawn(async move {
            let mut rng = StdRng::seed_from_u64(shared.config.seed ^ 0xe7707);
            let mut ticker = tokio::time::interval(interval);
            ticker.tick().await;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep_until(shared.deadline) => return,
                    _ = ticker.tick() => {}
                }
                let Some(post) = shared.error_batch(&mut rng) else {
                    continue;
                };
                shared.error_posts.fetch_add(1, Ordering::Relaxed);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = post => {}
                }
            }
        });
    }

    /// Malformed batches posted so far.
    pub fn error_posts(&self) -> usize {
        self.shared.error_posts.load(Ordering::Relaxed)
    }

    /// The devices' posts so far: see [`crate::device::PostCounts::snapshot`].
    pub fn device_posts(&self) -> [u64; 5] {
        self.shared.posts.snapshot()
    }

    /// The devices' post latencies (µs) since the last call.
    pub fn take_device_latencies(&self) -> Option<hdrhistogram::Histogram<u64>> {
        self.shared.posts.take_latencies()
    }

    /// Stops the server and every device, and waits until they have stopped.
    /// The sent logs stay readable afterwards.
    pub async fn shutdown(&self) {
        self.shared.stop.cancel();
        self.shared.tracker.close();
        self.shared.tracker.wait().await;
    }
}

/// State shared by the handler, the devices and the handle. std `Mutex`es are fine: no lock
/// is held across an `.await`, and each critical section is a map lookup or a vector append.
struct Shared {
    config: JiaConfig,
    catalog: Mutex<HashMap<String, String>>,
    /// Per activated ISU: the sent log (its own lock, so devices do not contend), the device's
    /// repair flag and where it posts.
    devices: Mutex<HashMap<String, DeviceEntry>>,
    activations: Mutex<Vec<Activation>>,
    /// Per ISU, activation requests after its first (answered like the first one).
    repeated_activations: Mutex<HashMap<String, usize>>,
    /// Every activation request that passed the checks: the ISU, its target, and when.
    asks: Mutex<Vec<(String, String, Instant)>>,
    running_devices: Arc<AtomicUsize>,
    error_posts: AtomicUsize,
    /// Counts of the devices' posts (the malformed batches are counted apart).
    posts: Arc<crate::device::PostCounts>,
    tracker: TaskTracker,
    deadline: Instant,
    stop: CancellationToken,
    client: reqwest::Client,
}

#[derive(Clone)]
struct DeviceEntry {
    log: Arc<Mutex<Vec<SentCondition>>>,
    repair: Arc<AtomicBool>,
    post_url: Url,
}

#[derive(Deserialize)]
struct ActivateRequest {
    target_base_url: String,
    isu_uuid: String,
}

#[derive(Serialize)]
struct ActivateResponse {
    character: String,
}

async fn activate(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<ActivateRequest>(&body) else {
        return (StatusCode::BAD_REQUEST, "bad request body").into_response();
    };
    let Ok(target_base_url) = Url::parse(&request.target_base_url) else {
        return (StatusCode::BAD_REQUEST, "bad url").into_response();
    };
    let character = match shared.character_of(&request.isu_uuid) {
        Some(character) => character,
        None => return (StatusCode::NOT_FOUND, "bad isu_uuid").into_response(),
    };
    if let Err(refusal) = shared.start_device_once(
        &request.isu_uuid,
        &request.target_base_url,
        &target_base_url,
        &character,
    ) {
        return (StatusCode::BAD_REQUEST, refusal).into_response();
    }
    tokio::time::sleep(shared.config.activation_delay).await;
    (StatusCode::ACCEPTED, Json(ActivateResponse { character })).into_response()
}

impl Shared {
    /// A malformed batch for a random activated ISU, as a request ready to send.
    fn error_batch(&self, rng: &mut StdRng) -> Option<impl std::future::Future<Output = ()>> {
        let (post_url, after) = {
            let devices = self.devices.lock().expect("devices poisoned");
            if devices.is_empty() {
                return None;
            }
            let device = devices.values().nth(rng.gen_range(0..devices.len()))?.clone();
            let after = device
                .log
                .lock()
                .expect("sent log poisoned")
                .last()
                .map(|c| c.timestamp);
            (device.post_url, after.unwrap_or_else(|| self.config.clock.now()))
        };
        let batch = malformed_batch(rng, after);
        let request = self.client.post(post_url).json(&batch).send();
        Some(async move {
            let _ignored = request.await;
        })
    }

    /// The catalog's character; else, when any UUID is accepted, one derived from the UUID,
    /// except for the official unknown UUID (kept unknown unless put in the catalog).
    fn character_of(&self, isu_uuid: &str) -> Option<String> {
        if let Some(character) = self.catalog.lock().expect("catalog poisoned").get(isu_uuid) {
            return Some(character.clone());
        }
        (self.config.accept_any_uuid && isu_uuid != UNKNOWN_ISU_UUID).then(|| character_for_uuid(isu_uuid).to_owned())
    }

    /// Starts the device of `isu_uuid` unless it already runs (the first URL stays in force).
    fn start_device_once(
        &self,
        isu_uuid: &str,
        raw_target_base_url: &str,
        target_base_url: &Url,
        character: &str,
    ) -> Result<(), &'static str> {
        let mut devices = self.devices.lock().expect("devices poisoned");
        self.asks.lock().expect("asks poisoned").push((
            isu_uuid.to_owned(),
            raw_target_base_url.to_owned(),
            Instant::now(),
        ));
        if devices.contains_key(isu_uuid) {
            *self
                .repeated_activations
                .lock()
                .expect("repeats poisoned")
                .entry(isu_uuid.to_owned())
                .or_default() += 1;
            return Ok(());
        }
        if let Some(refusal) = self.config.url_policy.refusal(raw_target_base_url, target_base_url) {
            return Err(refusal);
        }
        let log = Arc::new(Mutex::new(Vec::new()));
        let repair = Arc::new(AtomicBool::new(false));
        let post_url = condition_url(target_base_url, isu_uuid);
        devices.insert(
            isu_uuid.to_owned(),
            DeviceEntry {
                log: log.clone(),
                repair: repair.clone(),
                post_url: post_url.clone(),
            },
        );
        drop(devices);
        self.activations.lock().expect("activations poisoned").push(Activation {
            isu_uuid: isu_uuid.to_owned(),
            target_base_url: target_base_url.to_string(),
            character: character.to_owned(),
        });
        let silent = self.config.silent_uuid_prefix.as_deref();
        if silent.is_some_and(|prefix| isu_uuid.starts_with(prefix)) {
            return Ok(());
        }
        let lean = self
            .config
            .lean_devices
            .then(|| crate::lean::LeanConnection::for_url(&post_url, &self.config.resolve, DEVICE_USER_AGENT))
            .flatten();
        let device = Device {
            post_url,
            clock: self.config.clock,
            timing: self.config.timing,
            rng: StdRng::seed_from_u64(self.config.seed ^ crate::condition::stable_hash(isu_uuid)),
            log,
            client: self.client.clone(),
            stop: self.stop.clone(),
            deadline: self.deadline,
            running: self.running_devices.clone(),
            posts: self.posts.clone(),
            keep_log: self.config.keep_sent_log,
            lean,
            repair,
        };
        self.tracker.spawn(device.run());
        Ok(())
    }
}

/// The condition with exactly `timestamp` in a log sorted by timestamp. Reads mostly ask for
/// recent conditions (trend, newest pages), so the recent tail is searched first: its cache
/// lines are warm, while a search over the whole log would miss the cache at every step.
fn find_in_log(log: &[SentCondition], timestamp: i64) -> Option<SentCondition> {
    const RECENT: usize = 64;
    let recent_start = log.len().saturating_sub(RECENT);
    let slice = match log.get(recent_start) {
        Some(first_recent) if timestamp >= first_recent.timestamp => &log[recent_start..],
        _ => &log[..recent_start],
    };
    slice
        .binary_search_by_key(&timestamp, |condition| condition.timestamp)
        .ok()
        .map(|index| slice[index])
}

/// Conditions a few (odd) seconds after `after`, each with one character of its condition
/// string altered, and the middle one surely invalid.
fn malformed_batch(rng: &mut StdRng, after: i64) -> Vec<serde_json::Value> {
    const LENGTH: usize = 5;
    (0..LENGTH)
        .map(|index| {
            let valid = crate::condition::condition_string(rng.gen(), rng.gen(), rng.gen());
            let mut condition: Vec<u8> = valid.as_bytes().to_vec();
            let at = rng.gen_range(0..condition.len());
            condition[at] = b"xyz=,_"[rng.gen_range(0..6)];
            let mut condition = String::from_utf8(condition).expect("ASCII stays UTF-8");
            if index == LENGTH / 2 {
                condition = valid.replace("false", "flase").replace("true", "ture");
            }
            serde_json::json!({
                "is_sitting": rng.gen::<bool>(),
                "condition": condition,
                "message": "",
                "timestamp": after + 1 + 2 * index as i64,
            })
        })
        .collect()
}

/// `<target_base_url>/api/condition/<uuid>`, joined onto whatever path the base has.
fn condition_url(base: &Url, isu_uuid: &str) -> Url {
    let mut url = base.clone();
    let path = format!("{}/api/condition/{}", base.path().trim_end_matches('/'), isu_uuid);
    url.set_path(&path);
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn official_policy_wants_https_an_official_host_and_no_port() {
        let check = |url: &str| UrlPolicy::Official.refusal(url, &Url::parse(url).unwrap()).is_none();
        assert!(check("https://isucondition-1.t.isucon.dev"));
        assert!(check("https://isucondition-3.t.isucon.dev/"));
        assert!(!check("http://isucondition-1.t.isucon.dev"));
        assert!(!check("https://isucondition-4.t.isucon.dev"));
        assert!(!check("https://isucondition-2.t.isucon.dev:443"));
        assert!(!check("https://127.0.0.3"));
        assert!(!check("https://user@isucondition-2.t.isucon.dev:8443/x"));
        let local = "http://127.0.0.3:8080";
        assert!(UrlPolicy::AnyUrl.refusal(local, &Url::parse(local).unwrap()).is_none());
    }

    #[test]
    fn conditions_are_found_in_the_recent_tail_and_before_it() {
        let log: Vec<SentCondition> = (0..1000)
            .map(|index| SentCondition {
                is_sitting: index % 2 == 0,
                condition: "is_dirty=false,is_overweight=false,is_broken=false",
                message: "",
                timestamp: 100 + 60 * index,
            })
            .collect();
        for index in [0, 1, 500, 935, 936, 937, 999] {
            let timestamp = 100 + 60 * index;
            assert_eq!(find_in_log(&log, timestamp).map(|c| c.timestamp), Some(timestamp));
        }
        for missing in [0, 99, 101, 100 + 60 * 936 - 1, 100 + 60 * 999 + 1] {
            assert_eq!(find_in_log(&log, missing), None, "{missing}");
        }
        assert_eq!(find_in_log(&[], 5), None);
        assert_eq!(find_in_log(&log[..10], 100 + 60 * 3).map(|c| c.timestamp), Some(280));
    }

    #[test]
    fn malformed_batches_always_hold_an_invalid_condition() {
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..1000 {
            let batch = malformed_batch(&mut rng, 100);
            let invalid = batch
                .iter()
                .filter(|c| !crate::condition::is_valid_condition_string(c["condition"].as_str().unwrap()))
                .count();
            assert!(invalid >= 1);
            assert!(batch.iter().all(|c| c["timestamp"].as_i64().unwrap() > 100));
        }
    }

    #[test]
    fn condition_urls_join_the_base_path() {
        let url = |base: &str| condition_url(&Url::parse(base).unwrap(), "abc").to_string();
        assert_eq!(url("http://127.0.0.3:8080"), "http://127.0.0.3:8080/api/condition/abc");
        assert_eq!(url("http://127.0.0.3:8080/"), "http://127.0.0.3:8080/api/condition/abc");
        assert_eq!(
            url("https://h.example/prefix/"),
            "https://h.example/prefix/api/condition/abc"
        );
    }
}
