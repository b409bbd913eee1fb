//! The workloads of DESIGN section 7, each measured beside its baseline in the same run: one file per
//! family (ingestion and `kill -9`; dispatch; dashboard polling; serve's footprint: cold start, an idle
//! fleet, a restart under a fleet; HITL; missions through an HTTP agent runtime; on PostgreSQL, the
//! store and replicas; retention's compaction; ingestion beside a slow webhook receiver; the dashboard
//! in headless Chromium; what missions produce, their logs and artifacts), and here what they share.

mod browser;
mod dispatch;
mod fleet;
mod hitl;
mod ingest;
mod notify;
mod outputs;
mod polling;
mod postgres;
mod raw;
mod replicas;
mod retention;
mod runtimes;
mod tls;
mod usage;

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use aiwg_client::Client;
use serde_json::json;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::ConnectOptions;

pub use browser::dashboard;
pub use dispatch::dispatch;
pub use fleet::{cold_start, idle_fleet, reconnect_storm};
pub use hitl::hitl_round_trip;
pub use ingest::{answer_cost, ingestion, kill9};
pub use notify::notifications;
pub use outputs::{artifacts, logs};
pub use polling::polling;
pub use postgres::{ingestion_pg, kill9_pg};
pub use replicas::{dispatch_replicas, storm_after_kill9};
pub use retention::compaction;
pub use runtimes::runtime_missions;
pub use tls::tls_cost;
pub use usage::usage;

use crate::peers::{self, Peer, RestPeer, Serve};

pub(super) fn micros(d: Duration) -> u64 {
    d.as_micros() as u64
}

pub(super) fn mission_id(i: usize) -> String {
    format!("m-{}-{i}", uuid::Uuid::new_v4().simple())
}

pub(super) async fn dispatch_to(client: &Client, executor: &str, id: &str) {
    let body = json!({"mission_id": id, "objective": "benchmark", "completion": "c",
                      "executor_filter": {"executor_id": executor, "capabilities": []}});
    client.post("/api/v1/sessions/bench/dispatch", &body).await.expect("dispatch");
}

/// A simulated executor, connected, with one mission dispatched to it: what most workloads start from.
/// The middle of a few rates measured in alternation with their baseline's (the machine's drift and
/// noise fall on both alike).
pub(super) fn median(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

pub(super) async fn with_mission(
    serve: &Serve,
    rest: &RestPeer,
    client: &Client,
    i: usize,
) -> (Peer, peers::Socket, String) {
    let peer = Peer::register(serve, rest.addr, &[]).await;
    let socket = peer.connect(serve).await;
    wait_connected(client, &peer.id).await;
    let id = mission_id(i);
    dispatch_to(client, &peer.id, &id).await;
    (peer, socket, id)
}

/// One sample of serve's `/metrics`, by its whole name (labels included, as printed); 0 when absent or
/// serve does not answer.
pub(super) async fn metric(client: &Client, name: &str) -> f64 {
    // /metrics is text, which the JSON client hands back as a string value.
    let text = client.get("/metrics").await.unwrap_or_default();
    let prefix = format!("{name} ");
    text.as_str()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix(prefix.as_str())))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

pub(super) async fn wait_connected(client: &Client, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(e) = client.get(&format!("/api/v1/executors/{id}")).await {
            if e["connected"] == true {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("executor {id} never connected");
}

pub(super) async fn open(db: &Path) -> sqlx::SqliteConnection {
    SqliteConnectOptions::from_str("sqlite:")
        .unwrap()
        .filename(db)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        // Configured as serve's writer connection is: checkpoints are not paid inside commits (serve runs
        // them beside the writer), so the baseline is the cost of the inserts alone, the strictest limit.
        .pragma("wal_autocheckpoint", "0")
        .pragma("temp_store", "memory")
        .disable_statement_logging()
        .connect()
        .await
        .expect("open SQLite")
}
