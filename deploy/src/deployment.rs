//! An inventory file rendered into a directory, and applied to its hosts: the steps of
//! `isuctl deploy render|apply` between the command line and the renderer.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use serde::Serialize;

use crate::inventory::Inventory;

/// What one render wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Rendered {
    /// The inventory file.
    pub inventory: PathBuf,
    /// The output directory (`<out>/<host>/` per host).
    pub out: PathBuf,
    /// Every host, in name order.
    pub hosts: Vec<RenderedHost>,
    /// Where a cluster secret was made by this render (none when it existed).
    pub new_secret: Option<PathBuf>,
    /// Where an operator token was made by this render (none when it existed).
    pub new_ops_token: Option<PathBuf>,
}

/// One host's rendered directory.
#[derive(Debug, Clone, Serialize)]
pub struct RenderedHost {
    pub name: String,
    pub dir: PathBuf,
    pub files: usize,
}

/// The output directory when none is given: `run/deploy/<inventory name>`.
pub fn default_out(inventory: &Path) -> PathBuf {
    let stem = inventory
        .file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or("inventory");
    PathBuf::from("run/deploy").join(stem)
}

/// Loads and checks `inventory_path`, then renders every host into `out` (default:
/// [`default_out`]), making the cluster secret on first use.
pub fn render(
    inventory_path: &Path,
    out: Option<&Path>,
    nginx_template: &Path,
) -> anyhow::Result<(Inventory, Rendered)> {
    let inventory = Inventory::load(inventory_path)?;
    let base = inventory_path.parent().unwrap_or(Path::new(".")).to_owned();
    let secret_path = base.join(&inventory.secret_file);
    let new_secret = make_secret_if_missing(&secret_path)?.then(|| secret_path.clone());
    let secret = read_secret(&secret_path)?;
    let token_path = base.join(&inventory.ops_token_file);
    let new_ops_token = make_secret_if_missing(&token_path)?.then(|| token_path.clone());
    let ops_token = read_secret(&token_path)?;
    if ops_token == secret {
        bail!(
            "{}: the operator token must differ from the cluster secret",
            token_path.display()
        );
    }
    let out = out.map_or_else(|| default_out(inventory_path), Path::to_owned);
    let context = crate::render::Context {
        base: &base,
        secret: &secret,
        ops_token: &ops_token,
        nginx_template,
    };
    let files = crate::render::render(&inventory, &context)?;
    let hosts = crate::render::write(&out, &files)?
        .into_iter()
        .map(|(name, files)| RenderedHost {
            dir: out.join(&name),
            name,
            files,
        })
        .collect();
    let rendered = Rendered {
        inventory: inventory_path.to_owned(),
        out,
        hosts,
        new_secret,
        new_ops_token,
    };
    Ok((inventory, rendered))
}

/// The hosts `--hosts` names, in inventory order (every host when `only` is empty); an error
/// names the first host the inventory does not have.
pub fn select_hosts<'a>(inventory: &'a Inventory, only: &[String]) -> anyhow::Result<Vec<&'a crate::inventory::Host>> {
    if let Some(missing) = only
        .iter()
        .find(|name| !inventory.hosts.iter().any(|host| &host.name == *name))
    {
        bail!("--hosts: no host {missing:?} in the inventory");
    }
    Ok(inventory
        .hosts
        .iter()
        .filter(|host| only.is_empty() || only.contains(&host.name))
        .collect())
}

/// What applying one host said.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    pub host: String,
    pub destination: String,
    /// The install script's lines (`<host>: installed …`, `<host>: unchanged`, …).
    pub said: Vec<String>,
}

/// Applies the rendered `out/<host>/` of each selected host through `remote` (see
/// [`crate::apply::apply_host`]); `on_line` sees each line the install script prints, as
/// it prints it.
pub fn apply(
    inventory: &Inventory,
    out: &Path,
    only: &[String],
    remote: &str,
    mut on_line: impl FnMut(&str),
) -> anyhow::Result<Vec<Applied>> {
    let hosts = select_hosts(inventory, only)?;
    let remote: Vec<String> = remote.split_whitespace().map(str::to_owned).collect();
    let mut applied = Vec::new();
    for host in hosts {
        let destination = host.ssh_destination();
        on_line(&format!("{}: applying over {destination}", host.name));
        let mut said = Vec::new();
        crate::apply::apply_host(out, &host.name, destination, &remote, |line| {
            on_line(line);
            said.push(line.to_owned());
        })?;
        applied.push(Applied {
            host: host.name.clone(),
            destination: destination.to_owned(),
            said,
        });
    }
    Ok(applied)
}

/// Makes a secret (32 random bytes, hex, mode 600: the cluster secret, the operator token)
/// at `path` if there is none; whether it did.
fn make_secret_if_missing(path: &Path) -> anyhow::Result<bool> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    if path.exists() {
        return Ok(false);
    }
    let bytes: [u8; 32] = rand::random();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    writeln!(file, "{}", hex::encode(bytes))?;
    Ok(true)
}

/// The secret at `path` (the cluster secret, the operator token), checked.
fn read_secret(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let secret = text.trim();
    if secret.len() < 16
        || !secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.+/=".contains(&b))
    {
        bail!(
            "{}: a secret must be at least 16 characters of A-Z a-z 0-9 - _ . + / =",
            path.display()
        );
    }
    Ok(secret.to_owned())
}
