//! Replacement in place: how a worker's listening sockets and data directory pass from a
//! running process of the cell to its replacement (`--replace`) without a gap.
//!
//! The sequence (`scripts/cluster replace`):
//! 1. the replacement binds the same addresses beside the running worker (`SO_REUSEPORT`,
//!    which every durable worker sets), reads the log as far as it is written
//!    ([`crate::journal::Journal::read_ahead`]) and then waits for the data directory's lock;
//! 2. the running worker gets SIGTERM, stops accepting and at once takes its sockets out
//!    of the kernel's listening tables ([`ListeningSockets::stop`]): from then on every new
//!    connection reaches the replacement's accept queue, where it waits;
//! 3. the running worker lingers (`--shutdown-linger-ms`, 50), answering with
//!    `Connection: close` so kept-alive clients end their connections after an answer
//!    instead of finding them closed under a request; then it finishes the open requests,
//!    closes its log writer (a compaction it started is done) and releases the lock (its
//!    pusher's last flush comes after);
//! 4. the replacement locks the directory, reads the rest of the log and serves the
//!    connections that queued meanwhile: they waited the linger, the drain and that read.
//!
//! Only the connections that completed their handshake on the old socket in the instant
//! of step 2 and were not yet accepted are reset (Linux resets an accept queue when its
//! socket stops listening, unless `net.ipv4.tcp_migrate_req` is 1, which moves them).

use std::net::SocketAddr;
use std::os::fd::AsRawFd as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::fcntl::{Flock, FlockArg};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// How a worker's listeners share their addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// Memory only: a plain listener (nothing to hand over).
    None,
    /// Durable: `SO_REUSEPORT`, so a replacement can bind beside it; an address already in
    /// use is still refused.
    Open,
    /// `--replace`: binds beside the running worker of the cell.
    Replace,
}

impl Sharing {
    pub(crate) fn of(config: &Config) -> Sharing {
        match (config.data_dir.is_some(), config.replace) {
            (false, _) => Sharing::None,
            (true, false) => Sharing::Open,
            (true, true) => Sharing::Replace,
        }
    }
}

/// A listening socket on `address`, shared as `sharing` says.
pub(crate) fn bind(address: SocketAddr, sharing: Sharing) -> std::io::Result<TcpListener> {
    if sharing == Sharing::Open && address.port() != 0 {
        // Refused if in use, as a plain listener would be: two durable workers must never
        // share an address by mistake (only `--replace` does it on purpose).
        drop(std::net::TcpListener::bind(address)?);
    }
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(sharing != Sharing::None)?;
    socket.bind(address)?;
    socket.listen(4096)
}

/// Locks `<data_dir>/<cell>.lock` for this process's lifetime, waiting (and saying so) while
/// another worker of the cell holds it.
pub(crate) async fn lock_data_dir(data_dir: &Path, cell: &str) -> anyhow::Result<Flock<std::fs::File>> {
    std::fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    let path = data_dir.join(format!("{cell}.lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => return Ok(lock),
        Err((file, nix::errno::Errno::EWOULDBLOCK)) => file,
        Err((_, errno)) => return Err(anyhow::anyhow!("locking {}: {errno}", path.display())),
    };
    tracing::info!(path = %path.display(), "another worker of this cell holds the data directory: waiting for it to finish (listeners bound, connections queue)");
    let started = Instant::now();
    let lock = tokio::task::spawn_blocking(move || Flock::lock(file, FlockArg::LockExclusive))
        .await?
        .map_err(|(_, errno)| anyhow::anyhow!("locking {}: {errno}", path.display()))?;
    tracing::info!(
        waited_ms = started.elapsed().as_millis() as u64,
        "data directory handed over"
    );
    Ok(lock)
}

/// Second handles on the worker's listening sockets (the servers own the first), to stop
/// listening at a stop while the servers go on answering their open connections.
#[derive(Default)]
pub(crate) struct ListeningSockets(Vec<std::net::TcpListener>);

impl ListeningSockets {
    /// Keeps a duplicate of `listener`'s socket.
    pub(crate) fn add(&mut self, listener: &impl std::os::fd::AsFd) -> std::io::Result<()> {
        let socket = listener.as_fd().try_clone_to_owned()?;
        self.0.push(std::net::TcpListener::from(socket));
        Ok(())
    }

    /// Takes every socket out of the kernel's listening tables at once: `shutdown(SHUT_RD)`
    /// on a listening socket ends its listening state (and its membership of the
    /// `SO_REUSEPORT` group) although the servers still hold it. New connections then go to
    /// a replacement bound beside this worker, or are refused when there is none.
    pub(crate) fn stop(&self) {
        for socket in &self.0 {
            if let Err(errno) = nix::sys::socket::shutdown(socket.as_raw_fd(), nix::sys::socket::Shutdown::Read) {
                tracing::warn!(%errno, address = ?socket.local_addr().ok(), "stopping a listener failed");
            }
        }
    }
}

/// The worker's main listener for `axum::serve`: once `stopped` fires it accepts nothing more
/// (its socket no longer listens, see [`ListeningSockets::stop`]) and does not report the
/// errors a stopped socket's `accept` returns.
pub(crate) struct StoppableListener {
    pub(crate) inner: TcpListener,
    pub(crate) stopped: CancellationToken,
}

impl axum::serve::Listener for StoppableListener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            tokio::select! {
                biased;
                _ = self.stopped.cancelled() => std::future::pending::<()>().await,
                accepted = self.inner.accept() => match accepted {
                    Ok(accepted) => return accepted,
                    // Stopped meanwhile: the socket no longer listens.
                    Err(error) if self.stopped.is_cancelled() => drop(error),
                    Err(error) => {
                        use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
                        if !matches!(error.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
                            // As axum does: an error such as EMFILE is worth a pause.
                            tracing::error!(%error, "accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                },
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// While the worker lingers before a stop, every HTTP/1 answer closes its connection, so a
/// kept-alive client never sends its next request into a connection being closed. (HTTP/2
/// has no such header; its connections get a GOAWAY at the stop.)
pub(crate) async fn close_when_lingering(
    axum::extract::State(lingering): axum::extract::State<CancellationToken>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let version = request.version();
    let mut response = next.run(request).await;
    close_if_lingering(&lingering, version, &mut response);
    response
}

/// What [`close_when_lingering`] does to an answer to a request of `version` (also the
/// device server's, which has no middleware).
pub(crate) fn close_if_lingering(
    lingering: &CancellationToken,
    version: axum::http::Version,
    response: &mut axum::response::Response,
) {
    if version <= axum::http::Version::HTTP_11 && lingering.is_cancelled() {
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
}
