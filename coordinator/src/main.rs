//! Coordinator binary: config → tracing → build → serve until Ctrl-C or SIGTERM.

use clap::Parser;
use coordinator::{application::Application, config::Config};

/// mimalloc: glibc's malloc and free were about a sixth of a worker's CPU under device load
/// (perf; a post allocates its request, body, batch and answer on one thread and frees them
/// on it).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's purge delay, set by this process for itself (see [`with_allocator_options`]).
const PURGE_DELAY: (&str, &str) = ("MIMALLOC_PURGE_DELAY", "0");

/// Starts the coordinator again, once, with mimalloc's purge delay at 0 in its environment,
/// unless the variable is set already (an operator's value is kept). At a million ISUs a
/// replica kept 313 to 538 MiB after `/initialize` and 20 s of pushes with mimalloc's
/// default delay (1 s, and pages of a thread gone idle wait longer), 316 to 324 MiB with 0,
/// with no difference in CPU per update the runs could tell from their spread (2026-12-07,
/// `scripts/bench --scale`, docs/benchmarks.md). mimalloc reads its
/// options from the environment before `main` runs and the workspace forbids the `unsafe`
/// its C API takes, so the process replaces itself (`exec`: the same PID) with the option
/// set. If that fails, it runs on with mimalloc's default.
fn with_allocator_options() {
    use std::os::unix::process::CommandExt as _;
    let (name, value) = PURGE_DELAY;
    if std::env::var_os(name).is_some() {
        return;
    }
    let mut args = std::env::args_os();
    let (Some(arg0), Ok(program)) = (args.next(), std::env::current_exe()) else {
        return;
    };
    let error = std::process::Command::new(program)
        .arg0(arg0)
        .args(args)
        .env(name, value)
        .exec();
    eprintln!("coordinator: starting again with {name}={value} failed ({error}); running with mimalloc's default");
}

fn main() -> anyhow::Result<()> {
    with_allocator_options();
    shared::disable_transparent_huge_pages();
    let config = Config::parse();
    shared::protocol::check_cluster_secret(&config.cluster_secret).map_err(anyhow::Error::msg)?;
    shared::telemetry::init_tracing();
    let _fail_points = node_http::fail_points_from_env();
    shared::runtime(config.threads)?.block_on(async move {
        // Each replica of a group is its own node in the metrics (as `isuctl cluster` names it).
        let node = match config.replica_id {
            Some(id) if id > 1 => format!("coordinator-{id}"),
            _ => "coordinator".to_owned(),
        };
        let metrics = shared::telemetry::init_metrics(&node, "coordinator")?;
        let application = Application::build(config, metrics).await?;
        tracing::info!(address = %application.local_addr(), "coordinator listening");
        application.run_until_stopped(shared::shutdown_signal()).await
    })
}
