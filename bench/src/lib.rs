//! The ISUCONDITION bench: a short verifying load run, the capacity and migration-cost
//! measurements, and (`bench jia`) the JIA simulator alone. The simulator itself, its devices,
//! virtual clock and sign-in tokens are the `jia-sim` crate.
//!
//! Layout:
//! - [`model`]: the bench's own model (characters, levels, graph maths), independent of the
//!   nodes' `shared` maths;
//! - [`scenario`]: initialize, users, registration, the read/verify loop, scoring;
//! - [`capacity`], [`migration_cost`]: the measuring modes, with [`nodes`] (the nodes' CPU)
//!   and [`report`];
//! - [`cli`]: the command line of the `bench` binary.

pub mod capacity;
pub mod cli;
pub mod migration_cost;
pub mod model;
pub mod nodes;
pub mod report;
pub mod scenario;
