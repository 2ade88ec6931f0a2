//! `isuctl deploy render` and `apply` through the real binary: the contest inventory renders
//! units that `systemd-analyze verify` accepts and secrets with mode 600; `apply` (through a
//! local shell instead of ssh, into a scratch root, with a recording `systemctl`) installs
//! everything once, changes nothing the second time, and restarts only what a change touches;
//! `--json` reports what was rendered and applied.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const ISUCTL: &str = env!("CARGO_BIN_EXE_isuctl");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// The contest inventory with its host paths moved into `dir`: binaries are stand-ins (verify
/// wants them executable), no bundle.
fn inventory(dir: &Path, fsync: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["coordinator", "worker", "prometheus"] {
        std::fs::write(bin.join(name), "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let contest = std::fs::read_to_string(repo().join("ops/deploy/contest.toml")).unwrap();
    let (_, hosts) = contest.split_once("[[host]]").unwrap();
    let text = format!(
        "bin_dir = {bin:?}\nfsync = {fsync:?}\n[tls]\ncert = \"/etc/ssl/isu/cert.pem\"\nkey = \"/etc/ssl/isu/key.pem\"\n\n[prometheus]\nbin = {prometheus:?}\n\n[[host]]{hosts}",
        bin = bin.display().to_string(),
        prometheus = bin.join("prometheus").display().to_string()
    );
    let path = dir.join("inventory.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `isuctl deploy ARGS --no-build` (the tests bring their own binaries).
fn deploy() -> Command {
    let mut command = Command::new(ISUCTL);
    command.arg("deploy");
    command
}

fn run(args: &[&str]) -> String {
    let output = deploy().args(args).arg("--no-build").output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "isuctl deploy {args:?} failed:\n{text}");
    text
}

#[test]
fn rendered_units_verify_and_secrets_are_private() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = inventory(dir.path(), "10ms");
    let out = dir.path().join("out");
    let said = run(&["render", inventory.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(said.contains("made a new cluster secret"), "{said}");
    assert!(said.contains("made a new operator token"), "{said}");
    let secret = std::fs::read_to_string(dir.path().join("secret")).unwrap();
    assert_eq!(secret.trim().len(), 64);
    let token = std::fs::read_to_string(dir.path().join("ops-token")).unwrap();
    assert_eq!(token.trim().len(), 64);
    assert_ne!(token, secret, "the operator token is apart from the secret");
    for (path, contents) in [
        ("isucondition-1/etc/isucondition/ops-token", &token),
        ("isucondition-1/etc/isucondition/prometheus/secret", &secret),
    ] {
        let path = out.join(path);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600,
            "{}",
            path.display()
        );
        assert_eq!(&std::fs::read_to_string(&path).unwrap(), contents, "{}", path.display());
    }
    for (host, env, units) in [
        (
            "isucondition-1",
            "coordinator.env",
            vec!["isu-coordinator.service", "isu-nginx.service", "isu-prometheus.service"],
        ),
        ("isucondition-2", "worker.env", vec!["isu-worker.service"]),
        ("isucondition-3", "worker.env", vec!["isu-worker.service"]),
    ] {
        let env_path = out.join(host).join("etc/isucondition").join(env);
        let mode = std::fs::metadata(&env_path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", env_path.display());
        let env_text = std::fs::read_to_string(&env_path).unwrap();
        assert!(
            env_text.contains(&format!("ISU_CLUSTER_SECRET={}", secret.trim())),
            "{env_text}"
        );
        assert!(
            !env_text.contains(token.trim()),
            "the operator token is in no environment file"
        );
        // Internal listeners on internal addresses only.
        assert!(env_text.contains("ISU_LISTEN=192.168.0.1"), "{env_text}");
        let unit_dir = out.join(host).join("etc/systemd/system");
        let paths: Vec<PathBuf> = units.iter().map(|unit| unit_dir.join(unit)).collect();
        let verify = Command::new("systemd-analyze")
            .arg("verify")
            .args(&paths)
            .output()
            .expect("systemd-analyze (Debian package systemd) is needed by this test");
        assert!(
            verify.status.success() && verify.stderr.is_empty(),
            "systemd-analyze verify {host}: {}",
            String::from_utf8_lossy(&verify.stderr)
        );
    }
    let worker = std::fs::read_to_string(out.join("isucondition-2/etc/systemd/system/isu-worker.service")).unwrap();
    for line in [
        "Restart=always",
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "StateDirectory=isucondition/worker-a",
        "LoadCredential=tls-key:/etc/ssl/isu/key.pem",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE",
    ] {
        assert!(worker.lines().any(|l| l == line), "isu-worker.service lacks {line}");
    }
    let env = std::fs::read_to_string(out.join("isucondition-2/etc/isucondition/worker.env")).unwrap();
    assert!(env.contains("ISU_DEVICE_LISTEN=0.0.0.0:443"), "{env}");
    assert!(env.contains("ISU_COORDINATOR_URL=http://192.168.0.11:3000"), "{env}");
    let nginx = std::fs::read_to_string(out.join("isucondition-1/etc/isucondition/nginx.conf")).unwrap();
    assert!(
        nginx.contains("listen 0.0.0.0:443 ssl http2"),
        "public listener is TLS + HTTP/2"
    );
    assert!(nginx.contains("location ^~ /internal/ { return 404; }"));
    assert!(nginx.contains("map_file = \"/var/lib/isucondition/coordinator/placement.map\","));
    assert!(nginx.contains("secret_file = \"/etc/isucondition/router.secret\","));
    assert!(
        nginx.contains("listen 127.0.0.1:3099;"),
        "the control server is loopback only"
    );
    let coordinator_env = std::fs::read_to_string(out.join("isucondition-1/etc/isucondition/coordinator.env")).unwrap();
    assert!(
        coordinator_env.contains("ISU_ROUTER_URL=http://127.0.0.1:3099\n"),
        "{coordinator_env}"
    );
    let router_secret = out.join("isucondition-1/etc/isucondition/router.secret");
    assert_eq!(
        std::fs::metadata(&router_secret).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(std::fs::read_to_string(&router_secret).unwrap().trim(), secret.trim());
    assert!(
        nginx.contains("server 192.168.0.11:3000;"),
        "the coordinator's upstream is its internal address"
    );
    assert!(
        !nginx
            .replace("127.0.0.1:3099", "")
            .replace("proxy_pass http://127.0.0.1:9090;", "")
            .contains("127.0.0."),
        "nothing of the local cluster leaks into a host's file (the control server and Prometheus are the host's loopback)"
    );
    // Prometheus on the host's loopback, reached by the coordinator through the control
    // server (which wants the secret).
    assert!(
        coordinator_env.contains("ISU_PROMETHEUS_URL=http://127.0.0.1:3099/prometheus\n"),
        "{coordinator_env}"
    );
    assert!(nginx.contains("access_by_lua_block { isu_router.require_secret() }"));
}

/// The bundled front end lands on the coordinator host with a .gz beside each compressible
/// file (made by the render for a build without them; the folder itself is only read), and
/// the host's nginx sends those as they are.
#[test]
fn a_bundled_front_end_is_rendered_with_its_gz_files() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = inventory(dir.path(), "10ms");
    let web = dir.path().join("web");
    std::fs::create_dir_all(web.join("assets")).unwrap();
    let script: String = (0..200).map(|n| format!("export const v{n} = f({n});\n")).collect();
    std::fs::write(
        web.join("index.html"),
        "<!doctype html><title>bundle</title>".repeat(10),
    )
    .unwrap();
    std::fs::write(web.join("assets/app.1a2b3c4d.js"), &script).unwrap();
    std::fs::write(web.join("assets/logo.png"), [0x89, b'P', b'N', b'G']).unwrap();
    let mut text = std::fs::read_to_string(&inventory).unwrap();
    text.push_str(&format!("\n[bundle]\nweb = {:?}\n", web.display().to_string()));
    std::fs::write(&inventory, text).unwrap();

    let out = dir.path().join("out");
    run(&["render", inventory.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let host_web = out.join("isucondition-1/usr/local/share/isucondition/web");
    let gz = std::fs::read(host_web.join("assets/app.1a2b3c4d.js.gz")).unwrap();
    let mut unzipped = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut unzipped).unwrap();
    assert_eq!(unzipped, script.as_bytes());
    assert!(host_web.join("index.html.gz").is_file());
    assert!(
        !host_web.join("assets/logo.png.gz").exists(),
        "images are not compressed"
    );
    assert!(
        !web.join("assets/app.1a2b3c4d.js.gz").exists(),
        "the bundled folder is only read"
    );
    let modes = std::fs::read_to_string(out.join("isucondition-1/.isu-deploy/modes")).unwrap();
    assert!(
        modes.contains("usr/local/share/isucondition/web/assets/app.1a2b3c4d.js.gz 644"),
        "{modes}"
    );
    let nginx = std::fs::read_to_string(out.join("isucondition-1/etc/isucondition/nginx.conf")).unwrap();
    assert!(nginx.contains("gzip_static on;"), "{nginx}");
}

#[test]
fn a_bad_inventory_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = inventory(dir.path(), "sometimes");
    let output = deploy()
        .args(["render", "--no-build", inventory.to_str().unwrap(), "--out"])
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("fsync \"sometimes\""), "{said}");
    assert!(!dir.path().join("out").exists(), "nothing rendered");
}

/// `uid:gid` of `path`: the owner the apply script is told to give what it installs.
fn owner_of(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path).unwrap();
    format!("{}:{}", metadata.uid(), metadata.gid())
}

/// `isuctl deploy apply INVENTORY` into `dir/root/<destination>/` through a local shell with
/// `systemctl` as the systemctl, `extra` appended; whether it succeeded, what it said
/// (stdout + stderr) and the systemctl calls it made.
fn apply_locally(dir: &Path, inventory: &Path, systemctl: &Path, extra: &[&str]) -> (bool, String, String) {
    let _ = std::fs::remove_file(dir.join("calls"));
    let remote = format!(
        "env ISU_DEPLOY_ROOT={}/{{host}} ISU_DEPLOY_SYSTEMCTL={} ISU_DEPLOY_OWNER={} sh -c",
        dir.join("root").display(),
        systemctl.display(),
        owner_of(dir)
    );
    let output = deploy()
        .args(["apply", "--no-build"])
        .arg(inventory)
        .arg("--out")
        .arg(dir.join("out"))
        .args(["--remote", &remote])
        .args(extra)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let calls = std::fs::read_to_string(dir.join("calls")).unwrap_or_default();
    (output.status.success(), said, calls)
}

/// A `systemctl` that records its calls and keeps unit state in a file.
fn fake_systemctl(dir: &Path) -> PathBuf {
    let path = dir.join("systemctl");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nmkdir -p \"$ISU_DEPLOY_ROOT\"\nstate=\"$ISU_DEPLOY_ROOT/active\"\necho \"$*\" >>{log}\ncase \"$1\" in\n\
             is-active) grep -qx \"$3\" \"$state\" 2>/dev/null ;;\n\
             is-enabled) ! grep -qx \"$3\" \"$ISU_DEPLOY_ROOT/disabled\" 2>/dev/null ;;\n\
             disable) echo \"$3\" >>\"$ISU_DEPLOY_ROOT/disabled\" ;;\n\
             enable) [ \"$2\" = --now ] && echo \"$3\" >>\"$state\"; exit 0 ;;\n\
             *) exit 0 ;;\nesac\n",
            log = dir.join("calls").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn apply_installs_once_then_changes_nothing_then_only_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let systemctl = fake_systemctl(dir.path());
    let apply = |fsync: &str| {
        let inventory = inventory(dir.path(), fsync);
        let text = std::fs::read_to_string(&inventory).unwrap();
        std::fs::write(&inventory, format!("replaces = [\"nginx.service\"]\n{text}")).unwrap();
        let (ok, said, calls) = apply_locally(dir.path(), &inventory, &systemctl, &[]);
        assert!(ok, "isuctl deploy apply failed:\n{said}");
        (said, calls)
    };

    let (said, calls) = apply("10ms");
    assert!(
        said.contains("isucondition-1: installed /etc/isucondition/coordinator.env"),
        "{said}"
    );
    assert!(said.contains("isucondition-2: started isu-worker.service"), "{said}");
    assert!(calls.contains("daemon-reload"), "{calls}");
    assert!(calls.contains("enable --now isu-nginx.service"), "{calls}");
    assert!(
        !calls.contains("restart"),
        "a first install starts, it does not restart: {calls}"
    );
    assert!(
        said.contains("isucondition-1: stopped and disabled nginx.service"),
        "{said}"
    );
    let root_of = |host: &str| root.join(format!("isucon@{host}.t.isucon.dev"));
    let env = root_of("isucondition-2").join("etc/isucondition/worker.env");
    assert_eq!(std::fs::metadata(&env).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(root_of("isucondition-1")
        .join("etc/isucondition/router.secret")
        .is_file());
    assert!(!root_of("isucondition-2")
        .join("etc/isucondition/router.secret")
        .exists());
    assert!(
        !root_of("isucondition-1").join(".isu-deploy").exists(),
        "the apply plan is not installed on the host"
    );

    let (said, calls) = apply("10ms");
    for host in ["isucondition-1", "isucondition-2", "isucondition-3"] {
        assert!(said.contains(&format!("{host}: unchanged")), "{said}");
    }
    assert!(!said.contains("installed") && !said.contains("disabled"), "{said}");
    assert!(
        calls.lines().all(|call| call.starts_with("is-")),
        "a second run only looks: {calls}"
    );

    let (said, calls) = apply("always");
    assert!(
        said.contains("isucondition-2: installed /etc/isucondition/worker.env"),
        "{said}"
    );
    assert!(
        said.contains("isucondition-1: restarted isu-coordinator.service"),
        "{said}"
    );
    assert!(
        !said.contains("nginx.conf"),
        "nginx's configuration did not change: {said}"
    );
    assert!(!calls.contains("daemon-reload"), "no unit file changed: {calls}");
    assert!(
        !calls.contains("reload isu-nginx") && !calls.contains("restart isu-nginx"),
        "nginx is left alone: {calls}"
    );
    assert!(calls.contains("restart isu-worker.service"), "{calls}");
}

#[test]
fn an_apply_cut_short_is_finished_by_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let good = fake_systemctl(dir.path());
    // A systemctl whose restarts fail: the run stops after installing.
    let failing = dir.path().join("failing-systemctl");
    std::fs::write(
        &failing,
        format!(
            "#!/bin/sh\n[ \"$1\" = restart ] && exit 1\nexec {} \"$@\"\n",
            good.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&failing, std::fs::Permissions::from_mode(0o755)).unwrap();
    let apply = |fsync: &str, systemctl: &Path| {
        apply_locally(
            dir.path(),
            &inventory(dir.path(), fsync),
            systemctl,
            &["--hosts", "isucondition-2"],
        )
    };
    assert!(apply("10ms", &good).0);
    let (ok, said, _) = apply("always", &failing);
    assert!(!ok, "the failed restart fails the apply: {said}");
    assert!(said.contains("installed /etc/isucondition/worker.env"), "{said}");
    let (ok, said, calls) = apply("always", &good);
    assert!(ok, "{said}");
    assert!(!said.contains("installed"), "the files were already there: {said}");
    assert!(
        said.contains("restarted isu-worker.service") && calls.contains("restart isu-worker.service"),
        "the restart the first run owed is done: {said}"
    );
    let (_, said, _) = apply("always", &good);
    assert!(said.contains("isucondition-2: unchanged"), "{said}");
}

#[test]
fn json_reports_what_was_rendered_and_applied_and_the_scripts_form_is_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = inventory(dir.path(), "10ms");
    let systemctl = fake_systemctl(dir.path());
    let remote = format!(
        "env ISU_DEPLOY_ROOT={}/{{host}} ISU_DEPLOY_SYSTEMCTL={} ISU_DEPLOY_OWNER={} sh -c",
        dir.path().join("root").display(),
        systemctl.display(),
        owner_of(dir.path())
    );
    let out = dir.path().join("out");
    // scripts/deploy's form: INVENTORY --apply, no subcommand.
    let output = deploy()
        .arg(&inventory)
        .args([
            "--apply",
            "--no-build",
            "--hosts",
            "isucondition-2",
            "--remote",
            &remote,
            "--out",
        ])
        .arg(&out)
        .arg("--json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("stdout is the JSON report only");
    let hosts = report["rendered"]["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 3);
    assert_eq!(hosts[1]["name"], "isucondition-2");
    assert!(hosts[1]["files"].as_u64().unwrap() >= 3, "{report}");
    assert!(report["rendered"]["new_secret"].is_string(), "{report}");
    let applied = report["applied"].as_array().unwrap();
    assert_eq!(applied.len(), 1, "--hosts: one host");
    assert_eq!(applied[0]["host"], "isucondition-2");
    let said: Vec<&str> = applied[0]["said"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        said.contains(&"isucondition-2: installed /etc/isucondition/worker.env"),
        "{said:?}"
    );
    assert!(
        stderr.contains("isucondition-2: applying over"),
        "progress goes to stderr: {stderr}"
    );

    let output = deploy()
        .arg(&inventory)
        .args([
            "--apply",
            "--no-build",
            "--hosts",
            "isucondition-9",
            "--remote",
            &remote,
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("no host \"isucondition-9\""), "{said}");
    let output = deploy()
        .arg(dir.path().join("absent.toml"))
        .arg("--no-build")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no inventory at"));
}
