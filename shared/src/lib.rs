//! Code shared by the coordinator, the workers and the bench.
//!
//! Layout:
//! - [`domain`]: condition strings, flags and levels (pure functions);
//! - [`graph`]: the hourly graph data-point maths;
//! - [`ingest`]: device condition batches: decoding, validation and their limits;
//! - [`placement`]: which worker owns an ISU;
//! - [`protocol`]: every internal route and message that crosses nodes;
//! - [`session`]: the signed session cookie every node can verify;
//! - [`dataset`]: the initial data (project default or official MySQL dump);
//! - [`error`]: the exact public error messages of the API;
//! - [`telemetry`]: tracing, Prometheus metrics and pprof profiling;
//! - [`wal`]: the checksummed append-only log with group commit and snapshots.

pub mod dataset;
pub mod domain;
pub mod error;
pub mod graph;
pub mod ingest;
pub mod placement;
pub mod protocol;
pub mod session;
pub mod telemetry;
pub mod wal;

/// Resolves on Ctrl-C or SIGTERM: the graceful-shutdown trigger of every binary.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

/// The multi-threaded Tokio runtime of a node binary (`threads == 0`: one per core).
pub fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if threads > 0 {
        builder.worker_threads(threads);
    }
    builder.enable_all().build()
}
