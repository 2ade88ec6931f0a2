//! `isuctl hosts`: the cluster on network-namespace hosts of this machine (`scripts/hosts`
//! runs it). The hosts themselves (namespaces, netlab, TLS, each host's `run-host`) are the
//! `hostlab` crate's; this is the command line over it. The system test on these hosts is
//! `e2e/tests/hosts`, which `scripts/hosts test` runs.

use hostlab::{BenchArgs, Hosts, Status, Tls, UpArgs};

use crate::output::{self, Format};

/// The deployment on network-namespace hosts of this machine (needs root, iproute2, nginx,
/// openssl, curl).
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Environment: ISU_HOSTS_DIR (default run/hosts). The system test on these hosts: scripts/hosts test."
)]
pub struct Args {
    #[command(subcommand)]
    pub command: HostsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum HostsCommand {
    /// Make the hosts and start the cluster on them (namespaces isu-h1..4 and isu-hb, each
    /// with an /etc/hosts naming isucondition-N.t.isucon.dev; TLS on every public listener
    /// with certificates of a private CA made here, run/hosts/tls/ca.pem).
    Up(UpArgs),
    /// Stop everything up started, delete the namespaces.
    Down,
    /// The hosts and their processes.
    Status,
    /// Run the bench on the bench host against https://isucondition-1.t.isucon.dev (report in
    /// run/hosts/bench/).
    Bench(BenchArgs),
    /// netlab's control: cut A B | heal A B | impair A B|all delay=50ms loss=1% | clear |
    /// stats | rules (hosts: isucondition-1..4, bench).
    Net {
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Run a command on a host (its namespace and its mounts).
    Exec {
        /// isucondition-1..4 or bench.
        host: String,
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
}

pub fn run(args: Args, format: Format) -> anyhow::Result<()> {
    let hosts = Hosts::from_env(crate::local::repo_root())?;
    match args.command {
        HostsCommand::Up(up) => {
            let report = hosts.up(&up)?;
            output::emit(format, &report, |report| {
                format!(
                    "hosts: up: {} workers, {} coordinator(s), TLS {}; {} from the bench host (isuctl hosts bench)",
                    report.workers,
                    report.coordinators,
                    if report.tls == Tls::On { "on" } else { "off" },
                    report.url
                )
            })
        }
        HostsCommand::Down => {
            hosts.down()?;
            output::emit(format, &serde_json::json!({ "down": true }), |_| {
                "hosts: down".to_owned()
            })
        }
        HostsCommand::Status => {
            let status = hosts.status()?;
            output::emit(format, &status, status_lines)?;
            if !status.up {
                std::process::exit(1);
            }
            Ok(())
        }
        HostsCommand::Bench(bench) => {
            let status = hosts.bench(&bench, None)?;
            exit_like(status)
        }
        HostsCommand::Net { command } => {
            let said = hosts.net(&command.join(" "))?;
            output::emit(format, &said, |said| {
                if said.is_empty() {
                    "ok".to_owned()
                } else {
                    said.join("\n")
                }
            })
        }
        HostsCommand::Exec { host, command } => {
            let status = hosts.exec(&host, &command)?;
            exit_like(status)
        }
    }
}

/// Ends this process with `status`'s code when it is not success (a command run for the user).
fn exit_like(status: std::process::ExitStatus) -> anyhow::Result<()> {
    if status.success() {
        return Ok(());
    }
    std::process::exit(status.code().unwrap_or(1));
}

/// `status` for a person: the shape, each process `up` started, each node.
fn status_lines(status: &Status) -> String {
    let (Some(workers), Some(coordinators)) = (status.workers, status.coordinators) else {
        return "hosts: down".to_owned();
    };
    let mut lines = vec![format!(
        "hosts: up ({workers} workers, {coordinators} coordinator(s), TLS {})",
        if status.tls == Some(Tls::On) { "on" } else { "off" }
    )];
    for process in &status.processes {
        lines.push(if process.running {
            format!("  {}: running (pid {})", process.name, process.pid)
        } else {
            format!("  {}: gone", process.name)
        });
    }
    lines.extend(status.nodes.iter().map(|(name, pid)| format!("  node {name}={pid}")));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn parse(args: &[&str]) -> Result<HostsCommand, clap::Error> {
        let cli = crate::Cli::try_parse_from(["isuctl", "hosts"].iter().chain(args))?;
        match cli.command {
            crate::Command::Hosts(args) => Ok(args.command),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn options_are_checked_as_the_script_checked_them() {
        let HostsCommand::Up(up) = parse(&["up"]).unwrap() else {
            panic!()
        };
        assert_eq!(
            (up.workers, up.coordinators, up.tls, up.no_build),
            (2, 1, Tls::On, false)
        );
        let HostsCommand::Up(up) = parse(&["up", "--workers", "3", "--tls", "off", "--no-build"]).unwrap() else {
            panic!()
        };
        assert_eq!((up.workers, up.tls, up.no_build), (3, Tls::Off, true));
        for bad in [
            &["up", "--workers", "4"][..],
            &["up", "--workers", "1"],
            &["up", "--tls", "maybe"],
            &["up", "--colour"],
            &["net"],
            &["exec", "bench"],
            &["frobnicate"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} is refused");
        }
        for bad in ["0", "2", "5", "x"] {
            assert!(parse(&["up", "--coordinators", bad]).is_err(), "--coordinators {bad}");
        }
    }

    #[test]
    fn pass_through_arguments_keep_their_dashes() {
        let HostsCommand::Bench(bench) = parse(&["bench", "--pin", "--duration", "5s", "--no-growth"]).unwrap() else {
            panic!()
        };
        assert!(bench.pin);
        assert_eq!(bench.bench_args, ["--duration", "5s", "--no-growth"]);
        let HostsCommand::Net { command } = parse(&["net", "impair", "all", "delay=50ms", "loss=1%"]).unwrap() else {
            panic!()
        };
        assert_eq!(command.join(" "), "impair all delay=50ms loss=1%");
        let HostsCommand::Exec { host, command } = parse(&["exec", "bench", "ip", "-br", "addr"]).unwrap() else {
            panic!()
        };
        assert_eq!(host, "bench");
        assert_eq!(command, ["ip", "-br", "addr"]);
    }
}
