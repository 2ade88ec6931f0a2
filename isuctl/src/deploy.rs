//! `isuctl deploy`: the cluster on real hosts from one inventory file (the `deploy` crate's
//! command line; `scripts/deploy` runs it).
//!
//! `isuctl deploy render INVENTORY` writes every host's files (systemd units, environment
//! files, nginx's configuration, the bundle) into a directory; `isuctl deploy apply INVENTORY`
//! also installs them over SSH, restarting only what changed; `isuctl deploy INVENTORY
//! [--apply]` is the same in `scripts/deploy`'s form. `isuctl deploy run-host` runs one
//! rendered host without systemd (the network-namespace hosts of `isuctl hosts`).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Serialize;

use crate::output::{self, Format};
use deploy::mounts::{parse_bind, Bind};

/// Render, install or run the cluster's hosts from an inventory.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// `scripts/deploy`'s form: `INVENTORY [--apply ...]` without a subcommand.
    #[command(flatten)]
    pub direct: Box<DirectArgs>,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Render every host's files into OUT/<host>/ (the host's file system, relative to /).
    Render(RenderArgs),
    /// Render, then install on every host over SSH and (re)start only what changed; a
    /// second run changes nothing and says 'unchanged'.
    Apply(ApplyArgs),
    /// Run one rendered host's enabled units without systemd, until SIGTERM.
    RunHost(RunHostArgs),
}

