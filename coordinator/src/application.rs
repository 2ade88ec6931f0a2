//! The coordinator as a server: [`Application::build`] opens the dataset, loads the keys, binds the
//! listener and starts this coordinator's replica of its group (restoring its state from the
//! data directory, if any); [`Application::run_until_stopped`] serves and runs the replica's
//! duties.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use jsonwebtoken::DecodingKey;
use metrics_exporter_prometheus::PrometheusHandle;
use shared::session::SessionKey;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::old_journal;
use crate::routes;
use crate::state::{self, Start, State};
use crate::worker_client::WorkerClient;
use crate::{AppState, Shared};

/// The project's own JWT verification key (tests and the bench sign with its private half).
const PROJECT_JWT_PUBLIC_KEY: &[u8] = include_bytes!("../../keys/jwt-public.pem");

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
        let seed = tokio::task::spawn_blocking(move || state::seed::Seed::open(&source))
            .await?
            .context("loading the dataset")?;
        // A journal of an earlier build is converted once (see `old_journal`).
        let converting = match &config.data_dir {
            Some(data_dir) => old_journal::read(data_dir)?,
            None => None,
        };
        let (logged_map, migrations) = match &converting {
            Some(snapshot) => (snapshot.placement.clone(), snapshot.migrations.clone()),
            None => (None, Vec::new()),
        };
        let router = config.router_map.clone().map(|path| state::placement::RouterFile {
            path,
            url: config.router_url.clone(),
        });
        let placement = state::Placement::new(&config.cells(), logged_map, migrations, router, &config.cluster_secret)?;
        // Cell ids are positions in the map, so the client follows the map's order (and
        // every map applied later).
        let workers = WorkerClient::new(placement.map().cells(), &config.cluster_secret)?;
        let mut state = State::new(
            seed,
            Bytes::from(default_icon),
            SessionKey::from_secret(&config.cluster_secret),
            workers,
            placement,
            match converting {
                Some(snapshot) => Start::Converted(snapshot),
                None => Start::Fresh {
                    jia_service_url: config.jia_service_url.clone(),
                },
            },
        );
        state.migration_grace = std::time::Duration::from_millis(config.migration_grace_ms);
        if let Some(data_dir) = &config.data_dir {
            state.icons = Some(Arc::new(
                crate::icons::IconStore::open(&data_dir.join("icons"), &config.cluster_secret)
                    .context("opening the icon store")?,
            ));
        }
        let listener = TcpListener::bind(config.listen).await?;
        let state = Arc::new(state);
        // Every coordinator is a replica of a group: of the listed replicas, or of one.
        let (id, members) = match config.replica_id {
            Some(id) => (id, config.replicas.iter().cloned().collect()),
            None => (
                1,
                std::collections::BTreeMap::from([(1, own_url(listener.local_addr()?))]),
            ),
        };
        let options = consensus::ReplicaOptions {
            id,
            members,
            data_dir: config.data_dir.clone(),
            fsync: config.fsync,
            secret: config.cluster_secret.clone(),
            snapshot_every: config.raft_snapshot_every,
            heartbeat_ms: config.raft_heartbeat_ms,
        };
        let applier = Arc::new(state::apply::StateApplier::new(&state));
        // Restores the data directory's snapshot and applies the committed log after it,
        // building the generation it ends with once, at the end (`Applier::replayed`, before
        // the replica takes part in its group: one whose raft ran while it built for seconds,
        // its state machine blocked and raft not yet served here, led meanwhile: on its saved
        // vote, or by an election it called, hearing no heartbeat).
        state.begin_replay();
        let replica = consensus::Replica::start(options, applier)
            .await
            .context("starting this coordinator's replica")?;
        // (Ended already; a no-op unless the replica was told of no replay.)
        state.end_replay();
        state.log.attach(replica.proposer());
        // A logged map that names a cell not configured any more would leave its ISUs without
        // a worker: refused, with what to do.
        state.placement.configured_map()?;
        tracing::info!(
            id,
            members = ?replica.status().members,
            established = state.is_established(),
            version = state.placement.map().version(),
            cells = ?state.placement.map().cells().iter().map(|cell| &cell.name).collect::<Vec<_>>(),
            "coordinator replica started"
        );
        Ok(Application {
            listener,
            state: Arc::new(Shared {
                state,
                config: Arc::new(config),
                jwt_key: Arc::new(jwt_key),
                metrics,
                replica: Arc::new(replica),
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
        // The replica leads or follows; its duties follow its role (see `state::replica`).
        let app = &self.state;
        let lead = tokio::spawn(app.state.clone().lead());
        let watchdog = tokio::spawn(app.state.clone().watch_for_stalls());
        let sweep = tokio::spawn(app.state.clone().sweep_icons(
            std::time::Duration::from_secs(app.config.icon_sweep_every_secs),
            std::time::Duration::from_secs(app.config.icon_grace_secs),
        ));
        let retire = app.config.data_dir.clone().map(|data_dir| {
            let state = app.state.clone();
            tokio::spawn(async move { old_journal::retire_once_committed(&state, &data_dir).await })
        });
        let replica = app.replica.clone();
        let router = routes::all::router(self.state)?;
        let served = axum::serve(self.listener, router)
            .with_graceful_shutdown(shutdown)
            .await;
        lead.abort();
        watchdog.abort();
        sweep.abort();
        if let Some(retire) = retire {
            retire.abort();
        }
        replica.shutdown().await;
        Ok(served?)
    }
}

/// This coordinator's base URL as the members of a group of one know it (its own listener;
/// on every address, the loopback one).
fn own_url(listening: SocketAddr) -> String {
    let host = match listening.ip() {
        ip if ip.is_unspecified() => match ip {
            std::net::IpAddr::V4(_) => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            std::net::IpAddr::V6(_) => std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        },
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(host, listening.port()))
}
