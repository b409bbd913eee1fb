//! Test harness shared by the integration tests: the real server on an ephemeral port with a temporary
//! SQLite store, a small HTTP client, and scripted executors that are real HTTP + WebSocket peers.
#![allow(dead_code)]

pub mod agentic;
pub mod conformant;
pub mod executor;
pub mod http;
pub mod lax_server;
pub mod postgres;
pub mod process;
pub mod proxy;
pub mod runtime;
pub mod tls;
pub mod upstream;
pub mod webdriver;

use std::path::PathBuf;
use std::time::Duration;

use aiwg_server::config::Config;
use aiwg_server::serve::{self, Handle};
use serde_json::Value;

pub use executor::{ExecSocket, ScriptedExecutor};
pub use http::{Client, Resp};
pub use runtime::{Behavior, Recorded, ScriptedRuntime};

/// Every wait in the tests is bounded by this; nothing sleeps to synchronise.
pub const WAIT: Duration = Duration::from_secs(10);

pub struct TestServer {
    handle: Option<Handle>,
    pub base: String,
    pub client: Client,
    pub config: Config,
    dir: Option<tempfile::TempDir>,
    /// The server's database, in the `api_postgres` binary; dropped after the server.
    database: Option<std::sync::Arc<postgres::TestDatabase>>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        TestServer::start_with(|_| {}).await
    }

    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = Config::default();
        config.server.bind = "127.0.0.1:0".parse().unwrap();
        config.server.data_dir = dir.path().to_path_buf();
        config.dispatch.forward_timeout_ms = 2000;
        // Where no PostgreSQL answers (and none is required), `create` says so and the test runs on SQLite.
        let database = match postgres::backend_is_postgres() {
            true => postgres::TestDatabase::create().await.map(std::sync::Arc::new),
            false => None,
        };
        if let Some(db) = &database {
            config.store.database_url = db.url.clone();
        }
        adjust(&mut config);
        let mut server = TestServer::boot(config, Some(dir)).await;
        server.database = database;
        server
    }

    /// A server on a data directory the test owns (after the real binary used it, say).
    pub async fn boot_on(mut config: Config) -> TestServer {
        config.server.bind = "127.0.0.1:0".parse().unwrap();
        TestServer::boot(config, None).await
    }

    async fn boot(config: Config, dir: Option<tempfile::TempDir>) -> TestServer {
        let handle = serve::start(config.clone()).await.expect("server starts");
        let base = format!("http://{}", handle.addr());
        TestServer { handle: Some(handle), client: Client::new(&base), base, config, dir, database: None }
    }

    /// A server this process did not start (the real binary, run by the test), reached at `base`.
    pub fn external(base: &str, config: Config) -> TestServer {
        TestServer { handle: None, base: base.to_owned(), client: Client::new(base), config, dir: None, database: None }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.config.server.data_dir.clone()
    }

    pub fn ws_url(&self, path: &str) -> String {
        format!("{}{path}", self.base.replacen("http://", "ws://", 1))
    }

    /// Where the server listens.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.handle.as_ref().expect("running").addr()
    }

    /// Graceful stop, then a new server on the same data directory and the same port (what a browser
    /// tab open on it sees: the server gone for a moment, then back).
    pub async fn restart_on_same_port(self) -> TestServer {
        let addr = self.addr();
        self.restart_on(addr).await
    }

    /// Graceful stop, then a new server on the same data directory (and a new port).
    pub async fn restart(self) -> TestServer {
        self.restart_on("127.0.0.1:0".parse().unwrap()).await
    }

    /// Graceful stop, then a new server on the same data directory, listening on `bind`.
    pub async fn restart_on(mut self, bind: std::net::SocketAddr) -> TestServer {
        self.handle.take().expect("running").shutdown().await;
        let mut config = self.config.clone();
        config.server.bind = bind;
        let mut server = TestServer::boot(config, self.dir.take()).await;
        server.database = self.database.take();
        server
    }

    /// The server's own PostgreSQL database, in the `api_postgres` binary.
    pub fn database(&self) -> Option<&postgres::TestDatabase> {
        self.database.as_deref()
    }

    /// Stops the server and hands its store over (its data directory, and its database on PostgreSQL),
    /// kept until the returned value drops.
    pub async fn stop_keeping_store(
        mut self,
    ) -> (Option<tempfile::TempDir>, Option<std::sync::Arc<postgres::TestDatabase>>) {
        if let Some(h) = self.handle.take() {
            h.shutdown().await;
        }
        (self.dir.take(), self.database.take())
    }

    pub async fn stop(mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown().await;
        }
    }

    pub async fn mission(&self, id: &str) -> Value {
        let r = self.client.get(&format!("/api/v1/missions/{id}")).await;
        assert_eq!(r.status, 200, "GET mission {id}: {}", r.body);
        r.body
    }

    pub async fn executors(&self) -> Value {
        let r = self.client.get("/api/v1/executors").await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }

    /// Polls until `check` holds for the JSON at `path`, or fails the test after [`WAIT`].
    pub async fn eventually(&self, path: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let r = self.client.get(path).await;
            if check(&r.body) {
                return r.body;
            }
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}; last {path}: {}", r.body);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A dispatch payload with sensible defaults for the tests.
pub fn dispatch_body(mission_id: &str) -> Value {
    serde_json::json!({
        "mission_id": mission_id,
        "objective": "Add JWT validation to /auth/login",
        "completion": "npm test exits 0",
        "long_running": false,
        "executor_filter": {"executor_id": null, "capabilities": []},
        "metadata": {"issue": 1171}
    })
}

