//! JSON responses with the API's content type.

use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// A JSON response with the API's content type.
pub(crate) fn json_response(body: impl Into<axum::body::Body>) -> Response {
    ([(header::CONTENT_TYPE, shared::error::APPLICATION_JSON)], body.into()).into_response()
}

/// Serialises `value` as a JSON response.
pub(crate) fn json<T: serde::Serialize>(value: &T) -> Result<Response, ApiError> {
    let body = serde_json::to_vec(value).map_err(|error| ApiError::Internal(error.to_string()))?;
    Ok(json_response(body))
}
