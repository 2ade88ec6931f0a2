//! The user syncer: an actor that tells every worker about new users, in batches.
//!
//! Sign-in never waits for it: workers accept sessions of their current
//! generation without the user table, so the table only serves sessions that
//! outlive a reset, and a sign-in must not depend on a call to another node.
//! What the syncer guarantees instead is delivery: each worker has its own
//! queue, a batch holds every user queued since the last one (a burst of a
//! hundred sign-ins costs one call per worker, not a hundred connections), and
//! a batch that fails is sent again with back-off (20 ms doubling up to 1 s)
//! until the worker takes it, or until its generation is no longer the
//! coordinator's current one (the next reset carries the whole user table). A
//! worker that answers 412 (another generation) has not applied the current reset
//! yet, so that batch is retried too. Memory is bounded by the users created while
//! a worker is unreachable; a new generation drops the older queued users, and a
//! user of an older generation (a sign-in that raced `/initialize`) is not queued.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use reqwest::StatusCode;
use shared::backoff::Backoff;
use shared::placement_map::CellId;
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

/// The coordinator's current generation id, as the syncer asks for it.
pub type CurrentGeneration = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Cheap-clone handle: [`UserSyncer::add`] queues a user for every worker.
#[derive(Clone)]
pub struct UserSyncer {
    shared: Arc<Shared>,
}

struct Shared {
    current: CurrentGeneration,
    /// One queue per worker; std-style locks held only to push or swap a vector.
    queues: Vec<Mutex<Queue>>,
    /// One wake-up per worker's sender task.
    wake: Vec<Notify>,
}

impl UserSyncer {
    pub fn new(workers: usize, current: CurrentGeneration) -> UserSyncer {
        UserSyncer {
            shared: Arc::new(Shared {
                current,
                queues: (0..workers).map(|_| Mutex::new(Queue::default())).collect(),
                wake: (0..workers).map(|_| Notify::new()).collect(),
            }),
        }
    }

    /// Queues `user` of `generation` for every worker (never blocks on the network); a user
    /// of a generation that is no longer current is not queued.
    pub fn add(&self, generation: u64, user: &str) {
        for (queue, wake) in self.shared.queues.iter().zip(&self.shared.wake) {
            let mut queue = queue.lock();
            // Checked under the queue's lock: an add of the old generation cannot reset a
            // queue that already holds the new one's users.
            if generation != (self.shared.current)() {
                return;
            }
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

    /// Users still waiting for `cell`'s worker (for tests and metrics).
    pub fn queued(&self, cell: CellId) -> usize {
        self.shared.queues[usize::from(cell)].lock().users.len()
    }

    /// Runs one sender per worker until `cancel` fires.
    pub async fn run(self, workers: WorkerClient, cancel: CancellationToken) {
        let senders = workers.cells().collect::<Vec<_>>().into_iter().map(|cell| {
            let (syncer, workers, cancel) = (self.clone(), workers.clone(), cancel.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = syncer.send_forever(cell, &workers) => {}
                    () = cancel.cancelled() => {}
                }
            })
        });
        for sender in senders.collect::<Vec<_>>() {
            let _ = sender.await;
        }
    }

    async fn send_forever(&self, cell: CellId, workers: &WorkerClient) {
        let index = usize::from(cell);
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
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
                match workers.sync_users(cell, &batch).await {
                    Ok(()) => {
                        let failures = backoff.succeeded();
                        if failures > 0 {
                            tracing::info!(worker = workers.role(cell), failures, "user sync recovered");
                        }
                    }
                    // Transient, or the worker has not applied the current reset yet.
                    Err(error)
                        if (error.is_transient() || error.status() == Some(StatusCode::PRECONDITION_FAILED))
                            && batch.generation == (self.shared.current)() =>
                    {
                        let failure = backoff.failed();
                        if failure.log {
                            tracing::warn!(%error, worker = workers.role(cell), failures = failure.failures, "user sync failed; will retry");
                        }
                        self.requeue(index, batch);
                        tokio::time::sleep(failure.pause).await;
                    }
                    // Refused, or the generation is over: the next reset carries the users.
                    Err(error) => tracing::info!(%error, worker = workers.role(cell), "user sync dropped"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn users_of_the_current_generation_are_queued_for_every_worker_and_older_ones_are_not() {
        let current = Arc::new(AtomicU64::new(7));
        let reader = current.clone();
        let syncer = UserSyncer::new(2, Arc::new(move || reader.load(Ordering::SeqCst)));
        syncer.add(7, "alice");
        syncer.add(7, "bob");
        assert_eq!((syncer.queued(0), syncer.queued(1)), (2, 2));

        // `/initialize` swapped in generation 9: a sign-in of 7 that raced it is not queued and
        // does not reset the queue of 9.
        current.store(9, Ordering::SeqCst);
        syncer.add(9, "carol");
        assert_eq!(syncer.queued(0), 1, "the new generation's queue replaces the old one");
        syncer.add(7, "late");
        assert_eq!((syncer.queued(0), syncer.queued(1)), (1, 1));
    }
}
