//! netlab: a userspace IP router that joins Linux network namespaces through
//! TUN devices, with link impairments (delay, loss, cuts) that can be changed
//! while it runs.
//!
//! It exists because the kernel of the machines this project runs on has no
//! netem qdisc, no u32/matchall classifiers, no gact and no iptables (only
//! htb/tbf/pfifo), so latency, loss and partitions between the namespace
//! "hosts" of a test cluster cannot be made by the kernel. Instead every
//! namespace gets a TUN interface whose far end is this process, and this
//! process decides what happens to each packet.
//!
//! The modules are the library's (`netlab::router`, `netlab::rules`,
//! `netlab::control`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use nix::sys::signal::{SigSet, Signal};
use tracing_subscriber::EnvFilter;

use netlab::control;
use netlab::router::{PortSpec, Router};

/// Userspace IP router between network namespaces, with controllable delay,
/// loss and partitions.
///
/// `netlab run` creates a TUN interface in each given namespace and forwards
/// IPv4 packets between them by exact destination address. `netlab ctl`
/// changes the rules of a running instance. Needs root (or CAP_NET_ADMIN
/// and CAP_SYS_ADMIN).
#[derive(Debug, Parser)]
#[command(name = "netlab", version, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

const EXAMPLES: &str = "\
Example:
  ip netns add ns-a; ip netns add ns-b
  netlab run --control /run/netlab.sock \\
      --port a:ns-a:eth0:10.9.0.1/24 --port b:ns-b:eth0:10.9.0.2/24 &
  # wait for the line `ready` on its stdout, then:
  ip netns exec ns-a ping 10.9.0.2
  netlab ctl /run/netlab.sock impair all delay=50ms loss=1%
  netlab ctl /run/netlab.sock cut a b
  netlab ctl /run/netlab.sock stats";

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Create the ports and forward packets until SIGINT/SIGTERM.
    ///
    /// Prints `ready` on stdout once every port is up with its address and
    /// the control socket is listening. Logs go to stderr (RUST_LOG sets the
    /// level; default info).
    Run(RunArgs),
    /// Send one command to a running netlab and print the answer.
    ///
    /// Commands: ping | cut A B | heal A B | impair A B|all [delay=50ms] [loss=1%] |
    /// clear | rules | stats | help. `impair` replaces the pair's (or all
    /// pairs') delay and loss; a pair's own setting overrides `all`, and
    /// `impair A B` with no settings removes it. Exits non-zero if the
    /// command is rejected.
    Ctl(CtlArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Path of the Unix control socket to create.
    #[arg(long, value_name = "SOCK")]
    control: PathBuf,
    /// A port: logical host HOST gets interface IFNAME with address
    /// IPV4/PREFIX in network namespace NETNS (from `ip netns add NETNS`).
    /// Repeat for every port; a host may have several ports.
    #[arg(long = "port", value_name = "HOST:NETNS:IFNAME:IPV4/PREFIX", required = true)]
    ports: Vec<PortSpec>,
    /// MTU of every TUN interface.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u16).range(576..=65535))]
    mtu: u16,
}

#[derive(Debug, Args)]
struct CtlArgs {
    /// Control socket of the running netlab.
    #[arg(value_name = "SOCK")]
    socket: PathBuf,
    /// The command and its arguments, e.g. `impair all delay=50ms`.
    #[arg(
        value_name = "COMMAND",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<String>,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run(args) => run(args).map(|()| ExitCode::SUCCESS),
        Cmd::Ctl(args) => ctl(args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("netlab: {e:#}");
        ExitCode::FAILURE
    })
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let router = Arc::new(Router::new(args.ports)?);
    // Block the termination signals before any thread exists, so that every
    // thread inherits the mask and only `wait` below receives them.
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    signals.thread_block().context("blocking SIGINT/SIGTERM")?;

    let listener = control::bind(&args.control)?;
    let socket = SocketFile(args.control.clone());
    router.start(args.mtu)?;
    let control_router = Arc::clone(&router);
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || control::serve(listener, control_router))?;

    tracing::info!("forwarding; control socket {}", args.control.display());
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "ready")
        .and_then(|()| stdout.flush())
        .context("printing `ready`")?;
    drop(stdout);

    let signal = signals.wait().context("waiting for a signal")?;
    tracing::info!("{signal}: exiting");
    for line in router.stats_table() {
        tracing::debug!("{line}");
    }
    drop(socket);
    // The forwarding threads are blocked in reads; leaving main ends them,
    // and the TUN devices vanish with the process.
    Ok(())
}

/// Removes the control socket file when dropped.
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn ctl(args: CtlArgs) -> anyhow::Result<ExitCode> {
    let command = args.command.join(" ");
    match control::request(&args.socket, &command)? {
        Ok(body) if body.is_empty() => println!("ok"),
        Ok(body) => body.iter().for_each(|line| println!("{line}")),
        Err(msg) => {
            eprintln!("error: {msg}");
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}
