//! A response read completely, and the assertions tests make on it (status, exact
//! `text/plain` error bodies, JSON bodies, empty bodies).

use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::Value;

/// A response, read completely.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: String,
    pub set_cookies: Vec<String>,
    /// `x-isu-served-by`: set when a worker forwarded the request to the owner cell (a stale
    /// route).
    pub served_by: Option<String>,
    pub body: Bytes,
    /// `METHOD url`, for assertion messages.
    pub request: String,
}

impl Reply {
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap_or("<binary body>")
    }

    /// Asserts a `text/plain` error with this status and this exact body.
    #[track_caller]
    pub fn assert_error(&self, status: u16, message: &str) {
        assert_eq!(
            (self.status.as_u16(), self.text()),
            (status, message),
            "{}: unexpected status or body",
            self.request
        );
        assert!(
            self.content_type.starts_with("text/plain"),
            "{}: Content-Type {:?}, expected text/plain",
            self.request,
            self.content_type
        );
    }

    /// Asserts the status and an `application/json` body, and parses it.
    #[track_caller]
    pub fn json(&self, status: u16) -> Value {
        assert_eq!(
            self.status.as_u16(),
            status,
            "{}: unexpected status, body {:?}",
            self.request,
            self.text()
        );
        assert!(
            self.content_type.starts_with("application/json"),
            "{}: Content-Type {:?}, expected application/json",
            self.request,
            self.content_type
        );
        serde_json::from_slice(&self.body).unwrap_or_else(|error| panic!("{}: invalid JSON: {error}", self.request))
    }

    /// Asserts the status and an empty body.
    #[track_caller]
    pub fn assert_empty(&self, status: u16) {
        assert_eq!(
            (self.status.as_u16(), self.text()),
            (status, ""),
            "{}: unexpected status or non-empty body",
            self.request
        );
    }
}

/// Reads `response` whole into a [`Reply`]; `request` names it in assertion messages.
pub(crate) async fn read_reply(request: String, response: reqwest::Response) -> Reply {
    let status = response.status();
    let header = |name: &str| -> Vec<String> {
        response
            .headers()
            .get_all(name)
            .iter()
            .map(|value| value.to_str().unwrap_or_default().to_owned())
            .collect()
    };
    let content_type = header("content-type").into_iter().next().unwrap_or_default();
    let set_cookies = header("set-cookie");
    let served_by = header("x-isu-served-by").into_iter().next();
    let body = response
        .bytes()
        .await
        .unwrap_or_else(|error| panic!("{request}: reading the body: {error}"));
    Reply {
        status,
        content_type,
        set_cookies,
        served_by,
        body,
        request,
    }
}
