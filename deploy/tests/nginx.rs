//! The nginx renderer through its library interface: files rendered for another host, the
//! same as the fixtures (first made with the shell script the renderer replaced, then updated
//! for each reviewed change of the template: `ISU_UPDATE_FIXTURES=1` rewrites them, and
//! `git diff` shows what changed), and local renderings that the installed nginx accepts
//! (`nginx -t` runs the router's Lua code too), with the default map.

mod common;
use std::path::{Path, PathBuf};

use common::{assert_fixture, repo};

use deploy::nginx::{self, CellSpec, NginxError, Options, Tls};

fn cell(spec: &str) -> CellSpec {
    spec.parse().unwrap()
}

fn options(run_dir: &Path, static_dir: &Path, cells: &[&str]) -> Options {
    Options {
        run_dir: run_dir.to_owned(),
        template: repo().join("nginx/nginx.conf.template"),
        out: None,
        static_dir: static_dir.to_owned(),
        public_listen: "127.0.0.2:8080".to_owned(),
        public_server_name: "isucondition-1.t.isucon.dev".to_owned(),
        coordinators: vec!["127.0.0.2:3000".to_owned()],
        cells: cells.iter().map(|spec| cell(spec)).collect(),
        placement: None,
        secret_file: static_dir.parent().unwrap_or(static_dir).join("secret"),
        router_control: "127.0.0.2:3099".to_owned(),
        reset_placement: false,
        worker_processes: "auto".to_owned(),
        device_servers: true,
        access_log: true,
        tls: None,
        check: true,
        nginx_bin: nginx::default_nginx_bin(),
        prometheus: None,
    }
}

/// The deploy's form: two cells, no device servers, no access log.
#[test]
fn for_host_two_cells_render_as_the_fixture() {
    let mut options = options(
        Path::new("/srv/isu/nginx"),
        Path::new("/srv/isu/web"),
        &[
            "a=10.0.0.2:3000,0.0.0.0:443,isucondition-2.t.isucon.dev",
            "b=10.0.0.3:3000,0.0.0.0:443,isucondition-3.t.isucon.dev",
        ],
    );
    options.public_listen = "0.0.0.0:443".to_owned();
    options.coordinators = vec!["10.0.0.1:3000".to_owned()];
    options.placement = Some("/srv/isu/coordinator/placement.map".into());
    options.secret_file = "/etc/isucondition/router.secret".into();
    options.router_control = "127.0.0.1:3099".to_owned();
    options.device_servers = false;
    options.access_log = false;
    let text = nginx::render_for_host(&options, "www-data").unwrap();
    assert_fixture("nginx", &text, "for-host-2-cells.conf");
}

/// Three cells (one named with a dash and its own server name), device servers, TLS, and
/// three coordinator replicas (one upstream per replica, the others its backups).
#[test]
fn for_host_three_cells_with_tls_render_as_the_fixture() {
    let mut options = options(
        Path::new("/srv/isu/nginx"),
        Path::new("/srv/isu/web"),
        &[
            "a=10.0.0.2:3000,0.0.0.0:443",
            "b=10.0.0.3:3000,0.0.0.0:443",
            "c-1=10.0.0.4:3000,0.0.0.0:443,c.example",
        ],
    );
    options.public_listen = "0.0.0.0:443".to_owned();
    options.coordinators = vec![
        "10.0.0.1:3000".to_owned(),
        "10.0.0.2:3001".to_owned(),
        "10.0.0.3:3001".to_owned(),
    ];
    options.tls = Some(Tls {
        cert: "/etc/ssl/cert.pem".into(),
        key: "/etc/ssl/key.pem".into(),
    });
    let text = nginx::render_for_host(&options, "www-data").unwrap();
    assert_fixture("nginx", &text, "for-host-3-cells-tls.conf");
}

