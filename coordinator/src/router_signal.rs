//! Tells the router to load a rewritten map: SIGHUP to nginx's master process, whose PID
//! nginx keeps in its own `pid` file (`--router-pid-file`). No shell and no subprocess: the
//! coordinator reads the file and sends the signal itself.
//!
//! A process is signalled only when it is an nginx that catches SIGHUP (`/proc/PID/status`:
//! `Name: nginx…` and bit 1 of `SigCgt`): a stale file whose PID now belongs to some other
//! process never gets that process a signal (SIGHUP kills a process that does not catch it).
//! nginx installs its signal handlers before it writes its pid file, but a supervisor may
//! record the PID it spawned in the same file first (`scripts/cluster` does): an nginx that
//! does not catch SIGHUP yet is waited for, up to `STARTING_WAIT` (10 s). A PID that is not
//! nginx yet (the supervisor's fork before it executes nginx) is not signalled: that nginx
//! reads the map, already rewritten, when it starts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How long an nginx that does not catch SIGHUP yet (still starting) is waited for.
const STARTING_WAIT: Duration = Duration::from_secs(10);

/// How often a starting nginx is looked at again.
const STARTING_POLL: Duration = Duration::from_millis(20);

/// Why nginx was not signalled. [`SignalError::is_not_running`] tells the expected cases
/// (no nginx yet) from the ones an operator must look at.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    #[error("no pid file {}: nginx is not running (it reads the map when it starts)", path.display())]
    NoPidFile { path: PathBuf },
    #[error("reading the pid file {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the pid file {} holds {content:?}, not a process id", path.display())]
    Garbled { path: PathBuf, content: String },
    #[error("nginx (pid {pid} in {}) is not running (it reads the map when it starts)", path.display())]
    NotRunning { pid: i32, path: PathBuf },
    #[error("pid {pid} in {} is {name:?}, not nginx: not signalled", path.display())]
    NotNginx { pid: i32, path: PathBuf, name: String },
    #[error("nginx (pid {pid}) does not catch SIGHUP after {STARTING_WAIT:?}: not signalled")]
    NotCatchingHup { pid: i32 },
    #[error("sending SIGHUP to nginx (pid {pid}): {source}")]
    Kill { pid: i32, source: nix::Error },
}

impl SignalError {
    /// No nginx runs (yet): nothing to reload, the next nginx reads the map itself.
    pub fn is_not_running(&self) -> bool {
        matches!(self, SignalError::NoPidFile { .. } | SignalError::NotRunning { .. })
    }
}

/// Sends SIGHUP to the nginx master named by `pid_file` (a graceful reload: new workers
/// with the new configuration, the old ones finish their requests); returns its PID.
pub async fn reload_nginx(pid_file: &Path) -> Result<i32, SignalError> {
    let pid = read_pid(pid_file).await?;
    let deadline = tokio::time::Instant::now() + STARTING_WAIT;
    loop {
        let Some(status) = ProcessStatus::read(pid).await else {
            return Err(SignalError::NotRunning {
                pid,
                path: pid_file.to_owned(),
            });
        };
        if !status.name.starts_with("nginx") {
            return Err(SignalError::NotNginx {
                pid,
                path: pid_file.to_owned(),
                name: status.name,
            });
        }
        if status.catches_hup {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(SignalError::NotCatchingHup { pid });
        }
        tokio::time::sleep(STARTING_POLL).await;
    }
    match kill(Pid::from_raw(pid), Signal::SIGHUP) {
        Ok(()) => Ok(pid),
        Err(nix::Error::ESRCH) => Err(SignalError::NotRunning {
            pid,
            path: pid_file.to_owned(),
        }),
        Err(source) => Err(SignalError::Kill { pid, source }),
    }
}

/// The PID in nginx's pid file (decimal, a newline after it).
async fn read_pid(path: &Path) -> Result<i32, SignalError> {
    let text = match tokio::fs::read_to_string(path).await {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(SignalError::NoPidFile { path: path.to_owned() })
        }
        Err(source) => {
            return Err(SignalError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    // 0 and negative numbers name process groups to kill(2), never one process.
    match text.trim().parse::<i32>() {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(SignalError::Garbled {
            path: path.to_owned(),
            content: text.chars().take(40).collect(),
        }),
    }
}

/// What `/proc/PID/status` says of a live process.
struct ProcessStatus {
    /// The executable's name (at most 15 bytes), e.g. `nginx`.
    name: String,
    /// Whether the process has a SIGHUP handler.
    catches_hup: bool,
}

impl ProcessStatus {
    /// `None` when no such process runs (a zombie counts as gone).
    async fn read(pid: i32) -> Option<ProcessStatus> {
        let status = tokio::fs::read_to_string(format!("/proc/{pid}/status")).await.ok()?;
        let field = |key: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
                .map(str::trim)
        };
        if field("State").is_some_and(|state| state.starts_with('Z') || state.starts_with('X')) {
            return None;
        }
        let caught = field("SigCgt").and_then(|mask| u64::from_str_radix(mask, 16).ok())?;
        Some(ProcessStatus {
            name: field("Name")?.to_owned(),
            catches_hup: caught & (1 << (Signal::SIGHUP as i32 - 1)) != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("router-signal-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("nginx.pid")
    }

    #[tokio::test]
    async fn a_missing_or_garbled_pid_file_is_an_error_not_a_signal() {
        let path = scratch("garbled");
        let _ = std::fs::remove_file(&path);
        let error = reload_nginx(&path).await.unwrap_err();
        assert!(
            matches!(error, SignalError::NoPidFile { .. }) && error.is_not_running(),
            "{error}"
        );
        for garbled in ["", "\n", "nginx\n", "0\n", "-1\n", "12 13\n", "99999999999\n"] {
            std::fs::write(&path, garbled).unwrap();
            let error = reload_nginx(&path).await.unwrap_err();
            assert!(matches!(error, SignalError::Garbled { .. }), "{garbled:?}: {error}");
            assert!(!error.is_not_running(), "{garbled:?}");
        }
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[tokio::test]
    async fn a_dead_pid_or_a_process_that_is_not_nginx_gets_no_signal() {
        let path = scratch("dead");
        // PIDs are below pid_max: this one cannot be running.
        let pid_max: i32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        std::fs::write(&path, format!("{pid_max}\n")).unwrap();
        let error = reload_nginx(&path).await.unwrap_err();
        assert!(
            matches!(error, SignalError::NotRunning { .. }) && error.is_not_running(),
            "{error}"
        );
        // This test process does not catch SIGHUP: a signal would end it here.
        std::fs::write(&path, format!("{}\n", std::process::id())).unwrap();
        let error = reload_nginx(&path).await.unwrap_err();
        assert!(matches!(error, SignalError::NotNginx { .. }), "{error}");
        assert!(error.to_string().contains("not nginx: not signalled"), "{error}");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
