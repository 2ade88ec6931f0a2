//! The nemesis's hands on the local cluster: each planned fault done and healed through the
//! same mechanisms as the operator's (`isuctl cluster kill|start|pause|resume|replace NAME`,
//! the typed cells API `isuctl cells` uses) or with `tc` on loopback ([`crate::net`]), each
//! recorded as a window of the history.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bench::takeover::{role, single_leader, Group};
use deploy::supervise::{children_of, Process, Records, Signal};
use isuctl::cells_api::CellsApi;
use isuctl::local::{cell_name, Addresses, ClusterFile, RunDir};
use isuctl::takeover::LocalGroup;
use shared::protocol::cells::MigrateRequest;

use crate::history::{FaultWindow, Nanos};
use crate::net::{Effect, Endpoint, Lo, Way};
use crate::schedule::{Fault, Planned, Target};

/// The local cluster the nemesis disrupts.
pub struct Cluster {
    pub isuctl: PathBuf,
    pub run_dir: RunDir,
    pub file: ClusterFile,
    pub group: LocalGroup,
    secret: String,
    /// The network faults' qdisc on loopback (none with `--no-network`), removed when the
    /// cluster is dropped.
    net: Option<Lo>,
}

impl Cluster {
    pub fn new(isuctl: &Path, run_dir: RunDir, net: Option<Lo>) -> anyhow::Result<Cluster> {
        let file = run_dir.cluster()?;
        let group = LocalGroup::new(run_dir.clone(), file.replicas.clone())?;
        let secret = run_dir.secret()?;
        Ok(Cluster {
            isuctl: isuctl.to_owned(),
            run_dir,
            file,
            group,
            secret,
            net,
        })
    }

    /// The listening addresses of node `name`: a replica's port, every port of a worker's
    /// address (node and device servers), nginx's public and control servers.
    fn endpoints(&self, name: &str) -> Result<Vec<Endpoint>, String> {
        let at = |url: &str, whole_address: bool| -> Result<Endpoint, String> {
            let (ip, port) = address_of(url).ok_or_else(|| format!("no IPv4 address and port in {url}"))?;
            Ok(Endpoint {
                ip,
                port: (!whole_address).then_some(port),
            })
        };
        if name == "nginx" {
            let public = at(&self.file.public_url, false)?;
            let router = Addresses::try_from_env()
                .map_err(|error| error.to_string())?
                .router_port;
            return Ok(vec![
                public,
                Endpoint {
                    port: Some(router),
                    ..public
                },
            ]);
        }
        if let Some(replica) = self.file.replicas.iter().find(|replica| replica.name == name) {
            return Ok(vec![at(&replica.url, false)?]);
        }
        match self
            .file
            .workers
            .iter()
            .find(|worker| name.strip_prefix("worker-") == Some(worker.cell.as_str()))
        {
            Some(worker) => Ok(vec![at(&worker.url, true)?]),
            None => Err(format!("no node {name} in cluster.json")),
        }
    }

    /// Puts `effect` on node `name`'s listening addresses, holds it, takes it off.
    fn network(&self, name: &str, effect: Effect, hold: Duration) -> Result<(), String> {
        let lo = self.net.as_ref().ok_or("network faults are off (--no-network)")?;
        let endpoints = self.endpoints(name)?;
        let added = lo.add(effect, &endpoints).map_err(|error| format!("{error:#}"))?;
        std::thread::sleep(hold);
        match lo.remove(added) {
            true => Ok(()),
            false => Err("tc could not remove all of it".to_owned()),
        }
    }

    /// `isuctl cluster VERB NAME` against this cluster's run directory.
    pub fn cluster_command(&self, args: &[&str]) -> Command {
        cluster_command(&self.isuctl, &self.run_dir, args)
    }

    /// Runs `isuctl cluster ARGS`; its output on failure.
    fn cluster(&self, args: &[&str]) -> Result<(), String> {
        deploy::external::output_checked(&mut self.cluster_command(args))
            .map(|_| ())
            .map_err(|error| format!("{error:#}"))
    }

