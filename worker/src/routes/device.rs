//! The device server's service: `POST /api/condition/:uuid` and nothing else (any other
//! path 404, another method 405 with `Allow: POST`), straight on hyper's request rather than
//! through axum's router and middleware stack (and its body is not boxed unless the post is
//! forwarded).
//!
//! A device post is the cluster's hot path (every ISU posts every 40 ms). Through a router
//! with three `from_fn` layers each request cloned a boxed service and boxed a future per
//! layer, and copied the handler's state machine into a box: about a tenth of a worker's CPU
//! under device load (perf at 700 ISUs). Here one future is boxed per request and the
//! layers' work is done inline, in the same order: the request metrics, the forward to the
//! owning cell (a device keeps the URL JIA was given when its ISU moves), `Connection: close`
//! while the worker hands over. The post itself is the same code as the main listener's
//! route ([`super::condition::store_body`], then [`crate::write_path`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::http::{header, HeaderValue, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use shared::error as messages;
use shared::ingest::CONDITION_BODY_LIMIT;
use tokio_util::sync::CancellationToken;

use super::condition::{store_body, CONDITION_ROUTE};
use crate::error::WorkerError;
use crate::state::AppState;

/// What the device server serves (cloned per connection; cheap: two reference counts).
#[derive(Clone)]
pub struct DeviceService {
    state: AppState,
    /// Cancelled while the worker hands over: answers then say `Connection: close`.
    lingering: CancellationToken,
}

impl DeviceService {
    pub fn new(state: AppState, lingering: CancellationToken) -> DeviceService {
        DeviceService { state, lingering }
    }
}

impl<B> tower::Service<Request<B>> for DeviceService
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (state, lingering) = (self.state.clone(), self.lingering.clone());
        Box::pin(async move { Ok(serve(state, lingering, request).await) })
    }
}

async fn serve<B>(state: AppState, lingering: CancellationToken, request: Request<B>) -> Response
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let version = request.version();
    let path = request.uri().path();
    let raw = path
        .strip_prefix("/api/condition/")
        .filter(|raw| !raw.is_empty() && !raw.contains('/'));
    let mut response = match raw {
        None => (StatusCode::NOT_FOUND, "not found").into_response(),
        Some(_) if request.method() != Method::POST => {
            let mut response = StatusCode::METHOD_NOT_ALLOWED.into_response();
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST"));
            response
        }
        Some(raw) => {
            let started = Instant::now();
            // Both from the path as sent, before the request moves: the owner by the raw
            // segment (as the main listener's forwarding middleware finds it), the ISU as
            // axum's path extractor gives it (percent-decoded).
            let owner = state.cells.foreign_owner(Some(raw), &request);
            let uuid = percent_encoding::percent_decode_str(raw)
                .decode_utf8()
                .map(|uuid| uuid.into_owned());
            let response = match (owner, uuid) {
                (Some(base), _) => state.cells.forward_to_owner(&base, request).await,
                (None, Ok(uuid)) => post(&state, uuid, request.into_body()).await,
                (None, Err(_)) => WorkerError::BadRequest(messages::BAD_REQUEST_BODY).into_response(),
            };
            shared::telemetry::record_request(CONDITION_ROUTE, response.status().as_u16(), started.elapsed());
            response
        }
    };
    crate::handover::close_if_lingering(&lingering, version, &mut response);
    response
}

/// One device post for `uuid` (owned here): its body read within the limit, then stored.
async fn post<B>(state: &AppState, uuid: String, body: B) -> Response
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: Into<axum::BoxError>,
{
    if let Err(refused) = state.write_path().refuse_shaped_early(&uuid) {
        return refused.into_response();
    }
    // The head's wait is hyper's (`crate::device_server`); the body's is bounded here.
    let collected = tokio::time::timeout(
        state.config.device_read_timeout(),
        Limited::new(body, CONDITION_BODY_LIMIT).collect(),
    );
    let body = match collected.await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.is::<LengthLimitError>() => {
            return WorkerError::PayloadTooLarge(messages::PAYLOAD_TOO_LARGE).into_response();
        }
        Ok(Err(_)) => return WorkerError::BadRequest(messages::BAD_REQUEST_BODY).into_response(),
        Err(_) => return WorkerError::RequestTimeout.into_response(),
    };
    store_body(state, uuid, &body).await.into_response()
}
