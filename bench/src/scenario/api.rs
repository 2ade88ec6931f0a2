//! The public API as one bench agent sees it: response shapes and a counting HTTP agent.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::front_end::{Encoding, FrontEndFile};
use super::stats::{ConnectionCause, ErrorKind, Stats};
use crate::model::GraphData;

/// `POST /initialize`.
#[derive(Debug, Deserialize)]
pub struct InitializeResponse {
    pub language: String,
}

/// `GET /api/user/me`.
#[derive(Debug, Deserialize)]
pub struct Me {
    pub jia_user_id: String,
}

/// `POST /api/isu` (201) and `GET /api/isu/:uuid`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Isu {
    pub id: i64,
    pub jia_isu_uuid: String,
    pub name: String,
    pub character: String,
}

/// An element of `GET /api/isu`.
#[derive(Debug, Clone, Deserialize)]
pub struct IsuListItem {
    pub id: i64,
    pub jia_isu_uuid: String,
    pub name: String,
    pub character: String,
    pub latest_isu_condition: Option<ConditionItem>,
}

/// An element of `GET /api/condition/:uuid` (also `latest_isu_condition`).
#[derive(Debug, Clone, Deserialize)]
pub struct ConditionItem {
    pub jia_isu_uuid: String,
    pub isu_name: String,
    pub timestamp: i64,
    pub is_sitting: bool,
    pub condition: String,
    pub condition_level: String,
    pub message: String,
}

/// An element of `GET /api/isu/:uuid/graph`.
#[derive(Debug, Clone, Deserialize)]
pub struct GraphPoint {
    pub start_at: i64,
    pub end_at: i64,
    pub data: Option<GraphData>,
    pub condition_timestamps: Vec<i64>,
}

/// An element of `GET /api/trend`.
#[derive(Debug, Clone, Deserialize)]
pub struct TrendEntry {
    pub character: String,
    pub info: Vec<TrendItem>,
    pub warning: Vec<TrendItem>,
    pub critical: Vec<TrendItem>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub struct TrendItem {
    pub isu_id: i64,
    pub timestamp: i64,
}

/// A response whose status was one of those expected.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub content_type: String,
    /// Decompressed when it came gzipped.
    pub body: Bytes,
    /// How the body came over the wire: its `Content-Encoding` and length.
    pub encoding: Encoding,
    pub wire_bytes: u64,
}

/// Why a request gave no usable reply (already counted in the stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Timeout,
    Error,
}

/// One bench agent: its own cookie jar, a request timeout, and the run's counters. Every
/// request is counted; timeouts and errors are recorded and turn into `None`.
#[derive(Clone)]
pub struct Agent {
    client: reqwest::Client,
    /// Parsed once: building each request's URL from it skips re-parsing the host.
    base_url: reqwest::Url,
    stats: Arc<Stats>,
}

