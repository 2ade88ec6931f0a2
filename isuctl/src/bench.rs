//! `isuctl bench` (`scripts/bench`), the main job: bring the local cluster up unless it runs,
//! run the bench binary against it with every node named (coordinator and the worker of every
//! cell, so it measures and profiles them all under load), optionally move a random slot every
//! few seconds during the load, keep the nodes' logs beside the report, stop a cluster it
//! started, and end with the bench's `score: N`. Exit status 0 only for a passing run.
//!
//! Its own options and the bench binary's come mixed on one command line (`scripts/bench
//! --workers 3 --duration 12s --users 3`): [`split_args`] takes out the ones [`Options`]
//! declares, by clap's own description of them, and passes every other one to the bench.
//!
//! The live migrations and the leader kills beside the load are the bench library's
//! (`bench::migrator`, `bench::takeover`; [`crate::takeover`] gives it the local group), and
//! so is the report's type (`bench::report::ReportFile`), which `isuctl bench check` ([`check`])
//! reads to fail a run CI expects more of.

mod check;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bench::migrator::{Migrations, Migrator};
use bench::report::{ControlPlane, ReportFile};
use bench::takeover::{Disruption, LeaderKiller};
use clap::{CommandFactory, Parser};
use serde::Serialize;

use crate::local::{self, ClusterFile, RunDir};
use crate::output::{self, Format};
use crate::takeover::LocalGroup;

/// Wait after the bench starts before the first live migration: its initialize and first
/// users come first.
const FIRST_MIGRATION_AFTER: Duration = Duration::from_secs(5);
/// The node logs of a run kept beside its report (cells a to p).
const LOGS: &str = "coordinator coordinator-2 coordinator-3 coordinator-4 coordinator-5 worker-a worker-b worker-c worker-d worker-e worker-f worker-g worker-h \
                    worker-i worker-j worker-k worker-l worker-m worker-n worker-o worker-p nginx nginx-error";

#[derive(Debug, clap::Args)]
#[command(
    disable_help_flag = true,
    disable_help_subcommand = true,
    args_conflicts_with_subcommands = true
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    /// The options below and the bench binary's, in any order (`isuctl bench --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "OPTIONS")]
    pub args: Vec<String>,
}

/// `isuctl bench` without a subcommand runs the bench; these do something else.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Check a bench run's report.json for what a run must also show beyond passing (CI's
    /// checks): exits non-zero with one line naming each problem.
    Check(check::CheckArgs),
}

