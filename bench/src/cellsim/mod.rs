//! The cell simulator: one process playing many worker cells toward a real coordinator (or
//! a group of replicas), for measuring the coordinator at a scale no machine runs real
//! workers at.
//!
//! Each simulated cell listens on a loopback address of its own (`127.0.0.<first_host + i>`,
//! a free port) and answers the worker internal routes the coordinator calls ([`routes`]):
//! it takes its ISUs from the coordinator's reset, like a real worker. Once told to, each
//! cell pushes latest-condition batches for its ISUs every interval (10 ms), in the real
//! wire format, on one stream per coordinator replica, as a worker's pusher does by default
//! ([`push`]); the coordinator's acknowledgments say how many of the updates it applied.

pub mod push;
pub mod routes;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use deploy::node_args::CellEndpoint;
use shared::protocol::WireCondition;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use push::PushTotals;

/// Settings of a simulator.
#[derive(Debug, Clone)]
pub struct CellSimConfig {
    /// Simulated cells (`s00`, `s01`, …).
    pub cells: usize,
    /// The first cell listens on `127.0.0.<first_host>`, the next on the address after it.
    pub first_host: u8,
    /// Every coordinator replica's base URL: each gets every batch.
    pub coordinators: Vec<String>,
    /// The cluster secret the coordinator sends and the pushes carry.
    pub secret: String,
    /// Time between batches (a worker's default is 10 ms).
    pub interval: Duration,
}

/// One ISU of a simulated cell: its UUID and its latest condition as the reset gave it.
#[derive(Debug, Clone)]
pub struct SimIsu {
    pub uuid: String,
    pub latest: Option<WireCondition>,
}

/// What one simulated cell holds: what the coordinator told it.
#[derive(Debug)]
pub struct SimCell {
    pub name: String,
    pub url: String,
    pub generation: AtomicU64,
    pub map_version: AtomicU64,
    /// Its ISUs since the last reset (and those published since).
    pub isus: RwLock<Arc<Vec<SimIsu>>>,
    /// Set by `latest/resend`: the next batch carries every ISU's latest condition again.
    pub resend: AtomicBool,
    /// The timestamp of the last batch pushed (0: none yet).
    pub last_pushed: AtomicI64,
    /// When each newer map version arrived (the scale step's map spread).
    pub map_arrivals: std::sync::Mutex<Vec<(u64, Instant)>>,
}

impl SimCell {
    /// A cell told nothing yet (generation 0, map version 0, no ISU).
    pub fn new(name: String, url: String) -> SimCell {
        SimCell {
            name,
            url,
            generation: AtomicU64::new(0),
            map_version: AtomicU64::new(0),
            isus: RwLock::new(Arc::new(Vec::new())),
            resend: AtomicBool::new(false),
            last_pushed: AtomicI64::new(0),
            map_arrivals: std::sync::Mutex::default(),
        }
    }

