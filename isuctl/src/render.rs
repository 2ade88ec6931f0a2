//! `isuctl render`: not yet ported from `scripts/render`.

use crate::output::Format;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args, _format: Format) -> anyhow::Result<()> {
    anyhow::bail!("isuctl render: not yet ported; use scripts/render")
}
