//! The cluster on real hosts from one inventory file, as a library (`isuctl deploy` is its
//! command line).
//!
//! Layout: `inventory` (the TOML file, checked as a whole), `render` (every host's files as
//! they will lie on the host), `deployment` (an inventory file rendered into a directory and
//! applied: the secret, the output directory, which hosts), `apply` (one host over SSH, only
//! what changed restarted), `host` (`run-host`: one rendered host's units without systemd,
//! for the network-namespace hosts of `isuctl hosts`).

pub mod apply;
pub mod deployment;
pub mod host;
pub mod inventory;
pub mod render;
