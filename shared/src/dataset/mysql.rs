//! Importer for the official MySQL dump (placeholder until filled).

use super::Dataset;

pub fn import(_dump: &[u8]) -> anyhow::Result<Dataset> {
    anyhow::bail!("not yet implemented")
}
