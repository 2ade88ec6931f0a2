//! The checker: the history split into one object per key, each searched for a
//! linearization by `todc-utils`' WGL checker against [`crate::models`], and the invariants
//! beside it. A check that fails names the operations involved and the faults active while
//! they ran.
//!
//! How operations enter the search: a write that got no answer or a 5xx returns after every
//! other event, as a process of its own so its client goes on (it may or may not have taken
//! effect, at any time after its invocation: [`crate::models`]); a read without a usable
//! answer is left out (it changed nothing and told nothing).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;

use serde::{Deserialize, Serialize};
use todc_utils::linearizability::history::{Action, History as Actions};
use todc_utils::linearizability::WGLChecker;
use todc_utils::specifications::Specification;

use crate::history::{Answer, Call, FaultWindow, History, Nanos, Op};
use crate::models::{IsuOp, IsuSpec, Observe, Registered, SessionOp, SessionSpec, VersionSpec};

/// How many operations and faults a violation lists at most.
const NAMED: usize = 12;
/// A violation also names the faults healed this shortly before its operations began (a
/// replica resumed just before may still disturb them).
const RECENT: Nanos = 10_000_000_000;
/// The search runs on a thread of its own, with room for the longest histories.
const SEARCH_STACK: usize = 64 << 20;

/// One check's outcome.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    /// How many things it checked (keys, conditions, operations).
    pub checked: u64,
    pub violations: Vec<Violation>,
}

/// What failed, with the operations involved and the faults active meanwhile.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Violation {
    pub what: String,
    pub ops: Vec<String>,
    pub faults: Vec<String>,
}

/// Every check of `history`. `grace`: how long after a fault is healed an error still
/// counts as the fault's.
pub fn check(history: &History, grace: Nanos) -> Vec<Check> {
    let history = history.clone();
    std::thread::Builder::new()
        .name("checker".to_owned())
        .stack_size(SEARCH_STACK)
        .spawn(move || check_here(&history, grace))
        .expect("spawning the checker's thread")
        .join()
        .expect("the checker panicked")
}

fn check_here(history: &History, grace: Nanos) -> Vec<Check> {
    vec![
        isus(history),
        sessions(history),
        placement(history),
        acknowledged_conditions(history),
        single_activation(history),
        trend_forward(history),
        replicas_agree(history),
        errors_in_faults(history, grace),
    ]
}

/// One operation as the search takes it: `returned` false for a write without an answer.
struct Entry<O> {
    process: u64,
    invoked: Nanos,
    completed: Nanos,
    returned: bool,
    op: O,
}

/// Whether the entries, in real-time order, have a linearization under `S`.
fn linearizable<S: Specification>(entries: &[Entry<S::Operation>]) -> bool {
    if entries.is_empty() {
        return true;
    }
    // Dense process ids; an operation without an answer is a process of its own, its response
    // after every other event.
    let mut processes: HashMap<u64, usize> = HashMap::new();
    let mut events: Vec<(Nanos, bool, usize, usize)> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let next = processes.len();
        let process = match entry.returned {
            true => *processes.entry(entry.process).or_insert(next),
            false => *processes.entry(u64::MAX - index as u64).or_insert(next),
        };
        let completed = if entry.returned { entry.completed } else { Nanos::MAX };
        // Invocations before responses at the same instant: the weaker order.
        events.push((entry.invoked, false, index, process));
        events.push((completed, true, index, process));
    }
    events.sort_unstable();
    let actions = events
        .into_iter()
        .map(|(_, response, index, process)| {
            let op = entries[index].op.clone();
            (
                process,
                if response {
                    Action::Response(op)
                } else {
                    Action::Call(op)
                },
            )
        })
        .collect();
    WGLChecker::<S>::is_linearizable(Actions::from_actions(actions))
}

/// Each key's operations, with their indexes in the history.
type Keyed<K, O> = BTreeMap<K, Vec<(usize, Entry<O>)>>;

