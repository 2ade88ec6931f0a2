//! The cluster's nodes as the bench sees them through their internal routes (cluster secret):
//! CPU seconds from `/metrics`, and CPU profiles of all nodes taken at once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use shared::protocol::{METRICS, PPROF_LAST, PPROF_PROFILE, SECRET_HEADER};

/// The metric every node exports with its user + system CPU time.
const CPU_METRIC: &str = shared::telemetry::PROCESS_CPU_SECONDS;
/// Extra time a profile request may take beyond its sampling period (rendering, transfer).
const PROFILE_SLACK: Duration = Duration::from_secs(30);

/// One node's internal base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub url: String,
}

/// The nodes of one cluster and the secret their internal routes require.
#[derive(Clone)]
pub struct Nodes {
    nodes: Vec<Node>,
    secret: String,
    client: reqwest::Client,
}

impl Nodes {
    pub fn new(nodes: Vec<Node>, secret: String) -> anyhow::Result<Nodes> {
        let client = jia_sim::http::client_builder().no_proxy().build()?;
        Ok(Nodes { nodes, secret, client })
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The internal URL of the node named `name`.
    pub fn url_of(&self, name: &str) -> Option<&str> {
        self.nodes
            .iter()
            .find(|node| node.name == name)
            .map(|node| node.url.as_str())
    }

    /// The cluster secret the internal routes require.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Every node's `/metrics` text (`None` for a node that did not answer).
    pub async fn scrape_all(&self) -> Vec<(String, Option<String>)> {
        let reads = self
            .nodes
            .iter()
            .map(|node| async move { (node.name.clone(), self.metrics_text(node).await.ok()) });
        futures::future::join_all(reads).await
    }

    async fn metrics_text(&self, node: &Node) -> reqwest::Result<String> {
        self.client
            .get(format!("{}{METRICS}", node.url))
            .header(SECRET_HEADER, &self.secret)
            .timeout(Duration::from_secs(5))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await
    }

    /// CPU seconds used so far by each node (`None` for a node that did not answer).
    pub async fn cpu_seconds(&self) -> Vec<(String, Option<f64>)> {
        let reads = self.nodes.iter().map(|node| async move {
            let seconds = self.scrape_cpu(node).await;
            if let Err(error) = &seconds {
                tracing::warn!(node = %node.name, error = format!("{error:#}"), "cannot read node CPU time");
            }
            (node.name.clone(), seconds.ok())
        });
        futures::future::join_all(reads).await
    }

    async fn scrape_cpu(&self, node: &Node) -> anyhow::Result<f64> {
        let text = self.metrics_text(node).await?;
        parse_cpu_seconds(&text).with_context(|| format!("no {CPU_METRIC} in {}{METRICS}", node.url))
    }

    /// Profiles every node at once for `seconds` and writes `<node>.svg` (flamegraph) and
    /// `<node>.pb` (pprof protobuf of the same sampling) into `out`. Returns the files written;
    /// a node that fails is reported in the log and skipped.
    pub async fn profile_all(&self, seconds: u64, out: &Path) -> Vec<PathBuf> {
        let takes = self.nodes.iter().map(|node| async move {
            match self.profile_one(node, seconds, out).await {
                Ok(files) => files,
                Err(error) => {
                    tracing::warn!(node = %node.name, error = format!("{error:#}"), "profile failed");
                    Vec::new()
                }
            }
        });
        futures::future::join_all(takes).await.into_iter().flatten().collect()
    }

    async fn profile_one(&self, node: &Node, seconds: u64, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
        let svg = self
            .fetch(
                &format!("{}{PPROF_PROFILE}?seconds={seconds}&format=svg", node.url),
                Duration::from_secs(seconds) + PROFILE_SLACK,
            )
            .await?;
        let protobuf = self
            .fetch(&format!("{}{PPROF_LAST}?format=pb", node.url), PROFILE_SLACK)
            .await?;
        tokio::fs::create_dir_all(out).await?;
        let svg_path = out.join(format!("{}.svg", node.name));
        let protobuf_path = out.join(format!("{}.pb", node.name));
        tokio::fs::write(&svg_path, svg).await?;
        tokio::fs::write(&protobuf_path, protobuf).await?;
        Ok(vec![svg_path, protobuf_path])
    }

    async fn fetch(&self, url: &str, timeout: Duration) -> anyhow::Result<bytes::Bytes> {
        let response = self
            .client
            .get(url)
            .header(SECRET_HEADER, &self.secret)
            .timeout(timeout)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = response.status();
        let body = response.bytes().await?;
        if !status.is_success() {
            bail!("GET {url}: {status} {}", String::from_utf8_lossy(&body));
        }
        Ok(body)
    }
}

/// The value of `process_cpu_seconds_total` in a Prometheus text exposition.
pub fn parse_cpu_seconds(text: &str) -> Option<f64> {
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let rest = line.strip_prefix(CPU_METRIC)?;
        let value = rest.trim_start_matches(|c: char| c != ' ').trim();
        value.parse().ok()
    })
}

