//! The coordinator as a server: [`Application::build`] loads the dataset, keys and log and
//! binds the listener; [`Application::run_until_stopped`] serves and runs the background work.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use jsonwebtoken::DecodingKey;
use metrics_exporter_prometheus::PrometheusHandle;
use shared::session::SessionKey;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::jia_client::JiaClient;
use crate::journal;
use crate::routes;
use crate::state::{self, Start, State};
use crate::worker_client::WorkerClient;
use crate::{AppState, Shared};

/// The project's own JWT verification key (tests and the bench sign with its private half).
const PROJECT_JWT_PUBLIC_KEY: &[u8] = include_bytes!("../../keys/jwt-public.pem");

/// The coordinator's log grows only with users and registrations; compact it past this size.
const COMPACT_AFTER_BYTES: u64 = 256 << 20;

/// A bound, not yet running coordinator.
pub struct Application {
    listener: TcpListener,
    state: AppState,
}

impl Application {
    /// Loads the dataset and keys, binds the listener (port 0 allowed).
    pub async fn build(config: Config, metrics: PrometheusHandle) -> anyhow::Result<Application> {
        let jwt_pem = match &config.jwt_public_key {
            Some(path) => std::fs::read(path).with_context(|| format!("reading JWT public key {}", path.display()))?,
            None => PROJECT_JWT_PUBLIC_KEY.to_vec(),
        };
        let jwt_key =
            DecodingKey::from_ec_pem(&jwt_pem).context("parsing the JWT public key (expected an EC P-256 PEM)")?;
        let default_icon = match &config.default_icon {
            Some(path) => std::fs::read(path).with_context(|| format!("reading default icon {}", path.display()))?,
            None => shared::dataset::DEFAULT_ICON.to_vec(),
        };
        let source = config.dataset.clone();
        let dataset = tokio::task::spawn_blocking(move || source.load())
            .await?
            .context("loading the dataset")?;
        tracing::info!(users = dataset.users.len(), isus = dataset.isus.len(), "dataset loaded");
        let replicated = config.replica_id.is_some();
        // A replica's state comes from its group's raft log, not from a local journal.
        let restored = match config.data_dir.clone() {
            Some(data_dir) if !replicated => tokio::task::spawn_blocking(move || journal::replay(&data_dir))
                .await?
                .context("replaying the coordinator's log")?,
            _ => None,
        };
        let (logged_map, migrations) = match &restored {
            Some(restored) => (restored.placement.clone(), restored.migrations.clone()),
            None => (None, Vec::new()),
        };
        let map = state::placement::starting_map(logged_map, &config.cells())?;
        tracing::info!(
            version = map.version(),
            cells = ?map.cells().iter().map(|cell| &cell.name).collect::<Vec<_>>(),
            slots = ?map.slot_counts(),
            pins = map.pins().len(),
            "placement map"
        );
        // Cell ids are positions in the map, so the client follows the map's order.
        let workers = WorkerClient::new(map.cells(), &config.cluster_secret)?;
        let router = config.router_map.clone().map(|path| state::placement::RouterFile {
            path,
            url: config.router_url.clone(),
        });
        let mut state = State::new(
            dataset,
            Bytes::from(default_icon),
            SessionKey::from_secret(&config.cluster_secret),
            workers,
            JiaClient::new()?,
            state::Placement::new(map, migrations, router, &config.cluster_secret),
            match restored {
                Some(restored) => Start::Restored(restored),
                None if replicated => Start::Replicated {
                    jia_service_url: config.jia_service_url.clone(),
                },
                None => Start::Fresh {
                    jia_service_url: config.jia_service_url.clone(),
                },
            },
        );
        state.migration_grace = std::time::Duration::from_millis(config.migration_grace_ms);
        if replicated {
            state.journal = journal::Journal::replicated(state.snapshot_fn());
            let data_dir = config
                .data_dir
                .as_ref()
                .expect("clap requires --data-dir with --replica-id");
            state.icons = Some(Arc::new(
                crate::icons::IconStore::open(&data_dir.join("icons"), &config.cluster_secret)
                    .context("opening the icon store")?,
            ));
        } else if let Some(data_dir) = &config.data_dir {
            state.journal = journal::Journal::open(data_dir, config.fsync, COMPACT_AFTER_BYTES, state.snapshot_fn())
                .context("opening the coordinator's log")?;
            // The log starts with this run's generation (also compacts it).
            state.journal.snapshot().await?;
        }
        if !replicated {
            // Before the listener: nginx may be started as soon as the file exists. (A
            // group's leader writes it when it starts leading.)
            state.placement.write_router_file().await;
        }
        let listener = TcpListener::bind(config.listen).await?;
        let state = Arc::new(state);
        let replica = match config.replica_id {
            Some(id) => {
                let options = consensus::ReplicaOptions {
                    id,
                    members: config.replicas.iter().cloned().collect(),
                    data_dir: config
                        .data_dir
                        .clone()
                        .expect("clap requires --data-dir with --replica-id"),
                    secret: config.cluster_secret.clone(),
                    snapshot_every: config.raft_snapshot_every,
                    heartbeat_ms: config.raft_heartbeat_ms,
                };
                let applier = Arc::new(state::replica::StateApplier::new(&state));
                let replica = consensus::Replica::start(options, applier)
                    .await
                    .context("starting this coordinator's replica")?;
                state.journal.attach(replica.proposer());
                tracing::info!(id, members = ?config.replicas, "coordinator replica started");
                Some(Arc::new(replica))
            }
            None => None,
        };
        Ok(Application {
            listener,
            state: Arc::new(Shared {
                state,
                config: Arc::new(config),
                jwt_key: Arc::new(jwt_key),
                metrics,
                replica,
                forward_client: node_http::internal_client()
                    .connect_timeout(std::time::Duration::from_millis(500))
                    .timeout(std::time::Duration::from_secs(30))
                    .build()?,
                stopping: tokio_util::sync::CancellationToken::new(),
            }),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener has an address")
    }

    /// Serves until `shutdown` resolves. Brings the workers to this node's
    /// generation in the background (`/healthz` is 200 once that is done), then
    /// keeps watching them and resets a worker that restarted.
    pub async fn run_until_stopped(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let stopping = self.state.stopping.clone();
        let shutdown = async move {
            shutdown.await;
            stopping.cancel();
        };
        if let Some(replica) = self.state.replica.clone() {
            // A replica leads or follows; its duties follow its role (see `state::replica`).
            let lead = tokio::spawn(self.state.state.clone().lead());
            let watchdog = tokio::spawn(self.state.state.clone().watch_for_stalls());
            let sweep = tokio::spawn(self.state.state.clone().sweep_icons(
                std::time::Duration::from_secs(self.state.config.icon_sweep_every_secs),
                std::time::Duration::from_secs(self.state.config.icon_grace_secs),
            ));
            let router = routes::all::router(self.state)?;
            let served = axum::serve(self.listener, router)
                .with_graceful_shutdown(shutdown)
                .await;
            lead.abort();
            watchdog.abort();
            sweep.abort();
            replica.shutdown().await;
            return Ok(served?);
        }
        let state = self.state.state.clone();
        let sync = tokio::spawn(async move {
            state.sync_workers_until_ready().await;
            state.recover_migrations().await;
            state.watch_workers().await;
        });
        let state = self.state.state.clone();
        let router_keeper = tokio::spawn(async move { state.placement.keep_router().await });
        let stop_user_sync = tokio_util::sync::CancellationToken::new();
        let user_sync = tokio::spawn(
            self.state
                .state
                .user_sync
                .clone()
                .run(self.state.state.workers.clone(), stop_user_sync.clone()),
        );
        let router = routes::all::router(self.state)?;
        let served = axum::serve(self.listener, router)
            .with_graceful_shutdown(shutdown)
            .await;
        sync.abort();
        router_keeper.abort();
        stop_user_sync.cancel();
        let _ = user_sync.await;
        Ok(served?)
    }
}
