//! Frontend routes: `index.html` for the single-page app's routes and `/assets/*`.
//! nginx serves these itself in a cluster; the coordinator serves them too so a
//! node is usable on its own.

use std::path::Path;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use tower_http::services::ServeDir;

use crate::AppState;

/// Served when no static directory is configured.
const BUILT_IN_INDEX: &str =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ISUCONDITION</title></head>\
<body><h1>ISUCONDITION</h1><p>The API is up. See <a href=\"/api/trend\">/api/trend</a>.</p></body></html>\n";

const SPA_ROUTES: [&str; 6] = [
    "/ops",
    "/",
    "/isu/{uuid}",
    "/isu/{uuid}/condition",
    "/isu/{uuid}/graph",
    "/register",
];

pub fn router(static_dir: Option<&Path>) -> anyhow::Result<Router<AppState>> {
    let index = match static_dir {
        Some(dir) => Bytes::from(
            std::fs::read(dir.join("index.html"))
                .map_err(|error| anyhow::anyhow!("reading {}: {error}", dir.join("index.html").display()))?,
        ),
        None => Bytes::from_static(BUILT_IN_INDEX.as_bytes()),
    };
    let mut router = Router::new();
    for route in SPA_ROUTES {
        let index = index.clone();
        router = router.route(route, get(move || serve_index(index.clone())));
    }
    if let Some(dir) = static_dir {
        router = router.nest_service("/assets", ServeDir::new(dir.join("assets")));
    }
    Ok(router)
}

async fn serve_index(index: Bytes) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], index).into_response()
}
