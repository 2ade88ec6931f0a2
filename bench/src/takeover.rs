//! `isuctl bench --kill-leader-every S`: during the load, the coordinator group's leader is
//! killed (SIGKILL, `cluster kill`) every S seconds, the takeover is timed, and the killed
//! replica is started again from its directory and waited for before the next kill (two
//! replicas down at once would leave no majority).
//!
//! `isuctl bench --pause-leader-every S`: the same with SIGSTOP (`cluster pause`): the
//! leader hangs with its sockets open, as on a stalled host. Once another replica has taken
//! over, it gets SIGCONT and must step down and follow the new leader (a later term, ready
//! again).
//!
//! A takeover lasts from the kill until another replica says it leads in a later term and is
//! ready (`/healthz` 200: it has brought the workers to the generation, so it takes writes).
//! After the run, every replica must show the same state hash once they have applied the same
//! index: what one acknowledged, all hold. The figures go to the report's `control_plane`,
//! with what the bench's report says of the same run (its failed requests inside and outside
//! the takeovers, JIA's activations, the acknowledged registrations every replica must hold).
//!
//! The group is reached through [`Group`] (`isuctl` gives the local cluster's); the
//! functions that read replica answers ([`single_leader`], [`wait_for_takeover`],
//! [`settled_hashes_of`]) also serve the network-namespace hosts' leader-cut test.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use shared::protocol::{HeldIsu, ReplicaAnswer};

use crate::periodic::{append_line, run_logged, Periodic};
use crate::report::{ControlPlane, ReportFile, TakeoverWindow};
use crate::scenario::stats::FailureSpan;
use shared::clock::clock_time;
use shared::clock::unix_ms;

/// How long a takeover may take before the kill is counted as failed.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(15);
/// How long a restarted replica may take to be ready again.
const RESTART_LIMIT: Duration = Duration::from_secs(60);
/// How long the replicas may take to apply the same index after the run.
const SETTLE_LIMIT: Duration = Duration::from_secs(20);

/// A coordinator group as the leader killer reaches it: a replica is its index, from 0 to
/// [`Group::replicas`].
pub trait Group: Send + Sync + 'static {
    fn replicas(&self) -> usize;
    /// The replica's name (`coordinator-2`), for the log and the commands.
    fn name(&self, replica: usize) -> &str;
    /// What the replica says of itself (`GET /internal/replica`; `None`: no answer).
    fn answer(&self, replica: usize) -> Option<ReplicaAnswer>;
    /// The registered ISUs the replica holds (`GET /internal/replica/isus`; `None`: no
    /// answer).
    fn held_isus(&self, replica: usize) -> Option<HashSet<HeldIsu>>;
    /// The command that does `action` to the replica (`isuctl cluster kill NAME`, ...).
    fn command(&self, action: Action, replica: usize) -> Command;
}

/// What is done to the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disruption {
    /// SIGKILL, then a start from its directory.
    Kill,
    /// SIGSTOP, then SIGCONT once another replica leads.
    Pause,
}

impl Disruption {
    /// The action that disrupts the leader, and the one that undoes it.
    fn actions(self) -> (Action, Action) {
        match self {
            Disruption::Kill => (Action::Kill, Action::Start),
            Disruption::Pause => (Action::Pause, Action::Resume),
        }
    }
}

/// One thing done to a replica, by [`Group::command`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Kill,
    Start,
    Pause,
    Resume,
}

impl Action {
    /// The verb of `isuctl cluster` that does it.
    pub fn verb(self) -> &'static str {
        match self {
            Action::Kill => "kill",
            Action::Start => "start",
            Action::Pause => "pause",
            Action::Resume => "resume",
        }
    }

    /// What the replica is once it is done, for the log.
    fn done(self) -> &'static str {
        match self {
            Action::Kill => "killed",
            Action::Start => "started",
            Action::Pause => "paused",
            Action::Resume => "resumed",
        }
    }
}

pub fn role(answer: &ReplicaAnswer) -> &str {
    &answer.status.role
}

