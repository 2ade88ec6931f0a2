//! What the route modules share: the session extractor, query parsing and JSON answers.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::WorkerError;
use crate::state::AppState;

/// The signed-in user of a request. A session is valid when its cookie is
/// signed with the cluster key and its user exists: either the user was
/// synced here, or the session was created in the current generation (so the
/// user cannot have been erased by a reset since).
pub struct SignedIn(pub String);

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = WorkerError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let session = node_http::session_of(&state.session_key, &parts.headers).ok_or(WorkerError::NotSignedIn)?;
        let shard = state.store.shard();
        if session.generation == shard.generation || shard.has_user(&session.user) {
            Ok(SignedIn(session.user))
        } else {
            Err(WorkerError::NotSignedIn)
        }
    }
}

/// First value of `name` in a raw query string, percent-decoded.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

pub(crate) use node_http::json_response;
