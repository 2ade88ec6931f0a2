//! The device server: where JIA's devices post (`POST /api/condition/:uuid`), on an address of
//! its own (the one devices are given at activation), optionally over TLS (rustls; HTTP/2 and
//! HTTP/1.1 by ALPN, keep-alive). Devices then reach their worker without a proxy in between:
//! nginx's device server cost about as much CPU per post as the worker storing it (capacity
//! runs at 400 ISUs: 33 µs against the workers' 39). Only device posts are
//! served there; reads, internal, metrics and profiling routes stay on `--listen`.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use axum_server::tls_rustls::RustlsConfig;
use tokio_util::sync::CancellationToken;

/// How long open device connections get to finish their requests at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How often an HTTP/2 device connection is pinged, and how long an answer may take.
const HTTP2_PING: Duration = Duration::from_secs(20);

/// A bound, not yet serving device server.
pub struct DeviceServer {
    listener: std::net::TcpListener,
    tls: Option<RustlsConfig>,
}

impl DeviceServer {
    /// Binds `address` (port 0 allowed) and, with a certificate and key, loads them now, so a
    /// bad path or PEM stops the worker at start with a clear message.
    /// `sharing`: see `Application::build` (`app.rs`; a replacement binds beside this one).
    pub(crate) async fn bind(
        address: SocketAddr,
        tls: Option<(&Path, &Path)>,
        sharing: crate::handover::Sharing,
    ) -> anyhow::Result<DeviceServer> {
        let tls = match tls {
            Some((cert, key)) => Some(RustlsConfig::from_pem_file(cert, key).await.with_context(|| {
                format!(
                    "loading the device server's certificate {} and key {}",
                    cert.display(),
                    key.display()
                )
            })?),
            None => None,
        };
        let listener = crate::handover::bind(address, sharing)
            .and_then(|listener| listener.into_std())
            .with_context(|| format!("binding the device server to {address}"))?;
        Ok(DeviceServer { listener, tls })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener has an address")
    }

    /// Lets `listening` stop this server's socket at a stop (see [`crate::handover`]).
    pub(crate) fn add_to(&self, listening: &mut crate::handover::ListeningSockets) -> std::io::Result<()> {
        listening.add(&self.listener)
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Serves `service` until `stop` fires, then lets open requests finish (bounded).
    /// `read_timeout`: see `--device-read-timeout-ms` (the body's share is the service's).
    pub async fn run(
        self,
        service: crate::routes::DeviceService,
        read_timeout: Duration,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        let handle = axum_server::Handle::new();
        let shutdown = handle.clone();
        tokio::spawn(async move {
            stop.cancelled().await;
            shutdown.graceful_shutdown(Some(SHUTDOWN_GRACE));
        });
        let service = tower::make::Shared::new(service);
        match self.tls {
            Some(config) => {
                bounded(axum_server::from_tcp_rustls(self.listener, config)?, read_timeout)
                    .handle(handle)
                    .serve(service)
                    .await?
            }
            None => {
                bounded(axum_server::from_tcp(self.listener)?, read_timeout)
                    .handle(handle)
                    .serve(service)
                    .await?
            }
        }
        Ok(())
    }
}

/// Devices reach this server from outside: a connection that sends no (complete) request
/// head within `read_timeout` is closed, also between requests, and HTTP/2 connections are
/// pinged. (axum_server turns hyper's header timeout off by default.)
fn bounded<A: axum_server::Address, Acc>(
    mut server: axum_server::Server<A, Acc>,
    read_timeout: Duration,
) -> axum_server::Server<A, Acc> {
    let builder = server.http_builder();
    builder.http1().header_read_timeout(read_timeout);
    builder
        .http2()
        .keep_alive_interval(HTTP2_PING)
        .keep_alive_timeout(HTTP2_PING);
    server.first_request_timeout(read_timeout)
}
