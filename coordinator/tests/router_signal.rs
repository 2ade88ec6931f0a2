//! `router_signal::reload_nginx` against a real nginx: the master its own pid file names
//! gets SIGHUP and starts new worker processes (a graceful reload), also when a supervisor
//! recorded the PID before nginx could catch the signal; a stopped nginx is reported as not
//! running, and nothing is signalled.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use coordinator::router_signal::{reload_nginx, SignalError};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// nginx on the PATH or at /usr/sbin/nginx; `None` (the test then skips, saying why) when
/// it is not installed, except under CI, where its absence is a failure.
fn nginx_or_skip() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nginx"))
            .find(|candidate| candidate.is_file())
    });
    let nginx = on_path.or_else(|| Some(PathBuf::from("/usr/sbin/nginx")).filter(|path| path.is_file()));
    if nginx.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "nginx is not installed (apt-get install -y nginx-light) and CI is set"
        );
        eprintln!("skipping: nginx is not installed (apt-get install -y nginx-light)");
    }
    nginx
}

/// An nginx with one worker process and no server, its files in its own directory; killed
/// (master and workers) when dropped.
struct Nginx {
    child: Child,
    dir: PathBuf,
    pid_file: PathBuf,
}

impl Nginx {
    fn start(nginx: &Path, name: &str) -> Nginx {
        let dir = std::env::temp_dir().join(format!("router-signal-nginx-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("nginx.pid");
        let _ = std::fs::remove_file(&pid_file);
        let config = dir.join("nginx.conf");
        std::fs::write(
            &config,
            format!(
                "daemon off;\nworker_processes 1;\npid {};\nerror_log {}/error.log warn;\nevents {{ worker_connections 16; }}\nhttp {{ access_log off; }}\n",
                pid_file.display(),
                dir.display()
            ),
        )
        .unwrap();
        let child = Command::new(nginx)
            .arg("-p")
            .arg(format!("{}/", dir.display()))
            .arg("-c")
            .arg(&config)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting nginx");
        Nginx { child, dir, pid_file }
    }

    fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    /// The master's worker processes.
    fn workers(&self) -> Vec<i32> {
        let pid = self.pid();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|child| child.parse().ok())
            .collect()
    }

    /// Waits until `check` holds, or fails with `what` (and nginx's error log) after 10 s.
    fn wait_until(&mut self, what: &str, check: impl Fn(&Nginx) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !check(self) {
            let exited = self.child.try_wait().unwrap();
            if exited.is_some() || Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
                panic!("{what} (nginx exited: {exited:?}); error log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        let workers = self.workers();
        let _ = kill(Pid::from_raw(self.pid()), Signal::SIGKILL);
        let _ = self.child.wait();
        for worker in workers {
            let _ = kill(Pid::from_raw(worker), Signal::SIGKILL);
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn sighup_reaches_the_nginx_master_of_the_pid_file_and_it_starts_new_workers() {
    let Some(binary) = nginx_or_skip() else { return };
    let mut nginx = Nginx::start(&binary, "reload");
    let pid = nginx.pid();
    nginx.wait_until("nginx wrote its pid file and started its worker", |nginx| {
        std::fs::read_to_string(&nginx.pid_file).is_ok_and(|text| text.trim() == pid.to_string())
            && !nginx.workers().is_empty()
    });
    let before = nginx.workers();

    assert_eq!(reload_nginx(&nginx.pid_file).await.unwrap(), pid);
    nginx.wait_until("a new worker after SIGHUP", |nginx| {
        nginx.workers().iter().any(|worker| !before.contains(worker))
    });

    // Stopped (as if killed: its pid file stays): not running, and no signal is sent.
    nginx.stop();
    let error = reload_nginx(&nginx.pid_file).await.unwrap_err();
    assert!(
        matches!(error, SignalError::NotRunning { .. }) && error.is_not_running(),
        "{error}"
    );
}

#[tokio::test]
async fn an_nginx_recorded_before_it_catches_sighup_is_waited_for_not_killed() {
    let Some(binary) = nginx_or_skip() else { return };
    let mut nginx = Nginx::start(&binary, "starting");
    let pid = nginx.pid();
    // As scripts/cluster does: the supervisor records the PID it spawned, at once.
    std::fs::write(&nginx.pid_file, format!("{pid}\n")).unwrap();
    assert_eq!(reload_nginx(&nginx.pid_file).await.unwrap(), pid);
    nginx.wait_until("nginx runs on with a worker", |nginx| !nginx.workers().is_empty());
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        nginx.child.try_wait().unwrap().is_none(),
        "SIGHUP ended a starting nginx"
    );
}
