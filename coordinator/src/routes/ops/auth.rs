//! Operator authentication for the console (`/ops`), apart from the cluster secret and
//! from users' sessions: the operator token (`--ops-token-file`) signs an operator in, and
//! every later request carries a cookie signed under a key derived from that token.
//!
//! - **Cookie** [`COOKIE_NAME`]: `expiry-hex "." nonce "." mac`, HMAC-SHA256 under
//!   `HMAC("isucondition operator key", token)`; `HttpOnly; SameSite=Strict; Path=/ops`,
//!   12 hours. Any replica given the same token verifies it; a new token ends every
//!   operator session. It cannot be confused with a user's session: another name, another
//!   key, another path.
//! - **CSRF**: an action (any method but GET and HEAD) carries [`CSRF_HEADER`], a value
//!   derived from the cookie's nonce under the same key (the page reads it from
//!   `GET /ops/api/session`; the cookie itself is not readable by scripts). A browser sends
//!   a custom header across origins only after a preflight nobody answers, so a foreign page
//!   cannot send it. Besides, an `Origin` naming another host or port than the one the
//!   browser asked (`X-Forwarded-Host`, which nginx sets from the request's own `Host`; else
//!   `Host`) and a `Sec-Fetch-Site` other than `same-origin` are refused; a request a
//!   follower forwarded to the leader had its origin checked there, and its token is checked
//!   again.
//!
//! Pure: no I/O, so the rules are unit-tested here.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{header, HeaderMap, HeaderValue, Method};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The operator's cookie.
pub const COOKIE_NAME: &str = "isucondition_ops";
/// The header an action carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-ops-csrf";
/// How long an operator stays signed in.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// The shortest operator token taken.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The key operator cookies are signed with, and the token it comes from.
#[derive(Clone)]
pub struct OperatorKey {
    mac: Hmac<Sha256>,
    /// The token's own MAC, compared in constant time with a candidate's.
    token_check: Vec<u8>,
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No operator cookie, or one that is forged, malformed or expired: 401.
    SignedOut,
    /// An action without the right CSRF token, or from another origin: 403.
    Forgery(&'static str),
}

impl OperatorKey {
    /// The key of `token` (its surrounding whitespace dropped); an error for a short one.
    pub fn from_token(token: &str) -> Result<OperatorKey, String> {
        let token = token.trim();
        if token.len() < MIN_TOKEN_BYTES {
            return Err(format!("the operator token must be at least {MIN_TOKEN_BYTES} bytes"));
        }
        let mut derive = Hmac::<Sha256>::new_from_slice(b"isucondition operator key").expect("any key length");
        derive.update(token.as_bytes());
        let key = derive.finalize().into_bytes();
        let mac = Hmac::<Sha256>::new_from_slice(&key).expect("any key length");
        let token_check = Self::tag(&mac, "token", token);
        Ok(OperatorKey { mac, token_check })
    }