pub fn term(answer: &ReplicaAnswer) -> u64 {
    answer.status.term
}

pub fn applied(answer: &ReplicaAnswer) -> u64 {
    answer.status.applied_index
}

/// The thread that kills (or pauses) leaders.
pub struct LeaderKiller<G> {
    periodic: Periodic<ControlPlane>,
    group: Arc<G>,
}

impl<G: Group> LeaderKiller<G> {
    /// Disrupts the leader after `first_after`, then every `every` (from the end of one
    /// disruption, the old leader back, to the next); each one is told in `log`.
    pub fn start(
        group: Arc<G>,
        log: PathBuf,
        disruption: Disruption,
        first_after: Duration,
        every: Duration,
    ) -> LeaderKiller<G> {
        let plane = ControlPlane {
            replicas: group.replicas(),
            log: log.clone(),
            ..ControlPlane::default()
        };
        let disrupted = group.clone();
        let periodic = Periodic::start(first_after, every, plane, move |plane| {
            match disruption {
                Disruption::Kill => plane.leader_kills += 1,
                Disruption::Pause => plane.leader_pauses += 1,
            }
            match disrupt_one(&*disrupted, disruption, &log, &mut plane.takeover_windows) {
                Some(takeover) => plane.takeover_ms.push(takeover.as_millis() as u64),
                None => plane.failed_kills += 1,
            }
        });
        LeaderKiller { periodic, group }
    }

    /// Stops after the kill in progress, compares the replicas' states, and counts what the
    /// bench's `report` of the run says against the takeovers (nothing of it without one).
    pub fn stop(self, report: Option<&ReportFile>) -> ControlPlane {
        let mut plane = self.periodic.stop();
        let mut sorted = plane.takeover_ms.clone();
        sorted.sort_unstable();
        plane.takeover_median_ms = sorted.get(sorted.len() / 2).copied();
        let group = &*self.group;
        let (hashes, differing) = settled_hashes_of(group.replicas(), |index| group.answer(index), SETTLE_LIMIT);
        plane.state_hashes = hashes;
        plane.replicas_differing = differing;
        if let Some(report) = report {
            plane.failed_requests = report.failed_requests();
            plane.repeated_activations = report.repeated_activations as u64;
            plane.activations_on_resend = report.activations_on_resend as u64;
            plane.unactivated_acknowledged = report.unactivated_acknowledged as u64;
            plane.failed_outside_takeovers =
                failed_outside(&plane.takeover_windows, &report.failure_spans, plane.failed_requests);
            plane.lost_acknowledged = lost_acknowledged(group, &report.acknowledged_registrations, &plane.log);
        }
        plane
    }
}

/// How many of `failed` failed requests fall outside every window of `windows`: a request
/// is inside one when it was sent before the window closed and failed after it opened (it
/// was in flight during the takeover, or sent during it). A failure without a span among
/// `spans` (an error found in an answer's data, or past the spans the bench keeps) counts
/// as outside.
pub fn failed_outside(windows: &[TakeoverWindow], spans: &[FailureSpan], failed: u64) -> u64 {
    let inside = spans
        .iter()
        .filter(|span| {
            windows
                .iter()
                .any(|window| span.sent_unix_ms <= window.to_unix_ms && span.failed_unix_ms >= window.from_unix_ms)
        })
        .count() as u64;
    failed.saturating_sub(inside)
}

