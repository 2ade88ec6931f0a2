//! `nemesis`: a seeded nemesis run over a fresh local cluster, or `--check FILE` of a
//! history written by one; `isuctl nemesis` builds and runs it. Exit 0 only when every check
//! held.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use nemesis::history::History;
use nemesis::report::{Cost, Report};
use nemesis::run::{self, Options};

#[derive(Debug, Parser)]
#[command(
    name = "nemesis",
    about = "A seeded nemesis run over the local cluster, its history checked"
)]
struct Cli {
    /// The schedule's seed [default: a random one, printed].
    #[arg(long)]
    seed: Option<u64>,
    /// How long the load and the faults last (10m, 120s, ...).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    duration: Duration,
    /// Signed-in users, each a client of its own.
    #[arg(long, default_value_t = 8)]
    users: u64,
    /// Cells (workers) of the cluster.
    #[arg(long, default_value_t = 3)]
    cells: usize,
    /// Seconds after a fault is healed during which its errors are still its own.
    #[arg(long, default_value_t = 10)]
    grace: u64,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Leave the cluster running afterwards.
    #[arg(long)]
    keep_cluster: bool,
    /// No network faults (partitions, slow links, loss: `tc` on loopback, root only).
    #[arg(long)]
    no_network: bool,
    /// The isuctl binary the cluster is run with.
    #[arg(long, env = "ISUCTL_BIN", default_value = "isuctl")]
    isuctl: PathBuf,
    /// The cluster's run directory.
    #[arg(long, env = "ISU_NEMESIS_RUN_DIR")]
    run_dir: Option<PathBuf>,
    /// Check the history in FILE (written by a run) instead of running.
    #[arg(long, value_name = "FILE")]
    check: Option<PathBuf>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    shared::duration::parse(text).map_err(|error| error.to_string())
}

fn main() {
    let cli = Cli::parse();
    match report(&cli) {
        Ok(report) => {
            if cli.json {
                println!("{}", serde_json::to_string_pretty(&report).expect("a report is JSON"));
            } else {
                print!("{}", report.table());
            }
            std::process::exit(if report.passed { 0 } else { 1 });
        }
        Err(error) => {
            eprintln!("nemesis: {error:#}");
            std::process::exit(2);
        }
    }
}

fn report(cli: &Cli) -> anyhow::Result<Report> {
    let grace = Duration::from_secs(cli.grace);
    if let Some(path) = &cli.check {
        let history: History = serde_json::from_slice(&std::fs::read(path)?)?;
        let checks = nemesis::checker::check(&history, grace.as_nanos() as u64);
        let mut report = Report::new(cli.seed.unwrap_or(0), 0.0, &history, checks, Cost::default());
        report.history = Some(path.clone());
        return Ok(report);
    }
    let seed = cli.seed.unwrap_or_else(rand::random);
    eprintln!("nemesis: seed {seed}");
    if !cli.no_network {
        remove_qdisc_on_signal()?;
    }
    // Loopback addresses of its own, so that other local clusters may run beside it.
    for (key, value) in [
        ("ISU_COORDINATOR_HOST", "127.0.42.2"),
        ("ISU_WORKER_A_HOST", "127.0.42.3"),
        ("ISU_WORKER_B_HOST", "127.0.42.4"),
    ] {
        if std::env::var_os(key).is_none() {
            std::env::set_var(key, value);
        }
    }
    let run_dir = cli
        .run_dir
        .clone()
        .unwrap_or_else(|| isuctl::local::repo_root().join("run/nemesis"));
    std::fs::create_dir_all(&run_dir)?;
    run::run(&Options {
        seed,
        duration: cli.duration,
        users: cli.users,
        cells: cli.cells,
        grace,
        isuctl: cli.isuctl.clone(),
        run_dir,
        keep_cluster: cli.keep_cluster,
        network: !cli.no_network,
    })
}

/// On SIGINT or SIGTERM, the network faults' qdisc on loopback is removed before the
/// process exits (the cluster is left as it is: the next run takes it down).
fn remove_qdisc_on_signal() -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            nemesis::net::remove_ours();
            eprintln!("nemesis: stopped by signal {signal}; lo's qdisc removed");
            std::process::exit(128 + signal);
        }
    });
    Ok(())
}
