//! The sequential specifications the histories are checked against, one object per key:
//! an ISU (by UUID), a client's session, the placement map's version. Each is a
//! [`SequentialSpec`] of stateright, whose `LinearizabilityTester` does the search.

use stateright::semantics::SequentialSpec;

/// One ISU: nobody's, then its first registration's owner, for good.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct IsuSpec {
    pub owner: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IsuOp {
    /// `POST /api/isu` by this user.
    Register(String),
    /// Any read of the ISU by this user (detail, list, conditions, graph): found or 404.
    Read(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IsuRet {
    Created,
    Conflict,
    /// Whether the reader saw the ISU as its own.
    Owned(bool),
}

impl SequentialSpec for IsuSpec {
    type Op = IsuOp;
    type Ret = IsuRet;

    fn invoke(&mut self, op: &IsuOp) -> IsuRet {
        match op {
            IsuOp::Register(user) => match self.owner {
                Some(_) => IsuRet::Conflict,
                None => {
                    self.owner = Some(user.clone());
                    IsuRet::Created
                }
            },
            IsuOp::Read(user) => IsuRet::Owned(self.owner.as_ref() == Some(user)),
        }
    }
}

/// One client's session (its cookie jar): signed in or not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SessionSpec {
    pub signed_in: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SessionOp {
    SignIn,
    SignOut,
    /// Any call that needs the session: 401 or not.
    Read,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SessionRet {
    Done,
    /// Whether the session was taken (a sign-out of no session is a 401).
    SignedIn(bool),
}

impl SequentialSpec for SessionSpec {
    type Op = SessionOp;
    type Ret = SessionRet;

    fn invoke(&mut self, op: &SessionOp) -> SessionRet {
        match op {
            SessionOp::SignIn => {
                self.signed_in = true;
                SessionRet::Done
            }
            SessionOp::SignOut => {
                let was = self.signed_in;
                self.signed_in = false;
                SessionRet::SignedIn(was)
            }
            SessionOp::Read => SessionRet::SignedIn(self.signed_in),
        }
    }
}

/// The placement map as readers see it: a version within one lineage that never goes back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct VersionSpec {
    /// The lineage and version of the newest map read so far.
    pub newest: Option<(u64, u64)>,
}

/// An observation of the map, and whether the spec allows it (always recorded `true`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Observe {
    pub lineage: u64,
    pub version: u64,
}

impl SequentialSpec for VersionSpec {
    type Op = Observe;
    type Ret = bool;

    fn invoke(&mut self, seen: &Observe) -> bool {
        let allowed = self
            .newest
            .is_none_or(|(lineage, version)| lineage == seen.lineage && seen.version >= version);
        if allowed {
            self.newest = Some((seen.lineage, seen.version));
        }
        allowed
    }
}