/// CPU seconds this process (the bench) has used so far, user + system.
pub fn own_cpu_seconds() -> Option<f64> {
    shared::telemetry::process_cpu_seconds()
}

/// A local process whose CPU time counts as the cluster's (nginx: master and workers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalProcess {
    pub name: String,
    pub pid: u32,
}

/// Parses `NAME=PID`.
pub fn parse_process(text: &str) -> Result<LocalProcess, String> {
    let (name, pid) = text
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=PID, got {text:?}"))?;
    let pid = pid.trim().parse().map_err(|_| format!("{pid:?} is not a process id"))?;
    if name.is_empty() {
        return Err(format!("empty name in {text:?}"));
    }
    Ok(LocalProcess {
        name: name.to_owned(),
        pid,
    })
}

/// User + system CPU seconds of process `pid` and its live child processes (nginx's workers),
/// from `/proc`; `None` when the process is gone or `/proc` is unreadable.
pub fn process_tree_cpu_seconds(pid: u32) -> Option<f64> {
    let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    let mut ticks = stat_cpu_ticks(pid)?.1;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else {
            continue;
        };
        if let Some((parent, child_ticks)) = stat_cpu_ticks(child) {
            if parent == pid {
                ticks += child_ticks;
            }
        }
    }
    Some(ticks as f64 / ticks_per_second as f64)
}

/// Counts the reloads of an nginx while a run lasts: a reload (or a worker that died and was
/// replaced) starts worker processes the master did not have before. Its children are looked
/// at every [`RELOAD_SAMPLE`]; new ones in consecutive looks are one reload.
pub struct ReloadWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<Option<u64>>,
}

/// How often [`ReloadWatch`] looks at nginx's workers.
pub const RELOAD_SAMPLE: std::time::Duration = std::time::Duration::from_millis(100);

impl ReloadWatch {
    /// Starts watching the workers of nginx's master `pid`.
    pub fn start(pid: u32) -> ReloadWatch {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            // Nothing to watch (no such process, or a kernel without the children list):
            // no count rather than a count of 0.
            let mut seen = children_of(pid)?;
            let (mut reloads, mut in_reload) = (0, false);
            let mut tick = tokio::time::interval(RELOAD_SAMPLE);
            while !stopped.load(Ordering::Relaxed) {
                tick.tick().await;
                // The master gone (nginx stopped or replaced) is not a run without reloads.
                let now = children_of(pid)?;
                let fresh = !now.is_subset(&seen);
                if fresh && !in_reload {
                    reloads += 1;
                }
                in_reload = fresh;
                seen.extend(now);
            }
            Some(reloads)
        });
        ReloadWatch { stop, task }
    }

    /// Stops; the reloads seen (`None`: the master could not be watched to the end).
    pub async fn stop(self) -> Option<u64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.ok().flatten()
    }
}

/// The child processes of `pid` (`/proc/<pid>/task/<pid>/children`; `None` when it is gone
/// or the kernel does not list children).
fn children_of(pid: u32) -> Option<std::collections::BTreeSet<u32>> {
    let list = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    Some(list.split_whitespace().filter_map(|child| child.parse().ok()).collect())
}

/// (parent pid, utime + stime in clock ticks) from `/proc/<pid>/stat`.
fn stat_cpu_ticks(pid: u32) -> Option<(u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name (which may hold spaces): state is field 3.
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split(' ').collect();
    let parent = fields.get(1)?.parse().ok()?;
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some((parent, user + system))
}

