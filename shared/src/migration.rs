//! The live migration of a slot or a pinned ISU between cells, as a pure state machine:
//! clone → flip → redirect → forget (`docs/cells.md`, "Live migration").
//!
//! ```text
//! Planned ─start─► Cloning ─caught up─► CaughtUp ─flip (map v+1)─► Flipped ─grace─► Forgotten
//!    │                │                    │
//!    └────────────────┴──── fail / restart ┴──► RolledBack   (target drops its import)
//! ```
//!
//! - Until the flip the source owns the data and serves it; the target imports invisibly.
//! - The flip is the only step that changes ownership, and it happens only once the target
//!   has caught up. From then on the target owns the data and the source redirects the posts
//!   it still receives; a migration is never rolled back after its flip (that would lose
//!   what the target took since), only resumed.
//! - The source forgets its copy only after the flip and a grace period.
//! - Every event is idempotent (a repeat changes nothing), so a coordinator that replays its
//!   log, or retries a call whose answer it lost, cannot apply a step twice. After a restart
//!   of any node, [`Migration::on_restart`] says what to do: roll back before the flip,
//!   resume after it.

use serde::{Deserialize, Serialize};

use crate::placement_map::CellId;

/// What moves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Subject {
    /// Every ISU of a slot (its pinned ISUs excepted).
    Slot(u8),
    /// One pinned ISU.
    Pin(String),
}

impl Subject {
    /// Whether `uuid` moves with this subject under `map` (a slot's pinned ISUs stay).
    pub fn covers(&self, uuid: &str, map: Option<&crate::placement_map::PlacementMap>) -> bool {
        match self {
            Subject::Slot(slot) => {
                crate::placement_map::slot_of(uuid) == *slot && map.is_none_or(|map| !map.pins().contains_key(uuid))
            }
            Subject::Pin(pinned) => pinned == uuid,
        }
    }

    /// The cell holding the subject in `map`: its slot's, or the pinned ISU's owner.
    pub fn owner(&self, map: &crate::placement_map::PlacementMap) -> CellId {
        match self {
            Subject::Slot(slot) => map.slots()[usize::from(*slot)],
            Subject::Pin(uuid) => map.owner(uuid),
        }
    }

    /// The slot the subject lives in (a pin's: its UUID's).
    pub fn slot(&self) -> u8 {
        match self {
            Subject::Slot(slot) => *slot,
            Subject::Pin(uuid) => crate::placement_map::slot_of(uuid),
        }
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Slot(slot) => write!(formatter, "slot {slot:02x}"),
            Subject::Pin(uuid) => write!(formatter, "ISU {uuid}"),
        }
    }
}

/// Where a migration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    Planned,
    /// The source streams the history and forwards every batch it accepts meanwhile.
    Cloning,
    /// The target holds everything the source acknowledged; ready to flip.
    CaughtUp,
    /// The map names the target since `map_version`; the source redirects.
    Flipped {
        map_version: u64,
    },
    /// The source dropped its copy: done.
    Forgotten,
    /// Abandoned before the flip: the target dropped its import, the source still owns.
    RolledBack,
}

/// For people (the cells table): `cloning`, `flipped at map v7`, ...
impl std::fmt::Display for Phase {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Phase::Planned => formatter.write_str("planned"),
            Phase::Cloning => formatter.write_str("cloning"),
            Phase::CaughtUp => formatter.write_str("caught up"),
            Phase::Flipped { map_version } => write!(formatter, "flipped at map v{map_version}"),
            Phase::Forgotten => formatter.write_str("forgotten"),
            Phase::RolledBack => formatter.write_str("rolled back"),
        }
    }
}

/// What happened to a migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    CloneStarted,
    /// The target confirmed it holds every condition the source acknowledged.
    CaughtUp,
    /// The coordinator logged and published map `map_version` naming the target.
    Flipped {
        map_version: u64,
    },
    /// The grace period after the flip elapsed and the source dropped its copy.
    Forgotten,
    /// A step failed (a node refused or vanished), or the operator cancelled.
    Failed,
}

/// What the coordinator must do after a restart (its own, the source's or the target's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Nothing: the migration had ended.
    Nothing,
    /// Roll back: tell the target to drop its import; the source keeps owning.
    RollBack,
    /// Resume after the flip: the map already names the target; keep redirecting, forget
    /// the source's copy after the grace period.
    ResumeAfterFlip,
}

/// Why an event was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigrationError {
    #[error("a migration needs two different cells")]
    SameCell,
    #[error("{event:?} cannot happen in phase {phase:?}")]
    OutOfOrder { phase: Phase, event: Event },
}

/// One migration, as the coordinator logs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    pub id: u64,
    pub subject: Subject,
    pub from: CellId,
    pub to: CellId,
    pub phase: Phase,
}

impl Migration {
    pub fn plan(id: u64, subject: Subject, from: CellId, to: CellId) -> Result<Migration, MigrationError> {
        if from == to {
            return Err(MigrationError::SameCell);
        }
        Ok(Migration {
            id,
            subject,
            from,
            to,
            phase: Phase::Planned,
        })
    }

