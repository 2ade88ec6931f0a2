//! The end-to-end sandbox: real coordinator and worker processes on loopback, an in-process
//! JIA simulator (`jia-sim`), the real nginx rendered from the project's template, and typed
//! HTTP helpers that drive the public API as browsers, the bench and devices do. The tests
//! that use it live in `tests/` (`tests/cluster/` by topic, `tests/structure.rs`).
//!
//! Layout, one concern per module:
//! - [`sandbox`]: the cluster builder ([`ClusterOptions`], [`spawn_cluster_with`]) and the
//!   running [`Cluster`] (kill, start, add a worker, node logs, crash checks);
//! - [`process`]: node binaries found beside the test executable, processes killed by PID;
//! - [`agent`]: browser-like clients with one method per public route, routed like nginx;
//! - [`reply`]: a response read whole, and the assertions made on it;
//! - [`expect`]: the contract's error bodies and the dataset's expectations (ISU lists, trend);
//! - [`nginx`]: the real nginx in front of a cluster (skipped where absent, except under CI);
//! - [`ports`], [`scratch`]: free loopback ports and scratch directories;
//! - [`wait`]: waiting until a condition holds; [`metrics`]: reading Prometheus metrics.
//!
//! Every process the sandbox starts is killed by its PID when its guard drops, also when a
//! test panics (the node logs are then printed). The node binaries must be built first:
//! `cargo build --workspace --bins`.

pub mod agent;
pub mod expect;
pub mod metrics;
pub mod nginx;
pub mod ports;
pub mod process;
pub mod reply;
pub mod sandbox;
pub mod scratch;
pub mod wait;

pub use agent::{default_cell, shard_index, Agent, Routes};
pub use expect::*;
pub use metrics::metric_sum;
pub use nginx::{
    fixture_front_end, nginx_binary, nginx_or_skip, public_nginx, public_nginx_at, repository_root, start_front,
    FrontSetup, Nginx, RouterFront,
};
pub use ports::free_ports;
pub use process::{node_binary, NodeProcess};
pub use reply::Reply;
pub use sandbox::{
    sign_in_with, spawn_cluster, spawn_cluster_with, test_uuid, Cluster, ClusterOptions, CELL_NAMES, JIA_OUTSIDE_HOST,
};
pub use scratch::ScratchDir;
pub use wait::wait_until;