fn entry<O>(op: &Op, call: O) -> Entry<O> {
    Entry {
        process: op.process,
        invoked: op.invoked,
        completed: op.completed,
        returned: !(op.call.writes() && op.indeterminate()),
        op: call,
    }
}

/// Registrations and reads of each ISU: one owner, a 201 never followed by a read that
/// lacks it, a 409 only where another registration linearizes earlier.
fn isus<'h>(history: &'h History) -> Check {
    // Who tried to register what: a user's list answers for each of those.
    let mut tried: HashMap<&str, Vec<&'h str>> = HashMap::new();
    for op in &history.ops {
        if let Call::Register { user, uuid } = &op.call {
            tried.entry(user).or_default().push(uuid);
        }
    }
    let mut keys: Keyed<&str, IsuOp> = BTreeMap::new();
    for (index, op) in history.ops.iter().enumerate() {
        let mut add = |uuid: &'h str, call: IsuOp| keys.entry(uuid).or_default().push((index, entry(op, call)));
        match (&op.call, op.status) {
            (Call::Register { user, uuid }, status) => match status {
                Some(201) => add(uuid, IsuOp::Register(user.clone(), Some(Registered::Created))),
                Some(409) => add(uuid, IsuOp::Register(user.clone(), Some(Registered::Conflict))),
                _ if op.indeterminate() => add(uuid, IsuOp::Register(user.clone(), None)),
                _ => {}
            },
            (
                Call::Detail { user, uuid }
                | Call::Conditions { user, uuid, .. }
                | Call::FinalConditions { user, uuid },
                Some(status @ (200 | 404)),
            ) => add(uuid, IsuOp::Read(user.clone(), status == 200)),
            (Call::List { user }, Some(200)) => {
                let Answer::Uuids { uuids } = &op.answer else { continue };
                for uuid in tried.get(user.as_str()).into_iter().flatten().copied() {
                    add(
                        uuid,
                        IsuOp::Read(user.clone(), uuids.iter().any(|listed| listed == uuid)),
                    );
                }
            }
            _ => {}
        }
    }
    per_key::<_, IsuSpec>(history, "linearizable_isus", keys, |uuid| format!("ISU {uuid}"))
}

/// Each client's session: signed in after a sign-in, out after a sign-out, and every call
/// that needs it answered 401 exactly when it is out.
fn sessions(history: &History) -> Check {
    let mut keys: Keyed<u64, SessionOp> = BTreeMap::new();
    for (index, op) in history.ops.iter().enumerate() {
        let found = match (&op.call, op.status) {
            (Call::SignIn { .. }, Some(200)) => Some(SessionOp::SignIn),
            (Call::SignIn { .. }, _) if op.indeterminate() => Some(SessionOp::SignIn),
            (Call::SignOut { .. }, Some(200)) => Some(SessionOp::SignOut(Some(true))),
            (Call::SignOut { .. }, Some(401)) => Some(SessionOp::SignOut(Some(false))),
            (Call::SignOut { .. }, _) if op.indeterminate() => Some(SessionOp::SignOut(None)),
            (call, Some(status)) if call.session().is_some() && status < 500 => Some(SessionOp::Read(status != 401)),
            _ => None,
        };
        if let Some(call) = found {
            keys.entry(op.process).or_default().push((index, entry(op, call)));
        }
    }
    per_key::<_, SessionSpec>(history, "linearizable_sessions", keys, |process| {
        format!("the session of client p{process}")
    })
}

/// One object per key, each searched on its own: a violation (`what` the key is, "no
/// linearization") for each without one.
fn per_key<K, S: Specification>(
    history: &History,
    name: &str,
    keys: Keyed<K, S::Operation>,
    what: impl Fn(&K) -> String,
) -> Check {
    let mut check = named(name);
    for (key, entries) in keys {
        check.checked += 1;
        let (indexes, entries): (Vec<usize>, Vec<_>) = entries.into_iter().unzip();
        if !linearizable::<S>(&entries) {
            check.violations.push(violation(
                history,
                format!("{}: no linearization", what(&key)),
                &indexes,
            ));
        }
    }
    check
}

