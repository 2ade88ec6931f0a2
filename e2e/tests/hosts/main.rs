//! The system test on network-namespace hosts: the deployment's rendered files running on
//! hosts made on this machine (`isuctl hosts`), with TLS, isolation, a partition, latency and
//! loss, and with coordinator replicas the leader's host cut off. Needs root, so it is
//! ignored by `cargo test`; `scripts/hosts test [--workers 2|3] [--coordinators 1|3]` builds
//! what it needs and runs it (`checks` says what it checks).
//!
//! The shape comes from the environment, as the script passes it: `ISU_HOSTS_WORKERS` (2 or
//! 3, default 2), `ISU_HOSTS_COORDINATORS` (1 or 3, default 1), `ISU_HOSTS_NO_BUILD` (set:
//! the release binaries are not built first), `ISU_HOSTS_BENCH_SECONDS` (each bench run, 20).

mod checks;
mod leader_cut;
mod metrics;
mod nodes;
mod probe;

use hostlab::Hosts;

/// How many worker hosts and coordinator replicas a run has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub workers: u8,
    pub coordinators: u8,
}

impl Shape {
    /// The shape named by `workers` and `coordinators` (unset: 2 and 1).
    fn parse(workers: Option<&str>, coordinators: Option<&str>) -> Result<Shape, String> {
        let workers = match workers {
            None => 2,
            Some(text) => text
                .parse::<u8>()
                .ok()
                .filter(|count| hostlab::plan::WORKERS.contains(&usize::from(*count)))
                .ok_or_else(|| format!("workers {text:?}: 2 or 3"))?,
        };
        let coordinators = match coordinators {
            None => 1,
            Some(text) => hostlab::parse_coordinators(text)?,
        };
        Ok(Shape { workers, coordinators })
    }

    fn from_env() -> Result<Shape, String> {
        let var = |name: &str| std::env::var(name).ok();
        Shape::parse(
            var("ISU_HOSTS_WORKERS").as_deref(),
            var("ISU_HOSTS_COORDINATORS").as_deref(),
        )
    }
}

/// The hosts of this checkout, whose hosts run `deploy run-host` with the isuctl that
/// `scripts/hosts test` built beside this test (not this test's own binary).
fn hosts() -> Hosts {
    let mut hosts = Hosts::from_env(e2e::nginx::repository_root()).expect("the hosts' directories");
    hosts.isuctl = e2e::process::node_binary("isuctl");
    hosts
}

#[test]
#[ignore = "needs root and network namespaces: scripts/hosts test runs it"]
fn every_check_holds_on_the_namespace_hosts() {
    let shape = Shape::from_env().unwrap_or_else(|error| panic!("{error}"));
    let build = std::env::var_os("ISU_HOSTS_NO_BUILD").is_none();
    let failed = checks::run(&hosts(), shape, build).unwrap_or_else(|error| panic!("hosts test: {error:#}"));
    assert!(
        failed.is_empty(),
        "hosts test: {} check(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn the_shape_is_checked_as_the_script_checked_it() {
    assert_eq!(
        Shape::parse(None, None),
        Ok(Shape {
            workers: 2,
            coordinators: 1
        })
    );
    assert_eq!(
        Shape::parse(Some("3"), None),
        Ok(Shape {
            workers: 3,
            coordinators: 1
        })
    );
    assert_eq!(
        Shape::parse(None, Some("3")),
        Ok(Shape {
            workers: 2,
            coordinators: 3
        })
    );
    for bad in ["5", "1", "x"] {
        assert!(Shape::parse(Some(bad), None).is_err(), "workers {bad} is refused");
    }
    for bad in ["0", "2", "5", "x"] {
        assert!(Shape::parse(None, Some(bad)).is_err(), "coordinators {bad} is refused");
    }
}
