//! The fault schedule, a pure function of the seed: when each fault begins, what it is done
//! to, and how long it is held before it is healed. Faults overlap (a process or cells fault
//! may begin every 1 to 3 s, a network fault or a replacement every 1.5 to 4 s, each held 1 to
//! 8 s), within limits that keep the cluster able to heal: one coordinator replica disrupted
//! at a time (a majority stays), one fault per node, one cells operation (migration, drain)
//! at a time.
//!
//! The network faults and replacements come from a second stream of the same seed, placed
//! where they do not meet a fault of the first on the same node: the first stream's faults
//! are those a seed gave before network faults existed.

use std::collections::HashMap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

pub use crate::net::Way;

/// What a process fault is done to; the leader and a follower are found when it begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Target {
    Leader,
    Follower,
    /// A worker by cell index (0 is cell a).
    Worker(usize),
    Nginx,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Fault {
    /// SIGKILL, then started again (from its data directory) when healed.
    Kill(Target),
    /// SIGSTOP, then SIGCONT when healed.
    Pause(Target),
    /// A live migration of a slot to a cell (index); nothing to heal.
    Migrate { slot: u8, to: usize },
    /// Every slot drained off the cell; healed by a rebalance.
    Drain { cell: usize },
    /// The node's listening address cut off, both ways or one (`tc` on loopback), restored
    /// when healed.
    Partition { target: Target, way: Way },
    /// The node's traffic through a link of `kbit` kbit/s.
    Slow { target: Target, kbit: u32 },
    /// `sixteenths`/16 of the node's packets dropped.
    Loss { target: Target, sixteenths: u8 },
    /// The worker replaced in place: a new process takes its data over and the old one
    /// drains and exits (`isuctl cluster replace`); nothing to heal.
    Replace { cell: usize },
}

