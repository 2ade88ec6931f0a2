//! The registration protocol: provisional ISU on the owning worker, JIA activation with
//! that worker's device URL, then publish (logged first) or roll back on both nodes; a
//! concurrent registration of the same UUID waits for the first.
//!
//! One command is committed per registration, the accepted ISU with its character (and the
//! request's id), before its worker publishes it. The worker asks JIA itself and keeps JIA's
//! answer with that command before it answers: it has acknowledged the posts of the device
//! JIA started, and from then on nothing rolls them back, whatever becomes of the leader.
//! What a leader leaves unfinished is on the workers: a new leader (or a lone coordinator
//! restarted from its data directory) asks each worker for the registrations it holds
//! provisionally, publishes those the log accepted, finishes those JIA accepted (logs their
//! command from the worker's copy, then publishes them), and rolls back the others.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use futures_util::StreamExt;
use parking_lot::Mutex;
use shared::placement_map::CellId;
use shared::protocol::{Activation, JiaActivateIsu, ProvisionalIsu, PublishIsu, RollbackIsu, UnpublishedIsu};
use tokio::sync::watch;

use super::command::{Command, Unfinished};
use super::generation::{logged, Generation};
use super::model::{Isu, Outcome, OwnIcon};
use super::State;
use crate::error::ApiError;

/// A registration request, after parsing.
pub struct Registration {
    pub owner: String,
    pub uuid: String,
    pub name: String,
    /// `None` = the default icon.
    pub image: Option<Bytes>,
    /// The request's id (a request sent again is answered from its outcome).
    pub request: Option<String>,
}

/// A UUID claimed by a registration in flight. Dropping it (also when the
/// registration task panics) releases the UUID and tells waiting registrations
/// the outcome, so a failure can never wedge a UUID.
struct Claim {
    generation: Arc<Generation>,
    uuid: String,
    sender: watch::Sender<Outcome>,
    outcome: Outcome,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.generation.pending.lock().remove(&self.uuid);
        let _ = self.sender.send(self.outcome);
    }
}

/// Crash tests only (fail points, off in any deployment): `registration-claimed=return(UUID)`,
/// `registration-started=return(UUID)`, `registration-jia-answered=return(UUID)` or
/// `registration-accepted=return(UUID)` holds that ISU's registration there for a minute,
/// `return(UUID/MILLIS)` for that long (before its worker hears of it; once its ISU is
/// provisional on its worker; once the worker answered with JIA's answer, which it holds,
/// before it is logged; once its ISU is logged with its character), so a test can kill,
/// pause or depose the leader at that step.
async fn hold_for_crash_test(step: &'static str, uuid: &str) {
    node_http::hold_at(step, uuid).await;
}

/// Tests only (a fail point, off in any deployment): `sweep-stall=return(MILLIS)` makes each
/// sweep of a worker's registrations (a takeover's, the watch's) wait that long before it
/// looks, without blocking a thread as the fail crate's `sleep` would.
async fn stall_for_test(name: &'static str) {
    if !node_http::fail_points_on() {
        return;
    }
    if let Some(millis) = fail::eval(name, |millis| millis)
        .flatten()
        .and_then(|millis| millis.parse::<u64>().ok())
    {
        tokio::time::sleep(Duration::from_millis(millis)).await;
    }
}

/// Crash tests only (a fail point, off in any deployment): `registration-publish-lost=return(UUID)`
/// takes that ISU's publish by its registration (not the sweep's) as failed without sending it,
/// as if its worker had been cut off before the call reached it.
fn publish_lost_for_test(uuid: &str) -> bool {
    node_http::fail_points_on()
        && fail::eval("registration-publish-lost", |target| target)
            .flatten()
            .is_some_and(|target| target == uuid)
}

/// How long a registration of a UUID waits for a concurrent one of the same UUID.
/// Registration ids a leader reserves at a time (see [`State::reserve_id`]): one commit
/// for this many registrations, and at most this many ids left unused at a takeover.
pub(super) const ID_BLOCK: i64 = 100;

const CONCURRENT_REGISTRATION_WAIT: Duration = Duration::from_secs(10);

/// A registration that succeeds after this long (a client waiting a second has given up)
/// logs how long each of its steps took (one that fails does not).
const SLOW_REGISTRATION: Duration = Duration::from_secs(1);

/// Registrations a new leader ends at once (each waits on its worker and a commit).
const ENDED_AT_ONCE: usize = 32;

/// A sweep of a worker's provisional registrations decides only this soon after its leader
/// applied its whole log: well within the 5 s a registration waits for a commit before it
/// gives up (and leaves `pending`), so one whose record was appended after the barrier is
/// still in flight when the sweep looks.
const SWEEP_DECIDED_WITHIN: Duration = Duration::from_secs(2);
const _: () = assert!(SWEEP_DECIDED_WITHIN.as_millis() < consensus::replica::ELECTION_WAIT.as_millis());

/// How long the sweeps leave a registration its worker holds unaccepted before rolling it
/// back: its worker may be asking JIA still (JIA takes up to 10 s, and a worker paused or
/// cut off meanwhile longer), and once it has JIA's answer the sweep finishes the
/// registration with what the device posted. Rolled back at once, JIA had activated an ISU
/// its user then registered again, asking JIA a second time (seed 271828). A registration
/// whose leader died before its worker was asked never gets an answer: after this long, it
/// is rolled back.
const ACCEPTANCE_WAIT: Duration = Duration::from_secs(20);

