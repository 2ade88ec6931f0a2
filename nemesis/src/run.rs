//! A whole run: a fresh local cluster (3 coordinator replicas, N cells, durable) on loopback
//! addresses of its own, the JIA simulator in this process, the clients and the schedule at
//! once, the final heal, the final reads, the checks, the cluster down.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench::takeover::{settled_hashes_of, Group};
use isuctl::local::{Addresses, RunDir};
use jia_sim::{JiaConfig, JiaSimulator};
use shared::protocol::{COORDINATOR_PLACEMENT, SECRET_HEADER};

use crate::checker;
use crate::clients::{self, Recorder};
use crate::faults::{self, Cluster};
use crate::history::{Answer, Call, History};
use crate::net::Lo;
use crate::report::{Cost, Report};
use crate::schedule;

/// Process ids: users are 1..=users, then these.
const VIEWER: u64 = 900;
const PLACEMENT: u64 = 901;
const DEVICES: u64 = 1_000;
const FINAL_READERS: u64 = 100_000;
/// How long the cluster may take to be healthy after the final heal.
const HEAL_LIMIT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    pub duration: Duration,
    pub users: u64,
    pub cells: usize,
    /// How long after a fault is healed its errors are still its own.
    pub grace: Duration,
    pub isuctl: PathBuf,
    pub run_dir: PathBuf,
    /// Leave the cluster running afterwards.
    pub keep_cluster: bool,
    /// Network faults with `tc` on loopback (partitions, slow links, loss).
    pub network: bool,
}

fn say(text: impl std::fmt::Display) {
    eprintln!("{} nemesis: {text}", shared::clock::clock_time());
}

/// Runs it all; the report (its history written beside the run directory).
pub fn run(options: &Options) -> anyhow::Result<Report> {
    let began = Instant::now();
    let run_dir = RunDir::new(&options.run_dir);
    // Before the cluster: a qdisc a crashed run left is removed, another's refused.
    let net = match options.network {
        true => Some(Lo::install(own_addresses(options.cells)?)?),
        false => None,
    };
    let cluster = start_cluster(options, &run_dir, net)?;
    let outcome = load(options, cluster.clone());
    if !options.keep_cluster {
        let _ = deploy::external::run_to_stderr(&mut cluster.cluster_command(&["down"]));
    }
    let (history, busy_cores) = outcome?;
    let checks = checker::check(&history, options.grace.as_nanos() as u64);
    let cost = Cost {
        wall_s: began.elapsed().as_secs_f64(),
        nemesis_cpu_s: bench::nodes::own_cpu_seconds().unwrap_or_default(),
        machine_busy_cores: busy_cores,
    };
    let mut report = Report::new(options.seed, options.duration.as_secs_f64(), &history, checks, cost);
    let path = options.run_dir.join(format!("history-{}.json", options.seed));
    std::fs::write(&path, serde_json::to_vec(&history)?)?;
    report.history = Some(path);
    Ok(report)
}

/// The cluster's loopback addresses (`ISU_COORDINATOR_HOST`, the workers'), the only ones
/// network faults may touch.
fn own_addresses(cells: usize) -> anyhow::Result<Vec<Ipv4Addr>> {
    let addresses = Addresses::try_from_env()?;
    std::iter::once(addresses.coordinator_host.clone())
        .chain((0..cells).map(|index| addresses.worker_host(index)))
        .map(|host| {
            host.parse()
                .map_err(|_| anyhow::anyhow!("network faults need IPv4 addresses, not {host}"))
        })
        .collect()
}

/// A fresh cluster: down (whatever ran from this directory), its data removed, up.
fn start_cluster(options: &Options, run_dir: &RunDir, net: Option<Lo>) -> anyhow::Result<Arc<Cluster>> {
    let command = |args: &[&str]| faults::cluster_command(&options.isuctl, run_dir, args);
    let _ = deploy::external::output_checked(&mut command(&["down"]));
    let _ = std::fs::remove_dir_all(run_dir.path.join("data"));
    let cells = options.cells.to_string();
    say(format!(
        "cluster up: 3 coordinators, {cells} cells, durable, in {}",
        run_dir.path.display()
    ));
    deploy::external::run_to_stderr(&mut command(&[
        "up",
        "--coordinators",
        "3",
        "--workers",
        &cells,
        "--durable",
    ]))?;
    Ok(Arc::new(Cluster::new(&options.isuctl, run_dir.clone(), net)?))
}