impl Fault {
    /// The kind, for counts: `kill`, `pause`, `migrate`, `drain`, `partition`, `slow`,
    /// `loss`, `replace`.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Kill(_) => "kill",
            Fault::Pause(_) => "pause",
            Fault::Migrate { .. } => "migrate",
            Fault::Drain { .. } => "drain",
            Fault::Partition { .. } => "partition",
            Fault::Slow { .. } => "slow",
            Fault::Loss { .. } => "loss",
            Fault::Replace { .. } => "replace",
        }
    }

    /// Whether it is done with `tc` on loopback.
    pub fn network(&self) -> bool {
        matches!(self, Fault::Partition { .. } | Fault::Slow { .. } | Fault::Loss { .. })
    }

    /// The node a process or network fault is done to.
    pub fn target(&self) -> Option<Target> {
        match self {
            Fault::Kill(target)
            | Fault::Pause(target)
            | Fault::Partition { target, .. }
            | Fault::Slow { target, .. }
            | Fault::Loss { target, .. } => Some(*target),
            Fault::Replace { cell } => Some(Target::Worker(*cell)),
            Fault::Migrate { .. } | Fault::Drain { .. } => None,
        }
    }

    /// What it holds busy while it lasts: a coordinator replica, a worker, nginx, the cells API.
    fn resource(&self) -> &'static str {
        match self.target() {
            Some(Target::Leader | Target::Follower) => "coordinator",
            Some(Target::Worker(_)) => "worker",
            Some(Target::Nginx) => "nginx",
            None => "cells",
        }
    }

    /// What it holds busy, by name: each worker is one, the others one each.
    pub fn holds(&self) -> String {
        match self.worker() {
            Some(cell) => format!("worker-{cell}"),
            None => self.resource().to_owned(),
        }
    }

    fn worker(&self) -> Option<usize> {
        match self.target() {
            Some(Target::Worker(cell)) => Some(cell),
            _ => None,
        }
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Planned {
    /// When it begins, from the start of the load.
    pub at: Duration,
    /// How long it is held before it is healed.
    pub hold: Duration,
    pub fault: Fault,
}

/// The schedule of a run of `duration` over `cells` cells, from `seed`: the process and
/// cells faults, then the network faults and replacements where their node is free.
pub fn plan(seed: u64, duration: Duration, cells: usize) -> Vec<Planned> {
    let mut planned = process_faults(seed, duration, cells);
    let network = network_faults(seed, duration, cells, &planned);
    planned.extend(network);
    planned.sort_by_key(|planned| planned.at);
    planned
}

/// How long after its heal a fault's resource stays busy: a killed node's restart, or a
/// replacement's, takes a while; a migration answers once flipped.
fn settle(fault: &Fault) -> Duration {
    match fault {
        Fault::Kill(_) | Fault::Replace { .. } => Duration::from_secs(4),
        _ => Duration::from_secs(2),
    }
}

/// The faults of the seed's first stream (kills, pauses, migrations, drains).
fn process_faults(seed: u64, duration: Duration, cells: usize) -> Vec<Planned> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut busy_until: HashMap<String, Duration> = HashMap::new();
    let mut planned = Vec::new();
    // A first fault once the clients have started; none begins in the last 5 s.
    let mut at = Duration::from_millis(rng.gen_range(1_000..3_000));
    while at + Duration::from_secs(5) < duration {
        let fault = match rng.gen_range(0..100) {
            0..=14 => Fault::Kill(Target::Leader),
            15..=24 => Fault::Kill(Target::Follower),
            25..=39 => Fault::Pause(Target::Leader),
            40..=49 => Fault::Pause(Target::Follower),
            50..=59 => Fault::Kill(Target::Worker(rng.gen_range(0..cells))),
            60..=69 => Fault::Pause(Target::Worker(rng.gen_range(0..cells))),
            70..=77 => Fault::Pause(Target::Nginx),
            78..=94 => Fault::Migrate {
                slot: rng.gen(),
                to: rng.gen_range(0..cells),
            },
            _ => Fault::Drain {
                cell: rng.gen_range(0..cells),
            },
        };
        let hold = match fault {
            Fault::Migrate { .. } => Duration::ZERO,
            _ => Duration::from_millis(rng.gen_range(1_000..8_000)),
        };
        let resource = fault.holds();
        let free = busy_until.get(&resource).is_none_or(|until| *until <= at);
        if free {
            busy_until.insert(resource, at + hold + settle(&fault));
            planned.push(Planned { at, hold, fault });
        }
        at += Duration::from_millis(rng.gen_range(1_000..3_000));
    }
    planned
}