/// Parses `NAME=URL`.
pub fn parse_node(text: &str) -> Result<Node, String> {
    let (name, url) = text
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=URL, got {text:?}"))?;
    if name.is_empty() || !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!("expected NAME=http://HOST:PORT, got {text:?}"));
    }
    Ok(Node {
        name: name.to_owned(),
        url: url.trim_end_matches('/').to_owned(),
    })
}

/// The CPUs this process may run on, as the kernel lists them (`Cpus_allowed_list`, e.g. `0-1`).
pub fn own_cpus_allowed() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .map(|list| list.trim().to_owned())
}

/// CPU seconds so far of every node, then of every local process (with its children), then
/// of the bench itself; the difference of two readings is what a phase cost.
pub async fn cpu_readings(nodes: Option<&Nodes>, processes: &[LocalProcess]) -> Vec<(String, Option<f64>)> {
    let mut readings = match nodes {
        Some(nodes) => nodes.cpu_seconds().await,
        None => Vec::new(),
    };
    for process in processes {
        readings.push((process.name.clone(), process_tree_cpu_seconds(process.pid)));
    }
    readings.push(("bench".to_owned(), own_cpu_seconds()));
    readings
}

#[cfg(test)]
mod tests {

    use super::*;

    /// A shell whose first child ends and two new ones start together (as nginx's workers
    /// after a reload): one reload; none while the children stay.
    #[tokio::test]
    async fn new_worker_processes_count_as_one_reload() {
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "sleep 0.5; sleep 3 & sleep 3 & wait"])
            .spawn()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        let watch = ReloadWatch::start(shell.id());
        tokio::time::sleep(Duration::from_millis(900)).await;
        let reloads = watch.stop().await;
        let _ = shell.kill();
        let _ = shell.wait();
        assert_eq!(reloads, Some(1));
        let quiet = std::process::Command::new("sh")
            .args(["-c", "sleep 2 & wait"])
            .spawn()
            .unwrap();
        let mut quiet = quiet;
        tokio::time::sleep(Duration::from_millis(150)).await;
        let watch = ReloadWatch::start(quiet.id());
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(watch.stop().await, Some(0));
        let _ = quiet.kill();
        let _ = quiet.wait();
        // A process that is gone cannot be watched: no count.
        let watch = ReloadWatch::start(quiet.id());
        assert_eq!(watch.stop().await, None);
    }

    #[test]
    fn cpu_seconds_are_read_from_the_exposition() {
        let text = "# HELP process_cpu_seconds_total Total user and system CPU time.\n\
                    # TYPE process_cpu_seconds_total counter\n\
                    process_cpu_seconds_total 12.34\n\
                    process_threads 5\n";
        assert_eq!(parse_cpu_seconds(text), Some(12.34));
        assert_eq!(parse_cpu_seconds("process_threads 5\n"), None);
    }

    #[test]
    fn nodes_parse_as_name_equals_url() {
        let node = parse_node("worker-a=http://127.0.0.3:3000/").unwrap();
        assert_eq!(node.name, "worker-a");
        assert_eq!(node.url, "http://127.0.0.3:3000");
        assert!(parse_node("worker-a").is_err());
        assert!(parse_node("=http://x").is_err());
        assert!(parse_node("a=ftp://x").is_err());
    }

    #[test]
    fn a_process_tree_counts_its_children() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .spawn()
            .unwrap();
        let own = std::process::id();
        std::thread::sleep(Duration::from_millis(300));
        // The child first: it keeps running, so the tree read after it holds at least as
        // much (read the other way round, the child gained a tick in between).
        let child_alone = process_tree_cpu_seconds(child.id()).unwrap();
        let with_child = process_tree_cpu_seconds(own).unwrap();
        child.kill().ok();
        child.wait().unwrap();
        assert!(child_alone > 0.0, "the busy child used no CPU?");
        assert!(with_child >= child_alone, "{with_child} < {child_alone}");
        assert!(process_tree_cpu_seconds(u32::MAX).is_none());
        assert_eq!(parse_process("nginx=42").unwrap().pid, 42);
        assert!(parse_process("nginx").is_err() && parse_process("nginx=x").is_err());
    }

    #[test]
    fn the_bench_knows_its_own_cpu_time() {
        let before = own_cpu_seconds().unwrap();
        let mut spin = 0u64;
        for value in 0..5_000_000u64 {
            spin = spin.wrapping_add(value * value);
        }
        std::hint::black_box(spin);
        assert!(own_cpu_seconds().unwrap() > before);
    }
}
