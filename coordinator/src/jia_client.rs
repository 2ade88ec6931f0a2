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

impl JiaClient {
    pub fn new() -> anyhow::Result<JiaClient> {
        Ok(JiaClient {
            client: reqwest::Client::builder()
                .tcp_nodelay(true)
                .timeout(ACTIVATE_TIMEOUT)
                .build()?,
        })
    }

    /// `POST {service_url}/api/activate`; returns the ISU's character.
    pub async fn activate(
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
