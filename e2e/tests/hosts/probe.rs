//! A control-plane probe for the leader-cut check: from the bench host, through nginx, every
//! 300 ms a new user signs in (a write the replicas' leader commits), lists its ISUs and reads
//! the trend; each request must answer 200 within 5 s. Every round is kept with its start, so
//! the check can tell the rounds inside the takeover window from those after it.
//!
//! The sign-in tokens come from a JIA simulator of the probe's own (`bench jia` on the bench
//! host, port 5001, the project's test key, which the coordinators trust by default): the
//! bench's simulator has no sign-in page.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use hostlab::plan::BENCH_ADDRESS;
use hostlab::Hosts;

/// Where the probe's JIA simulator listens on the bench host.
const PROBE_JIA_PORT: u16 = 5001;
/// Time between the starts of two rounds (a round takes longer when a request waits).
const ROUND_EVERY: Duration = Duration::from_millis(300);
/// How long one request may take.
const REQUEST_LIMIT: Duration = Duration::from_secs(5);

/// One round: sign-in, list, trend.
#[derive(Debug, Clone)]
pub struct Round {
    pub started: Instant,
    pub ended: Instant,
    /// None when every request answered 200 in time; else the first that did not, with its
    /// status (`000`: no answer within the limit).
    pub failed: Option<String>,
}

/// The running probe.
pub struct Probe {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Round>>,
    jia: Child,
}

impl Probe {
    /// Starts the probe's JIA simulator on the bench host, waits until it answers, then the
    /// rounds.
    pub fn start(hosts: &Hosts) -> anyhow::Result<Probe> {
        let site = hosts.site()?;
        let log = std::fs::File::create(hosts.paths.state.join("logs/probe-jia.log"))?;
        let jia = Command::new("ip")
            .args(["netns", "exec", "isu-hb"])
            .arg(hosts.paths.release.join("bench"))
            .args(["jia", "--listen", &format!("{BENCH_ADDRESS}:{PROBE_JIA_PORT}"), "--app"])
            .arg(format!("{site}/"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the probe's JIA simulator")?;
        let mut probe = Probe {
            stop: Arc::new(AtomicBool::new(false)),
            thread: std::thread::spawn(Vec::new),
            jia,
        };
        let jia_url = format!("http://{BENCH_ADDRESS}:{PROBE_JIA_PORT}/");
        let deadline = Instant::now() + Duration::from_secs(10);
        while hosts.curl_status("isu-hb", &jia_url, &[]) == "000" {
            if Instant::now() > deadline {
                probe.end();
                anyhow::bail!("the probe's JIA simulator did not answer within 10 s (logs/probe-jia.log)");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let stop = probe.stop.clone();
        let client = Client {
            site,
            ca: hosts.paths.tls().join("ca.pem"),
            jar: hosts.paths.state.join("probe-cookies"),
        };
        probe.thread = std::thread::spawn(move || {
            let mut rounds = Vec::new();
            let mut number = 0u32;
            let tag: u32 = rand::random();
            while !stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                number += 1;
                let failed = client.round(&format!("probe-{tag:08x}-{number}"));
                rounds.push(Round {
                    started,
                    ended: Instant::now(),
                    failed,
                });
                std::thread::sleep(ROUND_EVERY.saturating_sub(started.elapsed()));
            }
            rounds
        });
        Ok(probe)
    }

    /// Stops after the round in progress; every round.
    pub fn stop(mut self) -> Vec<Round> {
        self.stop.store(true, Ordering::SeqCst);
        let thread = std::mem::replace(&mut self.thread, std::thread::spawn(Vec::new));
        let rounds = thread.join().unwrap_or_default();
        self.end();
        rounds
    }

    /// Ends the JIA simulator (by its PID: `ip netns exec` became it).
    fn end(&mut self) {
        e2e::process::signal_pid(self.jia.id(), "TERM");
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.jia.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.jia.kill();
        let _ = self.jia.wait();
    }
}

/// curl from the bench host.
struct Client {
    site: String,
    ca: PathBuf,
    jar: PathBuf,
}

impl Client {
    /// Sign-in as `user`, its ISU list, the trend: the first failure, if any.
    fn round(&self, user: &str) -> Option<String> {
        let login = format!(
            "http://{BENCH_ADDRESS}:{PROBE_JIA_PORT}/login?user={user}&redirect={}/",
            self.site
        );
        let redirect = self.curl(&["-w", "%{redirect_url}"], &login);
        let Some(jwt) = redirect.split_once("jwt=").map(|(_, jwt)| jwt.to_owned()) else {
            return Some("JIA gave no token".to_owned());
        };
        let _ = std::fs::remove_file(&self.jar);
        let auth = format!("Authorization: Bearer {jwt}");
        let jar = self.jar.display().to_string();
        let steps: [(&str, Vec<&str>, String); 3] = [
            (
                "sign-in",
                vec!["-X", "POST", "-H", &auth, "-c", &jar],
                format!("{}/api/auth", self.site),
            ),
            ("list", vec!["-b", &jar], format!("{}/api/isu", self.site)),
            ("trend", vec![], format!("{}/api/trend", self.site)),
        ];
        for (what, args, url) in steps {
            let mut with_status = args.clone();
            with_status.extend(["-o", "/dev/null", "-w", "%{http_code}"]);
            let status = self.curl(&with_status, &url);
            if status != "200" {
                return Some(format!("{what} {status}"));
            }
        }
        None
    }

    /// curl's output with `args` on `url`, from the bench host (`000` when curl cannot run).
    fn curl(&self, args: &[&str], url: &str) -> String {
        let output = Command::new("ip")
            .args(["netns", "exec", "isu-hb", "curl", "-s", "--max-time"])
            .arg(REQUEST_LIMIT.as_secs().to_string())
            .arg("--cacert")
            .arg(&self.ca)
            .args(args)
            .arg(url)
            .stderr(Stdio::null())
            .output();
        match output {
            Ok(output) => String::from_utf8_lossy(&output.stdout).trim().to_owned(),
            Err(_) => "000".to_owned(),
        }
    }
}
