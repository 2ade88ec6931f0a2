//! The nginx renderer through its library interface: the same files as `scripts/render-nginx`
//! rendered for another host (fixtures made with that script before it was replaced; one
//! comment line now names `isuctl render nginx`), and
//! local renderings that the installed nginx accepts (`nginx -t`), with the default map.

use std::path::{Path, PathBuf};

use deploy::nginx::{self, CellSpec, NginxError, Options, Tls};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/nginx")
            .join(name),
    )
    .unwrap()
}

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
        coordinator: "127.0.0.2:3000".to_owned(),
        cells: cells.iter().map(|spec| cell(spec)).collect(),
        placement: None,
        reset_placement: false,
        worker_processes: "auto".to_owned(),
        device_servers: true,
        access_log: true,
        tls: None,
        check: true,
        nginx_bin: nginx::default_nginx_bin(),
    }
}

/// The deploy's form: two cells, no device servers, no access log.
#[test]
fn for_host_two_cells_renders_as_the_script_did() {
    let mut options = options(
        Path::new("/srv/isu/nginx"),
        Path::new("/srv/isu/web"),
        &[
            "a=10.0.0.2:3000,0.0.0.0:443,isucondition-2.t.isucon.dev",
            "b=10.0.0.3:3000,0.0.0.0:443,isucondition-3.t.isucon.dev",
        ],
    );
    options.public_listen = "0.0.0.0:443".to_owned();
    options.coordinator = "10.0.0.1:3000".to_owned();
    options.placement = Some("/srv/isu/coordinator/placement.conf".into());
    options.device_servers = false;
    options.access_log = false;
    let text = nginx::render_for_host(&options, "www-data").unwrap();
    assert_eq!(text, fixture("for-host-2-cells.conf"));
}

/// Three cells (one named with a dash and its own server name), device servers, TLS.
#[test]
fn for_host_three_cells_with_tls_renders_as_the_script_did() {
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
    options.coordinator = "10.0.0.1:3000".to_owned();
    options.tls = Some(Tls {
        cert: "/etc/ssl/cert.pem".into(),
        key: "/etc/ssl/key.pem".into(),
    });
    let text = nginx::render_for_host(&options, "www-data").unwrap();
    assert_eq!(text, fixture("for-host-3-cells-tls.conf"));
}

/// The script's defaults (cells a and b on 127.0.0.3/.4, access log on) and worker processes.
#[test]
fn for_host_defaults_render_as_the_script_did() {
    let mut options = options(
        Path::new("/srv/isu/nginx"),
        Path::new("/srv/isu/web"),
        &["a=127.0.0.3:3000,127.0.0.3:8080", "b=127.0.0.4:3000,127.0.0.4:8080"],
    );
    options.worker_processes = "2".to_owned();
    let text = nginx::render_for_host(&options, "nginx").unwrap();
    assert_eq!(text, fixture("for-host-defaults.conf"));
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
    spaced.coordinator = "h:1; evil".to_owned();
    let error = nginx::render_for_host(&spaced, "www-data").unwrap_err().to_string();
    assert!(error.contains("value unusable in nginx.conf"), "{error}");
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
    let mut seventeen = good;
    seventeen.cells = (0..17).map(|index| cell(&format!("c{index}=h:1,h:2"))).collect();
    assert!(nginx::render_for_host(&seventeen, "www-data")
        .unwrap_err()
        .to_string()
        .contains("1 to 16 cells"));
}

fn local_dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let static_dir = dir.path().join("static");
    std::fs::create_dir_all(&static_dir).unwrap();
    std::fs::write(static_dir.join("index.html"), "<!doctype html>").unwrap();
    (dir, run_dir, static_dir)
}

/// The default map: PlacementMap::new's spread, slot s to cell (s >> 4) mod N.
fn assert_default_placement(text: &str, cells: &[(&str, &str)]) {
    for (name, node) in cells {
        assert!(
            text.contains(&format!("upstream cell_{name} {{\n    server {node};\n")),
            "{text}"
        );
    }
    for slot in 0..256usize {
        let (name, _) = cells[(slot >> 4) % cells.len()];
        assert!(
            text.contains(&format!("\n    {slot:02x} cell_{name};\n")),
            "slot {slot:02x}: {text}"
        );
    }
    assert!(text.contains("map $isu_uuid $isu_cell {\n    default $isu_slot_cell;\n}\n"));
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
    assert!(text.contains(&format!("include {run}/placement.conf;\n")));
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
    let placement = std::fs::read_to_string(run_dir.join("placement.conf")).unwrap();
    assert_default_placement(&placement, &[("a", "127.0.0.3:3000"), ("b", "127.0.0.4:3000")]);

    // An existing map is the coordinator's: kept, unless reset.
    std::fs::write(
        run_dir.join("placement.conf"),
        placement.replace("    00 cell_a;", "    00 cell_b;"),
    )
    .unwrap();
    nginx::render_local(&options).unwrap();
    assert!(std::fs::read_to_string(run_dir.join("placement.conf"))
        .unwrap()
        .contains("    00 cell_b;"));
    let mut reset = options.clone();
    reset.reset_placement = true;
    nginx::render_local(&reset).unwrap();
    assert!(std::fs::read_to_string(run_dir.join("placement.conf"))
        .unwrap()
        .contains("    00 cell_a;"));
}

#[test]
fn local_three_cells_with_tls_pass_nginx_t() {
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
    options.out = Some(dir.path().join("elsewhere/front.conf"));
    let out = nginx::render_local(&options).unwrap();
    assert_eq!(out, dir.path().join("elsewhere/front.conf"));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains(&format!(
        "    ssl_certificate {};\n",
        cert.canonicalize().unwrap().display()
    )));
    assert!(text.contains("listen 127.0.0.2:8080 ssl http2 default_server reuseport backlog=4096;"));
    assert!(text.contains(
        "listen 127.0.0.5:8080 ssl http2 reuseport backlog=4096;\n        server_name isucondition-4.t.isucon.dev;"
    ));
    let placement = std::fs::read_to_string(run_dir.join("placement.conf")).unwrap();
    assert_default_placement(
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

/// The default map is the script's (made with it for three cells), but for the line naming
/// who wrote it.
#[test]
fn the_default_placement_is_the_scripts() {
    let cells: Vec<CellSpec> = [
        "a=127.0.1.3:3000,127.0.1.3:8080",
        "b=127.0.1.4:3000,127.0.1.4:8080",
        "c=127.0.1.5:3000,127.0.1.5:8080",
    ]
    .iter()
    .map(|spec| cell(spec))
    .collect();
    let text = nginx::default_placement(&cells).unwrap();
    let expected = fixture("placement-3-cells.conf");
    assert_eq!(text.replace("isuctl render nginx", "scripts/render-nginx"), expected);
}
