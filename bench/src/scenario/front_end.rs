//! The front end's files as the simulated browsers received them: how many asset and page
//! requests, and the body bytes that came over the wire per `Content-Encoding`. Shown beside
//! nginx's CPU in the report, so that assets sent uncompressed, or compressed per request,
//! show at a glance.
//!
//! Counted from the responses the bench itself receives, not from nginx's access log: the
//! bench has these on every target (the local cluster, network-namespace hosts, a remote
//! host), the access log is off on deployed hosts and does not record the encoding.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Deserializer, Serialize};

/// A response's `Content-Encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// None (or `identity`).
    Identity,
    Gzip,
    /// Any other (`br`, `deflate`, ...).
    Other,
}

impl Encoding {
    const ALL: [Encoding; 3] = [Encoding::Identity, Encoding::Gzip, Encoding::Other];

    /// The encoding a `Content-Encoding` header value names (`None`: no header).
    pub fn of(header: Option<&[u8]>) -> Encoding {
        match header.map(|value| value.trim_ascii()) {
            None => Encoding::Identity,
            Some(value) if value.is_empty() || value.eq_ignore_ascii_case(b"identity") => Encoding::Identity,
            Some(value) if value.eq_ignore_ascii_case(b"gzip") => Encoding::Gzip,
            Some(_) => Encoding::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Encoding::Identity => "identity",
            Encoding::Gzip => "gzip",
            Encoding::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Which front-end file a request fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontEndFile {
    /// `/assets/...` (scripts, styles, images).
    Asset,
    /// A page (`/`, the single-page app's index.html).
    Page,
}

/// Requests and bytes of one kind of front-end file, counted as they arrive.
#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    /// Body bytes as received (compressed when encoded), per [`Encoding::ALL`].
    bytes: [AtomicU64; 3],
    /// Responses per encoding.
    responses: [AtomicU64; 3],
}

impl Counters {
    fn snapshot(&self) -> Transfer {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let by_encoding = Encoding::ALL
            .iter()
            .filter(|encoding| load(&self.responses[encoding.index()]) > 0)
            .map(|encoding| EncodedBytes {
                encoding: encoding.name(),
                responses: load(&self.responses[encoding.index()]),
                bytes: load(&self.bytes[encoding.index()]),
            })
            .collect();
        Transfer {
            requests: load(&self.requests),
            by_encoding,
        }
    }
}

/// The run's front-end traffic (part of [`super::stats::Stats`]).
#[derive(Default)]
pub struct FrontEndTraffic {
    assets: Counters,
    pages: Counters,
}

impl FrontEndTraffic {
    /// One response of `file`, its body `bytes` as received, in `encoding`.
    pub fn record(&self, file: FrontEndFile, encoding: Encoding, bytes: u64) {
        let counters = match file {
            FrontEndFile::Asset => &self.assets,
            FrontEndFile::Page => &self.pages,
        };
        counters.requests.fetch_add(1, Ordering::Relaxed);
        counters.responses[encoding.index()].fetch_add(1, Ordering::Relaxed);
        counters.bytes[encoding.index()].fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> FrontEnd {
        FrontEnd {
            assets: self.assets.snapshot(),
            pages: self.pages.snapshot(),
        }
    }
}

/// Responses and body bytes of one encoding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EncodedBytes {
    /// [`Encoding::name`].
    pub encoding: &'static str,
    pub responses: u64,
    pub bytes: u64,
}

/// [`EncodedBytes`] as a report read back names them.
#[derive(Deserialize)]
struct NamedEncodedBytes {
    encoding: String,
    responses: u64,
    bytes: u64,
}

/// Through [`NamedEncodedBytes`] (derived, `&'static str` would ask the text to outlive the
/// program); a name this bench does not know reads as `other`.
impl<'de> Deserialize<'de> for EncodedBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<EncodedBytes, D::Error> {
        let named = NamedEncodedBytes::deserialize(deserializer)?;
        let known = Encoding::ALL.iter().find(|encoding| encoding.name() == named.encoding);
        Ok(EncodedBytes {
            encoding: known.unwrap_or(&Encoding::Other).name(),
            responses: named.responses,
            bytes: named.bytes,
        })
    }
}

/// Requests of one kind of front-end file, and what came back per encoding (only the
/// encodings seen).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    pub requests: u64,
    pub by_encoding: Vec<EncodedBytes>,
}

impl Transfer {
    /// `gzip 162.3 MB in 652, identity 12.0 kB in 3` (or `none`).
    pub fn summary(&self) -> String {
        if self.by_encoding.is_empty() {
            return "none".to_owned();
        }
        self.by_encoding
            .iter()
            .map(|encoded| {
                format!(
                    "{} {} in {}",
                    encoded.encoding,
                    human_bytes(encoded.bytes),
                    encoded.responses
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `500 B`, `12.3 kB`, `162.3 MB`.
fn human_bytes(bytes: u64) -> String {
    match bytes {
        0..1_000 => format!("{bytes} B"),
        1_000..1_000_000 => format!("{:.1} kB", bytes as f64 / 1e3),
        _ => format!("{:.1} MB", bytes as f64 / 1e6),
    }
}

/// The front-end traffic at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontEnd {
    pub assets: Transfer,
    pub pages: Transfer,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_are_read_from_the_header() {
        assert_eq!(Encoding::of(None), Encoding::Identity);
        assert_eq!(Encoding::of(Some(b"gzip")), Encoding::Gzip);
        assert_eq!(Encoding::of(Some(b" GZIP ")), Encoding::Gzip);
        assert_eq!(Encoding::of(Some(b"identity")), Encoding::Identity);
        assert_eq!(Encoding::of(Some(b"br")), Encoding::Other);
    }

    #[test]
    fn requests_and_bytes_are_counted_per_file_and_encoding() {
        let traffic = FrontEndTraffic::default();
        traffic.record(FrontEndFile::Asset, Encoding::Gzip, 249_000);
        traffic.record(FrontEndFile::Asset, Encoding::Gzip, 1_000);
        traffic.record(FrontEndFile::Asset, Encoding::Identity, 500);
        traffic.record(FrontEndFile::Page, Encoding::Identity, 528);
        let snapshot = traffic.snapshot();
        assert_eq!(snapshot.assets.requests, 3);
        assert_eq!(
            snapshot.assets.by_encoding,
            vec![
                EncodedBytes {
                    encoding: "identity",
                    responses: 1,
                    bytes: 500
                },
                EncodedBytes {
                    encoding: "gzip",
                    responses: 2,
                    bytes: 250_000
                },
            ]
        );
        assert_eq!(snapshot.assets.summary(), "identity 500 B in 1, gzip 250.0 kB in 2");
        assert_eq!(snapshot.pages.requests, 1);
        assert_eq!(FrontEndTraffic::default().snapshot().pages.summary(), "none");
        assert_eq!(human_bytes(162_300_000), "162.3 MB");
    }
}
