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

/// Three replicas: 1 beside nginx, 2 and 3 beside the workers.
#[test]
fn three_replicas_render_as_the_fixture() {
    let text = rendered(&contest(&[(0, 1), (1, 2), (2, 3)]));
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
    for line in [
        "    upstream coordinator_replica_2 {",
        "        server 192.168.0.12:3001 max_fails=0;",
        "        server 192.168.0.11:3000 max_fails=0 backup;",
        "        server 192.168.0.13:3001 max_fails=0 backup;",
        "            set_by_lua_block $isu_coordinator { return isu_replicas.upstream() }",
        "            replicas = { \"192.168.0.11:3000\", \"192.168.0.12:3001\", \"192.168.0.13:3001\" },",
        "        listen 192.168.0.11:3099;",
    ] {
        assert!(nginx.lines().any(|l| l == line), "nginx.conf lacks {line}");
    }
    assert!(nginx.contains("map_file = \"/var/lib/isucondition/nginx/placement.map\","));
    let unit = file(&text, "isucondition-1", "etc/systemd/system/isu-nginx.service");
    assert!(unit
        .contains("test -s /var/lib/isucondition/nginx/placement.map || cp /etc/isucondition/placement.default.map"));
    let map = file(&text, "isucondition-1", "etc/isucondition/placement.default.map");
    assert!(map.contains("\nversion 1\n") && map.contains("\ncell 0 a\n"), "{map}");
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
}
