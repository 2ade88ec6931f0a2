//! The JIA sign-in page a browser user of a local cluster needs: `GET /` shows a form,
//! `GET /login` signs a JWT for the chosen user and redirects back to the app with `?jwt=`.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::header::{CACHE_CONTROL, LOCATION};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use reqwest::Url;
use serde::Deserialize;

use crate::jwt::JwtSigner;

/// Longest accepted `jia_user_id` (the service stores up to 255 bytes).
const MAX_USER_ID_BYTES: usize = 255;
/// Fresh UUIDs offered on the page for registration.
const OFFERED_UUIDS: usize = 3;

/// What the sign-in routes need.
#[derive(Clone)]
pub struct SignIn {
    pub signer: JwtSigner,
    /// Where to send the user back when the page was opened without `redirect`.
    pub default_app_url: String,
}

impl std::fmt::Debug for SignIn {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.debug_struct("SignIn")
            .field("default_app_url", &self.default_app_url)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct PageQuery {
    redirect: Option<String>,
}

#[derive(Deserialize)]
struct LoginQuery {
    user: Option<String>,
    redirect: Option<String>,
}

/// `GET /` and `GET /login`.
pub fn routes(sign_in: SignIn) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/login", get(login))
        .with_state(Arc::new(sign_in))
}

async fn page(State(sign_in): State<Arc<SignIn>>, Query(query): Query<PageQuery>) -> Response {
    let redirect = query.redirect.unwrap_or_else(|| sign_in.default_app_url.clone());
    if let Err(problem) = return_url(&redirect) {
        return (StatusCode::BAD_REQUEST, problem).into_response();
    }
    let uuids: String = (0..OFFERED_UUIDS)
        .map(|_| format!("<li><code>{}</code></li>", uuid::Uuid::new_v4()))
        .collect();
    let html = format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>JIA sign-in (simulator)</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 32rem; margin: 3rem auto; padding: 0 1rem; color: #222; }}
label {{ display: block; margin: 1rem 0 .25rem; }}
input {{ font-size: 1rem; padding: .4rem; width: 100%; box-sizing: border-box; }}
button {{ margin-top: 1rem; font-size: 1rem; padding: .5rem 1.5rem; }}
code {{ font-size: .9rem; }}
</style>
</head>
<body>
<h1>JIA sign-in</h1>
<p>This is the bench's JIA simulator. Choose any user id; it is created on first sign-in.</p>
<form method="get" action="/login">
<label for="user">JIA user id</label>
<input id="user" name="user" value="isucon1" required maxlength="{MAX_USER_ID_BYTES}" autofocus>
<input type="hidden" name="redirect" value="{redirect}">
<button type="submit">Sign in</button>
</form>
<h2>ISU ids you can register</h2>
<p>This JIA activates any ISU id except <code>9e5c1109-beff-4598-b8f1-658d1994d55f</code>. Fresh ones:</p>
<ul>{uuids}</ul>
</body>
</html>
"#,
        redirect = escape_html(&redirect),
    );
    ([(CACHE_CONTROL, "no-store")], Html(html)).into_response()
}

async fn login(State(sign_in): State<Arc<SignIn>>, Query(query): Query<LoginQuery>) -> Response {
    let user = query.user.unwrap_or_default();
    let user = user.trim();
    if user.is_empty() || user.len() > MAX_USER_ID_BYTES {
        return (StatusCode::BAD_REQUEST, "user must be 1 to 255 bytes").into_response();
    }
    let redirect = query.redirect.unwrap_or_else(|| sign_in.default_app_url.clone());
    let mut target = match return_url(&redirect) {
        Ok(target) => target,
        Err(problem) => return (StatusCode::BAD_REQUEST, problem).into_response(),
    };
    target.query_pairs_mut().append_pair("jwt", &sign_in.signer.sign(user));
    (
        StatusCode::FOUND,
        [(LOCATION, target.to_string()), (CACHE_CONTROL, "no-store".to_owned())],
    )
        .into_response()
}

/// The app URL to return to: absolute http(s) only, so the page cannot be turned into a
/// redirector to other schemes.
fn return_url(raw: &str) -> Result<Url, &'static str> {
    let url = Url::parse(raw).map_err(|_| "redirect must be an absolute URL")?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("redirect must be an http or https URL");
    }
    Ok(url)
}

fn escape_html(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absolute_http_urls_are_return_targets() {
        assert!(return_url("http://127.0.0.2:8080/").is_ok());
        assert!(return_url("https://isucondition-1.t.isucon.dev/?a=b").is_ok());
        assert!(return_url("/relative").is_err());
        assert!(return_url("javascript:alert(1)").is_err());
    }

    #[test]
    fn html_special_characters_are_escaped() {
        assert_eq!(escape_html(r#"a"><script>&'"#), "a&quot;&gt;&lt;script&gt;&amp;&#39;");
    }
}
