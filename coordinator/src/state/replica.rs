//! A replica's roles in its group (every coordinator is one; a lone coordinator is a group
//! of one, whose replica leads as soon as it starts): the leader acts on the workers, the
//! router and JIA; a follower keeps its soft state whole. Both apply the same committed
//! commands ([`super::apply`]).
//!
//! A new group has no generation yet: each replica starts with one drawn from the dataset
//! (or the one of a journal being converted), and the first leader proposes a snapshot of
//! its own ([`State::lead`]), which every replica adopts. A replica is `established` once it
//! has applied a snapshot.
//!
//! While a replica leads ([`State::lead`]) it brings the workers to the generation (a worker
//! that holds it keeps its data), tells them every user again (the old leader's queue died
//! with it), ends the registrations an old leader left, finishes or rolls back the
//! migrations it finds unfinished, keeps the router's map and watches the workers. It stops
//! all of that when it stops leading. A follower pulls every worker's latest conditions once
//! per generation it adopts (they are soft state that no log holds) and serves only then;
//! the workers' pushes bring every later change.

use shared::placement_map::CellId;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::command::Command;
use super::State;

/// A starting replica serves this long after its pull at the earliest (see `lead`).
const PUSHES_RESUMED_AFTER: Duration = Duration::from_millis(1200);

/// How often the stall watchdog runs, and the gap between two runs that counts as a stall.
const WATCHDOG_EVERY: Duration = Duration::from_millis(100);
const STALL: Duration = Duration::from_secs(1);

/// A replica's stall watchdog: when it last ran, and whether it found a stall the replica
/// has not answered yet. A replica stopped (SIGSTOP) or starved of CPU for longer than
/// [`STALL`] missed the workers' latest conditions meanwhile (their pushes to it failed and
/// back off), and a client nginx sends back to it must not see an older trend: it serves
/// again only once it has pulled them, as a starting replica does.
#[derive(Default)]
pub(crate) struct Stalls {
    /// When the watchdog last ran, in milliseconds from `epoch` (0: no watchdog runs).
    ran_at: std::sync::atomic::AtomicU64,
    epoch: std::sync::OnceLock<std::time::Instant>,
    /// A stall found, not yet taken by the loop that pulls.
    found: AtomicBool,
    /// A stall found that no finished pull has answered yet.
    unanswered: AtomicBool,
    /// Wakes the lead loop when a stall is found.
    wake: tokio::sync::Notify,
}

impl Stalls {
    fn now_ms(&self) -> u64 {
        self.epoch.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64 + 1
    }

    /// Whether the watchdog runs and has not run for longer than [`STALL`].
    pub(crate) fn late(&self) -> bool {
        let ran_at = self.ran_at.load(Ordering::Acquire);
        ran_at != 0 && self.now_ms().saturating_sub(ran_at) > STALL.as_millis() as u64
    }

    /// Takes a stall found (true once per stall).
    fn take_found(&self) -> bool {
        self.found.swap(false, Ordering::AcqRel)
    }

    /// Whether a stall happened that no pull has answered yet (found, or the watchdog is
    /// late): a pull that began before it must not make the replica serve again.
    fn pending(&self) -> bool {
        self.found.load(Ordering::Acquire) || self.late()
    }
}

/// How long a new leader of an established group waits for a worker that does not answer
/// before it takes writes without it.
const WORKERS_WAIT_AT_TAKEOVER: Duration = Duration::from_secs(2);

/// How long the leader waits between attempts to bring the workers up.
const RETRY_EVERY: Duration = Duration::from_millis(200);

impl State {
    /// Whether this replica leads its group.
    pub fn is_leader(&self) -> bool {
        self.leading_term().is_some()
    }

    /// The raft term this replica leads in; `None` when it does not lead (or its replica
    /// does not run yet).
    pub fn leading_term(&self) -> Option<u64> {
        let raft = self.log.raft()?;
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        (metrics.state == consensus::openraft::ServerState::Leader).then_some(metrics.current_term)
    }

