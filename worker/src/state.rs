//! The state every handler shares: the worker's parts behind one `Arc`.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use shared::session::SessionKey;

use crate::cells::Cells;
use crate::config::Config;
use crate::ingest::Ingest;
use crate::journal::Journal;
use crate::migration::{Exports, Migrations};
use crate::store::Store;
use crate::write_path::WritePath;

/// Shared state of the handlers: its parts behind one `Arc` (see [`node_http::NodeState`]).
pub type AppState = Arc<Shared>;

/// What [`AppState`] holds.
pub struct Shared {
    pub store: Store,
    pub journal: Journal,
    pub cells: Arc<Cells>,
    /// Migrations this worker is the source of.
    pub exports: Arc<Exports>,
    pub config: Arc<Config>,
    /// Per-ISU quota and ingest lanes.
    pub ingest: Arc<Ingest>,
    pub session_key: SessionKey,
    pub metrics: PrometheusHandle,
    /// The newest coordinator leader term seen (control calls of older ones are refused).
    pub fence: crate::fence::Fence,
    /// Asks JIA to activate the ISUs this worker holds registrations of.
    pub jia: crate::jia_client::JiaClient,
}

impl node_http::NodeState for Shared {
    fn cluster_secret(&self) -> &str {
        &self.config.cluster_secret
    }

    fn metrics(&self) -> &PrometheusHandle {
        &self.metrics
    }
}

impl Shared {
    /// The write path over this state.
    pub fn write_path(&self) -> WritePath<'_> {
        WritePath {
            store: &self.store,
            journal: &self.journal,
            ingest: &self.ingest,
            exports: &self.exports,
            cells: &self.cells,
        }
    }

    /// The migration steps over this state.
    pub fn migrations(&self) -> Migrations<'_> {
        Migrations {
            store: &self.store,
            journal: &self.journal,
            cells: &self.cells,
            exports: &self.exports,
        }
    }
}
