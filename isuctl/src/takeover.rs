//! `bench --kill-leader-every S`: during the load, the coordinator group's leader is killed
//! (SIGKILL, `cluster kill`) every S seconds, the takeover is timed, and the killed replica is
//! started again from its directory and waited for before the next kill (two replicas down
//! at once would leave no majority).
//!
//! `bench --pause-leader-every S`: the same with SIGSTOP (`cluster pause`): the leader hangs
//! with its sockets open, as on a stalled host. Once another replica has taken over, it gets
//! SIGCONT and must step down and follow the new leader (a later term, ready again).
//!
//! A takeover lasts from the kill until another replica says it leads in a later term and is
//! ready (`/healthz` 200: it has brought the workers to the generation, so it takes writes).
//! After the run, every replica must show the same state hash once they have applied the same
//! index: what one acknowledged, all hold. The figures go to the report's `control_plane`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use shared::protocol::{HeldIsu, ReplicaAnswer, COORDINATOR_REPLICA, COORDINATOR_REPLICA_ISUS, SECRET_HEADER};

use crate::external::run_logged;
use crate::http;
use crate::local::clock_time;
use crate::local::{self, Node, RunDir};
use crate::periodic::{append_line, Periodic};

/// How long a takeover may take before the kill is counted as failed.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(15);
/// How long a restarted replica may take to be ready again.
const RESTART_LIMIT: Duration = Duration::from_secs(60);
/// How long the replicas may take to apply the same index after the run.
const SETTLE_LIMIT: Duration = Duration::from_secs(20);

/// The report's `control_plane`.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ControlPlane {
    pub replicas: usize,
    pub leader_kills: u32,
    /// Leaders paused (SIGSTOP) until another took over, then resumed.
    pub leader_pauses: u32,
    /// Each kill's or pause's takeover, in milliseconds.
    pub takeover_ms: Vec<u64>,
    /// The median of `takeover_ms`.
    pub takeover_median_ms: Option<u64>,
    /// Kills or pauses after which no replica took over within 15 s, or the old leader did
    /// not come back (ready, and following a later term after a pause).
    pub failed_kills: u32,
    /// The bench's errors, connection errors and timeouts of the run.
    pub failed_requests: u64,
    /// From each kill or pause until another replica took over (or [`TAKEOVER_LIMIT`] when
    /// none did).
    pub takeover_windows: Vec<TakeoverWindow>,
    /// Failed requests that overlap no takeover window (see [`failed_outside`]): a run with
    /// any fails.
    pub failed_outside_takeovers: u64,
    /// Replicas whose state differs from the others' once all applied the same index.
    pub replicas_differing: u64,
    /// Registrations the bench got a 201 for that a replica does not hold (with their owner
    /// and icon), counted once per replica missing each.
    pub lost_acknowledged: u64,
    /// Activation requests JIA got for an ISU it had already activated that no re-sent
    /// registration explains: one request that reached JIA twice (the bench's report).
    pub repeated_activations: u64,
    /// Activations asked again by a registration the bench re-sent after a timeout, the
    /// first having been rolled back after JIA answered it (the bench's report).
    pub activations_on_resend: u64,
    /// Registrations answered 201 whose ISU JIA never activated (the bench's report).
    pub unactivated_acknowledged: u64,
    /// Each replica's state hash after the run.
    pub state_hashes: Vec<String>,
    pub log: PathBuf,
}

/// From a kill or pause until the takeover, in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TakeoverWindow {
    pub from_unix_ms: u64,
    pub to_unix_ms: u64,
}

/// One failed request of the bench's report (`failure_spans`), in milliseconds since the
/// Unix epoch.
#[derive(Debug, Clone, Deserialize)]
pub struct FailureSpan {
    pub label: String,
    pub sent_unix_ms: u64,
    pub failed_unix_ms: u64,
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

fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// What is done to the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disruption {
    /// SIGKILL, then a start from its directory.
    Kill,
    /// SIGSTOP, then SIGCONT once another replica leads.
    Pause,
}

/// The thread that kills (or pauses) leaders.
pub struct LeaderKiller(Periodic<ControlPlane>);

/// One replica's answer (`None`: it did not answer).
fn answer_of(node: &Node, secret: &str) -> Option<ReplicaAnswer> {
    let url = format!("{}{COORDINATOR_REPLICA}", node.url.trim_end_matches('/'));
    let answer = http::get_with(&url, &[(SECRET_HEADER, secret)], Duration::from_millis(500))?;
    (answer.status == 200)
        .then(|| serde_json::from_str(&answer.body).ok())
        .flatten()
}

pub fn role(answer: &ReplicaAnswer) -> &str {
    &answer.status.role
}

pub fn term(answer: &ReplicaAnswer) -> u64 {
    answer.status.term
}

pub(crate) fn applied(answer: &ReplicaAnswer) -> u64 {
    answer.status.applied_index
}

impl LeaderKiller {
    pub fn start(
        run_dir: RunDir,
        replicas: Vec<Node>,
        log: PathBuf,
        disruption: Disruption,
        first_after: Duration,
        every: Duration,
    ) -> LeaderKiller {
        let plane = ControlPlane {
            replicas: replicas.len(),
            log: log.clone(),
            ..ControlPlane::default()
        };
        LeaderKiller(Periodic::start(first_after, every, plane, move |plane| {
            match disruption {
                Disruption::Kill => plane.leader_kills += 1,
                Disruption::Pause => plane.leader_pauses += 1,
            }
            match disrupt_one(&run_dir, &replicas, disruption, &log, &mut plane.takeover_windows) {
                Some(takeover) => plane.takeover_ms.push(takeover.as_millis() as u64),
                None => plane.failed_kills += 1,
            }
        }))
    }

