//! `isuctl web`: not yet ported from `scripts/web`.

use crate::output::Format;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args, _format: Format) -> anyhow::Result<()> {
    anyhow::bail!("isuctl web: not yet ported; use scripts/web")
}
