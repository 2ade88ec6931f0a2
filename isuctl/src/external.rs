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

/// `cargo build [--release] -q -p PACKAGE...` in the checkout `repo`: the one way this tool
/// builds the workspace's binaries.
///
/// Without the variables `cargo run` gives this program (`CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_*`, ...): build scripts that track them (ring's does) would see another value
/// than in a build from a shell, and every release binary would be rebuilt each time one
/// is built the other way.
pub fn cargo_build(repo: &std::path::Path, release: bool, packages: &[&str]) -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(repo).args(["build", "-q"]);
    if release {
        command.arg("--release");
    }
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(is_set_by_cargo_run) {
            command.env_remove(key);
        }
    }
    for package in packages {
        command.args(["-p", package]);
    }
    command
}

/// [`cargo_build`] of release binaries, its output shown only when it fails.
pub fn build_release(repo: &std::path::Path, packages: &[&str]) -> anyhow::Result<()> {
    run_checked(&mut cargo_build(repo, true, packages))
}

/// Whether `cargo run` sets this variable for the program it runs (rather than the user for
/// cargo: `CARGO_HOME`, `CARGO_TARGET_DIR`, `CARGO_BUILD_*`, ... stay).
fn is_set_by_cargo_run(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || matches!(
            key,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "OUT_DIR"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_cargo_run_sets_is_left_out_of_a_nested_build() {
        for key in [
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_BIN_NAME",
        ] {
            assert!(is_set_by_cargo_run(key), "{key}");
        }
        for key in [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "CARGO_BUILD_JOBS",
            "PATH",
        ] {
            assert!(!is_set_by_cargo_run(key), "{key}");
        }
    }
}
