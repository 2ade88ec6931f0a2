//! Three replicas over real loopback sockets: a leader is elected, writes reach every
//! replica, a dead leader is replaced and the restarted replica catches up; the RPC routes
//! refuse what is not a replica's call.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use common::Recorder;
use consensus::{Command, NodeId, Replica, ReplicaOptions};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const SECRET: &str = "group-test-secret";

struct Running {
    replica: Replica<Recorder>,
    server: JoinHandle<()>,
}

struct Group {
    directories: Vec<TempDir>,
    addresses: BTreeMap<NodeId, String>,
    listeners: BTreeMap<NodeId, std::net::SocketAddr>,
    running: BTreeMap<NodeId, Running>,
    /// Per replica: how many of the next vote requests it gets arrive [`HELD_VOTE`] late.
    late_votes: BTreeMap<NodeId, Arc<AtomicU32>>,
}

/// How late a held vote request arrives.
const HELD_VOTE: Duration = Duration::from_millis(300);

/// Holds a vote request back while the replica's count of late votes is above zero.
async fn hold_late_votes(
    State(late): State<Arc<AtomicU32>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let vote = request.uri().path() == consensus::network::VOTE;
    if vote
        && late
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    {
        tokio::time::sleep(HELD_VOTE).await;
    }
    next.run(request).await
}

impl Group {
    async fn start() -> Group {
        let mut addresses = BTreeMap::new();
        let mut listeners = BTreeMap::new();
        for id in 1..=3u64 {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let address = listener.local_addr().unwrap();
            addresses.insert(id, format!("http://{address}"));
            listeners.insert(id, address);
        }
        let mut group = Group {
            directories: (0..3).map(|_| TempDir::new().unwrap()).collect(),
            addresses,
            listeners,
            running: BTreeMap::new(),
            late_votes: (1..=3).map(|id| (id, Arc::default())).collect(),
        };
        for id in 1..=3 {
            group.start_replica(id).await;
        }
        group
    }

