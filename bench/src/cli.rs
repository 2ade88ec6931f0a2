//! Command line of the `bench` binary.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::nodes::Nodes;
use crate::scenario::ScenarioConfig;
use anyhow::Context;
use jia_sim::clock::{VirtualClock, DEFAULT_VIRTUAL_START};
use jia_sim::jwt::JwtSigner;
use jia_sim::signin::SignIn;
use jia_sim::{JiaConfig, UrlPolicy};
// The flags' durations (`60s`, `1500ms`, `2m`, a bare number of seconds): shared with isuctl.
use shared::duration::parse as parse_duration;

/// The ISUCONDITION bench: verifying load runs against a cluster, and a standalone JIA simulator.
#[derive(Debug, Parser)]
#[command(name = "bench", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// Threads of the bench's async runtime (1 = single-threaded: least overhead, and leaves
    /// the other cores to the service on a shared machine).
    #[arg(long, global = true, env = "BENCH_THREADS", default_value_t = 1)]
    pub threads: usize,
    /// Also trust this CA certificate (PEM) for https targets and device URLs, e.g. a
    /// private CA's (scripts/hosts makes one).
    #[arg(long, global = true, env = "BENCH_CA_CERT", value_name = "PEM")]
    pub ca_cert: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Without a subcommand: one bench run (initialize, compatibility check, load, score).
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run only the JIA simulator, until Ctrl-C: browser sign-in page (`GET /`), activation
    /// of any ISU id, and a posting device per activated ISU.
    Jia(JiaArgs),
}