/// `isuctl bench`'s own options; any other option goes to the bench binary unchanged.
#[derive(Debug, Default, Parser)]
#[command(
    name = "isuctl bench",
    about = "Start the local cluster with `cluster up` (nginx + coordinator + two workers on \
             loopback) unless it runs, run target/release/bench against it, and print the \
             report: pass/fail, score breakdown, errors, latency per endpoint, CPU seconds per \
             node and of the bench, and the flamegraphs (SVG) and pprof protobufs of every node \
             taken under load. Files go to run/bench/<date-time>/ (report.json, profiles/, \
             logs/). The last line is `score: N`; the exit status is 0 only when the run passed.",
    after_help = "Bench options pass through unchanged (see target/release/bench --help), e.g.\n  \
                  --duration 60s   length of the load (default 60 s)\n  \
                  --users N, --max-isus-per-user N, --no-growth, --keep-going\n\
                  Through scripts/bench, --json PATH is the bench's report path; with isuctl \
                  itself, write it --report PATH (isuctl's --json prints the run as JSON).\n\n\
                  A run's report checked for what CI expects beyond passing: isuctl bench check \
                  REPORT [--no-errors] [--control-plane leader_kills|leader_pauses]."
)]
pub struct Options {
    /// The contest's data: dump, JWT key pair and default icon from
    /// ../shared/data/isucon11-qualify/, checked against its initialize.json.
    #[arg(long)]
    pub official: bool,
    /// Leave a cluster this command started running afterwards (one that was already running
    /// is always left running).
    #[arg(long)]
    pub keep: bool,
    /// Do not profile the nodes.
    #[arg(long)]
    pub no_profile: bool,
    /// Measure the cluster as if the bench had a host of its own: the bench on CPU 0, every
    /// cluster process on the last CPU (taskset; needs 2 CPUs and a cluster this command
    /// starts).
    #[arg(long)]
    pub pin: bool,
    /// Where devices post, for a cluster this command starts: direct (each worker's own
    /// device server) or nginx.
    #[arg(long, value_parser = ["direct", "nginx"])]
    pub devices: Option<String>,
    /// The front end a cluster this command starts serves (cluster up --static-dir; default
    /// web/dist), e.g. the contest's public/ folder; it is sent precompressed.
    #[arg(long, value_name = "DIR")]
    pub static_dir: Option<PathBuf>,
    /// A cluster this command starts has N workers (cells a, b, c, ...; default 2).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub workers: Option<u32>,
    /// During the load, move a random slot to another cell every S seconds (`cells random`:
    /// live migration); the run must still pass. Listed in RUN/migrations.log.
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    pub migrate_every: Option<f64>,
    /// A cluster this command starts has N coordinator replicas (cluster up --coordinators).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=5))]
    pub coordinators: Option<u32>,
    /// During the load, SIGKILL the coordinator group's leader every S seconds, time the
    /// takeover and start the killed replica again (needs --coordinators 3 or more, or a
    /// running group); the report gains `control_plane`. Listed in RUN/leader-kills.log.
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    pub kill_leader_every: Option<f64>,
    /// During the load, SIGSTOP the coordinator group's leader every S seconds, time the
    /// takeover, then SIGCONT it and wait until it follows the new leader (a hung process
    /// whose sockets stay open); the report gains `control_plane`. Listed in
    /// RUN/leader-kills.log.
    #[arg(long, value_name = "S", value_parser = parse_seconds, conflicts_with = "kill_leader_every")]
    pub pause_leader_every: Option<f64>,
    /// Instead of a scored run, ramp the active ISUs until a latency bound or an error (the
    /// bench's --capacity); use it with --pin.
    #[arg(long)]
    pub capacity: bool,
    /// Instead of a scored run, move a slot full of history under load and report its cost
    /// (the bench's --migration-cost); a cluster this command starts has no per-ISU quota.
    #[arg(long)]
    pub migration_cost: bool,
    /// The same windows around one ISU flooding (the bench's --flood-cost).
    #[arg(long)]
    pub flood_cost: bool,
    /// Instead of a scored run, one step of a lone coordinator (release build, started by
    /// the bench; no cluster is started or used) against simulated cells: its memory per
    /// ISU, CPU per applied latest update and the trend's size (the bench's --scale; its
    /// --scale-cells, --scale-isus, --scale-rate and --scale-push-time pass through).
    #[arg(long, conflicts_with_all = ["capacity", "migration_cost", "flood_cost"])]
    pub scale: bool,
    /// The same step with real workers as the cells and a device poster in the bench (the
    /// bench's --scale-real-workers; 2 workers and 0.3 posts a second per ISU by default).
    #[arg(long, conflicts_with_all = ["capacity", "migration_cost", "flood_cost"])]
    pub scale_real_workers: bool,
    /// Check the scale step's cell simulator against real workers at one size: alternated
    /// rounds of each (--scale-rounds, 3 by default), the medians and the ratio real /
    /// simulated of the coordinator's CPU per applied update and memory per ISU (the bench's
    /// --scale-compare; with --pin the bench runs on CPU 0 and the nodes on the last CPU).
    #[arg(long, conflicts_with_all = ["capacity", "migration_cost", "flood_cost", "scale_real_workers"])]
    pub scale_compare: bool,
    /// Profile for S seconds (default: a sixth of the load, 3-30 s).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=300))]
    pub profile: Option<u64>,
    /// Length of the load (the bench's --duration, default 60s).
    #[arg(long)]
    pub duration: Option<String>,
    /// Write the bench's report here instead of RUN/report.json.
    #[arg(long = "json", visible_alias = "report", value_name = "PATH")]
    pub report: Option<PathBuf>,
}

impl Options {
    /// A scale mode: the bench starts its own nodes, no cluster is used.
    fn is_scale(&self) -> bool {
        self.scale || self.scale_real_workers || self.scale_compare
    }
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds > 0.0 => Ok(seconds),
        _ => Err(format!("{text:?} is not a number of seconds")),
    }
}