/// The placement map's version as the replicas answer it: never back.
fn placement(history: &History) -> Check {
    let (indexes, entries): (Vec<usize>, Vec<_>) = history
        .ops
        .iter()
        .enumerate()
        .filter_map(|(index, op)| match (&op.call, &op.answer, op.status) {
            (Call::Placement, Answer::Version { lineage, version }, Some(200)) => Some((
                index,
                entry(
                    op,
                    Observe {
                        lineage: *lineage,
                        version: *version,
                    },
                ),
            )),
            _ => None,
        })
        .unzip();
    let mut check = named("placement_version");
    check.checked = entries.len() as u64;
    if !linearizable::<VersionSpec>(&entries) {
        check.violations.push(violation(
            history,
            "the placement map's version went back".to_owned(),
            &indexes,
        ));
    }
    check
}

/// Every condition a device posted and got 202 for is among what its owner reads after the
/// final heal.
fn acknowledged_conditions(history: &History) -> Check {
    let mut read: HashMap<&str, HashSet<i64>> = HashMap::new();
    for op in &history.ops {
        if let (Call::FinalConditions { uuid, .. }, Some(200), Answer::Timestamps { timestamps }) =
            (&op.call, op.status, &op.answer)
        {
            read.entry(uuid).or_default().extend(timestamps);
        }
    }
    let mut check = named("acknowledged_conditions");
    for (index, op) in history.ops.iter().enumerate() {
        let Call::Post { uuid, timestamps } = &op.call else {
            continue;
        };
        if op.status != Some(202) {
            continue;
        }
        check.checked += timestamps.len() as u64;
        let held = read.get(uuid.as_str());
        let lost: Vec<i64> = timestamps
            .iter()
            .filter(|timestamp| !held.is_some_and(|held| held.contains(timestamp)))
            .copied()
            .collect();
        if !lost.is_empty() {
            let finals: Vec<usize> = history
                .ops
                .iter()
                .enumerate()
                .filter(|(_, op)| matches!(&op.call, Call::FinalConditions { uuid: read, .. } if read == uuid))
                .map(|(index, _)| index)
                .collect();
            let involved: Vec<usize> = std::iter::once(index).chain(finals).collect();
            check.violations.push(violation(
                history,
                format!("ISU {uuid}: acknowledged conditions {lost:?} not readable after the heal"),
                &involved,
            ));
        }
    }
    check
}

/// JIA activated each ISU at most once.
fn single_activation(history: &History) -> Check {
    let mut check = named("single_activation");
    check.checked = history
        .ops
        .iter()
        .filter(|op| matches!(op.call, Call::Register { .. }))
        .count() as u64;
    for (uuid, repeats) in &history.repeated_activations {
        if re_asked_after_its_worker_died(history, uuid) {
            continue;
        }
        let involved: Vec<usize> = history
            .ops
            .iter()
            .enumerate()
            .filter(|(_, op)| matches!(&op.call, Call::Register { uuid: asked, .. } if asked == uuid))
            .map(|(index, _)| index)
            .collect();
        check.violations.push(violation(
            history,
            format!("ISU {uuid}: JIA asked to activate it {} times", repeats + 1),
            &involved,
        ));
    }
    check
}

/// Whether every repeated activation request of `uuid` is a worker's re-ask after it died
/// asking: the same target as the ask before it, and that target's worker killed or
/// replaced between the two (a worker that restarts with a registration whose JIA answer it
/// never logged asks again; JIA answers a repeat with the same character and keeps the
/// first device). False without the asks (an older history).
fn re_asked_after_its_worker_died(history: &History, uuid: &str) -> bool {
    let asks: Vec<&crate::history::ActivationAsk> =
        history.activation_asks.iter().filter(|ask| ask.uuid == uuid).collect();
    asks.len() >= 2
        && asks.windows(2).all(|pair| {
            let (before, again) = (pair[0], pair[1]);
            let worker = history
                .workers_by_device_url
                .iter()
                .find(|(url, _)| *url == again.target)
                .map(|(_, worker)| worker.as_str());
            before.target == again.target
                && worker.is_some_and(|worker| {
                    history.faults.iter().any(|fault| {
                        matches!(fault.kind.as_str(), "kill" | "replace")
                            && fault.target == worker
                            && (before.at..=again.at).contains(&fault.from)
                    })
                })
        })
}

