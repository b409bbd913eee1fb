//! Health that means something: `/healthz` is liveness, `/readyz` readiness (the store writer, the
//! migrations, not shutting down); and the process and build metrics of `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use aiwg_contract::Schema;
use aiwg_server::app::App;
use aiwg_server::config::Config;
use aiwg_server::metrics::Metrics;
use aiwg_server::tasks::Sockets;
use serde_json::json;
use sqlx::Connection;

use crate::support::{Client, ScriptedExecutor, TestServer};

#[tokio::test]
async fn a_running_server_is_ready_and_alive() {
    let server = TestServer::start().await;
    let r = server.client.get("/readyz").await;
    assert_eq!(
        (r.status, r.body),
        (
            200,
            json!({"status": "ready", "checks": {"store_writer": "ok", "disk": "ok", "migrations": "ok", "serving": "ok"}})
        )
    );
    assert_eq!(r.headers.get("cache-control").unwrap(), "no-store");
    assert_eq!(server.client.get("/healthz").await.body, json!({"status": "ok"}));
}

/// The server's domain and router on a listener of the test's own, so that the steps of serve's shutdown
/// (the stop signal, then the store closing) can be taken one at a time while `/readyz` is asked over
/// real HTTP after each.
#[tokio::test]
async fn readiness_fails_while_draining_without_migrations_and_once_the_writer_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.server.data_dir = dir.path().to_path_buf();
    let metrics = Arc::new(Metrics::default());
    let (store, writer) =
        aiwg_server::store::sqlite::open(dir.path(), config.store.synchronous, 64, metrics.clone()).await.unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let app = Arc::new(
        App::new(config, Schema::load().unwrap(), store.clone(), metrics, Sockets::start().unwrap(), stopped)
            .await
            .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = aiwg_server::http::router(app);
    tokio::spawn(async move {
        axum::serve(listener, router.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap()
    });
    let client = Client::new(&base);
    assert_eq!(client.get("/readyz").await.status, 200);

    // A store whose schema lacks a migration this binary expects.
    let db = dir.path().join(aiwg_server::datadir::DATABASE);
    let mut second = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await.unwrap();
    sqlx::query("DELETE FROM schema_migrations WHERE version = 3").execute(&mut second).await.unwrap();
    let r = client.get("/readyz").await;
    assert_eq!(r.assert_error(503, "not_ready"), "migrations [3] are not applied");
    assert_eq!(r.header("retry-after"), Some("5"));
    sqlx::query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (3, 'sandboxes', 'now')")
        .execute(&mut second)
        .await
        .unwrap();
    second.close().await.unwrap();
    assert_eq!(client.get("/readyz").await.status, 200);

    // serve's graceful stop, first step: the stop signal. In-flight requests still finish; readiness fails.
    stop.send(true).unwrap();
    let message = client.get("/readyz").await.assert_error(503, "not_ready");
    assert_eq!(message, "the server is shutting down: it finishes the requests in flight and takes no new work");
    // Second step: the writer stops and the read pool closes.
    store.close().await;
    writer.finished().await;
    let message = client.get("/readyz").await.assert_error(503, "not_ready");
    assert!(message.starts_with("the store writer does not commit: the store writer has stopped; "), "{message}");
    assert!(
        message.ends_with("; the server is shutting down: it finishes the requests in flight and takes no new work")
    );
    // Liveness is not readiness: the process still answers.
    assert_eq!(client.get("/healthz").await.status, 200);
}

/// The value of an unlabelled sample in a Prometheus text page.
fn sample(text: &str, name: &str) -> f64 {
    let line = text.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or_else(|| panic!("no {name}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap_or_else(|_| panic!("{line}"))
}

#[tokio::test]
async fn metrics_carry_process_and_build_information() {
    let server = TestServer::start().await;
    let _online = ScriptedExecutor::online(&server, &[]).await;
    let text = server.client.get("/metrics").await.body;
    let text = text.as_str().expect("text");
    for (name, kind) in [
        ("process_cpu_seconds_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
        ("aiwg_build_info", "gauge"),
    ] {
        assert!(text.contains(&format!("\n# TYPE {name} {kind}\n")), "no {name} {kind} in:\n{text}");
    }
    // This test runs in the server's own process: what /proc/self says about it is what the page says.
    let rss = sample(text, "process_resident_memory_bytes");
    assert!(rss > 1e6 && rss < 4e9, "{rss}");
    let fds = sample(text, "process_open_fds");
    let open_now = std::fs::read_dir("/proc/self/fd").unwrap().count() as f64;
    // Listener, store files, the executor's sockets on both ends: more than a handful, and no more than
    // this process has open now give or take the connections of the scrape itself.
    assert!(fds >= 8.0 && fds <= open_now + 8.0, "{fds} of {open_now}");
    assert!(fds < sample(text, "process_max_fds"));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let started = sample(text, "process_start_time_seconds");
    assert!(started <= now + 1.0 && started > now - 24.0 * 3600.0, "started {started}, now {now}");
    assert!(sample(text, "process_cpu_seconds_total") >= 0.0);
    let commit = aiwg_server::metrics::GIT_COMMIT.map(|c| format!(",commit=\"{c}\"")).unwrap_or_default();
    let build = format!("\naiwg_build_info{{version=\"{}\"{commit}}} 1\n", env!("CARGO_PKG_VERSION"));
    assert!(text.contains(&build), "{build:?} in:\n{text}");
    // From a git checkout the commit is known, and it is the one checked out.
    let head = crate::support::checked_out_commit();
    if let Some(head) = head {
        assert_eq!(aiwg_server::metrics::GIT_COMMIT, Some(head.as_str()));
    }
}
