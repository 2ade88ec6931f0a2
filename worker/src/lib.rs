//! The worker node: owns the condition history of one shard of ISUs.
//!
//! Layout:
//! - [`config`]: command-line/environment configuration;
//! - [`cells`]: this worker's copy of the placement map, and forwarding to the owner cell;
//! - [`store`]: the in-memory shard (ISUs, conditions, message interning);
//! - [`journal`]: the durable log of the shard (`--data-dir`), replayed on start;
//! - [`device_server`]: device posts on their own address, optionally over TLS;
//! - [`handover`]: a replacement in place taking over the listeners and the data directory;
//! - [`migration`]: this worker's part in live migrations (export, import, activate, forget);
//! - [`pusher`]: the 10 ms actor pushing latest conditions to the coordinator;
//! - [`routes`]: public reads, device posts, internal and debug routes;
//! - [`error`]: the error type mapped to the API's statuses and messages.

mod app;
pub mod cells;
pub mod config;
pub mod device_server;
pub mod error;
pub mod handover;
pub mod ingest;
pub mod journal;
pub mod migration;
pub mod pusher;
pub mod routes;
pub mod state;
pub mod store;

pub use app::Application;