/// The script's defaults (cells a and b on 127.0.0.3/.4, access log on) and worker processes.
#[test]
fn for_host_defaults_render_as_the_fixture() {
    let mut options = options(
        Path::new("/srv/isu/nginx"),
        Path::new("/srv/isu/web"),
        &["a=127.0.0.3:3000,127.0.0.3:8080", "b=127.0.0.4:3000,127.0.0.4:8080"],
    );
    options.worker_processes = "2".to_owned();
    let text = nginx::render_for_host(&options, "nginx").unwrap();
    assert_fixture("nginx", &text, "for-host-defaults.conf");
}

#[test]
fn for_host_refuses_relative_paths_bad_users_and_unusable_values() {
    let good = options(Path::new("/srv/n"), Path::new("/srv/w"), &["a=h:1,h:2"]);
    assert!(nginx::render_for_host(&good, "www-data").is_ok());
    let mut relative = good.clone();
    relative.static_dir = "web".into();
    let error = nginx::render_for_host(&relative, "www-data").unwrap_err().to_string();
    assert!(error.contains("paths must be absolute: 'web'"), "{error}");
    let error = nginx::render_for_host(&good, "Root;").unwrap_err().to_string();
    assert!(error.contains("is not a user name"), "{error}");
    let mut spaced = good.clone();
    spaced.coordinators = vec!["h:1; evil".to_owned()];
    let error = nginx::render_for_host(&spaced, "www-data").unwrap_err().to_string();
    assert!(error.contains("value unusable in nginx.conf"), "{error}");
    let mut exposed = good.clone();
    exposed.router_control = "0.0.0.0:3099".to_owned();
    let error = nginx::render_for_host(&exposed, "www-data").unwrap_err().to_string();
    assert!(error.contains("never on every address"), "{error}");
    for loopback in [
        "127.0.0.1:3099",
        "127.9.9.9:1",
        "[::1]:3099",
        "localhost:3099",
        "192.168.0.11:3099",
    ] {
        let mut control = good.clone();
        control.router_control = loopback.to_owned();
        assert!(nginx::render_for_host(&control, "www-data").is_ok(), "{loopback}");
    }
    let mut shared_port = good.clone();
    shared_port.router_control = "127.0.0.1:2".to_owned();
    shared_port.public_listen = "127.0.0.1:2".to_owned();
    let error = nginx::render_for_host(&shared_port, "www-data")
        .unwrap_err()
        .to_string();
    assert!(error.contains("needs an address of its own"), "{error}");
    let mut backslashed = good.clone();
    backslashed.secret_file = "/srv/a\\b".into();
    let error = nginx::render_for_host(&backslashed, "www-data")
        .unwrap_err()
        .to_string();
    assert!(error.contains("value unusable in nginx.conf"), "{error}");
    let mut relative_secret = good.clone();
    relative_secret.secret_file = "secret".into();
    assert!(nginx::render_for_host(&relative_secret, "www-data").is_err());
    let mut named = good.clone();
    named.public_server_name = "x{".to_owned();
    assert!(nginx::render_for_host(&named, "www-data")
        .unwrap_err()
        .to_string()
        .contains("bad server name"));
    let mut none = good.clone();
    none.cells.clear();
    assert!(matches!(
        nginx::render_for_host(&none, "www-data"),
        Err(NginxError::Invalid(_))
    ));
    let mut too_many = good;
    too_many.cells = (0..65).map(|index| cell(&format!("c{index}=h:1,h:2"))).collect();
    assert!(nginx::render_for_host(&too_many, "www-data")
        .unwrap_err()
        .to_string()
        .contains("1 to 64 cells"));
}

fn local_dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let static_dir = dir.path().join("static");
    std::fs::create_dir_all(&static_dir).unwrap();
    std::fs::write(static_dir.join("index.html"), "<!doctype html>").unwrap();
    std::fs::write(dir.path().join("secret"), "a-test-secret\n").unwrap();
    (dir, run_dir, static_dir)
}