/// Kills (or pauses) the leader, times the takeover, starts the killed replica again (or
/// resumes the paused one) and waits until it is back; the takeover, or `None` when
/// something did not happen in time.
fn disrupt_one(
    group: &impl Group,
    disruption: Disruption,
    log: &Path,
    windows: &mut Vec<TakeoverWindow>,
) -> Option<Duration> {
    let note = |text: String| append_line(log, &format!("{} {text}", clock_time()));
    let answers: Vec<Option<ReplicaAnswer>> = (0..group.replicas()).map(|index| group.answer(index)).collect();
    let leader = match single_leader(&answers) {
        Ok(leader) => leader,
        Err(leading) => {
            note(format!("no single leader ({leading} leading); no kill"));
            return None;
        }
    };
    let name = group.name(leader);
    let term_before = answers[leader].as_ref().map(term).unwrap_or_default();
    let (disrupt, undo) = disruption.actions();
    let disrupted_at = (Instant::now(), SystemTime::now());
    if !run_logged(group.command(disrupt, leader), log) {
        note(format!("{} {name} failed", disrupt.verb()));
        return None;
    }
    let takeover = wait_for_takeover(
        group.replicas(),
        |index| group.answer(index),
        leader,
        term_before,
        |answer| answer.ready,
        disrupted_at.0,
        TAKEOVER_LIMIT,
    );
    windows.push(TakeoverWindow {
        from_unix_ms: unix_ms(disrupted_at.1),
        to_unix_ms: unix_ms(disrupted_at.1 + takeover.unwrap_or(TAKEOVER_LIMIT)),
    });
    let done = disrupt.done();
    match takeover {
        Some(took) => note(format!(
            "{done} {name} (term {term_before}); taken over in {} ms",
            took.as_millis()
        )),
        None => note(format!(
            "{done} {name} (term {term_before}); no takeover within {TAKEOVER_LIMIT:?}"
        )),
    }
    if !run_logged(group.command(undo, leader), log) {
        note(format!("{} {name} failed", undo.verb()));
        return None;
    }
    wait_until_back(group, leader, disruption, term_before, &note)?;
    takeover
}

