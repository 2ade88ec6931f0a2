//! `isuctl render`: configuration rendered without running anything. `render nginx` is the
//! nginx front of the local cluster or of another host ([`deploy::nginx`]); it prints the
//! rendered file's path (the only line on stdout).

use std::path::PathBuf;

use anyhow::Context as _;
use deploy::nginx::{self, CellSpec, Options, Tls};
use serde::Serialize;

use crate::local::{self, Addresses};
use crate::output::{self, Format};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Render nginx/nginx.conf.template into RUN_DIR/nginx.conf (creating RUN_DIR/tmp/ and the
    /// default placement map when there is none), check it with `nginx -t` and print its
    /// path. Start nginx from it with `nginx -p RUN_DIR/ -c RUN_DIR/nginx.conf`. Defaults
    /// describe the local cluster (ISU_COORDINATOR_HOST, ISU_WORKER_A_HOST, ...).
    Nginx(NginxArgs),
}

/// On or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

#[derive(Debug, clap::Args)]
pub struct NginxArgs {
    /// The run directory [default: <repo>/run/cluster].
    #[arg(long, env = "ISU_RUN_DIR")]
    pub run_dir: Option<PathBuf>,
    /// The template [default: <repo>/nginx/nginx.conf.template].
    #[arg(long, env = "ISU_NGINX_TEMPLATE")]
    pub template: Option<PathBuf>,
    /// The rendered file [default: RUN_DIR/nginx.conf].
    #[arg(long, env = "ISU_NGINX_CONF")]
    pub out: Option<PathBuf>,
    /// The front end nginx serves [default: <repo>/web].
    #[arg(long, env = "ISU_STATIC_DIR")]
    pub static_dir: Option<PathBuf>,
    /// The public server's address [default: COORDINATOR_HOST:PUBLIC_PORT].
    #[arg(long, env = "ISU_PUBLIC_LISTEN")]
    pub public_listen: Option<String>,
    /// The public server's name.
    #[arg(long, env = "ISU_PUBLIC_SERVER_NAME", default_value = "isucondition-1.t.isucon.dev")]
    pub public_server_name: String,
    /// The coordinator's node address [default: COORDINATOR_HOST:NODE_PORT]; repeat it for
    /// each replica of a group (in the environment, separated by spaces).
    #[arg(long, env = "ISU_NGINX_COORDINATOR", value_delimiter = ' ')]
    pub coordinator: Vec<String>,
    /// A cell (worker): NAME=NODE_ADDR,DEVICE_LISTEN[,DEVICE_SERVER_NAME]: its node address,
    /// where its nginx device server listens, and that server's name (cell i:
    /// isucondition-(2+i).t.isucon.dev); repeat per cell (ISU_NGINX_CELLS: space-separated).
    /// Default: cells a and b at WORKER_A_HOST / WORKER_B_HOST (NODE_PORT, DEVICE_PORT).
    #[arg(long = "cell", env = "ISU_NGINX_CELLS", value_delimiter = ' ')]
    pub cells: Vec<CellSpec>,
    /// The router's map file [default: RUN_DIR/placement.map]: nginx starts from it. The
    /// coordinator rewrites it (and hands each new version to the control server); the
    /// default map is written only when the file does not exist yet.
    #[arg(long, env = "ISU_ROUTER_MAP")]
    pub placement: Option<PathBuf>,
    /// The file holding the cluster secret, which nginx's control server requires
    /// [default: RUN_DIR/secret].
    #[arg(long, env = "ISU_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,
    /// Where nginx's control server listens (loopback only): the coordinator hands it each
    /// new placement map (its --router-url) [default: COORDINATOR_HOST:ROUTER_PORT, 3099].
    #[arg(long, env = "ISU_ROUTER_CONTROL")]
    pub router_control: Option<String>,
    /// Write the default map even if the placement file exists.
    #[arg(long)]
    pub reset_placement: bool,
    /// nginx's worker_processes (a number or auto).
    #[arg(long, env = "ISU_NGINX_WORKER_PROCESSES", default_value = "auto")]
    pub worker_processes: String,
    /// One nginx device server per cell; off leaves the device addresses to the workers
    /// (worker --device-listen).
    #[arg(long, env = "ISU_NGINX_DEVICE_SERVERS", value_enum, default_value = "on")]
    pub device_servers: Switch,
    /// The public server's access log (RUN_DIR/nginx-access.log, LTSV; device posts are
    /// never logged).
    #[arg(long, env = "ISU_NGINX_ACCESS_LOG", value_enum, default_value = "on")]
    pub access_log: Switch,
    /// TLS certificate (PEM, chain included) for every server, with --tls-key: both or
    /// neither. Listens with 'ssl http2', TLSv1.2/1.3; one certificate serves all names.
    #[arg(long, env = "ISU_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS key (with --tls-cert).
    #[arg(long, env = "ISU_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Do not run `nginx -t`.
    #[arg(long)]
    pub no_check: bool,
    /// Render for another machine: nginx's workers run as USER; no `nginx -t`, no directory
    /// or placement file is created here (the paths are the target host's, absolute).
    #[arg(long, value_name = "USER")]
    pub for_host: Option<String>,
    /// The nginx binary [default: nginx on PATH, else /usr/sbin/nginx].
    #[arg(long, env = "ISU_NGINX_BIN")]
    pub nginx_bin: Option<PathBuf>,
}

