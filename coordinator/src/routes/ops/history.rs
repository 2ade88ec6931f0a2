//! The migrations the console lists: those in flight and the recent ones, with the steps
//! each went through and when, as this replica saw them.
//!
//! The coordinator keeps only its unfinished migrations (their last logged state, on every
//! replica: each applies the log). While a console is open, a watcher samples them every
//! [`SAMPLE_EVERY`] and notes each new phase with the time it saw it; a migration that left
//! the set ended (forgotten, or rolled back when its last phase seen was before the flip).
//! So steps and durations are as exact as the sampling: a step shorter than 50 ms can go
//! unseen (its next one is noted), and migrations that started and ended while no console
//! was open are not listed. The watcher stops once no console asked for
//! [`IDLE_AFTER`], so a closed console costs nothing.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;
use shared::migration::{Migration, Phase, Subject};

/// How often the watcher samples the unfinished migrations.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// The watcher stops when no console asked for this long.
pub const IDLE_AFTER: Duration = Duration::from_secs(60);
/// How many ended migrations are kept.
pub const RECENT: usize = 50;

/// One migration as the console shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeenMigration {
    pub id: u64,
    /// `slot 0b` or `ISU <uuid>`.
    pub subject: String,
    /// The slot moved (a pin's: its UUID's), for the grid.
    pub slot: u8,
    pub pin: bool,
    pub from: String,
    pub to: String,
    /// Each phase seen, in order, with the Unix time in milliseconds it was first seen.
    pub steps: Vec<Step>,
    /// `in flight`, `done` or `rolled back`.
    pub outcome: &'static str,
    /// From the first step seen to the end (or to now, in flight).
    pub millis: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// `planned`, `cloning`, `caught up`, `flipped at map v7`, ...
    pub phase: String,
    pub at_ms: u64,
}

/// The history, shared by the watcher and the handlers (a std mutex: no `.await` while held).
#[derive(Default)]
pub struct History {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    in_flight: BTreeMap<u64, SeenMigration>,
    recent: VecDeque<SeenMigration>,
    last_asked: Option<Instant>,
    watching: bool,
}

/// The cell names of a map, to name a migration's cells.
pub type CellNames = Vec<String>;

impl History {
    /// Notes that a console asked; true when the watcher must be started.
    pub fn asked(&self) -> bool {
        let mut inner = self.inner.lock();
        inner.last_asked = Some(Instant::now());
        let start = !inner.watching;
        inner.watching = true;
        start
    }

    /// Whether the watcher may stop (no console asked for [`IDLE_AFTER`]); it then counts
    /// as stopped.
    pub fn idle(&self) -> bool {
        let mut inner = self.inner.lock();
        let idle = inner.last_asked.is_none_or(|asked| asked.elapsed() >= IDLE_AFTER);
        if idle {
            inner.watching = false;
        }
        idle
    }

    /// Takes one sample of the unfinished migrations.
    pub fn sample(&self, unfinished: &[Migration], cells: &CellNames, now: SystemTime) {
        let now_ms = unix_millis(now);
        let name = |id: u8| cells.get(usize::from(id)).cloned().unwrap_or_else(|| id.to_string());
        let mut inner = self.inner.lock();
        for migration in unfinished {
            let phase = migration.phase.to_string();
            let seen = inner.in_flight.entry(migration.id).or_insert_with(|| SeenMigration {
                id: migration.id,
                subject: migration.subject.to_string(),
                slot: migration.subject.slot(),
                pin: matches!(migration.subject, Subject::Pin(_)),
                from: name(migration.from),
                to: name(migration.to),
                steps: Vec::new(),
                outcome: "in flight",
                millis: 0,
            });
            if seen.steps.last().is_none_or(|last| last.phase != phase) {
                seen.steps.push(Step { phase, at_ms: now_ms });
            }
            seen.millis = now_ms.saturating_sub(seen.steps[0].at_ms);
            if matches!(migration.phase, Phase::RolledBack) {
                seen.outcome = "rolled back";
            }
        }
        let ended: Vec<u64> = inner
            .in_flight
            .keys()
            .filter(|id| !unfinished.iter().any(|migration| migration.id == **id))
            .copied()
            .collect();
        for id in ended {
            let mut seen = inner.in_flight.remove(&id).expect("listed");
            let flipped = seen.steps.iter().any(|step| step.phase.starts_with("flipped"));
            if seen.outcome == "in flight" {
                seen.outcome = if flipped { "done" } else { "rolled back" };
            }
            let phase = if flipped { "forgotten" } else { "rolled back" };
            if seen.steps.last().is_none_or(|last| last.phase != phase) {
                seen.steps.push(Step {
                    phase: phase.to_owned(),
                    at_ms: now_ms,
                });
            }
            seen.millis = now_ms.saturating_sub(seen.steps[0].at_ms);
            inner.recent.push_front(seen);
            inner.recent.truncate(RECENT);
        }
    }