/// An awaited registration no sweep has looked at for this long is forgotten: its worker
/// has not been swept since (it went away), and nothing waits on it any more.
const AWAITED_AT_MOST: Duration = Duration::from_secs(2 * ACCEPTANCE_WAIT.as_secs());

/// Whether an entry of the awaited set (since `since`, of generation `of`) still counts.
fn still_awaited(of: u64, since: &std::time::Instant, generation: u64) -> bool {
    of == generation && since.elapsed() < AWAITED_AT_MOST
}

/// How often a registration of a UUID an earlier leader left awaiting its acceptance sweeps
/// that UUID's cell while it waits for the outcome: the worker may have JIA's answer any
/// moment, and the client (whose first try timed out) is still waiting.
const AWAITED_SWEEP_EVERY: Duration = Duration::from_millis(100);

/// Whether a sweep may leave a registration to await its acceptance ([`ACCEPTANCE_WAIT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sweep {
    /// A takeover's or the watch's: the next sweep looks again.
    MayWait,
    /// A migration's: everything is ended before the slot's ISUs move.
    DecideNow,
}

/// What one pass of a sweep did.
struct SweepPass {
    /// The registrations the worker held.
    count: usize,
    /// The worker refused a rollback: JIA's acceptance reached it since it was listed.
    accepted_meanwhile: bool,
    /// The ids of those it ended (one whose worker did not answer is listed again next time).
    decided: Vec<i64>,
}

/// How one end of a registration left unfinished went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Done,
    /// The worker did not answer: the next sweep ends it.
    Failed,
    /// The worker refused the rollback: JIA accepted the registration (or is being asked)
    /// since it was listed, and it is to be finished instead.
    Refused,
}

/// How a registration left unfinished on its worker ends.
enum LeftRegistration {
    Publish(PublishIsu),
    Rollback(RollbackIsu),
}

impl State {
    /// Registers an ISU: provisional on the owning worker, JIA activation, publish;
    /// rolled back on both nodes on failure. Runs to completion even if the client leaves.
    pub async fn register(self: &Arc<Self>, registration: Registration) -> Result<Arc<Isu>, ApiError> {
        let state = self.clone();
        tokio::spawn(async move { state.register_inner(registration).await })
            .await
            .map_err(|error| ApiError::Internal(error.to_string()))?
    }

    async fn register_inner(&self, registration: Registration) -> Result<Arc<Isu>, ApiError> {
        let generation = self.generation();
        if let Some(outcome) = self.outcome_of_sent_again(&generation, &registration).await {
            return outcome;
        }
        let (mut claim, id) = self.claim(&generation, &registration.uuid).await?;
        self.reserve_id(&generation, id).await?;
        if let Some(request) = &registration.request {
            // The same request sent again to this leader (a forwarding replica's retry) is
            // answered from this one's outcome; other replicas learn it from the log.
            let registered = (registration.uuid.clone(), registration.owner.clone());
            generation.requests.lock().insert(request.clone(), registered);
        }
        let result = self.activate_and_publish(&generation, &registration, id).await;
        if result.is_ok() {
            claim.outcome = Outcome::Published;
        }
        result
    }

    /// Claims `uuid` for this registration: 409 when registered, waits for a
    /// registration of the same UUID in flight. Returns the claim and the new id.
    async fn claim(&self, generation: &Arc<Generation>, uuid: &str) -> Result<(Claim, i64), ApiError> {
        let deadline = tokio::time::Instant::now() + CONCURRENT_REGISTRATION_WAIT;
        loop {
            // A registration of the UUID an earlier leader left awaiting JIA's acceptance (the
            // client sent it again after its first try timed out): its outcome decides this
            // one's, 409 once it is published. Claimed beside it, this one's provisional call
            // met the worker's copy and was answered 409 while the ISU read 404 (CI's leader
            // pauses under the contest's load, 2026-12-06).
            if self.awaited(generation.id, uuid) {
                if tokio::time::Instant::now() >= deadline {
                    return Err(ApiError::Unavailable(format!(
                        "registration of {uuid} still awaits its acceptance"
                    )));
                }
                self.sweep_for_awaited(generation, uuid).await;
                continue;
            }
            let mut in_flight = {
                let mut pending = generation.pending.lock();
                // In flight first: an ISU being published may still fail and be removed.
                match pending.get(uuid) {
                    Some(receiver) => receiver.clone(),
                    None if generation.by_uuid.contains_key(uuid) => return Err(ApiError::DuplicatedIsu),
                    None => {
                        let (sender, receiver) = watch::channel(Outcome::Pending);
                        pending.insert(uuid.to_owned(), receiver);
                        let claim = Claim {
                            generation: generation.clone(),
                            uuid: uuid.to_owned(),
                            sender,
                            outcome: Outcome::Failed,
                        };
                        return Ok((claim, generation.next_id.fetch_add(1, Ordering::AcqRel)));
                    }
                }
            };
            let finished =
                tokio::time::timeout_at(deadline, in_flight.wait_for(|outcome| *outcome != Outcome::Pending)).await;
            match finished {
                Ok(Ok(outcome)) if *outcome == Outcome::Published => return Err(ApiError::DuplicatedIsu),
                // Failed, or its claim was dropped: the UUID is free again (the claim left `pending` first).
                Ok(_) => continue,
                Err(_) => return Err(ApiError::Internal(format!("registration of {uuid} still in flight"))),
            }
        }
    }

