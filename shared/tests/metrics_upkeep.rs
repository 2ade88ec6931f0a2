//! The Prometheus recorder keeps every histogram sample until it is folded into the buckets;
//! a node that nothing scrapes must not grow with every request it ever measured. Its own
//! process (the recorder is global): millions of samples recorded with no scrape, the
//! resident memory stays far below what holding them would take.

use std::time::Duration;

/// Resident memory of this process in bytes (`/proc/self/statm`, pages of 4 KiB).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn histogram_samples_are_folded_away_without_any_scrape() {
    let upkeep = Duration::from_millis(20);
    let _handle = shared::telemetry::init_metrics_with_upkeep("worker-a", "a", upkeep).unwrap();
    let histogram = metrics::histogram!(shared::telemetry::REQUEST_SECONDS, "route" => "/test", "status" => "202");
    const CHUNKS: u64 = 20;
    const SAMPLES_PER_CHUNK: u64 = 250_000;
    // Warm up (the first chunk's blocks are allocated once whatever happens next).
    for sample in 0..SAMPLES_PER_CHUNK {
        histogram.record(sample as f64 * 1e-9);
    }
    std::thread::sleep(upkeep * 5);
    let before = resident_bytes();
    for _ in 0..CHUNKS {
        for sample in 0..SAMPLES_PER_CHUNK {
            histogram.record(sample as f64 * 1e-9);
        }
        std::thread::sleep(upkeep * 3);
    }
    let grown = resident_bytes().saturating_sub(before);
    let held = CHUNKS * SAMPLES_PER_CHUNK * 8;
    assert!(
        grown < held / 4,
        "resident memory grew by {grown} bytes over {} samples ({held} bytes if they were all kept)",
        CHUNKS * SAMPLES_PER_CHUNK
    );
}
