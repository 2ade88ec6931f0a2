//! The operations tool of the cluster: every command a person (or CI) runs against a local
//! cluster, its cells, a rollout, a deployment or a benchmark, typed and tested in Rust.
//!
//! Layout: one module per command (`cluster`, `cells`, `rollout`, `render`, `deploy`,
//! `hosts`, `profile`, `bench`, `nemesis`; the front end's build and tests are `xtask`'s); `local` is the loopback cluster's run directory and
//! its description file (`cluster.json`), which every command that talks to a running local
//! cluster reads; `output` renders a command's result as JSON (`--json`) or as a table made
//! from the same data.

pub mod bench;
pub mod cells;
pub mod cells_api;
pub mod cluster;
pub mod deploy;
pub mod exit;
pub mod gate;
pub mod hosts;
pub mod http;
pub mod local;
pub mod nemesis;
pub mod output;
pub mod profile;
pub mod render;
pub mod rollout;
pub mod takeover;

use clap::{Parser, Subcommand};

use crate::output::Format;

#[derive(Debug, Parser)]
#[command(
    name = "isuctl",
    version,
    about = "Operate the ISUCONDITION cluster: local cluster, cells, rollouts, rendering, deployment, hosts, profiles, bench runs"
)]
pub struct Cli {
    /// Print the command's result as JSON on stdout instead of a human table.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The local cluster on loopback: up, down, status, logs, start/stop/kill/replace a node.
    Cluster(cluster::Args),
    /// Cells of a running cluster: status, migrate, drain, rebalance, random.
    Cells(cells::Args),
    /// Wave rollout of new binaries over a running durable cluster, gated per wave.
    Rollout(rollout::Args),
    /// Render the nginx configuration without running anything (a deployment's systemd units:
    /// `deploy render`).
    Render(render::Args),
    /// Render and install the cluster on real hosts from an inventory.
    Deploy(deploy::Args),
    /// The deployment on network-namespace hosts of this machine.
    Hosts(hosts::Args),
    /// CPU-profile every node of a running cluster at once.
    Profile(profile::Args),
    /// The main job: a cluster up, the bench against it, the report and the score.
    Bench(bench::Args),
    /// A seeded nemesis run over a fresh local cluster, its history checked.
    Nemesis(nemesis::Args),
}

/// Runs one parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let format = if cli.json { Format::Json } else { Format::Human };
    match cli.command {
        Command::Cluster(args) => cluster::run(args, format),
        Command::Cells(args) => cells::run(args, format),
        Command::Rollout(args) => rollout::run(args, format),
        Command::Render(args) => render::run(args, format),
        Command::Deploy(args) => deploy::run(args, format),
        Command::Hosts(args) => hosts::run(args, format),
        Command::Profile(args) => profile::run(args, format),
        Command::Bench(args) => bench::run(args, format),
        Command::Nemesis(args) => nemesis::run(args, format),
    }
}
