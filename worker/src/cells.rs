//! This worker's copy of the placement map, and forwarding of requests for ISUs another
//! cell owns.
//!
//! A router that has not reloaded yet, or a device that keeps the URL JIA gave it before
//! its ISU moved, sends requests here for ISUs this cell no longer owns (or never did). The
//! worker forwards them to the owner named by its copy of the map and relays the answer, so
//! nobody sees a 404 for an ISU that exists. A forwarded request carries
//! [`FORWARDED_HEADER`] and is never forwarded again (two copies of the map that disagree
//! cannot bounce a request around). Without a map (a fresh worker the coordinator has not
//! reached yet) nothing is forwarded.
//!
//! The copy is kept in `<data-dir>/placement-<cell>.json` too, so a worker restarted while
//! the coordinator is down still forwards (the cluster stays statically stable).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::{Mutex, RwLock};
use shared::placement_map::{CellId, PlacementMap};
use shared::protocol::FORWARDED_HEADER;

/// Forwarded bodies are device batches (bounded by the ingest limit) or nothing.
const FORWARD_BODY_LIMIT: usize = 4 << 20;
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// The map as this worker knows it.
pub struct Cells {
    name: String,
    map: RwLock<Option<(Arc<PlacementMap>, Option<CellId>)>>,
    file: Option<PathBuf>,
    /// Held across an update's check, save and install: two maps taken at once (a map
    /// change and a migration's `forget` both bring one) leave the file and the copy at the
    /// newer, never the file at the older.
    updating: Mutex<()>,
    client: reqwest::Client,
}

impl Cells {
    /// Loads the saved copy from `data_dir`, if any.
    pub fn new(name: &str, data_dir: Option<&std::path::Path>) -> anyhow::Result<Cells> {
        let file = data_dir.map(|dir| dir.join(format!("placement-{name}.json")));
        let cells = Cells {
            name: name.to_owned(),
            map: RwLock::new(None),
            file,
            updating: Mutex::new(()),
            client: node_http::internal_client()
                .http2_prior_knowledge()
                .pool_idle_timeout(Duration::from_secs(60))
                .build()?,
        };
        if let Some(file) = &cells.file {
            match std::fs::read(file) {
                Ok(bytes) => match serde_json::from_slice::<PlacementMap>(&bytes) {
                    Ok(map) => {
                        tracing::info!(version = map.version(), "placement map loaded from {}", file.display());
                        cells.install(map);
                    }
                    Err(error) => tracing::warn!(%error, "ignoring an unreadable {}", file.display()),
                },
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(cells)
    }

    fn install(&self, map: PlacementMap) {
        let me = map.cell_id(&self.name);
        *self.map.write() = Some((Arc::new(map), me));
    }

    /// The version of the copy (0 without one).
    pub fn version(&self) -> u64 {
        self.map.read().as_ref().map_or(0, |(map, _)| map.version())
    }

    pub fn map(&self) -> Option<Arc<PlacementMap>> {
        self.map.read().as_ref().map(|(map, _)| map.clone())
    }

    /// Takes `map` if it is newer than the copy (saved first, with a data directory);
    /// returns whether it did.
    pub fn update(&self, map: PlacementMap) -> std::io::Result<bool> {
        let _updating = self.updating.lock();
        if map.version() <= self.version() {
            return Ok(false);
        }
        if let Some(file) = &self.file {
            shared::write_atomically(file, &serde_json::to_vec(&map).map_err(std::io::Error::other)?)?;
        }
        tracing::info!(version = map.version(), "placement map updated");
        self.install(map);
        Ok(true)
    }

    /// Whether this cell owns `uuid` in `map`.
    pub fn owns_in(&self, map: &PlacementMap, uuid: &str) -> bool {
        map.cell_id(&self.name) == Some(map.owner(uuid))
    }

    /// The HTTP/2 client to other workers (forwarding, migration chunks).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The internal URL of the cell owning `uuid`, when that is another cell.
    pub fn owner_url(&self, uuid: &str) -> Option<String> {
        let guard = self.map.read();
        let (map, me) = guard.as_ref()?;
        let owner = map.owner(uuid);
        if Some(owner) == *me {
            return None;
        }
        map.cell(owner).map(|cell| cell.internal_url.clone())
    }

    /// Sends `request` (already read into parts and body) to `base` and relays the answer.
    async fn forward(&self, base: &str, request: Request) -> Response {
        let (parts, body) = request.into_parts();
        let Ok(body) = axum::body::to_bytes(body, FORWARD_BODY_LIMIT).await else {
            return (StatusCode::PAYLOAD_TOO_LARGE, shared::error::PAYLOAD_TOO_LARGE).into_response();
        };
        let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
        let mut outgoing = self
            .client
            .request(parts.method.clone(), format!("{base}{path}"))
            .header(FORWARDED_HEADER, &self.name)
            .timeout(FORWARD_TIMEOUT)
            .body(body);
        for name in [header::COOKIE, header::CONTENT_TYPE] {
            for value in parts.headers.get_all(&name) {
                outgoing = outgoing.header(&name, value);
            }
        }
        let started = std::time::Instant::now();
        let result = outgoing.send().await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(error) if error.is_timeout() => "timeout",
            Err(_) => "transport",
        };
        shared::telemetry::record_outgoing_call("owner-cell", "/api (forwarded)", outcome, started.elapsed());
        match result {
            Ok(answer) => {
                let status = answer.status();
                let content_type = answer.headers().get(header::CONTENT_TYPE).cloned();
                let bytes = answer.bytes().await.unwrap_or_else(|_| Bytes::new());
                let mut response = Response::new(Body::from(bytes));
                *response.status_mut() = status;
                if let Some(content_type) = content_type {
                    response.headers_mut().insert(header::CONTENT_TYPE, content_type);
                }
                response
            }
            Err(error) => {
                tracing::warn!(error = %shared::error_chain(&error), base, "forwarding to the owner failed");
                (StatusCode::SERVICE_UNAVAILABLE, "service unavailable").into_response()
            }
        }
    }

    /// The internal URL of the cell to send a request for `uuid` to: another cell owns it and
    /// the request was not forwarded here already.
    pub fn foreign_owner<B>(&self, uuid: Option<&str>, request: &axum::http::Request<B>) -> Option<String> {
        if request.headers().contains_key(FORWARDED_HEADER) {
            return None;
        }
        self.owner_url(uuid?)
    }

    /// Sends `request` to the owning cell at `base` and relays its answer (counted, and marked
    /// as served by the owner).
    pub async fn forward_to_owner<B>(&self, base: &str, request: axum::http::Request<B>) -> Response
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        metrics::counter!(shared::telemetry::REQUESTS_FORWARDED).increment(1);
        let mut response = self.forward(base, request.map(Body::new)).await;
        response
            .headers_mut()
            .insert("x-isu-served-by", HeaderValue::from_static("owner-cell"));
        response
    }
}

