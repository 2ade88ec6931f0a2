//! `isuctl hosts test`: up, every check, down; passes only if every check holds.
//!
//! 1. The bench over TLS from its own host passes, with 0 errors, its devices posting to
//!    their workers over TLS.
//! 2. Isolation: internal addresses are unreachable from the bench host even when it routes
//!    the internal network its way (with replicas, nginx's control server on the internal
//!    address too, which refuses a call without the secret); nginx and the device servers
//!    answer 404 to internal routes even with the secret; no plain HTTP on the device address.
//! 3. A 10 s cut between the coordinator host and worker host a under load: a stores device
//!    posts meanwhile, pushes no latest condition through the cut and delivers the held-back
//!    ones after the heal; the other cells' ISUs see no failure; no wrong data; nothing
//!    acknowledged is lost.
//! 4. With `--coordinators 3`: the replicas' leader's host cut off under load
//!    (`hosts::leader_cut`), on a network without impairment.
//! 5. 50 ms latency and 1 % loss between every pair of hosts: the bench still passes.
//!
//! With three coordinator replicas, check 3 cuts replica 2 (beside cell a) off from nginx and
//! replica 1 with its worker, so three of its judgements change: cell a keeps pushing its
//! latest conditions to replica 3 (no push getting through is checked with one coordinator
//! only); a client nginx moves between replicas may see the trend go back (replica 1 lacks
//! cell a's newest conditions meanwhile: that error alone is allowed); the other cells'
//! ISUs' failures are printed, not counted, since they include the coordinator's ISU routes
//! (detail, icon), which time out at the bench (1 s) for clients whose replica nginx cannot
//! reach until it sets that replica aside (its connect timeout is 3 s).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use serde_json::Value;

use super::{metrics, BenchArgs, HostPlan, Hosts, TestArgs, Tls, UpArgs};
use crate::output::{self, Format};

/// One check's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub what: String,
    pub ok: bool,
}

/// The whole test's outcome (`--json`).
#[derive(Debug, Serialize)]
pub struct Report {
    pub workers: u8,
    pub coordinators: u8,
    pub checks: Vec<Check>,
    pub failures: usize,
    pub seconds: u64,
    pub state_dir: std::path::PathBuf,
}

/// Collects checks, printing each as it is decided (on stderr with `--json`).
pub(super) struct Checks {
    format: Format,
    checks: Vec<Check>,
}

impl Checks {
    pub(super) fn check(&mut self, what: impl Into<String>, ok: bool) {
        let what = what.into();
        self.say(&format!("{}  {what}", if ok { "ok  " } else { "FAIL" }));
        self.checks.push(Check { what, ok });
    }

    pub(super) fn say(&self, line: &str) {
        match self.format {
            Format::Human => println!("{line}"),
            Format::Json => eprintln!("{line}"),
        }
    }
}

/// Takes the hosts down when dropped: the test never leaves them up, whatever fails.
struct DownOnDrop<'a>(&'a Hosts);

impl Drop for DownOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.down();
    }
}

/// What check 4 runs with replicas: the leader's host cut off under load
/// (`super::leader_cut::run`, handed in by the parent, which wires the two).
pub(super) type LeaderCut = fn(&Hosts, &mut Checks, &[HostPlan], u64) -> anyhow::Result<()>;

