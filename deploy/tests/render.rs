//! The renderer through its library interface: every host's files for an inventory, the same
//! as the fixtures (`ISU_UPDATE_FIXTURES=1` rewrites them after a reviewed change, and `git
//! diff` shows what changed). One coordinator renders as it always has; three coordinator
//! replicas (one beside nginx, one beside each worker) render a unit per replica host, every
//! member in each replica's flags, every replica in each worker's and in nginx's upstream.

mod common;
use std::fmt::Write as _;
use std::path::Path;

use common::{assert_fixture, repo};

use deploy::inventory::Inventory;
use deploy::render::{render, Context};

/// The contest's three hosts (as `ops/deploy/contest.toml`, without the bundle), with a
/// replica key added to the hosts by `replicas` (host index → replica id).
fn contest(replicas: &[(usize, u64)]) -> String {
    let mut text = String::from(
        "replaces = [\"nginx.service\", \"isucondition.go.service\"]\n\
         jia_service_url = \"http://isucondition-1.t.isucon.dev:5000\"\n\
         [tls]\ncert = \"/etc/ssl/isucondition/fullchain.pem\"\nkey = \"/etc/ssl/isucondition/privkey.pem\"\n",
    );
    for index in 0..3 {
        let number = index + 1;
        write!(text, "\n[[host]]\nname = \"isucondition-{number}\"\n").unwrap();
        match index {
            0 => text.push_str("role = \"coordinator\"\n"),
            _ => write!(text, "role = \"worker\"\ncell = \"{}\"\n", ["a", "b"][index - 1]).unwrap(),
        }
        if let Some((_, id)) = replicas.iter().find(|(host, _)| *host == index) {
            writeln!(text, "coordinator_replica = {id}").unwrap();
        }
        write!(
            text,
            "server_name = \"isucondition-{number}.t.isucon.dev\"\npublic_address = \"0.0.0.0\"\n\
             internal_address = \"192.168.0.1{number}\"\n"
        )
        .unwrap();
    }
    text
}

/// Every rendered file of every host as one text: `=== HOST PATH (MODE)` and its contents.
fn rendered(inventory_text: &str) -> String {
    let inventory: Inventory = toml::from_str(inventory_text).unwrap();
    inventory.check().unwrap();
    let base = Path::new("/nonexistent");
    let template = repo().join("nginx/nginx.conf.template");
    let context = Context {
        base,
        secret: "0123456789abcdef-fixture-secret",
        ops_token: "fedcba9876543210-fixture-ops-token",
        nginx_template: &template,
    };
    let hosts = render(&inventory, &context).unwrap();
    let mut text = String::new();
    for (host, files) in &hosts {
        for (path, file) in &files.files {
            if path.ends_with(".isu-deploy/apply.sh") {
                continue; // deploy/src/apply.sh as it is
            }
            writeln!(text, "=== {host} {} ({:o})", path.display(), file.mode).unwrap();
            text.push_str(&String::from_utf8_lossy(&file.contents));
        }
    }
    text
}

/// One coordinator: the contest's shape, rendered as before replicas existed.
#[test]
fn one_coordinator_renders_as_the_fixture() {
    assert_fixture("render", &rendered(&contest(&[])), "contest-one-coordinator.txt");
}

