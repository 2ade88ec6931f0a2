//! Code shared by the coordinator, the workers and the bench.
//!
//! Layout:
//! - [`backoff`]: exponential back-off with sparse logging for background senders;
//! - [`clock`]: wall-clock times as the tools write them (run folders, log lines, Unix ms);
//! - [`domain`]: condition strings, flags and levels (pure functions);
//! - [`duration`]: durations as command lines take them (`60s`, `1500ms`, `2m`);
//! - [`graph`]: the hourly graph data-point maths;
//! - [`ingest`]: device condition batches: decoding, validation and their limits;
//! - [`migration`]: the clone → flip → redirect → forget state machine of a live migration;
//! - [`placement`]: the mission's parity rule, which the default two-cell map reproduces;
//! - [`placement_map`]: the versioned map of slots and pins to cells, and its rebalance plans;
//! - [`protocol`]: every internal route and message that crosses nodes;
//! - [`router`]: the nginx include file that routes per-ISU requests by the placement map;
//! - [`session`]: the signed session cookie every node can verify;
//! - [`dataset`]: the initial data (project default or official MySQL dump);
//! - [`error`]: the exact public error messages of the API;
//! - [`telemetry`]: tracing, Prometheus metrics and pprof profiling;
//! - [`wal`]: the checksummed append-only log with group commit and snapshots.

pub mod backoff;
pub mod clock;
pub mod dataset;
pub mod domain;
pub mod duration;
pub mod error;
pub mod graph;
pub mod ingest;
pub mod migration;
pub mod placement;
pub mod placement_map;
pub mod prom_text;
pub mod protocol;
pub mod router;
pub mod session;
pub mod shuffle;
pub mod sketch;
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

/// An error and its sources on one line (`a: b: c`): `reqwest` errors say only
/// "error sending request" at the top, the cause (timeout, refused, reset) is below.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // Some layers repeat their source in their own message.
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Replaces `path` with `bytes` in one step (a temporary file beside it, then a rename), so a
/// reader or a crash sees the old content or the new, never a part. Each call has a
/// temporary file of its own (process id and a counter): two threads writing the same path
/// at once each rename whole content, where one shared name let the second find its file
/// already renamed away (ENOENT; a worker answered a map change 500 that way).
pub fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".tmp.{}.{write}", std::process::id()));
    let written = std::fs::write(&temporary, bytes).and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// Turns transparent huge pages off for this process (Linux; elsewhere nothing). Called first
/// thing by each node binary. mimalloc asks for huge pages on its arenas and gives freed
/// memory back to the system after a second; every region touched again was then a whole
/// 2 MiB page zeroed by the kernel: under device load, page zeroing was a tenth of a worker's
/// CPU (perf at 600 ISUs). Off (as `MIMALLOC_ALLOW_THP=0` does; the `no_thp` build of
/// mimalloc also stops asking), a pinned capacity step of 600 ISUs took 0.93× the cluster CPU
/// per device post (median of 4 alternated rounds) with lower device post p99 in all 4.
pub fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(error) = nix::sys::prctl::set_thp_disable(true) {
        eprintln!("could not turn transparent huge pages off: {error}");
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

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn error_chain_names_every_cause() {
        let error = Outer(std::io::Error::new(std::io::ErrorKind::TimedOut, "operation timed out"));
        assert_eq!(super::error_chain(&error), "outer: operation timed out");
    }

    #[test]
    fn writers_of_one_path_at_once_each_replace_it_whole() {
        let dir = std::env::temp_dir().join(format!("write-atomically-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("map.json");
        let contents: Vec<String> = (0..8).map(|writer| format!("{writer}").repeat(4096)).collect();
        std::thread::scope(|scope| {
            for content in &contents {
                let path = &path;
                scope.spawn(move || {
                    for _ in 0..200 {
                        super::write_atomically(path, content.as_bytes()).unwrap();
                    }
                });
            }
        });
        let last = std::fs::read_to_string(&path).unwrap();
        assert!(contents.contains(&last), "the file holds one writer's content whole");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(left, ["map.json"], "no temporary file is left");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