    /// The registered ISUs of the current generation as this coordinator holds them, in
    /// registration order (an icon by its hash: the store's name, or the hash of the bytes
    /// a coordinator without a data directory keeps).
    pub fn held_isus(&self) -> Vec<shared::protocol::HeldIsu> {
        self.generation()
            .registered()
            .iter()
            .map(|isu| shared::protocol::HeldIsu {
                uuid: isu.uuid.to_string(),
                owner: isu.owner.to_string(),
                icon_sha256: isu
                    .icon
                    .as_ref()
                    .map(|icon| crate::icons::to_hex(&icon.hash.unwrap_or_else(|| crate::icons::hash_of(&icon.bytes)))),
            })
            .collect()
    }

    /// The URLs of the group's other members (icons are stored on and fetched from them).
    pub fn peer_urls(&self) -> Vec<String> {
        let Some(raft) = self.log.raft() else {
            return Vec::new();
        };
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        metrics
            .membership_config
            .membership()
            .nodes()
            .filter(|(id, _)| **id != metrics.id)
            .map(|(_, node)| node.addr.clone())
            .collect()
    }

    /// An icon by its hash: from this replica's store, or else from a peer's.
    pub async fn icon(&self, hash: crate::icons::IconHash) -> Option<bytes::Bytes> {
        self.icons.as_ref()?.fetch(hash, &self.peer_urls()).await
    }

