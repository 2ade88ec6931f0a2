//! `isuctl cluster` through its real interface: the built binary brings a two-worker cluster
//! up on loopback addresses of its own (a random 127.x.y.0/24, a temporary run dir), reports
//! it healthy, serves a public request through nginx, survives a worker killed and started
//! again, refuses a second `up`, and leaves no process behind after `down`; a durable
//! three-worker cluster replaces a worker in place. With `--prometheus`, a real Prometheus
//! scrapes every node and finds every series the rules read, and its alerts fire on real
//! faults (a worker killed, two of three replicas stopped, a follower stopped under writes)
//! and clear after the heal, and a flooding ISU shows in its cell's quota metrics.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bench::takeover::{single_leader, Group as _};
use deploy::supervise::Process;
use isuctl::local::RunDir;
use isuctl::takeover::LocalGroup;

/// One cluster's environment: its addresses, run dir and binaries.
struct Sandbox {
    dir: tempfile::TempDir,
    host_prefix: String,
    /// `down` when the test ends, however it ends.
    up: bool,
    /// Set for every command after the sandbox's own settings.
    env: Vec<(&'static str, String)>,
}

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_isuctl")).parent().unwrap().to_owned()
}

/// The node binaries the cluster runs, built once (debug) beside this test's isuctl.
fn build_nodes() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
        .args(["build", "--quiet", "-p", "coordinator", "-p", "worker"])
        .status()
        .expect("running cargo build");
    assert!(status.success(), "building the node binaries failed");
}

/// A /24 of loopback nobody else uses: random (each test its own `salt`), and nothing
/// listening on its addresses.
fn free_prefix(salt: u32) -> String {
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let seed = nanos ^ std::process::id().rotate_left(16) ^ salt.wrapping_mul(0x9e37_79b9);
        let prefix = format!("127.{}.{}", 100 + seed % 150, 1 + (seed >> 8) % 250);
        let taken = (2..=4).any(|host| {
            [3000, 8080].iter().any(|port| {
                let address = format!("{prefix}.{host}:{port}").parse().unwrap();
                std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok()
            })
        });
        if !taken {
            return prefix;
        }
    }
}

impl Sandbox {
    fn new(salt: u32) -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("static")).unwrap();
        std::fs::write(
            dir.path().join("static/index.html"),
            "<!doctype html><title>isuctl test</title>",
        )
        .unwrap();
        Sandbox {
            dir,
            host_prefix: free_prefix(salt),
            up: false,
            env: Vec::new(),
        }
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// Runs `isuctl ARGS` to its end (at most `limit`), with this sandbox's environment.
    fn isuctl(&self, args: &[&str], limit: Duration) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_isuctl"));
        command
            .args(args)
            .env("ISU_RUN_DIR", self.run_dir())
            .env("ISU_COORDINATOR_HOST", format!("{}.2", self.host_prefix))
            .env("ISU_WORKER_A_HOST", format!("{}.3", self.host_prefix))
            .env("ISU_WORKER_B_HOST", format!("{}.4", self.host_prefix))
            .env("ISU_COORDINATOR_BIN", target_dir().join("coordinator"))
            .env("ISU_WORKER_BIN", target_dir().join("worker"))
            .env("ISU_STATIC_DIR", self.dir.path().join("static"))
            .env("ISU_STOP_TIMEOUT", "10")
            .env("RUST_LIB_BACKTRACE", "0")
            .env_remove("ISU_CLUSTER_SECRET")
            .env_remove("ISU_WORKER_COUNT")
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("running isuctl");
        let deadline = Instant::now() + limit;
        while child.try_wait().unwrap().is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let output = child.wait_with_output().unwrap();
                panic!(
                    "isuctl {args:?} ran longer than {limit:?}; stderr:\n{}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    }

    fn status(&self) -> (Option<i32>, serde_json::Value) {
        let output = self.isuctl(&["--json", "cluster", "status"], Duration::from_secs(30));
        let value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|error| panic!("status --json: {error}: {}", String::from_utf8_lossy(&output.stdout)));
        (output.status.code(), value)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.up {
            let _ = self.isuctl(&["cluster", "down"], Duration::from_secs(60));
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// GET over plain HTTP/1.1 with a short limit: (status, body).
fn get(url: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = text(&answer);
    let status = answer.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body).to_owned();
    (status, body)
}

fn process_named<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status
        .as_array()
        .unwrap()
        .iter()
        .find(|process| process["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {status}"))
}

