//! End-to-end test of netlab with real network namespaces: two namespaces,
//! one port each, TCP echo traffic between them through the router, and the
//! control commands that delay, drop, cut and heal it.
//!
//! Needs root, `ip` and `python3` (the echo server and client run as python
//! one-off scripts inside the namespaces); without them the test prints why
//! and passes. Everything it creates (namespaces, the netlab process, the
//! echo servers, the socket) is removed by a drop guard, even on failure.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const NETLAB: &str = env!("CARGO_BIN_EXE_netlab");
const ADDR_A: &str = "10.203.0.1";
const ADDR_B: &str = "10.203.0.2";
const PORT: &str = "7000";

/// TCP echo server: argv = port, lifetime in seconds. Prints `listening`;
/// exits when its stdin closes or its lifetime ends, whichever comes first.
const SERVER: &str = r#"
import os, socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(64)
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
threading.Timer(float(sys.argv[2]), lambda: os._exit(0)).start()
print("listening", flush=True)
def serve(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with c:
        while True:
            d = c.recv(65536)
            if not d:
                return
            c.sendall(d)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// TCP echo client: argv = host, port, round trips, connect timeout (s).
/// Prints `ok MEDIAN_MS MIN_MS CONNECT_MS`, or `timeout` (exit 3).
const CLIENT: &str = r#"
import socket, statistics, sys, time
host, port, count, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
t0 = time.monotonic()
try:
    c = socket.create_connection((host, port), timeout=timeout)
except (socket.timeout, TimeoutError):
    print("timeout", flush=True)
    sys.exit(3)
connect = time.monotonic() - t0
c.settimeout(10)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
msg = b"x" * 64
for _ in range(count):
    t = time.monotonic()
    c.sendall(msg)
    got = b""
    while len(got) < len(msg):
        d = c.recv(65536)
        if not d:
            print("closed", flush=True)
            sys.exit(4)
        got += d
    rtts.append(time.monotonic() - t)
print("ok %.3f %.3f %.3f" % (statistics.median(rtts) * 1e3, min(rtts) * 1e3, connect * 1e3), flush=True)
"#;

/// Why the test cannot run here, if it cannot.
fn skip_reason() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not running as root".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    for (tool, arg) in [("ip", "-V"), ("python3", "--version")] {
        let ok = Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !ok.is_ok_and(|s| s.success()) {
            return Some(format!("`{tool}` is not available"));
        }
    }
    None
}

/// Owns everything the test creates and removes it on drop.
struct Lab {
    namespaces: Vec<String>,
    socket: PathBuf,
    log: PathBuf,
    netlab: Option<Child>,
    servers: Vec<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for server in &mut self.servers {
            drop(server.stdin.take()); // the server exits when its stdin closes
            let _ = server.kill();
            let _ = server.wait();
        }
        if let Some(mut netlab) = self.netlab.take() {
            let _ = netlab.kill();
            let _ = netlab.wait();
        }
        if thread::panicking() {
            if let Ok(log) = std::fs::read_to_string(&self.log) {
                eprintln!("---- netlab log ----\n{log}--------------------");
            }
        }
        for ns in &self.namespaces {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.log);
    }
}

impl Lab {
    fn ns(&self, i: usize) -> &str {
        &self.namespaces[i]
    }

    /// Runs `netlab ctl` and returns (success, stdout, stderr).
    fn ctl(&self, command: &str) -> (bool, String, String) {
        let out = run_bounded(
            Command::new(NETLAB)
                .arg("ctl")
                .arg(&self.socket)
                .args(command.split_whitespace()),
            Duration::from_secs(15),
        );
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `netlab ctl` that must succeed; returns its output.
    fn ctl_ok(&self, command: &str) -> String {
        let (ok, out, err) = self.ctl(command);
        assert!(ok, "`{command}` failed: {out}{err}");
        out
    }

    /// Starts an echo server in namespace `i` and waits until it listens.
    fn start_server(&mut self, i: usize) {
        let mut child = Command::new("ip")
            .args(["netns", "exec", self.ns(i), "python3", "-c", SERVER, PORT, "120"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning echo server");
        let lines = line_channel(child.stdout.take().unwrap());
        self.servers.push(child);
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("echo server did not start");
        assert_eq!(line, "listening");
    }

    /// Runs the echo client in namespace `i` against `addr`; returns its
    /// first output line (`ok ...` or `timeout`).
    fn client(&self, i: usize, addr: &str, round_trips: u32, connect_timeout_s: f64) -> String {
        let out = run_bounded(
            Command::new("ip")
                .args(["netns", "exec", self.ns(i), "python3", "-c", CLIENT, addr, PORT])
                .args([round_trips.to_string(), connect_timeout_s.to_string()]),
            Duration::from_secs(30),
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Median round-trip time in ms from a client run that must succeed.
    fn rtt_ms(&self, i: usize, addr: &str, round_trips: u32) -> f64 {
        let line = self.client(i, addr, round_trips, 5.0);
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            fields.first(),
            Some(&"ok"),
            "client in {} to {addr}: `{line}`",
            self.ns(i)
        );
        fields[1].parse().unwrap()
    }
}

/// Sends each line of `out` through a channel, from a helper thread.
fn line_channel(out: ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Runs a command to completion with its output captured, killing it and
/// failing the test if it outlives `limit`.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let status = wait_bounded(&mut child, limit);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{cmd:?} did not finish within {limit:?}");
    }
    child.wait_with_output().expect("collecting output")
}

/// Waits up to `limit` for `child` to exit.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        thread::sleep(Duration::from_millis(10));
    }
    None
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).status().is_ok_and(|s| s.success())
}

