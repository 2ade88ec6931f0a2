//! `scripts/hosts test --coordinators 3`: the replicas' leader's host cut off under load.
//!
//! Under bench load, with the control-plane probe (`probe`) running from the bench host:
//!
//! 1. The leader is found (`GET /internal/replica` of each replica, asked on its own host).
//!    On nginx's host, leadership is moved away first: its process is stopped (SIGSTOP)
//!    until another replica leads in a later term (at most 10 s), then continued (openraft
//!    0.9 has no leader transfer; a stopped leader cannot win the next election), up to
//!    three times.
//! 2. The leader's host is cut off from every other cluster host for 10 s (not from the bench
//!    host: its devices keep posting to its worker), then healed.
//! 3. Checked, each within a bound: another replica leads in a later term within 10 s of the
//!    cut (the takeover, printed in ms); every probe round (a new user's sign-in, a write; its
//!    ISU list; the trend) that starts once the takeover window has passed answers 200
//!    (window: the cut until 3 s after the takeover, nginx setting the unreachable replica
//!    aside for 2 s included; rounds inside it are printed, not counted); after the heal the
//!    cut replica follows the new leader within 10 s and every replica reaches the same
//!    applied index and state hash within 20 s; the bench passes with no error but the
//!    trend going back (the cut worker's pushes reach only the cut replica meanwhile, so a
//!    client nginx moves off it may see an older trend); both workers store device posts
//!    during the cut; nothing the devices had acknowledged is lost.
//!
//! Not counted, by design: failures of the cut worker's cell during the cut (nginx cannot
//! reach it), and the bench's timeouts (requests nginx sent to the cut replica or cell; their
//! count is printed, with the failures by cell).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bench::report::ReportFile;
use shared::protocol::ReplicaAnswer;

use super::checks::{
    bench_options, figure, no_error_but_trend_regressions, nothing_acknowledged_lost, read_report, summary,
    wait_for_load, Checks, REGISTERED_BY,
};
use super::probe::Probe;
use super::{metrics, nodes};
use bench::takeover::{role, settled_hashes_of, single_leader, term, wait_for_takeover};
use hostlab::plan::{HostPlan, Role};
use hostlab::{BenchArgs, Hosts};

/// How long the leader's host stays cut off.
const CUT: Duration = Duration::from_secs(10);
/// How long another replica may take to lead after the cut.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(10);
/// After the takeover, until nginx has set the unreachable replica aside (2 s) and clients
/// moved: probe rounds starting later must all succeed.
const WINDOW_AFTER_TAKEOVER: Duration = Duration::from_secs(3);
/// How long the cut replica may take to follow the new leader after the heal.
const FOLLOW_LIMIT: Duration = Duration::from_secs(10);
/// How long the replicas may take to apply the same index after the heal.
const SETTLE_LIMIT: Duration = Duration::from_secs(20);
/// How long a leader on nginx's host may stay stopped (SIGSTOP) waiting for another to lead.
const PAUSE_LIMIT: Duration = Duration::from_secs(10);

/// Continues a stopped process when dropped, whatever happened meanwhile.
struct ContinueOnDrop(u32);

impl Drop for ContinueOnDrop {
    fn drop(&mut self) {
        e2e::process::signal_pid(self.0, "CONT");
    }
}

