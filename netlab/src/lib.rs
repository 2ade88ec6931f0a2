//! netlab as a library: the router and its rules for `netlab run`, the control protocol's
//! parser and client for `netlab ctl` and for tools that drive a running netlab (`isuctl
//! hosts`). The binary's module doc says why netlab exists.
//!
//! Modules: [`router`] (devices and forwarding, the `--port` spec), [`rules`] (the rule
//! table), [`control`] (the Unix-socket control protocol).

pub mod control;
pub mod router;
pub mod rules;
