//! Scale mode (`bench --scale`): one bounded step measuring a lone coordinator at a scale
//! of ISUs and cells no machine runs real workers at. It starts the cell simulator
//! ([`crate::cellsim`]), a coordinator (its release binary) told those cells and
//! `--dataset generated:N`, initializes it, has every simulated cell push latest conditions
//! at a rate per ISU for a while, and reports the coordinator's memory per ISU, its CPU per
//! thousand applied latest updates, the trend's size and time, a new map's way to every
//! cell and registrations per second.
//!
//! With `real_workers` the cells are real workers ([`crate::realcells`]) and a device poster
//! in the bench makes their updates, for checking the simulator against them at a size both
//! run ([`crate::scale_compare`]); the map spread and the registrations are then skipped.

use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::Context;
use deploy::node_args::{CellEndpoint, CoordinatorArgs, ReplicaGroup};
use futures::StreamExt;
use serde::Serialize;

use crate::cellsim::{CellSim, CellSimConfig, PushTotals};
use crate::realcells::{CellTarget, PostTotals, RealCells, RealCellsConfig};

/// A step's settings.
#[derive(Debug, Clone)]
pub struct ScaleConfig {
    /// The coordinator binary (a release build).
    pub coordinator: PathBuf,
    /// Coordinators: 1 (a lone coordinator, in memory only) or a group of replicas (each
    /// with its raft log in `out`), every one pushed to by every cell.
    pub coordinators: usize,
    pub cells: usize,
    pub isus: usize,
    /// Latest updates per ISU per second.
    pub rate_per_isu: f64,
    /// How long the cells push.
    pub push_time: Duration,
    /// The first simulated cell's loopback host (`127.0.0.<it>`).
    pub first_host: u8,
    /// Folder of the coordinators' logs (and a group's data).
    pub out: PathBuf,
    /// After the measures, kill the last coordinator, start it again and time it until ready.
    pub restart: bool,
    /// New ISUs registered after the map changes (none: 0).
    pub registrations: usize,
    /// The key that signs the users' sign-in JWTs (default: the project's).
    pub private_key: Option<PathBuf>,
    /// Real workers (this binary, a release build) as the cells instead of simulated ones.
    pub real_workers: Option<PathBuf>,
    /// Run the nodes the step starts (coordinators, workers) under `taskset -c <this>`.
    pub node_cpus: Option<String>,
}

/// What the step measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    /// `simulated` (the cell simulator) or `real` (real workers and a device poster).
    pub cells_kind: &'static str,
    pub cells: usize,
    pub isus: usize,
    /// ISUs the simulated cells were reset with (every dataset ISU, when all went well); with
    /// real workers, the dataset's ISUs the coordinator's map gives a started worker.
    pub isus_in_cells: usize,
    pub rate_per_isu: f64,
    pub initialize_seconds: f64,
    /// From `POST /initialize` until every coordinator reported its new generation (a
    /// follower applies it after the leader answered; the pushes start then).
    pub generation_everywhere_seconds: f64,
    /// Each coordinator (replica `id`) on its own.
    pub coordinators: Vec<CoordinatorFigures>,
    /// The largest resident memory right after `/initialize`, per ISU (its fixed share
    /// included: compare two steps for the cost of one more ISU).
    pub rss_bytes_per_isu: f64,
    /// The same after the pushes.
    pub rss_bytes_after_push_per_isu: f64,
    pub push_seconds: f64,
    /// Every coordinator's CPU (user + system) over the push window, summed.
    pub coordinator_cpu_seconds: f64,
    /// This process's (the simulator's, or with real workers the device poster's) CPU over
    /// the same window: on a shared machine, a simulator short of CPU pushes less than asked
    /// (compare `pushes` with the rate).
    pub simulator_cpu_seconds: Option<f64>,
    /// Summed over the coordinators (each applies every update). With real workers:
    /// `items_sent` the posts the workers took (times the coordinators), `items_applied` and `frames_sent` the
    /// updates and batches the workers' `latest_batch_items` say were acknowledged (nothing
    /// is dropped or broken on the bench's side then).
    pub pushes: PushTotals,
    /// With real workers: the device posts.
    pub posts: Option<PostTotals>,
    /// With real workers: each one's CPU over the push window and memory after it.
    pub workers: Vec<WorkerFigures>,
    pub applied_per_second: f64,
    /// Coordinator CPU milliseconds per 1,000 applied latest updates (one coordinator's
    /// cost of one update: both summed over the coordinators).
    pub cpu_ms_per_1000_applied: Option<f64>,
    pub trend: TrendFigures,
    /// New maps from the leader to every cell (simulated cells only: they note each map's
    /// arrival).
    pub map_spread: Option<MapSpread>,
    /// New ISUs registered through the leader, after the map changes.
    pub registration: Option<RegistrationFigures>,
    /// With `restart`: from starting the last coordinator again (killed after the pushes)
    /// until its `/healthz` answered 200.
    pub restart_seconds: Option<f64>,
}