/// The load and the faults, the heal, the final reads: the history, and the machine's busy
/// cores meanwhile.
fn load(options: &Options, cluster: Arc<Cluster>) -> anyhow::Result<(History, f64)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let jia = runtime.block_on(JiaSimulator::start(JiaConfig {
        accept_any_uuid: true,
        // The clients post for every ISU themselves, and know what was acknowledged.
        silent_uuid_prefix: Some(String::new()),
        run_for: options.duration + Duration::from_secs(3600),
        ..JiaConfig::default()
    }))?;
    let base = cluster.file.public_url.trim_end_matches('/').to_owned();
    runtime.block_on(initialize(&base, &jia.url()))?;

    let mut schedule = schedule::plan(options.seed, options.duration, options.cells);
    if !options.network {
        schedule.retain(|planned| !planned.fault.network());
    }
    say(format!(
        "seed {}: {} faults planned over {:?}",
        options.seed,
        schedule.len(),
        options.duration
    ));
    let start = Instant::now();
    let busy_before = busy_ticks();
    let recorder = Recorder::new(start);
    let tried = clients::Tried::default();
    let mut tasks = Vec::new();
    for index in 1..=options.users {
        let user = clients::user(recorder.clone(), base.clone(), index, options.seed, tried.clone());
        tasks.push(runtime.spawn(user));
    }
    tasks.push(runtime.spawn(clients::viewer(recorder.clone(), base.clone(), VIEWER)));
    tasks.push(runtime.spawn(clients::devices(recorder.clone(), jia.clone(), DEVICES, options.seed)));
    tasks.push(runtime.spawn(observe_placement(recorder.clone(), cluster.clone())));
    let nemesis = {
        let cluster = cluster.clone();
        std::thread::spawn(move || faults::run_schedule(cluster, schedule, start, |line: String| say(line)))
    };
    std::thread::sleep(options.duration);
    recorder.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let busy_cores = busy_ticks()
        .zip(busy_before)
        .map(|(after, before)| (after - before) as f64 / 100.0 / start.elapsed().as_secs_f64())
        .unwrap_or_default();
    say("load over; healing every fault");
    let windows = nemesis.join().unwrap_or_default();
    for task in tasks {
        let _ = runtime.block_on(task);
    }
    let healed = faults::heal_all(&cluster, HEAL_LIMIT);
    say(format!("healed: {healed}"));
    let group = &cluster.group;
    let (state_hashes, _) = settled_hashes_of(group.replicas(), |index| group.answer(index), Duration::from_secs(30));
    // Whatever the faults left to settle (a follower's catch-up, nginx setting a replica
    // aside) settles within the grace, as it would for a fault.
    std::thread::sleep(options.grace);
    let tried_by: Vec<Vec<String>> = (1..=options.users)
        .map(|index| tried_by(&recorder.ops(), &clients::user_name(index)))
        .collect();
    runtime.block_on(clients::final_reads(
        recorder.clone(),
        base,
        options.users,
        tried_by,
        FINAL_READERS,
    ));
    let mut repeated_activations: Vec<(String, usize)> = jia.repeated_activations_by_isu().into_iter().collect();
    repeated_activations.sort();
    let activation_asks = jia
        .asks_of_repeated()
        .into_iter()
        .map(|(uuid, target, at)| crate::history::ActivationAsk {
            uuid,
            target,
            at: at.saturating_duration_since(start).as_nanos() as crate::history::Nanos,
        })
        .collect();
    let workers_by_device_url = cluster
        .file
        .workers
        .iter()
        .map(|worker| (worker.device_url.clone(), format!("worker-{}", worker.cell)))
        .collect();
    let history = History {
        ops: recorder.ops(),
        faults: windows,
        repeated_activations,
        activation_asks,
        workers_by_device_url,
        state_hashes,
    };
    Ok((history, busy_cores))
}

/// The UUIDs `user` tried to register.
fn tried_by(ops: &[crate::history::Op], user: &str) -> Vec<String> {
    let mut uuids: Vec<String> = ops
        .iter()
        .filter_map(|op| match &op.call {
            Call::Register { user: who, uuid } if who == user => Some(uuid.clone()),
            _ => None,
        })
        .collect();
    uuids.sort();
    uuids.dedup();
    uuids
}

async fn initialize(base: &str, jia_url: &str) -> anyhow::Result<()> {
    let answer = clients::client()
        .post(format!("{base}/initialize"))
        .json(&serde_json::json!({ "jia_service_url": jia_url }))
        .timeout(Duration::from_secs(60))
        .send()
        .await?;
    anyhow::ensure!(answer.status() == 200, "POST /initialize answered {}", answer.status());
    Ok(())
}

/// Every 500 ms, the placement map's version as the leader of the moment answers it (none
/// read while no replica, or more than one, says it leads: a follower's map may lag).
async fn observe_placement(recorder: Arc<Recorder>, cluster: Arc<Cluster>) {
    let client = clients::client();
    let secret = cluster.run_dir.secret().unwrap_or_default();
    while !recorder.stopped() {
        let found = cluster.clone();
        let Ok(Some(leader)) = tokio::task::spawn_blocking(move || found.single_leader()).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let url = format!(
            "{}{COORDINATOR_PLACEMENT}",
            cluster.file.replicas[leader].url.trim_end_matches('/')
        );
        let request = client.get(url).header(SECRET_HEADER, &secret);
        recorder
            .send(PLACEMENT, Call::Placement, request, |body| {
                let answer: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
                match (answer["map"]["lineage"].as_u64(), answer["map"]["version"].as_u64()) {
                    (lineage, Some(version)) => Answer::Version {
                        lineage: lineage.unwrap_or(0),
                        version,
                    },
                    _ => Answer::Nothing,
                }
            })
            .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The machine's busy CPU ticks so far (every core, every process), from `/proc/stat`.
fn busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|field| field.parse().ok())
        .collect();
    let idle = fields.get(3)? + fields.get(4)?;
    Some(fields.iter().take(8).sum::<u64>() - idle)
}
