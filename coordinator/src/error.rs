//! The coordinator's error type: every failure a handler can return, mapped to
//! the API's status and exact text body. Internal details are logged, not returned.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use shared::error as messages;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("not signed in")]
    NotSignedIn,
    #[error("forbidden")]
    Forbidden,
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    /// 413: a body over the route's limit.
    #[error("payload too large")]
    PayloadTooLarge,
    #[error("isu not found")]
    IsuNotFound,
    #[error("isu already registered")]
    DuplicatedIsu,
    /// JIA refused the activation; its status is passed through.
    #[error("jia answered {0}")]
    JiaRefused(StatusCode),
    #[error("internal error: {0}")]
    Internal(String),
    /// 503: the replicas could not commit the change now (an election is under way).
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::NotSignedIn => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden => StatusCode::FORBIDDEN,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::IsuNotFound => StatusCode::NOT_FOUND,
            ApiError::DuplicatedIsu => StatusCode::CONFLICT,
            ApiError::JiaRefused(status) => *status,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn body(&self) -> &'static str {
        match self {
            ApiError::NotSignedIn => messages::NOT_SIGNED_IN,
            ApiError::Forbidden => messages::FORBIDDEN,
            ApiError::BadRequest(message) => message,
            ApiError::PayloadTooLarge => messages::PAYLOAD_TOO_LARGE,
            ApiError::IsuNotFound => messages::NOT_FOUND_ISU,
            ApiError::DuplicatedIsu => messages::DUPLICATED_ISU,
            ApiError::JiaRefused(_) => messages::JIA_SERVICE_ERROR,
            ApiError::Internal(_) | ApiError::Unavailable(_) => messages::INTERNAL,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "internal error");
        }
        (
            self.status(),
            [(header::CONTENT_TYPE, messages::TEXT_PLAIN)],
            self.body(),
        )
            .into_response()
    }
}
