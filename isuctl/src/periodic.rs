//! A thread that takes one step after a first wait and then every interval until it is
//! stopped, and hands back what its steps accumulated: the bench's live migrations
//! (`--migrate-every`) and leader kills (`--kill-leader-every`).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
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
