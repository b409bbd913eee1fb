//! Running serve as an operator does: the real binary, its data directory, its start-up refusals.

use std::process::Command;

use crate::support::TestServer;

fn serve_binary(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aiwg-serve"));
    command.arg("serve").args(args);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("AIWG_SERVE_")) {
        command.env_remove(k);
    }
    command
}

/// Issue 10 finding 14, issue 11 finding 7: a second serve on the same data directory used to start and
/// then answer 503s (or fail its writes); now it refuses to start and names the one that holds it.
#[tokio::test]
async fn a_second_serve_on_the_same_data_directory_refuses_to_start() {
    let server = TestServer::start().await;
    let dir = server.data_dir();
    let mut command = serve_binary(&["--bind", "127.0.0.1:0", "--data-dir", dir.to_str().unwrap()]);
    // On PostgreSQL the database is what is claimed (the data directory is not used).
    let url = &server.config.store.database_url;
    if !url.is_empty() {
        command.args(["--database-url", url]);
    }
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the second serve must not run: {stderr}");
    assert!(stderr.contains("is in use by another aiwg-serve"), "{stderr}");
    assert!(stderr.contains(&format!("(pid {})", std::process::id())), "names the holder: {stderr}");

    // In-process too, and the first one is untouched.
    let mut config = server.config.clone();
    config.server.bind = "127.0.0.1:0".parse().unwrap();
    let refused = aiwg_server::serve::start(config).await.err().expect("refused");
    assert!(refused.to_string().contains("in use"), "{refused}");
    assert_eq!(server.client.get("/healthz").await.status, 200);

    // Released on a graceful stop: the next serve starts on the same directory.
    let server = server.restart().await;
    assert_eq!(server.client.get("/healthz").await.status, 200);
}

/// Issue 11, finding 17: a corrupt row at start-up said only `cannot load state: storage failure`.
#[tokio::test]
async fn a_corrupt_row_at_start_up_is_named() {
    let server = TestServer::start().await;
    let e = crate::support::ScriptedExecutor::register(&server, &[]).await;
    let config = server.config.clone();
    let _kept = server.restart().await.stop_keeping_store().await;
    crate::support::store_execute(
        &config,
        "UPDATE executors SET capabilities = 'not json' WHERE executor_id = $1",
        &e.id,
    )
    .await;
    let mut config = config;
    config.server.bind = "127.0.0.1:0".parse().unwrap();
    let refused = aiwg_server::serve::start(config).await.err().expect("refuses to start").to_string();
    assert!(
        refused.contains("table executors") && refused.contains(&e.id) && refused.contains("capabilities"),
        "{refused}"
    );
}
