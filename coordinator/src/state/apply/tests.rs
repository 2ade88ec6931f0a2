//! The one write path as a property: the same commands give the same state, whether applied
//! directly, through a lone coordinator's log, through three replicas' log, or replayed from
//! a data directory after a restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shared::migration::{Event, Migration, Subject};
use shared::placement_map::{Cell, PlacementMap};

use super::super::command::{Command, LoggedIsu, Snapshot, Unfinished};
use super::super::{Placement, Start, State};
use super::StateApplier;
use crate::worker_client::WorkerClient;
use consensus::Applier as _;

const SECRET: &str = "apply-test-secret-0123456789";

fn cells() -> Vec<Cell> {
    ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(index, name)| Cell {
            name: (*name).to_owned(),
            // Nothing listens there: no command applied here calls a worker.
            internal_url: format!("http://127.0.0.1:{}", 9 + index),
            device_url: format!("http://device-{name}"),
        })
        .collect()
}

/// A coordinator's state before its log gives it anything (a generation and map of its own).
fn fresh_state() -> Arc<State> {
    let placement = Placement::new(&cells(), None, Vec::new(), None, SECRET).unwrap();
    let workers = WorkerClient::new(placement.map().cells(), SECRET).unwrap();
    Arc::new(State::new(
        crate::state::seed::Seed::held(shared::dataset::Dataset::default()),
        Bytes::from_static(b"default icon"),
        shared::session::SessionKey::from_secret(SECRET),
        workers,
        placement,
        Start::Fresh {
            jia_service_url: "http://jia".into(),
        },
    ))
}

/// A random but valid history of commands from `seed`: a first snapshot, then users, ISUs
/// (some with icons, some sent again), removals, abandoned registrations, map changes,
/// migration steps, commands of another generation and now and then a new generation.
fn history(seed: u64, length: usize) -> Vec<Command> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut map = PlacementMap::new(cells()).unwrap();
    map.new_lineage();
    let mut generation = rng.gen_range(1..u64::MAX / 2) | 1;
    let snapshot = |generation: u64, map: &PlacementMap| {
        Command::Snapshot(Snapshot {
            generation,
            jia_service_url: format!("http://jia-{generation}"),
            users: vec!["isucon".into()],
            placement: Some(map.clone()),
            ..Snapshot::default()
        })
    };
    let mut commands = vec![snapshot(generation, &map)];
    let mut next_id = 1_000;
    let mut migrations: BTreeMap<u64, Migration> = BTreeMap::new();
    while commands.len() < length {
        let uuid = format!("{:x}{:031x}", rng.gen_range(0..16), rng.gen_range(0..40u32));
        let command = match rng.gen_range(0..100) {
            0..=2 => {
                generation += 2;
                snapshot(generation, &map)
            }
            3..=24 => Command::User {
                generation,
                user: format!("user-{}", rng.gen_range(0..30)),
            },
            25..=54 => {
                next_id += 1;
                let icon: u8 = rng.gen_range(0..3);
                Command::Isu {
                    // One in ten raced an `/initialize`.
                    generation: if rng.gen_ratio(1, 10) {
                        generation + 1
                    } else {
                        generation
                    },
                    isu: LoggedIsu {
                        id: next_id,
                        uuid: uuid.clone(),
                        name: format!("isu {next_id}"),
                        character: "いじっぱり".into(),
                        owner: format!("user-{}", rng.gen_range(0..30)),
                        image: (icon == 1).then(|| Bytes::from(vec![icon; 64])),
                        icon: None,
                    },
                    request: rng.gen_bool(0.5).then(|| format!("request-{next_id}")),
                }
            }
            55..=64 => Command::Removed { generation, uuid },
            65..=69 => Command::Abandoned {
                generation,
                registrations: vec![Unfinished {
                    uuid,
                    id: next_id,
                    owner: "user-1".into(),
                    accepted: false,
                    request: Some(format!("request-{next_id}")),
                }],
            },
            70..=84 => {
                let slot = rng.gen_range(0..=255u8);
                map.assign_slot(slot, rng.gen_range(0..3)).unwrap();
                if rng.gen_ratio(1, 4) {
                    map.pin(&uuid, rng.gen_range(0..3)).unwrap();
                }
                Command::Map(map.clone())
            }
            _ => {
                let id = rng.gen_range(1..6u64);
                let migration = match migrations.get(&id) {
                    Some(migration) => {
                        let event = [Event::CloneStarted, Event::CaughtUp, Event::Failed][rng.gen_range(0..3)];
                        migration.apply(event).unwrap_or_else(|_| migration.clone())
                    }
                    None => Migration::plan(id, Subject::Slot(rng.gen_range(0..=255)), 0, 1).unwrap(),
                };
                migrations.insert(id, migration.clone());
                Command::Migration(migration)
            }
        };
        commands.push(command);
    }
    commands
}

