//! The worker's start and run: binds the listeners, replays the log, builds the state,
//! then serves (main listener, device server, pusher, shaping lane, watchdog) until stopped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use metrics_exporter_prometheus::PrometheusHandle;
use shared::session::SessionKey;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::device_server::DeviceServer;
use crate::journal::Journal;
use crate::state::{AppState, Shared};
use crate::store::{Shard, Store};
use crate::{cells, handover, ingest, migration, pusher, routes};

/// A bound, not yet running worker.
pub struct Application {
    /// With `--data-dir`: this worker's hold on it, released when the process ends (after its
    /// last flush), so a replacement started beside it replays a complete log.
    data_lock: Option<nix::fcntl::Flock<std::fs::File>>,
    listener: TcpListener,
    device_server: Option<DeviceServer>,
    state: AppState,
    shaped_batches: tokio::sync::mpsc::UnboundedReceiver<ingest::ShapedBatch>,
}

impl Application {
    /// Binds the listeners (port 0 allowed), replays the log (with `--data-dir`) and builds
    /// the state.
    ///
    /// With `--data-dir` the listeners are bound with `SO_REUSEPORT` *before* the data
    /// directory is locked and replayed: a worker started with `--replace` beside a running
    /// one of the same cell (a replacement in place, `scripts/cluster replace`) binds the same
    /// addresses, waits for the old one to finish and exit, replays its complete log and
    /// serves; connections that reach it meanwhile wait in its accept queue instead of being
    /// refused. Without `--replace` an address in use is refused as before.
    pub async fn build(config: Config, metrics: PrometheusHandle) -> anyhow::Result<Application> {
        let store = Store::new(Shard::new(0));
        let sharing = handover::Sharing::of(&config);
        let listener = handover::bind(config.listen, sharing).with_context(|| format!("binding {}", config.listen))?;
        let device_server = match config.device_listen {
            Some(address) => {
                let tls = config.device_tls_cert.as_deref().zip(config.device_tls_key.as_deref());
                Some(DeviceServer::bind(address, tls, sharing).await?)
            }
            None => None,
        };
        // A replacement reads the log as far as it is written before it waits for the lock,
        // so only what the old process appends meanwhile is read in the gap.
        let ahead = match (&config.data_dir, config.replace) {
            (Some(data_dir), true) => Some(Journal::read_ahead(data_dir, &config.cell).await),
            _ => None,
        };
        let data_lock = match &config.data_dir {
            Some(data_dir) => Some(handover::lock_data_dir(data_dir, &config.cell).await?),
            None => None,
        };
        let journal = match &config.data_dir {
            Some(data_dir) => {
                let (journal, replayed) = Journal::open(
                    data_dir,
                    &config.cell,
                    config.fsync,
                    config.compact_after_mb.saturating_mul(1 << 20),
                    &store,
                    ahead,
                )
                .await?;
                tracing::info!(
                    path = %replayed.path.display(),
                    records = replayed.records,
                    records_read_ahead = replayed.records_ahead,
                    skipped = replayed.skipped,
                    poisoned = replayed.poisoned,
                    truncated_bytes = replayed.truncated_bytes,
                    conditions = replayed.conditions,
                    generation = store.shard().generation,
                    millis = replayed.millis as u64,
                    fsync = %config.fsync,
                    "log replayed"
                );
                journal
            }
            None => Journal::disabled(),
        };
        let cells = Arc::new(cells::Cells::new(&config.cell, config.data_dir.as_deref())?);
        let exports = Arc::new(migration::Exports::new(cells.client().clone(), &config.cluster_secret));
        let (ingest, shaped_batches) = ingest::Ingest::new(config.ingest());
        let state = Arc::new(Shared {
            store,
            journal,
            cells,
            exports,
            ingest,
            session_key: SessionKey::from_secret(&config.cluster_secret),
            config: Arc::new(config),
            metrics,
            fence: Default::default(),
            jia: crate::jia_client::JiaClient::new()?,
        });
        Ok(Application {
            data_lock,
            listener,
            device_server,
            state,
            shaped_batches,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener has an address")
    }

    /// The device server's address and whether it speaks TLS (with `--device-listen`).
    pub fn device_addr(&self) -> Option<(SocketAddr, bool)> {
        self.device_server
            .as_ref()
            .map(|server| (server.local_addr(), server.is_tls()))
    }

    /// Serves until `shutdown` resolves; the pusher flushes once more before returning.
    pub async fn run_until_stopped(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        // Two stops: the servers stop taking requests first (and drain); the pusher stops
        // last, so the latest conditions of posts taken while draining still reach the
        // coordinator in its final flush.
        let data_lock = self.data_lock;
        let stop_servers = CancellationToken::new();
        let stop_pusher = CancellationToken::new();
        let pusher = pusher::Pusher::new(
            self.state.store.clone(),
            &self.state.config.coordinator_url,
            &self.state.config.cluster_secret,
            Duration::from_millis(self.state.config.push_interval_ms.max(1)),
        )?;
        let pusher_task = tokio::spawn(pusher.run(stop_pusher.clone()));
        tokio::spawn(routes::ask_jia_again(self.state.clone()));
        let self_ingest = self.state.ingest.clone();
        let journal = self.state.journal.clone();
        let watchdog = tokio::spawn(ingest::run_watchdog(self.state.ingest.clone()));
        let state = self.state.clone();
        let shaping = tokio::spawn(ingest::run_shaping_lane(
            self.state.ingest.clone(),
            self.shaped_batches,
            move |batch| {
                let state = state.clone();
                async move { state.write_path().store_shaped(batch).await }
            },
        ));
        // A stop takes the sockets out of listening first (a replacement bound beside this
        // worker gets every new connection from then on), then lingers with answers saying
        // `Connection: close`, then the servers stop (see `handover`).
        let mut listening = handover::ListeningSockets::default();
        listening.add(&self.listener)?;
        if let Some(server) = &self.device_server {
            server.add_to(&mut listening)?;
        }
        let lingering = CancellationToken::new();
        let linger = Duration::from_millis(self.state.config.shutdown_linger_ms);
        let close_connections = axum::middleware::from_fn_with_state(lingering.clone(), handover::close_when_lingering);
        let device_task = self.device_server.map(|server| {
            let service = routes::DeviceService::new(self.state.clone(), lingering.clone());
            tokio::spawn(server.run(service, self.state.config.device_read_timeout(), stop_servers.clone()))
        });
        let router = routes::router(self.state).layer(close_connections);
        let stop = stop_servers.clone();
        let listener = handover::StoppableListener {
            inner: self.listener,
            stopped: lingering.clone(),
        };
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                shutdown.await;
                // The main listener stops accepting before its socket stops listening: this
                // runs on a task of its own (axum spawns it), and an accept in between would
                // meet the stopped socket's error.
                lingering.cancel();
                listening.stop();
                tokio::time::sleep(linger).await;
                stop.cancel();
            })
            .await;
        stop_servers.cancel();
        let device_served = match device_task {
            Some(device_task) => device_task.await.map_err(anyhow::Error::from).and_then(|served| served),
            None => Ok(()),
        };
        // Every request is answered, so every change is in the log; once its writer has
        // finished (a compaction it started renames a snapshot over the file: after the
        // replacement opened it, that would orphan the replacement's appends), a replacement
        // may read the rest of it. What follows writes nothing to it: shaped batches are
        // logged already, the pusher talks only to the coordinator.
        if let Err(error) = journal.close().await {
            tracing::error!(%error, "closing the log failed");
        }
        drop(data_lock);
        // Shaped batches are acknowledged (and logged): stored before the process ends.
        let draining = Instant::now();
        while self_ingest.shaping_depth() > 0 && draining.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        watchdog.abort();
        shaping.abort();
        stop_pusher.cancel();
        let _ = pusher_task.await;
        served?;
        device_served?;
        Ok(())
    }
}