/// The configuration's upstreams, and the default map file: version 1, PlacementMap::new's
/// spread (slot s on cell (s >> 4) mod N), no pin.
fn assert_default_placement(conf: &str, map: &str, cells: &[(&str, &str)]) {
    for (name, node) in cells {
        assert!(
            conf.contains(&format!("    upstream cell_{name} {{\n        server {node};\n")),
            "{conf}"
        );
    }
    assert!(map.contains("\nversion 1\n"), "{map}");
    for (id, (name, _)) in cells.iter().enumerate() {
        assert!(map.contains(&format!("\ncell {id} {name}\n")), "{map}");
    }
    let slots = map.lines().find_map(|line| line.strip_prefix("slots ")).unwrap();
    let expected: String = (0..256usize)
        .map(|slot| char::from_digit(((slot >> 4) % cells.len()) as u32, 16).unwrap())
        .collect();
    assert_eq!(slots, expected);
    assert!(!map.contains("\npin "));
}

#[test]
fn local_two_cells_pass_nginx_t_with_the_default_map() {
    let (_dir, run_dir, static_dir) = local_dirs();
    let options = options(
        &run_dir,
        &static_dir,
        &["a=127.0.0.3:3000,127.0.0.3:8080", "b=127.0.0.4:3000,127.0.0.4:8080"],
    );
    let out = nginx::render_local(&options).unwrap();
    let run_dir = run_dir.canonicalize().unwrap();
    assert_eq!(out, run_dir.join("nginx.conf"));
    let text = std::fs::read_to_string(&out).unwrap();
    let run = run_dir.display();
    assert!(text.contains(&format!("pid {run}/nginx.pid;\n")));
    assert!(
        text.contains(&format!("map_file = \"{run}/placement.map\",\n")),
        "{text}"
    );
    assert!(text.contains("load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;\n"));
    assert!(text.contains("listen 127.0.0.2:3099;\n"));
    assert!(text.contains("listen 127.0.0.2:8080 default_server reuseport backlog=4096;\n"));
    assert!(text
        .contains("listen 127.0.0.3:8080 reuseport backlog=4096;\n        server_name isucondition-2.t.isucon.dev;"));
    assert!(text
        .contains("listen 127.0.0.4:8080 reuseport backlog=4096;\n        server_name isucondition-3.t.isucon.dev;"));
    assert!(text.contains(&format!(
        "access_log {run}/nginx-access.log ltsv buffer=256k flush=2s if=$public_loggable;"
    )));
    assert!(!text.contains("ssl"), "no TLS");
    assert!(!text.contains('@') || !text.contains("@RUN_DIR@"));
    assert!(run_dir.join("tmp").is_dir());
    assert!(
        !run_dir.join("tmp/nginx-check.conf").exists(),
        "the check's copy is removed"
    );
    let placement = std::fs::read_to_string(run_dir.join("placement.map")).unwrap();
    assert_default_placement(&text, &placement, &[("a", "127.0.0.3:3000"), ("b", "127.0.0.4:3000")]);

    // An existing map is the coordinator's: kept, unless reset.
    let theirs = placement.replace("\nversion 1\n", "\nversion 7\n");
    std::fs::write(run_dir.join("placement.map"), &theirs).unwrap();
    nginx::render_local(&options).unwrap();
    assert_eq!(std::fs::read_to_string(run_dir.join("placement.map")).unwrap(), theirs);
    let mut reset = options.clone();
    reset.reset_placement = true;
    nginx::render_local(&reset).unwrap();
    assert_eq!(
        std::fs::read_to_string(run_dir.join("placement.map")).unwrap(),
        placement
    );

    // A map file nginx could not start from is a clear error (nginx -t does not run the
    // router's start): unusable, or naming a cell without an upstream.
    std::fs::write(run_dir.join("placement.map"), "version 8\ncell 0 a\n").unwrap();
    let error = nginx::render_local(&options).unwrap_err().to_string();
    assert!(error.contains("is unusable (no slots)"), "{error}");
    std::fs::write(
        run_dir.join("placement.map"),
        placement.replace("cell 1 b", "cell 1 zz"),
    )
    .unwrap();
    let error = nginx::render_local(&options).unwrap_err().to_string();
    assert!(
        error.contains("names cell zz, which this configuration has no upstream for"),
        "{error}"
    );
    // No secret file: said before nginx is asked.
    let mut secretless = reset;
    secretless.secret_file = run_dir.join("nope");
    let error = nginx::render_local(&secretless).unwrap_err().to_string();
    assert!(error.contains("secret file not found"), "{error}");
}

