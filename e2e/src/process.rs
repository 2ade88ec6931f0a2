//! Child processes of the sandbox: the node binaries found beside the test executable, a
//! process killed by its PID and reaped on drop, and the few `/proc` and signal helpers
//! nginx's master and workers need.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The node binary `name` (`coordinator`, `worker`) of this build: `target/<profile>/<name>`,
/// beside the `deps/` directory of the test executable. `cargo test` does not build another
/// crate's binaries, so a missing one is a clear panic saying how to build it.
pub fn node_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target/<profile>/deps");
    let path = profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "the {name} binary is not at {}: run `cargo build --workspace --bins` first",
        path.display()
    );
    path
}
/// A child process killed (by its PID) and reaped on drop; stdout and stderr go to a log file.
pub struct NodeProcess {
    pub name: &'static str,
    pub child: Child,
    pub log: PathBuf,
}

impl NodeProcess {
    pub fn spawn(name: &'static str, command: Command, log_dir: &Path) -> NodeProcess {
        let log = log_dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("creating a log file");
        Self::spawn_logging_to(name, command, log, file)
    }

    /// Like [`NodeProcess::spawn`], appending to the node's log (a restart keeps the earlier lines).
    pub fn spawn_appending(name: &'static str, command: Command, log_dir: &Path) -> NodeProcess {
        let log = log_dir.join(format!("{name}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("opening a log file");
        Self::spawn_logging_to(name, command, log, file)
    }

    fn spawn_logging_to(name: &'static str, mut command: Command, log: PathBuf, file: std::fs::File) -> NodeProcess {
        let stderr = file.try_clone().expect("cloning a file handle");
        // An error exit prints its cause chain only (panics keep RUST_BACKTRACE's backtrace):
        // with a backtrace, a port taken by another test ("Address already in use") fell
        // out of the log tail that `spawn_cluster_with` looks at to start again.
        command
            .env("RUST_LIB_BACKTRACE", "0")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(stderr));
        let child = command
            .spawn()
            .unwrap_or_else(|error| panic!("starting {name} ({command:?}): {error}"));
        NodeProcess { name, child, log }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`, …) to process `pid`, one this test started;
/// false when `kill` failed (the process is gone).
pub fn signal_pid(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "run `cargo build --workspace --bins` first")]
    fn a_missing_node_binary_says_how_to_build_it() {
        node_binary("no-such-node");
    }
}
