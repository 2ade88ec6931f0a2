//! `isuctl rollout`: wave rollouts of a new worker (and coordinator) binary over the cells of
//! the local durable cluster, one cell per wave, each judged by the health gate
//! ([`crate::gate`]).
//!
//! For each wave: the cell's figures over BAKE seconds on the old binary (the baseline); the
//! worker replaced in place by one running the new binary (`cluster replace`: the cell is
//! never without a listening worker); the same figures over BAKE seconds on the new binary;
//! the gate. A wave the rollout cannot judge — the replacement, the measurement after it or
//! the gate fails — is rolled back like a wave that failed its gate: the cell goes back to
//! the binary it ran, the rollout stops, the later cells never run the new binary. After the
//! last wave, `--coordinator-binary` replaces the coordinator (gate: it becomes healthy).
//! Exit status: 0 when every wave passed, 1 when one was stopped (and rolled back), 2 on bad
//! usage.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;

use crate::cells_api::{CellsApi, Target};
use crate::exit::Exit;
use crate::gate::{judge, Verdict, Window};
use crate::local::{cluster_command, RunDir};
use crate::output::{emit, Format};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The worker binary to roll out (an executable file).
    #[arg(long)]
    pub binary: PathBuf,
    /// The cells to replace, one per wave, in this order (default: every cell, in map order).
    #[arg(long, value_delimiter = ',')]
    pub waves: Vec<String>,
    /// Seconds each window (baseline, bake) is measured over.
    #[arg(long, default_value_t = 10.0)]
    pub bake: f64,
    /// Milliseconds of p99 allowance over the baseline (the gate takes the larger of twice the
    /// baseline and baseline + slack).
    #[arg(long = "p99-slack", default_value_t = 50.0)]
    pub p99_slack: f64,
    /// A coordinator binary to put in place after the last wave (gate: it becomes healthy).
    #[arg(long)]
    pub coordinator_binary: Option<PathBuf>,
}

/// A validated rollout.
#[derive(Debug, Clone)]
pub struct Plan {
    pub binary: PathBuf,
    /// Cell names, one per wave.
    pub waves: Vec<String>,
    pub bake: f64,
    pub p99_slack_ms: f64,
    pub coordinator_binary: Option<PathBuf>,
}

/// What a rollout does to the cluster, apart from judging (the local cluster's
/// [`LocalCluster`], or a fake in tests).
pub trait Operations {
    /// A cell's figures over `seconds`; an error when they cannot be had (the call failed,
    /// or the cell's worker did not answer its scrapes).
    fn measure(&mut self, cell: &str, seconds: f64) -> anyhow::Result<Window>;
    /// The binary node `node` runs now.
    fn binary_of(&mut self, node: &str) -> anyhow::Result<PathBuf>;
    /// Replaces a running worker in place by one running `binary`.
    fn replace(&mut self, node: &str, binary: &Path) -> anyhow::Result<()>;
    /// Stops node `node` gracefully.
    fn stop(&mut self, node: &str) -> anyhow::Result<()>;
    /// Starts node `node` running `binary`; returns once it is healthy.
    fn start(&mut self, node: &str, binary: &Path) -> anyhow::Result<()>;
}

/// One wave, as it went.
#[derive(Debug, Clone, Serialize)]
pub struct WaveReport {
    pub wave: usize,
    /// The cell (`None`: the coordinator's wave).
    pub cell: Option<String>,
    pub node: String,
    pub old_binary: PathBuf,
    pub before: Option<Window>,
    pub after: Option<Window>,
    pub replaced_in_seconds: Option<f64>,
    /// The gate's verdict, when it could judge.
    pub verdict: Option<Verdict>,
    /// Why the wave could not be judged (a replacement or a measurement failed).
    pub error: Option<String>,
    /// Whether the node was put back on its old binary (a failed or unjudged wave).
    pub rolled_back: bool,
    /// Why putting the node back on its old binary failed.
    pub rollback_error: Option<String>,
}