#[test]
fn local_three_cells_with_tls_and_prometheus_pass_nginx_t() {
    let (dir, run_dir, static_dir) = local_dirs();
    let certified = rcgen::generate_simple_self_signed(vec!["isucondition-1.t.isucon.dev".to_owned()]).unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    let mut options = options(
        &run_dir,
        &static_dir,
        &[
            "a=127.0.0.3:3000,127.0.0.3:8080",
            "b=127.0.0.4:3000,127.0.0.4:8080",
            "c=127.0.0.5:3000,127.0.0.5:8080",
        ],
    );
    options.tls = Some(Tls {
        cert: cert.clone(),
        key,
    });
    // Prometheus's two routes on the control server, behind the secret: nginx takes them.
    options.prometheus = Some(nginx::PrometheusProxy {
        prefix: "/prometheus".to_owned(),
        listen: "127.0.0.1:9090".to_owned(),
    });
    options.out = Some(dir.path().join("elsewhere/front.conf"));
    let out = nginx::render_local(&options).unwrap();
    assert_eq!(out, dir.path().join("elsewhere/front.conf"));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains(&format!(
        "    ssl_certificate {};\n",
        cert.canonicalize().unwrap().display()
    )));
    assert!(text.contains("listen 127.0.0.2:8080 ssl http2 default_server reuseport backlog=4096;"));
    assert!(text.contains("access_by_lua_block { isu_router.require_secret() }"));
    assert!(text.contains(
        "listen 127.0.0.5:8080 ssl http2 reuseport backlog=4096;\n        server_name isucondition-4.t.isucon.dev;"
    ));
    let placement = std::fs::read_to_string(run_dir.join("placement.map")).unwrap();
    assert_default_placement(
        &text,
        &placement,
        &[
            ("a", "127.0.0.3:3000"),
            ("b", "127.0.0.4:3000"),
            ("c", "127.0.0.5:3000"),
        ],
    );

    // Half a TLS setting, an unreadable certificate: clear errors.
    let mut missing = options.clone();
    missing.tls = Some(Tls {
        cert: dir.path().join("nope.pem"),
        key: cert,
    });
    let error = nginx::render_local(&missing).unwrap_err().to_string();
    assert!(error.contains("TLS certificate not readable"), "{error}");
}

#[test]
fn local_rendering_that_nginx_refuses_is_an_error() {
    let (dir, run_dir, static_dir) = local_dirs();
    let template = dir.path().join("bad.template");
    let good = std::fs::read_to_string(repo().join("nginx/nginx.conf.template")).unwrap();
    std::fs::write(
        &template,
        good.replace(
            "worker_connections 4096;",
            "worker_connections 4096; bogus_directive on;",
        ),
    )
    .unwrap();
    let mut options = options(&run_dir, &static_dir, &["a=127.0.0.3:3000,127.0.0.3:8080"]);
    options.template = template.clone();
    let error = nginx::render_local(&options).unwrap_err();
    assert!(matches!(error, NginxError::Check { .. }), "{error}");
    assert!(error.to_string().contains("bogus_directive"), "{error}");
    assert!(
        !run_dir.join("nginx.conf").exists(),
        "nothing written when the check fails"
    );
    // Without the check it is written as asked.
    options.check = false;
    assert!(nginx::render_local(&options).is_ok());
    // A placeholder nobody knows.
    std::fs::write(&template, format!("{good}\n# @NOT_A_VALUE@\n")).unwrap();
    let error = nginx::render_local(&options).unwrap_err().to_string();
    assert!(error.contains("@NOT_A_VALUE@"), "{error}");
}