/// `isuctl deploy INVENTORY [--apply]`: render, or with `--apply` render and install.
#[derive(Debug, clap::Args)]
pub struct DirectArgs {
    #[command(flatten)]
    pub render: RenderArgs,
    /// Also install on every host (as `isuctl deploy apply`).
    #[arg(long)]
    pub apply: bool,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RenderArgs {
    /// The inventory (TOML): ops/deploy/contest.toml is the contest's three hosts.
    #[arg(required = true)]
    pub inventory: Option<PathBuf>,
    /// Output directory (default: run/deploy/<inventory name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Do not build (default: cargo build --release of coordinator and worker, and the front
    /// end when the inventory bundles it and it is not built).
    #[arg(long)]
    pub no_build: bool,
    /// The nginx configuration template (default: this checkout's nginx/nginx.conf.template).
    #[arg(long)]
    pub nginx_template: Option<PathBuf>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct TargetArgs {
    /// How to reach a host instead of ssh: `{host}` becomes its destination and the remote
    /// command is appended as one argument.
    #[arg(long, default_value = "ssh -o BatchMode=yes {host}")]
    pub remote: String,
    /// Only these hosts (comma-separated names from the inventory; default: all).
    #[arg(long, value_delimiter = ',')]
    pub hosts: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub render: RenderArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

#[derive(Debug, clap::Args)]
pub struct RunHostArgs {
    /// The host's rendered units (OUT/<host>/etc/systemd/system).
    #[arg(long)]
    pub units: PathBuf,
    /// Where each unit's output goes (<unit>.log).
    #[arg(long)]
    pub log_dir: PathBuf,
    /// Where `LoadCredential=` files are put (systemd: /run/credentials).
    #[arg(long, default_value = "/run/credentials")]
    pub credentials: PathBuf,
    /// SOURCE:TARGET: bind-mount SOURCE on TARGET first, in a mount namespace of this
    /// process's own (a namespace host's directories: its /etc/isucondition, its state).
    #[arg(long = "bind", value_name = "SOURCE:TARGET", value_parser = parse_bind)]
    pub binds: Vec<Bind>,
}

/// What `render` and `apply` report (`--json`).
#[derive(Debug, Serialize)]
pub struct Report {
    pub rendered: deploy::deployment::Rendered,
    /// The hosts applied to, in order (none for `render`).
    pub applied: Vec<deploy::deployment::Applied>,
}

pub fn run(args: Args, format: Format) -> anyhow::Result<()> {
    match args.command {
        Some(Command::Render(render)) => render_and_apply(&render, None, format),
        Some(Command::Apply(apply)) => render_and_apply(&apply.render, Some(&apply.target), format),
        Some(Command::RunHost(args)) => run_host(args),
        None => {
            let target = args.direct.apply.then_some(&args.direct.target);
            render_and_apply(&args.direct.render, target, format)
        }
    }
}

/// The nginx template used when none is given: this checkout's.
pub fn default_nginx_template() -> PathBuf {
    crate::local::repo_root().join("nginx/nginx.conf.template")
}

fn render_and_apply(args: &RenderArgs, target: Option<&TargetArgs>, format: Format) -> anyhow::Result<()> {
    let inventory = args.inventory.as_deref().context("an inventory is needed")?;
    if !inventory.is_file() {
        anyhow::bail!("no inventory at {}", inventory.display());
    }
    if !args.no_build {
        build_for(inventory)?;
    }
    let nginx_template = args.nginx_template.clone().unwrap_or_else(default_nginx_template);
    let (loaded, rendered) = deploy::deployment::render(inventory, args.out.as_deref(), &nginx_template)?;
    for (made, what) in [
        (&rendered.new_secret, "cluster secret"),
        (&rendered.new_ops_token, "operator token"),
    ] {
        if let Some(path) = made {
            eprintln!("isuctl: made a new {what} in {} (mode 600)", path.display());
        }
    }
    if format == Format::Human {
        println!("{}", rendered_lines(&rendered));
    }
    let applied = match target {
        None => Vec::new(),
        Some(target) => deploy::deployment::apply(&loaded, &rendered.out, &target.hosts, &target.remote, |line| {
            // With --json, stdout is the report's: the progress goes to stderr.
            match format {
                Format::Human => println!("{line}"),
                Format::Json => eprintln!("{line}"),
            }
        })?,
    };
    if format == Format::Json {
        output::emit(format, &Report { rendered, applied }, |_| String::new())?;
    }
    Ok(())
}

/// `<host>: N files in <dir>`, one line per host.
fn rendered_lines(rendered: &deploy::deployment::Rendered) -> String {
    rendered
        .hosts
        .iter()
        .map(|host| format!("{}: {} files in {}", host.name, host.files, host.dir.display()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Builds what the inventory installs: the nodes (release), and the front end when the
/// inventory bundles it and it is not built yet.
fn build_for(inventory: &Path) -> anyhow::Result<()> {
    let root = crate::local::repo_root();
    // deploy as before (when it was the binary run here): the same feature set of the shared
    // dependencies, so release binaries already built are reused.
    deploy::external::build_release(&root, &["coordinator", "worker", "deploy"])?;
    let text = std::fs::read_to_string(inventory).with_context(|| format!("reading {}", inventory.display()))?;
    let bundles_web = text.lines().any(|line| {
        line.trim_start()
            .strip_prefix("web")
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    });
    if bundles_web && !root.join("web/dist/index.html").is_file() {
        deploy::external::run_checked(std::process::Command::new(root.join("scripts/web")).arg("build"))?;
    }
    Ok(())
}

fn run_host(args: RunHostArgs) -> anyhow::Result<()> {
    if !args.binds.is_empty() {
        deploy::mounts::bind_privately(&args.binds)?;
    }
    deploy::host::Host::load(&args.units, &args.log_dir, &args.credentials)?.run()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        let cli = crate::Cli::try_parse_from(["isuctl", "deploy"].iter().chain(args))?;
        match cli.command {
            crate::Command::Deploy(args) => Ok(args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn binds_are_two_absolute_paths() {
        assert_eq!(
            parse_bind("/a/b:/var/lib/x").unwrap(),
            Bind {
                source: "/a/b".into(),
                target: "/var/lib/x".into()
            }
        );
        assert!(parse_bind("/a/b").unwrap_err().contains("SOURCE:TARGET"));
        assert!(parse_bind("a:/b").unwrap_err().contains("absolute"));
        assert!(parse_bind("/a:b").unwrap_err().contains("absolute"));
    }

    #[test]
    fn the_scripts_form_and_the_subcommands_parse_alike() {
        let direct = parse(&["inv.toml", "--apply", "--hosts", "a,b", "--no-build"]).unwrap();
        assert!(direct.command.is_none());
        assert!(direct.direct.apply);
        assert_eq!(direct.direct.target.hosts, ["a", "b"]);
        let render = direct.direct.render;
        assert_eq!(render.inventory.as_deref(), Some(Path::new("inv.toml")));
        assert!(render.no_build);

        let Some(Command::Apply(apply)) = parse(&["apply", "inv.toml", "--remote", "sh -c"]).unwrap().command else {
            panic!("apply");
        };
        assert_eq!(apply.target.remote, "sh -c");
        assert!(apply.target.hosts.is_empty());
        let Some(Command::Render(render)) = parse(&["render", "inv.toml", "--out", "o"]).unwrap().command else {
            panic!("render");
        };
        assert_eq!(render.out.as_deref(), Some(Path::new("o")));
        let Some(Command::RunHost(host)) = parse(&["run-host", "--units", "/u", "--log-dir", "/l", "--bind", "/s:/t"])
            .unwrap()
            .command
        else {
            panic!("run-host");
        };
        assert_eq!(host.credentials, Path::new("/run/credentials"));
        assert_eq!(host.binds.len(), 1);
    }

    #[test]
    fn mistakes_are_refused_by_the_parser() {
        assert!(parse(&[]).is_err(), "an inventory or a subcommand is needed");
        assert!(parse(&["render"]).is_err(), "render needs an inventory");
        assert!(parse(&["inv.toml", "--colour"]).is_err());
        assert!(parse(&["run-host", "--units", "/u"]).is_err(), "--log-dir is needed");
        assert!(parse(&["run-host", "--units", "/u", "--log-dir", "/l", "--bind", "x"]).is_err());
    }
}
