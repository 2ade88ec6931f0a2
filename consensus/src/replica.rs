//! One replica: its stores opened from its data directory, its raft started with the
//! group's timing, and the first membership of a new group.
//!
//! Timing: a leader sends heartbeats every 100 ms; a follower that hears none for 800 to
//! 1,000 ms (the leader's lease, 500 ms, then its own timeout, 300 to 500) stands for
//! election. So a dead leader is replaced in about one second (its followers' timeout, one
//! vote round trip, the new leader's first heartbeat).
//!
//! A new group (no vote and no log anywhere) is initialised by each replica with the same
//! membership, the listed replicas; openraft refuses the call on a replica that is already
//! part of a group, which is how a restarted replica keeps the membership it has.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use openraft::{Config, ServerState, SnapshotPolicy};
use shared::wal::FsyncPolicy;

use crate::log_store::LogStore;
use crate::network::{Network, Proposed, APPLIED, PROPOSE, SNAPSHOT_CHUNK_BYTES};
use crate::state_machine::StateMachineStore;
use crate::{Applier, Command, Node, NodeId, Raft};

/// How a replica starts.
pub struct ReplicaOptions {
    pub id: NodeId,
    /// Every replica of a new group, by id (its base URL). Used only to initialise a group
    /// that does not exist yet.
    pub members: BTreeMap<NodeId, String>,
    /// Where the log, the vote and the snapshot are kept (`None`: in memory only, for a group
    /// of one whose state may end with its process).
    pub data_dir: Option<PathBuf>,
    /// When the log reaches the disk (a group of more than one must keep
    /// [`FsyncPolicy::Always`]; see [`LogStore::durable`]).
    pub fsync: FsyncPolicy,
    pub secret: String,
    /// Entries between state machine snapshots (the log is purged up to a snapshot).
    pub snapshot_every: u64,
    /// The leader's heartbeat, in milliseconds; a follower elects after 8 to 10 of them
    /// missed (see [`config`]).
    /// openraft gives an append one heartbeat to answer, so a network whose round trip
    /// nears it needs a longer one ([`DEFAULT_HEARTBEAT_MS`] on a LAN).
    pub heartbeat_ms: u64,
}

/// The heartbeat on a LAN: a dead leader is replaced in about a second.
pub const DEFAULT_HEARTBEAT_MS: u64 = 100;

/// Why a replica could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("raft log: {0}")]
    Log(#[from] crate::log_store::OpenError),
    #[error("raft snapshot: {0}")]
    Snapshot(#[from] crate::state_machine::OpenError),
    #[error("raft: {0}")]
    Raft(String),
    #[error("replica {0} is not among the group's members {1:?}")]
    NotAMember(NodeId, Vec<NodeId>),
    #[error("a group of {0} replicas keeps its log on disk: every replica needs a data directory")]
    NotDurable(usize),
}

/// Why a membership change was not made.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// Not possible as asked (already a member, not one, the last one, a change in progress).
    #[error("{0}")]
    Refused(String),
    /// This replica does not lead.
    #[error("{0}")]
    NotLeader(String),
}

impl MembershipError {
    fn from_raft(text: String, not_leader: bool) -> MembershipError {
        if not_leader {
            MembershipError::NotLeader(text)
        } else {
            MembershipError::Refused(text)
        }
    }
}

/// A running replica.
pub struct Replica<A: Applier> {
    pub id: NodeId,
    pub raft: Raft,
    state_machine: StateMachineStore<A>,
    secret: Arc<str>,
}

/// How long a write waits for the group to have a leader again (an election takes about a
/// second).
pub const ELECTION_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often a write waiting for a leader tries again.
const RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a forwarded command waits for this replica to apply it.
const APPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Commits commands from any replica (cheap to clone): the leader writes them itself; a
/// follower forwards them to the leader and returns once it has applied them too, so its
/// next read sees them.
#[derive(Clone)]
pub struct Proposer {
    raft: Raft,
    client: reqwest::Client,
    secret: Arc<str>,
}