/// The default map file for three cells is the fixture's.
#[test]
fn the_default_placement_is_the_fixtures() {
    let cells: Vec<CellSpec> = [
        "a=127.0.1.3:3000,127.0.1.3:8080",
        "b=127.0.1.4:3000,127.0.1.4:8080",
        "c=127.0.1.5:3000,127.0.1.5:8080",
    ]
    .iter()
    .map(|spec| cell(spec))
    .collect();
    let text = nginx::default_placement(&cells).unwrap();
    assert_fixture("nginx", &text, "placement-3-cells.map");
}

/// A free loopback port (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.0 exchange with `address`: the status and the body.
fn exchange(address: &str, request: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body).to_owned();
    (status, body)
}

/// The Prometheus routes through a running nginx: 401 without the cluster secret, 403 with a
/// wrong one, passed on with it (path and query kept); no other Prometheus path, and no
/// write, gets through.
#[test]
fn the_prometheus_routes_want_the_secret_and_pass_only_two_reads() {
    let (dir, run_dir, static_dir) = local_dirs();
    // A stand-in Prometheus: answers every request with the line it was asked.
    let prometheus = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let prometheus_address = prometheus.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        use std::io::{BufRead as _, Write as _};
        for stream in prometheus.incoming().flatten() {
            let mut reader = std::io::BufReader::new(stream);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let body = format!("prometheus saw {}", line.trim());
            let _ = write!(
                reader.get_mut(),
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let control = format!("127.0.0.1:{}", free_port());
    let mut options = options(&run_dir, &static_dir, &["a=127.0.0.1:1,127.0.0.1:2"]);
    options.public_listen = format!("127.0.0.1:{}", free_port());
    options.router_control = control.clone();
    options.device_servers = false;
    options.access_log = false;
    options.prometheus = Some(nginx::PrometheusProxy {
        prefix: "/prometheus".to_owned(),
        listen: prometheus_address,
    });
    let conf = nginx::render_local(&options).unwrap();
    let mut child = std::process::Command::new(nginx::default_nginx_bin())
        .arg("-p")
        .arg(format!("{}/", run_dir.display()))
        .arg("-c")
        .arg(&conf)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(&control).is_err() {
        assert!(started.elapsed().as_secs() < 10, "nginx did not listen on {control}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let get = |path: &str, secret: Option<&str>| {
        let header = secret.map_or_else(String::new, |secret| format!("X-Cluster-Secret: {secret}\r\n"));
        exchange(&control, &format!("GET {path} HTTP/1.0\r\nHost: x\r\n{header}\r\n"))
    };
    let alerts = "/prometheus/api/v1/alerts";
    let range = "/prometheus/api/v1/query_range?query=up&step=1";
    let results = [
        get(alerts, None),
        get(alerts, Some("a-wrong-secret")),
        get(alerts, Some("a-test-secret")),
        get(range, Some("a-test-secret")),
        get("/prometheus/api/v1/query?query=up", Some("a-test-secret")),
        get("/prometheus/api/v1/status/config", Some("a-test-secret")),
        exchange(
            &control,
            "POST /prometheus/api/v1/query_range HTTP/1.0\r\nHost: x\r\nX-Cluster-Secret: a-test-secret\r\nContent-Length: 0\r\n\r\n",
        ),
    ];
    // SIGTERM: the master stops its workers too (SIGKILL would leave them running).
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    drop(dir);
    let statuses: Vec<u16> = results.iter().map(|(status, _)| *status).collect();
    assert_eq!(statuses, [401, 403, 200, 200, 404, 404, 403], "{results:?}");
    assert_eq!(results[2].1, "prometheus saw GET /api/v1/alerts HTTP/1.1");
    assert_eq!(
        results[3].1,
        "prometheus saw GET /api/v1/query_range?query=up&step=1 HTTP/1.1"
    );
    assert!(!results[0].1.contains("prometheus saw"), "{results:?}");
}
