//! Bind mounts in a mount namespace of the process's own: how a network-namespace host sees
//! its own `/etc/isucondition`, state and front end at the paths a real host has them,
//! while the machine's file system stays as it was.

use anyhow::Context as _;
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};

use crate::deploy::Bind;

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