    /// Commits a reservation of ids from `id` on unless `id` is reserved already, before the
    /// id is given to anyone: a leader that takes over starts above every id reserved (see
    /// [`Command::Ids`]), so it never gives again an id the previous leader gave to a
    /// registration its worker still holds. One commit for [`ID_BLOCK`] registrations.
    async fn reserve_id(&self, generation: &Generation, id: i64) -> Result<(), ApiError> {
        let reserved = || id <= generation.ids_reserved.load(Ordering::Acquire);
        if reserved() {
            return Ok(());
        }
        let _one_at_a_time = self.reserving_ids.lock().await;
        if reserved() {
            return Ok(());
        }
        let up_to = id.max(generation.next_id.load(Ordering::Acquire)) + ID_BLOCK - 1;
        self.log
            .propose_as_leader(&Command::Ids {
                generation: generation.id,
                up_to,
            })
            .await
            .map_err(|error| ApiError::Unavailable(format!("reserving registration ids: {error}")))
    }

    async fn activate_and_publish(
        &self,
        generation: &Arc<Generation>,
        registration: &Registration,
        id: i64,
    ) -> Result<Arc<Isu>, ApiError> {
        let started = std::time::Instant::now();
        // Every step that changes the log or a worker is taken only while this replica
        // still leads in the term it started in. Led again in a later term, it would
        // undo what the leader between did (that one may have published this ISU and
        // answered 201); what it leaves is the sweep's.
        let Some(term) = self.leading_term() else {
            return Err(ApiError::Unavailable("this replica no longer leads".into()));
        };
        let _pass = self.placement.gate.enter(&registration.uuid).await;
        let passed_gate = std::time::Instant::now();
        let map = self.placement.map();
        let cell = map.owner(&registration.uuid);
        if self.registrations_left.lock().contains(&cell) {
            // Its worker did not answer this leader's takeover: what it holds of the old
            // leader's registrations (this one's first try, maybe) is ended first.
            return Err(ApiError::Unavailable(format!(
                "cell {} has registrations of the previous leader to end first",
                self.workers.role(cell)
            )));
        }
        let device_url = map
            .cell(cell)
            .expect("a map's owner is one of its cells")
            .device_url
            .clone();
        // With a data directory, the icon goes to this replica's store and at least one
        // other's (if it has peers) while the registration starts (the log names it by its
        // hash only in the accepted ISU, below); JIA is asked once both are done, so a
        // failure here never costs an activation.
        let store_icon = async {
            match (&self.icons, &registration.image) {
                (Some(icons), Some(image)) => icons.store(image.clone(), &self.peer_urls()).await.map(Some),
                _ => Ok(None),
            }
        };
        let rollback = RollbackIsu {
            generation: generation.id,
            id,
            uuid: registration.uuid.clone(),
        };
        let (icon, started_here) = tokio::join!(store_icon, self.start(generation, registration, id, cell));
        let started_on_worker = std::time::Instant::now();
        started_here?;
        let icon = match icon {
            Ok(icon) => icon,
            Err(error) => {
                self.rollback_worker(cell, &rollback, term).await;
                return Err(ApiError::Unavailable(error.to_string()));
            }
        };
        let mut isu = Isu {
            id,
            uuid: registration.uuid.as_str().into(),
            name: registration.name.as_str().into(),
            character: "".into(),
            owner: registration.owner.as_str().into(),
            icon: OwnIcon::of(registration.image.clone(), icon, &self.default_icon),
            latest: Mutex::new(None),
        };
        // The worker asks JIA, and holds JIA's answer with this record before it answers:
        // from then on the registration is finished, by this leader or the next one's sweep,
        // with what its device posted, whatever becomes of this leader meanwhile.
        let asked_jia = std::time::Instant::now();
        let activated = self
            .activate_on_worker(generation, cell, &isu, registration, &device_url)
            .await;
        let jia_time = asked_jia.elapsed();
        let character = match activated {
            Ok(character) => character,
            Err(error) => {
                // Refused by the worker when it holds JIA's acceptance after all (its answer
                // lost): the sweep finishes the registration then.
                self.rollback_worker(cell, &rollback, term).await;
                return Err(error);
            }
        };
        isu.character = character.as_str().into();
        let accepted = Command::Isu {
            generation: generation.id,
            isu: logged(&isu),
            request: registration.request.clone(),
        };
        hold_for_crash_test("registration-jia-answered", &registration.uuid).await;
        // Committed before the worker publishes it: an ISU visible anywhere is in the log.
        let isu = self.log_accepted(generation, &accepted, &isu.uuid, term).await?;
        let logged_at = std::time::Instant::now();
        hold_for_crash_test("registration-accepted", &registration.uuid).await;
        let publish = PublishIsu {
            generation: generation.id,
            uuid: registration.uuid.clone(),
            id,
            character,
        };
        self.publish_registered(cell, &publish).await;
        metrics::histogram!(shared::telemetry::REGISTRATION_OWN_SECONDS)
            .record(started.elapsed().saturating_sub(jia_time).as_secs_f64());
        if started.elapsed() >= SLOW_REGISTRATION {
            let ms = |from: std::time::Instant, to: std::time::Instant| to.saturating_duration_since(from).as_millis();
            tracing::info!(
                uuid = %registration.uuid,
                total_ms = started.elapsed().as_millis(),
                gate_ms = ms(started, passed_gate),
                worker_and_icon_ms = ms(passed_gate, started_on_worker),
                jia_ms = jia_time.as_millis(),
                log_ms = ms(asked_jia + jia_time, logged_at),
                publish_ms = logged_at.elapsed().as_millis(),
                "a slow registration"
            );
        }
        Ok(isu)
    }

