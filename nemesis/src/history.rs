//! A run's history: every operation a client invoked, when it was invoked and completed (ns
//! since the run began, one monotonic clock), and what it answered; and the faults, each with
//! the window in which it was active.

use serde::{Deserialize, Serialize};

/// Nanoseconds since the run began.
pub type Nanos = u64;

/// What a client asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Call {
    /// `POST /api/auth` as `user`.
    SignIn { user: String },
    /// `POST /api/signout`.
    SignOut { user: String },
    /// `GET /api/user/me`.
    Me { user: String },
    /// `POST /api/isu` of `uuid` by `user`.
    Register { user: String, uuid: String },
    /// `GET /api/isu/{uuid}`.
    Detail { user: String, uuid: String },
    /// `GET /api/isu`: the UUIDs listed are the answer's [`Answer::Uuids`].
    List { user: String },
    /// `GET /api/condition/{uuid}` (and `/graph`: `graph` true).
    Conditions { user: String, uuid: String, graph: bool },
    /// `GET /api/trend` (anonymous).
    Trend,
    /// A device's `POST /api/condition/{uuid}` of conditions with these timestamps.
    Post { uuid: String, timestamps: Vec<i64> },
    /// `GET /internal/placement` of a coordinator replica: the map's version.
    Placement,
    /// After the final heal: every condition of `uuid` its owner `user` can read, paged.
    FinalConditions { user: String, uuid: String },
}

impl Call {
    /// The signed-in user whose session the call carries, if any.
    pub fn session(&self) -> Option<&str> {
        match self {
            Call::SignOut { user }
            | Call::Me { user }
            | Call::Register { user, .. }
            | Call::Detail { user, .. }
            | Call::List { user }
            | Call::Conditions { user, .. } => Some(user),
            _ => None,
        }
    }

    /// Whether the call changes the service's state: one that fails may have taken effect.
    pub fn writes(&self) -> bool {
        matches!(
            self,
            Call::SignIn { .. } | Call::SignOut { .. } | Call::Register { .. } | Call::Post { .. }
        )
    }

    /// A short name of the kind of call, for counts.
    pub fn kind(&self) -> &'static str {
        match self {
            Call::SignIn { .. } => "sign_in",
            Call::SignOut { .. } => "sign_out",
            Call::Me { .. } => "me",
            Call::Register { .. } => "register",
            Call::Detail { .. } => "detail",
            Call::List { .. } => "list",
            Call::Conditions { graph: false, .. } => "conditions",
            Call::Conditions { graph: true, .. } => "graph",
            Call::Trend => "trend",
            Call::Post { .. } => "post",
            Call::Placement => "placement",
            Call::FinalConditions { .. } => "final_conditions",
        }
    }
}

/// What the answer said beyond its status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Answer {
    #[default]
    Nothing,
    /// ISU UUIDs (a list) or condition timestamps.
    Uuids {
        uuids: Vec<String>,
    },
    Timestamps {
        timestamps: Vec<i64>,
    },
    /// The trend: each ISU's id and the timestamp of its latest condition.
    Trend {
        latest: Vec<(i64, i64)>,
    },
    /// A placement map's lineage and version.
    Version {
        lineage: u64,
        version: u64,
    },
}

/// One operation of the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub id: u64,
    /// The client that invoked it (a user's session, a device, the trend viewer, ...).
    pub process: u64,
    pub call: Call,
    pub invoked: Nanos,
    pub completed: Nanos,
    /// The HTTP status; `None` when no answer came (a timeout, a closed connection).
    pub status: Option<u16>,
    #[serde(default)]
    pub answer: Answer,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Op {
    /// No answer, or a 5xx: a write may or may not have taken effect.
    pub fn indeterminate(&self) -> bool {
        self.status.is_none_or(|status| status >= 500)
    }

    /// The statuses a client of a healthy cluster gets for this call.
    pub fn failed(&self) -> bool {
        let Some(status) = self.status else { return true };
        match &self.call {
            Call::Register { .. } => !matches!(status, 201 | 409),
            Call::Detail { .. } | Call::Conditions { .. } | Call::FinalConditions { .. } => {
                !matches!(status, 200 | 404)
            }
            Call::Post { .. } => !matches!(status, 202 | 404),
            Call::Me { .. } => !matches!(status, 200 | 401),
            _ => status != 200,
        }
    }

    /// `#id process call status` for a report line.
    pub fn describe(&self) -> String {
        let status = self
            .status
            .map_or_else(|| "no answer".to_owned(), |status| status.to_string());
        format!(
            "#{} p{} {:?} -> {status} [{:.3}s..{:.3}s]",
            self.id,
            self.process,
            self.call,
            self.invoked as f64 / 1e9,
            self.completed as f64 / 1e9
        )
    }
}

/// One fault the nemesis did, from when it began until it was healed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultWindow {
    /// `kill`, `pause`, `migrate`, `drain`, ...
    pub kind: String,
    /// What it was done to (`coordinator-2 (leader)`, `worker-b`, `slot 1f -> c`).
    pub target: String,
    pub from: Nanos,
    pub to: Nanos,
    /// Whether doing it and undoing it both succeeded.
    pub ok: bool,
}

impl FaultWindow {
    pub fn describe(&self) -> String {
        format!(
            "{} {} [{:.3}s..{:.3}s]{}",
            self.kind,
            self.target,
            self.from as f64 / 1e9,
            self.to as f64 / 1e9,
            if self.ok { "" } else { " (failed)" }
        )
    }
}

/// One activation request JIA got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivationAsk {
    pub uuid: String,
    /// The device URL it named.
    pub target: String,
    pub at: Nanos,
}

/// Everything the checker reads: the operations, the faults, and what was measured outside
/// the history (JIA's repeated activations, the replicas' state hashes).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct History {
    pub ops: Vec<Op>,
    pub faults: Vec<FaultWindow>,
    /// Activation requests JIA got for an ISU it had already activated, by UUID.
    pub repeated_activations: Vec<(String, usize)>,
    /// Every activation request of those ISUs, in order (histories before 2026-12-07 hold
    /// none: the check then counts the repeats alone).
    #[serde(default)]
    pub activation_asks: Vec<ActivationAsk>,
    /// Each worker's node name (`worker-b`) by the device URL JIA is given for its cell.
    #[serde(default)]
    pub workers_by_device_url: Vec<(String, String)>,
    /// Each replica's state hash once they applied the same index (`unanswered` when one
    /// did not answer).
    pub state_hashes: Vec<String>,
}
