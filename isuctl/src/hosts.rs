//! `isuctl hosts`: not yet ported from `scripts/hosts`.

use crate::output::Format;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args, _format: Format) -> anyhow::Result<()> {
    anyhow::bail!("isuctl hosts: not yet ported; use scripts/hosts")
}
