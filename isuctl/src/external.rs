//! Running the tools the operations stand on (cargo, ip, openssl, curl, the workspace's
//! binaries): one place that turns a failed run into an error naming the command and what
//! it said.

use std::process::{Command, Output};

use anyhow::Context as _;

/// The command line as a person would type it, for messages.
pub fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|word| word.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `command` with inherited output; an error unless it exits 0.
pub fn run_checked(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {}", describe(command)))?;
    anyhow::ensure!(status.success(), "{} failed: {status}", describe(command));
    Ok(())
}

/// Runs `command` and returns its output; an error (with its stderr) unless it exits 0.
pub fn output_checked(command: &mut Command) -> anyhow::Result<Output> {
    let output = command
        .output()
        .with_context(|| format!("running {}", describe(command)))?;
    anyhow::ensure!(
        output.status.success(),
        "{} failed ({}): {}",
        describe(command),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(output)
}

/// `cargo build --release -q -p PACKAGE...` in the checkout `repo`.
pub fn build_release(repo: &std::path::Path, packages: &[&str]) -> anyhow::Result<()> {
    let mut command = Command::new("cargo");
    command.current_dir(repo).args(["build", "--release", "-q"]);
    for package in packages {
        command.args(["-p", package]);
    }
    run_checked(&mut command)
}
