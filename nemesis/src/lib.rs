//! The nemesis: a seeded, reproducible schedule of faults against a running local cluster
//! while clients record a history of what they asked and were answered, then the checker of
//! that history (linearizability per key with todc-utils' WGL checker, and invariants beside it).
//!
//! Layout: [`history`] (operations and fault windows), [`models`] (the sequential
//! specifications), [`checker`] (the checks), [`schedule`] (the faults from the seed),
//! [`faults`] (doing and healing them on the local cluster), [`net`] (network faults with
//! `tc` on loopback), [`clients`] (the recording clients), [`run`] (a whole run), [`report`]
//! (its report).

pub mod checker;
pub mod clients;
pub mod faults;
pub mod history;
pub mod models;
pub mod net;
pub mod report;
pub mod run;
pub mod schedule;
