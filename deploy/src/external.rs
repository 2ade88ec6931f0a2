//! Running the tools the operations stand on (cargo, ip, openssl, curl, npm, apt-get, the
//! workspace's binaries): one place that turns a failed run into an error naming the command
//! and what it said, bounds a run in time, finds a program on `PATH` and installs a missing
//! Debian package.

use std::ffi::OsStr;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// Grace between SIGTERM and SIGKILL for a bounded command (as `timeout --kill-after=10`).
const KILL_AFTER: Duration = Duration::from_secs(10);
/// How long `apt-get update` may take.
const APT_UPDATE_LIMIT: Duration = Duration::from_secs(600);
/// How long `apt-get install` may take.
const APT_INSTALL_LIMIT: Duration = Duration::from_secs(900);

/// Where cargo builds in `repo`: `CARGO_TARGET_DIR` (relative to the checkout when
/// relative), else the checkout's `target`.
pub fn target_dir(repo: &std::path::Path) -> std::path::PathBuf {
    target_dir_in(repo, std::env::var_os("CARGO_TARGET_DIR").map(std::path::PathBuf::from))
}

/// [`target_dir`] with `configured` for `CARGO_TARGET_DIR`.
pub fn target_dir_in(repo: &std::path::Path, configured: Option<std::path::PathBuf>) -> std::path::PathBuf {
    configured.map_or_else(|| repo.join("target"), |dir| repo.join(dir))
}

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

/// Runs `command` with its standard output on this process's standard error (stdout stays
/// for this tool's own result: a URL, JSON); an error unless it exits 0.
pub fn run_to_stderr(command: &mut Command) -> anyhow::Result<()> {
    run_checked(command.stdout(std::io::stderr()))
}

/// Runs `command` and returns its output; an error (with its stderr, when it said anything
/// there) unless it exits 0.
pub fn output_checked(command: &mut Command) -> anyhow::Result<Output> {
    let output = command
        .output()
        .with_context(|| format!("running {}", describe(command)))?;
    let said = String::from_utf8_lossy(&output.stderr);
    let said = said.trim();
    anyhow::ensure!(
        output.status.success(),
        "{} failed ({}){}{said}",
        describe(command),
        output.status,
        if said.is_empty() { "" } else { ": " }
    );
    Ok(output)
}