/// Splits a command line into [`Options`]' arguments (with their values) and the bench
/// binary's, keeping each side's order.
pub fn split_args(raw: Vec<String>) -> (Vec<String>, Vec<String>) {
    let command = Options::command();
    let (mut ours, mut bench) = (Vec::new(), Vec::new());
    let mut tokens = raw.into_iter();
    while let Some(token) = tokens.next() {
        if token == "-h" || token == "--help" {
            ours.push(token);
            continue;
        }
        let Some(long) = token.strip_prefix("--") else {
            bench.push(token);
            continue;
        };
        let (name, inline_value) = match long.split_once('=') {
            Some((name, _)) => (name, true),
            None => (long, false),
        };
        let declared = command.get_arguments().find(|arg| {
            arg.get_long() == Some(name) || arg.get_all_aliases().is_some_and(|aliases| aliases.contains(&name))
        });
        match declared {
            Some(arg) => {
                let takes_value = arg.get_action().takes_values();
                ours.push(token);
                if takes_value && !inline_value {
                    ours.extend(tokens.next());
                }
            }
            None => bench.push(token),
        }
    }
    (ours, bench)
}

/// What one run starts, decided from the options alone.
#[derive(Debug, PartialEq)]
pub struct Plan {
    /// `cluster up` arguments for a cluster this command starts.
    pub cluster_up: Vec<String>,
    /// Environment of that `cluster up`.
    pub cluster_env: Vec<(String, String)>,
    /// Runs the bench binary (`taskset -c 0` with --pin).
    pub bench_prefix: Vec<String>,
    /// The bench's options, but for the cluster's addresses, `--out` and the report path.
    pub bench_args: Vec<String>,
    /// Where the bench writes the report, when not in the run folder.
    pub report: Option<PathBuf>,
}

impl Plan {
    /// `cpus` is this machine's CPU count (--pin); `data` the official data's folder.
    pub fn new(options: &Options, passthrough: Vec<String>, cpus: usize, data: &Path) -> anyhow::Result<Plan> {
        let mut plan = Plan {
            cluster_up: vec!["up".to_owned()],
            cluster_env: Vec::new(),
            bench_prefix: Vec::new(),
            bench_args: passthrough,
            report: options.report.clone(),
        };
        let mut profile = !options.no_profile;
        if options.capacity {
            profile = false;
            plan.bench_args.push("--capacity".to_owned());
        }
        if options.migration_cost {
            // Its history is loaded on purpose, as fast as it goes: no per-ISU quota.
            profile = false;
            plan.bench_args.push("--migration-cost".to_owned());
            let quota = std::env::var("ISU_QUOTA").unwrap_or_else(|_| "0".to_owned());
            plan.cluster_env.push(("ISU_QUOTA".to_owned(), quota));
        }
        // The measuring modes that run without profiles.
        for (on, flag) in [
            (options.flood_cost, "--flood-cost"),
            (options.scale, "--scale"),
            (options.scale_real_workers, "--scale-real-workers"),
            (options.scale_compare, "--scale-compare"),
        ] {
            if on {
                profile = false;
                plan.bench_args.push(flag.to_owned());
            }
        }
        if let Some(devices) = &options.devices {
            plan.cluster_up.extend(["--devices".to_owned(), devices.clone()]);
        }
        if let Some(workers) = options.workers {
            plan.cluster_up.extend(["--workers".to_owned(), workers.to_string()]);
        }
        if let Some(coordinators) = options.coordinators {
            plan.cluster_up
                .extend(["--coordinators".to_owned(), coordinators.to_string()]);
        }
        if let Some(dir) = &options.static_dir {
            let dir = std::path::absolute(dir).with_context(|| format!("--static-dir {}", dir.display()))?;
            plan.cluster_up
                .extend(["--static-dir".to_owned(), dir.display().to_string()]);
        }
        if options.pin {
            anyhow::ensure!(cpus >= 2, "--pin needs at least 2 CPUs (this machine has {cpus})");
            plan.cluster_up.extend(["--cpus".to_owned(), (cpus - 1).to_string()]);
            plan.bench_prefix = vec!["taskset".to_owned(), "-c".to_owned(), "0".to_owned()];
            if options.is_scale() {
                // The scale step starts its own nodes: they go to the last CPU.
                plan.bench_args
                    .extend(["--scale-node-cpus".to_owned(), (cpus - 1).to_string()]);
            }
            if options.capacity {
                plan.bench_args.extend(["--cluster-cores".to_owned(), "1".to_owned()]);
            }
        }
        if options.official {
            for file in ["initialize.json", "ec256-private.pem", "NoImage.jpg"] {
                let path = data.join(file);
                anyhow::ensure!(path.is_file(), "--official needs {}", path.display());
            }
            plan.cluster_up.push("--official".to_owned());
            for (option, file) in [
                ("--private-key", "ec256-private.pem"),
                ("--expect-data", "initialize.json"),
                ("--default-icon", "NoImage.jpg"),
            ] {
                plan.bench_args
                    .extend([option.to_owned(), data.join(file).display().to_string()]);
            }
        }
        if let Some(duration) = &options.duration {
            plan.bench_args.extend(["--duration".to_owned(), duration.clone()]);
        }
        let profile_seconds = match options.profile {
            Some(seconds) => Some(seconds),
            None if profile => Some(default_profile_seconds(options.duration.as_deref())?),
            None => None,
        };
        if let Some(seconds) = profile_seconds {
            plan.bench_args.extend(["--profile".to_owned(), seconds.to_string()]);
        }
        Ok(plan)
    }
}

