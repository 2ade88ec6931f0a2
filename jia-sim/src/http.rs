//! Every HTTP client of the simulator and of the bench starts here, so one `--ca-cert` makes
//! all of them (users, devices, the simulator's, the nodes' metrics) trust a private CA, as
//! the official bench trusts the contest's certificate.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static EXTRA_ROOT: OnceLock<reqwest::Certificate> = OnceLock::new();

/// Why `--ca-cert` cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("reading --ca-cert {path}", path = path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("--ca-cert {path}", path = path.display())]
    Pem { path: PathBuf, source: reqwest::Error },
    #[error("--ca-cert given twice")]
    GivenTwice,
}

/// Trust the PEM certificate(s) in `path` besides the usual roots, for every client made
/// after this. Called once, at start.
pub fn trust_ca(path: &Path) -> Result<(), CaError> {
    let pem = std::fs::read(path).map_err(|source| CaError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let certificate = reqwest::Certificate::from_pem(&pem).map_err(|source| CaError::Pem {
        path: path.to_path_buf(),
        source,
    })?;
    EXTRA_ROOT.set(certificate).map_err(|_| CaError::GivenTwice)
}

/// A client builder that trusts `--ca-cert` when one was given.
pub fn client_builder() -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder();
    match EXTRA_ROOT.get() {
        Some(certificate) => builder.add_root_certificate(certificate.clone()),
        None => builder,
    }
}
