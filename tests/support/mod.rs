//! Test harness shared by the integration tests: the real server on an ephemeral port with a temporary
//! SQLite store, a small HTTP client, and scripted executors that are real HTTP + WebSocket peers.
#![allow(dead_code)]

pub mod conformant;
pub mod executor;
pub mod http;
pub mod lax_server;
pub mod runtime;
pub mod webdriver;

use std::path::PathBuf;
use std::time::Duration;

use aiwg_serve::config::Config;
use aiwg_serve::serve::{self, Handle};
use serde_json::Value;

pub use executor::{ExecSocket, ScriptedExecutor};
pub use http::{Client, Resp};
pub use runtime::{Behavior, ScriptedRuntime};

/// Every wait in the tests is bounded by this; nothing sleeps to synchronise.
pub const WAIT: Duration = Duration::from_secs(10);

pub struct TestServer {
    handle: Option<Handle>,
    pub base: String,
    pub client: Client,
    pub config: Config,
    dir: Option<tempfile::TempDir>,
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
        adjust(&mut config);
        TestServer::boot(config, Some(dir)).await
    }

    /// A server on a data directory the test owns (after the real binary used it, say).
    pub async fn boot_on(mut config: Config) -> TestServer {
        config.server.bind = "127.0.0.1:0".parse().unwrap();
        TestServer::boot(config, None).await
    }

    async fn boot(config: Config, dir: Option<tempfile::TempDir>) -> TestServer {
        let handle = serve::start(config.clone()).await.expect("server starts");
        let base = format!("http://{}", handle.addr());
        TestServer { handle: Some(handle), client: Client::new(&base), base, config, dir }
    }

    /// A server this process did not start (the real binary, run by the test), reached at `base`.
    pub fn external(base: &str, config: Config) -> TestServer {
        TestServer { handle: None, base: base.to_owned(), client: Client::new(base), config, dir: None }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.config.server.data_dir.clone()
    }

    pub fn ws_url(&self, path: &str) -> String {
        format!("{}{path}", self.base.replacen("http://", "ws://", 1))
    }

    /// Graceful stop, then a new server on the same data directory and the same port (what a browser
    /// tab open on it sees: the server gone for a moment, then back).
    pub async fn restart_on_same_port(mut self) -> TestServer {
        let addr = self.handle.as_ref().expect("running").addr();
        self.handle.take().expect("running").shutdown().await;
        let mut config = self.config.clone();
        config.server.bind = addr;
        TestServer::boot(config, self.dir.take()).await
    }

    /// Graceful stop, then a new server on the same data directory (and a new port).
    pub async fn restart(mut self) -> TestServer {
        self.handle.take().expect("running").shutdown().await;
        let mut config = self.config.clone();
        config.server.bind = "127.0.0.1:0".parse().unwrap();
        TestServer::boot(config, self.dir.take()).await
    }

    /// Stops the server and hands its data directory over (kept until the returned value drops).
    pub async fn stop_keeping_dir(mut self) -> Option<tempfile::TempDir> {
        if let Some(h) = self.handle.take() {
            h.shutdown().await;
        }
        self.dir.take()
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

/// A fresh mission id, ASCII and unique in its first 8 bytes (the agentic-sandbox executor keys sessions
/// by them).
pub fn mission_id() -> String {
    format!("m-{}", uuid::Uuid::new_v4().simple())
}

/// Makes every commit that writes an event or an executor row fail, from a second connection to the
/// server's own database (what a full disk or a broken file does to the writer), until healed.
pub struct InjectedFault {
    conn: sqlx::SqliteConnection,
}

const FAULT_TRIGGERS: [(&str, &str); 3] = [
    ("fault_events", "INSERT ON events"),
    ("fault_exec_ins", "INSERT ON executors"),
    ("fault_exec_upd", "UPDATE ON executors"),
];

impl InjectedFault {
    pub async fn inject(server: &TestServer) -> InjectedFault {
        use sqlx::Connection;
        let path = server.data_dir().join("aiwg-serve.db");
        let mut conn =
            sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await.expect("second connection");
        for (name, on) in FAULT_TRIGGERS {
            let sql = format!("CREATE TRIGGER {name} BEFORE {on} BEGIN SELECT RAISE(ABORT, 'injected fault'); END");
            sqlx::query(&sql).execute(&mut conn).await.expect("create trigger");
        }
        InjectedFault { conn }
    }

    pub async fn heal(mut self) {
        for (name, _) in FAULT_TRIGGERS {
            sqlx::query(&format!("DROP TRIGGER {name}")).execute(&mut self.conn).await.expect("drop trigger");
        }
    }
}
