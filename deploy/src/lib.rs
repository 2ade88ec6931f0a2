//! The deploy crate's library: what the operations tool (`isuctl`) and `isu-deploy` share.
//!
//! `nginx` renders the nginx front's configuration (for the local cluster or another host);
//! `supervise` starts, records, finds and stops detached processes (the local cluster's
//! nodes, `run-host`'s services).

pub mod nginx;
pub mod supervise;
