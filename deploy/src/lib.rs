//! The cluster on hosts, as a library: what the operations tool (`isuctl deploy`, `isuctl
//! hosts`, `isuctl cluster`) runs.
//!
//! Layout: `inventory` (the TOML file, checked as a whole), `render` (every host's files as
//! they will lie on the host), `node_args` (a node's settings as its command line or its
//! environment: for the units here, the local cluster and the e2e sandbox), `nginx` (the
//! nginx front's configuration, for the local cluster or another host, with the placement
//! include from `shared::router`), `deployment` (an inventory file rendered into a directory
//! and applied: the secret, the output directory, which hosts), `apply` (one host over SSH,
//! only what changed restarted), `supervise` (starts, records, finds and stops detached
//! processes: the local cluster's nodes, `run-host`'s services), `assets` (the front end's
//! precompressed `.gz` files, for nginx's `gzip_static`), `host` (`run-host`: one rendered
//! host's units without systemd, for the network-namespace hosts of `isuctl hosts`), `mounts`
//! (`run-host`'s bind mounts in a mount namespace of its own), `external` (the one runner of
//! the tools the operations stand on: cargo, ip, openssl, curl, apt-get), `prometheus`
//! (Prometheus's configuration for the local cluster and for `render`'s `isu-prometheus`
//! unit, and the series the rules read).

pub mod apply;
pub mod assets;
pub mod deployment;
pub mod external;
pub mod host;
pub mod inventory;
pub mod mounts;
pub mod nginx;
pub mod node_args;
pub mod prometheus;
pub mod render;
pub mod supervise;
