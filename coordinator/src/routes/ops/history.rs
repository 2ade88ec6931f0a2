//! The migrations the console lists: those in flight and the recent ones, with the steps
//! each went through and when, as this replica applied them.
//!
//! Every replica applies each step of a migration from the log, and notes it with the time
//! it applied it (`Placement::applied_steps_since`, the last 1,024 steps). The console's
//! history takes in the steps applied since it last asked, in order: every step is listed,
//! with the time it was applied here, whether or not a console was open then. A migration
//! that ended inside a snapshot this replica installed (its steps never applied here) ends
//! when the history sees it gone from the unfinished set.

use std::collections::{BTreeMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;
use shared::migration::{Migration, Phase, Subject};

use crate::state::placement::AppliedStep;

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
    /// The last applied step taken in.
    seen: u64,
}

/// The cell names of a map, to name a migration's cells.
pub type CellNames = Vec<String>;

impl History {
    /// The last applied step taken in: ask for the steps after it.
    pub fn seen(&self) -> u64 {
        self.inner.lock().seen
    }

    /// Takes in `steps` (applied in this order; those already taken in are skipped), then
    /// ends, at `now`, a migration listed in flight that `unfinished` no longer holds (it
    /// ended inside an installed snapshot). `unfinished` must be read before `steps`: a
    /// migration gone from it then has its last step among them.
    pub fn update(&self, unfinished: &[Migration], steps: &[AppliedStep], cells: &CellNames, now: SystemTime) {
        let mut inner = self.inner.lock();
        for step in steps {
            if step.seq <= inner.seen {
                continue;
            }
            inner.take(&step.migration, unix_millis(step.at), cells);
            inner.seen = step.seq;
        }
        let ended: Vec<u64> = inner
            .in_flight
            .keys()
            .filter(|id| !unfinished.iter().any(|migration| migration.id == **id))
            .copied()
            .collect();
        for id in ended {
            inner.end(id, unix_millis(now));
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

impl Inner {
    /// One applied step, at `at_ms`: a new phase noted; a last one ends the migration.
    fn take(&mut self, migration: &Migration, at_ms: u64, cells: &CellNames) {
        let name = |id: u8| cells.get(usize::from(id)).cloned().unwrap_or_else(|| id.to_string());
        let seen = self.in_flight.entry(migration.id).or_insert_with(|| SeenMigration {
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
        let phase = migration.phase.to_string();
        if seen.steps.last().is_none_or(|last| last.phase != phase) {
            seen.steps.push(Step { phase, at_ms });
        }
        seen.millis = at_ms.saturating_sub(seen.steps[0].at_ms);
        if migration.is_finished() {
            self.end(migration.id, at_ms);
        }
    }

    /// Moves a migration to the recent ones: done when it flipped, else rolled back (its
    /// last step noted at `at_ms` when its steps were not applied here).
    fn end(&mut self, id: u64, at_ms: u64) {
        let Some(mut seen) = self.in_flight.remove(&id) else {
            return;
        };
        let flipped = seen.steps.iter().any(|step| step.phase.starts_with("flipped"));
        let rolled_back = Phase::RolledBack.to_string();
        let done = flipped && seen.steps.last().is_none_or(|step| step.phase != rolled_back);
        seen.outcome = if done { "done" } else { "rolled back" };
        let last = if done {
            Phase::Forgotten.to_string()
        } else {
            rolled_back
        };
        if seen.steps.last().is_none_or(|step| step.phase != last) {
            seen.steps.push(Step { phase: last, at_ms });
        }
        seen.millis = seen
            .steps
            .last()
            .map_or(0, |step| step.at_ms)
            .saturating_sub(seen.steps[0].at_ms);
        self.recent.push_front(seen);
        self.recent.truncate(RECENT);
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
    use std::time::Duration;

    /// `migrations` as applied steps, the first at 1000 s, then each `gap_ms` later.
    fn steps(migrations: &[Migration], first_seq: u64, at_ms: &[u64]) -> Vec<AppliedStep> {
        migrations
            .iter()
            .zip(at_ms)
            .enumerate()
            .map(|(index, (migration, at))| AppliedStep {
                seq: first_seq + index as u64,
                at: UNIX_EPOCH + Duration::from_secs(1000) + Duration::from_millis(*at),
                migration: migration.clone(),
            })
            .collect()
    }

    #[test]
    fn every_applied_step_is_listed_with_its_time_however_short() {
        let history = History::default();
        let cells: CellNames = vec!["a".into(), "b".into()];
        let planned = Migration::plan(7, Subject::Slot(0x0b), 0, 1).unwrap();
        let cloning = planned.apply(Event::CloneStarted).unwrap();
        let caught_up = cloning.apply(Event::CaughtUp).unwrap();
        let flipped = caught_up.apply(Event::Flipped { map_version: 3 }).unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(2000);
        // Read in two goes, the second overlapping the first (a step is taken in once).
        let applied = steps(
            &[planned, cloning.clone(), caught_up, flipped.clone()],
            1,
            &[0, 1, 2, 40],
        );
        history.update(std::slice::from_ref(&cloning), &applied[..2], &cells, now);
        let (in_flight, recent) = history.listed();
        assert!(recent.is_empty());
        assert_eq!(in_flight[0].subject, "slot 0b");
        assert_eq!((in_flight[0].from.as_str(), in_flight[0].to.as_str()), ("a", "b"));
        assert_eq!(history.seen(), 2);
        history.update(std::slice::from_ref(&flipped), &applied[1..], &cells, now);
        let forgotten = flipped.apply(Event::Forgotten).unwrap();
        history.update(&[], &steps(&[forgotten], 5, &[2200]), &cells, now);
        let (in_flight, recent) = history.listed();
        assert!(in_flight.is_empty());
        assert_eq!(recent[0].outcome, "done");
        assert_eq!(recent[0].millis, 2200);
        let phases: Vec<(&str, u64)> = recent[0]
            .steps
            .iter()
            .map(|step| (step.phase.as_str(), step.at_ms - 1_000_000))
            .collect();
        assert_eq!(
            phases,
            [
                ("planned", 0),
                ("cloning", 1),
                ("caught up", 2),
                ("flipped at map v3", 40),
                ("forgotten", 2200)
            ],
            "every step, even one a millisecond long, at the time it was applied"
        );
    }

    #[test]
    fn a_rollback_is_listed_as_one_and_a_migration_gone_unseen_ends_now() {
        let history = History::default();
        let cells: CellNames = vec!["a".into(), "b".into()];
        let planned = Migration::plan(1, Subject::Slot(1), 1, 0).unwrap();
        let rolled_back = planned.apply(Event::Failed).unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(3000);
        history.update(&[], &steps(&[planned, rolled_back], 1, &[0, 30]), &cells, now);
        let (_, recent) = history.listed();
        assert_eq!((recent[0].outcome, recent[0].millis), ("rolled back", 30));
        // A migration whose end this replica never applied (a snapshot installed instead).
        let flipped = Migration::plan(2, Subject::Slot(2), 0, 1)
            .unwrap()
            .apply(Event::CloneStarted)
            .unwrap()
            .apply(Event::CaughtUp)
            .unwrap()
            .apply(Event::Flipped { map_version: 4 })
            .unwrap();
        history.update(
            std::slice::from_ref(&flipped),
            &steps(std::slice::from_ref(&flipped), 3, &[100]),
            &cells,
            now,
        );
        history.update(&[], &[], &cells, now);
        let (in_flight, recent) = history.listed();
        assert!(in_flight.is_empty());
        assert_eq!(recent[0].outcome, "done");
        assert_eq!(recent[0].steps.last().unwrap().phase, "forgotten");
        assert_eq!(recent[0].steps.last().unwrap().at_ms, 3_000_000);
    }
}
