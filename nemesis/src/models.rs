//! The sequential specifications the histories are checked against, one object per key:
//! an ISU (by UUID), a client's session, the placement map's version. Each is a
//! [`Specification`] of `todc-utils`, whose WGL checker does the search.
//!
//! An operation carries its answer; `None` for a write that got none (or a 5xx). Such a
//! write is always valid and does what it asked where it still can: its response is put
//! after every other event, so the search may linearize it anywhere after its invocation,
//! and linearized last it was never observed: it may or may not have taken effect.

use todc_utils::specifications::Specification;

/// What a registration answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Registered {
    Created,
    Conflict,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IsuOp {
    /// `POST /api/isu` by this user, and its answer.
    Register(String, Option<Registered>),
    /// Any read of the ISU by this user (detail, list, conditions, graph): whether it was
    /// found as the reader's own (200) or not (404, not listed).
    Read(String, bool),
}

/// One ISU: nobody's, then its first registration's owner, for good.
pub struct IsuSpec;

impl Specification for IsuSpec {
    type State = Option<String>;
    type Operation = IsuOp;

    fn init() -> Self::State {
        None
    }

    fn apply(operation: &IsuOp, owner: &Self::State) -> (bool, Self::State) {
        match operation {
            IsuOp::Register(user, answer) => {
                let valid = match answer {
                    Some(Registered::Created) => owner.is_none(),
                    Some(Registered::Conflict) => owner.is_some(),
                    None => true,
                };
                (valid, owner.clone().or_else(|| Some(user.clone())))
            }
            IsuOp::Read(user, owned) => ((owner.as_ref() == Some(user)) == *owned, owner.clone()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SessionOp {
    SignIn,
    /// A sign-out and whether it found the session (200) or not (401); `None`: no answer.
    SignOut(Option<bool>),
    /// Any call that needs the session: whether it was taken (not 401).
    Read(bool),
}

/// One client's session (its cookie jar): signed in or not.
pub struct SessionSpec;

impl Specification for SessionSpec {
    type State = bool;
    type Operation = SessionOp;

    fn init() -> bool {
        false
    }

    fn apply(operation: &SessionOp, signed_in: &bool) -> (bool, bool) {
        match operation {
            SessionOp::SignIn => (true, true),
            SessionOp::SignOut(found) => (found.is_none_or(|found| found == *signed_in), false),
            SessionOp::Read(taken) => (taken == signed_in, *signed_in),
        }
    }
}

/// A read of the placement map: its lineage and version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Observe {
    pub lineage: u64,
    pub version: u64,
}

/// The placement map as readers see it: a version within one lineage that never goes back.
pub struct VersionSpec;

impl Specification for VersionSpec {
    /// The lineage and version of the newest map read so far.
    type State = Option<(u64, u64)>;
    type Operation = Observe;

    fn init() -> Self::State {
        None
    }

    fn apply(seen: &Observe, newest: &Self::State) -> (bool, Self::State) {
        let valid = newest.is_none_or(|(lineage, version)| lineage == seen.lineage && seen.version >= version);
        (valid, Some((seen.lineage, seen.version)))
    }
}