    async fn start_replica(&mut self, id: NodeId) {
        let options = ReplicaOptions {
            id,
            members: self.addresses.clone(),
            data_dir: Some(self.directories[id as usize - 1].path().to_owned()),
            fsync: shared::wal::FsyncPolicy::Always,
            secret: SECRET.into(),
            snapshot_every: 50,
            heartbeat_ms: consensus::DEFAULT_HEARTBEAT_MS,
        };
        let replica = Replica::start(options, Arc::new(Recorder::default())).await.unwrap();
        let routes = consensus::network::routes(replica.raft.clone(), SECRET).layer(
            axum::middleware::from_fn_with_state(self.late_votes[&id].clone(), hold_late_votes),
        );
        // The port was free a moment ago (the same one after a restart): bind it again.
        let listener = loop {
            match TcpListener::bind(self.listeners[&id]).await {
                Ok(listener) => break listener,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let server = tokio::spawn(async move {
            axum::serve(listener, routes).await.unwrap();
        });
        self.running.insert(id, Running { replica, server });
    }

    async fn kill(&mut self, id: NodeId) {
        let running = self.running.remove(&id).expect("running");
        running.server.abort();
        let _ = running.server.await;
        running.replica.shutdown().await;
    }

    /// The leader every running replica names, once they agree.
    async fn leader(&self) -> NodeId {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let named: Vec<Option<NodeId>> = self
                .running
                .values()
                .map(|running| running.replica.status().leader)
                .collect();
            if let Some(Some(leader)) = named.first() {
                if self.running.contains_key(leader) && named.iter().all(|named| named == &Some(*leader)) {
                    return *leader;
                }
            }
            assert!(tokio::time::Instant::now() < deadline, "no agreed leader: {named:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn write(&self, leader: NodeId, text: &str) {
        self.running[&leader]
            .replica
            .raft
            .client_write(Command(text.as_bytes().to_vec()))
            .await
            .unwrap();
    }

    /// Waits until every running replica has applied `expected`, in order.
    async fn converged(&self, expected: &[Vec<u8>]) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let all = self
                .running
                .values()
                .all(|running| *running.replica.applier().applied.lock() == expected);
            if all {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "the replicas did not converge");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leader_is_replaced_and_the_restarted_replica_catches_up() {
    let mut group = Group::start().await;
    let mut expected = Vec::new();
    let first = group.leader().await;
    for serial in 0..30 {
        let text = format!("before {serial}");
        group.write(first, &text).await;
        expected.push(text.into_bytes());
    }
    group.converged(&expected).await;

    // A follower refuses a write and names the leader.
    let follower = *group.running.keys().find(|id| **id != first).unwrap();
    let refused = group.running[&follower]
        .replica
        .raft
        .client_write(Command(b"to a follower".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(
        refused.forward_to_leader().and_then(|forward| forward.leader_id),
        Some(first)
    );
    // Its proposer forwards the command to the leader and returns once it applied it too.
    let proposer = group.running[&follower].replica.proposer();
    let index = proposer.propose(b"through a follower".to_vec()).await.unwrap();
    expected.push(b"through a follower".to_vec());
    assert!(group.running[&follower].replica.status().applied_index >= index);
    assert_eq!(
        group.running[&follower].replica.applier().applied.lock().last(),
        expected.last()
    );
    group.converged(&expected).await;

    let term_before = group.running[&first].replica.status().term;
    group.kill(first).await;
    let second = group.leader().await;
    assert_ne!(second, first);
    assert!(group.running[&second].replica.status().term > term_before);
    // 60 more: past a snapshot (every 50), so the restarted replica may get one.
    for serial in 0..60 {
        let text = format!("after {serial}");
        group.write(second, &text).await;
        expected.push(text.into_bytes());
    }
    group.converged(&expected).await;

    group.start_replica(first).await;
    group.converged(&expected).await;
    let statuses: Vec<_> = group.running.values().map(|running| running.replica.status()).collect();
    assert!(
        statuses.iter().all(|status| status.members == vec![1, 2, 3]),
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|status| status.leader == Some(second)),
        "{statuses:?}"
    );
    for id in [1, 2, 3] {
        group.kill(id).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_candidates_split_in_every_term_by_their_timers_still_elect_a_leader() {
    let mut group = Group::start().await;
    let first = group.leader().await;
    let dead_leaders_term = group.running[&first].replica.status().term;
    let survivors: Vec<NodeId> = group.running.keys().copied().filter(|id| *id != first).collect();
    let (early, late) = (survivors[0], survivors[1]);
    // Their own timers off: they stand for no term but the one they are told to, as two
    // candidates whose timers fire together would stand for every term together.
    for id in &survivors {
        group.running[id].replica.raft.runtime_config().elect(false);
    }
    group.kill(first).await;

    // The first stands; its vote request reaches the second only after the second stood for
    // the same term, so each refuses the other.
    group.late_votes[&late].store(1, Ordering::SeqCst);
    group.running[&early].replica.raft.trigger().elect().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while group.running[&early].replica.status().term <= dead_leaders_term {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first survivor did not stand"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    group.running[&late].replica.raft.trigger().elect().await.unwrap();

    let leader = group.leader().await;
    assert!(survivors.contains(&leader));
    let term = group.running[&leader].replica.status().term;
    assert!(
        term >= dead_leaders_term + 2,
        "elected in term {term}: the vote of term {} did not split",
        dead_leaders_term + 1
    );
    let expected = vec![b"after the split".to_vec()];
    group.write(leader, "after the split").await;
    group.converged(&expected).await;
    for id in survivors {
        group.kill(id).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rpc_routes_refuse_a_missing_secret_a_malformed_body_and_an_oversized_one() {
    let group = Group::start().await;
    let client = reqwest::Client::new();
    let url = format!("{}{}", group.addresses[&1], consensus::network::VOTE);
    let answer = client.post(&url).body("{}").send().await.unwrap();
    assert_eq!(answer.status(), 401);
    let answer = client
        .post(&url)
        .header(shared::protocol::SECRET_HEADER, "wrong")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);
    for body in ["", "{}", "not json", "{\"vote\": 7}"] {
        let answer = client
            .post(&url)
            .header(shared::protocol::SECRET_HEADER, SECRET)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 400, "{body:?}");
        assert!(answer.text().await.unwrap().starts_with("malformed raft request"));
    }
    let append = format!("{}{}", group.addresses[&1], consensus::network::APPEND);
    let answer = client
        .post(&append)
        .header(shared::protocol::SECRET_HEADER, SECRET)
        .body(vec![b' '; consensus::network::MAX_RPC_BYTES + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 413);
    let propose = format!("{}{}", group.addresses[&1], consensus::network::PROPOSE);
    let answer = client.post(&propose).body("command").send().await.unwrap();
    assert_eq!(answer.status(), 401, "a command needs the secret");
    // The group is still whole.
    group.leader().await;
}

/// Only a group of one may keep its log in memory: a replica of a larger group that forgot
/// its vote and log on a restart could help elect a leader without entries it acknowledged.
#[tokio::test]
async fn a_replica_of_a_larger_group_needs_a_data_directory() {
    let members: BTreeMap<NodeId, String> = (1..=3).map(|id| (id, format!("http://127.0.0.1:{}", 9 + id))).collect();
    let options = |members: BTreeMap<NodeId, String>| ReplicaOptions {
        id: 1,
        members,
        data_dir: None,
        fsync: shared::wal::FsyncPolicy::Always,
        secret: SECRET.into(),
        snapshot_every: 50,
        heartbeat_ms: consensus::DEFAULT_HEARTBEAT_MS,
    };
    let refused = Replica::start(options(members.clone()), Arc::new(Recorder::default())).await;
    let error = refused.err().expect("three replicas in memory are refused").to_string();
    assert!(error.contains("data directory"), "{error}");
    // A group of one in memory starts and leads.
    let alone = Replica::start(
        options(members.into_iter().take(1).collect()),
        Arc::new(Recorder::default()),
    )
    .await
    .expect("a group of one keeps its log in memory");
    let mut metrics = alone.raft.metrics();
    tokio::time::timeout(Duration::from_secs(5), async {
        while metrics.borrow().state != openraft::ServerState::Leader {
            metrics.changed().await.unwrap();
        }
    })
    .await
    .expect("it leads within 5 s");
    alone.shutdown().await;
}
