//! Integration tests of the control plane's core: the real server on an ephemeral port with a temporary
//! SQLite store, driven over real HTTP and WebSockets by scripted executors. One test binary for the
//! whole area, so it compiles once.

#[path = "../support/mod.rs"]
mod support;

mod artifacts;
mod audit;
mod auth_matrix;
mod backup;
mod browser;
mod cli;
mod cli_tools;
mod conformance;
mod conformance_executor;
mod conformance_record;
mod conformance_replay;
mod dashboard;
mod dashboard_browser;
mod dashboard_outputs;
mod dial;
mod dispatch;
mod durability;
mod events;
mod executor;
mod executor_outputs;
mod executors;
mod faults;
mod fencing;
mod hardening;
mod health_ops;
mod idempotency;
mod inbox;
mod limits;
mod logs;
mod mission_log;
mod mission_show;
mod missions;
mod net;
mod openapi;
mod operations;
mod operator;
mod operators;
mod path_ids;
mod postgres_only;
mod queue;
mod reference_runtime;
mod register;
mod replicas;
mod resumable;
mod retention;
mod retries;
mod routes;
mod runtimes;
mod sandbox;
mod sandbox_agents;
mod schema;
mod scripted_runtime;
mod socket;
mod sqlite_only;
mod storage_contract;
mod takeover;
mod timeouts;
mod tls;
mod vagaris;
mod webdriver_smoke;
mod webhooks;
