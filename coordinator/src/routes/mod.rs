//! The coordinator's HTTP routes: one small router per area, merged by [`all::router`].
//!
//! - [`all`]: every area's router merged, with the request metrics middleware;
//! - `auth`, `isu`, `trend`, `internal`, `cells`, `frontend`: the areas;
//! - `session`: the signed-in user extractor; `json`: JSON responses;
//! - `leader`: a follower replica forwards the leader-only writes to its leader;
//! - [`ops`]: the operator console's API (`/ops/api/*`), behind its own token; its actions
//!   run the `cells` area's work.
//!
//! They use each other in one direction only (checked by `e2e/tests/structure.rs`): `all`
//! uses the areas, the areas use `session` and `json`, and this module uses none of them
//! (its one item, [`ClusterPeer`], is what `cells` names the guard by). Every area uses the
//! crate root's [`AppState`](crate::AppState), which uses no route.

pub mod all;
mod auth;
mod cells;
mod frontend;
mod internal;
mod isu;
mod json;
pub mod leader;
pub mod ops;
mod session;
mod trend;

/// The cluster-secret guard of internal, metrics and profiling routes.
pub use node_http::ClusterPeer;