    /// Stops after the kill in progress, then compares the replicas' states.
    pub fn stop(self, run_dir: &RunDir, replicas: &[Node]) -> ControlPlane {
        let mut plane = self.0.stop();
        let mut sorted = plane.takeover_ms.clone();
        sorted.sort_unstable();
        plane.takeover_median_ms = sorted.get(sorted.len() / 2).copied();
        if let Ok(secret) = run_dir.secret() {
            let (hashes, differing) = settled_hashes(replicas, &secret);
            plane.state_hashes = hashes;
            plane.replicas_differing = differing;
        }
        plane
    }
}

/// Kills (or pauses) the leader, times the takeover, starts the killed replica again (or
/// resumes the paused one) and waits until it is ready (and, after a pause, follows a later
/// term); the takeover, or `None` when something did not happen in time.
fn disrupt_one(
    run_dir: &RunDir,
    replicas: &[Node],
    disruption: Disruption,
    log: &Path,
    windows: &mut Vec<TakeoverWindow>,
) -> Option<Duration> {
    let note = |text: String| append_line(log, &format!("{} {text}", clock_time()));
    let Ok(secret) = run_dir.secret() else {
        note("no cluster secret: no leader killed".to_owned());
        return None;
    };
    let secret = secret.as_str();
    let answers: Vec<Option<ReplicaAnswer>> = replicas.iter().map(|node| answer_of(node, secret)).collect();
    let leader = match single_leader(&answers) {
        Ok(leader) => leader,
        Err(leading) => {
            note(format!("no single leader ({leading} leading); no kill"));
            return None;
        }
    };
    let name = &replicas[leader].name;
    let term_before = answers[leader].as_ref().map(term).unwrap_or_default();
    let (verb, done, undo) = match disruption {
        Disruption::Kill => ("kill", "killed", "start"),
        Disruption::Pause => ("pause", "paused", "resume"),
    };
    let killed_at = Instant::now();
    let killed_at_wall = SystemTime::now();
    if !run_logged(cluster(run_dir, verb, name), log) {
        note(format!("{verb} {name} failed"));
        return None;
    }
    let takeover = wait_for_takeover(
        replicas.len(),
        |index| answer_of(&replicas[index], secret),
        leader,
        term_before,
        |answer| answer.ready,
        killed_at,
        TAKEOVER_LIMIT,
    );
    windows.push(TakeoverWindow {
        from_unix_ms: unix_ms(killed_at_wall),
        to_unix_ms: unix_ms(killed_at_wall + takeover.unwrap_or(TAKEOVER_LIMIT)),
    });
    match takeover {
        Some(took) => note(format!(
            "{done} {name} (term {term_before}); taken over in {} ms",
            took.as_millis()
        )),
        None => note(format!(
            "{done} {name} (term {term_before}); no takeover within {TAKEOVER_LIMIT:?}"
        )),
    }
    if !run_logged(cluster(run_dir, undo, name), log) {
        note(format!("{undo} {name} failed"));
        return None;
    }
    let started = Instant::now();
    // A resumed leader must also have learnt of the later term and stepped down.
    let back = |answer: &ReplicaAnswer| {
        answer.ready && (disruption == Disruption::Kill || (role(answer) != "leader" && term(answer) > term_before))
    };
    let mut last = None;
    loop {
        last = answer_of(&replicas[leader], secret).or(last);
        if last.as_ref().is_some_and(back) {
            break;
        }
        if started.elapsed() > RESTART_LIMIT {
            let seen = last.as_ref().map_or_else(
                || "no answer".to_owned(),
                |answer| format!("{} in term {}, ready {}", role(answer), term(answer), answer.ready),
            );
            note(format!("{name} not back {RESTART_LIMIT:?} after '{undo}' ({seen})"));
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
    takeover
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

/// Waits until every replica has applied the same index, then their state hashes and how
/// many differ from the most common one.
fn settled_hashes(replicas: &[Node], secret: &str) -> (Vec<String>, u64) {
    settled_hashes_of(
        replicas.len(),
        |index| answer_of(&replicas[index], secret),
        SETTLE_LIMIT,
    )
}

/// [`settled_hashes`] of `replicas` replicas that `answer` asks by index, waiting at most
/// `limit`.
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
pub fn lost_acknowledged(run_dir: &RunDir, replicas: &[Node], acknowledged: &[HeldIsu], log: &Path) -> u64 {
    let Ok(secret) = run_dir.secret() else {
        return acknowledged.len() as u64 * replicas.len() as u64;
    };
    let mut lost = 0;
    for node in replicas {
        let url = format!("{}{COORDINATOR_REPLICA_ISUS}", node.url.trim_end_matches('/'));
        let held: Option<std::collections::HashSet<HeldIsu>> =
            http::get_with(&url, &[(SECRET_HEADER, secret.as_str())], Duration::from_secs(5))
                .filter(|answer| answer.status == 200)
                .and_then(|answer| serde_json::from_str(&answer.body).ok());
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
                    node.name,
                    missing.len(),
                    missing[0]
                ),
            );
        }
        lost += missing.len() as u64;
    }
    lost
}

/// `cluster VERB NAME` against the run directory's cluster.
fn cluster(run_dir: &RunDir, verb: &str, name: &str) -> Command {
    let mut command = local::cluster_command();
    command.args([verb, name]).env("ISU_RUN_DIR", &run_dir.path);
    command
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
}