/// Options of a bench run.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Public base URL of the service.
    #[arg(long, env = "BENCH_TARGET", default_value = "http://127.0.0.2:8080")]
    pub target: String,
    /// Address the JIA simulator binds; `http://<it>` is sent as `jia_service_url`.
    #[arg(long, env = "BENCH_JIA_LISTEN", default_value = "127.0.0.1:5000")]
    pub jia_listen: SocketAddr,
    /// Length of the load phase (e.g. `60s`, `1500ms`, `2m`).
    #[arg(long, env = "BENCH_DURATION", default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Users signed in when load starts; more join while the service keeps up and the bench
    /// itself does (none join after its own timers fell 50 ms behind: it shares the host).
    #[arg(long, env = "BENCH_USERS", default_value_t = 6)]
    pub users: usize,
    /// Each user registers between 1 and this many ISUs.
    #[arg(long, env = "BENCH_MAX_ISUS_PER_USER", default_value_t = 9, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub max_isus_per_user: u16,
    /// Keep the number of users fixed (no load growth).
    #[arg(long)]
    pub no_growth: bool,
    /// Keep the load going past 100 errors until `--duration` ends (the run still fails):
    /// for checks that break the service on purpose, such as `scripts/rollout-check`.
    #[arg(long)]
    pub keep_going: bool,
    /// Internal URL of a node, for its CPU time and profiles (repeatable), e.g.
    /// `coordinator=http://127.0.0.2:3000`.
    #[arg(long = "node", value_name = "NAME=URL", value_parser = crate::nodes::parse_node)]
    pub nodes: Vec<crate::nodes::Node>,
    /// A local process of the cluster (and its children) whose CPU time the report shows
    /// (repeatable), e.g. `nginx=<master pid>`.
    #[arg(long = "process", value_name = "NAME=PID", value_parser = crate::nodes::parse_process)]
    pub processes: Vec<crate::nodes::LocalProcess>,
    /// File holding the cluster secret that the nodes' internal routes require.
    #[arg(long, env = "BENCH_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    /// Profile every `--node` at once for this many seconds during load (flamegraph SVG +
    /// pprof protobuf per node, in OUT/profiles/).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=300))]
    pub profile: Option<u64>,
    /// Folder for the run's files (profiles).
    #[arg(long, env = "BENCH_OUT", default_value = "run/bench")]
    pub out: PathBuf,
    /// Also write the whole report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// The initial data the service must hold: `project` (the nodes' default dataset),
    /// `generated:N`, or an official `initialize.json` (with `--official` clusters).
    #[arg(long, env = "BENCH_EXPECT_DATA", default_value = "project")]
    pub expect_data: String,
    /// The icon the service gives ISUs registered without one, when it is not the dataset's
    /// default (the coordinator's `--default-icon`).
    #[arg(long, env = "BENCH_DEFAULT_ICON")]
    pub default_icon: Option<PathBuf>,
    /// Skip the compatibility check (a partial service can then still be loaded; the score
    /// of such a run is not comparable).
    #[arg(long)]
    pub skip_compatibility_check: bool,
    /// PEM private key that signs sign-in JWTs (PKCS#8 or SEC1); default: the project's key.
    #[arg(long, env = "BENCH_PRIVATE_KEY")]
    pub private_key: Option<PathBuf>,
    /// Accept only official `target_base_url`s (https, isucondition-[1-3].t.isucon.dev, no port).
    #[arg(long, env = "BENCH_OFFICIAL_URLS")]
    pub official_urls: bool,
    /// Devices connect to ADDR:PORT for HOST (repeatable), e.g.
    /// `isucondition-2.t.isucon.dev=127.0.0.3:8080`; no DNS needed.
    #[arg(long = "resolve", value_name = "HOST=ADDR:PORT", value_parser = parse_resolve)]
    pub resolve: Vec<(String, SocketAddr)>,
    /// Instead of a scored run: ramp the number of active ISUs (devices posting every 40 ms,
    /// users reading) until device post p99 > 100 ms, read p99 > 50 ms or any error, and
    /// report the ISUs sustained per cluster core and the cluster CPU per device post.
    #[arg(long)]
    pub capacity: bool,
    /// Capacity mode: ISUs added at each step.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub capacity_step: u32,
    /// Capacity mode: how long each step is measured after its registrations.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub capacity_step_time: Duration,
    /// Capacity mode: stop the ramp here even if nothing broke.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub capacity_max_isus: u32,
    /// Capacity mode: CPUs the cluster may use, for ISUs per core (`scripts/bench --pin`
    /// gives it 1); default: every CPU of this machine.
    #[arg(long)]
    pub cluster_cores: Option<f64>,
    /// Instead of a scored run: fill one placement slot with a large history, move it to
    /// another cell while devices post and users read, and report the migration's time and
    /// the latency, errors and cluster CPU before, during and after it (needs
    /// `--node coordinator=URL` and `--cluster-secret-file`).
    #[arg(long, conflicts_with = "capacity")]
    pub migration_cost: bool,
    /// Migration cost: conditions of history in the moving slot.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1..=50_000_000))]
    pub migration_conditions: u32,
    /// Migration cost: ISUs of the moving slot (sharing the history).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub migration_isus: u32,
    /// Migration cost: other ISUs, posting and read all along.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub migration_background_isus: u32,
    /// Migration cost: length of the windows before and after the migration.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub migration_window: Duration,
    /// Instead of a scored run: 100 ISUs post at the real rate and are read while one ISU
    /// floods (batches of 1,000 from 4 connections, back to back) for `--flood-seconds`;
    /// reports the others' read and post latency before, during and after, and what the
    /// flood's batches got (the per-ISU quota shapes it: 202 while its lane has room, then 429).
    #[arg(long, conflicts_with_all = ["capacity", "migration_cost"])]
    pub flood_cost: bool,
    /// Flood cost: how long the ISU floods.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub flood_seconds: Duration,
    /// Instead of a scored run: start a lone coordinator (`--coordinator-bin`) told
    /// `--scale-cells` simulated cells and `--dataset generated:<--scale-isus>`, initialize
    /// it, have the cells push latest conditions at `--scale-rate` per ISU for
    /// `--scale-push-time`, and report its memory per ISU, its CPU per 1,000 applied updates
    /// and the trend's bytes and time.
    #[arg(long, conflicts_with_all = ["capacity", "migration_cost", "flood_cost"])]
    pub scale: bool,
    /// Scale: coordinators; more than one form a group of replicas (each with its raft log
    /// in `--out`), and every cell pushes to each.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=5))]
    pub scale_coordinators: u16,
    /// Scale: simulated cells (a placement map holds at most 64), or real workers [default: 16;
    /// 2 with --scale-real-workers or --scale-compare].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=200))]
    pub scale_cells: Option<u16>,
    /// Scale: ISUs of the generated dataset.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub scale_isus: u32,
    /// Scale: latest updates per ISU per second (with real workers, condition posts) [default:
    /// 1; 0.3 with --scale-real-workers or --scale-compare].
    #[arg(long)]
    pub scale_rate: Option<f64>,
    /// Scale: how long the cells push.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub scale_push_time: Duration,
    /// Scale: the first simulated cell listens on 127.0.0.<this>, the next on the one after.
    #[arg(long, default_value_t = 100)]
    pub scale_first_host: u8,
    /// Scale: after the measures, SIGKILL the last coordinator, start it again and time it
    /// until its `/healthz` answers 200 (a replica catches up with its group and pulls every
    /// cell's latest conditions; a lone coordinator, in memory only, resets every cell).
    #[arg(long)]
    pub scale_restart: bool,
    /// Scale: after the map changes, sign in users and register this many new ISUs through
    /// the leader (64 at a time; 10 per user) and report registrations per second.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub scale_registrations: u32,
    /// Scale: the coordinator binary; default: `coordinator` beside this bench binary.
    #[arg(long, value_name = "PATH")]
    pub coordinator_bin: Option<PathBuf>,
    /// A scale step (implies --scale) whose cells are real workers (`--worker-bin`, in memory,
    /// each on a loopback host as a simulated cell is) and whose updates a device poster in
    /// the bench makes: after `/initialize`, each ISU gets `--scale-rate` condition posts a
    /// second (one condition each, spread evenly, on kept-alive connections) to the worker
    /// the coordinator's map gives it; the updates applied are the workers' own
    /// `latest_batch_items` count. The map spread and the registrations are skipped.
    #[arg(long, conflicts_with_all = ["capacity", "migration_cost", "flood_cost"])]
    pub scale_real_workers: bool,
    /// Check the cell simulator against real workers (implies --scale): `--scale-rounds`
    /// rounds of one simulated and one real step of the same size, alternated, then each
    /// figure's median and the ratio real / simulated of the coordinator's CPU per 1,000
    /// applied updates and of its memory per ISU (after `/initialize`; after the pushes too,
    /// shown, not judged), and whether they agree within 20 %. No
    /// registrations and no restart; fails when a step fails or loses an update.
    #[arg(long, conflicts_with_all = ["capacity", "migration_cost", "flood_cost", "scale_real_workers", "scale_restart"])]
    pub scale_compare: bool,
    /// Scale compare: rounds (each a simulated and a real step).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub scale_rounds: u16,
    /// Scale: the worker binary for real workers; default: `worker` beside this bench binary.
    #[arg(long, value_name = "PATH")]
    pub worker_bin: Option<PathBuf>,
    /// Scale: run the nodes the step starts (coordinators, workers) under `taskset -c LIST`,
    /// e.g. 1 with the bench itself under `taskset -c 0`.
    #[arg(long, value_name = "LIST")]
    pub scale_node_cpus: Option<String>,
}

