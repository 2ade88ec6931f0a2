//! The JIA simulator: what the ISUCONDITION service talks to as "JIA", for the bench, the
//! end-to-end tests and the local cluster (`bench jia`).
//!
//! Layout:
//! - [`simulator`]: `POST /api/activate`, one posting device per activated ISU, and the
//!   handle that reads what every device sent ([`JiaSimulator`], [`JiaHandle`]);
//! - [`device`]: a simulated ISU (its evolving state, its posting task, the post counts);
//! - [`condition`]: characters, condition strings, levels and the sent-condition log entry;
//! - [`clock`]: virtual time (30 000× real time from 2021-08-08 00:00 JST by default);
//! - [`signin`]: the browser sign-in page (`GET /`, `GET /login`);
//! - [`jwt`]: ES256 sign-in tokens as JIA issues them, and the invalid ones the bench tries;
//! - [`lean`]: a bare HTTP/1.1 connection for devices at capacity-measuring rates;
//! - [`http`]: the one place HTTP clients are built (and a private CA trusted).

pub mod clock;
pub mod condition;
pub mod device;
pub mod http;
pub mod jwt;
pub mod lean;
pub mod signin;
pub mod simulator;

pub use simulator::{
    Activation, JiaConfig, JiaHandle, JiaSimulator, StartError, UrlPolicy, DEVICE_USER_AGENT, OFFICIAL_HOSTS,
    UNKNOWN_ISU_UUID,
};