/// Three replicas: 1 beside nginx, 2 and 3 beside the workers; with Prometheus.
#[test]
fn three_replicas_render_as_the_fixture() {
    let text = rendered(&format!("{}\n[prometheus]\n", contest(&[(0, 1), (1, 2), (2, 3)])));
    assert_fixture("render", &text, "contest-three-replicas.txt");
    let members = "ISU_REPLICAS=\"1=http://192.168.0.11:3000 2=http://192.168.0.12:3001 3=http://192.168.0.13:3001\"";
    let pushes_to =
        "ISU_COORDINATOR_URL=\"http://192.168.0.11:3000 http://192.168.0.12:3001 http://192.168.0.13:3001\"";
    for (host, id, listen) in [
        (1, 1, "192.168.0.11:3000"),
        (2, 2, "192.168.0.12:3001"),
        (3, 3, "192.168.0.13:3001"),
    ] {
        let env = file(
            &text,
            &format!("isucondition-{host}"),
            "etc/isucondition/coordinator.env",
        );
        for line in [
            format!("ISU_LISTEN={listen}"),
            format!("ISU_REPLICA_ID={id}"),
            members.to_owned(),
            "ISU_ROUTER_URL=http://192.168.0.11:3099".to_owned(),
            format!("ISU_ROUTER_MAP=/var/lib/isucondition/coordinator-{id}/placement.map"),
        ] {
            assert!(
                env.lines().any(|l| l == line),
                "isucondition-{host} lacks {line}:\n{env}"
            );
        }
        let unit = file(
            &text,
            &format!("isucondition-{host}"),
            "etc/systemd/system/isu-coordinator.service",
        );
        assert!(unit.contains(&format!("\nStateDirectory=isucondition/coordinator-{id}\n")));
        let units = file(&text, &format!("isucondition-{host}"), ".isu-deploy/units");
        assert!(units.lines().any(|unit| unit == "isu-coordinator.service"), "{units}");
        if host > 1 {
            let worker = file(&text, &format!("isucondition-{host}"), "etc/isucondition/worker.env");
            assert!(worker.lines().any(|l| l == pushes_to), "{worker}");
            assert!(!env.contains("ISU_STATIC_DIR"), "the front end is nginx's host's");
        }
    }
    let nginx = file(&text, "isucondition-1", "etc/isucondition/nginx.conf");
    assert_lines(
        nginx,
        "nginx.conf",
        &[
            "    upstream coordinator_replica_2 {",
            "        server 192.168.0.12:3001 max_fails=0;",
            "        server 192.168.0.11:3000 max_fails=0 backup;",
            "        server 192.168.0.13:3001 max_fails=0 backup;",
            "            set_by_lua_block $isu_coordinator { return isu_replicas.upstream() }",
            "            replicas = { \"192.168.0.11:3000\", \"192.168.0.12:3001\", \"192.168.0.13:3001\" },",
            "        listen 192.168.0.11:3099;",
        ],
    );
    assert!(nginx.contains("map_file = \"/var/lib/isucondition/nginx/placement.map\","));
    let unit = file(&text, "isucondition-1", "etc/systemd/system/isu-nginx.service");
    assert!(unit
        .contains("test -s /var/lib/isucondition/nginx/placement.map || cp /etc/isucondition/placement.default.map"));
    let map = file(&text, "isucondition-1", "etc/isucondition/placement.default.map");
    assert!(map.contains("\nversion 1\n") && map.contains("\ncell 0 a\n"), "{map}");
}