/// Options of the standalone JIA simulator.
#[derive(Debug, Args)]
pub struct JiaArgs {
    /// Address to listen on; the coordinator's `--jia-service-url` is `http://<it>`.
    #[arg(long, env = "BENCH_JIA_LISTEN", default_value = "127.0.0.1:5000")]
    pub listen: SocketAddr,
    /// Where the sign-in page sends the user back (with `?jwt=`) when not told by `redirect`.
    #[arg(long, env = "BENCH_APP_URL", default_value = "http://127.0.0.2:8080/")]
    pub app: String,
    /// PEM private key that signs sign-in JWTs (PKCS#8 or SEC1); default: the project's key.
    #[arg(long, env = "BENCH_PRIVATE_KEY")]
    pub private_key: Option<PathBuf>,
    /// Virtual seconds per real second of the devices' clock (the bench runs at 30000).
    #[arg(long, env = "BENCH_JIA_SPEED", default_value_t = 3600, value_parser = clap::value_parser!(i64).range(1..=1_000_000))]
    pub speed: i64,
    /// Accept only official `target_base_url`s (https, isucondition-[1-3].t.isucon.dev, no port).
    #[arg(long)]
    pub official_urls: bool,
    /// Devices connect to ADDR:PORT for HOST (repeatable).
    #[arg(long = "resolve", value_name = "HOST=ADDR:PORT", value_parser = parse_resolve)]
    pub resolve: Vec<(String, SocketAddr)>,
}