#[test]
fn up_status_request_kill_start_refuse_and_down() {
    build_nodes();
    let mut sandbox = Sandbox::new(1);
    let prefix = sandbox.host_prefix.clone();
    // Command lines left by an earlier, larger cluster in the same run dir: not part of this one.
    std::fs::create_dir_all(sandbox.run_dir()).unwrap();
    for stale in ["coordinator-2", "coordinator-3", "worker-c"] {
        std::fs::write(sandbox.run_dir().join(format!("{stale}.cmd")), "/bin/true\0").unwrap();
    }

    let output = sandbox.isuctl(
        &["cluster", "up", "--debug", "--no-build", "--timeout", "90"],
        Duration::from_secs(150),
    );
    sandbox.up = true;
    assert!(output.status.success(), "up failed:\n{}", text(&output.stderr));
    let public_url = format!("http://{prefix}.2:8080");
    assert_eq!(
        text(&output.stdout).lines().last(),
        Some(public_url.as_str()),
        "up prints the public URL last"
    );

    // cluster.json describes what runs; the secret is private.
    let cluster: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sandbox.run_dir().join("cluster.json")).unwrap()).unwrap();
    assert_eq!(cluster["public_url"], public_url.as_str());
    assert_eq!(cluster["coordinator_url"], format!("http://{prefix}.2:3000").as_str());
    assert_eq!(cluster["workers"][1]["cell"], "b");
    assert_eq!(cluster["workers"][1]["url"], format!("http://{prefix}.4:3000").as_str());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(sandbox.run_dir().join("secret"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // The operator console: its token apart (mode 600), named in cluster.json and
    // cluster.env; through nginx, /ops is the web app and /ops/api/ the coordinator's.
    let token_file = sandbox.run_dir().join("ops-token");
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let token = std::fs::read_to_string(&token_file).unwrap().trim().to_owned();
    assert!(
        token.len() >= 32
            && !std::fs::read_to_string(sandbox.run_dir().join("secret"))
                .unwrap()
                .contains(&token)
    );
    assert!(
        cluster["ops_token_file"].as_str().unwrap().ends_with("/ops-token"),
        "{cluster}"
    );
    let env = std::fs::read_to_string(sandbox.run_dir().join("cluster.env")).unwrap();
    assert!(env.contains("ISU_OPS_TOKEN_FILE="), "{env}");
    let authority = public_url.trim_start_matches("http://");
    assert!(get(&format!("{public_url}/ops")).1.contains("isuctl test"));
    assert_eq!(fetch(authority, "/ops/api/state", &[]).status, 401);
    let signed_in = send(
        authority,
        "POST",
        "/ops/api/signin",
        &[("Content-Type", "application/json")],
        &format!("{{\"token\": \"{token}\"}}"),
    );
    assert_eq!(signed_in.status, 200, "{}", text(&signed_in.body));
    let cookie = signed_in
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let state = fetch(authority, "/ops/api/state", &[("Cookie", &cookie)]);
    assert_eq!(state.status, 200, "{}", text(&state.body));
    let state: serde_json::Value = serde_json::from_slice(&state.body).unwrap();
    assert_eq!(state["slots"].as_array().unwrap().len(), 256);

    // Every process alive and healthy.
    let (code, status) = sandbox.status();
    assert_eq!(code, Some(0), "{status:#}");
    let table = text(&sandbox.isuctl(&["cluster", "status"], Duration::from_secs(30)).stdout);
    assert!(
        table.contains(&format!("operator console: {public_url}/ops (token in ")),
        "{table}"
    );
    let names: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["worker-a", "worker-b", "coordinator", "nginx"]);
    for process in status.as_array().unwrap() {
        assert_eq!(process["alive"], true, "{process}");
        assert_eq!(process["healthy"], true, "{process}");
        assert_eq!(process["health"]["status"], 200, "{process}");
    }
    let pids: Vec<(String, Process)> = names
        .iter()
        .map(|name| {
            let pid = process_named(&status, name)["pid"].as_u64().unwrap() as u32;
            (name.to_string(), Process::of(pid))
        })
        .collect();

    // Public requests through nginx: the front end and the coordinator's API.
    let (code, body) = get(&format!("{public_url}/"));
    assert_eq!(code, 200);
    assert!(body.contains("isuctl test"), "{body}");
    assert_eq!(get(&format!("{public_url}/api/trend")).0, 200);
    assert_eq!(
        get(&format!("{public_url}/healthz")).0,
        404,
        "internal routes stay internal"
    );

    // A crashed worker shows in status (exit 1), and starts again with its recorded command line.
    let output = sandbox.isuctl(&["cluster", "kill", "worker-a"], Duration::from_secs(30));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let (code, status) = sandbox.status();
    assert_eq!(code, Some(1));
    assert_eq!(process_named(&status, "worker-a")["alive"], false);
    assert_eq!(process_named(&status, "worker-b")["healthy"], true);
    let output = sandbox.isuctl(&["--json", "cluster", "start", "worker-a"], Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("worker-a is healthy again"));
    let started: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let (code, status) = sandbox.status();
    assert_eq!(code, Some(0), "{status:#}");
    let new_worker_a = Process::of(process_named(&status, "worker-a")["pid"].as_u64().unwrap() as u32);
    assert_eq!(started[0]["name"], "worker-a");
    assert_eq!(started[0]["pid"], new_worker_a.pid);
    let output = sandbox.isuctl(&["cluster", "logs", "worker-a", "-n", "3"], Duration::from_secs(10));
    assert!(output.status.success());
    // The last 3 lines of its log, which ends with the restarted worker listening.
    let tail = text(&output.stdout);
    assert_eq!(tail.lines().count(), 3, "{tail}");
    assert!(tail.contains("listening"), "{tail}");
    assert_eq!(
        sandbox
            .isuctl(&["cluster", "logs", "nobody"], Duration::from_secs(10))
            .status
            .code(),
        Some(1)
    );
    assert!(
        sandbox
            .isuctl(&["cluster", "kill", "nobody"], Duration::from_secs(10))
            .status
            .code()
            == Some(1)
    );

    // A second up from the same run dir is refused and changes nothing.
    let output = sandbox.isuctl(&["cluster", "up", "--debug", "--no-build"], Duration::from_secs(30));
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("a cluster is already running"),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(sandbox.status().0, Some(0));

    // down: every recorded process gone, nothing left on record.
    let output = sandbox.isuctl(&["--json", "cluster", "down"], Duration::from_secs(60));
    assert!(output.status.success(), "{}", text(&output.stderr));
    sandbox.up = false;
    let stopped: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let stopped: Vec<&str> = stopped
        .as_array()
        .unwrap()
        .iter()
        .map(|action| action["name"].as_str().unwrap())
        .collect();
    assert_eq!(stopped, ["nginx", "coordinator", "worker-b", "worker-a"], "stop order");
    for (name, process) in pids
        .iter()
        .chain([&("worker-a (started again)".to_owned(), new_worker_a)])
    {
        assert!(
            process.wait_for_exit(Duration::from_secs(5)),
            "{name} (pid {}) still runs",
            process.pid
        );
    }
    assert!(!sandbox.run_dir().join("cluster.json").exists());
    let (code, status) = sandbox.status();
    assert_eq!(code, Some(3), "nothing runs: {status}");
    assert!(status
        .as_array()
        .unwrap()
        .iter()
        .all(|process| process["alive"] == false));
}