    /// Publishes a registered ISU (its record committed) on its worker. A failure leaves it
    /// to the leader's sweep and never undoes the registration: JIA activated the ISU, and
    /// from its commit on this coordinator shows it (`GET /api/isu/:uuid` answers 200, a
    /// registration sent again 409), so a client may have been told it exists already.
    /// Removing it now would take it back from under that client. It is answered 201 and its
    /// worker (which holds it provisionally, or published it and the answer was lost) is
    /// published from the log by the sweep once it answers again.
    async fn publish_registered(&self, cell: CellId, publish: &PublishIsu) {
        let published = if publish_lost_for_test(&publish.uuid) {
            Err("the publish was lost (fail point)".to_owned())
        } else {
            self.workers
                .publish(cell, publish)
                .await
                .map_err(|error| error.to_string())
        };
        if let Err(error) = published {
            tracing::warn!(
                %error,
                uuid = %publish.uuid,
                "publishing a registered ISU on its worker failed; the leader's sweep publishes it"
            );
        }
    }

    /// Makes the ISU provisional on its worker, with the request's id (which a next leader
    /// that rolls it back logs).
    async fn start(
        &self,
        generation: &Arc<Generation>,
        registration: &Registration,
        id: i64,
        cell: CellId,
    ) -> Result<(), ApiError> {
        let provisional = ProvisionalIsu {
            generation: generation.id,
            id,
            uuid: registration.uuid.clone(),
            owner: registration.owner.clone(),
            name: registration.name.clone(),
            request: registration.request.clone(),
        };
        hold_for_crash_test("registration-claimed", &registration.uuid).await;
        if let Err(error) = self.workers.provisional(cell, &provisional).await {
            return Err(match error.status() {
                Some(reqwest::StatusCode::CONFLICT) => ApiError::DuplicatedIsu,
                // Fenced off: a newer leader has acted on the worker (and ends this one).
                Some(reqwest::StatusCode::FORBIDDEN) => ApiError::Unavailable(error.to_string()),
                _ => ApiError::Internal(error.to_string()),
            });
        }
        hold_for_crash_test("registration-started", &registration.uuid).await;
        Ok(())
    }