/// A node's binary: `given`, or `name` beside this bench binary; it must exist.
fn node_binary(given: Option<PathBuf>, name: &str) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(path) => path,
        None => std::env::current_exe()
            .context("finding the bench binary")?
            .with_file_name(format!("{name}{}", std::env::consts::EXE_SUFFIX)),
    };
    anyhow::ensure!(
        path.is_file(),
        "no {name} binary at {} (build it: cargo build --release -p {name})",
        path.display()
    );
    Ok(path)
}

fn load_signer(path: Option<&Path>) -> anyhow::Result<JwtSigner> {
    match path {
        Some(path) => Ok(JwtSigner::from_file(path)?),
        None => Ok(JwtSigner::project_default()),
    }
}

fn url_policy(official: bool) -> UrlPolicy {
    if official {
        UrlPolicy::Official
    } else {
        UrlPolicy::AnyUrl
    }
}

impl RunArgs {
    /// The nodes whose CPU (and profiles) the run reads, with the cluster secret.
    fn nodes(&self) -> anyhow::Result<Option<Nodes>> {
        if self.nodes.is_empty() {
            return Ok(None);
        }
        let secret = match &self.cluster_secret_file {
            Some(path) => std::fs::read_to_string(path)
                .with_context(|| format!("reading the cluster secret {}", path.display()))?
                .trim()
                .to_owned(),
            None => anyhow::bail!("--node needs --cluster-secret-file"),
        };
        Ok(Some(Nodes::new(self.nodes.clone(), secret)?))
    }

    /// The settings of a capacity ramp (`--capacity`).
    pub fn into_capacity_config(self) -> anyhow::Result<crate::capacity::CapacityConfig> {
        let cluster_cores = self
            .cluster_cores
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1.0, |cores| cores.get() as f64));
        anyhow::ensure!(cluster_cores > 0.0, "--cluster-cores must be positive");
        Ok(crate::capacity::CapacityConfig {
            nodes: self.nodes()?,
            target: self.target.clone(),
            jia: JiaConfig {
                listen: self.jia_listen,
                url_policy: url_policy(self.official_urls),
                resolve: self.resolve.clone(),
                // The ramp ends the devices; a deadline would silence them mid-ramp.
                run_for: Duration::from_secs(10 * 365 * 86_400),
                // Slow answers are measured (p99 against its limit), not cut at the official
                // 100 ms and counted as errors.
                timing: jia_sim::device::DeviceTiming {
                    post_timeout: Duration::from_secs(1),
                    ..jia_sim::device::DeviceTiming::default()
                },
                ..JiaConfig::default()
            },
            signer: load_signer(self.private_key.as_deref())?,
            processes: self.processes,
            step_isus: self.capacity_step as usize,
            step_time: self.capacity_step_time,
            max_isus: self.capacity_max_isus as usize,
            cluster_cores,
            device_post_p99_limit: Duration::from_millis(100),
            read_p99_limit: Duration::from_millis(50),
            min_post_rate_share: 0.9,
            isus_per_reader: 50,
            read_pause: Duration::from_millis(100),
            request_timeout: Duration::from_secs(2),
        })
    }

    /// The settings of a migration-cost run (`--migration-cost`).
    pub fn into_migration_cost_config(self) -> anyhow::Result<crate::migration_cost::MigrationCostConfig> {
        let (conditions, heavy_isus) = (self.migration_conditions as usize, self.migration_isus as usize);
        let (background_isus, window) = (self.migration_background_isus as usize, self.migration_window);
        let flood = self.flood_cost.then_some(self.flood_seconds);
        Ok(crate::migration_cost::MigrationCostConfig {
            base: self.into_capacity_config()?,
            conditions,
            heavy_isus: if flood.is_some() { 1 } else { heavy_isus },
            background_isus,
            window,
            flood,
        })
    }

    /// Scale mode: `--scale`, `--scale-real-workers` or `--scale-compare`.
    pub fn is_scale(&self) -> bool {
        self.scale || self.scale_real_workers || self.scale_compare
    }

    /// The settings of a scale comparison (`--scale-compare`).
    pub fn into_scale_compare_config(self) -> anyhow::Result<crate::scale_compare::CompareConfig> {
        let rounds = usize::from(self.scale_rounds);
        let worker = node_binary(self.worker_bin.clone(), "worker")?;
        Ok(crate::scale_compare::CompareConfig {
            step: self.into_scale_config()?,
            worker,
            rounds,
        })
    }

    /// The settings of a scale step (`--scale`, `--scale-real-workers`).
    pub fn into_scale_config(self) -> anyhow::Result<crate::scale::ScaleConfig> {
        let real = self.scale_real_workers || self.scale_compare;
        let rate = self.scale_rate.unwrap_or(if real { 0.3 } else { 1.0 });
        anyhow::ensure!(rate.is_finite() && rate > 0.0, "--scale-rate must be positive");
        let coordinator = node_binary(self.coordinator_bin, "coordinator")?;
        let real_workers = if self.scale_real_workers {
            Some(node_binary(self.worker_bin, "worker")?)
        } else {
            None
        };
        Ok(crate::scale::ScaleConfig {
            coordinator,
            coordinators: usize::from(self.scale_coordinators),
            cells: usize::from(self.scale_cells.unwrap_or(if real { 2 } else { 16 })),
            isus: self.scale_isus as usize,
            rate_per_isu: rate,
            push_time: self.scale_push_time,
            first_host: self.scale_first_host,
            out: self.out,
            restart: self.scale_restart,
            registrations: self.scale_registrations as usize,
            private_key: self.private_key,
            real_workers,
            node_cpus: self.scale_node_cpus,
        })
    }

    pub fn into_config(self) -> anyhow::Result<ScenarioConfig> {
        if self.profile.is_some() && self.nodes.is_empty() {
            anyhow::bail!("--profile needs the nodes: --node NAME=URL (and --cluster-secret-file)");
        }
        let nodes = self.nodes()?;
        Ok(ScenarioConfig {
            duration: self.duration,
            users: self.users,
            max_isus_per_user: usize::from(self.max_isus_per_user),
            grow: !self.no_growth,
            keep_going: self.keep_going,
            signer: load_signer(self.private_key.as_deref())?,
            url_policy: url_policy(self.official_urls),
            resolve: self.resolve,
            nodes,
            processes: self.processes,
            profile_seconds: self.profile,
            out_dir: self.out,
            progress: !self.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()),
            expect_data: self.expect_data,
            default_icon: self.default_icon,
            compatibility_check: !self.skip_compatibility_check,
            ..ScenarioConfig::new(&self.target, self.jia_listen)
        })
    }
}