/// A durable cluster of three workers (the third on the coordinator host's /24): a worker
/// replaced in place keeps serving and the new process is on record; the coordinator cannot
/// be replaced; the router reloads on demand.
#[test]
fn a_durable_worker_is_replaced_in_place() {
    build_nodes();
    let mut sandbox = Sandbox::new(2);
    let prefix = sandbox.host_prefix.clone();
    let output = sandbox.isuctl(
        &[
            "cluster",
            "--workers",
            "3",
            "--durable",
            "--fsync",
            "never",
            "--devices",
            "nginx",
            "--cpus",
            "0",
            "up",
            "--debug",
            "--no-build",
            "--timeout",
            "90",
        ],
        Duration::from_secs(150),
    );
    sandbox.up = true;
    assert!(output.status.success(), "up failed:\n{}", text(&output.stderr));
    let (code, status) = sandbox.status();
    assert_eq!(code, Some(0), "{status:#}");
    assert_eq!(
        process_named(&status, "worker-c")["health"]["url"],
        format!("http://{prefix}.5:3000/healthz").as_str()
    );
    let old = Process::of(process_named(&status, "worker-b")["pid"].as_u64().unwrap() as u32);
    // --devices nginx: nginx's device server answers on the worker's device address.
    assert_eq!(get(&format!("http://{prefix}.5:8080/")).0, 404);
    // --cpus: every process pinned, the recorded command line with it.
    let command = std::fs::read_to_string(sandbox.run_dir().join("worker-b.cmd")).unwrap();
    assert!(command.starts_with("taskset\0-c\0\x30\0"), "{command:?}");
    let allowed = std::fs::read_to_string(format!("/proc/{}/status", old.pid)).unwrap();
    assert!(allowed.lines().any(|line| line == "Cpus_allowed_list:\t0"), "{allowed}");

    let output = sandbox.isuctl(&["cluster", "replace", "worker-b"], Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        old.wait_for_exit(Duration::from_secs(10)),
        "the old worker-b drained and left"
    );
    let (code, status) = sandbox.status();
    assert_eq!(code, Some(0), "{status:#}");
    let new_pid = process_named(&status, "worker-b")["pid"].as_u64().unwrap() as u32;
    assert_ne!(new_pid, old.pid);
    assert!(text(&output.stderr).contains(&format!("worker-b replaced: pid {} -> {new_pid}", old.pid)));

    let output = sandbox.isuctl(&["cluster", "replace", "coordinator"], Duration::from_secs(10));
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("replace takes a worker"));
    let output = sandbox.isuctl(&["cluster", "reload-router"], Duration::from_secs(30));
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("SIGHUP sent to nginx"));
    assert_eq!(get(&format!("http://{prefix}.2:8080/api/trend")).0, 200);
}

/// A node that cannot start: `up` fails with the log tails and leaves nothing running.
#[test]
fn a_failed_up_stops_what_it_started() {
    build_nodes();
    let mut sandbox = Sandbox::new(3);
    // The coordinator waits for workers that exit at once.
    sandbox.env.push(("ISU_WORKER_BIN", "/bin/false".to_owned()));
    let output = sandbox.isuctl(
        &["cluster", "up", "--debug", "--no-build", "--timeout", "3"],
        Duration::from_secs(60),
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("up failed: coordinator not healthy after 3s"),
        "{stderr}"
    );
    assert!(stderr.contains("----- tail of"), "{stderr}");
    let (code, status) = sandbox.status();
    assert_eq!(code, Some(3), "nothing runs: {status}");
    assert!(!sandbox.run_dir().join("cluster.json").exists());
}