/// A sixth of the load, 3 to 30 s (the load is `--duration`, 60 s by default).
fn default_profile_seconds(duration: Option<&str>) -> anyhow::Result<u64> {
    let Some(text) = duration else {
        return Ok(10);
    };
    let load = shared::duration::parse(text).map_err(|error| anyhow::anyhow!("--duration: {error}"))?;
    Ok((load.as_secs() / 6).clamp(3, 30))
}

/// One bench run, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct BenchRun {
    pub passed: bool,
    /// The bench's last `score: N` (none for the measuring modes).
    pub score: Option<i64>,
    /// The bench's exit code (none when a signal ended it).
    pub bench_exit_code: Option<i32>,
    pub run_folder: PathBuf,
    pub report: PathBuf,
    pub migrations: Option<Migrations>,
    /// With --kill-leader-every: the leader kills and what they cost.
    pub control_plane: Option<ControlPlane>,
    pub public_url: String,
    /// Whether this command started the cluster, and whether it is left running.
    pub cluster_started: bool,
    pub cluster_left_running: bool,
}

pub fn run(args: Args, format: Format) -> anyhow::Result<()> {
    if let Some(BenchCommand::Check(check)) = args.command {
        return check::run(check, format);
    }
    let (options, plan, repo) = prepare(args.args)?;
    let interrupt = Interrupt::install()?;
    if options.is_scale() {
        return run_scale(&plan, &repo, format, &interrupt);
    }
    let run_dir = RunDir::from_env();
    let (cluster, running) = ensure_cluster(&options, &plan, &run_dir)?;
    anyhow::ensure!(!interrupt.happened(), "bench: interrupted");
    let description = run_dir.cluster()?;

    let out = repo.join("run/bench").join(shared::clock::timestamp());
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let report = plan.report.clone().unwrap_or_else(|| out.join("report.json"));
    let mut bench = bench_command(&plan, &repo, &run_dir, &description, &out)?;
    bench.args(["--json".as_ref(), report.as_os_str()]);

    let killer = start_leader_killer(&options, &run_dir, &description, &out)?;
    let migrator = start_migrator(&options, &run_dir, &out);
    let (status, score) = run_teeing(bench, format, &interrupt)?;
    let migrations = migrator.map(Migrator::stop);
    let control_plane = killer.map(|killer| finish_control_plane(killer, &report));
    keep_logs(&run_dir, &out.join("logs"));

    let passed = status.success()
        && migrations.as_ref().is_none_or(|migrations| migrations.failed == 0)
        && control_plane.as_ref().is_none_or(ControlPlane::held);
    let result = BenchRun {
        passed,
        score,
        bench_exit_code: status.code(),
        run_folder: out,
        report,
        migrations,
        control_plane,
        public_url: description.public_url,
        cluster_started: !running,
        cluster_left_running: running || options.keep,
    };
    let said = summary(&result);
    match format {
        Format::Human => {
            print!("{said}");
            if let Some(score) = result.score {
                println!("score: {score}");
            }
        }
        Format::Json => {
            eprint!("{said}");
            output::emit(format, &result, |_| String::new())?;
        }
    }
    drop(cluster);
    anyhow::ensure!(result.passed, "the run did not pass");
    Ok(())
}

/// `--scale`, `--scale-real-workers`, `--scale-compare`: the bench alone (it starts its
/// coordinator and its cells, simulated or real workers), its report in the run folder or
/// `--json PATH`.
fn run_scale(plan: &Plan, repo: &Path, format: Format, interrupt: &Interrupt) -> anyhow::Result<()> {
    let out = repo.join("run/bench").join(shared::clock::timestamp());
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let report = plan.report.clone().unwrap_or_else(|| out.join("report.json"));
    let release = deploy::external::target_dir(repo).join("release");
    let mut bench = match plan.bench_prefix.split_first() {
        Some((program, prefix)) => {
            let mut command = Command::new(program);
            command.args(prefix).arg(release.join("bench"));
            command
        }
        None => Command::new(release.join("bench")),
    };
    bench
        .arg("--coordinator-bin")
        .arg(release.join("coordinator"))
        .arg("--worker-bin")
        .arg(release.join("worker"))
        .arg("--out")
        .arg(&out)
        .args(&plan.bench_args)
        .args(["--json".as_ref(), report.as_os_str()]);
    let (status, _) = run_teeing(bench, format, interrupt)?;
    eprintln!("run folder: {}", out.display());
    anyhow::ensure!(status.success(), "the scale step failed ({status})");
    Ok(())
}

