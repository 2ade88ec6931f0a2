//! `isuctl cluster`: not yet ported from `scripts/cluster`.

use crate::output::Format;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args, _format: Format) -> anyhow::Result<()> {
    anyhow::bail!("isuctl cluster: not yet ported; use scripts/cluster")
}
