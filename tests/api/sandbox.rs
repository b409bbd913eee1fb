//! The agentic-sandbox executor as observed on the wire, replayed against the real server: legacy
//! sandbox registration first, two sockets, old sockets left open, DELETE before every re-register,
//! resync with reconnected/resumed pairs, HITL answers read from `text`, suspension on SIGTERM, restart.

use aiwg_serve::contract::Schema;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{mission_id, ExecSocket, ScriptedExecutor, TestServer};

/// What the client registers, as observed (`grpc_endpoint` without a scheme, non-vocabulary capabilities).
fn sandbox_registration(instance_id: &str) -> Value {
    json!({"name": "peer-test", "instance_id": instance_id, "grpc_endpoint": "127.0.0.1:18120",
           "ws_endpoint": "ws://127.0.0.1:18121", "http_endpoint": "http://127.0.0.1:18122",
           "capabilities": ["vm", "pty"], "version": "2026.8.5"})
}

/// One boot of the client: both registrations (no Authorization header), both sockets, resync first.
struct Boot {
    sandbox: ExecSocket,
    executor: ExecSocket,
}

async fn boot(server: &TestServer, e: &mut ScriptedExecutor, owned: &[&str]) -> Boot {
    let r = server.client.post("/api/sandboxes/register", &sandbox_registration(&e.id)).await;
    assert!((200..300).contains(&r.status), "{}", r.body);
    let (sandbox_id, sandbox_token) = (r.body["sandbox_id"].as_str().unwrap(), r.body["token"].as_str().unwrap());
    assert_eq!(sandbox_id, e.id, "the instance id is the sandbox id");
    let mut payload = e.register_payload();
    payload["name"] = json!("agentic-sandbox-peer-test");
    payload["version"] = json!("2026.8.5");
    payload["capabilities"] = json!([
        "isolation:vm",
        "isolation:container",
        "runtime:claude-code",
        "platform:linux/x64",
        "resumable",
        "hitl"
    ]);
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    assert_eq!(r.status, 201, "{}", r.body);
    e.token = r.body["token"].as_str().unwrap().to_owned();
    let sandbox =
        ExecSocket::open(&server.ws_url(&format!("/ws/sandbox/{sandbox_id}?token={sandbox_token}")), &e.id).await;
    let mut executor = e.connect(server).await;
    let mut resync =
        executor.envelope("executor.resync", None, json!({"owned_mission_ids": owned, "protocol_version": "1.0.0"}));
    resync["ts"] = json!("2026-08-05T10:00:00.000Z");
    assert_eq!(executor.send_json(&resync).await["ack"], true);
    Boot { sandbox, executor }
}

