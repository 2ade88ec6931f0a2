//! Real workers as the scale step's cells (`bench --scale --scale-real-workers`), to check
//! the cell simulator ([`crate::cellsim`]) against them: N `worker` release binaries, each on
//! a loopback address of its own as a simulated cell is, told the coordinator(s), and a
//! device poster that posts one condition at a time to each ISU's cell
//! (`POST {device url}/api/condition/{uuid}`), at a rate per ISU spread evenly over the
//! ISUs ([`PostSchedule`]), on kept-alive connections. The updates the coordinator applied
//! are the workers' own count: the sum of their `latest_batch_items` histograms, which a
//! worker records for each batch the coordinator acknowledged.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use deploy::node_args::{CellEndpoint, WorkerArgs};
use futures::StreamExt;
use shared::dataset::generated::VIRTUAL_START;
use shared::domain::Flags;
use shared::protocol::{HEALTH, METRICS, SECRET_HEADER};

/// Posts one cell's poster has in flight at once (and so its kept-alive connections).
const POSTS_IN_FLIGHT_PER_CELL: usize = 16;
/// How long one post may take before it counts as failed.
const POST_TIMEOUT: Duration = Duration::from_secs(2);
/// The message of every posted condition.
const MESSAGE: &str = "posted";

/// Settings of the real cells.
#[derive(Debug, Clone)]
pub struct RealCellsConfig {
    /// The worker binary (a release build).
    pub worker: PathBuf,
    pub cells: usize,
    /// The first worker listens on `127.0.0.<first_host>`, the next on the address after it.
    pub first_host: u8,
    /// Every coordinator replica's base URL.
    pub coordinators: Vec<String>,
    pub secret: String,
    /// Folder of the workers' logs.
    pub out: PathBuf,
    /// Run each worker under `taskset -c <this>`.
    pub cpus: Option<String>,
}

/// The running workers, killed and reaped on drop.
pub struct RealCells {
    children: Vec<Child>,
    endpoints: Vec<CellEndpoint>,
    logs: Vec<PathBuf>,
    secret: String,
}

impl RealCells {
    /// Picks each worker's addresses (a free internal port and a free device port on its
    /// loopback host); none is started until [`RealCells::spawn`].
    pub fn plan(config: &RealCellsConfig) -> anyhow::Result<Vec<CellEndpoint>> {
        anyhow::ensure!(config.cells > 0, "no worker to start");
        anyhow::ensure!(
            usize::from(config.first_host) + config.cells <= 255,
            "{} workers from 127.0.0.{} run past 127.0.0.254",
            config.cells,
            config.first_host
        );
        (0..config.cells)
            .map(|index| {
                let host = Ipv4Addr::new(127, 0, 0, config.first_host + index as u8);
                Ok(CellEndpoint {
                    cell: format!("w{index:02}"),
                    url: format!("http://{}", free_port_on(host)?),
                    device_url: format!("http://{}", free_port_on(host)?),
                })
            })
            .collect()
    }

    /// Starts a worker for each of `endpoints` (from [`RealCells::plan`]), in memory only.
    pub fn spawn(config: &RealCellsConfig, endpoints: Vec<CellEndpoint>) -> anyhow::Result<RealCells> {
        std::fs::create_dir_all(&config.out).with_context(|| format!("creating {}", config.out.display()))?;
        let mut cells = RealCells {
            children: Vec::new(),
            endpoints: Vec::new(),
            logs: Vec::new(),
            secret: config.secret.clone(),
        };
        for endpoint in endpoints {
            let args = WorkerArgs {
                cell: endpoint.cell.clone(),
                listen: endpoint.url.trim_start_matches("http://").to_owned(),
                device_listen: Some(endpoint.device_url.trim_start_matches("http://").to_owned()),
                coordinators: config.coordinators.clone(),
                ..WorkerArgs::default()
            };
            let log_path = config.out.join(format!("worker-{}.log", endpoint.cell));
            let log = std::fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
            let child = spawn_node(
                &config.worker,
                &args.args(),
                config.cpus.as_deref(),
                &config.secret,
                log,
            )?;
            cells.children.push(child);
            cells.endpoints.push(endpoint);
            cells.logs.push(log_path);
        }
        Ok(cells)
    }