    /// The migrations in flight (oldest first) and the recent ones (newest first).
    pub fn listed(&self) -> (Vec<SeenMigration>, Vec<SeenMigration>) {
        let inner = self.inner.lock();
        (
            inner.in_flight.values().cloned().collect(),
            inner.recent.iter().cloned().collect(),
        )
    }
}

/// Samples `unfinished()` every [`SAMPLE_EVERY`] until the history is idle or `stop` is
/// cancelled.
pub async fn watch(
    history: Arc<History>,
    unfinished: impl Fn() -> (Vec<Migration>, CellNames),
    stop: tokio_util::sync::CancellationToken,
) {
    let mut every = tokio::time::interval(SAMPLE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.cancelled() => return,
        }
        if history.idle() {
            return;
        }
        let (migrations, cells) = unfinished();
        history.sample(&migrations, &cells, SystemTime::now());
    }
}

pub fn unix_millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::migration::Event;

    #[test]
    fn each_phase_is_noted_once_and_an_ended_migration_is_recent() {
        let history = History::default();
        let cells: CellNames = vec!["a".into(), "b".into()];
        let start = UNIX_EPOCH + Duration::from_secs(1000);
        let planned = Migration::plan(7, Subject::Slot(0x0b), 0, 1).unwrap();
        let cloning = planned.apply(Event::CloneStarted).unwrap();
        let at = |ms: u64| start + Duration::from_millis(ms);
        history.sample(std::slice::from_ref(&planned), &cells, at(0));
        history.sample(std::slice::from_ref(&planned), &cells, at(50));
        history.sample(std::slice::from_ref(&cloning), &cells, at(100));
        let (in_flight, recent) = history.listed();
        assert!(recent.is_empty());
        assert_eq!(in_flight[0].subject, "slot 0b");
        assert_eq!((in_flight[0].from.as_str(), in_flight[0].to.as_str()), ("a", "b"));
        assert_eq!(in_flight[0].steps.len(), 2, "{:?}", in_flight[0].steps);
        let flipped = cloning
            .apply(Event::CaughtUp)
            .unwrap()
            .apply(Event::Flipped { map_version: 3 })
            .unwrap();
        history.sample(std::slice::from_ref(&flipped), &cells, at(150));
        history.sample(&[], &cells, at(2200));
        let (in_flight, recent) = history.listed();
        assert!(in_flight.is_empty());
        assert_eq!(recent[0].outcome, "done");
        assert_eq!(recent[0].millis, 2200);
        let phases: Vec<&str> = recent[0].steps.iter().map(|step| step.phase.as_str()).collect();
        assert_eq!(phases.last(), Some(&"forgotten"));
        assert!(phases.iter().any(|phase| phase.starts_with("flipped")), "{phases:?}");
    }

    #[test]
    fn a_migration_gone_before_its_flip_was_rolled_back() {
        let history = History::default();
        let cells: CellNames = vec!["a".into(), "b".into()];
        let planned = Migration::plan(1, Subject::Slot(1), 1, 0).unwrap();
        history.sample(&[planned], &cells, UNIX_EPOCH);
        history.sample(&[], &cells, UNIX_EPOCH + Duration::from_millis(50));
        assert_eq!(history.listed().1[0].outcome, "rolled back");
    }
}