/// After `undo`ing the disruption of the old `leader`, waits until it is ready again (and,
/// after a pause, follows a later term than `term_before`); `None` after [`RESTART_LIMIT`].
fn wait_until_back(
    group: &impl Group,
    leader: usize,
    disruption: Disruption,
    term_before: u64,
    note: &impl Fn(String),
) -> Option<()> {
    let (name, undo) = (group.name(leader), disruption.actions().1);
    let started = Instant::now();
    // A resumed leader must also have learnt of the later term and stepped down.
    let back = |answer: &ReplicaAnswer| {
        answer.ready && (disruption == Disruption::Kill || (role(answer) != "leader" && term(answer) > term_before))
    };
    let mut last = None;
    loop {
        last = group.answer(leader).or(last);
        if last.as_ref().is_some_and(back) {
            break;
        }
        if started.elapsed() > RESTART_LIMIT {
            let seen = last.as_ref().map_or_else(
                || "no answer".to_owned(),
                |answer| format!("{} in term {}, ready {}", role(answer), term(answer), answer.ready),
            );
            note(format!(
                "{name} not back {RESTART_LIMIT:?} after '{}' ({seen})",
                undo.verb()
            ));
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let following = last
        .as_ref()
        .map(|answer| format!(" ({} in term {})", role(answer), term(answer)));
    note(format!(
        "{name} ready again after {} ms{}",
        started.elapsed().as_millis(),
        following.unwrap_or_default()
    ));
    Some(())
}

/// The one replica that says it leads, by index among `answers`; else how many say so.
pub fn single_leader(answers: &[Option<ReplicaAnswer>]) -> Result<usize, usize> {
    let leaders: Vec<usize> = (0..answers.len())
        .filter(|index| answers[*index].as_ref().is_some_and(|answer| role(answer) == "leader"))
        .collect();
    match leaders[..] {
        [leader] => Ok(leader),
        _ => Err(leaders.len()),
    }
}

/// Polls every replica but `leader` (by index, `answer` asks one) every 10 ms until one leads
/// in a term after `term_before` and `also` holds of its answer (e.g. it is ready): how long
/// after `since` that was, or `None` once `limit` has passed.
pub fn wait_for_takeover(
    replicas: usize,
    answer: impl Fn(usize) -> Option<ReplicaAnswer>,
    leader: usize,
    term_before: u64,
    also: impl Fn(&ReplicaAnswer) -> bool,
    since: Instant,
    limit: Duration,
) -> Option<Duration> {
    loop {
        let took_over = (0..replicas).filter(|index| *index != leader).any(|index| {
            answer(index)
                .is_some_and(|answer| role(&answer) == "leader" && term(&answer) > term_before && also(&answer))
        });
        if took_over {
            return Some(since.elapsed());
        }
        if since.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (at most `limit`) until every one of `replicas` replicas, that `answer` asks by
/// index, has applied the same index; then their state hashes and how many differ from the
/// most common one.
pub fn settled_hashes_of(
    replicas: usize,
    answer: impl Fn(usize) -> Option<ReplicaAnswer>,
    limit: Duration,
) -> (Vec<String>, u64) {
    let started = Instant::now();
    loop {
        let answers: Vec<Option<ReplicaAnswer>> = (0..replicas).map(&answer).collect();
        let indexes: Vec<Option<u64>> = answers.iter().map(|answer| answer.as_ref().map(applied)).collect();
        let settled = indexes.iter().all(|index| index.is_some() && *index == indexes[0]);
        if settled || started.elapsed() > limit {
            let hashes: Vec<String> = answers
                .iter()
                .map(|answer| {
                    answer
                        .as_ref()
                        .map_or_else(|| "unanswered".to_owned(), |answer| answer.state_hash.clone())
                })
                .collect();
            let most = hashes
                .iter()
                .map(|hash| hashes.iter().filter(|other| *other == hash).count())
                .max()
                .unwrap_or(0);
            return (hashes.clone(), (hashes.len() - most) as u64);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How many of the `acknowledged` registrations each replica lacks (by UUID, owner and icon),
/// summed over the replicas; a replica that does not answer lacks them all. Details of
/// what is missing go to `log`.
pub fn lost_acknowledged(group: &impl Group, acknowledged: &[HeldIsu], log: &Path) -> u64 {
    let mut lost = 0;
    for replica in 0..group.replicas() {
        let held = group.held_isus(replica);
        let missing: Vec<&HeldIsu> = match &held {
            Some(held) => acknowledged.iter().filter(|isu| !held.contains(*isu)).collect(),
            None => acknowledged.iter().collect(),
        };
        if !missing.is_empty() {
            append_line(
                log,
                &format!(
                    "{} {} lacks {} acknowledged registrations, e.g. {:?}",
                    clock_time(),
                    group.name(replica),
                    missing.len(),
                    missing[0]
                ),
            );
        }
        lost += missing.len() as u64;
    }
    lost
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(sent: u64, failed: u64) -> FailureSpan {
        FailureSpan {
            label: "POST /api/isu".to_owned(),
            sent_unix_ms: sent,
            failed_unix_ms: failed,
        }
    }

    #[test]
    fn a_failure_is_inside_a_takeover_when_it_overlaps_one_and_without_a_span_outside() {
        let windows = [
            TakeoverWindow {
                from_unix_ms: 10_000,
                to_unix_ms: 10_900,
            },
            TakeoverWindow {
                from_unix_ms: 20_000,
                to_unix_ms: 20_800,
            },
        ];
        let spans = [
            span(9_500, 10_500),  // in flight at the kill
            span(10_100, 11_100), // sent during the takeover, timed out after it
            span(10_900, 10_950), // sent as the window closed
            span(8_000, 9_000),   // before any
            span(10_901, 11_901), // sent after the takeover
            span(20_700, 21_700), // in the second
        ];
        assert_eq!(failed_outside(&windows, &spans, 6), 2);
        // Two failures the bench kept no span of (data errors): outside.
        assert_eq!(failed_outside(&windows, &spans, 8), 4);
        assert_eq!(failed_outside(&[], &spans, 6), 6);
        assert_eq!(failed_outside(&windows, &[], 0), 0);
    }

    /// Three replicas in memory: `None` a replica that does not answer, else its role and
    /// term (all ready). Doing an action to one changes them as the real group would.
    struct FakeGroup {
        replicas: std::sync::Mutex<Vec<Option<(&'static str, u64)>>>,
        held: Vec<Option<HashSet<HeldIsu>>>,
    }

    impl FakeGroup {
        fn new(replicas: Vec<Option<(&'static str, u64)>>) -> FakeGroup {
            FakeGroup {
                replicas: std::sync::Mutex::new(replicas),
                held: Vec::new(),
            }
        }
    }

    impl Group for FakeGroup {
        fn replicas(&self) -> usize {
            self.replicas.lock().unwrap().len()
        }

        fn name(&self, replica: usize) -> &str {
            ["coordinator", "coordinator-2", "coordinator-3"][replica]
        }

        fn answer(&self, replica: usize) -> Option<ReplicaAnswer> {
            let (role, term) = self.replicas.lock().unwrap()[replica]?;
            Some(ReplicaAnswer {
                status: shared::protocol::ReplicaStatus {
                    id: replica as u64 + 1,
                    role: role.to_owned(),
                    term,
                    leader: None,
                    last_log_index: 7,
                    applied_index: 7,
                    members: vec![1, 2, 3],
                },
                ready: true,
                state_hash: "cafe".to_owned(),
            })
        }

        fn held_isus(&self, replica: usize) -> Option<HashSet<HeldIsu>> {
            self.held[replica].clone()
        }

        /// Killing or pausing the leader makes the next replica lead in the next term; the
        /// old leader comes back following it.
        fn command(&self, action: Action, replica: usize) -> Command {
            let mut replicas = self.replicas.lock().unwrap();
            let newest = replicas.iter().flatten().map(|(_, term)| *term).max().unwrap_or(0);
            match action {
                Action::Kill | Action::Pause => {
                    replicas[replica] = None;
                    replicas[(replica + 1) % 3] = Some(("leader", newest + 1));
                }
                Action::Start | Action::Resume => replicas[replica] = Some(("follower", newest)),
            }
            Command::new("true")
        }
    }

    #[test]
    fn a_killed_leader_is_taken_over_and_back_and_the_log_says_so() {
        let group = FakeGroup::new(vec![Some(("leader", 4)), Some(("follower", 4)), Some(("follower", 4))]);
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("leader-kills.log");
        let mut windows = Vec::new();
        let took = disrupt_one(&group, Disruption::Pause, &log, &mut windows);
        assert!(took.is_some_and(|took| took < TAKEOVER_LIMIT), "{took:?}");
        assert_eq!(windows.len(), 1);
        assert!(windows[0].from_unix_ms <= windows[0].to_unix_ms);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("paused coordinator (term 4); taken over in"), "{text}");
        assert!(text.contains("coordinator ready again after"), "{text}");
        assert!(text.contains("(follower in term 5)"), "{text}");

        // Two leaders: nothing is killed, the kill counts as failed.
        let split = FakeGroup::new(vec![Some(("leader", 4)), Some(("leader", 5)), None]);
        assert_eq!(disrupt_one(&split, Disruption::Kill, &log, &mut windows), None);
        assert_eq!(windows.len(), 1);
        assert!(std::fs::read_to_string(&log)
            .unwrap()
            .contains("no single leader (2 leading); no kill"));
    }

    #[test]
    fn every_replica_must_hold_every_acknowledged_registration() {
        let isu = |uuid: &str| HeldIsu {
            uuid: uuid.to_owned(),
            owner: "bench000".to_owned(),
            icon_sha256: None,
        };
        let acknowledged = [isu("a"), isu("b")];
        let mut group = FakeGroup::new(vec![None, None, None]);
        group.held = vec![
            Some(acknowledged.iter().cloned().collect()),
            Some([isu("a")].into_iter().collect()),
            None,
        ];
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("leader-kills.log");
        assert_eq!(lost_acknowledged(&group, &acknowledged, &log), 1 + 2);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("coordinator-2 lacks 1 acknowledged registrations"),
            "{text}"
        );
        assert!(
            text.contains("coordinator-3 lacks 2 acknowledged registrations"),
            "{text}"
        );
        assert_eq!(lost_acknowledged(&group, &[], &log), 0);
    }
}