/// One HTTP/1.1 response read whole: status, headers (names lowercased), body bytes.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// GET `path` from `authority` with extra request headers (nginx's static files come with a
/// Content-Length, read as is: no decoding of any kind).
fn fetch(authority: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    send(authority, "GET", path, headers, "")
}

/// `METHOD path` to `authority` with extra request headers and a body, as [`fetch`].
fn send(authority: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Response {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let split = answer.windows(4).position(|window| window == b"\r\n\r\n").unwrap();
    let head = text(&answer[..split]);
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Response {
        status,
        headers,
        body: answer[split + 4..].to_vec(),
    }
}

/// Every file under `root` (relative path, length, modification time), sorted.
fn listing(root: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    deploy::assets::files(root)
        .unwrap()
        .into_iter()
        .map(|file| {
            let metadata = std::fs::metadata(root.join(&file)).unwrap();
            (file, metadata.len(), metadata.modified().unwrap())
        })
        .collect()
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).unwrap();
    out
}

/// `up --static-dir` with a folder that has no .gz files: nginx serves a precompressed copy
/// from the run dir (the folder stays as it was) with gzip_static — the .gz's very bytes to a
/// client that accepts gzip, the plain file to one that does not, Vary on both, the same
/// Last-Modified, an ETag per form, and 304 on revalidation with either validator.
#[test]
fn a_static_dir_is_served_precompressed_from_the_run_dir_and_left_unchanged() {
    build_nodes();
    let mut sandbox = Sandbox::new(4);
    let public = sandbox.dir.path().join("public");
    std::fs::create_dir_all(public.join("assets")).unwrap();
    let script: String = (0..400)
        .map(|n| format!("export const value{n} = compute({n}, \"label\");\n"))
        .collect();
    let index = format!(
        "<!doctype html><title>precompressed</title><script src=\"/assets/app.1a2b3c4d.js\"></script>{}",
        "<meta name=\"x\" content=\"a front end's index\">".repeat(20)
    );
    std::fs::write(public.join("index.html"), &index).unwrap();
    std::fs::write(public.join("assets/app.1a2b3c4d.js"), &script).unwrap();
    std::fs::write(public.join("assets/logo.png"), [0x89, b'P', b'N', b'G', 0, 1, 2, 3]).unwrap();
    let before = listing(&public);
    sandbox.env.push(("ISU_STATIC_DIR", public.display().to_string()));

    let output = sandbox.isuctl(
        &["cluster", "up", "--debug", "--no-build", "--timeout", "90"],
        Duration::from_secs(150),
    );
    sandbox.up = true;
    assert!(output.status.success(), "up failed:\n{}", text(&output.stderr));
    assert_eq!(listing(&public), before, "the user's folder is unchanged");
    let copies: Vec<PathBuf> = std::fs::read_dir(sandbox.run_dir().join("static"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    let gz = std::fs::read(copies[0].join("assets/app.1a2b3c4d.js.gz")).unwrap();
    assert_eq!(gunzip(&gz), script.as_bytes());
    assert!(!copies[0].join("assets/logo.png.gz").exists());

    let authority = format!("{}.2:8080", sandbox.host_prefix);
    let asset = "/assets/app.1a2b3c4d.js";
    let gzipped = fetch(&authority, asset, &[("Accept-Encoding", "gzip, deflate, br")]);
    assert_eq!(gzipped.status, 200);
    assert_eq!(gzipped.header("content-encoding"), Some("gzip"));
    assert_eq!(gzipped.body, gz, "the .gz file's very bytes");
    assert_eq!(gzipped.header("vary"), Some("Accept-Encoding"));
    assert_eq!(gzipped.header("content-type"), Some("application/javascript"));
    assert_eq!(
        gzipped.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    let plain = fetch(&authority, asset, &[]);
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.body, script.as_bytes());
    assert_eq!(plain.header("vary"), Some("Accept-Encoding"));

    // One Last-Modified (the .gz has its source's time), an ETag per form, both stable.
    assert!(plain.header("last-modified").is_some());
    assert_eq!(gzipped.header("last-modified"), plain.header("last-modified"));
    let (gzip_etag, plain_etag) = (gzipped.header("etag").unwrap(), plain.header("etag").unwrap());
    assert_ne!(gzip_etag, plain_etag, "two representations, two validators");
    let again = fetch(&authority, asset, &[("Accept-Encoding", "gzip")]);
    assert_eq!(again.header("etag"), Some(gzip_etag));

    // Revalidation: 304 with no body, by ETag or by date, for either form.
    for (encoding, etag) in [(Some("gzip"), gzip_etag), (None, plain_etag)] {
        let mut headers = vec![("If-None-Match", etag)];
        headers.extend(encoding.map(|encoding| ("Accept-Encoding", encoding)));
        let revalidated = fetch(&authority, asset, &headers);
        assert_eq!(revalidated.status, 304, "If-None-Match {etag}");
        assert!(revalidated.body.is_empty());
    }
    let since = plain.header("last-modified").unwrap();
    let revalidated = fetch(
        &authority,
        asset,
        &[("Accept-Encoding", "gzip"), ("If-Modified-Since", since)],
    );
    assert_eq!(revalidated.status, 304);
    assert_eq!(fetch(&authority, asset, &[("If-None-Match", "\"other\"")]).status, 200);

    // The single-page app's index.html: precompressed too; images as they are.
    let page = fetch(&authority, "/isu/some-uuid", &[("Accept-Encoding", "gzip")]);
    assert_eq!(page.status, 200);
    assert_eq!(page.header("content-encoding"), Some("gzip"));
    assert_eq!(page.header("cache-control"), Some("no-cache"));
    assert_eq!(gunzip(&page.body), index.as_bytes());
    let image = fetch(&authority, "/assets/logo.png", &[("Accept-Encoding", "gzip")]);
    assert_eq!((image.status, image.header("content-encoding")), (200, None));
    assert_eq!(image.body, [0x89, b'P', b'N', b'G', 0, 1, 2, 3]);
}

/// `cluster up --prometheus` with three replicas (and `extra`): Prometheus's URL.
/// The tests with a Prometheus run one at a time: each starts three replicas, two workers,
/// nginx and Prometheus on a 2-core machine.
fn prometheus_test() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn up_with_prometheus(sandbox: &mut Sandbox, extra: &[&str]) -> String {
    let mut args = vec![
        "cluster",
        "up",
        "--debug",
        "--no-build",
        "--prometheus",
        "--coordinators",
        "3",
        "--timeout",
        "90",
    ];
    args.extend_from_slice(extra);
    let output = sandbox.isuctl(&args, Duration::from_secs(150));
    sandbox.up = true;
    assert!(output.status.success(), "{args:?} failed:\n{}", text(&output.stderr));
    format!("http://{}.2:9090", sandbox.host_prefix)
}

/// Waits (30 s at most) until Prometheus scrapes every node with the secret: the three
/// replicas and both workers answer.
fn every_node_scraped(url: &str) {
    let scraped = within(Duration::from_secs(30), || {
        let targets = prometheus(url, "/api/v1/targets")?["activeTargets"].as_array()?.clone();
        (targets.len() == 5 && targets.iter().all(|target| target["health"] == "up")).then_some(())
    });
    assert!(
        scraped.is_some(),
        "not every node scraped: {:?}",
        prometheus(url, "/api/v1/targets")
    );
}

/// Prometheus's API answer `path` (its `data`), or `None` while it does not answer.
fn prometheus(url: &str, path: &str) -> Option<serde_json::Value> {
    let reply = isuctl::http::get(&format!("{url}{path}"), Duration::from_secs(5))?;
    let answer: serde_json::Value = serde_json::from_str(&reply.body).ok()?;
    (reply.status == 200 && answer["status"] == "success").then(|| answer["data"].clone())
}

/// Polls `ready` every 500 ms for at most `limit`; its last value.
fn within<T>(limit: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = ready() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn prometheus_scrapes_every_node_and_every_series_the_rules_read_is_exported() {
    let _one_at_a_time = prometheus_test();
    build_nodes();
    let mut sandbox = Sandbox::new(4);
    // Three replicas: the follower-lag series (the leader's view of each follower) exists
    // only in a group.
    // Three replicas: the follower-lag series (the leader's view of each follower) exists
    // only in a group.
    let url = up_with_prometheus(&mut sandbox, &[]);
    let cluster: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sandbox.run_dir().join("cluster.json")).unwrap()).unwrap();
    assert_eq!(cluster["prometheus_url"], url.as_str());
    let env = std::fs::read_to_string(sandbox.run_dir().join("cluster.env")).unwrap();
    assert!(env.contains(&format!("ISU_PROMETHEUS_URL={url}\n")), "{env}");

    every_node_scraped(&url);

    // Every series a rule reads is exported by a node, from the first scrape on.
    let wanted = deploy::prometheus::series_named_by_rules(&deploy::prometheus::rules_dir()).unwrap();
    assert!(wanted.len() >= 6, "the rules read {wanted:?}");
    let exported: Vec<String> =
        serde_json::from_value(prometheus(&url, "/api/v1/label/__name__/values").unwrap()).unwrap();
    let missing: Vec<&String> = wanted.iter().filter(|name| !exported.contains(name)).collect();
    assert!(
        missing.is_empty(),
        "series the rules read but no node exports: {missing:?}"
    );

    // The rules are loaded and evaluated without error.
    let evaluated = within(Duration::from_secs(30), || {
        let groups = prometheus(&url, "/api/v1/rules")?["groups"].as_array()?.clone();
        let rules: Vec<serde_json::Value> = groups
            .iter()
            .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        (groups.len() >= 3 && rules.iter().all(|rule| rule["health"] == "ok")).then_some(rules.len())
    });
    assert!(
        evaluated.is_some(),
        "rules not all evaluated: {:?}",
        prometheus(&url, "/api/v1/rules")
    );

    let (code, status) = sandbox.status();
    assert_eq!(code, Some(0), "status: {status}");
    assert_eq!(process_named(&status, "prometheus")["healthy"], true, "{status}");
    let pid = process_named(&status, "prometheus")["pid"].as_u64().unwrap() as u32;
    let output = sandbox.isuctl(&["cluster", "down"], Duration::from_secs(60));
    sandbox.up = false;
    assert!(output.status.success(), "down failed:\n{}", text(&output.stderr));
    assert!(!Process::of(pid).is_running(), "prometheus stopped with the cluster");
}

/// The alerts Prometheus has firing, as `alertname/cell` (no `cell`: its `follower`, else `-`).
fn firing(url: &str) -> Vec<String> {
    let Some(alerts) = prometheus(url, "/api/v1/alerts") else {
        return Vec::new();
    };
    alerts["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|alert| alert["state"] == "firing")
        .map(|alert| {
            format!(
                "{}/{}",
                alert["labels"]["alertname"].as_str().unwrap_or("?"),
                alert["labels"]["cell"]
                    .as_str()
                    .or(alert["labels"]["follower"].as_str())
                    .unwrap_or("-")
            )
        })
        .collect()
}

/// How long until `alert` is firing (`want`) or no longer firing (`!want`), within `limit`.
fn until_alert(url: &str, alert: &str, want: bool, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    within(limit, || {
        (firing(url).iter().any(|name| name == alert) == want).then_some(())
    })
    .map(|()| started.elapsed())
}

#[test]
fn alerts_fire_on_a_killed_worker_a_group_without_leader_and_a_stopped_follower_and_resolve_after_the_heal() {
    let _one_at_a_time = prometheus_test();
    build_nodes();
    build_jia();
    let mut sandbox = Sandbox::new(5);
    let url = up_with_prometheus(&mut sandbox, &["--jia"]);
    every_node_scraped(&url);
    assert_eq!(firing(&url), Vec::<String>::new(), "a healthy cluster fires nothing");

    // A worker killed: its cell pages (CellDown: 15 s, plus a scrape and an evaluation of
    // 5 s each), the other cell does not; started again, the page clears.
    let run = |args: &[&str]| {
        let output = sandbox.isuctl(args, Duration::from_secs(90));
        assert!(output.status.success(), "{args:?}:\n{}", text(&output.stderr));
    };
    run(&["cluster", "kill", "worker-b"]);
    let fired = until_alert(&url, "CellDown/b", true, Duration::from_secs(40));
    assert!(fired.is_some(), "CellDown/b not firing: {:?}", firing(&url));
    assert!(!firing(&url).contains(&"CellDown/a".to_owned()), "{:?}", firing(&url));
    run(&["cluster", "start", "worker-b"]);
    let cleared = until_alert(&url, "CellDown/b", false, Duration::from_secs(30));
    assert!(cleared.is_some(), "CellDown/b still firing: {:?}", firing(&url));
    eprintln!("CellDown/b fired {fired:?} after the kill, cleared {cleared:?} after the start");

    // Two of three replicas stopped (the leader among them): no replica leads, which pages
    // (CoordinatorNoLeader: 10 s); continued, a leader is elected and the page clears.
    let replicas = RunDir::new(sandbox.run_dir()).cluster().unwrap().replicas;
    let group = LocalGroup::new(RunDir::new(sandbox.run_dir()), replicas).unwrap();
    let leader = leader_of(&group).expect("a leader");
    let stopped = [group.name(leader), group.name((leader + 1) % 3)];
    for name in stopped {
        run(&["cluster", "pause", name]);
    }
    let fired = until_alert(&url, "CoordinatorNoLeader/-", true, Duration::from_secs(40));
    for name in stopped {
        run(&["cluster", "resume", name]);
    }
    assert!(fired.is_some(), "CoordinatorNoLeader not firing: {:?}", firing(&url));
    let cleared = until_alert(&url, "CoordinatorNoLeader/-", false, Duration::from_secs(40));
    assert!(
        cleared.is_some(),
        "CoordinatorNoLeader still firing: {:?}",
        firing(&url)
    );
    eprintln!("CoordinatorNoLeader fired {fired:?} after the pauses, cleared {cleared:?} after the resumes");

    // A follower stopped while writes go on (new users signing in: one entry each): the
    // leader sees it fall behind (CoordinatorFollowerBehind: over 100 entries for 30 s);
    // continued, it catches up and the ticket clears.
    let leader = leader_of(&group).expect("a leader after the resumes");
    let follower = (leader + 1) % 3;
    let alert = format!("CoordinatorFollowerBehind/{}", follower + 1);
    run(&["cluster", "pause", group.name(follower)]);
    let (signed_in, failure) = sign_in_new_users(&sandbox.host_prefix, 200);
    let fired = until_alert(&url, &alert, true, Duration::from_secs(60));
    run(&["cluster", "resume", group.name(follower)]);
    // nginx sends every client to one follower: while it is the one stopped, a write of
    // that client may fail (a fault's window) until nginx's probe moves the clients on.
    // Enough writes go through to put the stopped follower over 100 entries behind.
    assert!(
        signed_in >= 150,
        "{signed_in} of 200 sign-ins answered 200 with a follower stopped; first failure: {failure:?}"
    );
    assert!(fired.is_some(), "{alert} not firing: {:?}", firing(&url));
    let cleared = until_alert(&url, &alert, false, Duration::from_secs(40));
    assert!(cleared.is_some(), "{alert} still firing: {:?}", firing(&url));
    eprintln!(
        "{alert} fired {fired:?} after {signed_in} of 200 sign-ins (first failure: {failure:?}), cleared {cleared:?} after the resume"
    );
}

/// Prometheus's instant answer to `query`: each series' `cell` and value.
fn instant(url: &str, query: &str) -> Vec<(String, f64)> {
    let address = reqwest::Url::parse_with_params(&format!("{url}/api/v1/query"), [("query", query)]).unwrap();
    let Some(data) = prometheus(address.as_str(), "") else {
        return Vec::new();
    };
    data["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|series| {
            let cell = series["metric"]["cell"].as_str()?.to_owned();
            let value = series["value"][1].as_str()?.parse().ok()?;
            Some((cell, value))
        })
        .collect()
}

/// The cells whose series of `query` are above 0, within `limit`: none when no cell's is.
fn cells_above_zero(url: &str, query: &str, want: bool, limit: Duration) -> Option<Vec<String>> {
    within(limit, || {
        let cells: Vec<String> = instant(url, query)
            .into_iter()
            .filter(|(_, value)| *value > 0.0)
            .map(|(cell, _)| cell)
            .collect();
        (cells.is_empty() != want).then_some(cells)
    })
}

/// How often Prometheus evaluates the rule group `name` (the group's own `interval`, else
/// the global one): a series it records can lag what the nodes export by this much.
fn rule_group_interval(url: &str, name: &str) -> Duration {
    let groups = within(Duration::from_secs(30), || {
        prometheus(url, "/api/v1/rules")?["groups"].as_array().cloned()
    })
    .expect("Prometheus lists its rule groups");
    let seconds = groups
        .iter()
        .find(|group| group["name"] == name)
        .and_then(|group| group["interval"].as_f64())
        .unwrap_or_else(|| panic!("no rule group {name}: {groups:?}"));
    Duration::from_secs_f64(seconds)
}

/// One ISU flooding its cell from a thread of its own: a batch of `batch` conditions
/// through nginx every 200 ms (or as fast as the answers come) until stopped (at the
/// latest after `limit`); every answer's status.
struct Flood {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    statuses: std::sync::Arc<std::sync::Mutex<Vec<u16>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flood {
    fn start(post: String, batch: i64, limit: Duration) -> Flood {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let statuses = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stopped, answers) = (stop.clone(), statuses.clone());
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async {
                let client = reqwest::Client::builder()
                    .timeout(Duration::from_secs(20))
                    .build()
                    .unwrap();
                let mut every = tokio::time::interval(Duration::from_millis(200));
                let flood = Instant::now();
                for round in 0_i64.. {
                    if stopped.load(std::sync::atomic::Ordering::Acquire) || flood.elapsed() >= limit {
                        break;
                    }
                    every.tick().await;
                    let conditions: Vec<serde_json::Value> = (0..batch)
                        .map(|index| {
                            serde_json::json!({
                                "is_sitting": true,
                                "condition": "is_dirty=false,is_overweight=false,is_broken=false",
                                "message": "flood",
                                "timestamp": 1_000_000 + round * 1000 + index,
                            })
                        })
                        .collect();
                    let reply = client
                        .post(&post)
                        .json(&conditions)
                        .send()
                        .await
                        .expect("nginx answers");
                    answers.lock().unwrap().push(reply.status().as_u16());
                }
            });
        });
        Flood {
            stop,
            statuses,
            thread: Some(thread),
        }
    }

    /// Stops the flood (waits for its last post): every answer's status.
    fn stop(mut self) -> Vec<u16> {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the flood's thread");
        }
        self.statuses.lock().unwrap().clone()
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
    }
}