/// The options parsed and checked, the run's plan, the checkout; the bench binary built.
fn prepare(args: Vec<String>) -> anyhow::Result<(Options, Plan, PathBuf)> {
    let (ours, passthrough) = split_args(args);
    let options = Options::try_parse_from(std::iter::once("isuctl bench".to_owned()).chain(ours))
        .unwrap_or_else(|error| error.exit());
    let repo = local::repo_root();
    let cpus = std::thread::available_parallelism().map_or(1, |cpus| cpus.get());
    let plan = Plan::new(
        &options,
        passthrough,
        cpus,
        &repo.join("../shared/data/isucon11-qualify"),
    )
    .map_err(|error| anyhow::anyhow!("bench: {error:#}"))?;
    if options.pin {
        anyhow::ensure!(found_on_path("taskset"), "bench: --pin needs taskset (util-linux)");
    }
    anyhow::ensure!(found_on_path("cargo"), "bench: cargo is required (https://rustup.rs)");
    // Scale mode starts its own coordinator, a release build.
    let packages: &[&str] = if options.scale_real_workers || options.scale_compare {
        &["bench", "coordinator", "worker"]
    } else if options.scale {
        &["bench", "coordinator"]
    } else {
        &["bench"]
    };
    let built = deploy::external::cargo_build(&repo, true, packages)
        .status()
        .context("running cargo build")?;
    anyhow::ensure!(built.success(), "bench: cargo build --release -p {packages:?} failed");
    Ok((options, plan, repo))
}