/// Applies `commands` as the log would hand them over: encoded, then decoded.
fn apply_all(state: &State, commands: &[Command]) {
    for command in commands {
        state.apply(Command::decode(&command.encode()).expect("a command decodes"));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_same_commands_give_two_fresh_states_the_same_hash(seed in any::<u64>(), length in 1usize..120) {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let _entered = runtime.enter();
        let commands = history(seed, length);
        let (first, second) = (fresh_state(), fresh_state());
        prop_assert_ne!(first.state_hash(), second.state_hash(), "two fresh states differ before");
        apply_all(&first, &commands);
        apply_all(&second, &commands);
        prop_assert_eq!(first.state_hash(), second.state_hash());
        // A snapshot of the result, taken by a third fresh state, is the same state.
        let third = fresh_state();
        third.apply(first.snapshot_command());
        prop_assert_eq!(third.state_hash(), first.state_hash());
        // Applying any command again changes nothing.
        if let Some(command) = commands.last() {
            first.apply(command.clone());
            prop_assert_eq!(first.state_hash(), second.state_hash());
        }
    }

    #[test]
    fn a_replay_that_builds_its_generation_at_the_end_gives_the_same_state(
        seed in any::<u64>(),
        length in 1usize..120,
        cut in any::<prop::sample::Index>(),
    ) {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let _entered = runtime.enter();
        let commands = history(seed, length);
        let (direct, replayed) = (fresh_state(), fresh_state());
        // A snapshot taken during the replay holds what was applied up to it.
        let cut = cut.index(commands.len());
        apply_all(&direct, &commands[..cut]);
        replayed.begin_replay();
        apply_all(&replayed, &commands[..cut]);
        // (Before the history's first snapshot, two fresh states differ: their own generations.)
        if cut > 0 {
            let during = fresh_state();
            during.apply(Command::decode(&StateApplier::new(&replayed).snapshot()).unwrap());
            prop_assert_eq!(during.state_hash(), direct.state_hash(), "a snapshot during the replay");
        }
        apply_all(&direct, &commands[cut..]);
        apply_all(&replayed, &commands[cut..]);
        replayed.end_replay();
        prop_assert_eq!(replayed.state_hash(), direct.state_hash());
        prop_assert_eq!(replayed.placement.migrations(), direct.placement.migrations());
        prop_assert_eq!(&*replayed.jia_service_url.read(), &*direct.jia_service_url.read());
        prop_assert_eq!(replayed.is_established(), direct.is_established());
    }
}

/// One replica running: its state, its raft, and its routes served on its port.
struct Running {
    state: Arc<State>,
    replica: consensus::Replica<StateApplier>,
    server: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn start(id: u64, members: &BTreeMap<u64, String>, data_dir: Option<&std::path::Path>) -> Running {
        let state = fresh_state();
        let options = consensus::ReplicaOptions {
            id,
            members: members.clone(),
            data_dir: data_dir.map(std::path::Path::to_owned),
            fsync: shared::wal::FsyncPolicy::Always,
            secret: SECRET.into(),
            // Often: a restart restores a snapshot and applies the log after it.
            snapshot_every: 7,
            heartbeat_ms: 50,
        };
        state.begin_replay();
        let replica = consensus::Replica::start(options, Arc::new(StateApplier::new(&state)))
            .await
            .unwrap();
        assert!(!state.replaying(), "the replica ended the replay before it started");
        state.log.attach(replica.proposer());
        let address = members[&id].trim_start_matches("http://").to_owned();
        let listener = loop {
            match tokio::net::TcpListener::bind(&address).await {
                Ok(listener) => break listener,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let routes = consensus::network::routes(replica.raft.clone(), SECRET);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, routes).await;
        });
        Running { state, replica, server }
    }

    async fn stop(self) {
        self.replica.shutdown().await;
        self.server.abort();
    }

    fn leads(&self) -> bool {
        self.state.is_leader()
    }
}

