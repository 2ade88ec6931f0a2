//! Sign-in tokens: ES256 JWTs as JIA issues them, and the invalid ones of the compatibility check (§13.2).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

/// The project's own JIA signing key (test key; the nodes verify with `keys/jwt-public.pem`).
pub const PROJECT_PRIVATE_KEY_PEM: &str = include_str!("../../keys/jwt-private.pem");

/// A throwaway P-256 key that no node trusts, for the "signed with another key" case.
const STRANGER_PRIVATE_KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg1VQsr19dZEDxenZG
RCgCFnRbxX+iyM4Ic9wDTfK+0AehRANCAAQtErjqhYDKI7N/zqFiiKjsmuY96w94
uj996tjJD4ktik/XEOycrezYgYqVCsTyho4H3Osbvlqq1dt/iY5iX/mD
-----END PRIVATE KEY-----
";

/// A header-only fragment the official bench sends as a token.
pub const MALFORMED_TOKEN: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.";

/// Seconds in a (non-leap) year, for the token that expired a year ago.
const YEAR_SECONDS: i64 = 365 * 86_400;

/// Why a private key cannot sign.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("reading {path}", path = path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("loading the private key {path}", path = path.display())]
    InFile { path: PathBuf, source: Box<KeyError> },
    #[error("bad PEM: {0}")]
    Pem(&'static str),
    #[error("bad PEM body")]
    Base64(#[source] base64::DecodeError),
    #[error("not an EC private key")]
    NotAnEcKey(#[source] jsonwebtoken::errors::Error),
    #[error("the key cannot sign ES256")]
    CannotSign(#[source] jsonwebtoken::errors::Error),
}

/// Signs ES256 tokens with one private key.
#[derive(Clone)]
pub struct JwtSigner {
    key: EncodingKey,
}

impl JwtSigner {
    /// The signer of the project's own key pair.
    pub fn project_default() -> JwtSigner {
        JwtSigner::from_pem(PROJECT_PRIVATE_KEY_PEM).expect("the embedded project key is a valid P-256 key")
    }

    /// Reads a PEM private key file (PKCS#8 `PRIVATE KEY` or SEC1 `EC PRIVATE KEY`, as the
    /// official `ec256-private.pem` is).
    pub fn from_file(path: &Path) -> Result<JwtSigner, KeyError> {
        let pem = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        JwtSigner::from_pem(&pem).map_err(|source| KeyError::InFile {
            path: path.to_path_buf(),
            source: Box::new(source),
        })
    }

    /// Parses a PEM private key (PKCS#8 or SEC1) of curve P-256.
    pub fn from_pem(pem: &str) -> Result<JwtSigner, KeyError> {
        let key = if pem.contains("-----BEGIN EC PRIVATE KEY-----") {
            let sec1 = pem_body(pem, "EC PRIVATE KEY")?;
            EncodingKey::from_ec_der(&pkcs8_from_p256_sec1(&sec1))
        } else {
            EncodingKey::from_ec_pem(pem.as_bytes()).map_err(KeyError::NotAnEcKey)?
        };
        let signer = JwtSigner { key };
        signer
            .try_sign(&json!({"jia_user_id": "probe"}))
            .map_err(KeyError::CannotSign)?;
        Ok(signer)
    }

    /// A valid sign-in token for `jia_user_id`: `iat` = now − 1 s, `exp` = now + 30 s.
    pub fn sign(&self, jia_user_id: &str) -> String {
        let now = unix_now();
        self.sign_claims(&json!({"jia_user_id": jia_user_id, "iat": now - 1, "exp": now + 30}))
    }

    /// Signs arbitrary claims with ES256.
    pub fn sign_claims(&self, claims: &Value) -> String {
        self.try_sign(claims)
            .expect("ES256 signing with a validated key does not fail")
    }

    fn try_sign(&self, claims: &Value) -> jsonwebtoken::errors::Result<String> {
        jsonwebtoken::encode(&Header::new(Algorithm::ES256), claims, &self.key)
    }

    /// The token of one invalid sign-in case; `None` means "send no `Authorization` header".
    pub fn invalid_token(&self, case: InvalidJwt, jia_user_id: &str) -> Option<String> {
        let now = unix_now();
        let token = match case {
            InvalidJwt::MissingHeader => return None,
            InvalidJwt::Malformed => MALFORMED_TOKEN.to_owned(),
            InvalidJwt::Hs256 => jsonwebtoken::encode(
                &Header::new(Algorithm::HS256),
                &json!({"jia_user_id": jia_user_id, "iat": now - 1, "exp": now + 30}),
                &EncodingKey::from_secret(b"isucondition"),
            )
            .expect("HS256 signing does not fail"),
            InvalidJwt::Expired => self.sign_claims(
                &json!({"jia_user_id": jia_user_id, "iat": now - YEAR_SECONDS - 1, "exp": now - YEAR_SECONDS + 30}),
            ),
            InvalidJwt::OtherKey => JwtSigner::from_pem(STRANGER_PRIVATE_KEY_PEM)
                .expect("the embedded stranger key is valid")
                .sign(jia_user_id),
            InvalidJwt::TamperedPayload => {
                let genuine = self.sign(jia_user_id);
                let forged_claims =
                    json!({"jia_user_id": format!("{jia_user_id}-forged"), "iat": now - 1, "exp": now + 30});
                swap_payload(&genuine, &forged_claims)
            }
            InvalidJwt::NoJiaUserId => self.sign_claims(&json!({"iat": now - 1, "exp": now + 30})),
            InvalidJwt::JiaUserIdArray => {
                self.sign_claims(&json!({"jia_user_id": [jia_user_id, jia_user_id], "iat": now - 1, "exp": now + 30}))
            }
        };
        Some(token)
    }
}

/// The invalid sign-ins the official bench tries (§13.2) and how the service must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidJwt {
    /// No `Authorization` header at all.
    MissingHeader,
    /// [`MALFORMED_TOKEN`].
    Malformed,
    /// Signed with HMAC-SHA256 instead of ES256.
    Hs256,
    /// Expired a year ago.
    Expired,
    /// ES256 with a key the service does not trust.
    OtherKey,
    /// A genuine token whose payload was replaced after signing.
    TamperedPayload,
    /// Valid signature, no `jia_user_id` claim.
    NoJiaUserId,
    /// Valid signature, `jia_user_id` is an array.
    JiaUserIdArray,
}

impl InvalidJwt {
    pub const ALL: [InvalidJwt; 8] = [
        InvalidJwt::MissingHeader,
        InvalidJwt::Malformed,
        InvalidJwt::Hs256,
        InvalidJwt::Expired,
        InvalidJwt::OtherKey,
        InvalidJwt::TamperedPayload,
        InvalidJwt::NoJiaUserId,
        InvalidJwt::JiaUserIdArray,
    ];

    /// Status `POST /api/auth` must answer.
    pub fn expected_status(self) -> u16 {
        match self {
            InvalidJwt::NoJiaUserId | InvalidJwt::JiaUserIdArray => 400,
            _ => 403,
        }
    }

    /// Exact `text/plain` body `POST /api/auth` must answer.
    pub fn expected_body(self) -> &'static str {
        match self {
            InvalidJwt::NoJiaUserId | InvalidJwt::JiaUserIdArray => "invalid JWT payload",
            _ => "forbidden",
        }
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// Replaces the payload segment of a compact JWT, keeping header and signature.
fn swap_payload(token: &str, claims: &Value) -> String {
    let mut segments = token.split('.');
    let header = segments.next().unwrap_or_default();
    let _payload = segments.next();
    let signature = segments.next().unwrap_or_default();
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    format!("{header}.{payload}.{signature}")
}

/// Decodes the base64 body of the PEM block with this label.
fn pem_body(pem: &str, label: &str) -> Result<Vec<u8>, KeyError> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin).ok_or(KeyError::Pem("no PEM begin line"))? + begin.len();
    let stop = pem[start..].find(&end).ok_or(KeyError::Pem("no PEM end line"))? + start;
    let base64: String = pem[start..stop].chars().filter(|c| !c.is_whitespace()).collect();
    STANDARD.decode(base64).map_err(KeyError::Base64)
}

/// Wraps a SEC1 `ECPrivateKey` of curve P-256 into a PKCS#8 `PrivateKeyInfo` (RFC 5208/5915),
/// the only form the signing library reads.
fn pkcs8_from_p256_sec1(sec1: &[u8]) -> Vec<u8> {
    // AlgorithmIdentifier { id-ecPublicKey (1.2.840.10045.2.1), prime256v1 (1.2.840.10045.3.1.7) }
    const ALGORITHM: [u8; 21] = [
        0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d,
        0x03, 0x01, 0x07,
    ];
    const VERSION_0: [u8; 3] = [0x02, 0x01, 0x00];
    let mut body = Vec::with_capacity(sec1.len() + 32);
    body.extend_from_slice(&VERSION_0);
    body.extend_from_slice(&ALGORITHM);
    der_push(&mut body, 0x04, sec1);
    let mut info = Vec::with_capacity(body.len() + 4);
    der_push(&mut info, 0x30, &body);
    info
}

/// Appends one DER tag-length-value.
fn der_push(out: &mut Vec<u8>, tag: u8, value: &[u8]) {
    out.push(tag);
    let length = value.len();
    if length < 0x80 {
        out.push(length as u8);
    } else {
        let bytes: Vec<u8> = length.to_be_bytes().into_iter().skip_while(|byte| *byte == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{DecodingKey, Validation};

    const PROJECT_PUBLIC_KEY_PEM: &str = include_str!("../../keys/jwt-public.pem");

    fn decode_with(public_pem: &str, token: &str) -> jsonwebtoken::errors::Result<Value> {
        let key = DecodingKey::from_ec_pem(public_pem.as_bytes()).unwrap();
        jsonwebtoken::decode::<Value>(token, &key, &Validation::new(Algorithm::ES256)).map(|data| data.claims)
    }

    #[test]
    fn valid_tokens_verify_with_the_project_public_key() {
        let token = JwtSigner::project_default().sign("isucon");
        let claims = decode_with(PROJECT_PUBLIC_KEY_PEM, &token).unwrap();
        assert_eq!(claims["jia_user_id"], "isucon");
        let (iat, exp) = (claims["iat"].as_i64().unwrap(), claims["exp"].as_i64().unwrap());
        assert_eq!(exp - iat, 31);
        assert!((iat - (unix_now() - 1)).abs() <= 1);
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(header.alg, Algorithm::ES256);
    }

    #[test]
    fn forbidden_cases_do_not_verify() {
        let signer = JwtSigner::project_default();
        for case in InvalidJwt::ALL.into_iter().filter(|case| case.expected_status() == 403) {
            let Some(token) = signer.invalid_token(case, "isucon") else {
                assert_eq!(case, InvalidJwt::MissingHeader);
                continue;
            };
            assert!(
                decode_with(PROJECT_PUBLIC_KEY_PEM, &token).is_err(),
                "{case:?} verified"
            );
            assert_eq!(case.expected_body(), "forbidden");
        }
    }

    #[test]
    fn bad_payload_cases_verify_but_lack_a_string_user_id() {
        let signer = JwtSigner::project_default();
        for case in [InvalidJwt::NoJiaUserId, InvalidJwt::JiaUserIdArray] {
            let token = signer.invalid_token(case, "isucon").unwrap();
            let claims = decode_with(PROJECT_PUBLIC_KEY_PEM, &token).unwrap();
            assert!(!claims["jia_user_id"].is_string(), "{case:?}");
            assert_eq!(
                (case.expected_status(), case.expected_body()),
                (400, "invalid JWT payload")
            );
        }
    }

    #[test]
    fn the_tampered_token_carries_another_user_under_the_genuine_signature() {
        let token = JwtSigner::project_default()
            .invalid_token(InvalidJwt::TamperedPayload, "isucon")
            .unwrap();
        let payload = token.split('.').nth(1).unwrap();
        let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
        assert_eq!(claims["jia_user_id"], "isucon-forged");
        assert!(decode_with(PROJECT_PUBLIC_KEY_PEM, &token).is_err());
    }

    #[test]
    fn sec1_keys_such_as_the_official_one_are_accepted() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/isucon11-qualify");
        let (Ok(private), Ok(public)) = (
            std::fs::read_to_string(data.join("ec256-private.pem")),
            std::fs::read_to_string(data.join("ec256-public.pem")),
        ) else {
            eprintln!("official keys not found beside the checkout; skipping");
            return;
        };
        assert!(private.contains("BEGIN EC PRIVATE KEY"));
        let token = JwtSigner::from_pem(&private).unwrap().sign("isucon1");
        assert_eq!(decode_with(&public, &token).unwrap()["jia_user_id"], "isucon1");
        assert!(decode_with(PROJECT_PUBLIC_KEY_PEM, &token).is_err());
    }

    #[test]
    fn der_lengths_use_the_long_form_from_128_bytes() {
        let mut out = Vec::new();
        der_push(&mut out, 0x04, &[0; 200]);
        assert_eq!(&out[..3], &[0x04, 0x81, 200]);
    }
}
