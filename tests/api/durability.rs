//! Executors, missions and events survive a restart, including `kill -9` of the real binary.

use std::process::Command;

use serde_json::json;

use crate::support::process::Process;
use crate::support::{dispatch_body, mission_id, running_mission, Client, ExecSocket, ScriptedExecutor, TestServer};

/// Waits until serve shows the executor connected.
async fn connected(client: &Client, id: &str) {
    let deadline = tokio::time::Instant::now() + crate::support::WAIT;
    while client.get(&format!("/api/v1/executors/{id}")).await.body["connected"] != true {
        assert!(tokio::time::Instant::now() < deadline, "executor {id} never connected");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn acknowledged_events_survive_kill_9_and_the_executor_keeps_its_identity() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Process::start(dir.path());
    let client = serve.client();
    let mut e = ScriptedExecutor::listen(&["isolation:container"]).await;
    let r = client.post("/api/v1/executors/register", &e.register_payload()).await;
    assert_eq!(r.status, 201);
    e.token = r.body["token"].as_str().unwrap().to_owned();
    let mut ws = ExecSocket::open(&serve.ws(&format!("/ws/executors/{}?token={}", e.id, e.token)), &e.id).await;

    let done = mission_id();
    let running = mission_id();
    for id in [&done, &running] {
        let mut body = dispatch_body(id);
        body["executor_filter"]["executor_id"] = json!(e.id);
        connected(&client, &e.id).await;
        let r = client.post("/api/v1/sessions/s/dispatch", &body).await;
        assert_eq!(r.status, 202, "{}", r.body);
        e.next_dispatch().await;
    }
    ws.ack("mission.assigned", &done, json!({"state": "assigned"})).await;
    ws.ack("mission.started", &done, json!({"state": "running"})).await;
    ws.ack("mission.progress", &done, json!({"summary": "halfway"})).await;
    ws.ack("mission.completed", &done, json!({"state": "done", "exit_code": 0})).await;
    ws.ack("mission.started", &running, json!({"state": "running"})).await;
    ws.ack("mission.progress", &running, json!({"pct_complete": 40})).await;

    serve.kill9();
    let serve = Process::start(dir.path());
    let client = serve.client();

    let m = client.get(&format!("/api/v1/missions/{done}")).await.body;
    assert_eq!(m["state"], "done", "{m}");
    assert_eq!(m["exit_code"], 0);
    let events: Vec<&str> =
        m["recent_events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["mission.assigned", "mission.started", "mission.progress", "mission.completed"]);
    let m = client.get(&format!("/api/v1/missions/{running}")).await.body;
    assert_eq!(m["state"], "running");
    assert_eq!(m["recent_events"][1]["data"]["pct_complete"], 40);

    let shown = client.get(&format!("/api/v1/executors/{}", e.id)).await.body;
    assert_eq!(shown["connected"], false);
    assert_eq!(shown["active_mission_count"], 1, "the running mission is still counted: {shown}");
    // The stored hash still authenticates the executor's token, and serve learns it back from the socket.
    let mut ws = ExecSocket::open(&serve.ws(&format!("/ws/executors/{}?token={}", e.id, e.token)), &e.id).await;
    connected(&client, &e.id).await;
    ws.ack("mission.completed", &running, json!({"state": "done"})).await;
    let next = mission_id();
    let r = client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&next)).await;
    assert_eq!(r.status, 202, "serve can call the executor again: {}", r.body);
    assert_eq!(e.next_dispatch().await.authorization.unwrap(), format!("Bearer {}", e.token));
    let auth = format!("Bearer {}", e.token);
    let again =
        client.post_with("/api/v1/executors/register", &e.register_payload(), &[("authorization", &auth)]).await;
    assert_eq!(again.body["token"], e.token.as_str(), "re-register with the stored token keeps it");
}

#[tokio::test]
async fn a_graceful_restart_keeps_everything() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    let before = server.mission(&id).await;
    let server = server.restart().await;
    assert_eq!(ws.closed().await.code, 1001, "sockets are closed with 'going away' on shutdown");
    assert_eq!(server.mission(&id).await, before);
    let listed = server.executors().await;
    assert_eq!(listed["executors"][0]["executor_id"], e.id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_binary_gracefully_and_the_data_stays() {
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Process::start(dir.path());
    let e = ScriptedExecutor::listen(&[]).await;
    assert_eq!(serve.client().post("/api/v1/executors/register", &e.register_payload()).await.status, 201);
    serve.signal("TERM");
    let status = tokio::task::block_in_place(|| serve.child.wait()).unwrap();
    assert!(status.success(), "exit status {status}");
    let serve = Process::start(dir.path());
    let listed = serve.client().get("/api/v1/executors").await.body;
    assert_eq!(listed["executors"][0]["executor_id"], e.id.as_str());
}

#[test]
fn a_non_loopback_bind_without_operator_tokens_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_aiwg-serve"))
        .args(["serve", "--bind", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .env_remove("AIWG_SERVE_OPERATOR_TOKENS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("refusing to bind 0.0.0.0:0") && stderr.contains("operator_tokens"), "{stderr}");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "nothing was created");
}

#[tokio::test]
async fn a_suspended_mission_survives_kill_9_and_is_resumed_by_the_restarted_serve() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Process::start(dir.path());
    let client = serve.client();
    let mut e = ScriptedExecutor::listen(&["resumable"]).await;
    e.token =
        client.post("/api/v1/executors/register", &e.register_payload()).await.body["token"].as_str().unwrap().into();
    let mut ws = ExecSocket::open(&serve.ws(&format!("/ws/executors/{}?token={}", e.id, e.token)), &e.id).await;
    connected(&client, &e.id).await;
    let id = mission_id();
    assert_eq!(client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&id)).await.status, 202);
    e.next_dispatch().await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    ws.ack("mission.suspended", &id, json!({"state": "suspended", "checkpoint_id": "ck-9"})).await;

    serve.kill9();
    let serve = Process::start(dir.path());
    let client = serve.client();
    let auth = format!("Bearer {}", e.token);
    let r = client.post_with("/api/v1/executors/register", &e.register_payload(), &[("authorization", &auth)]).await;
    assert_eq!(r.body["token"], e.token.as_str());
    let mut ws = ExecSocket::open(&serve.ws(&format!("/ws/executors/{}?token={}", e.id, e.token)), &e.id).await;
    let resync = ws.envelope("executor.resync", None, json!({"owned_mission_ids": [id]}));
    assert_eq!(ws.send_json(&resync).await["ack"], true);
    let resumed = ws.next_pushed().await;
    assert_eq!(
        (resumed["event"].as_str(), resumed["data"]["resumed_from"].as_str()),
        (Some("mission.resumed"), Some("suspended"))
    );
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let m = client.get(&format!("/api/v1/missions/{id}")).await.body;
    assert_eq!((m["state"].as_str(), m["checkpoint_id"].as_str()), (Some("done"), Some("ck-9")));
}
