//! `isuctl profile`: not yet ported from `scripts/profile`.

use crate::output::Format;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args, _format: Format) -> anyhow::Result<()> {
    anyhow::bail!("isuctl profile: not yet ported; use scripts/profile")
}