/// For each viewer, no ISU's latest condition in the trend goes back between two reads.
fn trend_forward(history: &History) -> Check {
    let mut check = named("trend_forward");
    let mut last: HashMap<u64, (usize, HashMap<i64, i64>)> = HashMap::new();
    let mut reads: Vec<(usize, &Op)> = history
        .ops
        .iter()
        .enumerate()
        .filter(|(_, op)| op.call == Call::Trend && op.status == Some(200))
        .collect();
    reads.sort_by_key(|(_, op)| op.invoked);
    for (index, op) in reads {
        let Answer::Trend { latest } = &op.answer else { continue };
        check.checked += 1;
        let now: HashMap<i64, i64> = latest.iter().copied().collect();
        if let Some((before, seen)) = last.get(&op.process) {
            let back: Vec<String> = seen
                .iter()
                .filter(|(isu, timestamp)| now.get(isu).is_none_or(|now| now < timestamp))
                .map(|(isu, timestamp)| format!("ISU id {isu}: {timestamp} -> {:?}", now.get(isu)))
                .collect();
            if !back.is_empty() {
                check.violations.push(violation(
                    history,
                    format!("the trend went back: {}", back.join(", ")),
                    &[*before, index],
                ));
            }
        }
        last.insert(op.process, (index, now));
    }
    check
}

/// The replicas ended at one state hash, each of them answering.
fn replicas_agree(history: &History) -> Check {
    let mut check = named("replica_state_hash");
    check.checked = history.state_hashes.len() as u64;
    let first = history.state_hashes.first();
    let agree = history
        .state_hashes
        .iter()
        .all(|hash| Some(hash) == first && hash != "unanswered");
    if !agree {
        check.violations.push(Violation {
            what: format!("the replicas' state hashes differ: {:?}", history.state_hashes),
            ops: Vec::new(),
            faults: Vec::new(),
        });
    }
    check
}

/// No call failed unless a fault was active while it ran, or had been healed less than
/// `grace` before.
fn errors_in_faults(history: &History, grace: Nanos) -> Check {
    let mut check = named("errors_outside_faults");
    for (index, op) in history.ops.iter().enumerate() {
        check.checked += 1;
        if !op.failed() {
            continue;
        }
        let covered = history
            .faults
            .iter()
            .any(|fault| op.invoked <= fault.to + grace && op.completed >= fault.from);
        if !covered {
            check.violations.push(violation(
                history,
                format!("a call failed outside every fault window (+{} ms)", grace / 1_000_000),
                &[index],
            ));
        }
    }
    check
}

fn named(name: &str) -> Check {
    Check {
        name: name.to_owned(),
        ..Check::default()
    }
}

/// A violation naming up to [`NAMED`] of the operations at `indexes` (writes and failures
/// first) and the faults active while any of them ran, or healed shortly before.
fn violation(history: &History, what: String, indexes: &[usize]) -> Violation {
    let ops: Vec<&Op> = indexes.iter().map(|index| &history.ops[*index]).collect();
    let mut named: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|op| op.call.writes() || op.failed())
        .collect();
    named.extend(ops.iter().copied().filter(|op| !(op.call.writes() || op.failed())));
    named.truncate(NAMED);
    named.sort_by_key(|op| op.invoked);
    let from = ops.iter().map(|op| op.invoked).min().unwrap_or(0);
    let to = ops.iter().map(|op| op.completed).max().unwrap_or(0);
    let faults: Vec<String> = history
        .faults
        .iter()
        .filter(|fault| fault.from <= to && fault.to + RECENT >= from)
        .take(NAMED)
        .map(FaultWindow::describe)
        .collect();
    Violation {
        what,
        ops: named.iter().map(|op| op.describe()).collect(),
        faults,
    }
}

#[cfg(test)]
mod tests;
