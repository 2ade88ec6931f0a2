//! Worker sync: brings the workers to the coordinator's generation when a replica takes the
//! lead (or lets a worker that kept it push its latest conditions again), and resets a
//! worker that lost its state with its shard as the coordinator knows it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shared::dataset::Dataset;
use shared::placement_map::{CellId, PlacementMap};
use shared::protocol::{ConditionsRef, ResetShardRef, ShardIsuRef, WireCondition};

use super::generation::Generation;
use super::State;

/// Workers brought up at once. Each reset is written and parsed on the machines' cores: 64
/// cells at a million ISUs at once left a 2-core machine too busy to answer a 1 s call.
const RESETS_AT_ONCE: usize = 4;

/// How often the coordinator checks that the workers still hold the current generation.
const WORKER_WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// How often the leader asks every worker for the registrations it holds
/// provisionally that no registration in flight here owns, and ends them (see
/// [`State::end_registrations_held_by`]): one left behind by a step that failed while this
/// replica led (a publish or a rollback its worker did not answer, a commit that timed out)
/// or sent by a deposed leader to a worker that had restarted and forgotten its fence.
const REGISTRATION_SWEEP_EVERY: Duration = Duration::from_secs(10);

impl State {
    /// Resets a worker to `generation`; with `keep_current`, a worker that already holds it
    /// (an earlier leader, or this coordinator before a restart, brought it there) keeps its
    /// data and pushes its latest conditions again instead (this node may lack them).
    async fn bring_worker_up(
        &self,
        generation: &Arc<Generation>,
        cell: CellId,
        keep_current: bool,
    ) -> anyhow::Result<()> {
        // The map first: from its reset on, the worker forwards what it does not own.
        self.workers.placement(cell, &self.placement.map_for_workers()).await?;
        if keep_current && self.workers.health(cell).await?.generation == generation.id {
            self.workers.resend_latest(cell, generation.id).await?;
            tracing::info!(
                worker = self.workers.role(cell),
                "worker kept its data; its latest conditions are pushed again"
            );
            return Ok(());
        }
        self.reset_worker(generation, cell).await
    }

    /// Brings every worker to `generation` (see [`State::bring_worker_up`]).
    pub(super) async fn reset_workers(&self, generation: &Arc<Generation>, keep_current: bool) -> anyhow::Result<()> {
        self.reset_each_worker(generation, keep_current)
            .await
            .into_iter()
            .try_for_each(|(_, result)| result)
    }

    /// [`State::reset_workers`], with each cell's outcome.
    pub(super) async fn reset_each_worker(
        &self,
        generation: &Arc<Generation>,
        keep_current: bool,
    ) -> Vec<(CellId, anyhow::Result<()>)> {
        use futures_util::StreamExt;
        let cells: Vec<CellId> = self.workers.cells().collect();
        let results: Vec<anyhow::Result<()>> = futures_util::stream::iter(cells.clone())
            .map(|cell| self.bring_worker_up(generation, cell, keep_current))
            .buffered(RESETS_AT_ONCE)
            .collect()
            .await;
        cells.into_iter().zip(results).collect()
    }

    /// Sends a worker the ISUs of `generation` its cell owns in the current map.
    async fn reset_worker(&self, generation: &Arc<Generation>, cell: CellId) -> anyhow::Result<()> {
        let (seed, generation, map) = (self.seed.clone(), generation.clone(), self.placement.map());
        let body = tokio::task::spawn_blocking(move || reset_body(&seed.load(), &generation, &map, cell)).await??;
        Ok(self.workers.reset(cell, body).await?)
    }

