//! `isuctl nemesis`: builds the `nemesis` binary and runs it with this tool as its hands on a
//! fresh local cluster (`nemesis/`: a seeded schedule of faults, clients recording a
//! history, the checker). Its exit status is the run's: 0 only when every check held.

use std::process::Command;

use crate::exit::Exit;
use crate::output::Format;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run's options: --seed N --duration 10m --users N --cells N --grace S
    /// --keep-cluster --no-network, or --check HISTORY (`nemesis --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn run(args: Args, format: Format) -> anyhow::Result<()> {
    let repo = crate::local::repo_root();
    deploy::external::build_release(&repo, &["nemesis"])?;
    let mut command = Command::new(deploy::external::target_dir(&repo).join("release/nemesis"));
    command.args(&args.args).env("ISUCTL_BIN", std::env::current_exe()?);
    if format == Format::Json {
        command.arg("--json");
    }
    let status = command.status()?;
    match status.code() {
        Some(0) => Ok(()),
        code => Err(Exit::quiet(code.unwrap_or(1)).into()),
    }
}