/// The network faults and replacements, from the seed's second stream: each placed only
/// where no fault (of `taken` or of these) holds its node from its start to its heal and
/// settling.
fn network_faults(seed: u64, duration: Duration, cells: usize, taken: &[Planned]) -> Vec<Planned> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(1);
    let busy = |planned: &Planned| {
        (
            planned.fault.holds(),
            planned.at,
            planned.at + planned.hold + settle(&planned.fault),
        )
    };
    let mut held: Vec<(String, Duration, Duration)> = taken.iter().map(busy).collect();
    let mut planned = Vec::new();
    let mut at = Duration::from_millis(rng.gen_range(1_500..4_000));
    while at + Duration::from_secs(5) < duration {
        let target = match rng.gen_range(0..100) {
            0..=24 => Target::Leader,
            25..=49 => Target::Follower,
            50..=84 => Target::Worker(rng.gen_range(0..cells)),
            _ => Target::Nginx,
        };
        let fault = match rng.gen_range(0..100) {
            0..=44 => Fault::Partition {
                target,
                way: match rng.gen_range(0..4) {
                    0 | 1 => Way::Both,
                    2 => Way::Inbound,
                    _ => Way::Outbound,
                },
            },
            45..=64 => Fault::Slow {
                target,
                kbit: rng.gen_range(500..4_000),
            },
            65..=89 => Fault::Loss {
                target,
                sixteenths: rng.gen_range(1..=5),
            },
            _ => Fault::Replace {
                cell: rng.gen_range(0..cells),
            },
        };
        let hold = match fault {
            Fault::Replace { .. } => Duration::ZERO,
            _ => Duration::from_millis(rng.gen_range(1_000..8_000)),
        };
        let candidate = Planned { at, hold, fault };
        let (resource, from, to) = busy(&candidate);
        let free = held
            .iter()
            .all(|(other, begins, ends)| *other != resource || to <= *begins || *ends <= from);
        if free {
            held.push((resource, from, to));
            planned.push(candidate);
        }
        at += Duration::from_millis(rng.gen_range(1_500..4_000));
    }
    planned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
        let minutes = Duration::from_secs(120);
        let schedule = plan(42, minutes, 3);
        assert_eq!(schedule, plan(42, minutes, 3));
        assert_ne!(schedule, plan(43, minutes, 3));
        assert!(schedule.len() >= 30, "{}", schedule.len());
        assert!(schedule
            .iter()
            .all(|planned| planned.at + Duration::from_secs(5) < minutes));
    }

    #[test]
    fn faults_overlap_but_one_coordinator_replica_at_a_time() {
        let schedule = plan(7, Duration::from_secs(600), 3);
        let coordinator: Vec<&Planned> = schedule
            .iter()
            .filter(|planned| planned.fault.resource() == "coordinator")
            .collect();
        for pair in coordinator.windows(2) {
            assert!(pair[0].at + pair[0].hold < pair[1].at, "{pair:?}");
        }
        let overlapping = schedule
            .windows(2)
            .filter(|pair| pair[1].at < pair[0].at + pair[0].hold)
            .count();
        assert!(overlapping >= 50, "only {overlapping} faults overlap the one before");
        let kinds: std::collections::HashSet<&str> = schedule.iter().map(|planned| planned.fault.kind()).collect();
        assert_eq!(kinds.len(), 8, "{kinds:?}");
    }

    #[test]
    fn network_faults_and_replacements_are_seeded_and_keep_clear_of_their_nodes_other_faults() {
        let long = Duration::from_secs(600);
        let schedule = plan(11, long, 3);
        assert_eq!(schedule, plan(11, long, 3));
        let count = |kind: &str| schedule.iter().filter(|planned| planned.fault.kind() == kind).count();
        for kind in ["partition", "slow", "loss", "replace"] {
            assert!(count(kind) >= 5, "{kind}: {}", count(kind));
        }
        let ways: std::collections::HashSet<Way> = schedule
            .iter()
            .filter_map(|planned| match planned.fault {
                Fault::Partition { way, .. } => Some(way),
                _ => None,
            })
            .collect();
        assert_eq!(ways.len(), 3, "{ways:?}");
        // The first stream's faults are those the seed gave before: the same with or without
        // the second.
        let first: Vec<Planned> = schedule
            .iter()
            .filter(|planned| !planned.fault.network() && planned.fault.kind() != "replace")
            .copied()
            .collect();
        assert_eq!(first, process_faults(11, long, 3));
        // No two faults hold one node (or the coordinator group) at once.
        for (index, one) in schedule.iter().enumerate() {
            for other in &schedule[index + 1..] {
                if one.fault.holds() == other.fault.holds() {
                    assert!(
                        one.at + one.hold < other.at || other.at + other.hold < one.at,
                        "{one:?} {other:?}"
                    );
                }
            }
        }
        // Network faults overlap other faults.
        let overlapping = schedule
            .iter()
            .filter(|planned| planned.fault.network())
            .filter(|net| {
                schedule.iter().any(|other| {
                    !other.fault.network() && other.at < net.at + net.hold && net.at < other.at + other.hold
                })
            })
            .count();
        assert!(overlapping >= 10, "{overlapping}");
    }
}
