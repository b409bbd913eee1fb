//! Ingestion and `kill -9` with serve on PostgreSQL (`--database-url`), beside raw multi-row and
//! single-row inserts of the same rows into the same schema on the same server, in the same run.
//! Each workload runs in a database of its own, created on the given server and dropped at the end.

use std::collections::HashSet;
use std::path::Path;
use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection, Postgres};

use super::ingest::{paced_latency, peak_rate, stream_until_killed};
use super::raw::RawRows;
use crate::peers::{RestPeer, Serve};
use crate::{Row, Scale};

/// A database of the run's own on the server `admin` names, dropped with this value.
pub(super) struct BenchDatabase {
    admin: PgConnectOptions,
    name: String,
    url: String,
}

const REPLICA_SECRET: &str = "aiwg-bench-replica-secret";

impl BenchDatabase {
    pub(super) async fn create(admin_url: &str) -> BenchDatabase {
        let admin = PgConnectOptions::from_str(admin_url).expect("--database-url is a postgres:// URL");
        let mut conn = admin.connect().await.expect("connect to --database-url");
        let name = format!("aiwg_bench_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await.expect("create bench database");
        let url =
            admin_url.rsplit_once('/').map(|(server, _)| format!("{server}/{name}")).expect("URL names a database");
        BenchDatabase { admin, name, url }
    }

    async fn connect(&self) -> PgConnection {
        self.admin.clone().database(&self.name).connect().await.expect("connect to bench database")
    }

    pub(super) async fn drop_now(self) {
        let mut conn = self.admin.connect().await.expect("connect to --database-url");
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)).execute(&mut conn).await;
    }

    pub(super) fn serve(&self, dir: &Path) -> Serve {
        Serve::start(dir, &[("AIWG_SERVE_STORE_DATABASE_URL", self.url.as_str())])
    }

    /// A replica on this database: the first to start leads, the others follow.
    pub(super) fn replica(&self, dir: &Path) -> Serve {
        let env = [("AIWG_SERVE_STORE_DATABASE_URL", self.url.as_str()), ("AIWG_SERVE_REPLICA_SECRET", REPLICA_SECRET)];
        Serve::start(dir, &env)
    }
}

pub async fn ingestion_pg(dir: &Path, scale: &Scale, admin_url: &str, failures: &mut Vec<String>) -> Vec<Row> {
    let db = BenchDatabase::create(admin_url).await;
    let serve = db.serve(&dir.join("ingest-pg"));
    let rest = RestPeer::start().await;
    let client = serve.client();
    let peak = peak_rate(&serve, &rest, &client, scale, None).await;
    let rate = peak.rate;
    let half = paced_latency(&serve, &rest, &client, scale, rate / 2.0).await;
    let mut seqs = peak.seqs;
    seqs.extend(&half.seqs);
    serve.stop();
    let mut conn = db.connect().await;
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE event = 'mission.progress'")
        .fetch_one(&mut conn)
        .await
        .unwrap_or(-1);
    conn.close().await.ok();
    db.drop_now().await;
    if stored != seqs.len() as i64 {
        failures.push(format!("ingestion on PostgreSQL: {} events acknowledged but {stored} stored", seqs.len()));
    }
    if seqs.iter().copied().collect::<HashSet<i64>>().len() != seqs.len() {
        failures.push("ingestion on PostgreSQL: a sequence number was acknowledged twice".into());
    }

    let rows = seqs.len().min(scale.baseline_rows);
    let streams = scale.ingest_executors;
    let batched = raw_insert_rate(admin_url, rows, 1000, streams).await;
    let single = raw_insert_rate(admin_url, rows.min(scale.single_row_rows), 1, streams).await;
    vec![
        Row::new("PostgreSQL ingestion, durable events/s", rate, "ev/s")
            .baseline("raw PostgreSQL 1000 rows/txn", batched)
            .target_ratio(0.5),
        Row::new("PostgreSQL ingestion vs single-row commits", rate, "ev/s")
            .baseline("raw PostgreSQL 1 row/txn", single)
            .target_ratio(5.0),
        Row::new("PostgreSQL commit latency p99 at half peak", half.latency.ms(0.99), "ms")
            .target_below(20.0)
            .note(half.load()),
        Row::new("PostgreSQL commit latency p50 at half peak", half.latency.ms(0.5), "ms"),
    ]
}

/// The limit: the same rows into the same table (PostgreSQL's schema and indexes) with raw sqlx,
/// `per_txn` rows per transaction, interleaving `streams` executors and missions as the workload does.
async fn raw_insert_rate(admin_url: &str, rows: usize, per_txn: usize, streams: usize) -> f64 {
    let db = BenchDatabase::create(admin_url).await;
    let mut conn = db.connect().await;
    sqlx::raw_sql(include_str!("../../../../migrations/postgres/0001_init.sql")).execute(&mut conn).await.unwrap();
    let raw = RawRows::new(rows, streams);
    let rate = raw
        .rate(per_txn, async |seqs| {
            let mut tx = conn.begin().await.unwrap();
            raw.insert::<Postgres>(seqs).build().execute(&mut *tx).await.unwrap();
            tx.commit().await.unwrap();
        })
        .await;
    conn.close().await.ok();
    db.drop_now().await;
    rate
}

/// `kill -9` of serve on PostgreSQL during ingestion: every acknowledged event is in the database.
pub async fn kill9_pg(dir: &Path, scale: &Scale, admin_url: &str, failures: &mut Vec<String>) -> Vec<Row> {
    let db = BenchDatabase::create(admin_url).await;
    let serve = db.serve(&dir.join("kill9-pg"));
    let acked = stream_until_killed(serve, scale).await;
    let mut conn = db.connect().await;
    let stored: Vec<i64> = sqlx::query_scalar("SELECT seq FROM events").fetch_all(&mut conn).await.unwrap();
    conn.close().await.ok();
    db.drop_now().await;
    let stored: HashSet<i64> = stored.into_iter().collect();
    let missing = acked.iter().filter(|s| !stored.contains(s)).count();
    if missing > 0 || acked.is_empty() {
        failures.push(format!("kill -9 on PostgreSQL: {missing} of {} acknowledged events missing", acked.len()));
    }
    vec![Row::new("PostgreSQL kill -9: acknowledged events missing", missing as f64, "events")
        .target_below(0.5)
        .note(format!("of {} acked", acked.len()))]
}
