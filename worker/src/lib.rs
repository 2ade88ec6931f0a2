//! The worker node: owns the condition history of one shard of ISUs.
//!
//! Layout, from the bottom up (each module uses only those above it in this list):
//! - [`store`]: the in-memory shard (ISUs, conditions, message interning, the latest-push
//!   queue) and the shard's generation rule ([`store::Store::current`]);
//! - [`cells`]: this worker's copy of the placement map, and forwarding to the owner cell;
//! - [`fence`]: the newest coordinator leader term seen, which fences off deposed leaders;
//! - [`jia_client`]: the only place that talks to JIA: ISU activation, asked for the
//!   registrations this worker holds;
//! - [`error`]: the error type mapped to the API's statuses and messages;
//! - [`ingest`]: the per-ISU quota, the ingest lanes, the shaping lane and their watchdog;
//! - [`config`]: command-line/environment configuration;
//! - [`handover`]: a replacement in place taking over the listeners and the data directory;
//! - [`journal`]: the durable log of the shard (`--data-dir`), replayed on start;
//! - [`pusher`]: the 10 ms actor pushing latest conditions to the coordinator;
//! - [`migration`]: this worker's part in live migrations (exports and their forwarding,
//!   export, activate, forget, an import's entries), free of HTTP;
//! - [`write_path`]: every batch of conditions stored, by one storing step: poison check,
//!   quota/lanes/shaping, store (and latest-push queue), log, a migration's target;
//! - [`state`]: the handlers' shared state ([`state::AppState`]), which lends the write
//!   path and the migration steps their parts;
//! - [`routes`]: every HTTP handler: public reads, device posts (also the device server's
//!   service), internal, migration and debug routes;
//! - [`device_server`]: device posts on their own address, optionally over TLS;
//! - `app`: [`Application`], the start (bind, replay, build) and the run until stopped.
//!
//! Module dependencies (`A -> B`: A uses B; no cycles):
//! ```text
//! store         -> (none)
//! cells         -> (none)
//! fence         -> (none)
//! jia_client    -> (none)
//! error         -> store
//! ingest        -> error
//! config        -> ingest
//! handover      -> config
//! journal       -> store
//! pusher        -> store
//! migration     -> cells, error, journal, store
//! write_path    -> cells, error, ingest, journal, migration, store
//! state         -> cells, config, fence, ingest, jia_client, journal, migration, store,
//!                  write_path
//! routes        -> cells, fence, state, routes::{common, condition, device, graph, internal, migration}
//! routes::*     -> error, handover, store, state, routes::common, routes::condition
//! device_server -> handover, routes
//! app           -> cells, config, device_server, handover, ingest, jia_client, journal,
//!                  migration, pusher, routes, state, store
//! ```

mod app;
pub mod cells;
pub mod config;
pub mod device_server;
pub mod error;
pub mod fence;
pub mod handover;
pub mod ingest;
pub mod jia_client;
pub mod journal;
pub mod migration;
pub mod pusher;
pub mod routes;
pub mod state;
pub mod store;
pub mod write_path;

pub use app::Application;
