//! `isuctl bench`: not yet ported from `scripts/bench`.

use crate::output::Format;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args, _format: Format) -> anyhow::Result<()> {
    anyhow::bail!("isuctl bench: not yet ported; use scripts/bench")
}