/// The cluster of `run_dir`: the one running (with a note on the options it ignores), or
/// one `cluster up` starts, stopped when the guard drops unless `--keep`; and whether it was
/// running already.
fn ensure_cluster(options: &Options, plan: &Plan, run_dir: &RunDir) -> anyhow::Result<(ClusterGuard, bool)> {
    let mut cluster = ClusterGuard {
        run_dir: run_dir.clone(),
        stop_on_drop: false,
    };
    let running = local::cluster_command()
        .arg("status")
        .env("ISU_RUN_DIR", &run_dir.path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if running {
        eprintln!(
            "bench: using the cluster already running from {}",
            run_dir.path.display()
        );
        if options.pin || options.devices.is_some() || options.static_dir.is_some() {
            eprintln!(
                "bench: note: --pin, --devices and --static-dir apply to a cluster this command starts; stop this one first"
            );
        }
        if options.official {
            eprintln!("bench: note: --official expects a cluster started with --official");
        }
    } else {
        let up = local::cluster_command()
            .args(&plan.cluster_up)
            .envs(plan.cluster_env.iter().map(|(key, value)| (key, value)))
            .env("ISU_RUN_DIR", &run_dir.path)
            .stdout(Stdio::null())
            .status()
            .context("running cluster up")?;
        anyhow::ensure!(up.success(), "bench: cluster up failed ({up})");
        cluster.stop_on_drop = !options.keep;
    }
    Ok((cluster, running))
}

/// With `--migrate-every S`: a random slot moved every S seconds (`cells random`) from
/// [`FIRST_MIGRATION_AFTER`] on, listed in `out/migrations.log`.
fn start_migrator(options: &Options, run_dir: &RunDir, out: &Path) -> Option<Migrator> {
    let seconds = options.migrate_every?;
    let cluster = run_dir.clone();
    let random_move = move || {
        let mut command = local::cells_command();
        command.arg("random").env("ISU_RUN_DIR", &cluster.path);
        command
    };
    Some(Migrator::start(
        random_move,
        out.join("migrations.log"),
        FIRST_MIGRATION_AFTER,
        Duration::from_secs_f64(seconds),
    ))
}

/// With `--kill-leader-every S` or `--pause-leader-every S` (a group of 3 or more
/// replicas): the leader disrupted every S seconds, listed in `out/leader-kills.log`.
fn start_leader_killer(
    options: &Options,
    run_dir: &RunDir,
    cluster: &ClusterFile,
    out: &Path,
) -> anyhow::Result<Option<LeaderKiller<LocalGroup>>> {
    let (option, disruption, seconds) = match (options.kill_leader_every, options.pause_leader_every) {
        (Some(seconds), _) => ("--kill-leader-every", Disruption::Kill, seconds),
        (None, Some(seconds)) => ("--pause-leader-every", Disruption::Pause, seconds),
        (None, None) => return Ok(None),
    };
    anyhow::ensure!(
        cluster.replicas.len() >= 3,
        "bench: {option} needs a group of at least 3 coordinators (--coordinators 3)"
    );
    let group =
        LocalGroup::new(run_dir.clone(), cluster.replicas.clone()).with_context(|| format!("bench: {option}"))?;
    Ok(Some(LeaderKiller::start(
        Arc::new(group),
        out.join("leader-kills.log"),
        disruption,
        FIRST_MIGRATION_AFTER,
        Duration::from_secs_f64(seconds),
    )))
}

/// Stops the leader killer, counts the bench's report of the run against the takeovers
/// and adds the result to the report as `control_plane`.
fn finish_control_plane(killer: LeaderKiller<LocalGroup>, report_path: &Path) -> ControlPlane {
    let report = ReportFile::read(report_path);
    let plane = killer.stop(report.as_ref().ok());
    let added = report.and_then(|mut report| {
        report.control_plane = Some(plane.clone());
        report.write(report_path)
    });
    if let Err(error) = added {
        eprintln!("bench: control_plane not added to the report: {error:#}");
    }
    plane
}

/// What the run did beside the bench's own report: the migrations, the leader kills, the
/// run folder, a cluster left running.
fn summary(run: &BenchRun) -> String {
    let mut said = String::new();
    if let Some(migrations) = &run.migrations {
        said.push_str(&format!(
            "live migrations during the run: {} done, {} failed (details: {})\n",
            migrations.done,
            migrations.failed,
            migrations.log.display()
        ));
    }
    if let Some(plane) = &run.control_plane {
        said.push_str(&format!(
            "leader kills during the run: {}, pauses {} ({} failed), takeover median {} ms ({:?}), failed requests {} ({} outside the takeovers), replicas differing after the run {}, acknowledged registrations lost {}, JIA activations repeated {} and missing {}, asked again by a re-sent registration {} (details: {})\n",
            plane.leader_kills,
            plane.leader_pauses,
            plane.failed_kills,
            plane.takeover_median_ms.map_or_else(|| "-".to_owned(), |ms| ms.to_string()),
            plane.takeover_ms,
            plane.failed_requests,
            plane.failed_outside_takeovers,
            plane.replicas_differing,
            plane.lost_acknowledged,
            plane.repeated_activations,
            plane.unactivated_acknowledged,
            plane.activations_on_resend,
            plane.log.display()
        ));
    }
    said.push_str(&format!("run folder: {}\n", run.run_folder.display()));
    if run.cluster_started && run.cluster_left_running {
        said.push_str(&format!(
            "cluster left running at {} (stop it: scripts/cluster down)\n",
            run.public_url
        ));
    }
    said
}

/// The bench binary's command line against the running cluster: its public URL, a JIA
/// beside the coordinator (port `BENCH_JIA_PORT`, default 5050, so `cluster up --jia`'s on
/// 5000 can run too), every node, the secret, nginx's CPU, the run folder.
fn bench_command(
    plan: &Plan,
    repo: &Path,
    run_dir: &RunDir,
    cluster: &ClusterFile,
    out: &Path,
) -> anyhow::Result<Command> {
    let binary = deploy::external::target_dir(repo).join("release/bench");
    let mut command = match plan.bench_prefix.split_first() {
        Some((program, prefix)) => {
            let mut command = Command::new(program);
            command.args(prefix).arg(&binary);
            command
        }
        None => Command::new(&binary),
    };
    let jia_port = std::env::var("BENCH_JIA_PORT").unwrap_or_else(|_| "5050".to_owned());
    command.args(["--target", &cluster.public_url]).args([
        "--jia-listen",
        &format!("{}:{jia_port}", url_host(&cluster.coordinator_url)?),
    ]);
    for node in cluster.nodes() {
        command.arg("--node").arg(format!("{}={}", node.name, node.url));
    }
    command.arg("--cluster-secret-file").arg(run_dir.secret_path());
    match std::fs::read_to_string(run_dir.path.join("nginx.pid")) {
        Ok(pid) => {
            command.arg("--process").arg(format!("nginx={}", pid.trim()));
        }
        Err(error) => eprintln!("bench: nginx's CPU is not measured: nginx.pid: {error}"),
    }
    command.arg("--out").arg(out).args(&plan.bench_args);
    Ok(command)
}

/// `http://127.0.0.2:3000` → `127.0.0.2`.
fn url_host(url: &str) -> anyhow::Result<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    };
    anyhow::ensure!(!host.is_empty(), "no host in {url:?}");
    Ok(host)
}

