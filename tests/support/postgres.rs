//! PostgreSQL for the tests: a database of its own per test, created on the server `AIWG_TEST_POSTGRES`
//! names (default: the local one, as `.ci/install-postgres` sets it up) and dropped when the test ends.
//!
//! The test binary `api_postgres` is `tests/api` compiled a second time: there every [`TestServer`]
//! (crate::support::TestServer) stores in such a database instead of SQLite, so that every behaviour
//! test runs on both adapters. Where no server answers, PostgreSQL tests are skipped with a line saying
//! so, unless `AIWG_REQUIRE_POSTGRES` is set (as `.ci/run` sets it), where that fails them.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};

const DEFAULT_SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Whether this test binary stores in PostgreSQL (`api_postgres`) or SQLite (`api`).
pub fn backend_is_postgres() -> bool {
    env!("CARGO_CRATE_NAME") == "api_postgres"
}

/// A database that lives as long as this value.
pub struct TestDatabase {
    pub url: String,
    name: String,
    admin: PgConnectOptions,
}

impl TestDatabase {
    /// A new empty database, or `None` (with a line saying why) where no PostgreSQL answers and none is
    /// required.
    pub async fn create() -> Option<TestDatabase> {
        let server = std::env::var("AIWG_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_SERVER.into());
        let admin = PgConnectOptions::from_str(&server).expect("AIWG_TEST_POSTGRES is a postgres:// URL");
        let mut conn = match admin.connect().await {
            Ok(conn) => conn,
            Err(e) => {
                let why = format!("no PostgreSQL at {server} ({e}); run .ci/install-postgres");
                assert!(std::env::var_os("AIWG_REQUIRE_POSTGRES").is_none(), "AIWG_REQUIRE_POSTGRES is set but {why}");
                eprintln!("PostgreSQL not used: {why}");
                return None;
            }
        };
        let name = format!("aiwg_test_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await.expect("create test database");
        conn.close().await.ok();
        let options = admin.clone().database(&name);
        let url = format!("postgres://{}@{}:{}/{name}", options.get_username(), options.get_host(), options.get_port());
        Some(TestDatabase { url, name, admin })
    }

    /// A connection of the test's own to the database (what an operator's `psql` would be).
    pub async fn connect(&self) -> PgConnection {
        self.admin.clone().database(&self.name).connect().await.expect("connect to the test database")
    }
}

impl Drop for TestDatabase {
    /// Drops the database, closing whatever is still connected to it (a server the test did not stop).
    /// Drop cannot wait on the test's runtime, so this runs on a thread of its own.
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let mut conn = admin.connect().await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut conn).await?;
                conn.close().await
            })
        });
        if let Ok(Err(e)) = dropped.join() {
            eprintln!("could not drop test database {}: {e}", self.name);
        }
    }
}