/// openraft's refusal of a write (this replica does not lead, or the change is not allowed).
type ClientWriteRefusal = openraft::error::RaftError<NodeId, openraft::error::ClientWriteError<NodeId, Node>>;

/// Whether `raft` has applied `index` within `timeout` (`what` names the wait in openraft's
/// messages).
async fn applied_within(raft: &Raft, index: u64, timeout: std::time::Duration, what: &str) -> bool {
    raft.wait(Some(timeout))
        .applied_index_at_least(Some(index), what)
        .await
        .is_ok()
}

/// Why a command was not committed.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error("no leader is known (an election is under way)")]
    NoLeader,
    #[error("forwarding to the leader failed: {0}")]
    Forward(String),
    #[error("not committed: {0}")]
    Raft(String),
    #[error("committed at {0} but not applied here within {APPLY_WAIT:?}")]
    NotApplied(u64),
}

impl Proposer {
    /// Commits `command`; returns the index it was applied at (here too). While the group
    /// elects a leader (none known, or the known one does not answer) it tries again every
    /// [`RETRY_EVERY`] for up to [`ELECTION_WAIT`], so a takeover delays a write instead of
    /// failing it. A command may then be committed twice (a forward whose answer was lost):
    /// applying one is idempotent by the application's rule.
    pub async fn propose(&self, command: Vec<u8>) -> Result<u64, ProposeError> {
        let deadline = tokio::time::Instant::now() + ELECTION_WAIT;
        loop {
            match self.propose_once(&command).await {
                Ok(index) => return Ok(index),
                Err(error @ (ProposeError::NoLeader | ProposeError::Forward(_))) => {
                    if tokio::time::Instant::now() + RETRY_EVERY >= deadline {
                        return Err(error);
                    }
                    tokio::time::sleep(RETRY_EVERY).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Commits `command` only while this replica leads: a step of a protocol the leader
    /// runs (a registration) must not be committed for a replica that no longer leads (it
    /// would race the next leader ending the same protocol).
    pub async fn propose_as_leader(&self, command: Vec<u8>) -> Result<u64, ProposeError> {
        self.write_here(command)
            .await?
            .map_err(|error| ProposeError::Raft(error.to_string()))
    }

    /// Commits `command` through this replica's raft: its index, or openraft's refusal (this
    /// replica does not lead). A leader that lost its majority waits for it; the caller is
    /// told after [`ELECTION_WAIT`], not held.
    async fn write_here(&self, command: Vec<u8>) -> Result<Result<u64, ClientWriteRefusal>, ProposeError> {
        match tokio::time::timeout(ELECTION_WAIT, self.raft.client_write(Command(command))).await {
            Ok(written) => Ok(written.map(|written| written.log_id.index)),
            Err(_) => Err(ProposeError::Raft("no majority answered in time".into())),
        }
    }

    async fn propose_once(&self, command: &[u8]) -> Result<u64, ProposeError> {
        let error = match self.write_here(command.to_vec()).await? {
            Ok(index) => return Ok(index),
            Err(error) => error,
        };
        let Some(forward) = error.forward_to_leader() else {
            return Err(ProposeError::Raft(error.to_string()));
        };
        let Some(leader) = forward.leader_node.clone() else {
            return Err(ProposeError::NoLeader);
        };
        let request = self
            .client
            .post(format!("{}{PROPOSE}", leader.addr.trim_end_matches('/')))
            .body(command.to_vec());
        let proposed = self.leader_index(request).await?;
        self.wait_applied(proposed, "a forwarded command").await
    }

    /// Sends `request` to the leader with the secret; the index its answer names.
    async fn leader_index(&self, request: reqwest::RequestBuilder) -> Result<u64, ProposeError> {
        let forward = |error: reqwest::Error| ProposeError::Forward(error.to_string());
        let answer = request
            .header(shared::protocol::SECRET_HEADER, self.secret.as_ref())
            .send()
            .await
            .map_err(forward)?;
        let status = answer.status();
        let body = answer.bytes().await.map_err(forward)?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            return Err(ProposeError::Forward(format!("{status}: {}", text.trim())));
        }
        let answered: Proposed =
            serde_json::from_slice(&body).map_err(|error| ProposeError::Forward(error.to_string()))?;
        Ok(answered.index)
    }

    /// Waits (at most [`APPLY_WAIT`]) until this replica has applied `index`.
    async fn wait_applied(&self, index: u64, what: &str) -> Result<u64, ProposeError> {
        match applied_within(&self.raft, index, APPLY_WAIT, what).await {
            true => Ok(index),
            false => Err(ProposeError::NotApplied(index)),
        }
    }

    /// Waits until this replica has applied everything the leader had applied when asked
    /// (a read barrier: a replica that starts catches up before it serves). The index reached.
    pub async fn catch_up(&self) -> Result<u64, ProposeError> {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.state == openraft::ServerState::Leader {
            // A new leader knows the entries of earlier terms committed only once an entry
            // of its own term is: wait until it has applied them all.
            let read = tokio::time::timeout(APPLY_WAIT, self.raft.ensure_linearizable()).await;
            return match read {
                Ok(Ok(log_id)) => Ok(log_id.map_or(0, |log_id| log_id.index)),
                Ok(Err(error)) => Err(ProposeError::Raft(error.to_string())),
                Err(_) => Err(ProposeError::Raft("no majority answered in time".into())),
            };
        }
        let leader = metrics
            .current_leader
            .and_then(|leader| metrics.membership_config.membership().get_node(&leader).cloned())
            .ok_or(ProposeError::NoLeader)?;
        let request = self
            .client
            .get(format!("{}{APPLIED}", leader.addr.trim_end_matches('/')));
        let leader_applied = self.leader_index(request).await?;
        self.wait_applied(leader_applied, "catching up with the leader").await
    }

    /// Leader only: confirms with a majority that this replica still leads, then waits until
    /// it has applied every entry of its log, those not yet committed included (a write
    /// whose caller gave up may still commit). After it, what the leader's state lacks was
    /// never written, as of when it was called. An error when it does not lead, no majority
    /// answers, or the log is not applied within [`APPLY_WAIT`].
    pub async fn settled(&self) -> Result<u64, ProposeError> {
        if self.raft.metrics().borrow().state != openraft::ServerState::Leader {
            return Err(ProposeError::NoLeader);
        }
        // On a leader, the read barrier is the majority's confirmation.
        self.catch_up().await?;
        let last = self.raft.metrics().borrow().last_log_index.unwrap_or(0);
        self.wait_applied(last, "the leader's own log").await
    }

    /// The raft this proposer writes to.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }
}

/// What a replica says of itself (`role`, `term`, how far it has applied, whom it follows),
/// as the coordinator's `/internal/replica` answers it.
pub type Status = shared::protocol::ReplicaStatus;

/// Entries per append RPC: a registration's entry may carry an icon, so a batch of openraft's
/// default 300 could pass the RPC body bound, and a follower behind would never catch up.
pub const MAX_PAYLOAD_ENTRIES: u64 = 32;

/// The group's timing and snapshot policy.
pub fn config(snapshot_every: u64, heartbeat_ms: u64) -> Arc<Config> {
    let heartbeat_ms = heartbeat_ms.max(10);
    let config = Config {
        cluster_name: "isucondition-coordinators".into(),
        heartbeat_interval: heartbeat_ms,
        // openraft 0.9 elects after the leader's lease (`election_timeout_max`) plus this
        // replica's own timeout (drawn once, between the two): 8 to 10 heartbeats of
        // silence. At 4 to 8 it was 12 to 16 (1.2 to 1.6 s at 100 ms), and a takeover that
        // needed a second round (a split vote, a candidate with a shorter log waiting out
        // another `2 × election_timeout_max`) took seconds.
        election_timeout_min: heartbeat_ms * 3,
        election_timeout_max: heartbeat_ms * 5,
        install_snapshot_timeout: 2_000,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_every.max(1)),
        snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
        max_in_snapshot_log_to_keep: 1_000,
        max_payload_entries: MAX_PAYLOAD_ENTRIES,
        ..Config::default()
    };
    Arc::new(config.validate().expect("the group's raft config is valid"))
}

impl<A: Applier> Replica<A> {
    /// Opens the replica's stores (restoring its snapshot into `applier`) and starts its raft.
    /// Must run on a tokio runtime.
    pub async fn start(options: ReplicaOptions, applier: Arc<A>) -> Result<Replica<A>, StartError> {
        if !options.members.contains_key(&options.id) {
            return Err(StartError::NotAMember(
                options.id,
                options.members.keys().copied().collect(),
            ));
        }
        let (log_store, state_machine) = match &options.data_dir {
            Some(data_dir) => (
                LogStore::durable(data_dir, options.fsync)?,
                StateMachineStore::open(data_dir, applier)?,
            ),
            // A replica that forgot its vote and log could help elect a leader without
            // entries it acknowledged: only a group of one may forget.
            None if options.members.len() > 1 => return Err(StartError::NotDurable(options.members.len())),
            None => (LogStore::in_memory(), StateMachineStore::in_memory(applier)),
        };
        // openraft applies the committed entries again inside `Raft::new`, before its core runs.
        state_machine.replay_until(log_store.committed_index());
        let config = config(options.snapshot_every, options.heartbeat_ms);
        let heartbeat = std::time::Duration::from_millis(config.heartbeat_interval);
        let (network, rival_terms) = Network::new(&options.secret);
        let raft = Raft::new(options.id, config, network, log_store, state_machine.clone())
            .await
            .map_err(|error| StartError::Raft(error.to_string()))?;
        tokio::spawn(end_split_votes(raft.clone(), rival_terms, heartbeat));
        let members: BTreeMap<NodeId, Node> = options
            .members
            .iter()
            .map(|(id, url)| (*id, Node { addr: url.clone() }))
            .collect();
        if !raft
            .is_initialized()
            .await
            .map_err(|error| StartError::Raft(error.to_string()))?
        {
            // Every replica of a new group does this with the same members; a replica whose
            // group has already formed is told so and keeps its own membership.
            if let Err(error) = raft.initialize(members).await {
                tracing::info!(%error, "raft group not initialised here");
            }
        }
        Ok(Replica {
            id: options.id,
            raft,
            state_machine,
            secret: options.secret.as_str().into(),
        })
    }

    /// Commits commands from this replica (forwarding them to the leader when needed).
    pub fn proposer(&self) -> Proposer {
        Proposer {
            raft: self.raft.clone(),
            client: node_http::internal_client()
                .connect_timeout(std::time::Duration::from_millis(500))
                .timeout(std::time::Duration::from_secs(5))
                .build()
                .expect("an HTTP client builds"),
            secret: self.secret.clone(),
        }
    }

    /// The application this replica applies to.
    pub fn applier(&self) -> &Arc<A> {
        self.state_machine.applier()
    }

    /// Where this replica stands.
    pub fn status(&self) -> Status {
        let metrics = self.raft.metrics().borrow().clone();
        Status {
            id: self.id,
            role: role_name(metrics.state).to_owned(),
            term: metrics.current_term,
            leader: metrics.current_leader,
            last_log_index: metrics.last_log_index.unwrap_or(0),
            applied_index: self.state_machine.applied_index(),
            members: metrics.membership_config.membership().voter_ids().collect(),
        }
    }

    /// The index of the last entry this replica applied.
    pub fn applied_index(&self) -> u64 {
        self.state_machine.applied_index()
    }

    /// The leader's base URL, when one is known.
    pub fn leader_url(&self) -> Option<String> {
        let metrics = self.raft.metrics().borrow().clone();
        let leader = metrics.current_leader?;
        metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .map(|node| node.addr.clone())
    }

    /// Waits (at most `timeout`) until this replica has applied `index`; false when it has not.
    pub async fn wait_applied(&self, index: u64, timeout: std::time::Duration) -> bool {
        applied_within(&self.raft, index, timeout, "a write seen elsewhere").await
    }

    /// Adds replica `id` at `url` to the group (run on the leader): it first catches up as a
    /// learner, then votes. Returns once the new membership is committed.
    pub async fn add_member(&self, id: NodeId, url: String) -> Result<Status, MembershipError> {
        let mut voters = self.voters();
        if voters.contains(&id) {
            return Err(MembershipError::Refused(format!("replica {id} is already a member")));
        }
        self.raft
            .add_learner(id, Node { addr: url }, true)
            .await
            .map_err(|error| MembershipError::from_raft(error.to_string(), error.forward_to_leader().is_some()))?;
        voters.insert(id);
        self.change_voters(voters).await
    }

    /// Removes replica `id` from the group (run on the leader); the group must keep one voter.
    pub async fn remove_member(&self, id: NodeId) -> Result<Status, MembershipError> {
        let mut voters = self.voters();
        if !voters.remove(&id) {
            return Err(MembershipError::Refused(format!("replica {id} is not a member")));
        }
        if voters.is_empty() {
            return Err(MembershipError::Refused("the group must keep one replica".into()));
        }
        self.change_voters(voters).await
    }

    fn voters(&self) -> std::collections::BTreeSet<NodeId> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect()
    }

    async fn change_voters(&self, voters: std::collections::BTreeSet<NodeId>) -> Result<Status, MembershipError> {
        self.raft
            .change_membership(voters, false)
            .await
            .map_err(|error| MembershipError::from_raft(error.to_string(), error.forward_to_leader().is_some()))?;
        Ok(self.status())
    }

    /// Stops the raft (its tasks end; the files stay).
    pub async fn shutdown(&self) {
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "raft shutdown");
        }
    }
}