pub(super) fn run(hosts: &Hosts, args: &TestArgs, format: Format, leader_cut: LeaderCut) -> anyhow::Result<()> {
    super::require_root()?;
    let seconds: u64 = match std::env::var("ISU_HOSTS_BENCH_SECONDS") {
        Ok(text) => text
            .parse()
            .ok()
            .filter(|&seconds| seconds > 0)
            .with_context(|| format!("ISU_HOSTS_BENCH_SECONDS={text:?}: a number of seconds"))?,
        Err(_) => 20,
    };
    let started = Instant::now();
    if hosts.state()?.is_some() {
        hosts.down()?;
    }
    stop_on_signals(hosts)?;
    let _down = DownOnDrop(hosts);
    hosts.up(&UpArgs {
        workers: args.workers,
        coordinators: args.coordinators,
        tls: Tls::On,
        no_build: args.no_build,
    })?;
    let mut checks = Checks {
        format,
        checks: Vec::new(),
    };
    let workers = usize::from(args.workers);
    let state_dir = &hosts.paths.state;
    let cluster: Vec<_> = super::plan::hosts(workers, args.coordinators)
        .into_iter()
        .filter(|host| host.is_cluster_host())
        .collect();

    // 1. The bench over TLS, from its own host.
    let tls = bench(hosts, seconds, &["--no-growth"], "tls")?;
    summary(&checks, "bench over TLS", &state_dir.join("tls.out"));
    checks.check("the bench over TLS passes", tls["passed"] == Value::Bool(true));
    checks.check(
        format!("with 0 errors ({} errors, {} timeouts)", tls["errors"], tls["timeouts"]),
        tls["errors"] == 0,
    );
    let accepted = tls["device_posts"]["accepted"].as_u64().unwrap_or(0);
    checks.check(
        format!("devices posted over TLS to their workers ({accepted} accepted)"),
        accepted > 100,
    );

    // 2. Internal routes from the bench host, even when it routes the internal network its way.
    crate::external::run_checked(std::process::Command::new("ip").args([
        "netns",
        "exec",
        "isu-hb",
        "ip",
        "route",
        "add",
        super::plan::INTERNAL_NETWORK,
        "dev",
        "pub0",
    ]))?;
    let secret = hosts.secret_header()?;
    for host in &cluster {
        let internal = host.internal_address.expect("a cluster host");
        checks.check(
            format!("internal address of {} unreachable from the bench host", host.name),
            hosts.curl_status("isu-hb", &format!("http://{internal}:3000/healthz"), &[]) == "000",
        );
        checks.check(
            format!("no node listens on the public address of {}:3000", host.name),
            hosts.curl_status("isu-hb", &format!("http://{}:3000/healthz", host.public_address), &[]) == "000",
        );
        if host.replica.is_some() && host.role != super::plan::Role::Coordinator {
            let port = super::plan::NODE_PORT + 1;
            checks.check(
                format!("the replica beside the worker on {} unreachable from the bench host (:{port}, internal and public)", host.name),
                hosts.curl_status("isu-hb", &format!("http://{internal}:{port}/healthz"), &[]) == "000"
                    && hosts.curl_status("isu-hb", &format!("http://{}:{port}/healthz", host.public_address), &[]) == "000",
            );
        }
    }
    if args.coordinators > 1 {
        // With replicas nginx's control server listens on the coordinator host's internal
        // address (a leader on another host hands it the map): internal, and the secret required.
        let control = format!(
            "http://{}:{}/map",
            cluster[0].internal_address.expect("a cluster host"),
            deploy::inventory::ROUTER_CONTROL_PORT
        );
        checks.check(
            "nginx's control server (internal address) unreachable from the bench host",
            hosts.curl_status("isu-hb", &control, &[]) == "000",
        );
        checks.check(
            "nginx's control server refuses a worker host without the secret (401) and answers with it",
            hosts.curl_status(&cluster[1].netns, &control, &[]) == "401"
                && hosts.curl_status(&cluster[1].netns, &control, &["-H", secret.as_str()]) == "200",
        );
    }
    let site = hosts.site()?;
    let with_secret = ["-H", secret.as_str()];
    checks.check(
        "nginx answers 404 to /internal/cells, even with the secret",
        hosts.curl_status("isu-hb", &format!("{site}/internal/cells"), &with_secret) == "404",
    );
    checks.check(
        "nginx answers 404 to /metrics, even with the secret",
        hosts.curl_status("isu-hb", &format!("{site}/metrics"), &with_secret) == "404",
    );
    checks.check(
        "a worker's device server answers 404 to /internal/users, even with the secret",
        hosts.curl_status(
            "isu-hb",
            &format!("https://isucondition-2.{}/internal/users", super::plan::DOMAIN),
            &with_secret,
        ) == "404",
    );
    checks.check(
        "plain HTTP is not served on the device address",
        hosts.curl_status(
            "isu-hb",
            &format!("http://isucondition-2.{}:443/", super::plan::DOMAIN),
            &[],
        ) != "200",
    );

    // 3. A partition between the coordinator host and worker host a, under load.
    let metric =
        |host: &str, prefix: &str| -> anyhow::Result<f64> { Ok(metrics::sum(&hosts.metrics_text(host)?, prefix)) };
    let stored_total = || hosts.stored_conditions(cluster.iter().skip(1).map(|host| host.name.as_str()));
    let stored_before = stored_total()?;
    let partition = {
        let hosts_for_bench = BenchArgs {
            pin: false,
            bench_args: bench_options(
                seconds + 12,
                &["--no-growth", "--keep-going"],
                &state_dir.join("partition.json"),
            ),
        };
        let output = state_dir.join("partition.out");
        let hosts_ref = hosts;
        std::thread::scope(|scope| -> anyhow::Result<Value> {
            let bench = scope.spawn(move || hosts_ref.bench(&hosts_for_bench, Some(&output)));
            std::thread::sleep(Duration::from_secs(10));
            let posted_before = metric("isucondition-2", "conditions_stored_total")?;
            let slow_before = metrics::slow_pushes(&hosts.metrics_text("isucondition-2")?);
            hosts.net("cut isucondition-1 isucondition-2")?;
            let cut_at = Instant::now();
            // A push already answered when the cut came may still be counted: count from 1 s on.
            std::thread::sleep(Duration::from_secs(1));
            let lag_before = metric("isucondition-2", "latest_push_lag_seconds_count")?;
            std::thread::sleep(Duration::from_secs(9));
            let posted_at_heal = metric("isucondition-2", "conditions_stored_total")?;
            let pushes_during_cut = metric("isucondition-2", "latest_push_lag_seconds_count")? - lag_before;
            hosts.net("heal isucondition-1 isucondition-2")?;
            checks.say(&format!(
                "  cut isucondition-1 <-> isucondition-2 for {} s",
                cut_at.elapsed().as_secs()
            ));
            std::thread::sleep(Duration::from_secs(3));
            let slow = metrics::slow_pushes(&hosts.metrics_text("isucondition-2")?) - slow_before;
            let _ = bench.join().expect("the bench thread does not panic");
            summary(&checks, "bench with a partition", &state_dir.join("partition.out"));
            let stored_during_cut = posted_at_heal - posted_before;
            checks.check(
                format!("conditions stored by cell a during the cut ({stored_during_cut})"),
                stored_during_cut > 100.0,
            );
            if args.coordinators == 1 {
                checks.check(
                    format!("no latest-condition push reached the coordinator during the cut ({pushes_during_cut})"),
                    pushes_during_cut == 0.0,
                );
            } else {
                checks.say(&format!(
                    "  cell a pushed to the replicas it still reached during the cut ({pushes_during_cut} batches)"
                ));
            }
            checks.check(
                format!(
                    "after the heal, cell a's held-back latest conditions reached it (pushes that waited > 2.5 s: {slow})"
                ),
                slow >= 1.0,
            );
            read_json(&state_dir.join("partition.json"))
        })?
    };
    let by_digit: BTreeMap<String, u64> =
        serde_json::from_value(partition["failures_by_isu_digit"].clone()).unwrap_or_default();
    let (a_failures, other_failures, none) = metrics::failures_by_cell(&by_digit, u32::from(args.workers), 0)?;
    if args.coordinators == 1 {
        checks.check(
            format!("the other cells' ISUs saw no failed request (cell a's: {a_failures}; naming no ISU: {none})"),
            other_failures == 0 && partition["failures_by_isu_digit"].is_object(),
        );
        checks.check(
            format!("no wrong data ({})", partition["errors_by_kind"]),
            partition["errors_by_kind"]
                .get("data")
                .map_or(0, |data| data.as_u64().unwrap_or(1))
                == 0
                && partition["errors_by_kind"].is_object(),
        );
    } else {
        checks.say(&format!(
            "  failed requests of the other cells' ISUs {other_failures} (cell a's: {a_failures}; naming no ISU: {none}; {} timeouts)",
            partition["timeouts"]
        ));
        no_error_but_trend_regressions(&mut checks, &partition);
    }
    std::thread::sleep(Duration::from_secs(1));
    nothing_acknowledged_lost(&mut checks, "", stored_total()? - stored_before, &partition);

    // 4. The replicas' leader's host cut off under load.
    if args.coordinators > 1 {
        leader_cut(hosts, &mut checks, &cluster, seconds)?;
    }

    // 5. Latency and loss between every pair of hosts.
    hosts.net("impair all delay=50ms loss=1%")?;
    let impaired = bench(hosts, seconds, &["--no-growth"], "impaired");
    hosts.net("clear")?;
    let impaired = impaired?;
    summary(&checks, "bench with 50 ms + 1 % loss", &state_dir.join("impaired.out"));
    checks.check(
        "with 50 ms latency and 1 % loss the bench still passes",
        impaired["passed"] == Value::Bool(true),
    );
    for (label, path) in [
        ("score", &["score"][..]),
        ("requests", &["requests"]),
        ("timeouts", &["timeouts"]),
        ("device posts accepted", &["device_posts", "accepted"]),
        ("device posts without answer", &["device_posts", "failed"]),
    ] {
        let at = |value: &Value| path.iter().fold(value.clone(), |value, key| value[key].clone());
        checks.say(&format!("  cost: {label} {} -> {}", at(&tls), at(&impaired)));
    }

    drop(_down);
    let failures = checks.checks.iter().filter(|check| !check.ok).count();
    let report = Report {
        workers: args.workers,
        coordinators: args.coordinators,
        failures,
        seconds: started.elapsed().as_secs(),
        checks: checks.checks,
        state_dir: state_dir.clone(),
    };
    output::emit(format, &report, |report| {
        if report.failures == 0 {
            format!("hosts test: every check holds ({} s)", report.seconds)
        } else {
            format!(
                "hosts test: {} check(s) failed in {} s (files in {})",
                report.failures,
                report.seconds,
                report.state_dir.display()
            )
        }
    })?;
    if failures > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// The workers stored at least as many conditions over a bench run (`stored`, from their
/// metrics) as its devices had acknowledged (a count, not a re-read of every condition).
pub(super) fn nothing_acknowledged_lost(checks: &mut Checks, label: &str, stored: f64, report: &Value) {
    let acknowledged = report["device_posts_whole_run"]["stored_conditions"]
        .as_f64()
        .unwrap_or(f64::INFINITY);
    checks.check(
        format!("{label}nothing acknowledged lost: stored {stored} >= acknowledged {acknowledged}"),
        stored >= acknowledged,
    );
}

/// With coordinator replicas and a cut: the bench saw no error but the trend going back (a
/// client nginx moves to a replica that lacks a cut worker's newest conditions). The report
/// keeps 20 error samples: with more errors, every one must be of kind `data` and every
/// sample kept a trend going back (the others are judged by those).
pub(super) fn no_error_but_trend_regressions(checks: &mut Checks, report: &Value) {
    let errors = report["errors"].as_u64().unwrap_or(u64::MAX);
    let data_errors = report["errors_by_kind"]["data"].as_u64().unwrap_or(0);
    let samples: Vec<&str> = report["error_samples"]
        .as_array()
        .map(|samples| samples.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let others: Vec<&str> = samples
        .iter()
        .copied()
        .filter(|sample| !(sample.starts_with("[data] trend of isu") && sample.contains("went back")))
        .collect();
    let all_seen = samples.len() as u64 == errors;
    let judged_by_samples = !all_seen && data_errors == errors;
    checks.check(
        format!(
            "no error but the trend going back ({errors} errors{}{}{})",
            if judged_by_samples {
                format!(", all of kind data; judged by the {} samples kept", samples.len())
            } else {
                String::new()
            },
            if others.is_empty() { "" } else { "; others: " },
            others.join(" | ")
        ),
        (all_seen || judged_by_samples) && others.is_empty(),
    );
}

/// The bench's options for a run of `seconds` writing its JSON report to `json`.
pub(super) fn bench_options(seconds: u64, extra: &[&str], json: &Path) -> Vec<String> {
    let mut options = vec!["--duration".to_owned(), format!("{seconds}s")];
    options.extend(extra.iter().map(|option| option.to_string()));
    options.push("--json".to_owned());
    options.push(json.display().to_string());
    options
}

/// A bench run of `seconds` named `name` (its output in `<name>.out`), its JSON report.
fn bench(hosts: &Hosts, seconds: u64, extra: &[&str], name: &str) -> anyhow::Result<Value> {
    let json = hosts.paths.state.join(format!("{name}.json"));
    let _ = std::fs::remove_file(&json);
    let args = BenchArgs {
        pin: false,
        bench_args: bench_options(seconds, extra, &json),
    };
    // A failing bench is a failed check, not an error: its report says why.
    hosts.bench(&args, Some(&hosts.paths.state.join(format!("{name}.out"))))?;
    read_json(&json)
}

/// The bench's JSON report (Null when it wrote none: every check on it then fails).
pub(super) fn read_json(path: &Path) -> anyhow::Result<Value> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).with_context(|| format!("reading {}", path.display())),
        Err(_) => Ok(Value::Null),
    }
}

/// The bench's `result:` and `score:` lines, under a label.
pub(super) fn summary(checks: &Checks, label: &str, output: &Path) {
    for line in super::lines_starting(output, &["result:", "score:"]) {
        checks.say(&format!("  {label}: {line}"));
    }
}

/// On SIGINT or SIGTERM (a timeout, a Ctrl-C) the hosts come down before the process ends.
fn stop_on_signals(hosts: &Hosts) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let paths = hosts.paths.clone();
    let repo = hosts.repo.clone();
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            eprintln!("hosts: signal {signal}: taking the hosts down");
            let _ = Hosts { paths, repo }.down();
            std::process::exit(1);
        }
    });
    Ok(())
}