    fn tag(mac: &Hmac<Sha256>, purpose: &str, text: &str) -> Vec<u8> {
        let mut mac = mac.clone();
        mac.update(purpose.as_bytes());
        mac.update(b".");
        mac.update(text.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    /// Whether `candidate` is the token (in time independent of where they differ).
    pub fn is_token(&self, candidate: &str) -> bool {
        let mut mac = self.mac.clone();
        mac.update(b"token.");
        mac.update(candidate.trim().as_bytes());
        mac.verify_slice(&self.token_check).is_ok()
    }

    /// A new operator session: the cookie's value, valid for [`SESSION_LIFETIME`] from `now`.
    pub fn new_session(&self, now: SystemTime) -> String {
        let expiry = unix_seconds(now) + SESSION_LIFETIME.as_secs();
        let nonce = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
        let payload = format!("{expiry:x}.{nonce}");
        let signature = URL_SAFE_NO_PAD.encode(Self::tag(&self.mac, "session", &payload));
        format!("{payload}.{signature}")
    }

    /// The session's CSRF token, when `cookie` is a valid session at `now`.
    pub fn verify(&self, cookie: &str, now: SystemTime) -> Option<String> {
        let (payload, signature) = cookie.rsplit_once('.')?;
        let signature = URL_SAFE_NO_PAD.decode(signature).ok()?;
        let mut mac = self.mac.clone();
        mac.update(b"session.");
        mac.update(payload.as_bytes());
        mac.verify_slice(&signature).ok()?;
        let (expiry, nonce) = payload.split_once('.')?;
        if u64::from_str_radix(expiry, 16).ok()? <= unix_seconds(now) {
            return None;
        }
        Some(URL_SAFE_NO_PAD.encode(Self::tag(&self.mac, "csrf", nonce)))
    }

    /// Checks a request to the console's API: a valid cookie, and for an action the CSRF
    /// token and the origin. Answers the session's CSRF token.
    pub fn check(&self, method: &Method, headers: &HeaderMap, now: SystemTime) -> Result<String, Refusal> {
        let csrf = cookie(headers, COOKIE_NAME)
            .and_then(|value| self.verify(value, now))
            .ok_or(Refusal::SignedOut)?;
        if matches!(*method, Method::GET | Method::HEAD) {
            return Ok(csrf);
        }
        let sent = headers.get(CSRF_HEADER).map(HeaderValue::as_bytes).unwrap_or_default();
        // The expected token is a MAC: comparing through a MAC of both keeps the time the
        // same wherever they differ.
        let same = {
            let mut mac = self.mac.clone();
            mac.update(b"compare.");
            mac.update(sent);
            mac.verify_slice(&Self::tag(&self.mac, "compare", &csrf)).is_ok()
        };
        if !same {
            return Err(Refusal::Forgery(
                "the operator console's CSRF token is missing or wrong",
            ));
        }
        same_origin(headers)?;
        Ok(csrf)
    }
}

/// Refuses a request a browser marks as coming from another site or origin (the sign-in's
/// check too: a foreign page must not sign a browser in).
pub fn same_origin(headers: &HeaderMap) -> Result<(), Refusal> {
    const CROSS_ORIGIN: Refusal = Refusal::Forgery("a cross-origin request to the operator console");
    if headers.contains_key(crate::routes::leader::FORWARDED_HEADER) {
        // Checked by the replica it came to; the host is now the leader's.
        return Ok(());
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        if site.as_bytes() != b"same-origin" && site.as_bytes() != b"none" {
            return Err(CROSS_ORIGIN);
        }
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    // nginx passes `Host` without its port, and the browser's own in `X-Forwarded-Host`.
    let asked = headers
        .get("x-forwarded-host")
        .or_else(|| headers.get(header::HOST))
        .and_then(|host| host.to_str().ok());
    let origin = origin
        .to_str()
        .ok()
        .and_then(|origin| origin.split_once("://"))
        .map(|(_, authority)| authority.trim_end_matches('/'));
    match (origin, asked) {
        (Some(origin), Some(asked)) if origin.eq_ignore_ascii_case(asked) => Ok(()),
        _ => Err(CROSS_ORIGIN),
    }
}

/// The value of cookie `name`.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
}

/// The `Set-Cookie` that signs an operator in (`Secure` when the client came over HTTPS).
pub fn set_cookie(value: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{COOKIE_NAME}={value}; Path=/ops; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        SESSION_LIFETIME.as_secs()
    )
}

/// The `Set-Cookie` that signs an operator out.
pub fn clear_cookie() -> String {
    format!("{COOKIE_NAME}=; Path=/ops; HttpOnly; SameSite=Strict; Max-Age=0")
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "an-operator-token-of-32-bytes-ok";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn a_short_token_is_refused_and_only_the_token_signs_in() {
        assert!(OperatorKey::from_token("short").is_err());
        let key = OperatorKey::from_token(&format!("{TOKEN}\n")).unwrap();
        assert!(key.is_token(TOKEN));
        assert!(!key.is_token("an-operator-token-of-32-bytes-no"));
        assert!(!key.is_token(""));
    }

    #[test]
    fn a_session_needs_its_key_and_ends_when_it_expires() {
        let key = OperatorKey::from_token(TOKEN).unwrap();
        let now = SystemTime::now();
        let session = key.new_session(now);
        assert!(key.verify(&session, now).is_some());
        assert!(key.verify(&session, now + SESSION_LIFETIME).is_none(), "expired");
        let other = OperatorKey::from_token("another-operator-token-0123456789").unwrap();
        assert!(other.verify(&session, now).is_none(), "another token's key");
        let mut tampered = session.clone().into_bytes();
        tampered[0] = if tampered[0] == b'f' { b'e' } else { b'f' };
        assert!(key.verify(std::str::from_utf8(&tampered).unwrap(), now).is_none());
        // A user's session cookie is not an operator's.
        let user = shared::session::SessionKey::from_secret(TOKEN).sign("isucon", 1);
        assert!(key.verify(&user, now).is_none());
    }

    #[test]
    fn an_action_needs_the_csrf_token_and_the_same_origin() {
        let key = OperatorKey::from_token(TOKEN).unwrap();
        let now = SystemTime::now();
        let session = key.new_session(now);
        let cookie = format!("isucondition_session=x; {COOKIE_NAME}={session}");
        let csrf = key.check(&Method::GET, &headers(&[("cookie", &cookie)]), now).unwrap();
        assert_eq!(key.check(&Method::GET, &headers(&[]), now), Err(Refusal::SignedOut));
        let post = |extra: &[(&'static str, &str)]| {
            let mut pairs = vec![
                ("cookie", cookie.as_str()),
                ("host", "127.0.0.2"),
                ("x-forwarded-host", "127.0.0.2:8080"),
            ];
            pairs.extend_from_slice(extra);
            key.check(&Method::POST, &headers(&pairs), now)
        };
        assert!(post(&[(CSRF_HEADER, &csrf)]).is_ok());
        assert!(post(&[
            (CSRF_HEADER, &csrf),
            ("origin", "http://127.0.0.2:8080"),
            ("sec-fetch-site", "same-origin")
        ])
        .is_ok());
        assert!(matches!(post(&[]), Err(Refusal::Forgery(_))));
        assert!(matches!(post(&[(CSRF_HEADER, "x")]), Err(Refusal::Forgery(_))));
        assert!(matches!(
            post(&[(CSRF_HEADER, &csrf), ("origin", "http://evil.example")]),
            Err(Refusal::Forgery(_))
        ));
        assert!(matches!(
            post(&[(CSRF_HEADER, &csrf), ("origin", "http://127.0.0.2:9999")]),
            Err(Refusal::Forgery(_))
        ));
        assert!(matches!(
            post(&[(CSRF_HEADER, &csrf), ("sec-fetch-site", "cross-site")]),
            Err(Refusal::Forgery(_))
        ));
    }
}
