//! What the checks read off the running hosts' nodes, each asked on its own host: metrics,
//! stored conditions, a replica's status, a node's PID.

use std::process::{Command, Stdio};

use anyhow::Context as _;
use hostlab::plan::{self, HostPlan};
use hostlab::Hosts;

use super::metrics;

/// The conditions the workers of `hosts` have stored (`conditions_stored_total`).
pub fn stored_conditions<'a>(hosts: &Hosts, names: impl IntoIterator<Item = &'a str>) -> anyhow::Result<f64> {
    names
        .into_iter()
        .map(|name| Ok(metrics::sum(&metrics_text(hosts, name)?, "conditions_stored_total")))
        .sum()
}

/// A host's node's `/metrics`, read on the host itself (internal address).
pub fn metrics_text(hosts: &Hosts, name: &str) -> anyhow::Result<String> {
    let plan = hosts.plan()?;
    let host = plan::find(&plan, name)?;
    let internal = host.internal_address.context("the bench host has no node")?;
    let output = Command::new("ip")
        .args(["netns", "exec", &host.netns, "curl", "-s", "--max-time", "3", "-H"])
        .arg(hosts.secret_header()?)
        .arg(format!("http://{internal}:3000/metrics"))
        .output()?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The PID of node `name` (`coordinator-2`, `worker-a`, `nginx`, …) of the running hosts.
pub fn node_pid(hosts: &Hosts, name: &str) -> anyhow::Result<Option<u32>> {
    Ok(hosts
        .nodes()?
        .into_iter()
        .find(|(node, _)| node == name)
        .map(|(_, pid)| pid))
}

/// A coordinator replica's `GET /internal/replica`, asked on its own host (so a host cut
/// off still answers for itself); `None` when it does not answer 200 within a second.
pub fn replica_answer(hosts: &Hosts, host: &HostPlan) -> Option<shared::protocol::ReplicaAnswer> {
    let url = host.coordinator_url()?;
    let output = Command::new("ip")
        .args([
            "netns",
            "exec",
            &host.netns,
            "curl",
            "-s",
            "-f",
            "--max-time",
            "1",
            "-H",
        ])
        .arg(hosts.secret_header().ok()?)
        .arg(format!("{url}{}", shared::protocol::COORDINATOR_REPLICA))
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    serde_json::from_slice(&output.stdout).ok()
}