impl Agent {
    pub fn new(base_url: &str, timeout: Duration, stats: Arc<Stats>) -> anyhow::Result<Agent> {
        // Like a browser or Go's client (the official bench), every request accepts gzip; the
        // service compresses what is worth it (the trend, static files).
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        let client = jia_sim::http::client_builder()
            .cookie_store(true)
            .default_headers(headers)
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()?;
        Ok(Agent {
            client,
            base_url: reqwest::Url::parse(base_url.trim_end_matches('/'))?,
            stats,
        })
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Counts `reply` as a front-end `file` received (the report's front-end traffic).
    pub fn count_front_end(&self, file: FrontEndFile, reply: &Reply) {
        self.stats.front_end(file, reply.encoding, reply.wire_bytes);
    }

    /// A request to `path` (absolute path of the public API).
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let mut url = self.base_url.clone();
        let (path, query) = path
            .split_once('?')
            .map_or((path, None), |(path, query)| (path, Some(query)));
        url.set_path(path);
        url.set_query(query);
        self.client.request(method, url)
    }

    /// Sends, and accepts only the `expected` statuses. `label` names the call in error reports.
    pub async fn send(&self, label: &str, request: RequestBuilder, expected: &[u16]) -> Result<Reply, Failure> {
        let built = request.try_clone().and_then(|copy| copy.build().ok());
        let is_get = built.as_ref().is_some_and(|built| built.method() == Method::GET);
        let sent = std::time::SystemTime::now();
        let result = self.send_checked(label, request, expected, is_get).await;
        if result.is_err() {
            let digit = built.as_ref().and_then(|built| isu_digit(built.url().path()));
            self.stats.failure_for_isu_digit(digit);
            self.stats.failure_span(label, sent, std::time::SystemTime::now());
        }
        result
    }

    async fn send_checked(
        &self,
        label: &str,
        request: RequestBuilder,
        expected: &[u16],
        is_get: bool,
    ) -> Result<Reply, Failure> {
        let started = std::time::Instant::now();
        let retry = if is_get { request.try_clone() } else { None };
        let mut response = request.send().await;
        // A GET on a kept-alive connection the server closed as the request left (nginx
        // closes idle connections when it reloads) is sent once more on a fresh one, as Go's
        // HTTP client (the official bench's) does for idempotent requests. Counted.
        let closed = matches!(&response, Err(error) if closed_before_answer(error));
        if let (true, Some(retry)) = (closed, retry) {
            self.stats.idle_close_retry();
            response = retry.send().await;
        }
        let response = match response {
            Ok(response) => response,
            Err(error) => {
                self.stats.record_request(label, started.elapsed());
                return self.transport_failure(label, &error, false);
            }
        };
        let status = response.status();
        let headers = response.headers().clone();
        let content_type = headers
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = response.bytes().await;
        self.stats.record_request(label, started.elapsed());
        let body = match body {
            Ok(body) => body,
            Err(error) => return self.transport_failure(label, &error, true),
        };
        let encoding = Encoding::of(headers.get(CONTENT_ENCODING).map(|value| value.as_bytes()));
        let wire_bytes = body.len() as u64;
        let body = if encoding == Encoding::Gzip {
            match gunzip(&body) {
                Ok(body) => body,
                Err(error) => {
                    self.stats
                        .error(ErrorKind::Json, format!("{label}: undecodable gzip body: {error}"));
                    return Err(Failure::Error);
                }
            }
        } else {
            body
        };
        if !expected.contains(&status.as_u16()) {
            let excerpt = String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned();
            self.stats.error(
                ErrorKind::Status,
                format!(
                    "{label}: status {} (expected {expected:?}), body {excerpt:?}",
                    status.as_u16()
                ),
            );
            return Err(Failure::Error);
        }
        Ok(Reply {
            status,
            headers,
            content_type,
            body,
            encoding,
            wire_bytes,
        })
    }

    /// Sends, expects `expected_status` with a JSON body, and decodes it.
    pub async fn json<T: DeserializeOwned>(
        &self,
        label: &str,
        request: RequestBuilder,
        expected_status: u16,
    ) -> Option<T> {
        let reply = self.send(label, request, &[expected_status]).await.ok()?;
        self.decode(label, &reply)
    }

    /// Checks the JSON content type of a reply and decodes its body.
    pub fn decode<T: DeserializeOwned>(&self, label: &str, reply: &Reply) -> Option<T> {
        if !reply.content_type.starts_with("application/json") {
            self.stats.error(
                ErrorKind::ContentType,
                format!(
                    "{label}: content-type {:?}, expected application/json",
                    reply.content_type
                ),
            );
            return None;
        }
        match serde_json::from_slice(&reply.body) {
            Ok(value) => Some(value),
            Err(error) => {
                self.stats
                    .error(ErrorKind::Json, format!("{label}: undecodable JSON: {error}"));
                None
            }
        }
    }

    /// Checks a `text/plain` error body byte for byte.
    pub fn expect_text(&self, label: &str, reply: &Reply, expected_body: &str) -> bool {
        if !reply.content_type.starts_with("text/plain") {
            self.stats.error(
                ErrorKind::ContentType,
                format!("{label}: content-type {:?}, expected text/plain", reply.content_type),
            );
            return false;
        }
        if reply.body != expected_body.as_bytes() {
            self.stats.data_error(format!(
                "{label}: body {:?}, expected {expected_body:?}",
                String::from_utf8_lossy(&reply.body)
            ));
            return false;
        }
        true
    }

    /// A request that got no (whole) answer: a timeout, or a connection error by its cause.
    fn transport_failure<T>(&self, label: &str, error: &reqwest::Error, reading_body: bool) -> Result<T, Failure> {
        if error.is_timeout() {
            self.stats.timeout();
            return Err(Failure::Timeout);
        }
        // The source chain says what really happened (refused, reset, ...).
        let mut description = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            description = format!("{description}: {cause}");
            source = cause.source();
        }
        let cause = ConnectionCause::of(error, error.is_connect(), reading_body);
        self.stats.connection_error(cause, format!("{label}: {description}"));
        Err(Failure::Error)
    }
}