/// Registrations of new ISUs (`POST /api/isu` through the leader, [`REGISTERING_AT_ONCE`]
/// at a time, against JIA's simulator answering at once), with a dataset's ISUs held.
#[derive(Debug, Clone, Serialize)]
pub struct RegistrationFigures {
    pub registered: usize,
    pub failed: usize,
    /// Users signed in first (one per [`ISUS_PER_USER`]), not timed.
    pub users: usize,
    pub seconds: f64,
    pub per_second: f64,
    /// Every coordinator's CPU over the registrations, summed, per registration.
    pub cpu_ms_per_registration: f64,
}

/// One real worker's CPU and memory.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerFigures {
    pub cell: String,
    pub cpu_seconds: f64,
    pub rss_bytes_after_push: u64,
}

/// Registrations in flight at once.
const REGISTERING_AT_ONCE: usize = 64;
/// A user signs in for every this many new ISUs.
const ISUS_PER_USER: usize = 10;
/// The UUIDs the step registers start with this: JIA's simulator runs no device for them.
const REGISTERED_PREFIX: &str = "5ca1e";

/// One coordinator's memory and CPU.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CoordinatorFigures {
    /// Its replica id (1 for a lone coordinator).
    pub id: u64,
    /// Resident memory once ready, before `/initialize` (a coordinator builds its dataset's
    /// generation at start already).
    pub rss_bytes_at_start: u64,
    /// Right after `/initialize`.
    pub rss_bytes_after_initialize: u64,
    /// After the pushes.
    pub rss_bytes_after_push: u64,
    /// The peak (`VmHWM`) over the whole step.
    pub rss_bytes_peak: u64,
    /// CPU over the push window.
    pub cpu_seconds: f64,
}

/// One `GET /api/trend` each way.
#[derive(Debug, Clone, Serialize)]
pub struct TrendFigures {
    /// The first request (the coordinator builds the trend on the spot).
    pub first_ms: f64,
    pub json_bytes: usize,
    pub json_ms: f64,
    pub gzip_bytes: usize,
    pub gzip_ms: f64,
    /// Entries (ISUs) the JSON trend lists.
    pub isus_listed: usize,
}

/// [`MAP_CHANGES`] map changes (each a pin of an ISU on the cell that holds it: no data
/// moves), each timed from its request to the leader until a cell received the new version.
#[derive(Debug, Clone, Serialize)]
pub struct MapSpread {
    pub changes: usize,
    /// Until the last cell had it, per change.
    pub last_cell_p50_ms: f64,
    pub last_cell_p99_ms: f64,
    /// Until each cell had it, over every cell of every change.
    pub any_cell_p50_ms: f64,
    pub any_cell_p99_ms: f64,
    /// Until the leader answered the change (it has sent the map to every cell then).
    pub answer_p50_ms: f64,
    /// Cells that never received a change's version (the coordinator's watch resends it
    /// within a second; counted here, not waited for).
    pub missed: usize,
}

/// Map changes a scale step makes.
const MAP_CHANGES: usize = 100;

/// The coordinator processes, killed and reaped on drop, with their base URLs.
struct Coordinators {
    program: PathBuf,
    secret: String,
    /// `taskset -c` CPU list, if any.
    cpus: Option<String>,
    children: Vec<Child>,
    urls: Vec<String>,
    /// Each one's command line and log file.
    args: Vec<Vec<String>>,
    logs: Vec<PathBuf>,
}

impl Coordinators {
    fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.children.iter().map(Child::id)
    }

    /// Each one's resident memory (`VmRSS:`) or peak (`VmHWM:`).
    fn memory(&self, field: &str) -> anyhow::Result<Vec<u64>> {
        self.pids().map(|pid| status_bytes(pid, field)).collect()
    }

    fn cpu_seconds(&self) -> anyhow::Result<Vec<f64>> {
        self.pids()
            .map(|pid| crate::nodes::process_tree_cpu_seconds(pid).context("reading a coordinator's CPU time"))
            .collect()
    }
}

impl Coordinators {
    /// Starts coordinator `index` (its log appended to, for a restart).
    fn spawn(&self, index: usize, append: bool) -> anyhow::Result<Child> {
        let path = &self.logs[index];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        crate::realcells::spawn_node(
            &self.program,
            &self.args[index],
            self.cpus.as_deref(),
            &self.secret,
            log,
        )
    }

    /// Kills the last coordinator (SIGKILL), starts it again and times it until ready.
    async fn restart_last(&mut self, client: &reqwest::Client, within: Duration) -> anyhow::Result<Duration> {
        let index = self.children.len() - 1;
        let _ = self.children[index].kill();
        self.children[index].wait().context("reaping a killed coordinator")?;
        let started = Instant::now();
        self.children[index] = self.spawn(index, true)?;
        self.wait_ready_one(index, client, started + within).await?;
        Ok(started.elapsed())
    }

    /// The base URL of the coordinator that leads (the lone one, or the replica whose
    /// `/healthz` says so).
    async fn leader(&self, client: &reqwest::Client) -> anyhow::Result<String> {
        if self.urls.len() == 1 {
            return Ok(self.urls[0].clone());
        }
        for url in &self.urls {
            if health(client, url).await.is_some_and(|health| health.leader) {
                return Ok(url.clone());
            }
        }
        anyhow::bail!("no coordinator says it leads")
    }

