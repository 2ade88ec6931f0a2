//! A lean device connection for capacity runs: one kept-alive HTTP/1.1 connection per device,
//! straight on hyper (no pool, no redirects, no cookie jar), so that the load generator spends
//! its CPU on posts rather than on client machinery. Plain `http://` only; a TLS device URL
//! uses the ordinary client.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use reqwest::Url;

pub struct LeanConnection {
    address: SocketAddr,
    host: String,
    path: String,
    user_agent: &'static str,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl LeanConnection {
    /// For `url` (plain `http://` with an IP address or a name in `resolve`); `None` otherwise.
    pub fn for_url(url: &Url, resolve: &[(String, SocketAddr)], user_agent: &'static str) -> Option<LeanConnection> {
        if url.scheme() != "http" {
            return None;
        }
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        let address = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, port),
            Err(_) => resolve
                .iter()
                .find(|(name, _)| name == host)
                .map(|(_, address)| *address)?,
        };
        let mut path = url.path().to_owned();
        if let Some(query) = url.query() {
            path.push('?');
            path.push_str(query);
        }
        Some(LeanConnection {
            address,
            host: match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_owned(),
            },
            path,
            user_agent,
            sender: None,
        })
    }

    /// Posts `body` as JSON; the status, or `None` when there was no answer within `timeout`
    /// (the connection is then dropped and a new one made for the next post).
    pub async fn post(&mut self, body: Bytes, timeout: Duration) -> Option<u16> {
        let answer = tokio::time::timeout(timeout, self.post_on_connection(body)).await;
        match answer {
            Ok(Some(status)) => Some(status),
            _ => {
                self.sender = None;
                None
            }
        }
    }

    async fn post_on_connection(&mut self, body: Bytes) -> Option<u16> {
        if self.sender.as_ref().is_none_or(|sender| sender.is_closed()) {
            self.sender = Some(self.connect().await?);
        }
        let sender = self.sender.as_mut()?;
        sender.ready().await.ok()?;
        let request = hyper::Request::post(self.path.as_str())
            .header(hyper::header::HOST, self.host.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::USER_AGENT, self.user_agent)
            .body(Full::new(body))
            .ok()?;
        let response = sender.send_request(request).await.ok()?;
        let status = response.status().as_u16();
        response.into_body().collect().await.ok()?;
        Some(status)
    }

    async fn connect(&self) -> Option<SendRequest<Full<Bytes>>> {
        let stream = tokio::net::TcpStream::connect(self.address).await.ok()?;
        stream.set_nodelay(true).ok()?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.ok()?;
        tokio::spawn(connection);
        Some(sender)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_urls_with_an_address_or_a_resolved_name_get_a_lean_connection() {
        let url = Url::parse("http://127.0.0.3:8080/api/condition/abc?x=1").unwrap();
        let lean = LeanConnection::for_url(&url, &[], "ua").unwrap();
        assert_eq!(lean.address, "127.0.0.3:8080".parse().unwrap());
        assert_eq!(
            (lean.host.as_str(), lean.path.as_str()),
            ("127.0.0.3:8080", "/api/condition/abc?x=1")
        );

        let named = Url::parse("http://isucondition-2.t.isucon.dev/api/condition/abc").unwrap();
        let resolve = [(
            "isucondition-2.t.isucon.dev".to_owned(),
            "127.0.0.3:8080".parse().unwrap(),
        )];
        let lean = LeanConnection::for_url(&named, &resolve, "ua").unwrap();
        assert_eq!(lean.address, "127.0.0.3:8080".parse().unwrap());
        assert_eq!(lean.host, "isucondition-2.t.isucon.dev");
        assert!(
            LeanConnection::for_url(&named, &[], "ua").is_none(),
            "an unresolved name"
        );

        let tls = Url::parse("https://127.0.0.3/api/condition/abc").unwrap();
        assert!(
            LeanConnection::for_url(&tls, &[], "ua").is_none(),
            "TLS takes the ordinary client"
        );
    }

    #[tokio::test]
    async fn posts_reuse_one_connection_and_a_dead_server_is_no_answer() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        let server = tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buffer = vec![0; 4096];
                    // One request per read is enough for these small posts.
                    while let Ok(read) = socket.read(&mut buffer).await {
                        if read == 0 {
                            return;
                        }
                        let answer = "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n";
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let url = Url::parse(&format!("http://{address}/api/condition/abc")).unwrap();
        let mut lean = LeanConnection::for_url(&url, &[], "ua").unwrap();
        for _ in 0..5 {
            let status = lean.post(Bytes::from_static(b"[]"), Duration::from_secs(2)).await;
            assert_eq!(status, Some(202));
        }
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one kept-alive connection"
        );
        server.abort();
        let _ = server.await;

        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}/x", closed.local_addr().unwrap())).unwrap();
        drop(closed);
        let mut lean = LeanConnection::for_url(&url, &[], "ua").unwrap();
        assert_eq!(lean.post(Bytes::new(), Duration::from_millis(500)).await, None);
    }
}
