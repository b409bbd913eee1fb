//! `aiwg-serve`: a control plane for AI-agent executors under the contract `executor.aiwg.io/v1`.
//!
//! Data flows one way: the HTTP/WebSocket edge ([`http`], [`hub`]) calls the services ([`services`],
//! wired together in [`app`]), which decide with the pure [`domain`] and keep what they decide in the
//! store ([`store`]) behind its port. [`serve::start`] runs the whole server in-process, which is how
//! the binary and the tests use it. `ARCHITECTURE.md` is the guide.

// What only the crate uses is `pub(crate)`: `pub` is the library's API (the binaries, the bench, the
// integration tests), and CI's `-D warnings` keeps it that way.
#![warn(unreachable_pub)]

pub mod app;
pub mod backup;
pub mod cli;
pub mod clock;
pub mod config;
pub mod conformance;
pub mod contract;
pub mod datadir;
pub mod domain;
pub(crate) mod error;
pub(crate) mod forward;
pub mod http;
pub(crate) mod hub;
pub(crate) mod limits;
pub mod metrics;
pub(crate) mod net;
pub mod openapi;
pub mod reference_executor;
pub(crate) mod runtime_client;
pub mod serve;
pub mod services;
pub mod store;
pub mod tasks;
pub(crate) mod tokens;
pub(crate) mod ui;
pub(crate) mod views;
// The WattSwarm executor-runtime protocol, `pub` for the reference executor and serve alike.
pub mod wattswarm;

#[cfg(test)]
mod properties;
