//! The hosts test: up, every check, down; passes only if every check holds.
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
//! 4. With three coordinator replicas: the replicas' leader's host cut off under load
//!    (`leader_cut`), on a network without impairment.
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
use bench::report::ReportFile;
use hostlab::plan::{self, HostPlan, Role};
use hostlab::{BenchArgs, Hosts, Tls, UpArgs};

use super::{leader_cut, metrics, nodes, Shape};

/// How long the coordinator host and worker host a stay cut apart in check 3.
const PARTITION: Duration = Duration::from_secs(10);
/// A push already answered when the cut came may still be counted: counted from then on.
const PARTITION_GRACE: Duration = Duration::from_secs(1);
/// How long the held-back pushes may take to arrive after the heal.
const DELIVERY_LIMIT: Duration = Duration::from_secs(10);
/// How long after its start the bench's users have registered their ISUs: the cuts come
/// later, so that they test the reads and the device posts. (A registration cut off between
/// the coordinator and its worker has its own tests in the e2e cluster suite.)
pub const REGISTERED_BY: Duration = Duration::from_secs(10);
/// How long the bench may take to bring load (device posts stored by cell a).
const LOAD_LIMIT: Duration = Duration::from_secs(30);

/// The checks decided so far, each printed as it is decided.
#[derive(Default)]
pub struct Checks {
    failed: Vec<String>,
    held: usize,
}

impl Checks {
    pub fn check(&mut self, what: impl Into<String>, ok: bool) {
        let what = what.into();
        self.say(&format!("{}  {what}", if ok { "ok  " } else { "FAIL" }));
        if ok {
            self.held += 1;
        } else {
            self.failed.push(what);
        }
    }

    pub fn say(&self, line: &str) {
        println!("{line}");
    }
}

/// Takes the hosts down when dropped: the test never leaves them up, whatever fails.
struct DownOnDrop<'a>(&'a Hosts);

impl Drop for DownOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.down();
    }
}

/// Up, every check, down: the checks that failed (none when every check holds).
pub fn run(hosts: &Hosts, shape: Shape, build: bool) -> anyhow::Result<Vec<String>> {
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
    let down = DownOnDrop(hosts);
    hosts.up(&UpArgs {
        workers: shape.workers,
        coordinators: shape.coordinators,
        tls: Tls::On,
        no_build: !build,
    })?;
    let mut checks = Checks::default();
    let cluster: Vec<HostPlan> = plan::hosts(usize::from(shape.workers), shape.coordinators)
        .into_iter()
        .filter(|host| host.is_cluster_host())
        .collect();
    let tls = bench_over_tls(hosts, &mut checks, seconds)?;
    isolation(hosts, &mut checks, &cluster, shape)?;
    partition(hosts, &mut checks, &cluster, shape, seconds)?;
    if shape.coordinators > 1 {
        leader_cut::run(hosts, &mut checks, &cluster, seconds)?;
    }
    impaired(hosts, &mut checks, seconds, &tls)?;
    drop(down);
    let took = started.elapsed().as_secs();
    if checks.failed.is_empty() {
        checks.say(&format!(
            "hosts test: every check holds ({} checks, {took} s)",
            checks.held
        ));
    } else {
        checks.say(&format!(
            "hosts test: {} check(s) failed in {took} s (files in {})",
            checks.failed.len(),
            hosts.paths.state.display()
        ));
    }
    Ok(checks.failed)
}

/// 1. The bench over TLS, from its own host; its report.
fn bench_over_tls(hosts: &Hosts, checks: &mut Checks, seconds: u64) -> anyhow::Result<Option<ReportFile>> {
    let tls = bench(hosts, seconds, &["--no-growth"], "tls")?;
    summary(checks, "bench over TLS", &hosts.paths.state.join("tls.out"));
    checks.check("the bench over TLS passes", tls.as_ref().is_some_and(|tls| tls.passed));
    checks.check(
        match &tls {
            Some(tls) => format!("with 0 errors ({} errors, {} timeouts)", tls.errors, tls.timeouts),
            None => "with 0 errors (no report)".to_owned(),
        },
        tls.as_ref().is_some_and(|tls| tls.errors == 0),
    );
    let accepted = tls.as_ref().map_or(0, |tls| tls.device_posts.accepted);
    checks.check(
        format!("devices posted over TLS to their workers ({accepted} accepted)"),
        accepted > 100,
    );
    Ok(tls)
}