    pub fn endpoints(&self) -> &[CellEndpoint] {
        &self.endpoints
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Waits until every worker's `/healthz` answers 200; fails at once when one exits.
    pub async fn wait_ready(&mut self, client: &reqwest::Client, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        for index in 0..self.children.len() {
            let endpoint = &self.endpoints[index];
            let name = format!("worker {}", endpoint.cell);
            wait_node_ready(
                &mut self.children[index],
                &name,
                &endpoint.url,
                &self.logs[index],
                client,
                deadline,
            )
            .await?;
        }
        Ok(())
    }

    /// Latest updates the coordinator(s) acknowledged so far, and the batches that carried
    /// them, over every worker: the sum and count of their `latest_batch_items` histograms
    /// (each replica's acknowledgment counts once).
    pub async fn items_applied(&self, client: &reqwest::Client) -> anyhow::Result<Applied> {
        let mut total = Applied::default();
        for endpoint in &self.endpoints {
            let text = client
                .get(format!("{}{METRICS}", endpoint.url))
                .header(SECRET_HEADER, &self.secret)
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .with_context(|| format!("reading worker {}'s metrics", endpoint.cell))?
                .text()
                .await?;
            let (items, batches) = batch_items(&text);
            total.items += items.round() as u64;
            total.batches += batches.round() as u64;
        }
        Ok(total)
    }

    /// Waits until the workers' count of applied updates stays the same for `quiet` (their
    /// pushes are acknowledged), at most `within`; the count then.
    pub async fn settled_items_applied(
        &self,
        client: &reqwest::Client,
        quiet: Duration,
        within: Duration,
    ) -> anyhow::Result<Applied> {
        let deadline = Instant::now() + within;
        let mut last = self.items_applied(client).await?;
        let mut since = Instant::now();
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = self.items_applied(client).await?;
            if now != last {
                (last, since) = (now, Instant::now());
            } else if since.elapsed() >= quiet {
                break;
            }
        }
        Ok(last)
    }
}

impl Drop for RealCells {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `program args`, under `taskset -c <cpus>` when given (taskset execs the program: the
/// child's id is the node's).
pub fn node_command(program: &std::path::Path, args: &[String], cpus: Option<&str>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut command = Command::new("taskset");
            command.arg("-c").arg(cpus).arg(program).args(args);
            command
        }
        None => {
            let mut command = Command::new(program);
            command.args(args);
            command
        }
    }
}