#[test]
fn a_flooding_isu_shows_in_the_quotas_metrics_in_a_real_scrape_and_leaves_them_after() {
    let _one_at_a_time = prometheus_test();
    build_nodes();
    let mut sandbox = Sandbox::new(6);
    // A quota of 2,000 conditions per 10 s window (the workers read ISU_QUOTA), so that a
    // flood is quick to send from a debug build.
    sandbox.env.push(("ISU_QUOTA", "2000".to_owned()));
    let url = up_with_prometheus(&mut sandbox, &[]);
    every_node_scraped(&url);
    let shaped = "cell:ingest_shaped_isus:max";
    assert_eq!(
        cells_above_zero(&url, shaped, false, Duration::from_secs(20)),
        Some(Vec::new()),
        "nothing shaped before the flood"
    );

    // The recorded series (`cell:…`) are evaluated every `recording` (their group's own
    // interval, 30 s, not the 5 s scrape interval): a check of one waits for a scrape that
    // shows the flood and then for the group's next evaluation, twice over for slack.
    let scrape = Duration::from_secs(deploy::prometheus::SCRAPE_INTERVAL_SECONDS);
    let recording = rule_group_interval(&url, "cell-recording");
    let seen_within = 2 * (recording + scrape);

    // One ISU of the dataset floods its cell until Prometheus shows it: a batch of 500
    // conditions every 200 ms, or as fast as the answers come. Its quota is passed after 5
    // posts however slowly they are answered (a 2-core machine under the other tests can
    // answer a post in a second, which 200-condition batches kept under the quota), and
    // it stays shaped for as long as the flood lasts (the gauge counts the ISUs shaped in
    // the current window; the quota judges the current and the previous one).
    let uuid = shared::dataset::generated::generate().isus[0].uuid.clone();
    let post = format!("http://{}.2:8080/api/condition/{uuid}", sandbox.host_prefix);
    let flood = Flood::start(post, 500, 2 * seen_within);
    let flood_started = Instant::now();

    // Its cell, and only its cell, shows a shaped ISU (the rules' recorded series) and
    // shaped batches in Prometheus.
    let flooded = cells_above_zero(&url, &format!("max_over_time({shaped}[1m])"), true, seen_within);
    let seen_after = flood_started.elapsed();
    let Some([cell]) = flooded.as_deref() else {
        let statuses = flood.stop();
        panic!(
            "not one cell with a shaped ISU {seen_after:?} into the flood: {flooded:?}; {:?}; the gauge: {:?}; statuses {statuses:?}",
            instant(&url, shaped),
            instant(&url, "max by (cell) (max_over_time(ingest_shaped_isus[2m]))"),
        );
    };
    let cell = cell.clone();
    assert!(["a", "b"].contains(&cell.as_str()), "a worker's cell: {cell}");
    let batches = cells_above_zero(
        &url,
        "sum by (cell) (increase(ingest_shaped_batches_total[1m]))",
        true,
        2 * scrape + Duration::from_secs(5),
    );
    let statuses = flood.stop();
    assert_eq!(
        batches,
        Some(vec![cell.clone()]),
        "shaped batches counted on {cell} alone"
    );
    assert_eq!(statuses[0], 202, "the ISU is known and within its quota: {statuses:?}");
    assert!(
        statuses.iter().all(|status| [202, 429].contains(status)),
        "shaped (202) or refused for now (429), nothing else: {statuses:?}"
    );
    // Refused posts (the shaping lane full) are counted as shaping_full on that cell: the
    // recorded 5-minute rate shows them from the group's next evaluation on.
    if statuses.contains(&429) {
        let refused = cells_above_zero(
            &url,
            "sum by (cell) (cell:ingest_rejected_batches:rate5m{reason=\"shaping_full\"})",
            true,
            seen_within,
        );
        assert_eq!(
            refused,
            Some(vec![cell.clone()]),
            "429s counted as shaping_full on {cell}"
        );
    }

    // The flood over, both windows of the quota turn (10 s each), the gauge is scraped at 0
    // and the group evaluates again: the ISU is no longer shaped.
    let cleared = cells_above_zero(&url, shaped, false, Duration::from_secs(20) + seen_within);
    assert_eq!(cleared, Some(Vec::new()), "still shaped: {:?}", instant(&url, shaped));
    let refused = statuses.iter().filter(|status| **status == 429).count();
    eprintln!(
        "flood on cell {cell}: seen {seen_after:?} into it (rules every {recording:?}), {} posts, {refused} refused (429)",
        statuses.len()
    );
}

