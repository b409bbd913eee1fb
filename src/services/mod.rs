//! The services: each owns its state and does one job, using the pure domain to decide and the store
//! port to keep what it decided. They depend on each other one way, in this order (a later one may use
//! an earlier one, never the reverse): links, registry, ledger, dispatcher, reconciler, controls,
//! ingest, fleet, sandboxes, connections, status, feed.

pub mod connections;
pub mod controls;
pub mod dispatcher;
pub mod feed;
pub mod fleet;
pub mod ingest;
pub mod ledger;
pub mod links;
pub mod reconciler;
pub mod registry;
pub mod sandboxes;
pub mod status;
