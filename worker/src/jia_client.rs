//! The only place that talks to JIA: ISU activation.

use std::time::Duration;

use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

#[derive(Serialize)]
struct ActivateRequest<'a> {
    target_base_url: &'a str,
    isu_uuid: &'a str,
}

#[derive(Deserialize)]
struct ActivateResponse {
    character: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ActivateError {
    /// JIA answered something other than 202; the API passes this status through.
    #[error("jia refused activation with {0}")]
    Refused(StatusCode),
    #[error("jia unreachable: {0}")]
    Transport(#[from] reqwest::Error),
    #[error("jia answered 202 with an undecodable body")]
    BadBody,
}

#[derive(Clone)]
pub struct JiaClient {
    client: reqwest::Client,
}

const ACTIVATE_TIMEOUT: Duration = Duration::from_secs(10);
/// Activation is idempotent at JIA (a repeat answers 202 with the same character), so a request
/// that never got an answer — a kept-alive connection closed under it, a refused connect — is
/// sent again this many times, after [`TRANSPORT_RETRY_DELAY`].
const TRANSPORT_RETRIES: usize = 2;
const TRANSPORT_RETRY_DELAY: Duration = Duration::from_millis(20);

impl JiaClient {
    pub fn new() -> anyhow::Result<JiaClient> {
        Ok(JiaClient {
            client: reqwest::Client::builder()
                .tcp_nodelay(true)
                .timeout(ACTIVATE_TIMEOUT)
                .build()?,
        })
    }

    /// `POST {service_url}/api/activate`; returns the ISU's character. Transport failures
    /// other than a timeout are retried (see [`TRANSPORT_RETRIES`]).
    pub async fn activate(
        &self,
        service_url: &str,
        target_base_url: &str,
        isu_uuid: &str,
    ) -> Result<String, ActivateError> {
        let mut attempt = 0;
        loop {
            match self.activate_once(service_url, target_base_url, isu_uuid).await {
                Err(ActivateError::Transport(error)) if !error.is_timeout() && attempt < TRANSPORT_RETRIES => {
                    tracing::warn!(%error, isu_uuid, "jia activation got no answer; sending it again");
                    attempt += 1;
                    tokio::time::sleep(TRANSPORT_RETRY_DELAY).await;
                }
                outcome => return outcome,
            }
        }
    }

    async fn activate_once(
        &self,
        service_url: &str,
        target_base_url: &str,
        isu_uuid: &str,
    ) -> Result<String, ActivateError> {
        let started = std::time::Instant::now();
        let result = self.activate_call(service_url, target_base_url, isu_uuid).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(ActivateError::Refused(_) | ActivateError::BadBody) => "status",
            Err(ActivateError::Transport(error)) if error.is_timeout() => "timeout",
            Err(ActivateError::Transport(_)) => "transport",
        };
        shared::telemetry::record_outgoing_call("jia", "/api/activate", outcome, started.elapsed());
        result
    }

    async fn activate_call(
        &self,
        service_url: &str,
        target_base_url: &str,
        isu_uuid: &str,
    ) -> Result<String, ActivateError> {
        let response = self
            .client
            .post(format!("{}/api/activate", service_url.trim_end_matches('/')))
            .json(&ActivateRequest {
                target_base_url,
                isu_uuid,
            })
            .send()
            .await?;
        if response.status() != StatusCode::ACCEPTED {
            return Err(ActivateError::Refused(response.status()));
        }
        let body = response.bytes().await?;
        let answer: ActivateResponse = serde_json::from_slice(&body).map_err(|_| ActivateError::BadBody)?;
        Ok(answer.character)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A JIA whose first `drops` connections are closed without an answer; later ones get 202.
    async fn flaky_jia(drops: usize) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            for served in 0.. {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut request = vec![0; 4096];
                let _ = socket.read(&mut request).await;
                if served < drops {
                    drop(socket);
                    continue;
                }
                let body = r#"{"character":"いじっぱり"}"#;
                let answer = format!(
                    "HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            }
        });
        url
    }

    #[tokio::test]
    async fn an_activation_that_got_no_answer_is_sent_again() {
        let client = JiaClient::new().unwrap();
        let url = flaky_jia(TRANSPORT_RETRIES).await;
        let character = client.activate(&url, "http://127.0.0.3:8080", "uuid").await.unwrap();
        assert_eq!(character, "いじっぱり");

        let url = flaky_jia(TRANSPORT_RETRIES + 1).await;
        let outcome = client.activate(&url, "http://127.0.0.3:8080", "uuid").await;
        assert!(matches!(outcome, Err(ActivateError::Transport(_))), "{outcome:?}");
    }
}
