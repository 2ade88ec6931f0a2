//! The one process supervisor: starts a process detached in its own session, records it so
//! that a later command finds that very process again, tells alive from gone, and stops it.
//!
//! A process is identified by its PID *and* its kernel start time (`/proc/PID/stat` field 22,
//! clock ticks since boot): a PID reused by another process after ours ended has another
//! start time, so a stale record never leads to signalling a stranger. A zombie counts as
//! gone (it has exited; only its parent has not reaped it yet).
//!
//! A record in a directory is `NAME.pid` (bare PID), `NAME.start` (start time) and `NAME.cmd`
//! (the command line, NUL-separated, so that the process can be started again as it was);
//! its output goes to `NAME.log`, appended to or rotated to `NAME.log.prev` at start.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal;
pub use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// Why a process could not be started or its record read.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("starting {program}: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("{0}: not a recorded command line")]
    BadRecord(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SuperviseError + '_ {
    move |source| SuperviseError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One running (or once running) process: its PID and kernel start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    /// Clock ticks since boot; `None` when it could not be read (the process was gone).
    pub start_time: Option<u64>,
}

/// The fields of `/proc/PID/stat` after the parenthesised command name (field 3 on).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    fields_of_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The fields of a `/proc/PID/stat` line after the parenthesised command name.
fn fields_of_stat(stat: &str) -> Option<Vec<String>> {
    // The command name may hold spaces and parentheses: the last ')' ends it.
    let rest = &stat[stat.rfind(") ")? + 2..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The parent PID in a `/proc/PID/stat` line (its fourth field).
fn parent_of_stat(stat: &str) -> Option<u32> {
    fields_of_stat(stat)?.get(1)?.parse().ok()
}

/// The kernel start time of `pid` (field 22), if it exists.
pub fn start_time_of(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Whether `pid` exists and has not exited (a zombie or dead task has: `Z`, `X`).
pub fn is_alive(pid: u32) -> bool {
    stat_fields(pid)
        .and_then(|fields| fields.first().cloned())
        .is_some_and(|state| state != "Z" && state != "X")
}

/// The children of `pid` (by their parent PID in `/proc`).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| parent_of_stat(&stat))
                .is_some_and(|parent| parent == pid)
        })
        .collect()
}

/// How a stop went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// It was not running.
    NotRunning,
    /// It exited after the first signal.
    Exited,
    /// It outlived the timeout and was killed (SIGKILL).
    Killed,
    /// It survived SIGKILL too (5 s): something holds it (uninterruptible sleep).
    Stuck,
}

impl Process {
    /// The process `pid` as it is now (its start time read from `/proc`).
    pub fn of(pid: u32) -> Process {
        Process {
            pid,
            start_time: start_time_of(pid),
        }
    }

    /// Alive, not a zombie, and still the same process (same start time).
    pub fn is_running(&self) -> bool {
        is_alive(self.pid) && (self.start_time.is_none() || start_time_of(self.pid) == self.start_time)
    }

    /// Sends `signal` if it is still the recorded process; false when it is gone.
    pub fn signal(&self, signal: Signal) -> bool {
        self.is_running() && signal::kill(Pid::from_raw(self.pid as i32), signal).is_ok()
    }

