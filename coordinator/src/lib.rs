//! The coordinator node: auth, users, ISU registration and metadata, the
//! latest condition of every ISU (pushed by the workers), trend and ISU lists.
//!
//! Layout:
//! - [`application`]: the server: build (dataset, keys, log, listener), then serve;
//! - [`config`]: command-line/environment configuration;
//! - [`state`]: the in-memory state, the commands that change it, and the protocols;
//! - [`old_journal`]: the one-time conversion of an earlier build's journal (`coordinator.wal`);
//! - [`icons`]: with a data directory, the icons, content-addressed files out of the log;
//! - [`user_sync`]: the actor that tells the workers about new users, in batches;
//! - [`worker_client`]: the only code that builds worker URLs;
//! - [`routes`]: public API, frontend, internal and debug routes;
//! - [`error`]: the error type mapped to the API's statuses and messages.
//!
//! The modules use each other in one direction only (`e2e/tests/structure.rs` checks that no
//! import cycle exists): `config`, `error`, `icons` and `worker_client` use no
//! other module; `user_sync` uses `worker_client`; [`state`] uses those; `old_journal` uses
//! `state`; this crate root, which holds the handlers' [`AppState`], uses `config` and
//! `state`; [`routes`] use the root, `state` and `error`; [`application`] uses them all, and
//! no module uses it.

pub mod application;
pub mod config;
pub mod error;
pub mod icons;
pub mod old_journal;
pub mod routes;
pub mod state;
pub mod user_sync;
pub mod worker_client;

use std::sync::Arc;

use jsonwebtoken::DecodingKey;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::config::Config;
use crate::state::State;

/// A coordinator's replica of its group.
pub type Replica = consensus::Replica<state::apply::StateApplier>;

/// Shared state of the handlers: its parts behind one `Arc` (see [`node_http::NodeState`]).
pub type AppState = Arc<Shared>;

/// What [`AppState`] holds.
pub struct Shared {
    pub state: Arc<State>,
    pub config: Arc<Config>,
    pub jwt_key: Arc<DecodingKey>,
    pub metrics: PrometheusHandle,
    /// This coordinator's replica of its group (of the `--replica` list, or of one).
    pub replica: Arc<Replica>,
    /// Forwards a follower's leader-only writes to the leader.
    pub forward_client: reqwest::Client,
    /// Cancelled when this coordinator begins to stop: requests that last (the workers'
    /// latest streams) end then, so that the graceful shutdown does not wait for them.
    pub stopping: tokio_util::sync::CancellationToken,
}

impl node_http::NodeState for Shared {
    fn cluster_secret(&self) -> &str {
        &self.config.cluster_secret
    }

    fn metrics(&self) -> &PrometheusHandle {
        &self.metrics
    }
}

/// The allocator of this crate's unit tests: dhat's, which is the system's until a test
/// starts its profiler (`state::generation`'s memory measurement).
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// Bytes live on the heap while a dhat profiler runs (see [`ALLOCATOR`]).
#[cfg(test)]
pub(crate) fn heap_live() -> isize {
    dhat::HeapStats::get().curr_bytes as isize
}