impl NginxArgs {
    /// The typed options, with the local cluster's defaults for what is not given.
    pub fn options(&self) -> anyhow::Result<Options> {
        let addresses = Addresses::try_from_env()?;
        let cells = if self.cells.is_empty() {
            (0..2)
                .map(|index| {
                    let host = addresses.worker_host(index);
                    CellSpec {
                        name: local::cell_name(index).to_owned(),
                        node: format!("{host}:{}", addresses.node_port),
                        device_listen: format!("{host}:{}", addresses.device_port),
                        device_server_name: None,
                    }
                })
                .collect()
        } else {
            self.cells.clone()
        };
        let run_dir = self
            .run_dir
            .clone()
            .unwrap_or_else(|| local::repo_root().join("run/cluster"));
        Ok(Options {
            run_dir: run_dir.clone(),
            template: self
                .template
                .clone()
                .unwrap_or_else(|| local::repo_root().join("nginx/nginx.conf.template")),
            out: self.out.clone(),
            static_dir: self
                .static_dir
                .clone()
                .unwrap_or_else(|| local::repo_root().join("web")),
            public_listen: self
                .public_listen
                .clone()
                .unwrap_or_else(|| format!("{}:{}", addresses.coordinator_host, addresses.public_port)),
            public_server_name: self.public_server_name.clone(),
            coordinators: if self.coordinator.is_empty() {
                vec![format!("{}:{}", addresses.coordinator_host, addresses.node_port)]
            } else {
                self.coordinator.clone()
            },
            cells,
            placement: self.placement.clone(),
            secret_file: self.secret_file.clone().unwrap_or_else(|| run_dir.join("secret")),
            router_control: self
                .router_control
                .clone()
                .unwrap_or_else(|| format!("{}:{}", addresses.coordinator_host, addresses.router_port)),
            reset_placement: self.reset_placement,
            worker_processes: self.worker_processes.clone(),
            device_servers: self.device_servers == Switch::On,
            access_log: self.access_log == Switch::On,
            tls: self
                .tls_cert
                .clone()
                .zip(self.tls_key.clone())
                .map(|(cert, key)| Tls { cert, key }),
            check: !self.no_check && self.for_host.is_none(),
            nginx_bin: self.nginx_bin.clone().unwrap_or_else(nginx::default_nginx_bin),
            prometheus: None,
        })
    }
}

#[derive(Debug, Serialize)]
struct Rendered {
    path: PathBuf,
}

pub fn run(args: Args, format: Format) -> anyhow::Result<()> {
    match args.command {
        Command::Nginx(args) => {
            let options = args.options()?;
            let path = match &args.for_host {
                Some(user) => nginx::write_for_host(&options, user),
                None => nginx::render_local(&options),
            }
            .context("render nginx")?;
            output::emit(format, &Rendered { path }, |rendered| {
                rendered.path.display().to_string()
            })
        }
    }
}
