//! `aiwg-serve backup FILE`: a consistent copy of a live store, and the restore of `docs/operations/backup-and-restore.md`.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use crate::cli::{command, finish, stderr, stdout};
use crate::support::{dispatch_body, mission_id, running_mission, ScriptedExecutor, TestServer};

async fn backup(data_dir: &std::path::Path, file: &std::path::Path) -> std::process::Output {
    let mut c = command(&["backup"]);
    c.arg(file).arg("--data-dir").arg(data_dir).env_remove("AIWG_SERVE_DATA_DIR").env_remove("AIWG_SERVE_CONFIG");
    finish(c).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_of_a_running_server_restores_with_its_missions() {
    let server = TestServer::start().await;
    if !server.config.store.database_url.is_empty() {
        return a_postgresql_store_is_backed_up_with_its_own_tools(&server).await;
    }
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let done = running_mission(&server, &mut e, &mut ws).await;
    ws.ack("mission.completed", &done, json!({"state": "done", "exit_code": 0, "summary": "shipped"})).await;
    // An artifact, uploaded within the mission's grace: its bytes are a file beside the database.
    let artifact_url =
        |server: &TestServer| format!("http://{}/api/v1/missions/{done}/artifacts/out.txt", server.addr());
    let put = reqwest::Client::new().put(artifact_url(&server)).bearer_auth(&e.token).body("the result").send();
    assert_eq!(put.await.unwrap().status(), 201);
    let before = server.mission(&done).await;
    // A deregistered executor keeps its row, but the summary counts executors as the listing does.
    let (gone, _gone_ws) = ScriptedExecutor::online(&server, &[]).await;
    let r = server.client.delete(&format!("/api/v1/executors/{}", gone.id), Some(&gone.token)).await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(server.executors().await["executors"].as_array().unwrap().len(), 1);
    let events = server.client.get("/api/v1/events?follow=false&since=0&limit=1000").await.body["events"]
        .as_array()
        .unwrap()
        .len();

    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("aiwg.backup.db");
    let out = backup(&server.data_dir(), &file).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bytes = std::fs::metadata(&file).unwrap().len();
    assert_eq!(
        stdout(&out),
        format!(
            "backed up {} to {} ({bytes} bytes: 1 missions, {events} events, 1 executors); 1 artifact files put \
             into it\n",
            server.data_dir().join("aiwg-serve.db").display(),
            file.display()
        )
    );
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600, "private, like the store");
    let leftovers: Vec<_> = std::fs::read_dir(out_dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, [std::ffi::OsString::from("aiwg.backup.db")], "no temporary file is left behind");

    // The running server is untouched (its lock was not taken) and goes on writing.
    let later = mission_id();
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&later)).await.status, 202);
    e.next_dispatch().await;
    assert_eq!(server.client.get("/readyz").await.status, 200);

    // An existing file is never overwritten.
    let out = backup(&server.data_dir(), &file).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "aiwg-serve: backup failed: {} exists; a backup never overwrites a file: choose another name, or \
             remove it first\n",
            file.display()
        )
    );
    assert_eq!(std::fs::metadata(&file).unwrap().len(), bytes);

    // The documented restore: the copy becomes aiwg-serve.db of a data directory (no -wal, no -shm).
    let restored_dir = tempfile::tempdir().unwrap();
    std::fs::copy(&file, restored_dir.path().join("aiwg-serve.db")).unwrap();
    let dir = restored_dir.path().to_path_buf();
    let restored = TestServer::start_with(move |c| c.server.data_dir = dir).await;
    let after = restored.mission(&done).await;
    assert_eq!(after, before, "the mission as it was when backed up");
    assert_eq!(after["state"], "done");
    assert_eq!(after["objective"], "Add JWT validation to /auth/login");
    assert_eq!(restored.executors().await["executors"][0]["executor_id"], e.id.as_str());
    restored.client.get(&format!("/api/v1/missions/{later}")).await.assert_error(404, "not_found");
    let got = reqwest::get(artifact_url(&restored)).await.unwrap();
    assert_eq!(got.bytes().await.unwrap().as_ref(), b"the result", "the backup holds the artifact's bytes");
    server.stop().await;
    restored.stop().await;
}

/// `backup` copies SQLite's file; a PostgreSQL store is backed up with `pg_dump` (the documented way), and the
/// command says so instead of copying some other file.
async fn a_postgresql_store_is_backed_up_with_its_own_tools(server: &TestServer) {
    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("aiwg.backup.db");
    let mut c = command(&["backup"]);
    c.arg(&file)
        .env_remove("AIWG_SERVE_CONFIG")
        .env("AIWG_SERVE_STORE_DATABASE_URL", &server.config.store.database_url);
    let out = finish(c).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("back it up with pg_dump"), "{}", stderr(&out));
    assert!(!file.exists(), "nothing written");
}

#[tokio::test]
async fn a_backup_of_no_store_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b.db");
    let out = backup(&dir.path().join("nothing-here"), &file).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with(&format!(
            "aiwg-serve: backup failed: no store at {}: ",
            dir.path().join("nothing-here/aiwg-serve.db").display()
        )),
        "{}",
        stderr(&out)
    );
    assert!(!file.exists() && !dir.path().join("nothing-here").exists(), "nothing created");
}
