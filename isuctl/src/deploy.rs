//! `isuctl deploy`: not yet ported from `scripts/deploy`.

use crate::output::Format;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args, _format: Format) -> anyhow::Result<()> {
    anyhow::bail!("isuctl deploy: not yet ported; use scripts/deploy")
}
