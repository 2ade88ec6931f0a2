//! Every HTTP client of the simulator and of the bench starts here, so one `--ca-cert` makes
//! all of them (users, devices, the simulator's, the nodes' metrics) trust a private CA, as
//! the official bench trusts the contest's certificate.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::Context;

static EXTRA_ROOT: OnceLock<reqwest::Certificate> = OnceLock::new();

/// Trust the PEM certificate(s) in `path` besides the usual roots, for every client made
/// after this. Called once, at start.
pub fn trust_ca(path: &Path) -> anyhow::Result<()> {
    let pem = std::fs::read(path).with_context(|| format!("reading --ca-cert {}", path.display()))?;
    let certificate = reqwest::Certificate::from_pem(&pem).with_context(|| format!("--ca-cert {}", path.display()))?;
    EXTRA_ROOT
        .set(certificate)
        .map_err(|_| anyhow::anyhow!("--ca-cert given twice"))
}

/// A client builder that trusts `--ca-cert` when one was given.
pub fn client_builder() -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder();
    match EXTRA_ROOT.get() {
        Some(certificate) => builder.add_root_certificate(certificate.clone()),
        None => builder,
    }
}