/// The UUID of a per-ISU route: `/api/condition/<uuid>` or `/api/isu/<uuid>/graph`.
pub fn uuid_of(path: &str) -> Option<&str> {
    if let Some(rest) = path.strip_prefix("/api/condition/") {
        return Some(rest);
    }
    let (uuid, tail) = path.strip_prefix("/api/isu/")?.split_once('/')?;
    (tail == "graph").then_some(uuid)
}

#[cfg(test)]
mod tests {
    use super::{uuid_of, Cells};
    use shared::placement_map::{Cell, PlacementMap};

    #[tokio::test]
    async fn maps_taken_at_once_leave_the_file_and_the_copy_at_the_newest() {
        let dir = std::env::temp_dir().join(format!("cells-update-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cells = Cells::new("a", Some(&dir)).unwrap();
        let cell = |name: &str| Cell {
            name: name.to_owned(),
            internal_url: format!("http://{name}"),
            device_url: format!("http://{name}"),
        };
        let mut map = PlacementMap::new(vec![cell("a"), cell("b")]).unwrap();
        let mut maps = Vec::new();
        for index in 0..256 {
            map.pin(&format!("{index:08x}-0000-0000-0000-000000000000"), 1).unwrap();
            maps.push(map.clone());
        }
        let newest = map.version();
        std::thread::scope(|scope| {
            for thread in 0..8 {
                let (cells, maps) = (&cells, &maps);
                // Thread t takes maps t, t + 8, …: every thread's next map is newer than
                // the copy, so their checks and saves overlap.
                scope.spawn(move || {
                    for map in maps.iter().skip(thread).step_by(8) {
                        cells
                            .update(map.clone())
                            .unwrap_or_else(|error| panic!("thread {thread}: {error}"));
                    }
                });
            }
        });
        assert_eq!(cells.version(), newest);
        let saved: PlacementMap =
            serde_json::from_slice(&std::fs::read(dir.join("placement-a.json")).unwrap()).unwrap();
        assert_eq!(saved.version(), newest, "the file holds the newest map");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn per_isu_paths_name_their_uuid() {
        assert_eq!(uuid_of("/api/condition/0b10"), Some("0b10"));
        assert_eq!(uuid_of("/api/isu/0b10/graph"), Some("0b10"));
        assert_eq!(uuid_of("/api/isu/0b10"), None);
        assert_eq!(uuid_of("/api/isu/0b10/icon"), None);
        assert_eq!(uuid_of("/internal/reset"), None);
    }
}