pub fn run(hosts: &Hosts, checks: &mut Checks, cluster: &[HostPlan], seconds: u64) -> anyhow::Result<()> {
    let state_dir = &hosts.paths.state;
    let replicas: Vec<&HostPlan> = cluster.iter().filter(|host| host.replica.is_some()).collect();
    let workers: Vec<&HostPlan> = cluster
        .iter()
        .filter(|host| matches!(host.role, Role::Worker { .. }))
        .collect();
    let answer = |index: usize| nodes::replica_answer(hosts, replicas[index]);
    let answers = || (0..replicas.len()).map(answer).collect::<Vec<Option<ReplicaAnswer>>>();
    let stored = |host: &HostPlan| nodes::stored_conditions(hosts, [host.name.as_str()]);
    let stored_total = || nodes::stored_conditions(hosts, workers.iter().map(|host| host.name.as_str()));
    let stored_before = stored_total()?;
    let json = state_dir.join("leader-cut.json");
    let _ = std::fs::remove_file(&json);
    let bench_args = BenchArgs {
        pin: false,
        bench_args: bench_options(seconds + 25, &["--no-growth", "--keep-going"], &json),
    };
    let output = state_dir.join("leader-cut.out");
    let outcome = std::thread::scope(|scope| -> anyhow::Result<Option<Cut>> {
        let launched = Instant::now();
        let bench = scope.spawn(|| hosts.bench(&bench_args, Some(&output)));
        wait_for_load(hosts, &workers[0].name)?;
        // The probe's rounds before the cut: 2 s of them.
        std::thread::sleep(REGISTERED_BY.saturating_sub(Duration::from_secs(2) + launched.elapsed()));
        let probe = Probe::start(hosts)?;
        std::thread::sleep(Duration::from_secs(2));
        let cut = cut_the_leader(hosts, checks, cluster, &replicas, &answer, &answers, &stored);
        let rounds = probe.stop();
        let _ = bench.join().expect("the bench thread does not panic");
        Ok(cut?.map(|cut| Cut { rounds, ..cut }))
    })?;
    summary(checks, "bench with the leader's host cut off", &output);
    let report = read_report(&json)?;
    let Some(cut) = outcome else {
        checks.check("the leader's host cut off (no single leader to cut: see above)", false);
        return Ok(());
    };
    judge_probe(checks, &cut);
    judge_bench(checks, report.as_ref(), &cut, workers.len())?;
    std::thread::sleep(Duration::from_secs(1));
    nothing_acknowledged_lost(checks, "leader cut: ", stored_total()? - stored_before, report.as_ref());
    Ok(())
}

/// What the cut did, for the judgements after the bench.
struct Cut {
    /// The cut host's cell.
    cell: String,
    /// The cut.
    at: Instant,
    /// Another replica led, after the cut.
    takeover: Option<Duration>,
    rounds: Vec<super::probe::Round>,
}

