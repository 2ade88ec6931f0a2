//! The worker's error type: every failure a handler can return, mapped to the
//! API's status and exact text body. Internal details are logged, not returned.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use shared::error as messages;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("not signed in")]
    NotSignedIn,
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    /// 413: a body or batch over its limit.
    #[error("payload too large: {0}")]
    PayloadTooLarge(&'static str),
    #[error("isu not found")]
    IsuNotFound,
    #[error("conflict: {0}")]
    Conflict(&'static str),
    #[error("stale generation")]
    StaleGeneration,
    /// 503: another node this request needs (a migration's target) did not answer, or the
    /// batch's ingest lanes are full; `Retry-After: 1`.
    #[error("unavailable")]
    Unavailable,
    /// 429: the ISU is over its quota and the shaping lane is full; `Retry-After: 1`.
    #[error("too many requests")]
    TooManyRequests,
    /// 408: a device post's body did not arrive in time; `Connection: close`.
    #[error("request timeout")]
    RequestTimeout,
    /// 502: JIA, asked for an activation, did not answer (or answered 202 undecodably).
    #[error("jia did not answer: {0}")]
    Upstream(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl WorkerError {
    fn status(&self) -> StatusCode {
        match self {
            WorkerError::NotSignedIn => StatusCode::UNAUTHORIZED,
            WorkerError::BadRequest(_) => StatusCode::BAD_REQUEST,
            WorkerError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            WorkerError::IsuNotFound => StatusCode::NOT_FOUND,
            WorkerError::Conflict(_) => StatusCode::CONFLICT,
            // Distinct from 409, which means "UUID already on this worker".
            WorkerError::StaleGeneration => StatusCode::PRECONDITION_FAILED,
            WorkerError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            WorkerError::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            WorkerError::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            WorkerError::Upstream(_) => StatusCode::BAD_GATEWAY,
            WorkerError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn body(&self) -> &'static str {
        match self {
            WorkerError::NotSignedIn => messages::NOT_SIGNED_IN,
            WorkerError::BadRequest(message)
            | WorkerError::Conflict(message)
            | WorkerError::PayloadTooLarge(message) => message,
            WorkerError::IsuNotFound => messages::NOT_FOUND_ISU,
            WorkerError::StaleGeneration => "stale generation",
            WorkerError::Unavailable => "service unavailable",
            WorkerError::TooManyRequests => "too many requests",
            WorkerError::RequestTimeout => "request body timed out",
            WorkerError::Upstream(_) => "jia did not answer",
            WorkerError::Internal(_) => messages::INTERNAL,
        }
    }
}

impl From<crate::store::StaleGeneration> for WorkerError {
    fn from(_: crate::store::StaleGeneration) -> WorkerError {
        WorkerError::StaleGeneration
    }
}

/// A device batch refused by `shared::ingest`'s decoding or validation.
impl From<shared::ingest::BatchError> for WorkerError {
    fn from(error: shared::ingest::BatchError) -> WorkerError {
        use shared::ingest::BatchError;
        match error {
            BatchError::TooManyConditions => WorkerError::PayloadTooLarge(messages::TOO_MANY_CONDITIONS),
            BatchError::Undecodable | BatchError::Empty | BatchError::InvalidCondition | BatchError::MessageTooLong => {
                WorkerError::BadRequest(messages::BAD_REQUEST_BODY)
            }
        }
    }
}

impl From<shared::wal::WalError> for WorkerError {
    fn from(error: shared::wal::WalError) -> WorkerError {
        WorkerError::Internal(error.to_string())
    }
}

impl IntoResponse for WorkerError {
    fn into_response(self) -> Response {
        if let WorkerError::Internal(detail) = &self {
            tracing::error!(%detail, "internal error");
        }
        let mut response = (
            self.status(),
            [(header::CONTENT_TYPE, messages::TEXT_PLAIN)],
            self.body(),
        )
            .into_response();
        if matches!(self, WorkerError::Unavailable | WorkerError::TooManyRequests) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        if matches!(self, WorkerError::RequestTimeout) {
            response
                .headers_mut()
                .insert(header::CONNECTION, header::HeaderValue::from_static("close"));
        }
        response
    }
}
