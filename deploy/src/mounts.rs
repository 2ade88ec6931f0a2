//! Bind mounts in a mount namespace of the process's own: how a network-namespace host sees
//! its own `/etc/isucondition`, state and front end at the paths a real host has them,
//! while the machine's file system stays as it was.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use serde::Serialize;

/// Enters a new mount namespace (its mounts propagate nowhere), then bind-mounts each
/// source on its target, in order. Must run before the process starts threads (unshare of
/// the mount namespace needs a process whose file-system attributes no thread shares).
pub fn bind_privately(binds: &[Bind]) -> anyhow::Result<()> {
    unshare(CloneFlags::CLONE_NEWNS).context("unshare(CLONE_NEWNS): a mount namespace of our own (needs root)")?;
    // Mounts made here must not reach the machine's namespace through shared propagation.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .context("making / a slave mount in our namespace")?;
    for bind in binds {
        mount(
            Some(&bind.source),
            &bind.target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .with_context(|| format!("bind-mounting {} on {}", bind.source.display(), bind.target.display()))?;
    }
    Ok(())
}

/// One `--bind SOURCE:TARGET`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bind {
    pub source: PathBuf,
    pub target: PathBuf,
}

impl std::fmt::Display for Bind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.source.display(), self.target.display())
    }
}

/// `SOURCE:TARGET`, both absolute (the last `:` splits: a source may hold one, a target not).
pub fn parse_bind(text: &str) -> Result<Bind, String> {
    let (source, target) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("{text:?}: expected SOURCE:TARGET"))?;
    let (source, target) = (Path::new(source), Path::new(target));
    if !source.is_absolute() || !target.is_absolute() {
        return Err(format!("{text:?}: SOURCE and TARGET must be absolute paths"));
    }
    Ok(Bind {
        source: source.to_owned(),
        target: target.to_owned(),
    })
}
