//! The signed-in user, an extractor: a valid session cookie whose user exists now.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::ApiError;
use crate::AppState;

/// The signed-in user: a valid session cookie whose user exists now.
pub struct SignedIn(pub String);

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Self::Rejection> {
        let session = node_http::session_of(&app.state.session_key, &parts.headers).ok_or(ApiError::NotSignedIn)?;
        if app.state.generation().has_user(&session.user) {
            return Ok(SignedIn(session.user));
        }
        // A replica may not have applied a sign-in that another replica just committed (a
        // client moved here when its replica died): once caught up with the leader, it knows.
        if session.generation == app.state.generation().id
            && app.state.log.catch_up().await.is_ok()
            && app.state.generation().has_user(&session.user)
        {
            return Ok(SignedIn(session.user));
        }
        Err(ApiError::NotSignedIn)
    }
}