    /// Every `every`, while ready, removes the icons no ISU of the current generation names
    /// that were stored more than `grace` ago (see [`crate::icons::IconStore::sweep`]). Runs
    /// until aborted; nothing without a data directory (the icons are in the log then).
    pub async fn sweep_icons(self: Arc<Self>, every: Duration, grace: Duration) {
        let Some(icons) = self.icons.clone() else {
            return;
        };
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if !self.is_ready() {
                continue;
            }
            let referenced: std::collections::HashSet<crate::icons::IconHash> = self
                .generation()
                .registered()
                .iter()
                .filter_map(|isu| isu.icon_hash())
                .collect();
            let icons = icons.clone();
            match tokio::task::spawn_blocking(move || icons.sweep(&referenced, grace)).await {
                Ok(Ok(swept)) if swept.removed > 0 => tracing::info!(
                    removed = swept.removed,
                    removed_bytes = swept.removed_bytes,
                    kept_recent = swept.kept_recent,
                    compacted_bytes = swept.compacted_bytes,
                    "removed icons no ISU names"
                ),
                Ok(Ok(_)) => {}
                Ok(Err(error)) => tracing::warn!(%error, "sweeping the icon store failed"),
                Err(error) => tracing::error!(%error, "the icon sweep stopped"),
            }
        }
    }

    /// Whether this replica leads and is ready to take leader-only writes.
    pub fn takes_leader_writes(&self) -> bool {
        self.leading.load(Ordering::Acquire) && self.is_leader()
    }

    /// Whether this replica has applied a generation of its group.
    pub fn is_established(&self) -> bool {
        self.established.load(Ordering::Acquire)
    }

    /// Runs every [`WATCHDOG_EVERY`]; a gap of more than [`STALL`] since the last
    /// run is a stall (see [`Stalls`]): the replica stops serving at once, and serves again
    /// once it has pulled the workers' latest conditions (the lead loop's pull, as for a
    /// starting replica; a leader still leading pulls at once). Runs until aborted.
    pub async fn watch_for_stalls(self: Arc<Self>) {
        let stalls = &self.stalls;
        let mut ticker = tokio::time::interval(WATCHDOG_EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut last = stalls.now_ms();
        loop {
            ticker.tick().await;
            let now = stalls.now_ms();
            let gap = now - last;
            if gap > STALL.as_millis() as u64 {
                self.ready.store(false, Ordering::Release);
                stalls.unanswered.store(true, Ordering::Release);
                stalls.found.store(true, Ordering::Release);
                stalls.wake.notify_one();
                tracing::warn!(
                    stalled_ms = gap,
                    "this replica was stalled (stopped, or starved of CPU): it serves again once it has pulled the workers' latest conditions"
                );
            }
            stalls.ran_at.store(now, Ordering::Release);
            last = now;
        }
    }

    /// Acts as the leader while this replica leads, and as a follower otherwise, until the
    /// task is dropped (see the module documentation).
    pub async fn lead(self: Arc<Self>) {
        let Some(raft) = self.log.raft().cloned() else {
            return;
        };
        let mut metrics = raft.metrics();
        let mut pulled_for = 0u64;
        loop {
            record_raft_metrics(&metrics.borrow());
            let leading = metrics.borrow().state == consensus::openraft::ServerState::Leader;
            if leading {
                let was_ready = self.is_ready();
                metrics::counter!(RAFT_LEADERSHIPS).increment(1);
                // Before any call of its duties: the workers fence off the older terms.
                self.workers.lead_in_term(metrics.borrow().current_term);
                let duties = tokio::spawn(self.clone().leader_duties());
                while metrics.borrow().state == consensus::openraft::ServerState::Leader {
                    tokio::select! {
                        changed = metrics.changed() => {
                            if changed.is_err() {
                                duties.abort();
                                return;
                            }
                        }
                        // Stalled while leading (and still leading): serving again once
                        // pulled, as a follower would.
                        () = self.stalls.wake.notified() => {
                            tokio::spawn(self.clone().serve_again_after_a_stall());
                        }
                    }
                    record_raft_metrics(&metrics.borrow());
                }
                duties.abort();
                let led = self.leading.swap(false, Ordering::AcqRel);
                let stalled = self.stalls.take_found() | self.stalls.unanswered.swap(false, Ordering::AcqRel);
                tracing::info!(stalled, "this replica no longer leads");
                // The next leader runs the migrations and the workers' resets from here on.
                // Its latest conditions are whole if it served before it led, or if it
                // brought the workers up as the leader (they pushed everything again). A
                // replica restarted from its log may lead for a moment on its old vote and
                // has neither: it pulls and waits as any starting replica does.
                // One stalled meanwhile has neither: what was pushed during the stall is missing.
                let whole = (was_ready || led) && !stalled;
                self.ready.store(self.is_established() && whole, Ordering::Release);
                if !whole {
                    pulled_for = 0;
                }
                continue;
            }
            if self.stalls.take_found() {
                pulled_for = 0;
            }
            if self.is_established() {
                let generation = self.generation().id;
                // Serving once it has applied what the leader had and the workers' latest
                // conditions are in (of every ISU it knows by then): a client moved here
                // from another replica must not see a smaller trend. Pushes bring the rest.
                let caught_up = self.is_ready() || self.log.catch_up().await.is_ok();
                if caught_up && pulled_for != generation && self.pull_latest_everywhere(generation).await {
                    pulled_for = generation;
                    if !self.is_ready() {
                        if !self.settle_after_pull(|| !self.stalls.pending()).await {
                            // Stalled while it waited: it pulls again (the watchdog woke
                            // the loop), then waits again.
                            continue;
                        }
                        self.ready.store(true, Ordering::Release);
                        tracing::info!(generation, "replica ready");
                    }
                }
            }
            // Woken by any change of the raft's state (terms, applied entries, leaders), by a
            // stall found, or every second to retry a pull that failed.
            tokio::select! {
                _ = metrics.changed() => {}
                () = self.stalls.wake.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// A leader that was stalled and still leads: pulls the workers' latest conditions, waits
    /// for their pushes to resume, and serves again (unless it stepped down meanwhile: the
    /// lead loop then pulls as a follower).
    async fn serve_again_after_a_stall(self: Arc<Self>) {
        if !self.stalls.take_found() {
            return;
        }
        let generation = self.generation().id;
        if !self.pull_latest_everywhere(generation).await {
            // Still found when it steps down: it pulls as a follower then.
            self.stalls.found.store(true, Ordering::Release);
            return;
        }
        if self
            .settle_after_pull(|| self.is_leader() && !self.stalls.pending())
            .await
        {
            self.ready.store(true, Ordering::Release);
            tracing::info!(generation, "leader serving again after a stall");
        }
    }

    /// After a full pull of the workers' latest conditions: waits until their pushes have
    /// resumed (a worker retries a push to a replica it could not reach at most
    /// `worker::pusher::MAX_BACKOFF`, 1 s, after its last failure: past that, what changed
    /// while this replica was away has reached it too), then, if `still` holds, rebuilds the
    /// trend from what it holds and counts a stall as answered. False when `still` did not
    /// hold (nothing done).
    async fn settle_after_pull(&self, still: impl Fn() -> bool) -> bool {
        tokio::time::sleep(PUSHES_RESUMED_AFTER).await;
        if !still() {
            return false;
        }
        self.generation().rebuild_trend_now();
        self.stalls.unanswered.store(false, Ordering::Release);
        true
    }

    /// Takes every worker's latest conditions of `generation` (a full resync, pulled); true
    /// when every worker answered.
    async fn pull_latest_everywhere(&self, generation: u64) -> bool {
        let pulled = futures_util::future::join_all(
            self.workers
                .cells()
                .map(|cell| self.workers.latest_all(cell, generation)),
        )
        .await;
        let mut complete = true;
        for batch in pulled {
            let Ok(body) = batch else {
                complete = false;
                continue;
            };
            match shared::protocol::decode_latest(&body) {
                Ok((batch_generation, items)) if batch_generation == generation => {
                    self.generation().apply_latest(&items);
                }
                _ => complete = false,
            }
        }
        complete
    }

    /// What the leader does: a generation for a new group, the workers brought to it,
    /// every user told to them again, the migrations recovered, then the router kept and the
    /// workers watched. Ends when aborted (the replica stopped leading).
    async fn leader_duties(self: Arc<Self>) {
        tracing::info!(generation = self.generation().id, "this replica leads");
        let led_at = tokio::time::Instant::now();
        // Everything committed in earlier terms applied first: the registrations they left
        // are known before any write is taken.
        while let Err(error) = self.log.catch_up().await {
            tracing::warn!(%error, "a new leader waits to apply the earlier terms' entries");
            tokio::time::sleep(RETRY_EVERY).await;
        }
        // A takeover: an earlier leader brought the workers to the group's generation.
        let taken_over = self.is_established();
        while !self.is_established() {
            // A new group: this replica's own generation becomes the group's.
            if let Err(error) = self.build_first_generation().await {
                tracing::warn!(%error, "building the group's first generation failed; retrying");
                tokio::time::sleep(RETRY_EVERY).await;
                continue;
            }
            if let Err(error) = self.log.propose_as_leader(&self.snapshot_command()).await {
                tracing::warn!(%error, "proposing the group's first generation failed; retrying");
                tokio::time::sleep(RETRY_EVERY).await;
            }
        }
        // The configured cells in the map: their URLs as configured now, and a cell added
        // to the configuration (it starts empty; a rebalance gives it slots).
        match self.placement.configured_map() {
            Ok(Some(map)) => {
                if let Err(error) = self.log.propose_as_leader(&Command::Map(map)).await {
                    tracing::warn!(%error, "committing the configured cells' map failed");
                }
            }
            Ok(None) => {}
            Err(error) => tracing::error!(%error, "the placement map names a cell that is not configured"),
        }
        let generation = self.generation();
        let waiting_since = tokio::time::Instant::now();
        let caught_up = waiting_since - led_at;
        // The cells whose worker did not answer (their registrations are ended by the watch).
        let absent: Vec<CellId> = loop {
            let resetting = self.reset_lock.lock().await;
            let results = self.reset_each_worker(&generation, true).await;
            let absent: Vec<CellId> = results
                .iter()
                .filter(|(_, result)| result.is_err())
                .map(|(cell, _)| *cell)
                .collect();
            let Some(error) = results.into_iter().find_map(|(_, result)| result.err()) else {
                break absent;
            };
            // A worker cut off or down at a takeover holds the generation already (or is
            // reset by the watch when it answers): the others' cells are served meanwhile.
            if taken_over && waiting_since.elapsed() >= WORKERS_WAIT_AT_TAKEOVER {
                tracing::warn!(%error, "leading without a worker that does not answer; the watch brings it up");
                break absent;
            }
            drop(resetting);
            tracing::info!(%error, "waiting for workers");
            tokio::time::sleep(RETRY_EVERY).await;
        };
        let workers_up = waiting_since.elapsed();
        let ending_since = tokio::time::Instant::now();
        let ended = self.finish_registrations(&generation, &absent).await;
        // Above every id an earlier leader may have given: a registration of its that a
        // worker still holds (one that did not answer above, say) keeps its id.
        let reserved = generation.ids_reserved.load(Ordering::Acquire);
        generation.next_id.fetch_max(reserved + 1, Ordering::AcqRel);
        self.leading.store(true, Ordering::Release);
        // Before it says it is ready: nginx may start as soon as a replica is healthy, and
        // starts from this file.
        self.placement.write_router_file().await;
        if self.stalls.unanswered.load(Ordering::Acquire) || self.stalls.late() {
            // It took the lead right after a stall (a follower resumed after SIGCONT may win
            // the next election at once): what was pushed meanwhile is missing until pulled.
            tracing::info!("leading right after a stall: ready once the latest conditions are pulled");
            // A worker that does not answer is left to its pushes, as at any takeover.
            let pulling_since = tokio::time::Instant::now();
            while !self.pull_latest_everywhere(generation.id).await
                && pulling_since.elapsed() < WORKERS_WAIT_AT_TAKEOVER
            {
                tokio::time::sleep(RETRY_EVERY).await;
            }
            self.settle_after_pull(|| true).await;
        }
        self.ready.store(true, Ordering::Release);
        tracing::info!(
            took_ms = led_at.elapsed().as_millis() as u64,
            catch_up_ms = caught_up.as_millis() as u64,
            workers_ms = workers_up.as_millis() as u64,
            registrations_ended = ended,
            registrations_ms = ending_since.elapsed().as_millis() as u64,
            "the leader is ready"
        );
        for user in generation.users.read().iter() {
            self.user_sync.add(generation.id, user);
        }
        // The duties below last as long as this leadership, across `/initialize`s: held on,
        // the generation taken over with stayed alive beside every later one (at a million
        // ISUs a leader kept about 290 MiB more than its followers after `/initialize`).
        drop(generation);
        let stop_user_sync = tokio_util::sync::CancellationToken::new();
        let _stop_on_drop = stop_user_sync.clone().drop_guard();
        // Both end with this leadership (the duties are dropped when it ends).
        let _user_sync = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
            self.user_sync.clone().run(self.workers.clone(), stop_user_sync),
        ));
        // Migrations interrupted after their flip first: nginx is handed a flipped map only
        // once its target has activated the subject's ISUs (it would answer 404 for them).
        self.recover_migrations().await;
        let keeper = self.clone();
        let _router =
            tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move { keeper.placement.keep_router().await }));
        self.watch_workers().await;
    }
}

