//! The user syncer: an actor that tells every worker about new users, in batches.
//!
//! Sign-in never waits for it: workers accept sessions of their current
//! generation without the user table, so the table only serves sessions that
//! outlive a reset, and a sign-in must not depend on a call to another node.
//! What the syncer guarantees instead is delivery: each worker has its own
//! queue, a batch holds every user queued since the last one (a burst of a
//! hundred sign-ins costs one call per worker, not a hundred connections), and
//! a batch that fails is sent again with back-off (20 ms doubling up to 1 s)
//! until the worker takes it or answers that it left the generation (a reset
//! carries the whole user table). Memory is bounded by the users created while a
//! worker is unreachable; a new generation drops the older queued users.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use shared::placement::Shard;
use shared::protocol::UserSync;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::worker_client::WorkerClient;

/// First pause after a failed sync.
const FIRST_BACKOFF: Duration = Duration::from_millis(20);
/// Longest pause between attempts while a worker is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Users waiting to reach one worker.
#[derive(Default)]
struct Queue {
    generation: u64,
    users: Vec<String>,
}

/// Cheap-clone handle: [`UserSyncer::add`] queues a user for every worker.
#[derive(Clone)]
pub struct UserSyncer {
    shared: Arc<Shared>,
}

struct Shared {
    /// One queue per worker; std-style locks held only to push or swap a vector.
    queues: Vec<Mutex<Queue>>,
    /// One wake-up per worker's sender task.
    wake: Vec<Notify>,
}

impl UserSyncer {
    pub fn new(workers: usize) -> UserSyncer {
        UserSyncer {
            shared: Arc::new(Shared {
                queues: (0..workers).map(|_| Mutex::new(Queue::default())).collect(),
                wake: (0..workers).map(|_| Notify::new()).collect(),
            }),
        }
    }

    /// Queues `user` of `generation` for every worker (never blocks on the network).
    pub fn add(&self, generation: u64, user: &str) {
        for (queue, wake) in self.shared.queues.iter().zip(&self.shared.wake) {
            let mut queue = queue.lock();
            if queue.generation != generation {
                // Users of an older generation are in the new one's reset already or gone with it.
                *queue = Queue {
                    generation,
                    users: Vec::new(),
                };
            }
            queue.users.push(user.to_owned());
            drop(queue);
            wake.notify_one();
        }
    }

    /// Users still waiting for `shard`'s worker (for tests and metrics).
    pub fn queued(&self, shard: Shard) -> usize {
        self.shared.queues[shard.index()].lock().users.len()
    }

    /// Runs one sender per worker until `cancel` fires.
    pub async fn run(self, workers: WorkerClient, cancel: CancellationToken) {
        let senders = Shard::ALL.into_iter().map(|shard| {
            let (syncer, workers, cancel) = (self.clone(), workers.clone(), cancel.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = syncer.send_forever(shard, &workers) => {}
                    () = cancel.cancelled() => {}
                }
            })
        });
        for sender in senders.collect::<Vec<_>>() {
            let _ = sender.await;
        }
    }

    async fn send_forever(&self, shard: Shard, workers: &WorkerClient) {
        let index = shard.index();
        let mut failures = 0u64;
        let mut backoff = FIRST_BACKOFF;
        loop {
            self.shared.wake[index].notified().await;
            loop {
                let batch = {
                    let mut queue = self.shared.queues[index].lock();
                    UserSync {
                        generation: queue.generation,
                        users: std::mem::take(&mut queue.users),
                    }
                };
                if batch.users.is_empty() {
                    break;
                }
                match workers.sync_users(shard, &batch).await {
                    Ok(()) => {
                        if failures > 0 {
                            tracing::info!(shard = shard.name(), failures, "user sync recovered");
                        }
                        failures = 0;
                        backoff = FIRST_BACKOFF;
                    }
                    Err(error) if error.is_transient() => {
                        failures += 1;
                        if failures == 1 || failures.is_multiple_of(10) {
                            tracing::warn!(%error, shard = shard.name(), failures, "user sync failed; will retry");
                        }
                        self.requeue(index, batch);
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                    // The worker left that generation: its reset carried the users.
                    Err(error) => tracing::info!(%error, shard = shard.name(), "user sync dropped"),
                }
            }
        }
    }

    /// Puts a failed batch back in front of what was queued meanwhile (same generation only).
    fn requeue(&self, index: usize, batch: UserSync) {
        let mut queue = self.shared.queues[index].lock();
        if queue.generation == batch.generation {
            let newer = std::mem::replace(&mut queue.users, batch.users);
            queue.users.extend(newer);
        }
    }
}
