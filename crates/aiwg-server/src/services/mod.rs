//! The services: each owns its state and does one job, using the pure domain to decide and the store
//! port to keep what it decided. They depend on each other one way, in this order (a later one may use
//! an earlier one, never the reverse): links, registry, queue, ledger, logs, artifacts, outputs,
//! sandboxes, runtimes, retries, dispatcher, reconciler, controls, ingest, sandbox_questions, fleet,
//! operators, audit, connections, status, usage, feed, retention, webhooks, idempotency, timeouts.

pub(crate) mod artifacts;
pub(crate) mod audit;
pub(crate) mod budgets;
pub(crate) mod connections;
pub(crate) mod controls;
pub(crate) mod dispatcher;
pub mod feed;
pub(crate) mod fleet;
pub(crate) mod idempotency;
pub(crate) mod ingest;
pub(crate) mod ledger;
pub(crate) mod links;
pub(crate) mod logs;
pub(crate) mod operators;
pub(crate) mod outputs;
pub(crate) mod queue;
pub(crate) mod reconciler;
pub(crate) mod registry;
pub mod retention;
pub(crate) mod retries;
pub(crate) mod runtimes;
pub(crate) mod sandbox_questions;
pub(crate) mod sandboxes;
pub(crate) mod status;
pub(crate) mod timeouts;
pub(crate) mod usage;
pub(crate) mod webhooks;

use std::sync::Arc;

use crate::metrics::Metrics;
use crate::store::Store;

/// What every service is built from: the two services all the others read (the registry of executors
/// and the ledger of live missions), the store, the metrics, and the queue of missions waiting for an
/// executor.
#[derive(Clone)]
pub(crate) struct Core {
    pub(crate) registry: Arc<registry::Registry>,
    pub(crate) ledger: Arc<ledger::Ledger>,
    pub(crate) store: Store,
    pub(crate) metrics: Arc<Metrics>,
    /// Kicked when a queued mission may have become dispatchable; queued missions are ended or queued
    /// again here.
    pub(crate) queue: Arc<queue::Queue>,
}