/// Runs the bench with its stdout passed on line by line (to stdout, or to stderr under
/// `--json`) and returns its status and its last `score: N`.
fn run_teeing(mut bench: Command, format: Format, interrupt: &Interrupt) -> anyhow::Result<(ExitStatus, Option<i64>)> {
    let mut child = bench.stdout(Stdio::piped()).spawn().context("starting the bench")?;
    interrupt.forward_to(child.id());
    let mut score = None;
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line.context("reading the bench's output")?;
            if let Some(value) = line.strip_prefix("score: ") {
                score = value.trim().parse().ok();
                // The score is said last, after the run's own lines.
                continue;
            }
            match format {
                Format::Human => println!("{line}"),
                Format::Json => eprintln!("{line}"),
            }
        }
    }
    let status = child.wait().context("waiting for the bench")?;
    interrupt.forward_to(0);
    Ok((status, score))
}

/// Copies the nodes' and nginx's logs of the cluster into the run folder (those that exist).
fn keep_logs(run_dir: &RunDir, logs: &Path) {
    if let Err(error) = std::fs::create_dir_all(logs) {
        eprintln!("bench: cannot keep the logs: {}: {error}", logs.display());
        return;
    }
    for name in LOGS.split_whitespace() {
        let from = run_dir.path.join(format!("{name}.log"));
        if from.is_file() {
            if let Err(error) = std::fs::copy(&from, logs.join(format!("{name}.log"))) {
                eprintln!("bench: cannot keep {}: {error}", from.display());
            }
        }
    }
}

fn found_on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Stops a cluster this command started when the run ends, however it ends.
struct ClusterGuard {
    run_dir: RunDir,
    stop_on_drop: bool,
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if self.stop_on_drop {
            let _ = local::cluster_command()
                .arg("down")
                .env("ISU_RUN_DIR", &self.run_dir.path)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// SIGINT and SIGTERM do not end this command at once: they are passed to the bench, and the
/// run then ends as usual (logs kept, a cluster it started stopped).
struct Interrupt {
    happened: Arc<AtomicBool>,
    bench_pid: Arc<AtomicU32>,
}

impl Interrupt {
    fn install() -> anyhow::Result<Interrupt> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let happened = Arc::new(AtomicBool::new(false));
        let bench_pid = Arc::new(AtomicU32::new(0));
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
        let (flag, pid) = (happened.clone(), bench_pid.clone());
        std::thread::spawn(move || {
            for signal in signals.forever() {
                flag.store(true, Ordering::SeqCst);
                let bench = pid.load(Ordering::SeqCst);
                if bench != 0 {
                    let signal = nix::sys::signal::Signal::try_from(signal).unwrap_or(nix::sys::signal::SIGTERM);
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(bench as i32), signal);
                }
            }
        });
        Ok(Interrupt { happened, bench_pid })
    }

    fn happened(&self) -> bool {
        self.happened.load(Ordering::SeqCst)
    }

