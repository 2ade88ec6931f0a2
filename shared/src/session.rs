//! The session cookie: signed (HMAC-SHA256 with a key derived from the cluster
//! secret), so every node can verify it without asking the coordinator.
//!
//! Value: `base64url(jia_user_id) "." generation-hex "." base64url(mac)`. The
//! generation is the dataset generation current at sign-in: a user created in
//! the current generation cannot have been erased yet, so a worker may accept
//! such a session before the user sync reaches it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const COOKIE_NAME: &str = "isucondition_session";
/// Thirty days, like the reference.
pub const MAX_AGE_SECONDS: u64 = 2_592_000;

#[derive(Clone)]
pub struct SessionKey {
    mac: Hmac<Sha256>,
}

/// A verified session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub user: String,
    pub generation: u64,
}

impl SessionKey {
    pub fn from_secret(secret: &str) -> SessionKey {
        let mut derive =
            Hmac::<Sha256>::new_from_slice(b"isucondition session key").expect("hmac takes any key length");
        derive.update(secret.as_bytes());
        let key = derive.finalize().into_bytes();
        SessionKey {
            mac: Hmac::new_from_slice(&key).expect("hmac takes any key length"),
        }
    }

    /// The cookie value for `user` signed in at `generation`.
    pub fn sign(&self, user: &str, generation: u64) -> String {
        let payload = format!("{}.{generation:x}", URL_SAFE_NO_PAD.encode(user));
        let mut mac = self.mac.clone();
        mac.update(payload.as_bytes());
        format!("{payload}.{}", URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()))
    }

    /// Verifies a cookie value; `None` when it is malformed or not signed with this key.
    pub fn verify(&self, value: &str) -> Option<Session> {
        let (payload, signature) = value.rsplit_once('.')?;
        let signature = URL_SAFE_NO_PAD.decode(signature).ok()?;
        let mut mac = self.mac.clone();
        mac.update(payload.as_bytes());
        mac.verify_slice(&signature).ok()?;
        let (user, generation) = payload.split_once('.')?;
        let user = String::from_utf8(URL_SAFE_NO_PAD.decode(user).ok()?).ok()?;
        let generation = u64::from_str_radix(generation, 16).ok()?;
        Some(Session { user, generation })
    }

    /// Finds and verifies the session cookie in a `Cookie` header value.
    pub fn from_cookie_header(&self, header: &str) -> Option<Session> {
        header
            .split(';')
            .filter_map(|pair| pair.trim().split_once('='))
            .filter(|(name, _)| *name == COOKIE_NAME)
            .find_map(|(_, value)| self.verify(value))
    }

    /// `Set-Cookie` value establishing a session.
    pub fn set_cookie(&self, user: &str, generation: u64) -> String {
        format!(
            "{COOKIE_NAME}={}; Path=/; Max-Age={MAX_AGE_SECONDS}; HttpOnly; SameSite=Lax",
            self.sign(user, generation)
        )
    }
}

/// `Set-Cookie` value destroying the session.
pub fn clear_cookie() -> String {
    format!("{COOKIE_NAME}=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_sessions_verify() {
        let key = SessionKey::from_secret("s3cret");
        let value = key.sign("isucon1", 0xdead_beef);
        assert_eq!(
            key.verify(&value),
            Some(Session {
                user: "isucon1".into(),
                generation: 0xdead_beef
            })
        );
        let header = format!("other=1; {COOKIE_NAME}={value}; x=y");
        assert_eq!(key.from_cookie_header(&header).unwrap().user, "isucon1");
    }

    #[test]
    fn user_ids_with_separators_survive() {
        let key = SessionKey::from_secret("s");
        let value = key.sign("a.b;c=d é", 7);
        assert_eq!(key.verify(&value).unwrap().user, "a.b;c=d é");
    }

    #[test]
    fn tampered_or_foreign_cookies_fail() {
        let key = SessionKey::from_secret("one");
        let other = SessionKey::from_secret("two");
        let value = key.sign("isucon1", 1);
        assert_eq!(other.verify(&value), None);
        let forged = value.replacen(
            &URL_SAFE_NO_PAD.encode("isucon1"),
            &URL_SAFE_NO_PAD.encode("isucon2"),
            1,
        );
        assert_eq!(key.verify(&forged), None);
        assert_eq!(key.verify(""), None);
        assert_eq!(key.verify("a.b.c"), None);
        assert_eq!(key.from_cookie_header("isucondition_session="), None);
    }
}