/// Starts `program` with `args` (under `taskset -c cpus` when given) for a bench step: the
/// cluster secret in its environment, plain log lines, its output in `log`.
pub fn spawn_node(
    program: &std::path::Path,
    args: &[String],
    cpus: Option<&str>,
    secret: &str,
    log: std::fs::File,
) -> anyhow::Result<Child> {
    node_command(program, args, cpus)
        .env("ISU_CLUSTER_SECRET", secret)
        .env("NO_COLOR", "1")
        .env("RUST_LIB_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| format!("starting {}", program.display()))
}

/// Waits until node `name` (`child`, writing `log`) answers 200 at `base_url`'s `/healthz`;
/// fails at once when it exits (a flag it refuses, say), with the end of its log, and at
/// `deadline`.
pub async fn wait_node_ready(
    child: &mut Child,
    name: &str,
    base_url: &str,
    log: &std::path::Path,
    client: &reqwest::Client,
    deadline: Instant,
) -> anyhow::Result<()> {
    let url = format!("{base_url}{HEALTH}");
    loop {
        if let Some(status) = child.try_wait()? {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(5).collect();
            anyhow::bail!(
                "{name} exited ({status}) before it was ready; its log ({}) ends:\n{}",
                log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        let answer = client.get(&url).timeout(Duration::from_secs(2)).send().await;
        if answer.is_ok_and(|response| response.status().is_success()) {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{name} was not ready in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A free port on `host` (bound on port 0 and released).
pub fn free_port_on(host: Ipv4Addr) -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(SocketAddr::from((host, 0)))
        .with_context(|| format!("finding a free port on {host}"))?;
    Ok(listener.local_addr()?)
}

/// Latest updates and batches acknowledged, as the workers count them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    pub items: u64,
    pub batches: u64,
}

/// The `_sum` and `_count` of a worker's `latest_batch_items` histogram (0 before its first
/// batch).
pub fn batch_items(metrics: &str) -> (f64, f64) {
    let samples = shared::prom_text::parse(metrics);
    let name = shared::telemetry::BATCH_ITEMS;
    (
        shared::prom_text::sum(&samples, &format!("{name}_sum"), |_| true),
        shared::prom_text::sum(&samples, &format!("{name}_count"), |_| true),
    )
}

/// When each post of one cell is due: `isus` ISUs, each posting `rate_per_isu` times a
/// second, spread evenly. Post `j` (from 0) is for ISU `j % isus`, its `j / isus`-th, due
/// `j / (isus × rate_per_isu)` seconds after the start, so an ISU's posts are `1 /
/// rate_per_isu` apart and the cell's are evenly spaced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PostSchedule {
    pub isus: usize,
    pub rate_per_isu: f64,
}

impl PostSchedule {
    /// When post `j` is due, from the start.
    pub fn due(&self, j: u64) -> Duration {
        Duration::from_secs_f64(j as f64 / (self.isus as f64 * self.rate_per_isu))
    }

    /// Post `j`'s ISU (an index into the cell's ISUs) and its rank among that ISU's posts.
    pub fn post(&self, j: u64) -> (usize, u64) {
        ((j % self.isus as u64) as usize, j / self.isus as u64)
    }

    /// Posts due before `time` has passed.
    pub fn posts_within(&self, time: Duration) -> u64 {
        (time.as_secs_f64() * self.isus as f64 * self.rate_per_isu).ceil() as u64
    }
}

/// The timestamp of an ISU's post of `rank`: after the dataset's end (newer than any
/// condition the reset gave it), one virtual second per post.
pub fn post_timestamp(rank: u64) -> i64 {
    VIRTUAL_START + 1 + rank as i64
}

/// One ISU's condition body: a JSON array of one condition at `timestamp`, its flags varied
/// as the simulator varies them (by the ISU's index in its cell and the timestamp).
pub fn condition_body(index: usize, timestamp: i64) -> String {
    let flags = Flags((index as u8 ^ timestamp as u8) & Flags::ALL);
    format!(
        r#"[{{"is_sitting":{},"condition":"{}","message":"{MESSAGE}","timestamp":{timestamp}}}]"#,
        flags.is_sitting(),
        flags.condition_string()
    )
}

/// What the posters did, over every cell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PostTotals {
    pub sent: u64,
    /// Answered 2xx (the worker took the condition).
    pub accepted: u64,
    /// Answered otherwise, or not within [`POST_TIMEOUT`].
    pub failed: u64,
    /// The latest a post went out after it was due, in milliseconds (the bench kept up when
    /// this stays small).
    pub max_late_ms: u64,
}

/// One cell's ISUs and where their devices post.
#[derive(Debug, Clone)]
pub struct CellTarget {
    pub device_url: String,
    pub uuids: Vec<String>,
}

/// Posts to every cell for `time`, each ISU `rate_per_isu` times a second ([`PostSchedule`]
/// per cell, [`POSTS_IN_FLIGHT_PER_CELL`] posts in flight at most per cell).
pub async fn post_conditions(targets: &[CellTarget], rate_per_isu: f64, time: Duration) -> anyhow::Result<PostTotals> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(POSTS_IN_FLIGHT_PER_CELL)
        .timeout(POST_TIMEOUT)
        .build()
        .context("building the device poster's client")?;
    let counters = Arc::new(PostCounters::default());
    let started = tokio::time::Instant::now();
    let cells = targets.iter().filter(|target| !target.uuids.is_empty()).map(|target| {
        let schedule = PostSchedule {
            isus: target.uuids.len(),
            rate_per_isu,
        };
        let posts = schedule.posts_within(time);
        let (client, counters) = (client.clone(), counters.clone());
        futures::stream::iter(0..posts)
            .map(move |j| {
                let (client, counters) = (client.clone(), counters.clone());
                let (index, rank) = schedule.post(j);
                let url = format!("{}/api/condition/{}", target.device_url, target.uuids[index]);
                async move {
                    let due = started + schedule.due(j);
                    tokio::time::sleep_until(due).await;
                    let late = due.elapsed().as_millis() as u64;
                    counters.max_late_ms.fetch_max(late, Ordering::AcqRel);
                    counters.sent.fetch_add(1, Ordering::AcqRel);
                    let answer = client
                        .post(url)
                        .header(reqwest::header::CONTENT_TYPE, "application/json")
                        .body(condition_body(index, post_timestamp(rank)))
                        .send()
                        .await;
                    match answer {
                        Ok(response) if response.status().is_success() => {
                            counters.accepted.fetch_add(1, Ordering::AcqRel);
                        }
                        Ok(response) => {
                            if counters.failed.fetch_add(1, Ordering::AcqRel) == 0 {
                                tracing::warn!(status = %response.status(), "a condition post failed");
                            }
                        }
                        Err(error) => {
                            if counters.failed.fetch_add(1, Ordering::AcqRel) == 0 {
                                tracing::warn!(error = %shared::error_chain(&error), "a condition post failed");
                            }
                        }
                    }
                }
            })
            .buffer_unordered(POSTS_IN_FLIGHT_PER_CELL)
            .collect::<()>()
    });
    futures::future::join_all(cells).await;
    Ok(counters.snapshot())
}

/// Posts one condition to the first ISU of each cell, at the dataset's end (older than any
/// post of [`post_conditions`]): a worker's first change after a reset sends a frame of the
/// new generation on its stream of the old one, which the coordinator ends; the next stream
/// starts with every ISU's latest condition. Done before a measure, so that this one-time
/// push falls outside it.
pub async fn warm_up(client: &reqwest::Client, targets: &[CellTarget]) -> anyhow::Result<()> {
    for target in targets {
        let Some(uuid) = target.uuids.first() else {
            continue;
        };
        let response = client
            .post(format!("{}/api/condition/{uuid}", target.device_url))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(condition_body(0, VIRTUAL_START))
            .timeout(POST_TIMEOUT)
            .send()
            .await
            .context("posting a warm-up condition")?;
        anyhow::ensure!(
            response.status().is_success(),
            "a warm-up condition post answered {}",
            response.status()
        );
    }
    Ok(())
}

#[derive(Default)]
struct PostCounters {
    sent: AtomicU64,
    accepted: AtomicU64,
    failed: AtomicU64,
    max_late_ms: AtomicU64,
}

impl PostCounters {
    fn snapshot(&self) -> PostTotals {
        PostTotals {
            sent: self.sent.load(Ordering::Acquire),
            accepted: self.accepted.load(Ordering::Acquire),
            failed: self.failed.load(Ordering::Acquire),
            max_late_ms: self.max_late_ms.load(Ordering::Acquire),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posts_are_spread_evenly_over_the_isus_and_each_isus_posts_evenly_apart() {
        let schedule = PostSchedule {
            isus: 4,
            rate_per_isu: 0.5,
        };
        // Two posts a second over the cell: one every 500 ms, ISU by ISU.
        assert_eq!(schedule.due(0), Duration::ZERO);
        assert_eq!(schedule.due(1), Duration::from_millis(500));
        assert_eq!(schedule.posts_within(Duration::from_secs(10)), 20);
        assert_eq!(schedule.posts_within(Duration::from_millis(10_100)), 21);
        let posts: Vec<(usize, u64)> = (0..8).map(|j| schedule.post(j)).collect();
        assert_eq!(posts, [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1)]);
        // One ISU's posts are 1 / rate apart: 2 s.
        assert_eq!(schedule.due(6) - schedule.due(2), Duration::from_secs(2));

        // Over any second of a long run, every ISU posts `rate` times, give or take one.
        let schedule = PostSchedule {
            isus: 1_000,
            rate_per_isu: 3.0,
        };
        let mut per_isu = vec![0_u32; 1_000];
        let window = schedule.posts_within(Duration::from_secs(4))..schedule.posts_within(Duration::from_secs(5));
        assert_eq!(window.end - window.start, 3_000);
        for j in window {
            per_isu[schedule.post(j).0] += 1;
        }
        assert!(per_isu.iter().all(|posts| *posts == 3));
    }

    #[test]
    fn a_body_is_one_valid_condition_newer_with_each_rank() {
        let parse = |body: &str| -> serde_json::Value { serde_json::from_str(body).expect("the body is JSON") };
        let first = parse(&condition_body(5, post_timestamp(0)));
        let second = parse(&condition_body(5, post_timestamp(1)));
        let items = first.as_array().expect("an array");
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["timestamp"], VIRTUAL_START + 1);
        assert_eq!(second[0]["timestamp"], VIRTUAL_START + 2);
        assert_eq!(items[0]["message"], MESSAGE);
        let condition = items[0]["condition"].as_str().expect("a condition string");
        assert!(shared::domain::parse_condition(condition).is_some(), "{condition}");
        assert!(items[0]["is_sitting"].is_boolean());
    }

    #[test]
    fn applied_updates_are_the_batch_histograms_sum() {
        let metrics = "\
# TYPE latest_batch_items histogram
latest_batch_items_bucket{le=\"1\"} 3
latest_batch_items_bucket{le=\"+Inf\"} 7
latest_batch_items_sum 1234
latest_batch_items_count 7
latest_push_lag_seconds_sum 0.5
";
        assert_eq!(batch_items(metrics), (1234.0, 7.0));
        assert_eq!(batch_items("process_cpu_seconds_total 3\n"), (0.0, 0.0));
    }
}
