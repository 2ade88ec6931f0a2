//! `isuctl rollout`: not yet ported from `scripts/rollout`.

use crate::output::Format;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args, _format: Format) -> anyhow::Result<()> {
    anyhow::bail!("isuctl rollout: not yet ported; use scripts/rollout")
}
