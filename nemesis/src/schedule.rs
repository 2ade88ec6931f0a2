//! The fault schedule, a pure function of the seed: when each fault begins, what it is done
//! to, and how long it is held before it is healed. Faults overlap (a new one may begin
//! every 1 to 3 s and be held 1 to 8 s), within limits that keep the cluster able to heal:
//! one coordinator replica disrupted at a time (a majority stays), one fault per node, one
//! cells operation (migration, drain) at a time.

use std::collections::HashMap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

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
}

impl Fault {
    /// The kind, for counts: `kill`, `pause`, `migrate`, `drain`.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Kill(_) => "kill",
            Fault::Pause(_) => "pause",
            Fault::Migrate { .. } => "migrate",
            Fault::Drain { .. } => "drain",
        }
    }

    /// What it holds busy while it lasts: a coordinator replica, a worker, nginx, the cells API.
    fn resource(&self) -> &'static str {
        match self {
            Fault::Kill(Target::Leader | Target::Follower) | Fault::Pause(Target::Leader | Target::Follower) => {
                "coordinator"
            }
            Fault::Kill(Target::Worker(_)) | Fault::Pause(Target::Worker(_)) => "worker",
            Fault::Kill(Target::Nginx) | Fault::Pause(Target::Nginx) => "nginx",
            Fault::Migrate { .. } | Fault::Drain { .. } => "cells",
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
        match self {
            Fault::Kill(Target::Worker(cell)) | Fault::Pause(Target::Worker(cell)) => Some(*cell),
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

/// The schedule of a run of `duration` over `cells` cells, from `seed`.
pub fn plan(seed: u64, duration: Duration, cells: usize) -> Vec<Planned> {
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
            // A migration is held busy 2 s (it answers once flipped); a kill's restart takes a while.
            let settle = match fault {
                Fault::Kill(_) => Duration::from_secs(4),
                _ => Duration::from_secs(2),
            };
            busy_until.insert(resource, at + hold + settle);
            planned.push(Planned { at, hold, fault });
        }
        at += Duration::from_millis(rng.gen_range(1_000..3_000));
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
        assert_eq!(kinds.len(), 4, "{kinds:?}");
    }
}