    /// The outcome of a registration request seen before (by this leader, or logged
    /// with its ISU or its rollback by an earlier one), once it is over: the ISU it registered, or a
    /// 503 when it was rolled back (it is not run again: JIA may have activated the ISU).
    /// `None` for a request not seen, or one of another user.
    async fn outcome_of_sent_again(
        &self,
        generation: &Arc<Generation>,
        registration: &Registration,
    ) -> Option<Result<Arc<Isu>, ApiError>> {
        let request = registration.request.as_ref()?;
        let (uuid, owner) = generation.requests.lock().get(request).cloned()?;
        if uuid != registration.uuid || owner != registration.owner {
            return None;
        }
        // Still running here (its first answer was lost on the way): wait for its end.
        let deadline = tokio::time::Instant::now() + CONCURRENT_REGISTRATION_WAIT;
        while generation.pending.lock().contains_key(&uuid)
            || self.awaited(generation.id, &uuid)
            || generation
                .unfinished
                .lock()
                .get(&uuid)
                .is_some_and(|unfinished| !unfinished.accepted)
        {
            if tokio::time::Instant::now() >= deadline {
                return Some(Err(ApiError::Unavailable(format!(
                    "registration of {uuid} still in flight"
                ))));
            }
            if self.awaited(generation.id, &uuid) {
                self.sweep_for_awaited(generation, &uuid).await;
            } else {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        match generation.owned_isu(&uuid, &registration.owner) {
            Some(isu) => {
                tracing::info!(%uuid, %request, "a registration sent again is answered from its outcome");
                Some(Ok(isu))
            }
            None => Some(Err(ApiError::Unavailable(format!(
                "registration of {uuid} was interrupted and rolled back"
            )))),
        }
    }

    /// Has the worker of `cell` ask JIA to activate `isu` (its record's character left out,
    /// to be JIA's) with `device_url` as the device's target: JIA's character. JIA's refusal
    /// is passed through; a worker that does not answer is a 503, and JIA that does not
    /// answer the worker a 500.
    async fn activate_on_worker(
        &self,
        generation: &Generation,
        cell: CellId,
        isu: &Isu,
        registration: &Registration,
        device_url: &str,
    ) -> Result<String, ApiError> {
        let template = Command::Isu {
            generation: generation.id,
            isu: logged(isu),
            request: registration.request.clone(),
        };
        let call = JiaActivateIsu {
            generation: generation.id,
            uuid: registration.uuid.clone(),
            id: isu.id,
            record: base64::engine::general_purpose::STANDARD.encode(template.encode()),
            jia_service_url: self.jia_service_url.read().clone(),
            target_base_url: device_url.to_owned(),
        };
        match self.workers.jia_activate(cell, &call).await {
            Ok(Activation::Activated { character }) => Ok(character),
            Ok(Activation::Refused { status }) => Err(ApiError::JiaRefused(
                reqwest::StatusCode::from_u16(status).unwrap_or(reqwest::StatusCode::BAD_GATEWAY),
            )),
            Err(error) if error.status() == Some(reqwest::StatusCode::BAD_GATEWAY) => {
                Err(ApiError::Internal(error.to_string()))
            }
            Err(error) => {
                tracing::warn!(%error, uuid = %isu.uuid, "the worker did not answer JIA's activation; the leader's sweep ends the registration");
                Err(ApiError::Unavailable(error.to_string()))
            }
        }
    }

    /// Commits the accepted ISU (JIA activated it); applying the command publishes it on
    /// every replica, this one included, so no replica ever shows an ISU the log does
    /// not hold. A commit that fails may still happen (a timeout, a lost leadership), and
    /// its worker holds the command: the leader's sweep finishes the registration (from the
    /// log if it was committed, else from the worker's copy), it is never rolled back.
    async fn log_accepted(
        &self,
        generation: &Arc<Generation>,
        accepted: &Command,
        uuid: &str,
        term: u64,
    ) -> Result<Arc<Isu>, ApiError> {
        if !self.leads_in(term) {
            return Err(ApiError::Unavailable(
                "leadership changed during the registration; the leader ends it".into(),
            ));
        }
        if let Err(error) = self.log.propose_as_leader(accepted).await {
            tracing::warn!(%error, %uuid, "logging an accepted registration failed; the leader's sweep finishes it");
            return Err(ApiError::Unavailable(error.to_string()));
        }
        generation
            .by_uuid
            .get(uuid)
            .map(|isu| isu.clone())
            .ok_or_else(|| ApiError::Unavailable(format!("ISU {uuid} was reset while it registered")))
    }

    /// Logs that a registration logged as started (by a build before 2026-12-04) was
    /// rolled back.
    async fn log_rolled_back(&self, generation: &Generation, uuid: &str) {
        if let Err(error) = self.log.propose_as_leader(&removed(generation, uuid)).await {
            tracing::error!(%error, %uuid, "logging a rolled-back registration failed");
        }
    }

    /// A new leader (the workers already fenced off the old one) ends the registrations an
    /// old one left unfinished, as its workers hold them provisionally: one the log holds
    /// with its character (JIA activated it) is published on its worker; one whose worker
    /// holds JIA's answer is logged from it, then published; one whose worker has no answer
    /// yet is left for [`ACCEPTANCE_WAIT`]; any other is rolled back there (JIA is never asked
    /// again: it activates an ISU at most once), and the rolled-back requests are logged in one record.
    /// Those of a worker that does not answer stay invisible there (a registration of the
    /// UUID again replaces them). They are ended together (each is its own ISU): one after
    /// the other, each waiting on its worker, they held a takeover for seconds when the old
    /// leader died amid many registrations. Registrations an older build's log holds as
    /// started are ended from the log. Returns how many there were.
    pub(super) async fn finish_registrations(&self, generation: &Arc<Generation>, absent: &[CellId]) -> usize {
        self.forget_awaited();
        let logged: Vec<Unfinished> = generation.unfinished.lock().values().cloned().collect();
        let count = logged.len();
        futures_util::stream::iter(logged)
            .for_each_concurrent(ENDED_AT_ONCE, |registration| {
                self.finish_registration(generation, registration)
            })
            .await;
        count + self.end_provisional_registrations(generation, absent).await
    }

    /// Ends what the workers hold provisionally (see `finish_registrations`); a worker that
    /// does not answer (or did not when this replica took over, `absent`) is left to the
    /// watch, which ends its registrations when it does.
    async fn end_provisional_registrations(&self, generation: &Arc<Generation>, absent: &[CellId]) -> usize {
        self.registrations_left.lock().extend(absent.iter().copied());
        let cells: Vec<CellId> = self.workers.cells().filter(|cell| !absent.contains(cell)).collect();
        let ended = futures_util::future::join_all(
            cells
                .iter()
                .map(|cell| self.end_registrations_held_by(generation, *cell)),
        )
        .await;
        let mut count = 0;
        for (cell, ended) in cells.into_iter().zip(ended) {
            match ended {
                Ok(ended) => count += ended,
                Err(error) => {
                    tracing::warn!(%error, "the registrations a worker holds provisionally are ended when it answers");
                    self.registrations_left.lock().insert(cell);
                }
            }
        }
        count
    }

    /// On the leader, after the takeover: ends the registrations the worker of
    /// `cell` holds provisionally once this replica has applied its whole log (so a
    /// registration whose record is in the log, committed or not, is never rolled back),
    /// and only if it decides soon after, while every registration whose record was not in
    /// the log yet is still in flight here (one gives up only after `ELECTION_WAIT`).
    pub(super) async fn sweep_registrations(
        &self,
        generation: &Arc<Generation>,
        cell: CellId,
        sweep: Sweep,
    ) -> anyhow::Result<usize> {
        let _sweeping = self.sweep_lock(cell).lock_owned().await;
        stall_for_test("sweep-stall").await;
        self.log.settled().await?;
        let decide_by = std::time::Instant::now() + SWEEP_DECIDED_WITHIN;
        self.end_registrations_held_by_within(generation, cell, Some(decide_by), sweep)
            .await?
            .ok_or_else(|| anyhow::anyhow!("the worker answered too long after the barrier"))
    }

    /// Ends the registrations the worker of `cell` holds provisionally (see
    /// `finish_registrations`), except this leader's own in flight. How many there were.
    pub(super) async fn end_registrations_held_by(
        &self,
        generation: &Arc<Generation>,
        cell: CellId,
    ) -> anyhow::Result<usize> {
        let _sweeping = self.sweep_lock(cell).lock_owned().await;
        stall_for_test("sweep-stall").await;
        let ended = self
            .end_registrations_held_by_within(generation, cell, None, Sweep::MayWait)
            .await?;
        Ok(ended.unwrap_or_default())
    }

    /// [`State::end_registrations_held_by`], ending none (`None`) when the worker's answer
    /// comes after `decide_by`. Those the log holds with their id
    /// are published; the others are logged as abandoned first, in one record, and rolled
    /// back once it is committed: from then on no record that names them can be applied
    /// after it (the record commits only while this replica leads, after every entry before
    /// it), and a later leader knows them ended. A publish or rollback the worker does not
    /// answer is done again by the next sweep.
    async fn end_registrations_held_by_within(
        &self,
        generation: &Arc<Generation>,
        cell: CellId,
        decide_by: Option<std::time::Instant>,
        sweep: Sweep,
    ) -> anyhow::Result<Option<usize>> {
        let Some(first) = self.end_held_once(generation, cell, decide_by, sweep).await? else {
            return Ok(None);
        };
        let mut decided = first.decided;
        if first.accepted_meanwhile {
            // JIA's answer reached the worker (or it was asking JIA) after this sweep had
            // listed the registration: the worker refused its rollback, and a second pass
            // finishes it (or leaves it awaiting).
            tracing::warn!(
                worker = self.workers.role(cell),
                "a registration was accepted while the sweep ended it: finishing it"
            );
            if let Some(second) = self.end_held_once(generation, cell, None, sweep).await? {
                decided.extend(second.decided);
            }
        }
        // No longer awaited once ended on the worker (not when decided): a registration of
        // the UUID waiting on it then finds it published, or the UUID free.
        let mut awaiting = self.awaiting_acceptance.lock();
        for id in decided {
            awaiting.remove(&(generation.id, id));
        }
        Ok(Some(first.count))
    }

    /// One pass of [`State::end_registrations_held_by_within`].
    async fn end_held_once(
        &self,
        generation: &Arc<Generation>,
        cell: CellId,
        decide_by: Option<std::time::Instant>,
        sweep: Sweep,
    ) -> anyhow::Result<Option<SweepPass>> {
        let mut held = self.workers.unpublished(cell, generation.id).await?;
        if decide_by.is_some_and(|decide_by| std::time::Instant::now() > decide_by) {
            return Ok(None);
        }
        self.forget_awaited_not_held(generation.id, cell, &held);
        held.retain(|isu| !generation.pending.lock().contains_key(&isu.uuid));
        let count = held.len();
        let mut accepted = Vec::new();
        let mut finished = Vec::new();
        let mut abandoned = Vec::new();
        // A lone coordinator's registrations left unfinished are its own dead process's: no
        // other process will give the worker their acceptance, so none waits for it.
        let may_wait = sweep == Sweep::MayWait && !self.peer_urls().is_empty();
        for held in held {
            // Its id is never given again, whatever becomes of it.
            generation.next_id.fetch_max(held.id + 1, Ordering::AcqRel);
            // The log's character, else the one JIA gave in the worker's copy of the command
            // (which is then logged before the publish).
            let character = generation
                .by_uuid
                .get(held.uuid.as_str())
                .filter(|isu| isu.id == held.id)
                .map(|isu| isu.character.to_string())
                .or_else(|| {
                    let (command, character) = accepted_command(generation, &held)?;
                    finished.push(command);
                    Some(character)
                });
            if character.is_none()
                && may_wait
                && self.awaits_acceptance(generation.id, held.id, &held.uuid, held.posted)
            {
                // Its request sent again meanwhile waits for the outcome, never runs twice.
                if let Some(request) = &held.request {
                    let registered = (held.uuid.clone(), held.owner.clone());
                    generation.requests.lock().insert(request.clone(), registered);
                }
                continue;
            }
            match character {
                Some(character) => accepted.push(PublishIsu {
                    generation: generation.id,
                    uuid: held.uuid,
                    id: held.id,
                    character,
                }),
                None => abandoned.push(Unfinished {
                    uuid: held.uuid,
                    id: held.id,
                    owner: held.owner,
                    accepted: false,
                    request: held.request,
                }),
            }
        }
        if !abandoned.is_empty() {
            let command = Command::Abandoned {
                generation: generation.id,
                registrations: abandoned.clone(),
            };
            self.log.propose_as_leader(&command).await?;
        }
        // JIA accepted these and the log lacks them (their leader lost the lead before the
        // commit): registered now from the worker's copy of their command, then published.
        for command in &finished {
            self.log.propose_as_leader(command).await?;
        }
        if !finished.is_empty() {
            tracing::warn!(
                finished = finished.len(),
                worker = self.workers.role(cell),
                "finished registrations JIA accepted whose leader lost the lead before logging them"
            );
        }
        let ends: Vec<_> = accepted
            .into_iter()
            .map(LeftRegistration::Publish)
            .chain(abandoned.into_iter().map(|held| {
                LeftRegistration::Rollback(RollbackIsu {
                    generation: generation.id,
                    id: held.id,
                    uuid: held.uuid,
                })
            }))
            .map(|end| self.end_left_registration(cell, end))
            .collect();
        let outcomes: Vec<(i64, Ended)> = futures_util::stream::iter(ends)
            .buffer_unordered(ENDED_AT_ONCE)
            .collect()
            .await;
        Ok(Some(SweepPass {
            count,
            accepted_meanwhile: outcomes.iter().any(|(_, ended)| *ended == Ended::Refused),
            decided: outcomes
                .iter()
                .filter(|(_, ended)| *ended == Ended::Done)
                .map(|(id, _)| *id)
                .collect(),
        }))
    }

    /// Publishes or rolls back one registration left unfinished on the worker of `cell`:
    /// its id, and how that went.
    async fn end_left_registration(&self, cell: CellId, end: LeftRegistration) -> (i64, Ended) {
        match end {
            LeftRegistration::Publish(publish) => match self.workers.publish(cell, &publish).await {
                Ok(()) => {
                    tracing::warn!(uuid = %publish.uuid, "published a registration left unfinished");
                    (publish.id, Ended::Done)
                }
                Err(error) => {
                    tracing::warn!(%error, uuid = %publish.uuid, "publishing an unfinished registration failed");
                    (publish.id, Ended::Failed)
                }
            },
            LeftRegistration::Rollback(rollback) => match self.workers.rollback(cell, &rollback).await {
                Ok(()) => {
                    tracing::warn!(uuid = %rollback.uuid, "rolled back a registration left unfinished");
                    (rollback.id, Ended::Done)
                }
                Err(error) if error.status() == Some(reqwest::StatusCode::CONFLICT) => (rollback.id, Ended::Refused),
                Err(error) => {
                    tracing::warn!(%error, uuid = %rollback.uuid, "rolling back an unfinished registration failed");
                    (rollback.id, Ended::Failed)
                }
            },
        }
    }

    /// Ends one registration an older build's log holds as unfinished (see
    /// `finish_registrations`).
    async fn finish_registration(&self, generation: &Arc<Generation>, registration: Unfinished) {
        let cell = self.placement.map().owner(&registration.uuid);
        let isu = generation
            .by_uuid
            .get(registration.uuid.as_str())
            .map(|isu| isu.clone());
        match (registration.accepted, isu) {
            (true, Some(isu)) => {
                let publish = PublishIsu {
                    generation: generation.id,
                    uuid: isu.uuid.to_string(),
                    id: isu.id,
                    character: isu.character.to_string(),
                };
                match self.workers.publish(cell, &publish).await {
                    Ok(()) => {
                        tracing::warn!(uuid = %isu.uuid, "published a registration the old leader left unfinished");
                        let published = Command::Published {
                            generation: generation.id,
                            uuid: isu.uuid.to_string(),
                        };
                        if let Err(error) = self.log.propose_as_leader(&published).await {
                            tracing::warn!(%error, uuid = %isu.uuid, "logging a published registration failed");
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, uuid = %isu.uuid, "publishing an unfinished registration failed")
                    }
                }
            }
            _ => {
                let rollback = RollbackIsu {
                    generation: generation.id,
                    id: registration.id,
                    uuid: registration.uuid.clone(),
                };
                if self.workers.rollback(cell, &rollback).await.is_ok() {
                    tracing::warn!(uuid = %registration.uuid, "rolled back a registration the old leader left unfinished");
                    self.log_rolled_back(generation, &registration.uuid).await;
                }
            }
        }
    }

    async fn rollback_worker(&self, cell: CellId, rollback: &RollbackIsu, term: u64) {
        if !self.leads_in(term) {
            // A replica that stopped leading mid-registration (paused, cut off), or leads
            // again in a later term, leaves the worker alone: the leader ends the
            // registration from the log, and may have published it already.
            tracing::warn!(uuid = %rollback.uuid, "no longer leading in the registration's term: the worker's rollback is left to the leader");
            return;
        }
        if let Err(error) = self.workers.rollback(cell, rollback).await {
            tracing::error!(%error, uuid = %rollback.uuid, "rollback on worker failed; the leader's sweep ends it");
        }
    }

    /// Whether the sweeps leave registration `id` (held unaccepted; `posted`: its device
    /// posted to it, for the log) to await its acceptance: for [`ACCEPTANCE_WAIT`] from the
    /// first sweep that found it.
    fn awaits_acceptance(&self, generation: u64, id: i64, uuid: &str, posted: bool) -> bool {
        let now = std::time::Instant::now();
        let mut awaiting = self.awaiting_acceptance.lock();
        // Another generation's, or one that left its worker unseen (replaced by a later
        // registration of the UUID), is forgotten.
        awaiting.retain(|(of, _), (since, _)| still_awaited(*of, since, generation));
        let since = awaiting
            .entry((generation, id))
            .or_insert_with(|| (now, uuid.to_owned()))
            .0;
        let waited = now.duration_since(since);
        if waited < ACCEPTANCE_WAIT {
            tracing::warn!(
                id,
                posted,
                waited_ms = waited.as_millis() as u64,
                "a registration awaits JIA's acceptance on its worker"
            );
            return true;
        }
        false
    }

    /// Whether a registration of `uuid` a worker holds unaccepted awaits its acceptance (see
    /// [`State::awaits_acceptance`]).
    fn awaited(&self, generation: u64, uuid: &str) -> bool {
        self.awaiting_acceptance
            .lock()
            .iter()
            .any(|((of, _), (since, held))| held == uuid && still_awaited(*of, since, generation))
    }

    /// Forgets the awaited registrations of `cell` its worker no longer holds (`held`): ended
    /// by another leader meanwhile, or lost with a worker that restarted without its log.
    fn forget_awaited_not_held(&self, generation: u64, cell: CellId, held: &[UnpublishedIsu]) {
        let map = self.placement.map();
        self.awaiting_acceptance.lock().retain(|(of, id), (_, uuid)| {
            *of != generation || map.owner(uuid) != cell || held.iter().any(|isu| isu.id == *id)
        });
    }

    /// Forgets every awaited registration: a replica that takes the lead lists them afresh
    /// (those of an earlier lead may have been ended by the leaders between).
    fn forget_awaited(&self) {
        self.awaiting_acceptance.lock().clear();
    }

    /// The cells holding a registration that awaits its acceptance: the watch sweeps them at
    /// each of its rounds.
    pub(super) fn cells_awaiting_acceptance(&self, generation: u64) -> std::collections::BTreeSet<CellId> {
        let map = self.placement.map();
        self.awaiting_acceptance
            .lock()
            .iter()
            .filter(|((of, _), (since, _))| still_awaited(*of, since, generation))
            .map(|(_, (_, uuid))| map.owner(uuid))
            .collect()
    }

    /// For a registration waiting on an awaited earlier one of `uuid`: sweeps the cell that
    /// owns it, then waits [`AWAITED_SWEEP_EVERY`] if it still awaits its acceptance.
    async fn sweep_for_awaited(&self, generation: &Arc<Generation>, uuid: &str) {
        let cell = self.placement.map().owner(uuid);
        if let Err(error) = self.end_registrations_held_by(generation, cell).await {
            tracing::debug!(%error, %uuid, "sweeping for a registration that waits on an earlier one failed");
        }
        if self.awaited(generation.id, uuid) {
            tokio::time::sleep(AWAITED_SWEEP_EVERY).await;
        }
    }

    /// The lock that keeps sweeps of `cell` one at a time.
    fn sweep_lock(&self, cell: CellId) -> Arc<tokio::sync::Mutex<()>> {
        self.sweeping.lock().entry(cell).or_default().clone()
    }

    /// Whether this coordinator still leads in `term` (see [`State::leading_term`]).
    fn leads_in(&self, term: u64) -> bool {
        self.leading_term() == Some(term)
    }
}

/// The command that registers `held`, from the worker's copy of it (JIA's acceptance), with
/// the ISU's character (JIA's answer to the worker, or else the record's); `None` when the
/// worker holds none, or one that is not this registration's (logged: the registration is
/// then rolled back).
fn accepted_command(generation: &Generation, held: &UnpublishedIsu) -> Option<(Command, String)> {
    let record = held.accepted.as_deref()?;
    let command = base64::engine::general_purpose::STANDARD
        .decode(record)
        .ok()
        .and_then(|bytes| Command::decode(&bytes));
    match command {
        Some(Command::Isu {
            generation: of,
            mut isu,
            request,
        }) if of == generation.id && isu.uuid == held.uuid && isu.id == held.id => {
            if let Some(character) = &held.character {
                isu.character = character.clone();
            }
            let character = isu.character.clone();
            Some((
                Command::Isu {
                    generation: of,
                    isu,
                    request,
                },
                character,
            ))
        }
        _ => {
            tracing::error!(uuid = %held.uuid, id = held.id, "a worker's record of an accepted registration is not its command; rolled back");
            None
        }
    }
}

/// The command that removes a registered ISU whose registration failed.
fn removed(generation: &Generation, uuid: &str) -> Command {
    Command::Removed {
        generation: generation.id,
        uuid: uuid.to_owned(),
    }
}