    /// Its ISUs now.
    pub fn isus(&self) -> Arc<Vec<SimIsu>> {
        self.isus
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// When map `version` arrived here, if it did.
    pub fn map_arrival(&self, version: u64) -> Option<Instant> {
        self.map_arrivals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find_map(|(arrived, at)| (*arrived == version).then_some(*at))
    }

    pub(super) fn replace_isus(&self, isus: Vec<SimIsu>) {
        *self.isus.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(isus);
    }

    /// Adds a published ISU unless held: in place when no pusher holds the list at the
    /// moment (a copy of a cell's tens of thousands of ISUs per registration made the
    /// simulator, not the coordinator, the bottleneck of registrations at a million ISUs).
    pub(super) fn add_isu(&self, uuid: String) {
        let mut isus = self.isus.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !isus.iter().any(|held| held.uuid == uuid) {
            Arc::make_mut(&mut isus).push(SimIsu { uuid, latest: None });
        }
    }
}

/// A running simulator: its cells' servers and, while pushing, their pushers.
pub struct CellSim {
    config: CellSimConfig,
    cells: Vec<Arc<SimCell>>,
    stop_servers: CancellationToken,
    servers: Vec<JoinHandle<()>>,
    pushing: Option<push::Pushing>,
    totals: Arc<push::Counters>,
}

impl CellSim {
    /// Binds and serves every cell; none pushes until [`CellSim::start_pushing`].
    pub async fn start(config: CellSimConfig) -> anyhow::Result<CellSim> {
        anyhow::ensure!(config.cells > 0, "no cell to simulate");
        anyhow::ensure!(
            usize::from(config.first_host) + config.cells <= 255,
            "{} cells from 127.0.0.{} run past 127.0.0.254",
            config.cells,
            config.first_host
        );
        let stop_servers = CancellationToken::new();
        let mut cells = Vec::with_capacity(config.cells);
        let mut servers = Vec::with_capacity(config.cells);
        for index in 0..config.cells {
            let address = SocketAddr::from((Ipv4Addr::new(127, 0, 0, config.first_host + index as u8), 0));
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("binding simulated cell {index} on {address}"))?;
            let local = listener.local_addr()?;
            let cell = Arc::new(SimCell::new(format!("s{index:02}"), format!("http://{local}")));
            let router = routes::router(cell.clone(), config.secret.clone());
            let stop = stop_servers.clone();
            servers.push(tokio::spawn(async move {
                let served = axum::serve(listener, router)
                    .with_graceful_shutdown(async move { stop.cancelled().await })
                    .await;
                if let Err(error) = served {
                    tracing::warn!(%error, "a simulated cell's server failed");
                }
            }));
            cells.push(cell);
        }
        Ok(CellSim {
            config,
            cells,
            stop_servers,
            servers,
            pushing: None,
            totals: Arc::default(),
        })
    }

    /// The cells as the coordinator is told them (its `--worker` flags): each cell's internal
    /// URL serves as its device URL too (no device posts to a simulated cell).
    pub fn cell_endpoints(&self) -> Vec<CellEndpoint> {
        self.cells
            .iter()
            .map(|cell| CellEndpoint {
                cell: cell.name.clone(),
                url: cell.url.clone(),
                device_url: cell.url.clone(),
            })
            .collect()
    }

    /// The cells, for a look at what the coordinator told them.
    pub fn cells(&self) -> &[Arc<SimCell>] {
        &self.cells
    }

    /// ISUs over every cell.
    pub fn isu_count(&self) -> usize {
        self.cells.iter().map(|cell| cell.isus().len()).sum()
    }

    /// Starts pushing: each ISU gets `rate_per_isu` updates a second, in one batch per cell
    /// per interval, sent to every coordinator.
    pub fn start_pushing(&mut self, rate_per_isu: f64) -> anyhow::Result<()> {
        anyhow::ensure!(self.pushing.is_none(), "the cells push already");
        anyhow::ensure!(
            rate_per_isu.is_finite() && rate_per_isu > 0.0,
            "the rate per ISU must be positive"
        );
        self.pushing = Some(push::Pushing::start(
            &self.cells,
            &self.config,
            rate_per_isu,
            self.totals.clone(),
        )?);
        Ok(())
    }

    /// Stops pushing, waiting (a bounded time) for the coordinators to acknowledge what was
    /// sent; the totals so far.
    pub async fn stop_pushing(&mut self) -> PushTotals {
        if let Some(pushing) = self.pushing.take() {
            pushing.stop().await;
        }
        self.totals()
    }

    /// What was pushed so far.
    pub fn totals(&self) -> PushTotals {
        self.totals.snapshot()
    }

    /// Stops pushing and serving.
    pub async fn shutdown(mut self) {
        self.stop_pushing().await;
        self.stop_servers.cancel();
        for server in self.servers.drain(..) {
            let _ = server.await;
        }
    }
}
