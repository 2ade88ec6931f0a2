//! `isuctl cells`: not yet ported from `scripts/cells`.

use crate::output::Format;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args, _format: Format) -> anyhow::Result<()> {
    anyhow::bail!("isuctl cells: not yet ported; use scripts/cells")
}