/// 2. Internal routes from the bench host, even when it routes the internal network its way.
fn isolation(hosts: &Hosts, checks: &mut Checks, cluster: &[HostPlan], shape: Shape) -> anyhow::Result<()> {
    deploy::external::run_checked(std::process::Command::new("ip").args([
        "netns",
        "exec",
        "isu-hb",
        "ip",
        "route",
        "add",
        plan::INTERNAL_NETWORK,
        "dev",
        "pub0",
    ]))?;
    let secret = hosts.secret_header()?;
    for host in cluster {
        let internal = host.internal_address.expect("a cluster host");
        checks.check(
            format!("internal address of {} unreachable from the bench host", host.name),
            hosts.curl_status("isu-hb", &format!("http://{internal}:3000/healthz"), &[]) == "000",
        );
        checks.check(
            format!("no node listens on the public address of {}:3000", host.name),
            hosts.curl_status("isu-hb", &format!("http://{}:3000/healthz", host.public_address), &[]) == "000",
        );
        if host.replica.is_some() && host.role != Role::Coordinator {
            let port = plan::NODE_PORT + 1;
            checks.check(
                format!("the replica beside the worker on {} unreachable from the bench host (:{port}, internal and public)", host.name),
                hosts.curl_status("isu-hb", &format!("http://{internal}:{port}/healthz"), &[]) == "000"
                    && hosts.curl_status("isu-hb", &format!("http://{}:{port}/healthz", host.public_address), &[]) == "000",
            );
        }
    }
    if shape.coordinators > 1 {
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
            &format!("https://isucondition-2.{}/internal/users", plan::DOMAIN),
            &with_secret,
        ) == "404",
    );
    checks.check(
        "plain HTTP is not served on the device address",
        hosts.curl_status("isu-hb", &format!("http://isucondition-2.{}:443/", plan::DOMAIN), &[]) != "200",
    );
    Ok(())
}

