//! The ISUCONDITION bench: a JIA simulator, sign-in tokens and a short verifying load run.
//!
//! Layout:
//! - [`jia`]: the JIA simulator (`POST /api/activate`) and its posting devices ([`device`]),
//!   with an in-memory log of every condition sent;
//! - [`signin`]: the browser sign-in page of the simulator (`GET /`, `GET /login`);
//! - [`jwt`]: ES256 sign-in tokens and the invalid ones of the compatibility check;
//! - [`model`]: the bench's own model (characters, levels, graph maths), independent of the
//!   nodes' `shared` maths;
//! - [`clock`]: virtual time (30 000× real time from 2021-08-08 00:00 JST);
//! - [`scenario`]: initialize, users, registration, the read/verify loop, scoring;
//! - [`cli`]: the command line of the `bench` binary.

pub mod capacity;
pub mod cli;
pub mod clock;
pub mod device;
pub mod http;
pub mod jia;
pub mod jwt;
pub mod lean;
pub mod migration_cost;
pub mod model;
pub mod nodes;
pub mod report;
pub mod scenario;
pub mod signin;