/// Runs `command` in a process group of its own and ends the whole group (SIGTERM, then
/// SIGKILL after [`KILL_AFTER`]) when it outlives `limit`: what it started (npx's node,
/// apt-get's dpkg) goes with it. An error unless it exits 0 in time.
pub fn run_bounded(command: &mut Command, limit: Duration) -> anyhow::Result<()> {
    let mut child = command
        .process_group(0)
        .spawn()
        .with_context(|| format!("running {}", describe(command)))?;
    let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
    let started = Instant::now();
    let mut terminated: Option<Instant> = None;
    loop {
        if let Some(status) = child.try_wait()? {
            anyhow::ensure!(
                terminated.is_none(),
                "{} took more than {} s",
                describe(command),
                limit.as_secs()
            );
            anyhow::ensure!(status.success(), "{} failed: {status}", describe(command));
            return Ok(());
        }
        match terminated {
            None if started.elapsed() > limit => {
                let _ = nix::sys::signal::kill(group, nix::sys::signal::SIGTERM);
                terminated = Some(Instant::now());
            }
            Some(at) if at.elapsed() > KILL_AFTER => {
                let _ = nix::sys::signal::kill(group, nix::sys::signal::SIGKILL);
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether `program` is a file in a directory of `PATH`.
pub fn on_path(program: &str) -> bool {
    on_search_path(program, std::env::var_os("PATH").as_deref())
}

fn on_search_path(program: &str, search_path: Option<&OsStr>) -> bool {
    search_path.is_some_and(|path| std::env::split_paths(path).any(|dir| dir.join(program).is_file()))
}

/// Installs Debian's `packages` with apt-get, through sudo unless this runs as root:
/// `apt-get update`, then `apt-get install -y`, non-interactive, each bounded in time, their
/// output on stderr. A clear error when apt-get is not there, or root is needed and sudo is not.
pub fn install_packages(packages: &[&str]) -> anyhow::Result<()> {
    let apt_get = apt_get(
        std::env::var_os("PATH").as_deref(),
        nix::unistd::Uid::effective().is_root(),
        packages,
    )?;
    let apt = |args: &[&str]| {
        let mut command = Command::new(apt_get[0]);
        command
            .args(&apt_get[1..])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(std::io::stderr());
        command
    };
    run_bounded(&mut apt(&["update", "-qq"]), APT_UPDATE_LIMIT)?;
    run_bounded(apt(&["install", "-y", "-qq"]).args(packages), APT_INSTALL_LIMIT)
}

/// How apt-get runs with this `PATH`: `apt-get` as root, else `sudo apt-get`; an error naming
/// `packages` when it cannot.
fn apt_get(search_path: Option<&OsStr>, as_root: bool, packages: &[&str]) -> anyhow::Result<Vec<&'static str>> {
    let listed = packages.join(" ");
    anyhow::ensure!(
        on_search_path("apt-get", search_path),
        "installing {listed} needs apt-get (a Debian system), and it is not on PATH: install them by hand"
    );
    if as_root {
        return Ok(vec!["apt-get"]);
    }
    anyhow::ensure!(
        on_search_path("sudo", search_path),
        "installing {listed} needs root, and sudo is not on PATH: run apt-get install -y {listed} as root"
    );
    Ok(vec!["sudo", "apt-get"])
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
    use std::path::Path;

    #[test]
    fn the_target_directory_is_where_cargo_builds() {
        let repo = Path::new("/r");
        assert_eq!(
            target_dir_in(repo, None).join("release/bench"),
            Path::new("/r/target/release/bench")
        );
        assert_eq!(
            target_dir_in(repo, Some("/shared/target".into())).join("release/bench"),
            Path::new("/shared/target/release/bench")
        );
        assert_eq!(
            target_dir_in(repo, Some("out".into())).join("release/bench"),
            Path::new("/r/out/release/bench")
        );
    }

    #[test]
    fn a_failed_command_is_named_with_its_status_and_what_it_said() {
        let error = run_checked(Command::new("sh").args(["-c", "exit 3"])).unwrap_err();
        assert_eq!(error.to_string(), "sh -c exit 3 failed: exit status: 3");
        let error = output_checked(Command::new("sh").args(["-c", "echo no >&2; exit 4"])).unwrap_err();
        assert_eq!(
            error.to_string(),
            "sh -c echo no >&2; exit 4 failed (exit status: 4): no"
        );
        let error = output_checked(Command::new("sh").args(["-c", "exit 5"])).unwrap_err();
        assert_eq!(error.to_string(), "sh -c exit 5 failed (exit status: 5)");
        let error = run_checked(&mut Command::new("/nonexistent/program")).unwrap_err();
        assert_eq!(error.to_string(), "running /nonexistent/program");
    }

    #[test]
    fn a_command_past_its_limit_is_ended_with_its_children() {
        let mut sleeper = Command::new("sh");
        sleeper.args(["-c", "sleep 30 & sleep 30"]);
        let started = Instant::now();
        let error = run_bounded(&mut sleeper, Duration::from_millis(300)).unwrap_err();
        assert!(error.to_string().contains("took more than"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(run_bounded(Command::new("true").arg("in time"), Duration::from_secs(5)).is_ok());
    }

    #[test]
    fn apt_get_runs_as_root_or_through_sudo_and_its_absence_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = |programs: &[&str]| {
            for program in programs {
                std::fs::write(dir.path().join(program), "").unwrap();
            }
            Some(dir.path().as_os_str().to_owned())
        };
        let error = apt_get(path(&[]).as_deref(), true, &["nginx-light", "x"]).unwrap_err();
        assert!(
            error.to_string().contains("installing nginx-light x needs apt-get"),
            "{error}"
        );
        let with_apt = path(&["apt-get"]);
        assert_eq!(apt_get(with_apt.as_deref(), true, &["x"]).unwrap(), ["apt-get"]);
        let error = apt_get(with_apt.as_deref(), false, &["x"]).unwrap_err();
        assert!(
            error.to_string().contains("needs root, and sudo is not on PATH"),
            "{error}"
        );
        let with_sudo = path(&["sudo"]);
        assert_eq!(
            apt_get(with_sudo.as_deref(), false, &["x"]).unwrap(),
            ["sudo", "apt-get"]
        );
        assert!(!on_search_path("apt-get", None));
    }

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
