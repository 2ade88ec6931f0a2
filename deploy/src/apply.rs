//! `--apply`: ship each host's rendered directory over SSH and run the install script there.
//!
//! One connection per host: the directory (with `.isu-deploy/apply.sh`) goes as a tar stream
//! on stdin, is unpacked into a temporary directory, installed by the script and removed.
//! The script installs only files that differ and restarts or reloads only the units those
//! files belong to, so a second run changes nothing.

use std::io::{BufRead as _, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

/// The install script run on each host.
pub const APPLY_SCRIPT: &str = include_str!("apply.sh");

/// The remote side: unpack stdin, install (as root, through `sudo -n` for another user), clean
/// up; one argument, as `ssh` takes it.
const REMOTE_COMMAND: &str = "set -e; umask 077; stage=$(mktemp -d /tmp/isu-deploy.XXXXXX); \
     trap 'rm -rf \"$stage\"' EXIT; trap 'exit 1' HUP INT TERM; tar -x -f - -C \"$stage\"; \
     if [ \"$(id -u)\" = 0 ]; then sh \"$stage/.isu-deploy/apply.sh\" \"$stage\"; \
     else sudo -n sh \"$stage/.isu-deploy/apply.sh\" \"$stage\"; fi";

/// Applies `out/<host>/` to one host through `remote`: a command whose `{host}` becomes the
/// destination (`ssh -o BatchMode=yes {host}`), with the remote command appended as one
/// argument. Each line the remote side prints on stdout goes to `on_line` as it comes (its
/// stderr is the caller's).
pub fn apply_host(
    out: &Path,
    host: &str,
    destination: &str,
    remote: &[String],
    mut on_line: impl FnMut(&str),
) -> anyhow::Result<()> {
    let dir = out.join(host);
    let tar = Command::new("tar")
        .arg("-C")
        .arg(&dir)
        .args(["--owner=0", "--group=0", "-c", "-f", "-", "."])
        .output()
        .context("running tar")?;
    if !tar.status.success() {
        bail!(
            "tar of {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&tar.stderr)
        );
    }
    let remote: Vec<String> = remote.iter().map(|arg| arg.replace("{host}", destination)).collect();
    let (program, prefix) = remote.split_first().context("--remote is empty")?;
    let mut child = Command::new(program)
        .args(prefix)
        .arg(REMOTE_COMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    // The tar stream is written from a thread: the remote side may print before it has
    // read all of it, and a full stdout pipe must not stall the upload.
    let mut stdin = child.stdin.take().expect("piped");
    let upload = std::thread::spawn(move || stdin.write_all(&tar.stdout));
    for line in std::io::BufReader::new(child.stdout.take().expect("piped")).lines() {
        on_line(&line?);
    }
    let uploaded = upload.join().expect("the upload thread does not panic");
    let status = child.wait()?;
    if !status.success() {
        bail!("applying to {host} ({destination}) failed: {status}");
    }
    uploaded.with_context(|| format!("sending the files to {host}"))?;
    Ok(())
}