/// Row `src dst packets bytes cut lost overflow` of a `stats` answer.
fn stats_row(stats: &str, src: &str, dst: &str) -> Vec<u64> {
    let row = stats
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() == 7 && f[0] == src && f[1] == dst)
        .unwrap_or_else(|| panic!("no {src}->{dst} row in:\n{stats}"));
    row[2..].iter().map(|v| v.parse().unwrap()).collect()
}

#[test]
fn forwards_delays_cuts_and_heals_between_namespaces() {
    if let Some(reason) = skip_reason() {
        println!("skipping netlab namespace test: {reason}");
        return;
    }
    let started = Instant::now();
    let pid = std::process::id();
    let tmp = std::env::temp_dir();
    let mut lab = Lab {
        namespaces: Vec::new(),
        socket: tmp.join(format!("nlt-{pid}.sock")),
        log: tmp.join(format!("nlt-{pid}.log")),
        netlab: None,
        servers: Vec::new(),
    };
    for suffix in ["a", "b"] {
        let ns = format!("nlt-{pid}-{suffix}");
        if !ip(&["netns", "add", &ns]) {
            println!("skipping netlab namespace test: `ip netns add` failed");
            return;
        }
        lab.namespaces.push(ns.clone());
        assert!(ip(&["-n", &ns, "link", "set", "lo", "up"]));
    }

    // Start netlab and wait for `ready`.
    let mut child = Command::new(NETLAB)
        .arg("run")
        .arg("--control")
        .arg(&lab.socket)
        .args(["--port", &format!("a:{}:nl0:{ADDR_A}/24", lab.ns(0))])
        .args(["--port", &format!("b:{}:nl0:{ADDR_B}/24", lab.ns(1))])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(File::create(&lab.log).expect("creating log file"))
        .spawn()
        .expect("spawning netlab");
    let ready = line_channel(child.stdout.take().unwrap());
    lab.netlab = Some(child);
    assert_eq!(
        ready.recv_timeout(Duration::from_secs(20)).as_deref(),
        Ok("ready"),
        "netlab never said ready"
    );
    assert_eq!(lab.ctl_ok("ping").trim(), "ok");

    // TCP both ways.
    lab.start_server(0);
    lab.start_server(1);
    let base_ab = lab.rtt_ms(0, ADDR_B, 20);
    let base_ba = lab.rtt_ms(1, ADDR_A, 20);
    println!("baseline median RTT a->b {base_ab:.3} ms, b->a {base_ba:.3} ms");

    // 50 ms each way: the round trip grows by about 100 ms.
    lab.ctl_ok("impair all delay=50ms");
    assert!(lab.ctl_ok("rules").contains("impair all delay=50ms"));
    let slow = lab.rtt_ms(0, ADDR_B, 5);
    println!("median RTT with delay=50ms: {slow:.3} ms");
    assert!(
        slow >= base_ab + 90.0,
        "delay not applied: {slow} ms vs baseline {base_ab} ms"
    );
    lab.ctl_ok("clear");
    let fast = lab.rtt_ms(0, ADDR_B, 5);
    assert!(fast < 50.0, "clear did not remove the delay: {fast} ms");

    // A cut makes connects time out in both directions; heal restores them.
    lab.ctl_ok("cut a b");
    assert_eq!(lab.client(0, ADDR_B, 1, 1.0), "timeout");
    assert_eq!(lab.client(1, ADDR_A, 1, 1.0), "timeout");
    lab.ctl_ok("heal b a");
    lab.rtt_ms(0, ADDR_B, 3);
    lab.rtt_ms(1, ADDR_A, 3);

    // Total loss on the pair behaves like a cut; removing the pair's rule
    // brings the link back.
    lab.ctl_ok("impair a b loss=100%");
    assert_eq!(lab.client(0, ADDR_B, 1, 1.0), "timeout");
    lab.ctl_ok("impair a b");
    lab.rtt_ms(0, ADDR_B, 3);

    // The counters saw all of it.
    let stats = lab.ctl_ok("stats");
    println!("{stats}");
    let ab = stats_row(&stats, "a", "b");
    let ba = stats_row(&stats, "b", "a");
    assert!(ab[0] >= 40 && ab[1] >= ab[0] * 40, "a->b packets/bytes: {ab:?}");
    assert!(ba[0] >= 40, "b->a packets: {ba:?}");
    assert!(ab[2] >= 1 && ba[2] >= 1, "cut drops not counted: {ab:?} {ba:?}");
    assert!(ab[3] >= 1, "loss drops not counted: {ab:?}");

    // Bad commands are rejected with a clear message and a non-zero exit.
    let (ok, _, err) = lab.ctl("cut a nosuchhost");
    assert!(!ok && err.contains("unknown host `nosuchhost`"), "{err}");
    let (ok, _, err) = lab.ctl("impair all delay=soon");
    assert!(!ok && err.contains("bad delay"), "{err}");
    assert_eq!(lab.ctl_ok("ping").trim(), "ok", "netlab survives bad commands");

    // SIGTERM: a clean exit that removes the control socket.
    let netlab = lab.netlab.as_mut().unwrap();
    kill(Pid::from_raw(netlab.id() as i32), Signal::SIGTERM).expect("sending SIGTERM");
    let status = wait_bounded(netlab, Duration::from_secs(15)).expect("netlab ignored SIGTERM");
    assert!(status.success(), "netlab exited with {status}");
    lab.netlab = None;
    assert!(!lab.socket.exists(), "control socket left behind");
    println!("namespace test took {:?}", started.elapsed());
}
