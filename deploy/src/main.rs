//! `isu-deploy`: the cluster on real hosts from one inventory file.
//!
//! `render` writes every host's files (systemd units, environment files, nginx's
//! configuration) into a directory; `apply` also installs them over SSH, restarting only what
//! changed; `run-host` runs one rendered host without systemd (the network-namespace hosts of
//! `scripts/hosts`). `scripts/deploy` is the front door.

mod apply;
mod host;
mod inventory;
mod render;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

use crate::inventory::Inventory;

#[derive(Debug, Parser)]
#[command(
    name = "isu-deploy",
    version,
    about = "Render, install and run the cluster's hosts from an inventory"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Render every host's files into OUT/<host>/ (the host's file system, relative to /).
    Render(RenderArgs),
    /// Render, then install on every host over SSH and (re)start what changed.
    Apply {
        #[command(flatten)]
        render: RenderArgs,
        /// How to reach a host: `{host}` becomes its `ssh` destination and the remote command
        /// is appended as one argument.
        #[arg(long, default_value = "ssh -o BatchMode=yes {host}")]
        remote: String,
        /// Only these hosts (comma-separated names; default: all).
        #[arg(long, value_delimiter = ',')]
        hosts: Vec<String>,
    },
    /// Run one rendered host's enabled units without systemd, until SIGTERM.
    RunHost {
        /// The host's rendered units (OUT/<host>/etc/systemd/system).
        #[arg(long)]
        units: PathBuf,
        /// Where each unit's output goes (<unit>.log).
        #[arg(long)]
        log_dir: PathBuf,
        /// Where `LoadCredential=` files are put (systemd: /run/credentials).
        #[arg(long, default_value = "/run/credentials")]
        credentials: PathBuf,
    },
}

#[derive(Debug, clap::Args)]
struct RenderArgs {
    /// The inventory (TOML): see ops/deploy/contest.toml.
    inventory: PathBuf,
    /// Output directory (default: run/deploy/<inventory name>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The nginx configuration template of this checkout.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../nginx/nginx.conf.template"))]
    nginx_template: PathBuf,
}

fn main() {
    if let Err(error) = run(Cli::parse()) {
        eprintln!("isu-deploy: {error:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Render(args) => {
            render(&args)?;
            Ok(())
        }
        Command::Apply {
            render: args,
            remote,
            hosts,
        } => {
            let (inventory, out) = render(&args)?;
            for name in &hosts {
                if !inventory.hosts.iter().any(|host| &host.name == name) {
                    bail!("--hosts: no host {name:?} in {}", args.inventory.display());
                }
            }
            let remote: Vec<String> = remote.split_whitespace().map(str::to_owned).collect();
            for host in &inventory.hosts {
                if hosts.is_empty() || hosts.contains(&host.name) {
                    println!("{}: applying over {}", host.name, host.ssh_destination());
                    apply::apply_host(&out, &host.name, host.ssh_destination(), &remote)?;
                }
            }
            Ok(())
        }
        Command::RunHost {
            units,
            log_dir,
            credentials,
        } => host::Host::load(&units, &log_dir, &credentials)?.run(),
    }
}

fn render(args: &RenderArgs) -> anyhow::Result<(Inventory, PathBuf)> {
    let inventory = Inventory::load(&args.inventory)?;
    let base = args.inventory.parent().unwrap_or(Path::new(".")).to_owned();
    let secret = secret(&base.join(&inventory.secret_file))?;
    let out = match &args.out {
        Some(out) => out.clone(),
        None => {
            let stem = args
                .inventory
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("inventory");
            PathBuf::from("run/deploy").join(stem)
        }
    };
    let context = render::Context {
        base: &base,
        secret: &secret,
        nginx_template: &args.nginx_template,
    };
    let hosts = render::render(&inventory, &context)?;
    for (name, count) in render::write(&out, &hosts)? {
        println!("{name}: {count} files in {}", out.join(&name).display());
    }
    Ok((inventory, out))
}

/// The cluster secret: read from `path`, or made there (mode 600) on first use.
fn secret(path: &Path) -> anyhow::Result<String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    if !path.exists() {
        let bytes: [u8; 32] = rand::random();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("creating the cluster secret {}", path.display()))?;
        writeln!(file, "{}", hex::encode(bytes))?;
        eprintln!("isu-deploy: made a new cluster secret in {} (mode 600)", path.display());
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let secret = text.trim();
    if secret.len() < 16
        || !secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.+/=".contains(&b))
    {
        bail!(
            "{}: the cluster secret must be at least 16 characters of A-Z a-z 0-9 - _ . + / =",
            path.display()
        );
    }
    Ok(secret.to_owned())
}