    /// Watches the workers' generation and resets a worker that lost its state
    /// (restarted) with its shard as the coordinator knows it: the dataset's
    /// conditions, every registered ISU, and the latest condition of each. Reads
    /// then work again at once; conditions posted since the dataset are gone with
    /// the worker's memory, except each ISU's latest.
    pub async fn watch_workers(&self) {
        let mut ticker = tokio::time::interval(WORKER_WATCH_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut swept_at = tokio::time::Instant::now();
        // Cells whose worker did not answer since their last sweep: swept as soon as it
        // answers, so a publish it missed meanwhile (the ISU is registered already, see
        // `State::activate_and_publish`) reaches it then, not up to a sweep interval later.
        let mut unanswered = std::collections::BTreeSet::new();
        loop {
            ticker.tick().await;
            let sweep_due = swept_at.elapsed() >= REGISTRATION_SWEEP_EVERY;
            if sweep_due {
                swept_at = tokio::time::Instant::now();
            }
            // A registration awaiting its acceptance is finished at the next round once its
            // old leader gives the worker the acceptance, not a sweep interval later.
            let awaiting = self.cells_awaiting_acceptance(self.generation().id);
            for cell in self.workers.cells() {
                // Asked under the lock, so an `/initialize` in progress is not mistaken for a restart.
                let _resetting = self.reset_lock.lock().await;
                let Ok(health) = self.workers.health(cell).await else {
                    unanswered.insert(cell);
                    continue; // down: it is reset (or swept) when it answers again
                };
                let map = self.placement.map_for_workers();
                if health.map_version < map.version() {
                    if let Err(error) = self.workers.placement(cell, &map).await {
                        tracing::warn!(%error, "sending the placement map failed");
                    }
                }
                let generation = self.generation();
                if health.generation == generation.id {
                    let left = self.registrations_left.lock().contains(&cell);
                    // A worker that restarted forgot the newest term (a deposed leader's call
                    // would pass): the sweep's call raises it again, and ends what passed.
                    let unfenced = self.leading_term().is_some_and(|term| health.fence_term < term);
                    if left || sweep_due || unfenced || unanswered.contains(&cell) || awaiting.contains(&cell) {
                        // It did not answer when this replica took over or since its last
                        // sweep, it forgot the term, it holds a registration awaiting its
                        // acceptance, or it is its turn.
                        if let Ok(ended) = self
                            .sweep_registrations(&generation, cell, super::registration::Sweep::MayWait)
                            .await
                        {
                            self.registrations_left.lock().remove(&cell);
                            unanswered.remove(&cell);
                            if left || ended > 0 {
                                tracing::info!(
                                    ended,
                                    worker = self.workers.role(cell),
                                    "ended the registrations a worker held provisionally"
                                );
                            }
                        }
                    }
                    continue;
                }
                // Reset: the registrations it held are gone.
                self.registrations_left.lock().remove(&cell);
                unanswered.remove(&cell);
                tracing::warn!(
                    worker = self.workers.role(cell),
                    worker_generation = health.generation,
                    "worker lost its state; resetting it"
                );
                if let Err(error) = self.reset_worker(&generation, cell).await {
                    tracing::error!(%error, worker = self.workers.role(cell), "resetting a worker failed");
                }
            }
        }
    }
}

/// A worker's reset body: the ISUs its cell owns in `map`, with the dataset's conditions and
/// each ISU's latest known condition, and every user of `generation`.
/// Written from borrowed parts (the ISUs as they are, the dataset's conditions where they
/// lie), so a reset costs its JSON and no copy of the shard.
fn reset_body(dataset: &Dataset, generation: &Generation, map: &PlacementMap, cell: CellId) -> anyhow::Result<Bytes> {
    // The cell's ISUs with their latest conditions now, so registrations are not held up
    // while the JSON is written.
    let owned: Vec<(Arc<super::Isu>, Option<WireCondition>)> = generation
        .all
        .read()
        .iter()
        .filter(|isu| map.owner(&isu.uuid) == cell)
        .map(|isu| {
            let latest = isu.latest().map(|latest| WireCondition {
                timestamp: latest.timestamp,
                flags: latest.flags,
                message: latest.message.into_string(),
            });
            (isu.clone(), latest)
        })
        .collect();
    let isus = owned.iter().map(|(isu, latest)| {
        // The dataset's ISUs are in id order.
        let known = dataset
            .isus
            .binary_search_by_key(&isu.id, |known| known.id)
            .ok()
            .map(|index| &dataset.isus[index])
            .filter(|known| *known.uuid == *isu.uuid)
            .map_or(&[][..], |known| &known.conditions[..]);
        let then = latest
            .as_ref()
            .filter(|latest| known.last().is_none_or(|last| last.timestamp < latest.timestamp));
        ShardIsuRef {
            id: isu.id,
            uuid: &isu.uuid,
            owner: &isu.owner,
            name: &isu.name,
            character: &isu.character,
            conditions: ConditionsRef {
                known,
                then: then.cloned(),
            },
        }
    });
    let mut users: Vec<String> = generation.users.read().iter().cloned().collect();
    users.sort();
    Ok(Bytes::from(serde_json::to_vec(&ResetShardRef {
        generation: generation.id,
        users: &users,
        isus,
    })?))
}
