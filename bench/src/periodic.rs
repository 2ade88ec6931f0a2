//! A thread that takes one step after a first wait and then every interval until it is
//! stopped, and hands back what its steps accumulated: the live migrations
//! ([`crate::migrator`]) and leader kills ([`crate::takeover`]) run beside the load. Each
//! step says what it did in a log of its own ([`append_line`], [`run_logged`],
//! [`shared::clock::clock_time`]).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

pub struct Periodic<T> {
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<T>,
}

impl<T: Send + Default + 'static> Periodic<T> {
    /// Runs `step` on `state` after `first_after`, then every `every` (from the end of one
    /// step to the start of the next).
    pub fn start(
        first_after: Duration,
        every: Duration,
        mut state: T,
        mut step: impl FnMut(&mut T) + Send + 'static,
    ) -> Periodic<T> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut wait = first_after;
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(wait) {
                step(&mut state);
                wait = every;
            }
            state
        });
        Periodic { stop, thread }
    }

    /// Stops after the step in progress, if any, and returns the state.
    pub fn stop(self) -> T {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or_default()
    }
}

/// Appends `line` to `log` (best effort: a log that cannot be written loses the line).
pub fn append_line(log: &Path, line: &str) {
    if let Ok(mut file) = OpenOptions::new().create(true).append(true).open(log) {
        let _ = writeln!(file, "{line}");
    }
}

/// Runs `command` with its output appended to `log`; whether it succeeded.
pub fn run_logged(mut command: Command, log: &Path) -> bool {
    let Ok(file) = OpenOptions::new().create(true).append(true).open(log) else {
        return false;
    };
    let Ok(errors) = file.try_clone() else {
        return false;
    };
    command
        .stdout(file)
        .stderr(errors)
        .status()
        .is_ok_and(|status| status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_command_appends_its_output_and_says_whether_it_succeeded() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("steps.log");
        let shell = |script: &str| {
            let mut command = Command::new("sh");
            command.args(["-c", script]);
            command
        };
        assert!(run_logged(shell("echo one"), &log));
        append_line(&log, "between");
        assert!(!run_logged(shell("echo two >&2; exit 3"), &log));
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\nbetween\ntwo\n");
    }
}
