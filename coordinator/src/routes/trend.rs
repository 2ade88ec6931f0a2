//! `GET /api/trend`: public, answered from the trend cached by the current generation.

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::json::json_response;
use crate::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/trend", get(trend))
}

/// Sends the pre-compressed body when the client accepts gzip (the official bench does).
async fn trend(State(app): State<AppState>, headers: HeaderMap) -> Response {
    let trend = app.state.generation().trend();
    let accepts_gzip = headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.split(',').any(accepts_gzip_coding));
    match trend.gzip {
        Some(gzip) if accepts_gzip => (
            [
                (header::CONTENT_TYPE, shared::error::APPLICATION_JSON),
                (header::CONTENT_ENCODING, "gzip"),
                (header::VARY, "Accept-Encoding"),
            ],
            gzip,
        )
            .into_response(),
        _ => json_response(trend.json),
    }
}

/// `gzip` or `gzip;q=…` with a non-zero quality.
fn accepts_gzip_coding(coding: &str) -> bool {
    let mut parts = coding.split(';').map(str::trim);
    if parts.next() != Some("gzip") {
        return false;
    }
    parts.all(|parameter| match parameter.strip_prefix("q=") {
        Some(quality) => quality.parse::<f32>().is_ok_and(|quality| quality > 0.0),
        None => true,
    })
}

#[cfg(test)]
mod tests {
    use super::accepts_gzip_coding;

    #[test]
    fn gzip_codings() {
        assert!(accepts_gzip_coding("gzip"));
        assert!(accepts_gzip_coding(" gzip;q=0.5"));
        assert!(!accepts_gzip_coding("gzip;q=0"));
        assert!(!accepts_gzip_coding("br"));
        assert!(!accepts_gzip_coding("x-gzip2"));
    }
}
