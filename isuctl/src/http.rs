//! The plain HTTP/1.1 GET the local cluster's health checks need (a node's `/healthz`, nginx's
//! `/`), on loopback, never through a proxy, bounded in time: no client library for it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// An answer: its status and body (lossy UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// `host:port` of an `http://` URL and its path.
fn split_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("http://")?;
    match rest.find('/') {
        Some(at) => Some((&rest[..at], &rest[at..])),
        None => Some((rest, "/")),
    }
}

fn address(authority: &str) -> Option<SocketAddr> {
    authority.to_socket_addrs().ok()?.next()
}

/// GET `url` (http only) within `timeout`; `None` when nothing answers in time.
pub fn get(url: &str, timeout: Duration) -> Option<Answer> {
    get_with(url, &[], timeout)
}

/// [`get`] with extra request headers (`name`, `value`).
pub fn get_with(url: &str, headers: &[(&str, &str)], timeout: Duration) -> Option<Answer> {
    let (authority, path) = split_url(url)?;
    let mut stream = TcpStream::connect_timeout(&address(authority)?, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\n{extra}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).ok()?;
    parse(&bytes)
}

/// The status of GET `url`, 0 when nothing answers (as curl's `000`), with a 2 s limit.
pub fn status(url: &str) -> u16 {
    get(url, Duration::from_secs(2)).map_or(0, |answer| answer.status)
}

/// Whether something accepts connections on `host:port`.
pub fn is_listening(authority: &str) -> bool {
    address(authority).is_some_and(|address| TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok())
}

fn parse(bytes: &[u8]) -> Option<Answer> {
    let head_end = bytes.windows(4).position(|window| window == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&bytes[..head_end]);
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let raw = &bytes[head_end + 4..];
    let chunked = head.lines().any(|line| {
        let lower = line.to_ascii_lowercase();
        lower.starts_with("transfer-encoding:") && lower.contains("chunked")
    });
    let body = if chunked { dechunk(raw) } else { raw.to_vec() };
    Some(Answer {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(line_end) = raw.windows(2).position(|window| window == b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[..line_end]);
        let Ok(size) = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16) else {
            break;
        };
        let start = line_end + 2;
        if size == 0 || raw.len() < start + size {
            break;
        }
        body.extend_from_slice(&raw[start..start + size]);
        raw = raw.get(start + size + 2..).unwrap_or_default();
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_plain_and_chunked() {
        let plain = parse(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").unwrap();
        assert_eq!((plain.status, plain.body.as_str()), (200, "ok"));
        let chunked =
            parse(b"HTTP/1.1 503 X\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap();
        assert_eq!((chunked.status, chunked.body.as_str()), (503, "abcde"));
        assert_eq!(parse(b"garbage"), None);
        assert_eq!(split_url("http://127.0.0.2:8080"), Some(("127.0.0.2:8080", "/")));
        assert_eq!(split_url("http://h:1/healthz"), Some(("h:1", "/healthz")));
        assert_eq!(split_url("https://h:1/"), None);
    }

    #[test]
    fn nothing_listening_is_status_zero() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        assert_eq!(status(&format!("http://{address}/")), 0);
        assert!(!is_listening(&address.to_string()));
    }
}
