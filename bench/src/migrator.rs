//! `isuctl bench --migrate-every S`: during the load, a random slot moves to another cell
//! every S seconds (live migration, `isuctl cells random` against the cluster); each outcome
//! is a line of the run's `migrations.log` (`ok <time>` or `FAILED <time>`, after the
//! command's own output), and the run must still pass.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::periodic::{append_line, run_logged, Periodic};
use shared::clock::clock_time;

/// The live migrations of one run, as its log lists them.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migrations {
    pub done: u32,
    pub failed: u32,
    pub log: PathBuf,
}

/// Moves a random slot every few seconds until stopped.
pub struct Migrator(Periodic<Migrations>);

impl Migrator {
    /// `migrate` is the command of one migration (`cells random` against the cluster).
    pub fn start(
        migrate: impl Fn() -> Command + Send + 'static,
        log: PathBuf,
        first_after: Duration,
        every: Duration,
    ) -> Migrator {
        let migrations = Migrations {
            log: log.clone(),
            ..Migrations::default()
        };
        Migrator(Periodic::start(first_after, every, migrations, move |migrations| {
            let moved = run_logged(migrate(), &log);
            if moved {
                migrations.done += 1;
            } else {
                migrations.failed += 1;
            }
            let line = if moved { "ok" } else { "FAILED" };
            append_line(&log, &format!("{line} {}", clock_time()));
        }))
    }

    /// Stops after the migration in progress, if any, and returns the count.
    pub fn stop(self) -> Migrations {
        self.0.stop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migrator_counts_and_logs_each_move_until_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("migrations.log");
        let flag = dir.path().join("fail-now");
        let script = format!("echo moving; test ! -e {}", flag.display());
        let migrator = Migrator::start(
            move || {
                let mut command = Command::new("sh");
                command.args(["-c", &script]);
                command
            },
            log.clone(),
            Duration::ZERO,
            Duration::from_millis(20),
        );
        std::thread::sleep(Duration::from_millis(150));
        std::fs::write(&flag, "").unwrap();
        std::thread::sleep(Duration::from_millis(150));
        let migrations = migrator.stop();

        assert!(migrations.done >= 2 && migrations.failed >= 2, "{migrations:?}");
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len() as u32, 2 * (migrations.done + migrations.failed), "{text}");
        assert_eq!(
            lines.iter().filter(|line| line.starts_with("ok ")).count() as u32,
            migrations.done
        );
        assert_eq!(
            lines.iter().filter(|line| line.starts_with("FAILED ")).count() as u32,
            migrations.failed
        );
        assert!(lines.iter().step_by(2).all(|line| *line == "moving"), "{text}");
    }
}