/// The first hex digit of the ISU a public API path names (`/api/condition/<uuid>`,
/// `/api/isu/<uuid>[/...]`).
pub fn isu_digit(path: &str) -> Option<u8> {
    let rest = path
        .strip_prefix("/api/condition/")
        .or_else(|| path.strip_prefix("/api/isu/"))?;
    let first = *rest.as_bytes().first()?;
    (first as char).to_digit(16).map(|digit| digit as u8)
}

/// The server closed (or reset) the connection before any answer: what a request meets on a
/// kept-alive connection the server closed while it was on its way.
pub fn closed_before_answer(error: &reqwest::Error) -> bool {
    if error.is_timeout() || error.is_connect() {
        return false;
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if text.contains("connection closed before message completed") || text.contains("Connection reset by peer") {
            return true;
        }
        source = cause.source();
    }
    false
}

/// Decompresses a gzip body.
fn gunzip(body: &[u8]) -> std::io::Result<Bytes> {
    use std::io::Read;
    let mut out = Vec::with_capacity(body.len() * 6);
    flate2::read::GzDecoder::new(body).read_to_end(&mut out)?;
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_bodies_are_decompressed_and_broken_ones_refused() {
        use std::io::Write;
        let json = r#"[{"character":"いじっぱり","info":[],"warning":[],"critical":[]}]"#.as_bytes();
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(json).unwrap();
        let gzipped = encoder.finish().unwrap();
        assert_eq!(&gunzip(&gzipped).unwrap()[..], json);
        assert!(gunzip(&gzipped[..gzipped.len() / 2]).is_err());
        assert!(gunzip(b"not gzip").is_err());
    }

    /// Real sockets on loopback: a port nobody listens on, a server that closes the
    /// connection without answering, one that resets it, one that cuts a body short.
    #[tokio::test]
    async fn connection_errors_are_told_apart_by_cause() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let closed_port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let error = client
            .get(format!("http://127.0.0.1:{closed_port}/"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(
            ConnectionCause::of(&error, error.is_connect(), false),
            ConnectionCause::Refused
        );

        // Each server reads the request, then does its thing.
        async fn serve(behaviour: u8) -> String {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            tokio::spawn(async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut buffer = [0u8; 1024];
                let _ = stream.read(&mut buffer).await;
                match behaviour {
                    0 => drop(stream),
                    1 => {
                        // A zero linger resets at once (no blocking on drop, which the
                        // deprecation is about).
                        #[allow(deprecated)]
                        stream.set_linger(Some(Duration::ZERO)).unwrap();
                        drop(stream);
                    }
                    _ => {
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
                            .await;
                        drop(stream);
                    }
                }
            });
            format!("http://{address}/")
        }
        let error = client.get(serve(0).await).send().await.unwrap_err();
        assert_eq!(
            ConnectionCause::of(&error, error.is_connect(), false),
            ConnectionCause::ClosedBeforeAnswer,
            "{error:?}"
        );
        let error = client.get(serve(1).await).send().await.unwrap_err();
        assert_eq!(
            ConnectionCause::of(&error, error.is_connect(), false),
            ConnectionCause::Reset,
            "{error:?}"
        );
        let response = client.get(serve(2).await).send().await.unwrap();
        let error = response.bytes().await.unwrap_err();
        assert_eq!(
            ConnectionCause::of(&error, error.is_connect(), true),
            ConnectionCause::BodyCut,
            "{error:?}"
        );
    }
}

#[cfg(test)]
mod isu_digit_tests {
    use super::isu_digit;

    #[test]
    fn the_isu_of_a_path_is_found_by_its_first_hex_digit() {
        assert_eq!(isu_digit("/api/condition/3fa8-x"), Some(3));
        assert_eq!(isu_digit("/api/isu/Bc12/graph"), Some(11));
        assert_eq!(isu_digit("/api/isu/f0/icon"), Some(15));
        assert_eq!(isu_digit("/api/isu"), None);
        assert_eq!(isu_digit("/api/isu/"), None);
        assert_eq!(isu_digit("/api/trend"), None);
        assert_eq!(isu_digit("/api/condition/zz"), None);
    }
}