/// Steps 1 and 2 and the checks on the replicas; `None` when no single leader was found.
fn cut_the_leader(
    hosts: &Hosts,
    checks: &mut Checks,
    cluster: &[HostPlan],
    replicas: &[&HostPlan],
    answer: &impl Fn(usize) -> Option<ReplicaAnswer>,
    answers: &impl Fn() -> Vec<Option<ReplicaAnswer>>,
    stored: &impl Fn(&HostPlan) -> anyhow::Result<f64>,
) -> anyhow::Result<Option<Cut>> {
    let Some((mut leader, mut found)) = find_leader(answers, Duration::from_secs(10), 0) else {
        checks.say("  leader cut: no single leader within 10 s");
        return Ok(None);
    };
    let mut tries = 0;
    while replicas[leader].role == Role::Coordinator {
        tries += 1;
        if tries > 3 {
            checks.check("leadership moved off nginx's host (3 pauses of its leader)", false);
            return Ok(None);
        }
        let node = replicas[leader].coordinator_node();
        let pid = nodes::node_pid(hosts, &node)?
            .with_context(|| format!("no process of {node} on {}", replicas[leader].name))?;
        let paused_at = Instant::now();
        // Held stopped until another replica leads in a later term: a pause shorter than
        // the election timeout (up to 10 heartbeats) would leave it the leader.
        let paused_term = term(&found);
        let moved = {
            let _continue = ContinueOnDrop(pid);
            e2e::process::signal_pid(pid, "STOP");
            find_leader(answers, PAUSE_LIMIT, paused_term)
        };
        checks.say(&format!(
            "  leader cut: paused {node} (the leader, beside nginx) until another led: {}",
            match &moved {
                Some((index, _)) => format!(
                    "replica {} leads after {} ms",
                    replicas[*index].replica.unwrap_or_default(),
                    paused_at.elapsed().as_millis()
                ),
                None => format!("no other leader within {PAUSE_LIMIT:?}"),
            }
        ));
        let Some(moved) = moved else { return Ok(None) };
        (leader, found) = moved;
    }
    let cut_host = replicas[leader];
    let term_before = term(&found);
    let Role::Worker { cell } = &cut_host.role else {
        unreachable!("moved off the coordinator host")
    };
    let others: Vec<&HostPlan> = cluster.iter().filter(|host| host.name != cut_host.name).collect();
    let other_worker = others
        .iter()
        .find(|host| matches!(host.role, Role::Worker { .. }))
        .copied()
        .context("another worker host")?;
    let stored_before = (stored(cut_host)?, stored(other_worker)?);
    for other in &others {
        hosts.net(&format!("cut {} {}", cut_host.name, other.name))?;
    }
    let at = Instant::now();
    checks.say(&format!(
        "  leader cut: replica {} (term {term_before}) on {} cut off from {}",
        cut_host.replica.unwrap_or_default(),
        cut_host.name,
        others
            .iter()
            .map(|host| host.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let takeover = wait_for_takeover(
        replicas.len(),
        answer,
        leader,
        term_before,
        |_| true,
        at,
        TAKEOVER_LIMIT,
    );
    timed_check(
        checks,
        "another replica leads in a later term after the cut (the takeover)",
        takeover,
        TAKEOVER_LIMIT,
    );
    std::thread::sleep(CUT.saturating_sub(at.elapsed()));
    let stored_during = (
        stored(cut_host)? - stored_before.0,
        stored(other_worker)? - stored_before.1,
    );
    for other in &others {
        hosts.net(&format!("heal {} {}", cut_host.name, other.name))?;
    }
    let healed = Instant::now();
    checks.say(&format!("  leader cut: healed after {} s", at.elapsed().as_secs()));
    checks.check(
        format!(
            "both workers stored device posts during the cut (cut host {}, other {})",
            stored_during.0, stored_during.1
        ),
        stored_during.0 > 100.0 && stored_during.1 > 100.0,
    );
    let follows = loop {
        let now = answers();
        let cut_one = now[leader].as_ref();
        let leads = single_leader(&now).ok().filter(|index| *index != leader);
        let following = cut_one.zip(leads).is_some_and(|(cut_one, leads)| {
            role(cut_one) == "follower"
                && cut_one.status.leader == replicas[leads].replica
                && term(cut_one) > term_before
        });
        if following {
            break Some(healed.elapsed());
        }
        if healed.elapsed() > FOLLOW_LIMIT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    timed_check(
        checks,
        "after the heal the cut replica follows the new leader",
        follows,
        FOLLOW_LIMIT,
    );
    let (hashes, differing) = settled_hashes_of(replicas.len(), answer, SETTLE_LIMIT);
    let unanswered = hashes.iter().filter(|hash| *hash == "unanswered").count();
    checks.check(
        format!(
            "every replica reaches the same applied index and state hash ({}; {} s after the heal)",
            hashes.join(" "),
            healed.elapsed().as_secs()
        ),
        differing == 0 && unanswered == 0,
    );
    // The probe runs on a little after the heal.
    std::thread::sleep(Duration::from_secs(5).saturating_sub(healed.elapsed()));
    Ok(Some(Cut {
        cell: cell.clone(),
        at,
        takeover,
        rounds: Vec::new(),
    }))
}

/// A check that something happened within `limit`: how long it took, or that it did not.
fn timed_check(checks: &mut Checks, what: &str, took: Option<Duration>, limit: Duration) {
    checks.check(
        match took {
            Some(took) => format!("{what}: {} ms", took.as_millis()),
            None => format!("{what}: not within {limit:?}"),
        },
        took.is_some(),
    );
}

/// The one leader, of a term after `after_term`, and its answer, once just one replica says
/// it leads (polled every 100 ms for at most `limit`).
fn find_leader(
    answers: &impl Fn() -> Vec<Option<ReplicaAnswer>>,
    limit: Duration,
    after_term: u64,
) -> Option<(usize, ReplicaAnswer)> {
    let started = Instant::now();
    loop {
        let now = answers();
        if let Ok(leader) = single_leader(&now) {
            if let Some(answer) = now[leader].clone().filter(|answer| term(answer) > after_term) {
                return Some((leader, answer));
            }
        }
        if started.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The probe's rounds: ended before the cut, inside the takeover window (running at some
/// time between the cut and the window's end), started after it.
fn judge_probe(checks: &mut Checks, cut: &Cut) {
    // Milliseconds from the cut, negative before it.
    let since_cut = |instant: Instant| -> i128 {
        instant.saturating_duration_since(cut.at).as_millis() as i128
            - cut.at.saturating_duration_since(instant).as_millis() as i128
    };
    let describe = |rounds: &[&super::probe::Round]| -> Vec<String> {
        rounds
            .iter()
            .filter_map(|round| {
                let failed = round.failed.as_ref()?;
                Some(format!(
                    "{} to {} ms: {failed}",
                    since_cut(round.started),
                    since_cut(round.ended)
                ))
            })
            .collect()
    };
    let Some(window_end) = cut.takeover.map(|took| cut.at + took + WINDOW_AFTER_TAKEOVER) else {
        checks.check("probe after the takeover window (no takeover)", false);
        return;
    };
    let before: Vec<_> = cut.rounds.iter().filter(|round| round.ended < cut.at).collect();
    let inside: Vec<_> = cut
        .rounds
        .iter()
        .filter(|round| round.ended >= cut.at && round.started < window_end)
        .collect();
    let after: Vec<_> = cut.rounds.iter().filter(|round| round.started >= window_end).collect();
    // "N of M rounds ok", and the failed ones.
    let tally = |rounds: &[&super::probe::Round]| -> (String, bool) {
        let failed = describe(rounds);
        let mut text = format!("{} of {} rounds ok", rounds.len() - failed.len(), rounds.len());
        if !failed.is_empty() {
            text.push_str(&format!("; failed (ms from the cut): {}", failed.join(", ")));
        }
        (text, failed.is_empty())
    };
    for (label, rounds) in [("before the cut", &before), ("inside the takeover window", &inside)] {
        checks.say(&format!("  probe {label}: {}", tally(rounds).0));
    }
    let (text, all_ok) = tally(&after);
    checks.check(
        format!(
            "sign-in, ISU list and trend through nginx after the takeover window ({} ms on): {text}",
            since_cut(window_end)
        ),
        all_ok && after.len() >= 10,
    );
}

/// The bench's run: passed, no error but the trend going back; failures by cell printed.
fn judge_bench(checks: &mut Checks, report: Option<&ReportFile>, cut: &Cut, workers: usize) -> anyhow::Result<()> {
    checks.check(
        "the bench passes with the leader's host cut off",
        report.is_some_and(|report| report.passed),
    );
    let no_failures = BTreeMap::new();
    let by_digit = report.map_or(&no_failures, |report| &report.failures_by_isu_digit);
    let cell_index = u32::from(cut.cell.as_bytes()[0] - b'a');
    let (cut_cell, others, none) = metrics::failures_by_cell(by_digit, workers as u32, cell_index)?;
    checks.say(&format!(
        "  bench: {} errors, {} timeouts; failed requests of the cut cell {}'s ISUs {cut_cell}, of the other cells' {others}, naming no ISU {none}",
        figure(report, |report| report.errors),
        figure(report, |report| report.timeouts),
        cut.cell
    ));
    no_error_but_trend_regressions(checks, report);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn answer(role: &str, term: u64) -> Option<ReplicaAnswer> {
        Some(ReplicaAnswer {
            status: shared::protocol::ReplicaStatus {
                role: role.to_owned(),
                term,
                ..Default::default()
            },
            ready: true,
            state_hash: "0".to_owned(),
        })
    }

    #[test]
    fn a_paused_leader_that_still_says_it_leads_is_not_taken_for_the_next() {
        // Polls: the paused one alone says it leads (term 2); then two say so; then the new one.
        let polls = [
            vec![answer("leader", 2), answer("candidate", 3), None],
            vec![answer("leader", 2), answer("leader", 3), answer("follower", 3)],
            vec![answer("follower", 3), answer("leader", 3), answer("follower", 3)],
        ];
        let next = Cell::new(0);
        let answers = || {
            let index = next.get().min(polls.len() - 1);
            next.set(next.get() + 1);
            polls[index].clone()
        };
        let (leader, found) = find_leader(&answers, Duration::from_secs(5), 2).unwrap();
        assert_eq!((leader, term(&found)), (1, 3));
        assert_eq!(next.get(), 3, "the stale and the double answers were passed over");
        let alone = || vec![answer("leader", 2), answer("follower", 2), None];
        assert!(find_leader(&alone, Duration::from_millis(150), 2).is_none());
        assert_eq!(find_leader(&alone, Duration::from_millis(150), 0).unwrap().0, 0);
    }
}
