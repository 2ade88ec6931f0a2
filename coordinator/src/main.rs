//! Coordinator binary: config → tracing → build → serve until Ctrl-C or SIGTERM.

use clap::Parser;
use coordinator::{application::Application, config::Config};

/// mimalloc: glibc's malloc and free were about a sixth of a worker's CPU under device load
/// (perf; a post allocates its request, body, batch and answer on one thread and frees them
/// on it).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
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