/// The bench (its JIA simulator, `cluster up --jia`), built once (debug) beside the nodes.
fn build_jia() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
        .args(["build", "--quiet", "-p", "bench"])
        .status()
        .expect("running cargo build");
    assert!(status.success(), "building the bench failed");
}

/// Which replica of `group` leads (the one that alone says so), polled for 20 s.
fn leader_of(group: &LocalGroup) -> Option<usize> {
    within(Duration::from_secs(20), || {
        let answers: Vec<_> = (0..group.replicas()).map(|replica| group.answer(replica)).collect();
        single_leader(&answers).ok()
    })
}

/// `count` new users sign in through nginx with tokens of the cluster's JIA simulator (each
/// a write the leader commits): how many were answered 200, and the first failure.
fn sign_in_new_users(prefix: &str, count: usize) -> (usize, Option<String>) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let app = format!("http://{prefix}.2:8080");
        let tag = std::process::id();
        let (mut answered, mut failure) = (0, None);
        for number in 0..count {
            let login = format!("http://{prefix}.2:5000/login?user=follower-{tag}-{number}&redirect={app}/");
            let signed_in = async {
                let reply = client
                    .get(&login)
                    .send()
                    .await
                    .map_err(|error| format!("{login}: {error:?}"))?;
                let location = reply
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|location| location.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let (_, jwt) = location
                    .split_once("jwt=")
                    .ok_or_else(|| format!("{login}: {} without a token", reply.status()))?;
                let reply = client
                    .post(format!("{app}/api/auth"))
                    .bearer_auth(jwt)
                    .send()
                    .await
                    .map_err(|error| format!("POST /api/auth: {error}"))?;
                match reply.status().as_u16() {
                    200 => Ok(()),
                    status => Err(format!("POST /api/auth: {status}")),
                }
            };
            match signed_in.await {
                Ok(()) => answered += 1,
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        (answered, failure)
    })
}