/// `[prometheus]`: a unit on the coordinator host scraping every replica and worker with
/// the secret (through `LoadCredential=`, loopback only), the project's rules installed;
/// every replica reaches it through nginx's control server (which wants the secret); the
/// operator token on every coordinator host, mode 600, apart from the secret.
#[test]
fn prometheus_scrapes_every_node_and_the_replicas_reach_it_behind_the_secret() {
    let text = rendered(&format!("{}\n[prometheus]\n", contest(&[(0, 1), (1, 2), (2, 3)])));
    let config = file(&text, "isucondition-1", "etc/isucondition/prometheus/prometheus.yml");
    for target in [
        "192.168.0.11:3000\"]\n        labels: {node: \"coordinator-1\", cell: \"coordinator\"}",
        "192.168.0.12:3001\"]\n        labels: {node: \"coordinator-2\", cell: \"coordinator\"}",
        "192.168.0.13:3001\"]\n        labels: {node: \"coordinator-3\", cell: \"coordinator\"}",
        "192.168.0.12:3000\"]\n        labels: {node: \"worker-a\", cell: \"a\"}",
        "192.168.0.13:3000\"]\n        labels: {node: \"worker-b\", cell: \"b\"}",
    ] {
        assert!(config.contains(target), "{target} not scraped:\n{config}");
    }
    assert!(config.contains("credentials_file: cluster-secret\n"), "{config}");
    assert!(
        config.contains("  - /etc/isucondition/prometheus/rules/*.yml\n"),
        "{config}"
    );
    assert!(
        text.contains("=== isucondition-1 etc/isucondition/prometheus/secret (600)\n0123456789abcdef-fixture-secret\n")
    );
    for rules in std::fs::read_dir(repo().join("ops/prometheus/rules")).unwrap() {
        let name = rules.unwrap().file_name().into_string().unwrap();
        let installed = file(
            &text,
            "isucondition-1",
            &format!("etc/isucondition/prometheus/rules/{name}"),
        );
        assert_eq!(
            installed,
            std::fs::read_to_string(repo().join("ops/prometheus/rules").join(&name)).unwrap()
        );
    }
    let unit = file(&text, "isucondition-1", "etc/systemd/system/isu-prometheus.service");
    assert_lines(
        unit,
        "isu-prometheus.service",
        &[
            "LoadCredential=prometheus.yml:/etc/isucondition/prometheus/prometheus.yml",
            "LoadCredential=cluster-secret:/etc/isucondition/prometheus/secret",
            "StateDirectory=isucondition/prometheus",
            "DynamicUser=yes",
        ],
    );
    assert!(
        unit.contains(" --web.listen-address=127.0.0.1:9090 "),
        "loopback only:\n{unit}"
    );
    let units = file(&text, "isucondition-1", ".isu-deploy/units");
    assert!(units.lines().any(|unit| unit == "isu-prometheus.service"), "{units}");
    let nginx = file(&text, "isucondition-1", "etc/isucondition/nginx.conf");
    assert_lines(
        nginx,
        "nginx.conf",
        &[
            "        location ~ ^/prometheus/api/v1/(query_range|alerts)$ {",
            "            access_by_lua_block { isu_router.require_secret() }",
            "            proxy_pass http://127.0.0.1:9090;",
        ],
    );
    for host in 1..=3 {
        let host = format!("isucondition-{host}");
        let env = file(&text, &host, "etc/isucondition/coordinator.env");
        assert!(
            env.lines()
                .any(|l| l == "ISU_PROMETHEUS_URL=http://192.168.0.11:3099/prometheus"),
            "{host}:\n{env}"
        );
        assert!(
            !env.contains("fixture-ops-token"),
            "the token is not in the environment"
        );
        let unit = file(&text, &host, "etc/systemd/system/isu-coordinator.service");
        assert!(
            unit.contains(" --ops-token-file ${CREDENTIALS_DIRECTORY}/ops-token"),
            "{unit}"
        );
        assert!(
            unit.contains("\nLoadCredential=ops-token:/etc/isucondition/ops-token\n"),
            "{unit}"
        );
        assert!(text.contains(&format!(
            "=== {host} etc/isucondition/ops-token (600)\nfedcba9876543210-fixture-ops-token\n=== "
        )));
    }
    // Without `[prometheus]`: no unit, no proxy, no URL; the console still signs in.
    let without = rendered(&contest(&[]));
    assert!(
        !without.contains("prometheus"),
        "nothing of Prometheus without [prometheus]"
    );
    assert!(without.contains("--ops-token-file"));
}

/// Every one of `lines` is a whole line of `text` (the file `what`).
fn assert_lines(text: &str, what: &str, lines: &[&str]) {
    for line in lines {
        assert!(text.lines().any(|l| l == *line), "{what} lacks {line}:\n{text}");
    }
}

/// One file of a rendering as [`rendered`] prints it.
fn file<'a>(text: &'a str, host: &str, path: &str) -> &'a str {
    let marker = format!("=== {host} {path} (");
    let start = text.find(&marker).unwrap_or_else(|| panic!("no {host} {path}"));
    let body = &text[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    &body[..body.find("\n=== ").map_or(body.len(), |end| end + 1)]
}

/// `ops/deploy/contest.toml` with its commented `coordinator_replica` lines taken in is a
/// three-replica inventory (the file's own example holds).
#[test]
fn the_contest_inventory_example_of_three_replicas_holds() {
    let text = std::fs::read_to_string(repo().join("ops/deploy/contest.toml")).unwrap();
    let replicated = text.replace("# coordinator_replica = ", "coordinator_replica = ");
    assert_ne!(replicated, text, "the example is in the file");
    let inventory: Inventory = toml::from_str(&replicated).unwrap();
    inventory.check().unwrap();
    let names: Vec<&str> = inventory.replicas().iter().map(|host| host.name.as_str()).collect();
    assert_eq!(names, ["isucondition-1", "isucondition-2", "isucondition-3"]);
    let as_is: Inventory = toml::from_str(&text).unwrap();
    as_is.check().unwrap();
    assert!(as_is.replicas().is_empty(), "one coordinator by default");
    assert!(as_is.prometheus.is_none(), "no Prometheus by default");
    let with_prometheus: Inventory = toml::from_str(&text.replace("# [prometheus]", "[prometheus]")).unwrap();
    with_prometheus.check().unwrap();
    assert!(
        with_prometheus.prometheus.is_some(),
        "the file's Prometheus example holds"
    );
}