    /// The process the signals go to from now on (0: none).
    fn forward_to(&self, pid: u32) {
        self.bench_pid.store(pid, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(words: &str) -> Vec<String> {
        words.split_whitespace().map(str::to_owned).collect()
    }

    fn plan(words: &str) -> Plan {
        let (ours, bench) = split_args(strings(words));
        let options = Options::try_parse_from(std::iter::once("isuctl bench".to_owned()).chain(ours)).unwrap();
        Plan::new(&options, bench, 2, Path::new("/nonexistent")).unwrap()
    }

    #[test]
    fn the_benchs_own_options_pass_through_in_order_around_ours() {
        let (ours, bench) = split_args(strings(
            "--users 3 --keep --no-growth --workers=3 --migrate-every 4 --json out.json --keep-going",
        ));
        assert_eq!(ours, strings("--keep --workers=3 --migrate-every 4 --json out.json"));
        assert_eq!(bench, strings("--users 3 --no-growth --keep-going"));
    }

    #[test]
    fn the_command_line_reaches_the_split_whole() {
        use clap::Parser as _;
        let parse = |words: &str| match crate::Cli::try_parse_from(strings(words)).unwrap().command {
            crate::Command::Bench(args) => args.args,
            other => panic!("{other:?}"),
        };
        // As scripts/bench passes it: after `--`, even --json and --help are the run's.
        assert_eq!(
            parse("isuctl bench -- --json r.json --help"),
            strings("--json r.json --help")
        );
        assert_eq!(
            parse("isuctl bench --users 3 --keep --duration 10s"),
            strings("--users 3 --keep --duration 10s")
        );
        assert_eq!(parse("isuctl bench --help"), strings("--help"));
    }

    #[test]
    fn the_ci_run_with_three_cells_and_migrations() {
        let plan = plan("--workers 3 --migrate-every 4 --duration 12s --no-profile");
        assert_eq!(plan.cluster_up, strings("up --workers 3"));
        assert_eq!(plan.bench_args, strings("--duration 12s"));
        assert!(plan.bench_prefix.is_empty());
        assert_eq!(plan.report, None);
    }

    #[test]
    fn the_profile_takes_a_sixth_of_the_load_from_3_to_30_seconds() {
        assert_eq!(plan("--duration 10s").bench_args, strings("--duration 10s --profile 3"));
        assert_eq!(plan("--duration 2m").bench_args, strings("--duration 2m --profile 20"));
        assert_eq!(
            plan("--duration 500ms").bench_args,
            strings("--duration 500ms --profile 3")
        );
        assert_eq!(
            plan("--duration 600").bench_args,
            strings("--duration 600 --profile 30")
        );
        assert_eq!(plan("").bench_args, strings("--profile 10"));
        assert_eq!(plan("--profile 7").bench_args, strings("--profile 7"));
    }

    #[test]
    fn measuring_modes_are_not_profiled_and_pin_splits_the_cpus() {
        let capacity = plan("--pin --capacity --devices nginx");
        assert_eq!(capacity.cluster_up, strings("up --devices nginx --cpus 1"));
        let contest = plan("--static-dir /tmp/public --duration 20s");
        assert_eq!(contest.cluster_up, strings("up --static-dir /tmp/public"));
        assert_eq!(contest.bench_args, strings("--duration 20s --profile 3"));
        assert_eq!(capacity.bench_prefix, strings("taskset -c 0"));
        assert_eq!(capacity.bench_args, strings("--capacity --cluster-cores 1"));
        let cost = plan("--migration-cost --migration-conditions 200000");
        assert_eq!(
            cost.bench_args,
            strings("--migration-conditions 200000 --migration-cost")
        );
        assert!(cost.cluster_env.iter().any(|(key, _)| key == "ISU_QUOTA"));
        let scale = plan("--scale --scale-isus 100000 --scale-cells 16");
        assert_eq!(
            scale.bench_args,
            strings("--scale-isus 100000 --scale-cells 16 --scale")
        );
        let compare = plan("--pin --scale-compare --scale-rounds 3");
        assert_eq!(
            compare.bench_args,
            strings("--scale-rounds 3 --scale-compare --scale-node-cpus 1")
        );
        assert_eq!(compare.bench_prefix, strings("taskset -c 0"));
    }

    #[test]
    fn bad_options_are_refused_clearly() {
        let parse =
            |words: &str| Options::try_parse_from(std::iter::once("isuctl bench".to_owned()).chain(strings(words)));
        assert!(parse("--migrate-every soon")
            .unwrap_err()
            .to_string()
            .contains("not a number of seconds"));
        assert!(parse("--migrate-every 0").is_err());
        assert!(parse("--devices carrier-pigeon").is_err());
        assert!(parse("--workers 17").is_err());
        let options = parse("--duration fast").unwrap();
        let error = Plan::new(&options, Vec::new(), 2, Path::new("/nonexistent")).unwrap_err();
        assert!(error.to_string().contains("--duration"), "{error}");
        let error = Plan::new(&parse("--pin").unwrap(), Vec::new(), 1, Path::new("/nonexistent")).unwrap_err();
        assert!(error.to_string().contains("2 CPUs"), "{error}");
        let error = Plan::new(&parse("--official").unwrap(), Vec::new(), 2, Path::new("/nonexistent")).unwrap_err();
        assert!(error.to_string().contains("initialize.json"), "{error}");
    }

    #[test]
    fn the_jia_listens_on_the_coordinators_host() {
        assert_eq!(url_host("http://127.0.3.2:3000").unwrap(), "127.0.3.2");
        assert_eq!(url_host("http://[::1]:3000/").unwrap(), "[::1]");
        assert!(url_host("http://:3000").is_err());
    }
}