impl JiaArgs {
    /// A simulator that activates any ISU, serves the sign-in page and runs until stopped.
    pub fn into_config(self) -> anyhow::Result<JiaConfig> {
        let signer = load_signer(self.private_key.as_deref())?;
        Ok(JiaConfig {
            listen: self.listen,
            url_policy: url_policy(self.official_urls),
            accept_any_uuid: true,
            clock: VirtualClock::starting_now(DEFAULT_VIRTUAL_START, self.speed),
            run_for: Duration::from_secs(10 * 365 * 86_400),
            sign_in: Some(SignIn {
                signer,
                default_app_url: self.app,
            }),
            resolve: self.resolve,
            ..JiaConfig::default()
        })
    }
}

/// Parses `HOST=ADDR:PORT`.
pub fn parse_resolve(text: &str) -> Result<(String, SocketAddr), String> {
    let (host, addr) = text
        .split_once('=')
        .ok_or_else(|| format!("expected HOST=ADDR:PORT, got {text:?}"))?;
    if host.is_empty() {
        return Err(format!("empty host in {text:?}"));
    }
    let addr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an ADDR:PORT socket address"))?;
    Ok((host.to_owned(), addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_overrides_parse() {
        let parsed = parse_resolve("isucondition-2.t.isucon.dev=127.0.0.3:8080").unwrap();
        assert_eq!(parsed.0, "isucondition-2.t.isucon.dev");
        assert_eq!(parsed.1, "127.0.0.3:8080".parse::<SocketAddr>().unwrap());
        assert!(parse_resolve("no-equals").is_err());
        assert!(parse_resolve("=127.0.0.1:1").is_err());
        assert!(parse_resolve("host=127.0.0.1").is_err());
    }

    #[test]
    fn the_cli_is_well_formed() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }
}
