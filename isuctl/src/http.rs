//! The plain HTTP GET the local cluster's health checks need (a node's `/healthz`, nginx's
//! `/`), on loopback, never through a proxy, bounded in time, over ureq's blocking agent.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// An answer: its status and body (lossy UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// GET `url` (http only) within `timeout`; `None` when nothing answers in time.
pub fn get(url: &str, timeout: Duration) -> Option<Answer> {
    get_with(url, &[], timeout)
}

/// [`get`] with extra request headers (`name`, `value`).
pub fn get_with(url: &str, headers: &[(&str, &str)], timeout: Duration) -> Option<Answer> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let request = headers
        .iter()
        .fold(agent.get(url), |request, (name, value)| request.header(*name, *value));
    let mut response = request.call().ok()?;
    let bytes = response.body_mut().read_to_vec().ok()?;
    Some(Answer {
        status: response.status().as_u16(),
        body: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// The status of GET `url`, 0 when nothing answers (as curl's `000`), with a 2 s limit.
pub fn status(url: &str) -> u16 {
    get(url, Duration::from_secs(2)).map_or(0, |answer| answer.status)
}

/// Whether something accepts connections on `host:port`.
pub fn is_listening(authority: &str) -> bool {
    address(authority).is_some_and(|address| TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok())
}

fn address(authority: &str) -> Option<SocketAddr> {
    authority.to_socket_addrs().ok()?.next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};

    /// Serves one connection with `answer` and returns the request it read.
    fn serve_once(answer: &'static [u8]) -> (String, std::thread::JoinHandle<String>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/healthz", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buffer = [0; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                let read = stream.read(&mut buffer).unwrap();
                if read == 0 {
                    break;
                }
                request.extend_from_slice(&buffer[..read]);
            }
            stream.write_all(answer).unwrap();
            String::from_utf8_lossy(&request).into_owned()
        });
        (url, server)
    }

    #[test]
    fn answers_parse_plain_and_chunked_and_headers_are_sent() {
        let (url, server) = serve_once(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        let plain = get_with(&url, &[("x-secret", "s3")], Duration::from_secs(5)).unwrap();
        assert_eq!((plain.status, plain.body.as_str()), (200, "ok"));
        let request = server.join().unwrap().to_ascii_lowercase();
        assert!(request.starts_with("get /healthz http/1.1\r\n"), "{request}");
        assert!(request.contains("x-secret: s3\r\n"), "{request}");
        let (url, server) = serve_once(
            b"HTTP/1.1 503 X\r\nTransfer-Encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        );
        let chunked = get(&url, Duration::from_secs(5)).unwrap();
        assert_eq!((chunked.status, chunked.body.as_str()), (503, "abcde"));
        server.join().unwrap();
        let (url, server) = serve_once(b"garbage");
        assert_eq!(get(&url, Duration::from_secs(5)), None);
        server.join().unwrap();
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