fn members(count: u64) -> BTreeMap<u64, String> {
    (1..=count)
        .map(|id| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            (id, format!("http://{}", listener.local_addr().unwrap()))
        })
        .collect()
}

/// Waits until one of `replicas` leads; its index.
async fn leader_of(replicas: &[Running]) -> usize {
    for _ in 0..400 {
        if let Some(index) = replicas.iter().position(Running::leads) {
            return index;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no replica leads after 10 s");
}

/// Waits until every one of `replicas` has applied `index`.
async fn all_applied(replicas: &[&Running], index: u64) {
    for replica in replicas {
        assert!(
            replica.replica.wait_applied(index, Duration::from_secs(10)).await,
            "replica {} applied {index} within 10 s",
            replica.replica.id
        );
    }
}

/// Proposes `commands` through the log of `replicas[leader]`, as handlers do.
async fn propose_all(replica: &Running, commands: &[Command]) {
    for command in commands {
        replica.state.log.propose(command).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_coordinators_log_gives_the_applied_hash_and_its_replay_from_disk_gives_the_live_one() {
    for seed in [1u64, 2, 3] {
        let commands = history(seed, 60);
        let direct = fresh_state();
        apply_all(&direct, &commands);

        let directory = tempfile::tempdir().unwrap();
        let members = members(1);
        let lone = Running::start(1, &members, Some(directory.path())).await;
        leader_of(std::slice::from_ref(&lone)).await;
        propose_all(&lone, &commands).await;
        assert_eq!(
            lone.state.state_hash(),
            direct.state_hash(),
            "seed {seed}: through the log"
        );
        let live = lone.state.state_hash();
        let last = lone.replica.status().applied_index;
        lone.stop().await;

        let restarted = Running::start(1, &members, Some(directory.path())).await;
        leader_of(std::slice::from_ref(&restarted)).await;
        all_applied(&[&restarted], last).await;
        assert_eq!(restarted.state.state_hash(), live, "seed {seed}: replayed from disk");
        restarted.stop().await;

        // Without a data directory the same log gives the same state.
        let in_memory = Running::start(1, &self::members(1), None).await;
        leader_of(std::slice::from_ref(&in_memory)).await;
        propose_all(&in_memory, &commands).await;
        assert_eq!(in_memory.state.state_hash(), live, "seed {seed}: in memory");
        in_memory.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_end_at_the_applied_hash_and_a_restarted_one_replays_it_from_disk() {
    let commands = history(11, 60);
    let direct = fresh_state();
    apply_all(&direct, &commands);

    let directories: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let members = members(3);
    let mut replicas = Vec::new();
    for id in 1..=3u64 {
        replicas.push(Running::start(id, &members, Some(directories[id as usize - 1].path())).await);
    }
    let leader = leader_of(&replicas).await;
    // Half through a follower (forwarded to the leader), half through the leader.
    let follower = (leader + 1) % 3;
    let (first, second) = commands.split_at(commands.len() / 2);
    propose_all(&replicas[follower], first).await;
    propose_all(&replicas[leader], second).await;
    let last = replicas[leader].replica.status().applied_index;
    all_applied(&replicas.iter().collect::<Vec<_>>(), last).await;
    for replica in &replicas {
        assert_eq!(
            replica.state.state_hash(),
            direct.state_hash(),
            "replica {}",
            replica.replica.id
        );
    }

    // A follower restarted from its data directory replays to the same state.
    let restarted_id = replicas[follower].replica.id;
    let stopped = replicas.remove(follower);
    stopped.stop().await;
    let restarted = Running::start(
        restarted_id,
        &members,
        Some(directories[restarted_id as usize - 1].path()),
    )
    .await;
    all_applied(&[&restarted], last).await;
    assert_eq!(restarted.state.state_hash(), direct.state_hash(), "restarted replica");
    restarted.stop().await;
    for replica in replicas {
        replica.stop().await;
    }
}
