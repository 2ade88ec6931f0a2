//! The ISUCONDITION bench: a short verifying load run, the capacity and migration-cost
//! measurements, and (`bench jia`) the JIA simulator alone. The simulator itself, its devices,
//! virtual clock and sign-in tokens are the `jia-sim` crate.
//!
//! Layout:
//! - [`model`]: the bench's own model (characters, levels, graph maths), independent of the
//!   nodes' `shared` maths;
//! - [`scenario`]: initialize, users, registration, the read/verify loop, scoring;
//! - [`report`]: a run's report, one type (`report.json`) that the table is printed from and
//!   that `isuctl` and CI read back;
//! - [`capacity`], [`migration_cost`]: the measuring modes, with [`nodes`] (the nodes' CPU);
//! - [`scale`]: one step of a lone coordinator against many simulated cells ([`cellsim`]),
//!   or against real workers ([`realcells`]); [`scale_compare`] checks the one against the
//!   other;
//! - what `isuctl bench` runs beside the load, step by step on a thread ([`periodic`]):
//!   [`migrator`] (live migrations) and [`takeover`] (leader kills and pauses, timed);
//! - [`cli`]: the command line of the `bench` binary.

pub mod capacity;
pub mod cellsim;
pub mod cli;
pub mod migration_cost;
pub mod migrator;
pub mod model;
pub mod nodes;
pub mod periodic;
pub mod realcells;
pub mod report;
pub mod scale;
pub mod scale_compare;
pub mod scenario;
pub mod takeover;