impl WaveReport {
    /// A wave about to start on `node`: nothing measured, judged or changed yet.
    fn new(wave: usize, cell: Option<&str>, node: &str) -> WaveReport {
        WaveReport {
            wave,
            cell: cell.map(str::to_owned),
            node: node.to_owned(),
            old_binary: PathBuf::new(),
            before: None,
            after: None,
            replaced_in_seconds: None,
            verdict: None,
            error: None,
            rolled_back: false,
            rollback_error: None,
        }
    }
}

/// How the rollout ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every wave passed.
    Complete,
    /// A wave failed or could not be judged; it was rolled back (or nothing had changed).
    Stopped,
    /// A wave failed and putting its node back on the old binary failed too.
    RollbackFailed,
}

#[derive(Debug, Clone, Serialize)]
pub struct RolloutReport {
    pub binary: PathBuf,
    pub waves: Vec<WaveReport>,
    pub outcome: Outcome,
    pub seconds: f64,
}

pub fn run(args: Args, format: Format) -> anyhow::Result<()> {
    let run_dir = RunDir::from_env();
    let mut cluster = LocalCluster::connect(run_dir)?;
    let plan = cluster.plan(args)?;
    // Progress as it happens: on stdout for a person, on stderr beside the JSON report.
    let mut say = |line: String| match format {
        Format::Human => println!("{line}"),
        Format::Json => eprintln!("{line}"),
    };
    let report = execute(&plan, &mut cluster, &mut say);
    if format == Format::Json {
        emit(format, &report, |_| String::new())?;
    }
    match report.outcome {
        Outcome::Complete => Ok(()),
        Outcome::Stopped | Outcome::RollbackFailed => Err(Exit::quiet(1).into()),
    }
}

