//! `POST /initialize`, `POST /api/auth`, `POST /api/signout`, `GET /api/user/me`.

use std::collections::HashSet;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use jsonwebtoken::{Algorithm, Validation};
use serde::{Deserialize, Serialize};
use shared::error as messages;

use super::json::json;
use super::session::SignedIn;
use crate::error::ApiError;
use crate::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/auth", post(sign_in))
        .route("/api/signout", post(sign_out))
        .route("/api/user/me", get(me))
}

/// `POST /initialize` apart: a group's leader alone runs it.
pub fn initialize_router() -> Router<AppState> {
    Router::new().route("/initialize", post(initialize))
}

#[derive(Deserialize)]
struct InitializeRequest {
    #[serde(default)]
    jia_service_url: String,
}

#[derive(Serialize)]
struct InitializeResponse {
    language: &'static str,
}

/// Resets every node to the dataset. An empty body means `jia_service_url = ""`, as in the reference.
async fn initialize(State(app): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        InitializeRequest {
            jia_service_url: String::new(),
        }
    } else {
        serde_json::from_slice::<InitializeRequest>(&body)
            .map_err(|_| ApiError::BadRequest(messages::BAD_REQUEST_BODY))?
    };
    app.state.initialize(request.jia_service_url).await?;
    json(&InitializeResponse { language: "rust" })
}

/// Verifies JIA's ES256 JWT (with or without a `Bearer ` prefix) and starts a session.
async fn sign_in(State(app): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .ok_or(ApiError::Forbidden)?;
    let token = authorization.strip_prefix("Bearer ").unwrap_or(authorization);
    let user = verify_jwt(token, &app.jwt_key)?;
    let cookie = app.state.sign_in(&user).await?;
    Ok((StatusCode::OK, [(header::SET_COOKIE, cookie)]).into_response())
}

/// ES256 only. Time claims are checked here, as Go's verifier does (no leeway): an
/// expired `exp` or a future `nbf` or `iat` is refused; a token without them is accepted.
/// A time claim that is not a number is refused (the library would skip it, so a
/// token whose `exp` is a string or a fraction would never expire).
fn verify_jwt(token: &str, key: &jsonwebtoken::DecodingKey) -> Result<String, ApiError> {
    let mut validation = Validation::new(Algorithm::ES256);
    validation.leeway = 0;
    validation.required_spec_claims = HashSet::new();
    validation.validate_nbf = true;
    validation.validate_aud = false;
    let claims = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(token, key, &validation)
        .map_err(|_| ApiError::Forbidden)?
        .claims;
    let time_claim = |name: &str| match claims.get(name) {
        None => Ok(None),
        Some(value) => value
            .as_f64()
            .filter(|seconds| seconds.is_finite())
            .map(Some)
            .ok_or(ApiError::Forbidden),
    };
    let now = jsonwebtoken::get_current_timestamp() as f64;
    if time_claim("exp")?.is_some_and(|expires| now > expires)
        || time_claim("nbf")?.is_some_and(|not_before| now < not_before)
        || time_claim("iat")?.is_some_and(|issued| now < issued)
    {
        return Err(ApiError::Forbidden);
    }
    match claims.get("jia_user_id") {
        Some(serde_json::Value::String(user)) => Ok(user.clone()),
        _ => Err(ApiError::BadRequest(messages::INVALID_JWT_PAYLOAD)),
    }
}

async fn sign_out(_user: SignedIn) -> Response {
    (StatusCode::OK, [(header::SET_COOKIE, shared::session::clear_cookie())]).into_response()
}

#[derive(Serialize)]
struct Me {
    jia_user_id: String,
}

async fn me(user: SignedIn) -> Result<Response, ApiError> {
    json(&Me { jia_user_id: user.0 })
}
