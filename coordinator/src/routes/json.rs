//! JSON responses with the API's content type.

use axum::response::Response;
pub(crate) use node_http::json_response;

use crate::error::ApiError;

/// Serialises `value` as a JSON response.
pub(crate) fn json<T: serde::Serialize>(value: &T) -> Result<Response, ApiError> {
    let body = serde_json::to_vec(value).map_err(|error| ApiError::Internal(error.to_string()))?;
    Ok(json_response(body))
}
