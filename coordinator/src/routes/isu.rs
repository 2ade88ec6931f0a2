//! `GET /api/isu`, `POST /api/isu`, `GET /api/isu/:uuid`, `GET /api/isu/:uuid/icon`.

use axum::extract::multipart::{MultipartError, MultipartRejection};
use axum::extract::{DefaultBodyLimit, Multipart, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use shared::domain::ConditionView;
use shared::error as messages;

use super::json::json;
use super::session::SignedIn;
use crate::error::ApiError;
use crate::state::registration::Registration;
use crate::state::{Isu, OwnIcon};
use crate::AppState;

/// Largest registration form, in bytes (the icon is uploaded in it); the same as
/// nginx's `client_max_body_size`. A larger body is refused with 413.
const REGISTRATION_BODY_LIMIT: usize = 10 << 20;

/// Longest `jia_isu_uuid`, in characters: the reference's `CHAR(36)` column (a longer
/// one fails its insert). Shorter ones, even empty, go to JIA as in the reference.
const MAX_JIA_ISU_UUID_CHARS: usize = 36;

/// Longest `isu_name`, in characters: the reference's `VARCHAR(255)` column.
const MAX_ISU_NAME_CHARS: usize = 255;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/isu",
            get(list)
                .post(register)
                .layer(DefaultBodyLimit::max(REGISTRATION_BODY_LIMIT)),
        )
        .route("/api/isu/{uuid}", get(show))
        .route("/api/isu/{uuid}/icon", get(icon))
}

#[derive(Serialize)]
struct IsuBody<'a> {
    id: i64,
    jia_isu_uuid: &'a str,
    name: &'a str,
    character: &'a str,
}

impl<'a> From<&'a Isu> for IsuBody<'a> {
    fn from(isu: &'a Isu) -> Self {
        IsuBody {
            id: isu.id,
            jia_isu_uuid: &isu.uuid,
            name: &isu.name,
            character: &isu.character,
        }
    }
}

#[derive(Serialize)]
struct ListItem<'a> {
    #[serde(flatten)]
    isu: IsuBody<'a>,
    latest_isu_condition: Option<ConditionView<'a>>,
}

/// The user's ISUs, most recently registered first, each with its latest condition.
async fn list(user: SignedIn, State(app): State<AppState>) -> Result<Response, ApiError> {
    let isus = app.state.generation().isus_of(&user.0);
    let latest: Vec<_> = isus.iter().map(|isu| isu.latest()).collect();
    let items: Vec<ListItem<'_>> = isus
        .iter()
        .zip(&latest)
        .map(|(isu, latest)| ListItem {
            isu: IsuBody::from(&**isu),
            latest_isu_condition: latest.as_ref().map(|latest| {
                ConditionView::new(&isu.uuid, &isu.name, latest.timestamp, latest.flags, &latest.message)
            }),
        })
        .collect();
    json(&items)
}

/// Registers an ISU from a multipart form (`jia_isu_uuid`, `isu_name`, optional `image` file).
async fn register(
    user: SignedIn,
    State(app): State<AppState>,
    headers: axum::http::HeaderMap,
    form: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    // nginx's id of the request (the same on its retries and on a replica's forwards).
    let request = headers
        .get(super::leader::REQUEST_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|id| {
            (1..=64).contains(&id.len()) && id.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
        })
        .map(str::to_owned);
    let mut form = form.map_err(|_| ApiError::BadRequest(messages::BAD_FORMAT_ICON))?;
    let (mut uuid, mut name, mut image) = (String::new(), String::new(), None);
    while let Some(field) = form.next_field().await.map_err(form_error)? {
        match field.name() {
            Some("jia_isu_uuid") => uuid = field.text().await.map_err(form_error)?,
            Some("isu_name") => name = field.text().await.map_err(form_error)?,
            // Like the reference, an `image` part without a (non-empty) filename is not a file.
            Some("image") if field.file_name().is_some_and(|name| !name.is_empty()) => {
                image = Some(field.bytes().await.map_err(form_error)?);
            }
            _ => {}
        }
    }
    if uuid.chars().count() > MAX_JIA_ISU_UUID_CHARS {
        return Err(ApiError::BadRequest(messages::BAD_FORMAT_JIA_ISU_UUID));
    }
    if name.chars().count() > MAX_ISU_NAME_CHARS {
        return Err(ApiError::BadRequest(messages::BAD_FORMAT_ISU_NAME));
    }
    let isu = app
        .state
        .register(Registration {
            owner: user.0,
            uuid,
            name,
            image,
            request,
        })
        .await?;
    let mut response = json(&IsuBody::from(&*isu))?;
    *response.status_mut() = StatusCode::CREATED;
    Ok(response)
}

/// 413 for a form over [`REGISTRATION_BODY_LIMIT`], else the contract's `bad format: icon`.
fn form_error(error: MultipartError) -> ApiError {
    match error.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge,
        _ => ApiError::BadRequest(messages::BAD_FORMAT_ICON),
    }
}

async fn show(user: SignedIn, State(app): State<AppState>, Path(uuid): Path<String>) -> Result<Response, ApiError> {
    let isu = app
        .state
        .generation()
        .owned_isu(&uuid, &user.0)
        .ok_or(ApiError::IsuNotFound)?;
    json(&IsuBody::from(&*isu))
}

/// Icons never change after registration, so the owner's browser may keep them
/// (`private`: never in a shared cache).
async fn icon(user: SignedIn, State(app): State<AppState>, Path(uuid): Path<String>) -> Result<Response, ApiError> {
    let isu = app
        .state
        .generation()
        .owned_isu(&uuid, &user.0)
        .ok_or(ApiError::IsuNotFound)?;
    let image = match isu.icon.as_deref() {
        None => app.state.default_icon.clone(),
        // A replica that has yet to fetch it from a peer.
        Some(OwnIcon {
            hash: Some(hash),
            bytes,
        }) if bytes.is_empty() => app
            .state
            .icon(*hash)
            .await
            .ok_or_else(|| ApiError::Unavailable("the icon is on no reachable replica".into()))?,
        Some(icon) => icon.bytes.clone(),
    };
    Ok((
        [
            (header::CONTENT_TYPE, "image/jpeg"),
            (header::CACHE_CONTROL, "private, max-age=86400"),
        ],
        image,
    )
        .into_response())
}