/// Runs the waves of `plan`, telling `say` what happens; stops at the first wave that fails
/// or cannot be judged, after rolling it back.
pub fn execute(plan: &Plan, ops: &mut impl Operations, say: &mut dyn FnMut(String)) -> RolloutReport {
    let started = Instant::now();
    let mut report = RolloutReport {
        binary: plan.binary.clone(),
        waves: Vec::new(),
        outcome: Outcome::Complete,
        seconds: 0.0,
    };
    for (index, cell) in plan.waves.iter().enumerate() {
        let wave = worker_wave(index + 1, cell, plan, ops, say, started);
        let stopped = wave.rolled_back
            || wave
                .verdict
                .as_ref()
                .is_none_or(|verdict| matches!(verdict, Verdict::Failed(_)));
        report.waves.push(wave);
        if stopped {
            report.outcome = rollback_outcome(report.waves.last());
            report.seconds = started.elapsed().as_secs_f64();
            return report;
        }
    }
    if let Some(binary) = &plan.coordinator_binary {
        let wave = coordinator_wave(plan.waves.len() + 1, binary, ops, say);
        let passed = wave.verdict == Some(Verdict::Passed);
        report.waves.push(wave);
        if !passed {
            report.outcome = rollback_outcome(report.waves.last());
            report.seconds = started.elapsed().as_secs_f64();
            return report;
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    say(format!(
        "rollout complete: {} wave(s) in {:.0} s",
        report.waves.len(),
        report.seconds
    ));
    report
}

fn rollback_outcome(wave: Option<&WaveReport>) -> Outcome {
    match wave.is_some_and(|wave| wave.rollback_error.is_some()) {
        true => Outcome::RollbackFailed,
        false => Outcome::Stopped,
    }
}

fn worker_wave(
    wave: usize,
    cell: &str,
    plan: &Plan,
    ops: &mut impl Operations,
    say: &mut dyn FnMut(String),
    rollout_started: Instant,
) -> WaveReport {
    let node = format!("worker-{cell}");
    let mut report = WaveReport::new(wave, Some(cell), &node);
    // Before anything changes: what the node runs and how the cell does.
    let baseline = ops.binary_of(&node).and_then(|old| {
        report.old_binary = old;
        say(format!(
            "wave {wave}: cell {cell} ({node}): baseline over {}s",
            plan.bake
        ));
        ops.measure(cell, plan.bake)
    });
    let before = match baseline {
        Ok(before) => before,
        Err(error) => {
            say(format!(
                "wave {wave}: cannot measure cell {cell} before the change: {error:#}; nothing changed, later cells untouched"
            ));
            report.error = Some(format!("{error:#}"));
            return report;
        }
    };
    report.before = Some(before);
    say(format!("  old: requests/s, 5xx %, p99 ms = {before}"));
    let replace_started = Instant::now();
    let judged = ops.replace(&node, &plan.binary).and_then(|()| {
        let seconds = replace_started.elapsed().as_secs_f64();
        report.replaced_in_seconds = Some(seconds);
        say(format!(
            "  {node} runs {} (replaced in {seconds:.0} s); baking {}s",
            plan.binary.display(),
            plan.bake
        ));
        ops.measure(cell, plan.bake)
    });
    let reason = match judged {
        Ok(after) => {
            report.after = Some(after);
            say(format!("  new: requests/s, 5xx %, p99 ms = {after}"));
            let verdict = judge(&before, &after, plan.p99_slack_ms);
            report.verdict = Some(verdict.clone());
            match verdict {
                Verdict::Passed => {
                    say(format!("wave {wave}: cell {cell} passed"));
                    return report;
                }
                Verdict::Unjudged => {
                    say(format!(
                        "  warning: cell {cell} served nothing in a window: its gates could not judge it"
                    ));
                    say(format!("wave {wave}: cell {cell} passed"));
                    return report;
                }
                Verdict::Failed(reason) => format!("gate failed for cell {cell}: {reason}"),
            }
        }
        Err(error) => {
            report.error = Some(format!("{error:#}"));
            format!("cannot judge cell {cell}: {error:#}")
        }
    };
    say(format!("wave {wave}: {reason}"));
    let old = report.old_binary.clone();
    // A replacement that failed may have left the node stopped: then start it instead.
    let restored = ops
        .replace(&node, &old)
        .or_else(|replace_error| ops.start(&node, &old).map_err(|error| replace_error.context(error)));
    match restored {
        Ok(()) => {
            report.rolled_back = true;
            say(format!(
                "wave {wave}: rolled back: {node} runs {} again; later cells untouched (stopped after {:.0} s)",
                old.display(),
                rollout_started.elapsed().as_secs_f64()
            ));
        }
        Err(error) => {
            say(format!(
                "wave {wave}: rollback failed: {node} could not be put back on {}: {error:#}",
                old.display()
            ));
            report.rollback_error = Some(format!("{error:#}"));
        }
    }
    report
}

fn coordinator_wave(wave: usize, binary: &Path, ops: &mut impl Operations, say: &mut dyn FnMut(String)) -> WaveReport {
    let node = "coordinator";
    let mut report = WaveReport::new(wave, None, node);
    match ops.binary_of(node) {
        Ok(old) => report.old_binary = old,
        Err(error) => {
            say(format!("wave {wave}: coordinator: {error:#}; nothing changed"));
            report.error = Some(format!("{error:#}"));
            return report;
        }
    }
    say(format!("wave {wave}: coordinator"));
    let started = Instant::now();
    let replaced = ops.stop(node).and_then(|()| ops.start(node, binary));
    report.replaced_in_seconds = Some(started.elapsed().as_secs_f64());
    if replaced.is_ok() {
        report.verdict = Some(Verdict::Passed);
        say(format!("wave {wave}: coordinator passed"));
        return report;
    }
    report.verdict = Some(Verdict::Failed("the new coordinator did not become healthy".to_owned()));
    say(format!(
        "wave {wave}: gate failed: the new coordinator did not become healthy"
    ));
    let _already_stopped = ops.stop(node);
    match ops.start(node, &report.old_binary) {
        Ok(()) => {
            report.rolled_back = true;
            say(format!(
                "wave {wave}: rolled back: the coordinator runs {} again",
                report.old_binary.display()
            ));
        }
        Err(error) => {
            say(format!(
                "wave {wave}: rollback failed: the coordinator could not be started again: {error:#}"
            ));
            report.rollback_error = Some(format!("{error:#}"));
        }
    }
    report
}

/// The local cluster of a run directory: the cells API for the figures, the cluster command
/// for the nodes.
pub struct LocalCluster {
    run_dir: RunDir,
    api: CellsApi,
}

impl LocalCluster {
    /// Connects to the durable cluster running from `run_dir` (bad usage otherwise).
    pub fn connect(run_dir: RunDir) -> anyhow::Result<LocalCluster> {
        let healthy = cluster_command()
            .env("ISU_RUN_DIR", &run_dir.path)
            .arg("status")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("running the cluster command")?
            .success();
        if !healthy {
            return Err(Exit::usage(format!(
                "no healthy cluster in {} (isuctl cluster up --durable)",
                run_dir.path.display()
            ))
            .into());
        }
        if !run_dir.path.join("data").is_dir() {
            return Err(Exit::usage(
                "the cluster is not durable: a replaced worker would lose its data (isuctl cluster up --durable)",
            )
            .into());
        }
        let api = CellsApi::connect(&Target { coordinator_url: None })?;
        Ok(LocalCluster { run_dir, api })
    }

    /// Checks the arguments against this cluster (bad usage: exit 2).
    pub fn plan(&mut self, args: Args) -> anyhow::Result<Plan> {
        check_executable("--binary", &args.binary)?;
        if let Some(binary) = &args.coordinator_binary {
            check_executable("--coordinator-binary", binary)?;
        }
        if !(args.bake.is_finite() && args.bake >= 0.0) {
            return Err(Exit::usage("--bake needs a number of seconds").into());
        }
        if !(args.p99_slack.is_finite() && args.p99_slack >= 0.0) {
            return Err(Exit::usage("--p99-slack needs a number of milliseconds").into());
        }
        let cells = crate::cells::list_cells(&self.api)?;
        let waves = match args.waves.is_empty() {
            true => cells.clone(),
            false => args.waves,
        };
        if let Some(unknown) = waves.iter().find(|wave| !cells.contains(wave)) {
            return Err(Exit::usage(format!("no cell named '{unknown}' (cells: {})", cells.join(" "))).into());
        }
        Ok(Plan {
            binary: absolute(&args.binary)?,
            waves,
            bake: args.bake,
            p99_slack_ms: args.p99_slack,
            coordinator_binary: args.coordinator_binary.as_deref().map(absolute).transpose()?,
        })
    }

    fn cluster(&self, args: &[&std::ffi::OsStr]) -> anyhow::Result<()> {
        deploy::external::run_checked(
            cluster_command()
                .env("ISU_RUN_DIR", &self.run_dir.path)
                .args(args)
                .stdout(Stdio::null()),
        )
    }
}

impl Operations for LocalCluster {
    fn measure(&mut self, cell: &str, seconds: f64) -> anyhow::Result<Window> {
        let summary = self.api.summary(seconds)?;
        let found = summary
            .cells
            .iter()
            .find(|each| each.name == cell)
            .with_context(|| format!("the coordinator names no cell {cell}"))?;
        let figures = found
            .figures
            .as_ref()
            .with_context(|| format!("worker-{cell} did not answer its scrapes"))?;
        Ok(Window::from(figures))
    }

    fn binary_of(&mut self, node: &str) -> anyhow::Result<PathBuf> {
        recorded_binary(&self.run_dir.path.join(format!("{node}.cmd")))
    }

    fn replace(&mut self, node: &str, binary: &Path) -> anyhow::Result<()> {
        self.cluster(&[
            "replace".as_ref(),
            node.as_ref(),
            "--binary".as_ref(),
            binary.as_os_str(),
        ])
    }

    fn stop(&mut self, node: &str) -> anyhow::Result<()> {
        self.cluster(&["stop".as_ref(), node.as_ref()])
    }

    fn start(&mut self, node: &str, binary: &Path) -> anyhow::Result<()> {
        self.cluster(&["start".as_ref(), node.as_ref(), "--binary".as_ref(), binary.as_os_str()])
    }
}

/// The binary of a node's recorded command line (`NAME.cmd` in the run directory:
/// NUL-separated, after a `taskset -c CPUS` prefix when the cluster is pinned).
pub fn recorded_binary(path: &Path) -> anyhow::Result<PathBuf> {
    let bytes = std::fs::read(path).with_context(|| format!("no recorded command line {}", path.display()))?;
    binary_in_command_line(&bytes).with_context(|| format!("{}: no binary in the command line", path.display()))
}

fn binary_in_command_line(bytes: &[u8]) -> Option<PathBuf> {
    let args: Vec<&[u8]> = bytes.split(|byte| *byte == 0).collect();
    let binary = match args.first() {
        Some(&b"taskset") => args.get(3)?,
        first => first?,
    };
    (!binary.is_empty()).then(|| PathBuf::from(String::from_utf8_lossy(binary).into_owned()))
}

fn check_executable(flag: &str, path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_file() && metadata.permissions().mode() & 0o111 != 0 => Ok(()),
        _ => Err(Exit::usage(format!("{flag} needs an executable file ({} is not)", path.display())).into()),
    }
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    Ok(std::path::absolute(path)?)
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, VecDeque};

    use shared::protocol::cells::Latency;

    use super::*;

    /// A cluster in memory: measurements are queued per cell; every operation is recorded.
    #[derive(Default)]
    struct Fake {
        binaries: HashMap<String, PathBuf>,
        measurements: HashMap<String, VecDeque<anyhow::Result<Window>>>,
        failing_replacements: Vec<PathBuf>,
        calls: Vec<String>,
    }

    impl Fake {
        fn new(cells: &[&str]) -> Fake {
            let mut fake = Fake::default();
            for cell in cells {
                fake.binaries
                    .insert(format!("worker-{cell}"), PathBuf::from("/old/worker"));
            }
            fake.binaries
                .insert("coordinator".into(), PathBuf::from("/old/coordinator"));
            fake
        }

        fn measured(mut self, cell: &str, windows: Vec<anyhow::Result<Window>>) -> Fake {
            self.measurements.insert(cell.to_owned(), windows.into());
            self
        }
    }

    impl Operations for Fake {
        fn measure(&mut self, cell: &str, _seconds: f64) -> anyhow::Result<Window> {
            self.calls.push(format!("measure {cell}"));
            self.measurements
                .get_mut(cell)
                .and_then(VecDeque::pop_front)
                .unwrap_or_else(|| Err(anyhow::anyhow!("no measurement planned for {cell}")))
        }

        fn binary_of(&mut self, node: &str) -> anyhow::Result<PathBuf> {
            self.binaries.get(node).cloned().context("no such node")
        }

        fn replace(&mut self, node: &str, binary: &Path) -> anyhow::Result<()> {
            self.calls.push(format!("replace {node} {}", binary.display()));
            if self.failing_replacements.iter().any(|failing| failing == binary) {
                anyhow::bail!("the new {node} exited before binding");
            }
            self.binaries.insert(node.to_owned(), binary.to_owned());
            Ok(())
        }

        fn stop(&mut self, node: &str) -> anyhow::Result<()> {
            self.calls.push(format!("stop {node}"));
            Ok(())
        }

        fn start(&mut self, node: &str, binary: &Path) -> anyhow::Result<()> {
            self.calls.push(format!("start {node} {}", binary.display()));
            if self.failing_replacements.iter().any(|failing| failing == binary) {
                anyhow::bail!("{node} not healthy");
            }
            self.binaries.insert(node.to_owned(), binary.to_owned());
            Ok(())
        }
    }

    fn plan(waves: &[&str]) -> Plan {
        Plan {
            binary: PathBuf::from("/new/worker"),
            waves: waves.iter().map(|wave| wave.to_string()).collect(),
            bake: 3.0,
            p99_slack_ms: 50.0,
            coordinator_binary: None,
        }
    }

    fn healthy() -> anyhow::Result<Window> {
        Ok(Window {
            requests_per_second: 40.0,
            error_ratio: Some(0.0),
            p99: Some(Latency::Millis(10.0)),
        })
    }

    fn broken() -> anyhow::Result<Window> {
        Ok(Window {
            requests_per_second: 40.0,
            error_ratio: Some(0.22),
            p99: Some(Latency::Millis(10.0)),
        })
    }

    fn execute_quietly(plan: &Plan, fake: &mut Fake) -> (RolloutReport, Vec<String>) {
        let mut lines = Vec::new();
        let report = execute(plan, fake, &mut |line| lines.push(line));
        (report, lines)
    }

    #[test]
    fn a_healthy_build_passes_every_wave() {
        let mut fake = Fake::new(&["a", "b"])
            .measured("a", vec![healthy(), healthy()])
            .measured("b", vec![healthy(), healthy()]);
        let (report, lines) = execute_quietly(&plan(&["a", "b"]), &mut fake);
        assert_eq!(report.outcome, Outcome::Complete, "{lines:#?}");
        assert_eq!(fake.binaries["worker-a"], PathBuf::from("/new/worker"));
        assert_eq!(fake.binaries["worker-b"], PathBuf::from("/new/worker"));
        assert!(lines.iter().any(|line| line == "wave 2: cell b passed"), "{lines:#?}");
        assert!(
            lines.last().unwrap().starts_with("rollout complete: 2 wave(s)"),
            "{lines:#?}"
        );
    }

    #[test]
    fn a_failed_gate_rolls_the_wave_back_and_stops() {
        let mut fake = Fake::new(&["a", "b"]).measured("a", vec![healthy(), broken()]);
        let (report, lines) = execute_quietly(&plan(&["a", "b"]), &mut fake);
        assert_eq!(report.outcome, Outcome::Stopped);
        assert!(report.waves[0].rolled_back);
        assert_eq!(fake.binaries["worker-a"], PathBuf::from("/old/worker"));
        assert_eq!(
            fake.binaries["worker-b"],
            PathBuf::from("/old/worker"),
            "cell b untouched"
        );
        assert!(
            lines
                .iter()
                .any(|line| line.starts_with("wave 1: gate failed for cell a: error ratio 22.00 %")),
            "{lines:#?}"
        );
        assert!(lines
            .iter()
            .any(|line| line.starts_with("wave 1: rolled back: worker-a runs /old/worker again")));
        assert!(!lines.iter().any(|line| line.starts_with("wave 2")), "{lines:#?}");
    }

    #[test]
    fn a_measurement_that_fails_after_the_change_rolls_the_wave_back() {
        let mut fake = Fake::new(&["a", "b"]).measured(
            "a",
            vec![
                healthy(),
                Err(anyhow::anyhow!("GET /internal/cells: the coordinator did not answer")),
            ],
        );
        let (report, lines) = execute_quietly(&plan(&["a", "b"]), &mut fake);
        assert_eq!(report.outcome, Outcome::Stopped);
        assert!(report.waves[0].rolled_back, "{lines:#?}");
        assert_eq!(report.waves[0].verdict, None);
        assert_eq!(fake.binaries["worker-a"], PathBuf::from("/old/worker"));
        assert!(lines
            .iter()
            .any(|line| line.starts_with("wave 1: cannot judge cell a: GET /internal/cells")));
        assert!(
            !fake.calls.iter().any(|call| call.contains("worker-b")),
            "{:?}",
            fake.calls
        );
    }

    #[test]
    fn a_replacement_that_fails_is_rolled_back_by_starting_the_old_binary() {
        let mut fake = Fake::new(&["a"]).measured("a", vec![healthy()]);
        fake.failing_replacements.push(PathBuf::from("/new/worker"));
        // The failed replacement; the old binary is put back (replace, as the node may still run).
        let (report, lines) = execute_quietly(&plan(&["a"]), &mut fake);
        assert_eq!(report.outcome, Outcome::Stopped, "{lines:#?}");
        assert!(report.waves[0].rolled_back);
        assert_eq!(
            fake.calls,
            [
                "measure a",
                "replace worker-a /new/worker",
                "replace worker-a /old/worker"
            ]
        );
    }

    #[test]
    fn a_rollback_that_fails_is_reported_as_such() {
        let mut fake = Fake::new(&["a"]).measured("a", vec![healthy(), broken()]);
        fake.failing_replacements.push(PathBuf::from("/old/worker"));
        let (report, lines) = execute_quietly(&plan(&["a"]), &mut fake);
        assert_eq!(report.outcome, Outcome::RollbackFailed, "{lines:#?}");
        assert!(!report.waves[0].rolled_back);
        assert!(lines
            .iter()
            .any(|line| line.starts_with("wave 1: rollback failed: worker-a")));
    }

    #[test]
    fn a_baseline_that_cannot_be_measured_stops_before_any_change() {
        let mut fake = Fake::new(&["a"]).measured("a", vec![Err(anyhow::anyhow!("worker-a did not answer"))]);
        let (report, _) = execute_quietly(&plan(&["a"]), &mut fake);
        assert_eq!(report.outcome, Outcome::Stopped);
        assert_eq!(fake.calls, ["measure a"], "nothing replaced");
    }

    #[test]
    fn an_idle_cell_passes_with_a_warning() {
        let idle = || {
            Ok(Window {
                requests_per_second: 0.0,
                error_ratio: None,
                p99: None,
            })
        };
        let mut fake = Fake::new(&["a"]).measured("a", vec![idle(), idle()]);
        let (report, lines) = execute_quietly(&plan(&["a"]), &mut fake);
        assert_eq!(report.outcome, Outcome::Complete);
        assert!(lines.iter().any(|line| line.contains("could not judge")), "{lines:#?}");
    }

    #[test]
    fn a_coordinator_that_does_not_become_healthy_is_put_back() {
        let mut fake = Fake::new(&["a"]).measured("a", vec![healthy(), healthy()]);
        fake.failing_replacements.push(PathBuf::from("/new/coordinator"));
        let plan = Plan {
            coordinator_binary: Some(PathBuf::from("/new/coordinator")),
            ..plan(&["a"])
        };
        let (report, lines) = execute_quietly(&plan, &mut fake);
        assert_eq!(report.outcome, Outcome::Stopped, "{lines:#?}");
        assert_eq!(fake.binaries["coordinator"], PathBuf::from("/old/coordinator"));
        assert!(lines
            .iter()
            .any(|line| line == "wave 2: rolled back: the coordinator runs /old/coordinator again"));
    }

    #[test]
    fn the_binary_is_read_from_a_recorded_command_line() {
        let plain = b"/repo/target/release/worker\x00--listen\x00127.0.0.3:3000\x00";
        assert_eq!(
            binary_in_command_line(plain),
            Some(PathBuf::from("/repo/target/release/worker"))
        );
        let pinned = b"taskset\x00-c\x001\x00/repo/target/release/worker\x00--listen\x00";
        assert_eq!(
            binary_in_command_line(pinned),
            Some(PathBuf::from("/repo/target/release/worker"))
        );
        assert_eq!(binary_in_command_line(b"taskset\0-c\0"), None);
        assert_eq!(binary_in_command_line(b""), None);
    }
}