/// Returns once the worker on host `name` has stored 100 more device posts (a bench started
/// just before brings its load), polled every 200 ms for at most [`LOAD_LIMIT`].
pub fn wait_for_load(hosts: &Hosts, name: &str) -> anyhow::Result<()> {
    let stored = || nodes::stored_conditions(hosts, [name]);
    let idle = stored()?;
    let waiting = Instant::now();
    while stored()? < idle + 100.0 {
        anyhow::ensure!(
            waiting.elapsed() < LOAD_LIMIT,
            "the worker on {name} stored no device post for {LOAD_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// What check 3 read off worker host a around the cut.
struct Partitioned {
    stored_during_cut: f64,
    pushes_during_cut: f64,
    /// Pushes that waited more than 2.5 s, counted from before the cut until after the heal.
    slow: f64,
}

/// 3. A partition between the coordinator host and worker host a, under load.
fn partition(
    hosts: &Hosts,
    checks: &mut Checks,
    cluster: &[HostPlan],
    shape: Shape,
    seconds: u64,
) -> anyhow::Result<()> {
    let state_dir = &hosts.paths.state;
    let stored_total = || nodes::stored_conditions(hosts, cluster.iter().skip(1).map(|host| host.name.as_str()));
    let stored_before = stored_total()?;
    let bench_args = BenchArgs {
        pin: false,
        bench_args: bench_options(
            seconds + 12,
            &["--no-growth", "--keep-going"],
            &state_dir.join("partition.json"),
        ),
    };
    let output = state_dir.join("partition.out");
    let cut = std::thread::scope(|scope| -> anyhow::Result<Partitioned> {
        let launched = Instant::now();
        let bench = scope.spawn(|| hosts.bench(&bench_args, Some(&output)));
        let cut = cut_cell_a(hosts, checks, launched);
        let _ = bench.join().expect("the bench thread does not panic");
        cut
    })?;
    summary(checks, "bench with a partition", &output);
    checks.check(
        format!("conditions stored by cell a during the cut ({})", cut.stored_during_cut),
        cut.stored_during_cut > 100.0,
    );
    if shape.coordinators == 1 {
        checks.check(
            format!(
                "no latest-condition push reached the coordinator during the cut ({})",
                cut.pushes_during_cut
            ),
            cut.pushes_during_cut == 0.0,
        );
    } else {
        checks.say(&format!(
            "  cell a pushed to the replicas it still reached during the cut ({} batches)",
            cut.pushes_during_cut
        ));
    }
    checks.check(
        format!(
            "after the heal, cell a's held-back latest conditions reached it (pushes that waited > 2.5 s: {})",
            cut.slow
        ),
        cut.slow >= 1.0,
    );
    let report = read_report(&state_dir.join("partition.json"))?;
    judge_partition(checks, report.as_ref(), shape)?;
    std::thread::sleep(Duration::from_secs(1));
    nothing_acknowledged_lost(checks, "", stored_total()? - stored_before, report.as_ref());
    Ok(())
}

/// Once cell a stores device posts (the bench's load) and the bench, `launched` then, has run
/// [`REGISTERED_BY`], cuts the coordinator host off from worker host a for [`PARTITION`],
/// heals, and waits for the held-back pushes.
fn cut_cell_a(hosts: &Hosts, checks: &Checks, launched: Instant) -> anyhow::Result<Partitioned> {
    let a = "isucondition-2";
    let metric = |prefix: &str| -> anyhow::Result<f64> { Ok(metrics::sum(&nodes::metrics_text(hosts, a)?, prefix)) };
    let slow = || -> anyhow::Result<f64> { Ok(metrics::slow_pushes(&nodes::metrics_text(hosts, a)?)) };
    wait_for_load(hosts, a)?;
    std::thread::sleep(REGISTERED_BY.saturating_sub(launched.elapsed()));
    let posted_before = metric("conditions_stored_total")?;
    let slow_before = slow()?;
    hosts.net(&format!("cut isucondition-1 {a}"))?;
    let cut_at = Instant::now();
    std::thread::sleep(PARTITION_GRACE);
    let lag_before = metric("latest_push_lag_seconds_count")?;
    std::thread::sleep(PARTITION.saturating_sub(cut_at.elapsed()));
    let posted_at_heal = metric("conditions_stored_total")?;
    let pushes_during_cut = metric("latest_push_lag_seconds_count")? - lag_before;
    hosts.net(&format!("heal isucondition-1 {a}"))?;
    checks.say(&format!(
        "  cut isucondition-1 <-> {a} for {} s",
        cut_at.elapsed().as_secs()
    ));
    let healed = Instant::now();
    let mut slow_after = slow()? - slow_before;
    while slow_after < 1.0 && healed.elapsed() < DELIVERY_LIMIT {
        std::thread::sleep(Duration::from_millis(200));
        slow_after = slow()? - slow_before;
    }
    Ok(Partitioned {
        stored_during_cut: posted_at_heal - posted_before,
        pushes_during_cut,
        slow: slow_after,
    })
}

/// The partition's bench run, by cell: with one coordinator the other cells' ISUs see no
/// failure and no data is wrong; with replicas their failures are printed (see the module's
/// doc) and no error but the trend going back is allowed.
fn judge_partition(checks: &mut Checks, report: Option<&ReportFile>, shape: Shape) -> anyhow::Result<()> {
    let no_failures = BTreeMap::new();
    let by_digit = report.map_or(&no_failures, |report| &report.failures_by_isu_digit);
    let (a_failures, other_failures, none) = metrics::failures_by_cell(by_digit, u32::from(shape.workers), 0)?;
    if shape.coordinators == 1 {
        checks.check(
            format!("the other cells' ISUs saw no failed request (cell a's: {a_failures}; naming no ISU: {none})"),
            other_failures == 0 && report.is_some(),
        );
        checks.check(
            format!("no wrong data ({:?})", report.map(|report| &report.errors_by_kind)),
            report.is_some_and(|report| report.errors_by_kind.get("data").copied().unwrap_or(0) == 0),
        );
    } else {
        checks.say(&format!(
            "  failed requests of the other cells' ISUs {other_failures} (cell a's: {a_failures}; naming no ISU: {none}; {} timeouts)",
            figure(report, |report| report.timeouts)
        ));
        no_error_but_trend_regressions(checks, report);
    }
    Ok(())
}

/// 5. Latency and loss between every pair of hosts; its cost against the run over TLS.
fn impaired(hosts: &Hosts, checks: &mut Checks, seconds: u64, tls: &Option<ReportFile>) -> anyhow::Result<()> {
    hosts.net("impair all delay=50ms loss=1%")?;
    let impaired = bench(hosts, seconds, &["--no-growth"], "impaired");
    hosts.net("clear")?;
    let impaired = impaired?;
    summary(
        checks,
        "bench with 50 ms + 1 % loss",
        &hosts.paths.state.join("impaired.out"),
    );
    checks.check(
        "with 50 ms latency and 1 % loss the bench still passes",
        impaired.as_ref().is_some_and(|impaired| impaired.passed),
    );
    type Figure = fn(&ReportFile) -> i64;
    let figures: [(&str, Figure); 5] = [
        ("score", |report| report.score),
        ("requests", |report| report.requests as i64),
        ("timeouts", |report| report.timeouts as i64),
        ("device posts accepted", |report| report.device_posts.accepted as i64),
        ("device posts without answer", |report| {
            report.device_posts.failed as i64
        }),
    ];
    for (label, figure) in figures {
        let at = |report: &Option<ReportFile>| {
            report
                .as_ref()
                .map_or("no report".to_owned(), |report| figure(report).to_string())
        };
        checks.say(&format!("  cost: {label} {} -> {}", at(tls), at(&impaired)));
    }
    Ok(())
}

/// The workers stored at least as many conditions over a bench run (`stored`, from their
/// metrics) as its devices had acknowledged (a count, not a re-read of every condition).
pub fn nothing_acknowledged_lost(checks: &mut Checks, label: &str, stored: f64, report: Option<&ReportFile>) {
    let acknowledged = report.map_or(f64::INFINITY, |report| {
        report.device_posts_whole_run.stored_conditions as f64
    });
    checks.check(
        format!("{label}nothing acknowledged lost: stored {stored} >= acknowledged {acknowledged}"),
        stored >= acknowledged,
    );
}

/// With coordinator replicas and a cut: the bench saw no error but the trend going back (a
/// client nginx moves to a replica that lacks a cut worker's newest conditions). The report
/// keeps 20 error samples: with more errors, every one must be of kind `data` and every
/// sample kept a trend going back (the others are judged by those).
pub fn no_error_but_trend_regressions(checks: &mut Checks, report: Option<&ReportFile>) {
    let errors = report.map_or(u64::MAX, |report| report.errors);
    let data_errors = report.map_or(0, |report| report.errors_by_kind.get("data").copied().unwrap_or(0));
    let samples: Vec<&str> = report.map_or_else(Vec::new, |report| {
        report.error_samples.iter().map(String::as_str).collect()
    });
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
pub fn bench_options(seconds: u64, extra: &[&str], json: &Path) -> Vec<String> {
    let mut options = vec!["--duration".to_owned(), format!("{seconds}s")];
    options.extend(extra.iter().map(|option| option.to_string()));
    options.push("--json".to_owned());
    options.push(json.display().to_string());
    options
}

/// A bench run of `seconds` named `name` (its output in `<name>.out`), its JSON report.
fn bench(hosts: &Hosts, seconds: u64, extra: &[&str], name: &str) -> anyhow::Result<Option<ReportFile>> {
    let json = hosts.paths.state.join(format!("{name}.json"));
    let _ = std::fs::remove_file(&json);
    let args = BenchArgs {
        pin: false,
        bench_args: bench_options(seconds, extra, &json),
    };
    // A failing bench is a failed check, not an error: its report says why.
    hosts.bench(&args, Some(&hosts.paths.state.join(format!("{name}.out"))))?;
    read_report(&json)
}

/// A figure of the report, or "no report".
pub fn figure(report: Option<&ReportFile>, of: impl Fn(&ReportFile) -> u64) -> String {
    report.map_or_else(|| "no report".to_owned(), |report| of(report).to_string())
}

/// The bench's report (none when it wrote none: every check on it then fails).
pub fn read_report(path: &Path) -> anyhow::Result<Option<ReportFile>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?,
        )),
        Err(_) => Ok(None),
    }
}

/// The bench's `result:` and `score:` lines, under a label.
pub fn summary(checks: &Checks, label: &str, output: &Path) {
    for line in hostlab::lines_starting(output, &["result:", "score:"]) {
        checks.say(&format!("  {label}: {line}"));
    }
}

/// On SIGINT or SIGTERM (a timeout, a Ctrl-C) the hosts come down before the process ends.
fn stop_on_signals(hosts: &Hosts) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let hosts = hosts.clone();
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            eprintln!("hosts: signal {signal}: taking the hosts down");
            let _ = hosts.down();
            std::process::exit(1);
        }
    });
    Ok(())
}