    /// Waits until it is gone; false at the timeout.
    pub fn wait_for_exit(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.is_running() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Sends `graceful` (SIGTERM; nginx's master: SIGQUIT), waits up to `timeout`, then
    /// SIGKILL — with `with_children`, its children too (nginx's workers would outlive a
    /// killed master).
    pub fn stop(&self, graceful: Signal, timeout: Duration, with_children: bool) -> Stopped {
        if !self.signal(graceful) {
            return Stopped::NotRunning;
        }
        if self.wait_for_exit(timeout) {
            return Stopped::Exited;
        }
        let children = if with_children {
            children_of(self.pid)
        } else {
            Vec::new()
        };
        self.signal(Signal::SIGKILL);
        for child in children {
            let _ = signal::kill(Pid::from_raw(child as i32), Signal::SIGKILL);
        }
        if self.wait_for_exit(Duration::from_secs(5)) {
            Stopped::Killed
        } else {
            Stopped::Stuck
        }
    }

    /// Whether the process handles `signal` (its `SigCgt` mask in `/proc/PID/status`): nginx
    /// still starting has not installed its SIGHUP handler, and SIGHUP would kill it.
    pub fn catches(&self, signal: Signal) -> bool {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", self.pid)) else {
            return false;
        };
        status
            .lines()
            .find_map(|line| line.strip_prefix("SigCgt:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .is_some_and(|mask| mask & (1 << (signal as i32 - 1)) != 0)
    }
}

/// What to start: a program, its arguments and environment, where its output goes.
#[derive(Debug, Clone)]
pub struct Spawn {
    /// The command line, program first.
    pub command: Vec<String>,
    /// Set in the process's environment (on top of the inherited one).
    pub env: Vec<(String, String)>,
    /// Its stdout and stderr.
    pub log: PathBuf,
    /// Append to the log; else an existing log is moved to `LOG.prev` first.
    pub append: bool,
    /// Run on these CPUs only (`taskset -c LIST`, e.g. `1` or `0,2-3`).
    pub cpus: Option<String>,
}

impl Spawn {
    pub fn new(command: Vec<String>, log: impl Into<PathBuf>) -> Spawn {
        Spawn {
            command,
            env: Vec::new(),
            log: log.into(),
            append: false,
            cpus: None,
        }
    }

    /// The command line as run (with the `taskset` prefix when pinned): what a record keeps.
    pub fn full_command(&self) -> Vec<String> {
        let mut command = Vec::new();
        if let Some(cpus) = &self.cpus {
            command.extend(["taskset".to_owned(), "-c".to_owned(), cpus.clone()]);
        }
        command.extend(self.command.iter().cloned());
        command
    }

    /// Starts it in its own session (`setsid`: no terminal, a Ctrl-C to the caller does not
    /// reach it), stdin from /dev/null. The child is not a process-group leader, so `setsid`
    /// execs in place and the PID is the process's own (as is `taskset`'s exec).
    pub fn start(&self) -> Result<Process, SuperviseError> {
        if self.command.is_empty() {
            return Err(SuperviseError::Spawn {
                program: String::new(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command"),
            });
        }
        if !self.append && self.log.exists() {
            let mut previous = self.log.clone().into_os_string();
            previous.push(".prev");
            std::fs::rename(&self.log, &previous).map_err(io(&self.log))?;
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io(&self.log))?;
        let stderr = log.try_clone().map_err(io(&self.log))?;
        let child = Command::new("setsid")
            .args(self.full_command())
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(|source| SuperviseError::Spawn {
                program: self.command[0].clone(),
                source,
            })?;
        // Not waited for: the caller exits soon and the process is re-parented; until then
        // an exited child is a zombie, which `is_running` counts as gone.
        let pid = child.id();
        drop(child);
        Ok(Process::of(pid))
    }
}

/// The records of processes in one directory (a local cluster's run dir).
#[derive(Debug, Clone)]
pub struct Records {
    pub dir: PathBuf,
}

impl Records {
    pub fn new(dir: impl Into<PathBuf>) -> Records {
        Records { dir: dir.into() }
    }

    pub fn pid_file(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.pid"))
    }

    pub fn start_file(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.start"))
    }

    pub fn command_file(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.cmd"))
    }

    pub fn log_file(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    /// Starts `spawn` and records it as `name` (its command line too).
    pub fn start(&self, name: &str, spawn: &Spawn) -> Result<Process, SuperviseError> {
        let command_file = self.command_file(name);
        let line: String = spawn.full_command().iter().map(|word| format!("{word}\0")).collect();
        std::fs::write(&command_file, line).map_err(io(&command_file))?;
        let process = spawn.start()?;
        self.record(name, process)?;
        Ok(process)
    }

    /// Records `process` as `name`.
    pub fn record(&self, name: &str, process: Process) -> Result<(), SuperviseError> {
        let pid_file = self.pid_file(name);
        std::fs::write(&pid_file, format!("{}\n", process.pid)).map_err(io(&pid_file))?;
        let start_file = self.start_file(name);
        match process.start_time {
            Some(start) => std::fs::write(&start_file, format!("{start}\n")).map_err(io(&start_file))?,
            None => {
                let _ = std::fs::remove_file(&start_file);
            }
        }
        Ok(())
    }

    /// The recorded process `name`, whether or not it still runs; `None` without a record.
    pub fn recorded(&self, name: &str) -> Option<Process> {
        let pid_text = std::fs::read_to_string(self.pid_file(name)).ok()?;
        let digits: String = pid_text.chars().filter(char::is_ascii_digit).collect();
        let pid = digits.parse().ok()?;
        let start_time = std::fs::read_to_string(self.start_file(name))
            .ok()
            .and_then(|text| text.trim().parse().ok());
        Some(Process { pid, start_time })
    }

    /// The recorded process `name` if that very process still runs.
    pub fn running(&self, name: &str) -> Option<Process> {
        self.recorded(name).filter(Process::is_running)
    }

    /// Removes the record of `name` (not its command line or log).
    pub fn forget(&self, name: &str) {
        let _ = std::fs::remove_file(self.pid_file(name));
        let _ = std::fs::remove_file(self.start_file(name));
    }

    /// The command line `name` was last started with.
    pub fn command(&self, name: &str) -> Result<Vec<String>, SuperviseError> {
        let path = self.command_file(name);
        let bytes = std::fs::read(&path).map_err(io(&path))?;
        let text = String::from_utf8(bytes).map_err(|_| SuperviseError::BadRecord(path.clone()))?;
        let words: Vec<String> = text.split_terminator('\0').map(str::to_owned).collect();
        if words.is_empty() {
            return Err(SuperviseError::BadRecord(path));
        }
        Ok(words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleep_spawn(dir: &Path, seconds: &str) -> Spawn {
        Spawn::new(vec!["sleep".to_owned(), seconds.to_owned()], dir.join("sleep.log"))
    }

    #[test]
    fn a_parent_is_read_past_a_command_name_with_parentheses() {
        assert_eq!(
            parent_of_stat("42 (a) b) S 7 42 42 0"),
            Some(7),
            "a command name with ') '"
        );
        assert_eq!(parent_of_stat("garbage"), None);
    }

    #[test]
    fn a_started_process_is_recorded_found_and_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::new(dir.path());
        let process = records.start("sleeper", &sleep_spawn(dir.path(), "30")).unwrap();
        assert!(process.start_time.is_some());
        assert_eq!(records.running("sleeper"), Some(process));
        assert_eq!(records.command("sleeper").unwrap(), ["sleep", "30"]);
        // Its own session: setsid ran in place, so the PID is the session's leader (once
        // setsid has exec'd the command).
        let deadline = Instant::now() + Duration::from_secs(5);
        while !std::fs::read_to_string(format!("/proc/{}/comm", process.pid)).is_ok_and(|comm| comm.trim() == "sleep") {
            assert!(Instant::now() < deadline, "sleep never ran");
            std::thread::sleep(Duration::from_millis(10));
        }
        let session = stat_fields(process.pid).unwrap()[3].clone();
        assert_eq!(session, process.pid.to_string());
        assert_eq!(
            process.stop(Signal::SIGTERM, Duration::from_secs(5), false),
            Stopped::Exited
        );
        assert!(!process.is_running());
        assert_eq!(records.running("sleeper"), None);
        assert_eq!(
            process.stop(Signal::SIGTERM, Duration::from_secs(1), false),
            Stopped::NotRunning
        );
        records.forget("sleeper");
        assert_eq!(records.recorded("sleeper"), None);
    }

    #[test]
    fn another_start_time_is_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::new(dir.path());
        let process = records.start("sleeper", &sleep_spawn(dir.path(), "30")).unwrap();
        // The same PID with another start time: a reused PID, not ours; never signalled.
        let stranger = Process {
            pid: process.pid,
            start_time: process.start_time.map(|start| start + 1),
        };
        records.record("sleeper", stranger).unwrap();
        assert_eq!(records.running("sleeper"), None);
        assert_eq!(
            stranger.stop(Signal::SIGKILL, Duration::from_secs(1), false),
            Stopped::NotRunning
        );
        assert!(process.is_running());
        assert_eq!(
            process.stop(Signal::SIGKILL, Duration::from_secs(5), false),
            Stopped::Exited
        );
    }

    #[test]
    fn a_process_that_ignores_the_signal_is_killed_with_its_children() {
        let dir = tempfile::tempdir().unwrap();
        // A parent that ignores SIGTERM, with a child (as nginx's master and workers).
        let spawn = Spawn::new(
            vec![
                "sh".to_owned(),
                "-c".to_owned(),
                "trap '' TERM; sleep 30 & echo started; wait".to_owned(),
            ],
            dir.path().join("stubborn.log"),
        );
        let process = spawn.start().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while children_of(process.pid).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let children = children_of(process.pid);
        assert_eq!(children.len(), 1, "the sleep child");
        let child = Process::of(children[0]);
        assert_eq!(
            process.stop(Signal::SIGTERM, Duration::from_millis(300), true),
            Stopped::Killed
        );
        assert!(
            child.wait_for_exit(Duration::from_secs(5)),
            "the child went with its parent"
        );
        assert!(std::fs::read_to_string(&spawn.log).unwrap().contains("started"));
    }

    #[test]
    fn a_zombie_is_not_alive_and_logs_rotate_or_append() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("echo.log");
        let echo = |text: &str, append: bool| {
            let mut spawn = Spawn::new(vec!["echo".to_owned(), text.to_owned()], &log);
            spawn.append = append;
            spawn.cpus = Some("0".to_owned());
            spawn.start().unwrap()
        };
        let first = echo("one", false);
        // Not reaped by this (its parent) process: a zombie once it has exited.
        assert!(first.wait_for_exit(Duration::from_secs(5)));
        assert!(
            std::fs::metadata(format!("/proc/{}", first.pid)).is_ok(),
            "the zombie stays until reaped"
        );
        assert!(!is_alive(first.pid));
        echo("two", true).wait_for_exit(Duration::from_secs(5));
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\ntwo\n");
        echo("three", false).wait_for_exit(Duration::from_secs(5));
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "three\n");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("echo.log.prev")).unwrap(),
            "one\ntwo\n"
        );
    }

    #[test]
    fn a_process_catching_a_signal_shows_in_its_mask() {
        let dir = tempfile::tempdir().unwrap();
        let spawn = Spawn::new(
            vec![
                "sh".to_owned(),
                "-c".to_owned(),
                "trap 'exit 0' HUP; echo ready; while :; do sleep 0.05; done".to_owned(),
            ],
            dir.path().join("hup.log"),
        );
        let process = spawn.start().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !process.catches(Signal::SIGHUP) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(process.catches(Signal::SIGHUP));
        assert!(!process.catches(Signal::SIGUSR2));
        assert!(process.signal(Signal::SIGHUP));
        assert!(process.wait_for_exit(Duration::from_secs(5)));
    }
}