/// Dispatches a fresh mission pinned to `e` and waits until `e` has received it; returns its id.
pub async fn dispatch_to(server: &TestServer, e: &mut ScriptedExecutor) -> String {
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["executor_id"] = serde_json::json!(e.id);
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    e.next_dispatch().await;
    id
}

/// A fresh mission pinned to `e`, received and reported started on `ws`: the preamble of every test
/// about a running mission; returns its id.
pub async fn running_mission(server: &TestServer, e: &mut ScriptedExecutor, ws: &mut ExecSocket) -> String {
    let id = dispatch_to(server, e).await;
    ws.ack("mission.started", &id, serde_json::json!({"state": "running"})).await;
    id
}

/// A fresh mission id, ASCII and unique in its first 8 bytes (the agentic-sandbox executor keys sessions
/// by them).
/// The commit this checkout has out, as the build records it (12 characters); `None` outside git.
pub fn checked_out_commit() -> Option<String> {
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

pub fn mission_id() -> String {
    format!("m-{}", uuid::Uuid::new_v4().simple())
}

/// Runs one statement with one text bind (`$1`) on a stopped server's store, SQLite's or PostgreSQL's
/// as its configuration says: what an operator's `sqlite3` or `psql` would do to it.
pub async fn store_execute(config: &Config, sql: &str, bind: &str) {
    use sqlx::Connection;
    if config.store.database_url.is_empty() {
        let path = config.server.data_dir.join("aiwg-serve.db");
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await.unwrap();
        sqlx::query(sql).bind(bind).execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(&config.store.database_url).await.unwrap();
        sqlx::query(sql).bind(bind).execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    }
}

/// A count read straight from a running server's store (`SELECT COUNT(...) ...`), SQLite's or
/// PostgreSQL's as its configuration says: what is kept, as an operator's `sqlite3` or `psql` sees it.
pub async fn store_count(config: &Config, sql: &str) -> i64 {
    use sqlx::Connection;
    if config.store.database_url.is_empty() {
        let path = config.server.data_dir.join("aiwg-serve.db");
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await.unwrap();
        sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
    } else {
        let mut conn = sqlx::PgConnection::connect(&config.store.database_url).await.unwrap();
        sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
    }
}

/// The blobs a server keeps: files beside an SQLite database (`blobs/`), parts' names in PostgreSQL.
pub async fn kept_blobs(config: &Config) -> i64 {
    if config.store.database_url.is_empty() {
        let dir = config.server.data_dir.join("blobs");
        std::fs::read_dir(dir).map_or(0, |entries| entries.count() as i64)
    } else {
        store_count(config, "SELECT COUNT(DISTINCT blob) FROM artifact_blobs").await
    }
}

/// Makes every commit that writes an event or an executor row fail, from a second connection to the
/// server's own database (what a full disk or a broken file does to the writer), until healed.
pub enum InjectedFault {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

const FAULT_TRIGGERS: [(&str, &str, &str); 5] = [
    ("fault_events", "INSERT", "events"),
    ("fault_exec_ins", "INSERT", "executors"),
    ("fault_exec_upd", "UPDATE", "executors"),
    // An outage fails the audit trail's records too (an operator's refused control is one).
    ("fault_audit", "INSERT", "audit"),
    // And the webhooks' outbox.
    ("fault_deliveries", "INSERT", "webhook_deliveries"),
];

impl InjectedFault {
    /// A connection of the test's own to the server's store, beside the server's.
    async fn connect(server: &TestServer) -> InjectedFault {
        use sqlx::Connection;
        let url = &server.config.store.database_url;
        if url.is_empty() {
            let path = server.data_dir().join("aiwg-serve.db");
            let url = format!("sqlite://{}", path.display());
            InjectedFault::Sqlite(sqlx::SqliteConnection::connect(&url).await.expect("second connection"))
        } else {
            InjectedFault::Postgres(sqlx::PgConnection::connect(url).await.expect("second connection"))
        }
    }

    pub async fn inject(server: &TestServer) -> InjectedFault {
        InjectedFault::inject_into(server, &FAULT_TRIGGERS.map(|(_, _, table)| table)).await
    }

    /// The same for the writes to `tables` only.
    pub async fn inject_into(server: &TestServer, tables: &[&str]) -> InjectedFault {
        let triggers = FAULT_TRIGGERS.into_iter().filter(|(_, _, table)| tables.contains(table));
        let mut fault = InjectedFault::connect(server).await;
        match &mut fault {
            InjectedFault::Sqlite(conn) => {
                for (name, op, table) in triggers.clone() {
                    let sql = format!(
                        "CREATE TRIGGER {name} BEFORE {op} ON {table} BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
                    );
                    sqlx::query(&sql).execute(&mut *conn).await.expect("create trigger");
                }
            }
            InjectedFault::Postgres(conn) => {
                sqlx::raw_sql(
                    "CREATE OR REPLACE FUNCTION injected_fault() RETURNS trigger LANGUAGE plpgsql \
                     AS $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$",
                )
                .execute(&mut *conn)
                .await
                .expect("create fault function");
                for (name, op, table) in triggers.clone() {
                    let sql = format!(
                        "CREATE TRIGGER {name} BEFORE {op} ON {table} FOR EACH ROW EXECUTE FUNCTION injected_fault()"
                    );
                    sqlx::query(&sql).execute(&mut *conn).await.expect("create trigger");
                }
            }
        }
        fault
    }

    /// Makes the commit of every event whose data holds `marker` fail, and only those: one bad unit
    /// among good ones (a batch with it fails, and is retried unit by unit).
    pub async fn poison(server: &TestServer, marker: &str) -> InjectedFault {
        InjectedFault::poison_slowly(server, marker, false).await
    }

    /// As [`InjectedFault::poison`]; `slow`: the failing commit first takes a while (about 0.3 s), so
    /// that what the executor sends next is decided while it fails.
    pub async fn poison_slowly(server: &TestServer, marker: &str, slow: bool) -> InjectedFault {
        let mut fault = InjectedFault::connect(server).await;
        match &mut fault {
            InjectedFault::Sqlite(conn) => {
                // SQLite cannot sleep: a slow failure counts to a few million first.
                let slow = match slow {
                    true => {
                        "AND (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) \
                             SELECT count(*) FROM c) > 0"
                    }
                    false => "",
                };
                let sql = format!(
                    "CREATE TRIGGER fault_events BEFORE INSERT ON events WHEN NEW.data LIKE '%{marker}%' {slow} \
                     BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
                );
                sqlx::query(&sql).execute(&mut *conn).await.expect("create trigger");
            }
            InjectedFault::Postgres(conn) => {
                let pause = if slow { 0.3 } else { 0.0 };
                let sql = format!(
                    "CREATE OR REPLACE FUNCTION injected_fault() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                     IF NEW.data::text LIKE '%{marker}%' THEN PERFORM pg_sleep({pause}); RAISE EXCEPTION 'injected fault'; \
                     END IF; \
                     RETURN NEW; END $$"
                );
                sqlx::raw_sql(&sql).execute(&mut *conn).await.expect("create fault function");
                let trigger =
                    "CREATE TRIGGER fault_events BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION injected_fault()";
                sqlx::query(trigger).execute(&mut *conn).await.expect("create trigger");
            }
        }
        fault
    }

    pub async fn heal(self) {
        match self {
            InjectedFault::Sqlite(mut conn) => {
                for (name, _, _) in FAULT_TRIGGERS {
                    sqlx::query(&format!("DROP TRIGGER IF EXISTS {name}"))
                        .execute(&mut conn)
                        .await
                        .expect("drop trigger");
                }
            }
            InjectedFault::Postgres(mut conn) => {
                for (name, _, table) in FAULT_TRIGGERS {
                    let sql = format!("DROP TRIGGER IF EXISTS {name} ON {table}");
                    sqlx::query(&sql).execute(&mut conn).await.expect("drop trigger");
                }
            }
        }
    }
}