    /// The migration after `event`; the same migration for a repeated event.
    pub fn apply(&self, event: Event) -> Result<Migration, MigrationError> {
        use Phase::*;
        let phase = match (self.phase, event) {
            // Repeats: idempotent.
            (Cloning, Event::CloneStarted) | (CaughtUp, Event::CaughtUp) | (Forgotten, Event::Forgotten) => self.phase,
            (Flipped { map_version }, Event::Flipped { map_version: again }) if map_version == again => self.phase,
            (RolledBack, Event::Failed) => RolledBack,
            // Forward.
            (Planned, Event::CloneStarted) => Cloning,
            (Cloning, Event::CaughtUp) => CaughtUp,
            (CaughtUp, Event::Flipped { map_version }) => Flipped { map_version },
            (Flipped { .. }, Event::Forgotten) => Forgotten,
            // Failures roll back only before the flip.
            (Planned | Cloning | CaughtUp, Event::Failed) => RolledBack,
            (phase, event) => return Err(MigrationError::OutOfOrder { phase, event }),
        };
        Ok(Migration { phase, ..self.clone() })
    }

    /// The cell that owns (and serves) the subject's data now.
    pub fn owner(&self) -> CellId {
        match self.phase {
            Phase::Flipped { .. } | Phase::Forgotten => self.to,
            Phase::Planned | Phase::Cloning | Phase::CaughtUp | Phase::RolledBack => self.from,
        }
    }

    /// Does the source still hold a copy of the data?
    pub fn source_holds_data(&self) -> bool {
        self.phase != Phase::Forgotten
    }

    /// Does the target hold (part of) the data?
    pub fn target_holds_data(&self) -> bool {
        !matches!(self.phase, Phase::Planned | Phase::RolledBack)
    }

    /// Must the source send the device posts it receives for the subject to the target?
    /// While cloning, every accepted batch is forwarded (after storing it); after the flip,
    /// posts are redirected (not stored at the source).
    pub fn source_forwards_posts(&self) -> bool {
        matches!(
            self.phase,
            Phase::Cloning | Phase::CaughtUp | Phase::Flipped { .. } | Phase::Forgotten
        )
    }

    /// Has the migration ended (nothing more will happen to it)?
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Forgotten | Phase::RolledBack)
    }

    /// What to do with this migration after a restart of any node involved, given the
    /// subject's owner in the map the coordinator holds (its log's last map). The map is the
    /// truth about the flip: a coordinator that published map v+1 and died before logging
    /// `Flipped` finds the target named there, and resumes (logging `Flipped` then) instead
    /// of rolling back data the target already owns. The coordinator logs `CaughtUp` before
    /// it flips, so before that phase the map cannot name the target.
    pub fn on_restart(&self, map_owner: CellId) -> Recovery {
        match self.phase {
            Phase::Forgotten | Phase::RolledBack => Recovery::Nothing,
            Phase::CaughtUp if map_owner == self.to => Recovery::ResumeAfterFlip,
            Phase::Planned | Phase::Cloning | Phase::CaughtUp => Recovery::RollBack,
            Phase::Flipped { .. } => Recovery::ResumeAfterFlip,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn migration() -> Migration {
        Migration::plan(1, Subject::Slot(0x3a), 0, 2).unwrap()
    }

    #[test]
    fn the_happy_path_flips_ownership_once_and_forgets_after() {
        let planned = migration();
        assert_eq!((planned.owner(), planned.target_holds_data()), (0, false));
        let cloning = planned.apply(Event::CloneStarted).unwrap();
        assert!(cloning.source_forwards_posts() && cloning.target_holds_data());
        assert_eq!(cloning.owner(), 0, "the source serves until the flip");
        let caught_up = cloning.apply(Event::CaughtUp).unwrap();
        let flipped = caught_up.apply(Event::Flipped { map_version: 7 }).unwrap();
        assert_eq!((flipped.owner(), flipped.source_holds_data()), (2, true));
        assert_eq!(flipped.on_restart(2), Recovery::ResumeAfterFlip);
        assert_eq!(
            caught_up.on_restart(2),
            Recovery::ResumeAfterFlip,
            "map v+1 was published, the flip not yet logged"
        );
        assert_eq!(caught_up.on_restart(0), Recovery::RollBack);
        let done = flipped.apply(Event::Forgotten).unwrap();
        assert!(done.is_finished() && !done.source_holds_data());
        assert_eq!(done.owner(), 2);
    }

    #[test]
    fn no_flip_before_the_target_caught_up_and_no_rollback_after_it() {
        let cloning = migration().apply(Event::CloneStarted).unwrap();
        assert!(matches!(
            cloning.apply(Event::Flipped { map_version: 2 }),
            Err(MigrationError::OutOfOrder { .. })
        ));
        let flipped = cloning
            .apply(Event::CaughtUp)
            .unwrap()
            .apply(Event::Flipped { map_version: 2 })
            .unwrap();
        assert!(matches!(
            flipped.apply(Event::Failed),
            Err(MigrationError::OutOfOrder { .. })
        ));
        assert!(matches!(
            flipped.apply(Event::Flipped { map_version: 3 }),
            Err(MigrationError::OutOfOrder { .. })
        ));
    }

    #[test]
    fn a_failure_before_the_flip_rolls_back_and_repeats_change_nothing() {
        let cloning = migration().apply(Event::CloneStarted).unwrap();
        assert_eq!(cloning.apply(Event::CloneStarted).unwrap(), cloning);
        assert_eq!(cloning.on_restart(0), Recovery::RollBack);
        let rolled_back = cloning.apply(Event::Failed).unwrap();
        assert_eq!((rolled_back.owner(), rolled_back.target_holds_data()), (0, false));
        assert_eq!(rolled_back.apply(Event::Failed).unwrap(), rolled_back);
        assert_eq!(rolled_back.on_restart(0), Recovery::Nothing);
        assert_eq!(
            Migration::plan(2, Subject::Pin("x".into()), 1, 1),
            Err(MigrationError::SameCell)
        );
    }
}
