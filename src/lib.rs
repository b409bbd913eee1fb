//! `aiwg-serve`: a control plane for AI-agent executors under the contract `executor.aiwg.io/v1`.
//!
//! Data flows one way: the HTTP/WebSocket edge ([`http`], [`hub`]) calls the domain ([`app`], [`registry`],
//! [`dispatch`], [`ingest`], [`missions`], [`routing`]), which calls the store ([`store`]). [`serve::start`]
//! runs the whole server in-process, which is how the binary and the tests use it.

pub mod app;
pub mod backup;
pub mod cli;
pub mod clock;
pub mod config;
pub mod contract;
pub mod datadir;
pub mod dispatch;
pub mod error;
pub mod forward;
pub mod http;
pub mod hub;
pub mod ingest;
pub mod limits;
pub mod metrics;
pub mod missions;
pub mod net;
pub mod openapi;
pub mod operator;
pub mod queue;
pub mod readiness;
pub mod reconcile;
pub mod reference_executor;
pub mod registry;
pub mod routing;
pub mod sandbox_sessions;
pub mod sandboxes;
pub mod serve;
pub mod store;
pub mod stream;
pub mod tasks;
pub mod tokens;
pub mod views;

#[cfg(test)]
mod properties;
