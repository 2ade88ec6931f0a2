//! `cluster up --prometheus`: Debian's Prometheus beside the local cluster. It scrapes every
//! node (each coordinator replica and each worker) with the cluster secret as its bearer
//! token, evaluates the project's rules (`ops/prometheus/rules`), and keeps its data in
//! `RUN_DIR/prometheus`. The configuration is written for each `up`, from the cluster's own
//! addresses, so it always names the nodes that run.

use std::path::Path;

use anyhow::Context as _;
use deploy::prometheus;

use super::{Cluster, Worker};

/// Writes `RUN_DIR/prometheus/prometheus.yml` and returns the command line that runs
/// Prometheus on it.
pub(super) fn command(cluster: &Cluster, run_dir: &Path, workers: &[Worker]) -> anyhow::Result<Vec<String>> {
    let dir = run_dir.join("prometheus");
    std::fs::create_dir_all(dir.join("data")).with_context(|| format!("making {}", dir.display()))?;
    let mut targets: Vec<prometheus::Target> = cluster
        .coordinators()
        .into_iter()
        .map(|(node, address)| prometheus::Target {
            address,
            node,
            cell: "coordinator".to_owned(),
        })
        .collect();
    targets.extend(workers.iter().map(|worker| prometheus::Target {
        address: worker.listen.clone(),
        node: worker.name.clone(),
        cell: worker.cell.to_owned(),
    }));
    let rules = prometheus::rules_dir();
    let config = dir.join("prometheus.yml");
    let first_line = "# Written by isuctl cluster up --prometheus for this run; rewritten at each up.";
    std::fs::write(
        &config,
        prometheus::configuration(first_line, &targets, &run_dir.join("secret"), &rules),
    )
    .with_context(|| format!("writing {}", config.display()))?;
    Ok(vec![
        "prometheus".to_owned(),
        format!("--config.file={}", config.display()),
        format!("--storage.tsdb.path={}", dir.join("data").display()),
        format!("--web.listen-address={}", cluster.prometheus_listen()),
        "--log.level=warn".to_owned(),
    ])
}
