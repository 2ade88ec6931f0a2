//! `bench`: runs a verifying load against a running cluster and prints `score: <N>` last,
//! or (`bench jia`) runs the JIA simulator alone for browser users of a local cluster.

use std::process::ExitCode;

use bench::cli::{Cli, Command, JiaArgs};
use clap::Parser;

/// The nodes' allocator: under capacity load glibc's malloc and free were a seventh of the
/// bench's CPU (one batch built and dropped per device post), on the core it has to itself.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(path) = &cli.ca_cert {
        if let Err(error) = jia_sim::http::trust_ca(path) {
            eprintln!("bench: {:#}", anyhow::Error::from(error));
            return ExitCode::FAILURE;
        }
    }
    let threads = cli.threads;
    let runtime = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    };
    match runtime {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(error) => {
            eprintln!("bench: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,hyper=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Some(Command::Jia(args)) = cli.command {
        return match serve_jia(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("bench jia failed: {error:#}");
                ExitCode::FAILURE
            }
        };
    }
    let json_path = cli.run.json.clone();
    if cli.run.capacity {
        return run_capacity(cli.run, json_path).await;
    }
    if cli.run.scale_compare {
        return run_scale_compare(cli.run, json_path).await;
    }
    if cli.run.is_scale() {
        return run_scale(cli.run, json_path).await;
    }
    if cli.run.migration_cost || cli.run.flood_cost {
        return run_migration_cost(cli.run, json_path).await;
    }
    let outcome = match cli.run.into_config() {
        Ok(config) => bench::scenario::run(config).await,
        Err(error) => Err(error),
    };
    let report = match outcome {
        Ok(report) => report,
        Err(error) => {
            eprintln!("bench failed: {error:#}");
            println!("score: 0");
            return ExitCode::FAILURE;
        }
    };
    let report = report.to_report_file();
    println!("{report}");
    if let Some(path) = json_path {
        said_written(&path, report.write(&path));
    }
    println!("score: {}", report.score);
    if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `--capacity`: the ramp, its table and `capacity.*` in the JSON; fails when not even the
/// first step held.
async fn run_capacity(args: bench::cli::RunArgs, json_path: Option<std::path::PathBuf>) -> ExitCode {
    let outcome = match args.into_capacity_config() {
        Ok(config) => bench::capacity::run(config).await,
        Err(error) => Err(error),
    };
    finish_measuring_mode("capacity", outcome, json_path, |report| {
        (report.to_json(), report.sustained().is_some())
    })
}

/// `--scale`: one step's table and its figures in the JSON; fails when anything was lost
/// (see [`bench::scale::ScaleReport::held`]).
async fn run_scale(args: bench::cli::RunArgs, json_path: Option<std::path::PathBuf>) -> ExitCode {
    let outcome = match args.into_scale_config() {
        Ok(config) => bench::scale::run(config).await,
        Err(error) => Err(error),
    };
    finish_measuring_mode("scale", outcome, json_path, |report| {
        let json = serde_json::json!({ "scale": report });
        (json, report.held())
    })
}

/// `--scale-compare`: each round's steps, the medians and ratios, and `scale_compare` in the
/// JSON; fails when a step failed or lost an update (a disagreement is a finding, not a
/// failure: the table says it).
async fn run_scale_compare(args: bench::cli::RunArgs, json_path: Option<std::path::PathBuf>) -> ExitCode {
    let outcome = match args.into_scale_compare_config() {
        Ok(config) => bench::scale_compare::run(config).await,
        Err(error) => Err(error),
    };
    finish_measuring_mode("scale compare", outcome, json_path, |report| {
        let json = serde_json::json!({ "scale_compare": report });
        (json, report.held())
    })
}

/// `--migration-cost` / `--flood-cost`: the windows' table and `migration_cost.*` or
/// `flood_cost.*` in the JSON; fails when the migration failed or any request failed.
async fn run_migration_cost(args: bench::cli::RunArgs, json_path: Option<std::path::PathBuf>) -> ExitCode {
    let outcome = match args.into_migration_cost_config() {
        Ok(config) => bench::migration_cost::run(config).await,
        Err(error) => Err(error),
    };
    finish_measuring_mode("migration cost", outcome, json_path, |report| {
        (report.to_json(), report.errors() == 0)
    })
}

/// Prints a measuring mode's report (or why it failed), writes its JSON, and exits 0 when
/// `judge` says the run held.
fn finish_measuring_mode<R: std::fmt::Display>(
    mode: &str,
    outcome: anyhow::Result<R>,
    json_path: Option<std::path::PathBuf>,
    judge: impl Fn(&R) -> (serde_json::Value, bool),
) -> ExitCode {
    let report = match outcome {
        Ok(report) => report,
        Err(error) => {
            eprintln!("bench {mode} failed: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    println!("{report}");
    let (json, held) = judge(&report);
    if let Some(path) = json_path {
        write_json(&path, &json);
    }
    if held {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Writes a measuring mode's JSON report.
fn write_json(path: &std::path::Path, report: &serde_json::Value) {
    let written = serde_json::to_vec_pretty(report)
        .map_err(anyhow::Error::from)
        .and_then(|json| std::fs::write(path, json).map_err(anyhow::Error::from));
    said_written(path, written);
}

/// Says where the report was written, or why it was not (not fatal: it was printed).
fn said_written(path: &std::path::Path, written: anyhow::Result<()>) {
    match written {
        Ok(()) => println!("report: {}", path.display()),
        Err(error) => eprintln!("bench: cannot write {}: {error:#}", path.display()),
    }
}

async fn serve_jia(args: JiaArgs) -> anyhow::Result<()> {
    let config = args.into_config()?;
    let jia = jia_sim::JiaSimulator::start(config).await?;
    tracing::info!(url = %jia.url(), "jia simulator listening; sign-in page at /");
    shared::shutdown_signal().await;
    jia.shutdown().await;
    Ok(())
}