    /// Waits until every coordinator's `/healthz` says one generation.
    async fn wait_same_generation(&self, client: &reqwest::Client, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            let mut generations = std::collections::BTreeSet::new();
            for url in &self.urls {
                generations.insert(health(client, url).await.map(|health| health.generation));
            }
            if generations.len() == 1 && !generations.contains(&None) {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the coordinators did not agree on a generation within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every coordinator's `/healthz` answers 200.
    async fn wait_ready(&mut self, client: &reqwest::Client, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        for index in 0..self.urls.len() {
            self.wait_ready_one(index, client, deadline).await?;
        }
        Ok(())
    }

    /// Waits until coordinator `index`'s `/healthz` answers 200; fails at once when it
    /// exits (a flag it refuses, such as more cells than a map holds), with the end of its log.
    async fn wait_ready_one(
        &mut self,
        index: usize,
        client: &reqwest::Client,
        deadline: Instant,
    ) -> anyhow::Result<()> {
        let name = format!("coordinator {}", index + 1);
        crate::realcells::wait_node_ready(
            &mut self.children[index],
            &name,
            &self.urls[index],
            &self.logs[index],
            client,
            deadline,
        )
        .await
    }
}

impl Drop for Coordinators {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs the step.
pub async fn run(config: ScaleConfig) -> anyhow::Result<ScaleReport> {
    anyhow::ensure!(config.coordinators >= 1, "no coordinator");
    let secret = hex::encode(rand::random::<[u8; 24]>());
    let listens = (0..config.coordinators)
        .map(|_| free_loopback_port())
        .collect::<anyhow::Result<Vec<_>>>()?;
    let urls: Vec<String> = listens.iter().map(|listen| format!("http://{listen}")).collect();
    let client = reqwest::Client::builder().no_proxy().build()?;
    let mut cells = match &config.real_workers {
        None => Cells::Simulated(
            CellSim::start(CellSimConfig {
                cells: config.cells,
                first_host: config.first_host,
                coordinators: urls.clone(),
                secret: secret.clone(),
                interval: Duration::from_millis(10),
            })
            .await?,
        ),
        Some(worker) => {
            let real = RealCellsConfig {
                worker: worker.clone(),
                cells: config.cells,
                first_host: config.first_host,
                coordinators: urls.clone(),
                secret: secret.clone(),
                out: config.out.clone(),
                cpus: config.node_cpus.clone(),
            };
            let endpoints = RealCells::plan(&real)?;
            Cells::Real(RealCells::spawn(&real, endpoints)?)
        }
    };
    let mut coordinators = spawn_coordinators(&config, cells.endpoints(), &listens, &secret)?;
    coordinators.wait_ready(&client, Duration::from_secs(120)).await?;
    if let Cells::Real(workers) = &mut cells {
        workers.wait_ready(&client, Duration::from_secs(60)).await?;
    }
    let rss_at_start = coordinators.memory("VmRSS:")?;
    // Activates any UUID at once; no device posts for the step's registrations.
    let jia = jia_sim::JiaSimulator::start(jia_sim::JiaConfig {
        keep_sent_log: false,
        lean_devices: true,
        accept_any_uuid: true,
        activation_delay: Duration::ZERO,
        silent_uuid_prefix: Some(REGISTERED_PREFIX.to_owned()),
        ..jia_sim::JiaConfig::default()
    })
    .await
    .context("starting the JIA simulator")?;
    // Real workers count what they pushed since they started: the reset's pushes too.
    let applied_before_initialize = match &cells {
        Cells::Real(workers) => workers.items_applied(&client).await?.items,
        Cells::Simulated(_) => 0,
    };
    let started = Instant::now();
    initialize(&client, &urls[0], &jia.url()).await?;
    let initialize_seconds = started.elapsed().as_secs_f64();
    // Followers refuse (412) pushes of the new generation until they applied it.
    coordinators
        .wait_same_generation(&client, Duration::from_secs(60))
        .await?;
    let generation_everywhere_seconds = started.elapsed().as_secs_f64();
    let rss_after_initialize = coordinators.memory("VmRSS:")?;
    tracing::info!(initialize_seconds, ?rss_after_initialize, "initialized; the cells push");

    let window = match &mut cells {
        Cells::Simulated(cells) => push_simulated(&config, &coordinators, cells).await?,
        Cells::Real(workers) => {
            let targets = post_targets(&client, &urls[0], &secret, &config, workers.endpoints()).await?;
            // Each replica acknowledges every batch: the workers count each acknowledgment.
            let replicas = config.coordinators as u64;
            let reset = applied_before_initialize + config.isus as u64 * replicas;
            push_real(&config, &client, &coordinators, workers, &targets, reset).await?
        }
    };
    let (rss_after_push, rss_peak) = (coordinators.memory("VmRSS:")?, coordinators.memory("VmHWM:")?);
    let trend = measure_trend(&client, &urls[0]).await?;
    let leader = coordinators.leader(&client).await?;
    // The dataset's ISUs in the cells, counted before the step registers new ones.
    let (map_spread, registration, isus_in_cells) = match &cells {
        Cells::Simulated(cells) => {
            let spread = measure_map_spread(&client, &leader, &secret, cells).await?;
            let isus_in_cells = cells.isu_count();
            let registration = if config.registrations > 0 {
                Some(measure_registrations(&config, &leader, &coordinators).await?)
            } else {
                None
            };
            (Some(spread), registration, isus_in_cells)
        }
        Cells::Real(_) => (None, None, window.isus_in_cells),
    };
    jia.shutdown().await;
    let restart_seconds = if config.restart {
        let restart = coordinators.restart_last(&client, Duration::from_secs(600)).await?;
        Some(restart.as_secs_f64())
    } else {
        None
    };
    if let Cells::Simulated(cells) = cells {
        cells.shutdown().await;
    }
    drop(coordinators);
    let cpu = window.coordinator_cpu;
    let figures: Vec<CoordinatorFigures> = (0..config.coordinators)
        .map(|index| CoordinatorFigures {
            id: index as u64 + 1,
            rss_bytes_at_start: rss_at_start[index],
            rss_bytes_after_initialize: rss_after_initialize[index],
            rss_bytes_after_push: rss_after_push[index],
            rss_bytes_peak: rss_peak[index],
            cpu_seconds: cpu[index],
        })
        .collect();
    let coordinator_cpu_seconds: f64 = cpu.iter().sum();
    let pushes = window.pushes;
    let per_isu = |bytes: &[u64]| bytes.iter().copied().max().unwrap_or(0) as f64 / config.isus as f64;
    Ok(ScaleReport {
        cells_kind: if config.real_workers.is_some() {
            "real"
        } else {
            "simulated"
        },
        cells: config.cells,
        isus: config.isus,
        isus_in_cells,
        rate_per_isu: config.rate_per_isu,
        initialize_seconds,
        generation_everywhere_seconds,
        rss_bytes_per_isu: per_isu(&rss_after_initialize),
        rss_bytes_after_push_per_isu: per_isu(&rss_after_push),
        coordinators: figures,
        push_seconds: window.seconds,
        coordinator_cpu_seconds,
        simulator_cpu_seconds: window.own_cpu,
        pushes,
        posts: window.posts,
        workers: window.workers,
        applied_per_second: pushes.items_applied as f64 / window.seconds,
        cpu_ms_per_1000_applied: (pushes.items_applied > 0)
            .then(|| coordinator_cpu_seconds * 1e6 / pushes.items_applied as f64),
        trend,
        map_spread,
        registration,
        restart_seconds,
    })
}

/// The step's cells: simulated, or real workers.
enum Cells {
    Simulated(CellSim),
    Real(RealCells),
}

impl Cells {
    /// The cells as the coordinator is told them.
    fn endpoints(&self) -> Vec<CellEndpoint> {
        match self {
            Cells::Simulated(cells) => cells.cell_endpoints(),
            Cells::Real(workers) => workers.endpoints().to_vec(),
        }
    }
}

/// What the push window measured.
struct PushWindow {
    seconds: f64,
    /// Each coordinator's CPU over the window.
    coordinator_cpu: Vec<f64>,
    own_cpu: Option<f64>,
    pushes: PushTotals,
    posts: Option<PostTotals>,
    workers: Vec<WorkerFigures>,
    /// With real workers: the dataset's ISUs the poster found a worker for.
    isus_in_cells: usize,
}

/// Each coordinator's CPU since `before`.
fn cpu_since(coordinators: &Coordinators, before: &[f64]) -> anyhow::Result<Vec<f64>> {
    Ok((coordinators.cpu_seconds()?.iter().zip(before))
        .map(|(after, before)| after - before)
        .collect())
}

/// The simulated cells push for the step's push time.
async fn push_simulated(
    config: &ScaleConfig,
    coordinators: &Coordinators,
    cells: &mut CellSim,
) -> anyhow::Result<PushWindow> {
    let cpu_before = coordinators.cpu_seconds()?;
    let own_before = crate::nodes::own_cpu_seconds();
    let started = Instant::now();
    cells.start_pushing(config.rate_per_isu)?;
    tokio::time::sleep(config.push_time).await;
    let pushes = cells.stop_pushing().await;
    let seconds = started.elapsed().as_secs_f64();
    let coordinator_cpu = cpu_since(coordinators, &cpu_before)?;
    let own_cpu = own_before
        .zip(crate::nodes::own_cpu_seconds())
        .map(|(before, after)| after - before);
    Ok(PushWindow {
        seconds,
        coordinator_cpu,
        own_cpu,
        pushes,
        posts: None,
        workers: Vec::new(),
        isus_in_cells: 0,
    })
}

/// Where the poster sends each dataset ISU's conditions: the cell the coordinator's map
/// gives it (asked after `/initialize`), the dataset's UUIDs generated here as the
/// coordinator generated them.
async fn post_targets(
    client: &reqwest::Client,
    coordinator: &str,
    secret: &str,
    config: &ScaleConfig,
    endpoints: &[CellEndpoint],
) -> anyhow::Result<Vec<CellTarget>> {
    let answer: shared::protocol::cells::PlacementAnswer = client
        .get(format!("{coordinator}{}", shared::protocol::COORDINATOR_PLACEMENT))
        .header(shared::protocol::SECRET_HEADER, secret)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .context("asking the coordinator for its placement map")?
        .json()
        .await
        .context("reading the coordinator's placement map")?;
    let map = answer.map;
    let mut targets: Vec<CellTarget> = endpoints
        .iter()
        .map(|endpoint| CellTarget {
            device_url: endpoint.device_url.clone(),
            uuids: Vec::new(),
        })
        .collect();
    shared::dataset::generated::each_isu_with_count(config.isus, |isu| {
        let cell = map.cell(map.owner(&isu.uuid)).map(|cell| cell.name.as_str());
        if let Some(index) = cell.and_then(|name| endpoints.iter().position(|endpoint| endpoint.cell == name)) {
            targets[index].uuids.push(isu.uuid);
        }
    });
    Ok(targets)
}

/// The device poster posts to the real workers for the step's push time; the updates
/// applied are the workers' count, read once their pushes settled before and after.
async fn push_real(
    config: &ScaleConfig,
    client: &reqwest::Client,
    coordinators: &Coordinators,
    workers: &RealCells,
    targets: &[CellTarget],
    reset_pushed: u64,
) -> anyhow::Result<PushWindow> {
    // A worker's first stream of the new generation starts with every ISU's latest condition
    // (the workers' count reaches `reset_pushed` then): a warm-up post makes it, before the
    // window.
    crate::realcells::warm_up(client, targets).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while workers.items_applied(client).await?.items < reset_pushed && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let settle = Duration::from_millis(500);
    let applied_before = workers
        .settled_items_applied(client, settle, Duration::from_secs(10))
        .await?;
    if applied_before.items < reset_pushed {
        tracing::warn!(
            applied = applied_before.items,
            expected = reset_pushed,
            "the workers did not push every ISU's latest condition after the reset before the window"
        );
    }
    let worker_pids = workers.pids();
    let worker_cpu = |pids: &[u32]| -> anyhow::Result<Vec<f64>> {
        pids.iter()
            .map(|pid| crate::nodes::process_tree_cpu_seconds(*pid).context("reading a worker's CPU time"))
            .collect()
    };
    let workers_before = worker_cpu(&worker_pids)?;
    let cpu_before = coordinators.cpu_seconds()?;
    let own_before = crate::nodes::own_cpu_seconds();
    let started = Instant::now();
    let posts = crate::realcells::post_conditions(targets, config.rate_per_isu, config.push_time).await?;
    let own_cpu = own_before
        .zip(crate::nodes::own_cpu_seconds())
        .map(|(before, after)| after - before);
    let replicas = config.coordinators as u64;
    let expected = applied_before.items + posts.accepted * replicas;
    let ack_deadline = Instant::now() + Duration::from_secs(5);
    while workers.items_applied(client).await?.items < expected && Instant::now() < ack_deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let applied_after = workers.items_applied(client).await?;
    let seconds = started.elapsed().as_secs_f64();
    let coordinator_cpu = cpu_since(coordinators, &cpu_before)?;
    let workers_after = worker_cpu(&worker_pids)?;
    let figures = (workers.endpoints().iter().zip(&worker_pids))
        .zip(workers_after.iter().zip(&workers_before))
        .map(|((endpoint, pid), (after, before))| {
            Ok(WorkerFigures {
                cell: endpoint.cell.clone(),
                cpu_seconds: after - before,
                rss_bytes_after_push: status_bytes(*pid, "VmRSS:")?,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(PushWindow {
        seconds,
        coordinator_cpu,
        own_cpu,
        pushes: PushTotals {
            frames_sent: applied_after.batches - applied_before.batches,
            items_sent: posts.accepted * replicas,
            items_applied: applied_after.items - applied_before.items,
            items_dropped: 0,
            streams_broken: 0,
        },
        posts: Some(posts),
        workers: figures,
        isus_in_cells: targets.iter().map(|target| target.uuids.len()).sum(),
    })
}

/// Signs in a user for every [`ISUS_PER_USER`] registrations (not timed), then registers
/// `config.registrations` new ISUs through the leader, [`REGISTERING_AT_ONCE`] at a time.
async fn measure_registrations(
    config: &ScaleConfig,
    leader: &str,
    coordinators: &Coordinators,
) -> anyhow::Result<RegistrationFigures> {
    let signer = match &config.private_key {
        Some(path) => jia_sim::jwt::JwtSigner::from_file(path)?,
        None => jia_sim::jwt::JwtSigner::project_default(),
    };
    let users = config.registrations.div_ceil(ISUS_PER_USER);
    let mut clients = Vec::with_capacity(users);
    for user in 0..users {
        let client = reqwest::Client::builder()
            .cookie_store(true)
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()?;
        let response = client
            .post(format!("{leader}/api/auth"))
            .bearer_auth(signer.sign(&format!("scale-{user}")))
            .send()
            .await
            .context("signing a user in")?;
        anyhow::ensure!(response.status() == 200, "signing in answered {}", response.status());
        clients.push(client);
    }
    let cpu_before = coordinators.cpu_seconds()?;
    let started = Instant::now();
    let failed = futures::stream::iter(0..config.registrations)
        .map(|index| {
            let client = clients[index / ISUS_PER_USER].clone();
            let uuid = format!(
                "{REGISTERED_PREFIX}{}",
                &uuid::Uuid::new_v4().to_string()[REGISTERED_PREFIX.len()..]
            );
            let url = format!("{leader}/api/isu");
            async move {
                let form = reqwest::multipart::Form::new()
                    .text("jia_isu_uuid", uuid.clone())
                    .text("isu_name", "scale");
                match client.post(url).multipart(form).send().await {
                    Ok(response) if response.status() == 201 => false,
                    Ok(response) => {
                        tracing::warn!(uuid, status = %response.status(), "scale: a registration failed");
                        true
                    }
                    Err(error) => {
                        tracing::warn!(uuid, error = %shared::error_chain(&error), "scale: a registration failed");
                        true
                    }
                }
            }
        })
        .buffer_unordered(REGISTERING_AT_ONCE)
        .filter(|failed| std::future::ready(*failed))
        .count()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let cpu: f64 = (coordinators.cpu_seconds()?.iter().zip(&cpu_before))
        .map(|(after, before)| after - before)
        .sum();
    let registered = config.registrations - failed;
    Ok(RegistrationFigures {
        registered,
        failed,
        users,
        seconds,
        per_second: registered as f64 / seconds,
        cpu_ms_per_registration: cpu * 1e3 / config.registrations as f64,
    })
}

/// Pins [`MAP_CHANGES`] ISUs, one at a time, each on the cell that holds it (a new map
/// version that moves no data), and times each version's way to every cell.
async fn measure_map_spread(
    client: &reqwest::Client,
    leader: &str,
    secret: &str,
    cells: &CellSim,
) -> anyhow::Result<MapSpread> {
    let subjects: Vec<(String, String)> = (0..MAP_CHANGES)
        .filter_map(|index| {
            let cell = &cells.cells()[index % cells.cells().len()];
            let isus = cell.isus();
            isus.get(index / cells.cells().len())
                .map(|isu| (isu.uuid.clone(), cell.name.clone()))
        })
        .collect();
    anyhow::ensure!(!subjects.is_empty(), "no ISU in the simulated cells to pin");
    let (mut last_cell, mut any_cell, mut answers, mut missed) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for (uuid, cell) in &subjects {
        let started = Instant::now();
        let response = client
            .post(format!("{leader}{}", shared::protocol::COORDINATOR_MIGRATE))
            .header(shared::protocol::SECRET_HEADER, secret)
            .json(&shared::protocol::cells::MigrateRequest {
                slot: None,
                isu: Some(uuid.clone()),
                to: cell.clone(),
            })
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .context("pinning an ISU")?;
        answers.push(started.elapsed());
        let status = response.status();
        let answer: shared::protocol::cells::CellsAnswer = response
            .json()
            .await
            .with_context(|| format!("pinning {uuid} answered {status}, not the cells API's answer"))?;
        anyhow::ensure!(answer.error.is_none(), "pinning {uuid}: {:?}", answer.error);
        let version = answer.map_version.context("the pin's answer has no map version")?;
        let arrivals: Vec<Duration> = cells
            .cells()
            .iter()
            .filter_map(|cell| cell.map_arrival(version))
            .map(|at| at.saturating_duration_since(started))
            .collect();
        missed += cells.cells().len() - arrivals.len();
        last_cell.extend(arrivals.iter().max());
        any_cell.extend(arrivals);
    }
    let ms = |times: &mut Vec<Duration>, quantile: f64| {
        times.sort_unstable();
        let index = ((times.len() as f64 * quantile).ceil() as usize).clamp(1, times.len().max(1)) - 1;
        times.get(index).map_or(f64::NAN, |time| time.as_secs_f64() * 1e3)
    };
    Ok(MapSpread {
        changes: subjects.len(),
        last_cell_p50_ms: ms(&mut last_cell, 0.5),
        last_cell_p99_ms: ms(&mut last_cell, 0.99),
        any_cell_p50_ms: ms(&mut any_cell, 0.5),
        any_cell_p99_ms: ms(&mut any_cell, 0.99),
        answer_p50_ms: ms(&mut answers, 0.5),
        missed,
    })
}

/// A coordinator's `/healthz` answer, if it gave one.
async fn health(client: &reqwest::Client, url: &str) -> Option<shared::protocol::Health> {
    let response = client
        .get(format!("{url}{}", shared::protocol::HEALTH))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    response.json().await.ok()
}

/// A free port on 127.0.0.1 (bound on port 0 and released).
fn free_loopback_port() -> anyhow::Result<String> {
    Ok(crate::realcells::free_port_on(std::net::Ipv4Addr::LOCALHOST)?.to_string())
}

/// Starts the coordinators (a group of replicas when more than one) told the cells, their logs (and a group's data) in `config.out`.
fn spawn_coordinators(
    config: &ScaleConfig,
    cells: Vec<CellEndpoint>,
    listens: &[String],
    secret: &str,
) -> anyhow::Result<Coordinators> {
    std::fs::create_dir_all(&config.out).with_context(|| format!("creating {}", config.out.display()))?;
    let urls: Vec<String> = listens.iter().map(|listen| format!("http://{listen}")).collect();
    let mut coordinators = Coordinators {
        program: config.coordinator.clone(),
        secret: secret.to_owned(),
        cpus: config.node_cpus.clone(),
        children: Vec::new(),
        urls: urls.clone(),
        args: Vec::new(),
        logs: Vec::new(),
    };
    for (index, listen) in listens.iter().enumerate() {
        let id = index as u64 + 1;
        let mut args = CoordinatorArgs {
            listen: listen.clone(),
            workers: cells.clone(),
            dataset: Some(format!("generated:{}", config.isus)),
            ..CoordinatorArgs::default()
        };
        let name = if listens.len() > 1 {
            args.group = Some(ReplicaGroup {
                id,
                members: (1..).zip(urls.iter().cloned()).collect(),
            });
            args.data_dir = Some(config.out.join(format!("data/coordinator-{id}")));
            format!("coordinator-{id}")
        } else {
            "coordinator".to_owned()
        };
        coordinators.args.push(args.args());
        coordinators.logs.push(config.out.join(format!("{name}.log")));
        let child = coordinators.spawn(index, false)?;
        coordinators.children.push(child);
    }
    Ok(coordinators)
}

async fn initialize(client: &reqwest::Client, base: &str, jia: &str) -> anyhow::Result<()> {
    let response = client
        .post(format!("{base}/initialize"))
        .json(&serde_json::json!({ "jia_service_url": jia }))
        .timeout(Duration::from_secs(600))
        .send()
        .await
        .context("POST /initialize")?;
    anyhow::ensure!(
        response.status().is_success(),
        "POST /initialize answered {}",
        response.status()
    );
    Ok(())
}

/// The trend asked three times: first (built on the spot), as JSON, and gzip-compressed.
async fn measure_trend(client: &reqwest::Client, base: &str) -> anyhow::Result<TrendFigures> {
    let url = format!("{base}/api/trend");
    let (_, first) = get_timed(client, &url, None).await?;
    let (json, json_time) = get_timed(client, &url, None).await?;
    let (gzip, gzip_time) = get_timed(client, &url, Some("gzip")).await?;
    let ms = |time: Duration| time.as_secs_f64() * 1e3;
    Ok(TrendFigures {
        first_ms: ms(first),
        json_bytes: json.len(),
        json_ms: ms(json_time),
        gzip_bytes: gzip.len(),
        gzip_ms: ms(gzip_time),
        isus_listed: trend_isus(&json)?,
    })
}

/// One GET, its whole body as sent (reqwest here does not decompress) and its time.
async fn get_timed(
    client: &reqwest::Client,
    url: &str,
    encoding: Option<&str>,
) -> anyhow::Result<(bytes::Bytes, Duration)> {
    let started = Instant::now();
    let mut request = client.get(url).timeout(Duration::from_secs(60));
    if let Some(encoding) = encoding {
        request = request.header(reqwest::header::ACCEPT_ENCODING, encoding);
    }
    let response = request.send().await.with_context(|| format!("GET {url}"))?;
    anyhow::ensure!(
        response.status().is_success(),
        "GET {url} answered {}",
        response.status()
    );
    if let Some(encoding) = encoding {
        let given = response.headers().get(reqwest::header::CONTENT_ENCODING);
        anyhow::ensure!(
            given.is_some_and(|given| given == encoding),
            "GET {url} with Accept-Encoding: {encoding} came back as {given:?}"
        );
    }
    let body = response.bytes().await.with_context(|| format!("reading GET {url}"))?;
    Ok((body, started.elapsed()))
}

/// The ISUs a trend lists: every entry of every character's `info`, `warning`, `critical`.
pub fn trend_isus(json: &[u8]) -> anyhow::Result<usize> {
    let trend: Vec<serde_json::Value> = serde_json::from_slice(json).context("the trend is no JSON list")?;
    Ok(trend
        .iter()
        .flat_map(|character| ["info", "warning", "critical"].map(|level| &character[level]))
        .filter_map(serde_json::Value::as_array)
        .map(Vec::len)
        .sum())
}

/// A memory line of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`), in bytes.
fn status_bytes(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kilobytes = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .with_context(|| format!("no {field} line in /proc/{pid}/status"))?;
    Ok(kilobytes * 1024)
}

impl std::fmt::Display for ScaleReport {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            out,
            "scale step: {} ISUs over {} {} cells, {} coordinator(s)",
            self.isus,
            self.cells,
            self.cells_kind,
            self.coordinators.len()
        )?;
        writeln!(out, "  ISUs in the cells' resets   {:>12}", self.isus_in_cells)?;
        writeln!(
            out,
            "  initialize                  {:>12.2} s ({:.2} s until every coordinator had it)",
            self.initialize_seconds, self.generation_everywhere_seconds
        )?;
        self.coordinators_table(out)?;
        writeln!(
            out,
            "  RSS after initialize / ISU  {:>12.0} bytes (the largest; {:.0} after the pushes)",
            self.rss_bytes_per_isu, self.rss_bytes_after_push_per_isu
        )?;
        writeln!(
            out,
            "  pushes                      {:>12.1} s at {} /s per ISU",
            self.push_seconds, self.rate_per_isu
        )?;
        let pushes = &self.pushes;
        writeln!(
            out,
            "  updates sent / applied      {:>12} / {} ({:.0}/s applied; {} dropped, {} streams broke)",
            pushes.items_sent,
            pushes.items_applied,
            self.applied_per_second,
            pushes.items_dropped,
            pushes.streams_broken
        )?;
        if let Some(posts) = &self.posts {
            writeln!(
                out,
                "  device posts sent / taken   {:>12} / {} ({} failed; at most {} ms late)",
                posts.sent, posts.accepted, posts.failed, posts.max_late_ms
            )?;
        }
        let seconds = |value: Option<f64>| value.map_or("-".to_owned(), |seconds| format!("{seconds:.2}"));
        writeln!(
            out,
            "  coordinator CPU (summed)    {:>12.2} s",
            self.coordinator_cpu_seconds
        )?;
        let bench_side = if self.posts.is_some() {
            "poster CPU (the bench)"
        } else {
            "simulator CPU"
        };
        writeln!(out, "  {bench_side:<27} {:>12} s", seconds(self.simulator_cpu_seconds))?;
        for worker in &self.workers {
            writeln!(
                out,
                "  worker {:<20} {:>12.2} s CPU, {:.1} MiB after the pushes",
                worker.cell,
                worker.cpu_seconds,
                worker.rss_bytes_after_push as f64 / (1024.0 * 1024.0)
            )?;
        }
        writeln!(
            out,
            "  CPU per 1,000 applied       {:>12} ms",
            seconds(self.cpu_ms_per_1000_applied)
        )?;
        let trend = &self.trend;
        writeln!(out, "  trend first GET (built)     {:>12.1} ms", trend.first_ms)?;
        writeln!(
            out,
            "  trend JSON                  {:>12} bytes in {:.1} ms ({} ISUs listed)",
            trend.json_bytes, trend.json_ms, trend.isus_listed
        )?;
        write!(
            out,
            "  trend gzip                  {:>12} bytes in {:.1} ms",
            trend.gzip_bytes, trend.gzip_ms
        )?;
        if let Some(spread) = &self.map_spread {
            write!(
                out,
                "\n  map to the last of {} cells  p50 {:.1} ms, p99 {:.1} ms ({} changes; any cell p50 {:.1}, p99 {:.1} ms; answered p50 {:.1} ms; {} missed)",
                self.cells,
                spread.last_cell_p50_ms,
                spread.last_cell_p99_ms,
                spread.changes,
                spread.any_cell_p50_ms,
                spread.any_cell_p99_ms,
                spread.answer_p50_ms,
                spread.missed
            )?;
        }
        if let Some(registration) = &self.registration {
            write!(
                out,
                "\n  registrations               {:>12.0} /s ({} of {} in {:.2} s, {} failed; {:.2} ms coordinator CPU each)",
                registration.per_second,
                registration.registered,
                registration.registered + registration.failed,
                registration.seconds,
                registration.failed,
                registration.cpu_ms_per_registration
            )?;
        }
        match self.restart_seconds {
            Some(restart) => write!(out, "\n  restart of the last, ready   {restart:>11.2} s"),
            None => Ok(()),
        }
    }
}

impl ScaleReport {
    /// Nothing was lost: every ISU reached a cell, the coordinators applied updates and every
    /// one the cells sent (none dropped, no stream broken; with real workers, every post was
    /// taken and every update it made applied), and every cell got every map.
    pub fn held(&self) -> bool {
        let pushes = &self.pushes;
        self.isus_in_cells == self.isus
            && pushes.items_applied > 0
            && pushes.items_applied == pushes.items_sent
            && pushes.items_dropped == 0
            && pushes.streams_broken == 0
            && self.map_spread.as_ref().is_none_or(|spread| spread.missed == 0)
            && self.posts.is_none_or(|posts| posts.failed == 0)
            && self
                .registration
                .as_ref()
                .is_none_or(|registration| registration.failed == 0)
    }

    /// One row per coordinator: its memory (MiB) and CPU.
    fn coordinators_table(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
        writeln!(
            out,
            "  {:>11} {:>10} {:>11} {:>11} {:>9} {:>8}",
            "coordinator", "RSS start", "after init", "after push", "peak", "CPU s"
        )?;
        for node in &self.coordinators {
            writeln!(
                out,
                "  {:>11} {:>10.1} {:>11.1} {:>11.1} {:>9.1} {:>8.2}",
                node.id,
                mib(node.rss_bytes_at_start),
                mib(node.rss_bytes_after_initialize),
                mib(node.rss_bytes_after_push),
                mib(node.rss_bytes_peak),
                node.cpu_seconds
            )?;
        }
        Ok(())
    }
}
