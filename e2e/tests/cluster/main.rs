//! Cluster tests: the real coordinator and worker binaries as child processes on loopback,
//! the JIA simulator in-process, and the public API driven over HTTP exactly as browsers,
//! the bench and devices do; some go through the real nginx rendered from the project's
//! template. One module per topic; the sandbox they use is the `e2e` library.
//!
//! Run with `cargo build --workspace --bins && cargo test -p e2e --test cluster` (`cargo
//! test` does not build the node binaries of other crates).

mod benchmarker;
mod cells;
mod cellsim;
mod durability;
mod faults;
mod ingest;
mod initialize;
mod internal;
mod isus;
mod nodes;
mod ops;
mod public;
mod reads;
mod recovery;
mod replicas;
mod router;
mod security;
mod sessions;
mod unfinished;