    /// `verb` (kill, start, pause, resume) done to node `name`: `isuctl cluster VERB NAME`, or
    /// for nginx (which `isuctl cluster` does not pause) SIGSTOP/SIGCONT to its master and
    /// workers by PID.
    fn signal(&self, name: &str, verb: &str) -> Result<(), String> {
        if name != "nginx" {
            return self.cluster(&[verb, name]);
        }
        let signal = if verb == "pause" {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        let master = Records::new(&self.run_dir.path)
            .running("nginx")
            .ok_or("nginx is not running")?;
        for process in std::iter::once(master.pid)
            .chain(children_of(master.pid))
            .map(Process::of)
        {
            process.signal(signal);
        }
        Ok(())
    }

    /// The replica that says it leads, by index (else the first).
    pub fn leader(&self) -> usize {
        self.single_leader().unwrap_or(0)
    }

    /// The one replica that says it leads, if exactly one does.
    pub fn single_leader(&self) -> Option<usize> {
        let answers: Vec<_> = (0..self.group.replicas())
            .map(|index| self.group.answer(index))
            .collect();
        single_leader(&answers).ok()
    }

    /// A replica that answers as a follower (else the one after the leader).
    fn follower(&self) -> usize {
        let replicas = self.group.replicas();
        (0..replicas)
            .find(|index| {
                self.group
                    .answer(*index)
                    .is_some_and(|answer| role(&answer) == "follower")
            })
            .unwrap_or((self.leader() + 1) % replicas)
    }

    /// The cells API of the leader.
    pub fn cells(&self) -> anyhow::Result<CellsApi> {
        let leader = &self.file.replicas[self.leader()];
        CellsApi::new(leader.url.clone(), self.secret.clone())
    }

    /// The process name a target is now (`coordinator-2`, `worker-b`, `nginx`), with its role.
    fn resolve(&self, target: Target) -> (String, String) {
        match target {
            Target::Leader => {
                let name = self.group.name(self.leader()).to_owned();
                (name.clone(), format!("{name} (leader)"))
            }
            Target::Follower => {
                let name = self.group.name(self.follower()).to_owned();
                (name.clone(), format!("{name} (follower)"))
            }
            Target::Worker(cell) => {
                let name = format!("worker-{}", cell_name(cell));
                (name.clone(), name)
            }
            Target::Nginx => ("nginx".to_owned(), "nginx".to_owned()),
        }
    }
}

/// The IPv4 address and port of `http://ADDRESS:PORT/...`.
fn address_of(url: &str) -> Option<(Ipv4Addr, u16)> {
    let url = reqwest::Url::parse(url).ok()?;
    Some((url.host_str()?.parse().ok()?, url.port_or_known_default()?))
}

/// `isuctl cluster ARGS` (`isuctl` the binary) against the cluster of `run_dir`.
pub fn cluster_command(isuctl: &Path, run_dir: &RunDir, args: &[&str]) -> Command {
    let mut command = Command::new(isuctl);
    command.arg("cluster").args(args).env("ISU_RUN_DIR", &run_dir.path);
    command
}

/// Runs the schedule from `start` until it is done or `stop` is set; every fault is healed
/// before this returns (also those the stop interrupted). The windows, in the order they
/// began.
pub fn run_schedule(
    cluster: Arc<Cluster>,
    schedule: Vec<Planned>,
    start: Instant,
    log: impl Fn(String) + Send + Sync + 'static,
) -> Vec<FaultWindow> {
    let windows: Arc<Mutex<Vec<FaultWindow>>> = Arc::default();
    let log = Arc::new(log);
    let mut healing = Vec::new();
    // A fault waits until the one before it on the same resource is healed (a restart may
    // take longer than the schedule allowed for it).
    let mut resources: HashMap<String, Arc<Mutex<()>>> = HashMap::new();
    for planned in schedule {
        let due = start + planned.at;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let (cluster, windows, log) = (cluster.clone(), windows.clone(), log.clone());
        let resource = resources.entry(planned.fault.holds()).or_default().clone();
        // Each fault holds and heals on a thread of its own: they overlap.
        healing.push(std::thread::spawn(move || {
            let _held = resource.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let window = apply(&cluster, planned, start);
            log(window.describe());
            windows.lock().expect("windows poisoned").push(window);
        }));
    }
    for thread in healing {
        let _ = thread.join();
    }
    let mut windows = Arc::try_unwrap(windows)
        .map(|windows| windows.into_inner().expect("windows poisoned"))
        .unwrap_or_default();
    windows.sort_by_key(|window| window.from);
    windows
}

fn since(start: Instant) -> Nanos {
    start.elapsed().as_nanos() as Nanos
}

/// Does one fault, holds it, heals it: its window from the moment it began until it was
/// healed (the healed node answering again).
fn apply(cluster: &Cluster, planned: Planned, start: Instant) -> FaultWindow {
    let from = since(start);
    let (target, result) = match planned.fault {
        Fault::Kill(target) | Fault::Pause(target) => {
            let (name, target) = cluster.resolve(target);
            let (verb, undo) = match planned.fault {
                Fault::Kill(_) => ("kill", "start"),
                _ => ("pause", "resume"),
            };
            let result = cluster.signal(&name, verb).and_then(|()| {
                std::thread::sleep(planned.hold);
                cluster.signal(&name, undo)
            });
            (target, result)
        }
        Fault::Migrate { slot, to } => {
            let to = cell_name(to).to_owned();
            let request = MigrateRequest {
                slot: Some(format!("{slot:02x}")),
                isu: None,
                to: to.clone(),
            };
            let result = cluster
                .cells()
                .and_then(|cells| cells.migrate(&request))
                .map_err(|error| format!("{error:#}"))
                .and_then(|outcome| outcome_of(outcome.succeeded(), outcome.status));
            (format!("slot {slot:02x} -> {to}"), result)
        }
        Fault::Drain { cell } => {
            let name = cell_name(cell);
            let result = cluster
                .cells()
                .and_then(|cells| cells.drain(name))
                .map_err(|error| format!("{error:#}"))
                .and_then(|outcome| outcome_of(outcome.succeeded(), outcome.status))
                .and_then(|()| {
                    std::thread::sleep(planned.hold);
                    cluster
                        .cells()
                        .and_then(|cells| cells.rebalance())
                        .map_err(|error| format!("{error:#}"))
                        .and_then(|outcome| outcome_of(outcome.succeeded(), outcome.status))
                });
            (format!("cell {name}, then a rebalance"), result)
        }
        Fault::Partition { target, .. } | Fault::Slow { target, .. } | Fault::Loss { target, .. } => {
            let (name, target) = cluster.resolve(target);
            let (effect, how) = match planned.fault {
                Fault::Partition { way, .. } => (
                    Effect::Partition(way),
                    match way {
                        Way::Both => "both ways".to_owned(),
                        Way::Inbound => "inbound".to_owned(),
                        Way::Outbound => "outbound".to_owned(),
                    },
                ),
                Fault::Slow { kbit, .. } => (Effect::Slow { kbit }, format!("{kbit} kbit/s")),
                Fault::Loss { sixteenths, .. } => {
                    (Effect::Loss { sixteenths }, format!("{sixteenths}/16 of its packets"))
                }
                _ => unreachable!("a network fault"),
            };
            let result = cluster.network(&name, effect, planned.hold);
            (format!("{target}, {how}"), result)
        }
        Fault::Replace { cell } => {
            let name = format!("worker-{}", cell_name(cell));
            let result = cluster.cluster(&["replace", &name]);
            (name, result)
        }
    };
    let (ok, target) = match result {
        Ok(()) => (true, target),
        Err(error) => (false, format!("{target}: {}", error.lines().next().unwrap_or_default())),
    };
    FaultWindow {
        kind: planned.fault.kind().to_owned(),
        target,
        from,
        to: since(start),
        ok,
    }
}

fn outcome_of(succeeded: bool, status: u16) -> Result<(), String> {
    match succeeded {
        true => Ok(()),
        false => Err(format!("answered {status}")),
    }
}

/// Heals what a fault may have left: every node started or resumed (either is refused or
/// harmless for a node that runs), then waits until `cluster status` says all are healthy
/// (at most `limit`). Whether they are.
pub fn heal_all(cluster: &Cluster, limit: Duration) -> bool {
    if let Some(lo) = &cluster.net {
        lo.clear();
    }
    let _ = cluster.signal("nginx", "resume");
    let names: Vec<String> = cluster.file.nodes().into_iter().map(|node| node.name).collect();
    for name in &names {
        let _ = cluster.signal(name, "resume");
    }
    let started = Instant::now();
    while started.elapsed() < limit {
        if cluster.cluster(&["status"]).is_ok() {
            return true;
        }
        for name in &names {
            let _ = cluster.cluster(&["start", name]);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}