/// Ends the split votes openraft 0.9's timers can repeat for seconds.
///
/// openraft draws a replica's election timeout once, at start, and checks it on a tick of 1.5
/// heartbeats, so a candidate stands again on the first tick past its timeout. Two candidates
/// whose timeouts round up to the same number of ticks, and whose ticks fall within a vote's
/// round trip of each other, stand for every term together and split every vote, until their
/// ticks drift apart: two replicas left after a leader's death stayed without a leader for
/// more than five seconds so.
///
/// Here a candidate whose vote was refused by a rival standing for the same term stands again
/// after a random half to two and a half heartbeats, if no leader has come meanwhile: off its
/// tick and before its timer would fire (three heartbeats at least), so one of the two asks
/// first and the other, still at the older term, grants the vote. It only goes on with an
/// election under way; it never starts one.
async fn end_split_votes(
    raft: Raft,
    mut rival_terms: tokio::sync::watch::Receiver<u64>,
    heartbeat: std::time::Duration,
) {
    use rand::Rng;
    // The sender lives in openraft's network: this ends with the raft.
    while rival_terms.changed().await.is_ok() {
        let split = *rival_terms.borrow_and_update();
        let pause = heartbeat.mul_f64(rand::thread_rng().gen_range(0.5..2.5));
        tokio::time::sleep(pause).await;
        let metrics = raft.metrics().borrow().clone();
        if metrics.state != ServerState::Candidate || metrics.current_term != split {
            continue;
        }
        tracing::info!(term = split, "the vote split with a rival candidate: standing again");
        if raft.trigger().elect().await.is_err() {
            return;
        }
    }
}

/// The role's name in statuses and metrics.
pub fn role_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}
