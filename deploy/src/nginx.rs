//! The nginx front's configuration: `nginx/nginx.conf.template` rendered for the local
//! cluster (written into its run directory, checked with `nginx -t`) or for another host
//! (`--for-host`: text only, the target's paths and nginx user).
//!
//! The template's `@NAME@` placeholders are replaced by values built here; a placeholder
//! alone on its line whose value is empty takes its line with it (optional blocks leave no
//! blank line), and a placeholder this module does not know is an error. Values are pasted
//! into nginx syntax unquoted, so anything that would break it (whitespace, `;`, braces,
//! quotes, `$`) is refused.
//!
//! nginx routes per-ISU requests with `nginx/router.lua` (pasted into the configuration),
//! which keeps the placement map in a shared dictionary and takes new versions on the
//! control server without a reload. The configuration holds one upstream per cell, so only
//! a change of the set of cells (or of their addresses) needs a new rendering and a reload.
//! The default map file (nginx can start before the coordinator writes its own map) is the
//! one [`shared::router::map_text`] writes for [`PlacementMap::new`] over the cells: the
//! rules live there, not here.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use shared::placement_map::{self, Cell, PlacementMap, MAX_CELLS};

/// Why a configuration could not be rendered or checked.
#[derive(Debug, thiserror::Error)]
pub enum NginxError {
    /// An option's value cannot be used (the message names it).
    #[error("{0}")]
    Invalid(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// `nginx -t` refused the rendered file.
    #[error("nginx -t rejected {conf} (rendered from {template}):\n{output}")]
    Check {
        conf: PathBuf,
        template: PathBuf,
        output: String,
    },
}

fn invalid(message: impl Into<String>) -> NginxError {
    NginxError::Invalid(message.into())
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> NginxError + '_ {
    move |source| NginxError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One cell (worker) as the front sees it: `NAME=NODE_ADDR,DEVICE_LISTEN[,DEVICE_SERVER_NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellSpec {
    pub name: String,
    /// The worker's node address (`host:port`), the cell's upstream.
    pub node: String,
    /// Where the cell's nginx device server listens.
    pub device_listen: String,
    /// That server's name; default `isucondition-<2+index>.t.isucon.dev`.
    pub device_server_name: Option<String>,
}

impl FromStr for CellSpec {
    type Err = NginxError;

    fn from_str(spec: &str) -> Result<CellSpec, NginxError> {
        let refuse = || {
            invalid(format!(
                "--cell wants NAME=NODE_ADDR,DEVICE_LISTEN[,DEVICE_SERVER_NAME] (name: a-z 0-9 -): '{spec}'"
            ))
        };
        let (name, rest) = spec.split_once('=').ok_or_else(refuse)?;
        placement_map::check_name(name).map_err(|_| refuse())?;
        let parts: Vec<&str> = rest.split(',').collect();
        if !(2..=3).contains(&parts.len()) || parts.iter().any(|part| part.is_empty()) {
            return Err(refuse());
        }
        Ok(CellSpec {
            name: name.to_owned(),
            node: parts[0].to_owned(),
            device_listen: parts[1].to_owned(),
            device_server_name: parts.get(2).map(|name| (*name).to_owned()),
        })
    }
}

/// TLS on every server: a certificate (PEM, chain included) and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Everything a rendering takes (`isuctl render nginx --help` documents each).
#[derive(Debug, Clone)]
pub struct Options {
    pub run_dir: PathBuf,
    pub template: PathBuf,
    /// Default `RUN_DIR/nginx.conf`.
    pub out: Option<PathBuf>,
    pub static_dir: PathBuf,
    pub public_listen: String,
    pub public_server_name: String,
    /// The coordinator's node address, or each replica's (every public request goes to one
    /// replica, the first in this order that answers its health probe and does not lead,
    /// else the leader, see `nginx/replicas.lua`; a request that fails there goes to another
    /// where that is safe).
    pub coordinators: Vec<String>,
    /// 1 to [`MAX_CELLS`] cells.
    pub cells: Vec<CellSpec>,
    /// The router's map file; default `RUN_DIR/placement.map`.
    pub placement: Option<PathBuf>,
    /// The file holding the cluster secret, which the router's control server requires
    /// (read by nginx's master at start).
    pub secret_file: PathBuf,
    /// Where the router's control server listens: a loopback `host:port`, or (coordinator
    /// replicas on other hosts hand nginx the map) the host's internal `address:port`.
    pub router_control: String,
    /// Write the default map even if the placement file exists.
    pub reset_placement: bool,
    /// `auto` or a number.
    pub worker_processes: String,
    /// One nginx device server per cell (off: the workers serve their device addresses).
    pub device_servers: bool,
    /// The public server's LTSV access log (`RUN_DIR/nginx-access.log`).
    pub access_log: bool,
    pub tls: Option<Tls>,
    /// Run `nginx -t` on the result (local rendering only).
    pub check: bool,
    /// The nginx binary whose build (`-V`) decides the temp paths and TLS listen options.
    pub nginx_bin: PathBuf,
    /// Prometheus's two read routes on the control server, for the coordinators' console.
    pub prometheus: Option<PrometheusProxy>,
}

/// Prometheus on this host's loopback, reached through the router's control server: the
/// cluster secret checked, only `GET PREFIX/api/v1/query_range` and `…/alerts` passed on.
#[derive(Debug, Clone)]
pub struct PrometheusProxy {
    /// `/prometheus`.
    pub prefix: String,
    /// Prometheus's `127.0.0.1:PORT`.
    pub listen: String,
}

impl PrometheusProxy {
    /// The control server's locations.
    fn locations(&self) -> String {
        format!(
            "        # Prometheus's reads for the coordinators (the console's charts and alerts),
        # behind the cluster secret; Prometheus itself listens on loopback.
        location ~ ^{prefix}/api/v1/(query_range|alerts)$ {{
            limit_except GET {{ deny all; }}
            access_by_lua_block {{ isu_router.require_secret() }}
            rewrite ^{prefix}(/.*)$ $1 break;
            proxy_pass http://{listen};
        }}",
            prefix = self.prefix,
            listen = self.listen
        )
    }
}

/// Where nginx is: `nginx` on PATH, else `/usr/sbin/nginx`.
pub fn default_nginx_bin() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("nginx"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"))
}

/// The router's code, pasted into `init_by_lua_block`.
const ROUTER_LUA: &str = include_str!("../../nginx/router.lua");

/// The coordinator replicas' choice (health probes, the preferred replica), pasted beside
/// the router.
const REPLICAS_LUA: &str = include_str!("../../nginx/replicas.lua");

/// Where Debian installs nginx's dynamic modules.
const DEBIAN_MODULES_PATH: &str = "/usr/lib/nginx/modules";

/// The Lua module's file in nginx's modules directory.
const LUA_MODULE: &str = "ngx_http_lua_module.so";

/// Whether `nginx_bin` has the Lua module the router needs (in its `--modules-path`).
pub fn has_lua_module(nginx_bin: &Path) -> bool {
    Build::of(nginx_bin).is_ok()
}

/// What the rendering needs to know about the nginx that will run the file.
#[derive(Debug, Clone)]
struct Build {
    /// `nginx -V`'s configure arguments (or the target's assumed ones).
    flags: String,
    /// Where its dynamic modules are (`--modules-path`).
    modules_path: String,
}

impl Build {
    /// Debian's nginx (every flavour, nginx-light included) as on a target host: TLS and
    /// HTTP/2; its other modules' temp directories stay at their packaged defaults.
    fn target_host() -> Build {
        Build {
            flags: "--with-http_ssl_module --with-http_v2_module --without-http_fastcgi_module --without-http_uwsgi_module --without-http_scgi_module".to_owned(),
            modules_path: DEBIAN_MODULES_PATH.to_owned(),
        }
    }

    fn of(nginx_bin: &Path) -> Result<Build, NginxError> {
        let output = Command::new(nginx_bin)
            .arg("-V")
            .output()
            .map_err(|_| invalid("nginx not found (install: apt-get install -y nginx-light libnginx-mod-http-lua)"))?;
        let mut flags = String::from_utf8_lossy(&output.stdout).into_owned();
        flags.push_str(&String::from_utf8_lossy(&output.stderr));
        let modules_path = flags
            .split_whitespace()
            .find_map(|flag| flag.strip_prefix("--modules-path="))
            .unwrap_or(DEBIAN_MODULES_PATH)
            .to_owned();
        let lua = Path::new(&modules_path).join(LUA_MODULE);
        if !lua.is_file() {
            return Err(invalid(format!(
                "nginx's Lua module is missing ({}): apt-get install -y libnginx-mod-http-lua",
                lua.display()
            )));
        }
        Ok(Build { flags, modules_path })
    }

    fn has(&self, flag: &str) -> bool {
        self.flags.contains(flag)
    }
}

/// The values of a rendering, checked and resolved (absolute paths, defaults applied).
struct Resolved<'a> {
    options: &'a Options,
    run_dir: String,
    static_dir: String,
    placement: String,
    secret_file: String,
    tls: Option<(String, String)>,
    user_directive: String,
    build: Build,
}

/// Renders for this machine: creates `RUN_DIR/tmp/`, writes the default placement include
/// when there is none (or with `reset_placement`), checks the file with `nginx -t` (unless
/// `check` is off) and writes it. Returns the rendered file's path.
pub fn render_local(options: &Options) -> Result<PathBuf, NginxError> {
    check_template(options)?;
    std::fs::create_dir_all(&options.run_dir).map_err(io(&options.run_dir))?;
    let run_dir = std::fs::canonicalize(&options.run_dir).map_err(io(&options.run_dir))?;
    let out = options.out.clone().unwrap_or_else(|| run_dir.join("nginx.conf"));
    let placement = absolute(
        &options
            .placement
            .clone()
            .unwrap_or_else(|| run_dir.join("placement.map")),
    );
    if !options.secret_file.is_file() {
        return Err(invalid(format!(
            "secret file not found: {}",
            options.secret_file.display()
        )));
    }
    let secret_file = std::fs::canonicalize(&options.secret_file).map_err(io(&options.secret_file))?;
    if !options.static_dir.is_dir() {
        return Err(invalid(format!(
            "static dir not found: {}",
            options.static_dir.display()
        )));
    }
    let static_dir = std::fs::canonicalize(&options.static_dir).map_err(io(&options.static_dir))?;
    let tls = match &options.tls {
        None => None,
        Some(tls) => {
            for (what, path) in [("certificate", &tls.cert), ("key", &tls.key)] {
                if std::fs::File::open(path).is_err() || !path.is_file() {
                    return Err(invalid(format!("TLS {what} not readable: {}", path.display())));
                }
            }
            let cert = std::fs::canonicalize(&tls.cert).map_err(io(&tls.cert))?;
            let key = std::fs::canonicalize(&tls.key).map_err(io(&tls.key))?;
            Some((display(&cert), display(&key)))
        }
    };
    if !options.nginx_bin.is_file() {
        return Err(invalid(
            "nginx not found (install: apt-get install -y nginx-light libnginx-mod-http-lua)",
        ));
    }
    let resolved = Resolved {
        options,
        run_dir: display(&run_dir),
        static_dir: display(&static_dir),
        placement: display(&placement),
        secret_file: display(&secret_file),
        tls,
        user_directive: local_user_directive(),
        build: Build::of(&options.nginx_bin)?,
    };
    resolved.check_values()?;

    let tmp = run_dir.join("tmp");
    for dir in [Some(tmp.as_path()), out.parent(), placement.parent()]
        .into_iter()
        .flatten()
    {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    if options.reset_placement || !placement.exists() {
        write_atomically(&placement, &default_placement(&options.cells)?)?;
    } else {
        check_map_file(&placement, &options.cells)?;
    }
    if options.check {
        // 'nginx -t' truncates the pid file it names, so the check uses a copy whose pid
        // file is not the one a running nginx may own.
        let check_conf = tmp.join("nginx-check.conf");
        let check_pid = tmp.join("nginx-check.pid");
        write_atomically(&check_conf, &resolved.render(&display(&check_pid))?)?;
        nginx_check(&options.nginx_bin, &run_dir, &check_conf).map_err(|output| NginxError::Check {
            conf: check_conf.clone(),
            template: options.template.clone(),
            output,
        })?;
        let _ = std::fs::remove_file(&check_conf);
        let _ = std::fs::remove_file(&check_pid);
    }
    write_atomically(&out, &resolved.render(&format!("{}/nginx.pid", resolved.run_dir))?)?;
    Ok(out)
}

/// Renders for another machine (the deploy): nginx's workers run as `user`, the paths are the
/// target's (absolute, nothing looked at here), no check and no file written.
pub fn render_for_host(options: &Options, user: &str) -> Result<String, NginxError> {
    check_template(options)?;
    let placement = options
        .placement
        .clone()
        .unwrap_or_else(|| options.run_dir.join("placement.map"));
    let tls = options.tls.as_ref().map(|tls| (display(&tls.cert), display(&tls.key)));
    let mut paths = vec![&options.run_dir, &options.static_dir, &placement, &options.secret_file];
    if let Some(tls) = &options.tls {
        paths.extend([&tls.cert, &tls.key]);
    }
    for path in paths {
        if !path.is_absolute() {
            return Err(invalid(format!(
                "--for-host: paths must be absolute: '{}'",
                path.display()
            )));
        }
    }
    let valid_user = user.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && user
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !valid_user {
        return Err(invalid(format!("--for-host: '{user}' is not a user name")));
    }
    let run_dir = display(&options.run_dir);
    let resolved = Resolved {
        options,
        static_dir: display(&options.static_dir),
        placement: display(&placement),
        secret_file: display(&options.secret_file),
        tls,
        user_directive: format!("user {user};"),
        build: Build::target_host(),
        run_dir,
    };
    resolved.check_values()?;
    resolved.render(&format!("{}/nginx.pid", resolved.run_dir))
}

/// [`render_for_host`], written to `out` (default `RUN_DIR/nginx.conf`, its directory made):
/// the `--for-host` form of the command line. Returns the path.
pub fn write_for_host(options: &Options, user: &str) -> Result<PathBuf, NginxError> {
    let text = render_for_host(options, user)?;
    let out = options
        .out
        .clone()
        .unwrap_or_else(|| options.run_dir.join("nginx.conf"));
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    write_atomically(&out, &text)?;
    Ok(out)
}

/// The default map file for `cells`: [`PlacementMap::new`]'s spread (version 1), in the form
/// the coordinator writes. Any map the coordinator hands the router later is newer.
pub fn default_placement(cells: &[CellSpec]) -> Result<String, NginxError> {
    let map = PlacementMap::new(
        cells
            .iter()
            .map(|cell| Cell {
                name: cell.name.clone(),
                internal_url: format!("http://{}", cell.node),
                device_url: String::new(),
            })
            .collect(),
    )
    .map_err(|error| invalid(error.to_string()))?;
    Ok(shared::router::map_text(
        &map,
        &format!("the default for {} cells, written by isuctl render nginx", cells.len()),
    ))
}

/// An existing map file (the coordinator's) must be one nginx can start from with these
/// cells: nginx would refuse to start otherwise (`nginx -t` does not run the router's start).
fn check_map_file(path: &Path, cells: &[CellSpec]) -> Result<(), NginxError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let map = shared::router::RouterMap::parse(&text).map_err(|reason| {
        invalid(format!(
            "the router's map file {} is unusable ({reason}): fix it, or render with --reset-placement",
            path.display()
        ))
    })?;
    if let Some(unknown) = map
        .cells
        .iter()
        .find(|name| !cells.iter().any(|cell| &cell.name == *name))
    {
        return Err(invalid(format!(
            "the router's map file {} (version {}) names cell {unknown}, which this configuration has no upstream for: render with every cell of the map (drain a cell before retiring it)",
            path.display(),
            map.version
        )));
    }
    Ok(())
}

fn check_template(options: &Options) -> Result<(), NginxError> {
    if !options.template.is_file() {
        return Err(invalid(format!("template not found: {}", options.template.display())));
    }
    if options.cells.is_empty() || options.cells.len() > MAX_CELLS {
        return Err(invalid(format!("1 to {MAX_CELLS} cells, not {}", options.cells.len())));
    }
    Ok(())
}

impl Resolved<'_> {
    fn check_values(&self) -> Result<(), NginxError> {
        let options = self.options;
        let unusable = |value: &str| {
            value.is_empty()
                || value
                    .chars()
                    .any(|c| c.is_whitespace() || matches!(c, ';' | '{' | '}' | '"' | '\'' | '$' | '\\'))
        };
        let mut values = vec![
            self.run_dir.as_str(),
            self.static_dir.as_str(),
            options.public_listen.as_str(),
            options.worker_processes.as_str(),
            self.placement.as_str(),
            self.secret_file.as_str(),
            options.router_control.as_str(),
        ];
        values.extend(options.coordinators.iter().map(String::as_str));
        values.extend(
            options
                .cells
                .iter()
                .flat_map(|cell| [cell.node.as_str(), cell.device_listen.as_str()]),
        );
        if options.coordinators.is_empty() {
            return Err(invalid("no coordinator address".to_owned()));
        }
        if let Some(value) = values.into_iter().find(|value| unusable(value)) {
            return Err(invalid(format!(
                "value unusable in nginx.conf (empty, or has whitespace, ; {{ }} quotes, $ or a backslash): '{value}'"
            )));
        }
        let mut names = vec![options.public_server_name.clone()];
        names.extend((0..options.cells.len()).map(|index| self.device_server_name(index)));
        if options.router_control == options.public_listen
            || options
                .cells
                .iter()
                .any(|cell| cell.device_listen == options.router_control)
        {
            return Err(invalid(format!(
                "the router's control server needs an address of its own, not '{}'",
                options.router_control
            )));
        }
        if !is_loopback(&options.router_control) && !is_one_address(&options.router_control) {
            return Err(invalid(format!(
                "the router's control server listens on loopback (127.x.x.x:PORT or [::1]:PORT), or on one internal address for coordinator replicas on other hosts, never on every address: not '{}'",
                options.router_control
            )));
        }
        let bad_name = |name: &String| name.is_empty() || name.contains([';', '{', '}', '"', '\'', '$']);
        if let Some(name) = names.iter().find(|name| bad_name(name)) {
            return Err(invalid(format!("bad server name: '{name}'")));
        }
        if let Some((cert, key)) = &self.tls {
            if let Some(path) = [cert, key].into_iter().find(|path| unusable(path)) {
                return Err(invalid(format!(
                    "path unusable in nginx.conf (has whitespace, ; {{ }} quotes or $): '{path}'"
                )));
            }
            if !self.build.has("--with-http_ssl_module") {
                return Err(invalid(format!(
                    "{} was built without http_ssl_module: no TLS",
                    options.nginx_bin.display()
                )));
            }
        }
        Ok(())
    }

    fn device_server_name(&self, index: usize) -> String {
        self.options.cells[index]
            .device_server_name
            .clone()
            .unwrap_or_else(|| format!("isucondition-{}.t.isucon.dev", index + 2))
    }

    /// Listen options may appear once per address: default_server on the public server;
    /// reuseport (one accept queue per nginx worker) on the first server of each address;
    /// 'ssl http2' (1.22 syntax, before the 'http2' directive of 1.25.1) on every listen with TLS.
    fn listen(&self, address: &str, first_of_address: bool, default_server: bool) -> String {
        let mut line = address.to_owned();
        if self.tls.is_some() {
            line.push_str(" ssl");
            if self.build.has("--with-http_v2_module") {
                line.push_str(" http2");
            }
        }
        if default_server {
            line.push_str(" default_server");
        }
        if first_of_address {
            line.push_str(" reuseport backlog=4096");
        }
        line
    }

    /// One device server per cell: it takes /api/condition/ and routes by the map (a
    /// device keeps the URL JIA gave it, so after a migration its posts reach the new
    /// owner here too).
    fn device_servers(&self) -> String {
        let options = self.options;
        let mut device_servers = String::new();
        if options.device_servers {
            let mut seen = vec![options.public_listen.as_str()];
            for (index, cell) in options.cells.iter().enumerate() {
                let first = !seen.contains(&cell.device_listen.as_str());
                seen.push(&cell.device_listen);
                let _ = write!(
                    device_servers,
                    "
    server {{
        listen {};
        server_name {};
        access_log off;

        location /api/condition/ {{
            set_by_lua_block $isu_cell {{ return isu_router.route() }}
            proxy_pass http://$isu_cell;
        }}

        location / {{ return 404; }}
    }}
",
                    self.listen(&cell.device_listen, first, false),
                    self.device_server_name(index)
                );
            }
        }
        device_servers
    }

    fn values(&self, pid_file: &str) -> Vec<(&'static str, String)> {
        let options = self.options;
        let run_dir = &self.run_dir;
        // nginx creates the temp dir of every compiled-in module at start-up, at a
        // root-owned default path unless told otherwise.
        let extra_temp_paths = ["fastcgi", "uwsgi", "scgi"]
            .into_iter()
            .filter(|module| !self.build.has(&format!("--without-http_{module}_module")))
            .map(|module| format!("    {module}_temp_path {run_dir}/tmp/{module};"))
            .collect::<Vec<_>>()
            .join("\n");
        let public_access_log = if options.access_log {
            format!("access_log {run_dir}/nginx-access.log ltsv buffer=256k flush=2s if=$public_loggable;")
        } else {
            "access_log off;".to_owned()
        };
        let tls_settings = match &self.tls {
            None => String::new(),
            Some((cert, key)) => format!(
                "
    # TLS on every server below (isuctl render nginx --tls-cert/--tls-key).
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_prefer_server_ciphers off;
    ssl_session_cache shared:isu_tls:10m;
    ssl_session_timeout 1h;"
            ),
        };
        let device_servers = self.device_servers();
        let cell_upstreams = options
            .cells
            .iter()
            .map(|cell| {
                format!(
                    "    upstream {} {{\n        server {};\n{UPSTREAM_KEEPALIVE}\n    }}",
                    shared::router::upstream_name(&cell.name),
                    cell.node
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        let cell_names = options
            .cells
            .iter()
            .map(|cell| format!("\"{}\"", cell.name))
            .collect::<Vec<_>>()
            .join(", ");
        let mut router_init = format!(
            "        isu_router.init({{\n            map_file = \"{}\",\n            secret_file = \"{}\",\n            cells = {{ {cell_names} }},\n        }})",
            self.placement, self.secret_file
        );
        if options.coordinators.len() > 1 {
            let replicas = options
                .coordinators
                .iter()
                .map(|replica| format!("\"{replica}\""))
                .collect::<Vec<_>>()
                .join(", ");
            router_init.push_str(&format!(
                "\n        isu_replicas.init({{\n            replicas = {{ {replicas} }},\n        }})"
            ));
        }
        let modules = &self.build.modules_path;
        let lua_modules = format!(
            "# The Lua module routes by the placement map (Debian: libnginx-mod-http-lua).\nload_module {modules}/ndk_http_module.so;\nload_module {modules}/ngx_http_lua_module.so;"
        );
        vec![
            ("LUA_MODULES", lua_modules),
            ("CELL_UPSTREAMS", cell_upstreams),
            ("ROUTER_LUA", ROUTER_LUA.trim_end().to_owned()),
            ("REPLICAS_LUA", REPLICAS_LUA.trim_end().to_owned()),
            ("ROUTER_INIT", router_init),
            ("ROUTER_CONTROL_LISTEN", options.router_control.clone()),
            (
                "PROMETHEUS_PROXY",
                options
                    .prometheus
                    .as_ref()
                    .map_or_else(String::new, PrometheusProxy::locations),
            ),
            ("USER_DIRECTIVE", self.user_directive.clone()),
            ("WORKER_PROCESSES", options.worker_processes.clone()),
            ("EXTRA_TEMP_PATHS", extra_temp_paths),
            ("PUBLIC_LISTEN", self.listen(&options.public_listen, true, true)),
            ("PUBLIC_SERVER_NAME", options.public_server_name.clone()),
            ("PUBLIC_ACCESS_LOG", public_access_log),
            ("COORDINATOR_UPSTREAMS", coordinator_upstreams(&options.coordinators)),
            ("COORDINATOR_PASS", coordinator_pass(&options.coordinators, false)),
            ("COORDINATOR_READ_PASS", coordinator_pass(&options.coordinators, true)),
            ("DEVICE_SERVERS", device_servers),
            ("PLACEMENT_FILE", self.placement.clone()),
            ("STATIC_DIR", self.static_dir.clone()),
            ("RUN_DIR", run_dir.clone()),
            ("TLS_SETTINGS", tls_settings),
            ("PID_FILE", pid_file.to_owned()),
        ]
    }

    fn render(&self, pid_file: &str) -> Result<String, NginxError> {
        let template = std::fs::read_to_string(&self.options.template).map_err(io(&self.options.template))?;
        fill_template(&template, &self.values(pid_file)).map_err(|unknown| {
            invalid(format!(
                "template has placeholders this renderer does not know: {unknown}"
            ))
        })
    }
}

/// The keep-alive settings of every upstream.
const UPSTREAM_KEEPALIVE: &str =
    "        keepalive 256;\n        keepalive_requests 100000;\n        keepalive_timeout 60s;";

/// The coordinator's upstreams: `coordinator` for one; with replicas, one per replica
/// (`coordinator_replica_<i>`, from 1): that replica first and every other one a backup,
/// none ever set aside by nginx itself (`nginx/replicas.lua` picks the upstream by its
/// health probes, and says why).
fn coordinator_upstreams(coordinators: &[String]) -> String {
    if let [one] = coordinators {
        return format!("    upstream coordinator {{\n        server {one};\n{UPSTREAM_KEEPALIVE}\n    }}");
    }
    let mut text = Vec::new();
    for (index, first) in coordinators.iter().enumerate() {
        let mut lines = vec![format!("    upstream coordinator_replica_{} {{", index + 1)];
        lines.push(format!("        server {first} max_fails=0;"));
        for (other_index, other) in coordinators.iter().enumerate() {
            if other_index != index {
                lines.push(format!("        server {other} max_fails=0 backup;"));
            }
        }
        lines.push(UPSTREAM_KEEPALIVE.to_owned());
        lines.push("    }".to_owned());
        text.push(lines.join("\n"));
    }
    text.join("\n")
}

/// How a location passes a request to the coordinator; with replicas, to the upstream of
/// the preferred one, connecting within 0.5 s (a host cut off drops the handshake), and for
/// a read (`read`) with 0.5 s for the answer: a replica stopped with its sockets open holds
/// the reads already sent to it, and the clients (the benchmarker's, 1 s) would give up
/// long before 30 s. A loaded replica answers a read well inside that (the bench's p99
/// under load on one shared core: 25-115 ms).
fn coordinator_pass(coordinators: &[String], read: bool) -> String {
    if coordinators.len() < 2 {
        return "proxy_pass http://coordinator;".to_owned();
    }
    let mut lines = vec!["proxy_connect_timeout 500ms;"];
    if read {
        lines.push("proxy_read_timeout 500ms;");
    }
    lines.push("set_by_lua_block $isu_coordinator { return isu_replicas.upstream() }");
    lines.push("proxy_pass http://$isu_coordinator;");
    lines.join("\n            ")
}

/// Replaces every `@KEY@` of `template` by its value; a placeholder alone on its line whose
/// value is empty takes its line with it. Ends with exactly one newline. Unknown placeholders
/// are returned as the error (space-separated, sorted).
fn fill_template(template: &str, values: &[(&str, String)]) -> Result<String, String> {
    let empty: Vec<String> = values
        .iter()
        .filter(|(_, value)| value.is_empty())
        .map(|(key, _)| format!("@{key}@"))
        .collect();
    let mut text: String = template
        .lines()
        .filter(|line| !empty.iter().any(|placeholder| line.trim() == placeholder))
        .map(|line| format!("{line}\n"))
        .collect();
    // Each value is pasted once: a value is never searched for placeholders again.
    let mut rendered = String::with_capacity(text.len() * 2);
    let mut unknown = std::collections::BTreeSet::new();
    while let Some(start) = text.find('@') {
        rendered.push_str(&text[..start]);
        let rest = &text[start + 1..];
        let key_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
            .count();
        let is_placeholder = key_len > 0 && !rest.as_bytes()[0].is_ascii_digit() && rest[key_len..].starts_with('@');
        if !is_placeholder {
            rendered.push('@');
            text = rest.to_owned();
            continue;
        }
        let key = &rest[..key_len];
        match values.iter().find(|(name, _)| *name == key) {
            Some((_, value)) => rendered.push_str(value),
            None => {
                unknown.insert(format!("@{key}@"));
            }
        }
        text = rest[key_len + 1..].to_owned();
    }
    rendered.push_str(&text);
    if !unknown.is_empty() {
        return Err(unknown.into_iter().collect::<Vec<_>>().join(" "));
    }
    let trimmed = rendered.trim_end_matches('\n');
    Ok(format!("{trimmed}\n"))
}

/// A master started as root switches its workers to 'nobody' unless told otherwise, and
/// 'nobody' may not read the repo or write the run dir: keep the invoking user. As non-root,
/// nginx cannot switch user and would warn.
fn local_user_directive() -> String {
    let uid = nix::unistd::Uid::current();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |user| user.name);
    if uid.is_root() {
        let gid = nix::unistd::Gid::current();
        let group = nix::unistd::Group::from_gid(gid)
            .ok()
            .flatten()
            .map_or_else(|| gid.to_string(), |group| group.name);
        format!("user {user} {group};")
    } else {
        format!("# user: not set, nginx runs as {user}")
    }
}

/// `nginx -t` on `conf` with the run dir as prefix; the output when it fails.
fn nginx_check(nginx_bin: &Path, run_dir: &Path, conf: &Path) -> Result<(), String> {
    let mut command = Command::new(nginx_bin);
    command
        .arg("-t")
        .arg("-q")
        .arg("-p")
        .arg(format!("{}/", run_dir.display()))
        .arg("-c")
        .arg(conf);
    command.args(error_log_flag(nginx_bin, run_dir));
    match command.output() {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )),
        Err(error) => Err(format!("running {}: {error}", nginx_bin.display())),
    }
}

/// `-e RUN_DIR/nginx-error.log` when nginx takes it (1.19.5+): it keeps nginx away from its
/// compiled-in error log before it reads the configuration.
pub fn error_log_flag(nginx_bin: &Path, run_dir: &Path) -> Vec<String> {
    let help = Command::new(nginx_bin).arg("-h").output();
    let takes_e = help.is_ok_and(|output| {
        String::from_utf8_lossy(&output.stderr).contains("-e filename")
            || String::from_utf8_lossy(&output.stdout).contains("-e filename")
    });
    if takes_e {
        vec!["-e".to_owned(), format!("{}/nginx-error.log", run_dir.display())]
    } else {
        Vec::new()
    }
}

/// A loopback `host:port`: `127.x.x.x:PORT`, `localhost:PORT` or `[::1]:PORT`.
fn is_loopback(listen: &str) -> bool {
    let Some((host, port)) = listen.rsplit_once(':') else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback());
    loopback && port.parse::<u16>().is_ok_and(|port| port > 0)
}

/// One address's `ADDRESS:PORT` (not 0.0.0.0 or [::], which would be every address, the
/// public ones too): where the control server listens on the internal network.
fn is_one_address(listen: &str) -> bool {
    listen
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|address| !address.ip().is_unspecified() && address.port() > 0)
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir().map_or_else(|_| path.to_owned(), |dir| dir.join(path))
    }
}

/// [`shared::write_atomically`], with the path in the error.
fn write_atomically(path: &Path, text: &str) -> Result<(), NginxError> {
    shared::write_atomically(path, text.as_bytes()).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_once_and_empty_lines_go() {
        let values = [("A", "x@B@".to_owned()), ("B", String::new()), ("C", "c".to_owned())];
        assert_eq!(
            fill_template("1 @A@ @C@\n  @B@  \nuser@host @C@@C@\n\n", &values).unwrap(),
            "1 x@B@ c\nuser@host cc\n"
        );
        assert_eq!(
            fill_template("@A@ @NOPE@ @ZED@ @NOPE@", &values).unwrap_err(),
            "@NOPE@ @ZED@"
        );
    }

    #[test]
    fn cell_specs_parse_as_the_flag_says() {
        let cell: CellSpec = "c-1=10.0.0.4:3000,0.0.0.0:443,c.example".parse().unwrap();
        assert_eq!(cell.name, "c-1");
        assert_eq!(cell.node, "10.0.0.4:3000");
        assert_eq!(cell.device_listen, "0.0.0.0:443");
        assert_eq!(cell.device_server_name.as_deref(), Some("c.example"));
        let cell: CellSpec = "a=h:1,h:2".parse().unwrap();
        assert_eq!(cell.device_server_name, None);
        for bad in ["a=h:1", "A=h:1,h:2", "a=h:1,,x", "=h:1,h:2", "a=h:1,h:2,n,extra", "a"] {
            assert!(bad.parse::<CellSpec>().is_err(), "{bad}");
        }
    }
}