/// This replica's term.
pub const RAFT_TERM: &str = "coordinator_raft_term";
/// 1 while this replica leads, else 0.
pub const RAFT_LEADER: &str = "coordinator_raft_leader";
/// The last log entry this replica applied.
pub const RAFT_APPLIED_INDEX: &str = "coordinator_raft_applied_index";
/// The last log entry this replica holds.
pub const RAFT_LOG_INDEX: &str = "coordinator_raft_log_index";
/// How many times this replica became the leader.
pub const RAFT_LEADERSHIPS: &str = "coordinator_raft_leaderships_total";
/// On the leader, how many entries of its log each other voter (label `follower`) has not
/// acknowledged yet; 0 on the other replicas, which do not know. A follower that stopped
/// while writes go on lags here, where it cannot report itself.
pub const RAFT_FOLLOWER_LAG: &str = "coordinator_raft_follower_lag";

fn record_raft_metrics(raft: &consensus::openraft::RaftMetrics<consensus::NodeId, consensus::Node>) {
    let leading = raft.state == consensus::openraft::ServerState::Leader;
    metrics::gauge!(RAFT_TERM).set(raft.current_term as f64);
    metrics::gauge!(RAFT_LEADER).set(if leading { 1.0 } else { 0.0 });
    metrics::gauge!(RAFT_APPLIED_INDEX).set(raft.last_applied.map_or(0, |log_id| log_id.index) as f64);
    metrics::gauge!(RAFT_LOG_INDEX).set(raft.last_log_index.unwrap_or(0) as f64);
    let last = raft.last_log_index.unwrap_or(0);
    for voter in raft.membership_config.membership().voter_ids() {
        if voter == raft.id {
            continue;
        }
        let matched = raft
            .replication
            .as_ref()
            .and_then(|replication| replication.get(&voter).copied())
            .map(|matched| matched.map_or(0, |log_id| log_id.index));
        let lag = matched.map_or(0, |matched| last.saturating_sub(matched));
        metrics::gauge!(RAFT_FOLLOWER_LAG, "follower" => voter.to_string()).set(lag as f64);
    }
}