#[tokio::test]
async fn the_agentic_sandbox_boot_reconnect_and_shutdown_sequence_works_end_to_end() {
    let server = TestServer::start().await;
    let mut e = ScriptedExecutor::listen(&[]).await;
    let mut first = boot(&server, &mut e, &[]).await;
    server.eventually(&format!("/api/v1/executors/{}", e.id), "connected", |b| b["connected"] == true).await;

    // Sandbox events are stored and shown to operators.
    let session_start = json!({"type": "session_start", "agent_id": "agent-1", "session_id": "s-1", "command": "tmux"});
    first.sandbox.send_only(Message::text(session_start.to_string())).await.unwrap();
    let listed = server
        .eventually("/api/v1/sandboxes", "sandbox event seen", |b| {
            b["sandboxes"][0]["last_event_type"] == "session_start"
        })
        .await;
    assert_eq!(listed["sandboxes"][0]["connected"], true);
    assert_eq!(listed["sandboxes"][0]["registration"]["grpc_endpoint"], "127.0.0.1:18120");
    let page = server.client.get("/api/v1/events?follow=false&since=0").await.body;
    let item = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["envelope"]["event"] == "sandbox.session_start")
        .unwrap()
        .clone();
    assert_eq!(item["envelope"]["data"], session_start);
    Schema::load().unwrap().validate("stream_item", &item).unwrap();

    // Dispatch, answered 202 by the executor's REST; mission.assigned arrives on the (only) socket.
    let id = mission_id();
    let body = json!({"mission_id": id, "objective": "fix the bug", "completion": "tests pass"});
    let r = server.client.post("/api/v1/sessions/sess-1/dispatch", &body).await;
    assert_eq!((r.status, r.body["executor_id"].as_str()), (202, Some(e.id.as_str())), "{}", r.body);
    let received = e.next_dispatch().await;
    assert_eq!(received.path, "/api/v1/sessions/sess-1/dispatch");
    assert_eq!(received.authorization.unwrap(), format!("Bearer {}", e.token));
    first
        .executor
        .ack("mission.assigned", &id, json!({"state": "assigned", "estimated_start": "2026-08-05T10:00:01.000Z"}))
        .await;

    // A sandbox-socket cycle: DELETE (no auth), both registrations again (new tokens), new sockets while
    // the old executor socket stays open; resync lists the mission, then reconnected/resumed pairs.
    let r = server.client.delete(&format!("/api/sandboxes/{}", e.id), None).await;
    assert!((200..300).contains(&r.status));
    assert!((200..300).contains(&server.client.delete("/api/sandboxes/not-a-sandbox", None).await.status));
    let old_token = e.token.clone();
    let mut second = boot(&server, &mut e, &[&id]).await;
    assert_ne!(e.token, old_token, "no Authorization header: a new token, the newest wins");
    second.executor.ack("mission.reconnected", &id, json!({"checkpoint_id": ""})).await;
    second.executor.ack("mission.resumed", &id, json!({"state": "running", "resumed_from": "suspended"})).await;
    assert_eq!(server.mission(&id).await["state"], "running");

    // Events keep coming on the old socket too; HITL answers reach the executor as `text`.
    first
        .executor
        .ack("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "Proceed?", "context": "pty"}))
        .await;
    let r = server
        .client
        .post(&format!("/api/v1/missions/{id}/hitl_response"), &json!({"hitl_id": "h-1", "response": "yes"}))
        .await;
    assert_eq!((r.status, r.body["delivered"].as_bool()), (202, Some(true)), "{}", r.body);
    for socket in [&mut first.executor, &mut second.executor] {
        let answer = socket.next_pushed().await;
        assert_eq!((answer["data"]["hitl_id"].as_str(), answer["data"]["text"].as_str()), (Some("h-1"), Some("yes")));
    }

    // Dispatch with the new token works (serve calls the executor with the newest token).
    let next = mission_id();
    let r = server
        .client
        .post("/api/v1/sessions/sess-1/dispatch", &json!({"mission_id": next, "objective": "o", "completion": "c"}))
        .await;
    assert_eq!(r.status, 202);
    assert_eq!(e.next_dispatch().await.authorization.unwrap(), format!("Bearer {}", e.token));

    // SIGTERM: suspended (one on the old socket, one on the new), sockets dropped without Close frames.
    first
        .executor
        .ack(
            "mission.suspended",
            &id,
            json!({"state": "suspended", "checkpoint_id": format!("auto-{id}"), "reason": "mgmt_server_shutdown"}),
        )
        .await;
    second
        .executor
        .ack(
            "mission.suspended",
            &next,
            json!({"state": "suspended", "checkpoint_id": format!("auto-{next}"), "reason": "mgmt_server_shutdown"}),
        )
        .await;
    drop(first);
    drop(second);
    server.eventually(&format!("/api/v1/executors/{}", e.id), "disconnected", |b| b["connected"] == false).await;
    assert_eq!(server.mission(&id).await["state"], "suspended");

    // Restart: same executor_id, no DELETE, resync lists both, reconnected/resumed pairs.
    let mut third = boot(&server, &mut e, &[&id, &next]).await;
    for m in [&id, &next] {
        let resumed = third.executor.next_pushed().await;
        assert_eq!(resumed["event"], "mission.resumed", "serve resumes what was suspended: {resumed}");
        assert_eq!(resumed["data"]["resumed_from"], "suspended");
        let _ = m;
    }
    for m in [&id, &next] {
        third.executor.ack("mission.reconnected", m, json!({"checkpoint_id": ""})).await;
        third.executor.ack("mission.resumed", m, json!({"state": "running", "resumed_from": "suspended"})).await;
    }
    for m in [&id, &next] {
        let mission = server.mission(m).await;
        assert_eq!(mission["state"], "running");
        assert_eq!(mission["checkpoint_id"], format!("auto-{m}"));
    }
    // The quarantine path of the real client: failed_preserved with extra keys is a failure.
    third
        .executor
        .ack("mission.failed", &next, json!({"state": "failed_preserved", "reason": "mission_quarantined", "error": "crash loop", "failure_count": 3, "threshold": 3}))
        .await;
    assert_eq!(server.mission(&next).await["state"], "failed");
    third.sandbox.close().await;
}

#[tokio::test]
async fn sandbox_registration_is_lenient_but_its_socket_needs_its_token() {
    let server = TestServer::start().await;
    let r = server.client.post("/api/sandboxes/register", &json!({"name": "no-instance-id"})).await;
    assert_eq!(r.status, 201);
    let sandbox_id = r.body["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(r.body["token"].as_str().unwrap().len(), 43);
    server.client.post("/api/sandboxes/register", &json!([1])).await.assert_error(400, "invalid_json");
    server.client.post_raw("/api/sandboxes/register", "not json").await.assert_error(400, "invalid_json");
    let mut ws = ExecSocket::open(&server.ws_url(&format!("/ws/sandbox/{sandbox_id}?token=wrong")), "x").await;
    assert_eq!(ws.closed().await.code, 4001);
    let mut ws = ExecSocket::open(&server.ws_url("/ws/sandbox/unknown?token=x"), "x").await;
    assert_eq!(ws.closed().await.code, 4001);
    assert_eq!(server.client.delete(&format!("/api/sandboxes/{sandbox_id}"), None).await.body["deregistered"], true);
    assert_eq!(server.client.get("/api/v1/sandboxes").await.body, json!({"sandboxes": []}));
}
