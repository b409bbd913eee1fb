//! Executors that only listen (`serve::dial`): serve opens their WebSocket, with their token, and the
//! socket works as one they opened: frames acknowledged, pushes delivered, redialled when it drops.

use serde_json::{json, Value};

use crate::support::executor::{DialListener, ScriptedExecutor};
use crate::support::{dispatch_body, mission_id, TestServer};

/// A scripted executor whose WebSocket endpoint only listens, registered with `capabilities`.
async fn listening(server: &TestServer, capabilities: &[&str]) -> (ScriptedExecutor, DialListener) {
    let mut e = ScriptedExecutor::listen(capabilities).await;
    let dials = DialListener::start(&e.id).await;
    let mut payload = e.register_payload();
    payload["transport_endpoints"]["ws"] = json!(dials.url);
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    assert_eq!(r.status, 201, "{}", r.body);
    e.token = r.body["token"].as_str().unwrap().to_owned();
    (e, dials)
}

async fn connected(server: &TestServer, e: &ScriptedExecutor, yes: bool) -> Value {
    let path = format!("/api/v1/executors/{}", e.id);
    server.eventually(&path, "the executor's connection", |b| b["connected"] == yes).await
}

#[tokio::test]
async fn an_executor_that_only_listens_is_dialled_runs_a_mission_and_is_dialled_again() {
    let server = TestServer::start_with(|c| c.hub.dial_after_s = 0).await;
    let (mut e, mut dials) = listening(&server, &["x-dial-in"]).await;

    // Dialled at once, on the path serve itself serves, with the executor's token both ways.
    let dialled = dials.next().await;
    assert_eq!(dialled.path_and_query, format!("/ws/executors/{}?token={}", e.id, e.token));
    assert_eq!(dialled.authorization, Some(format!("Bearer {}", e.token)));
    let mut ws = dialled.socket;
    connected(&server, &e, true).await;

    // A mission runs over it: events acknowledged with their sequence, serve's pushes delivered.
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["executor_id"] = json!(e.id);
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body).await.status, 202);
    assert_eq!(e.next_dispatch().await.body["mission_id"], json!(id));
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h1", "prompt": "Ship it?"})).await;
    let r = server
        .client
        .post(&format!("/api/v1/missions/{id}/hitl_response"), &json!({"hitl_id": "h1", "response": "yes"}))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let answer = ws.next_pushed().await;
    assert_eq!(
        (answer["event"].as_str(), answer["data"]["response"].as_str()),
        (Some("mission.hitl_responded"), Some("yes"))
    );
    let bad = ws.send_json(&json!({"event": "mission.teleported"})).await;
    assert_eq!(bad["error"], "unknown_event_type", "refusals travel back as on any socket: {bad}");
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    assert_eq!(server.mission(&id).await["state"], "done");

    // The socket drops: serve dials again, and the new socket carries frames.
    ws.close().await;
    let mut again = dials.next().await.socket;
    connected(&server, &e, true).await;
    let resync = again.envelope("executor.resync", None, json!({"owned_mission_ids": [], "protocol_version": "1.0.0"}));
    assert_eq!(again.send_json(&resync).await["ack"], true);
}

/// Without `x-dial-in`, serve dials an executor that has had no socket for `hub.dial_after_s`; one with
/// a socket of its own is never dialled, and a deregistered one is let go.
#[tokio::test]
async fn an_executor_without_a_socket_is_dialled_after_the_wait_and_one_with_a_socket_never() {
    let server = TestServer::start_with(|c| c.hub.dial_after_s = 1).await;
    let (own, mut own_dials) = listening(&server, &[]).await;
    let _own_ws = own.connect(&server).await;
    let (quiet, mut quiet_dials) = listening(&server, &[]).await;
    let before = tokio::time::Instant::now();
    let dialled = quiet_dials.next().await;
    assert!(before.elapsed() >= std::time::Duration::from_millis(500), "dialled after its wait, not at once");
    assert_eq!(dialled.authorization, Some(format!("Bearer {}", quiet.token)));
    connected(&server, &quiet, true).await;
    assert!(own_dials.none_pending(), "an executor with its own socket is not dialled");

    // Deregistered, it is not dialled again after its socket closes.
    let r = server.client.delete(&format!("/api/v1/executors/{}", quiet.id), Some(&quiet.token)).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let mut socket = dialled.socket;
    assert!(socket.closed().await.code > 0);
    assert!(quiet_dials.none_pending());
}
