//! The `aiwg-serve` server: a control plane for AI-agent executors under the contract
//! `executor.aiwg.io/v1`.
//!
//! Data flows one way: the HTTP/WebSocket edge ([`http`], `hub`) calls the services ([`services`],
//! wired together in [`app`]), which decide with the pure domain (the crate `aiwg-domain`) and keep
//! what they decide in the store ([`store`]) behind its port. [`serve::start`] runs the whole server
//! in-process, which is how the binary and the tests use it. `ARCHITECTURE.md` is the guide.

pub mod app;
pub mod backup;
pub mod config;
pub mod datadir;
pub(crate) mod error;
pub(crate) mod forward;
pub mod http;
pub(crate) mod hub;
pub(crate) mod limits;
pub mod metrics;
pub(crate) mod net;
pub mod openapi;
pub(crate) mod runtime_client;
pub mod serve;
pub mod services;
pub mod store;
pub mod tasks;
pub(crate) mod ui;
pub(crate) mod views;
pub mod webhook_client;

#[cfg(test)]
mod properties;
