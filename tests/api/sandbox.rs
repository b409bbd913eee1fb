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

fn sandbox_frame(frame: Value) -> Message {
    Message::text(frame.to_string())
}

/// What the sandbox socket says about one agent session (`mission-` + the first 8 bytes of the id).
fn session_listing(session_id: &str, mission_id: &str) -> Message {
    sandbox_frame(json!({"type": "agent_sessions", "agent_id": "fake-agent-1", "sessions": [{
        "session_id": session_id, "session_name": format!("mission-{}", &mission_id[..8]), "session_type": "background",
        "command": "work", "created_at_secs": 0, "has_screen": false}]}))
}

fn session_start(session_id: &str) -> Message {
    sandbox_frame(
        json!({"type": "session_start", "agent_id": "fake-agent-1", "session_id": session_id, "command": "tmux"}),
    )
}

fn session_end(session_id: &str, exit_code: i64) -> Message {
    sandbox_frame(
        json!({"type": "session_end", "agent_id": "fake-agent-1", "session_id": session_id, "exit_code": exit_code}),
    )
}

async fn dispatch(server: &TestServer, e: &mut ScriptedExecutor) -> String {
    let id = mission_id();
    let body = json!({"mission_id": id, "objective": "work", "completion": "exits 0"});
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body).await.status, 202);
    e.next_dispatch().await;
    id
}

/// Issue 12: the sandbox's real traffic (agentic-sandbox-wire.jsonl), replayed through the real server,
/// ends where an operator expects: exit 0 done, exit 3 failed with its code, HITL answerable after a
/// restart, pause refused honestly, quarantine unable to overwrite a mission that finished.
#[tokio::test]
async fn the_sandbox_sessions_end_its_missions() {
    let server = TestServer::start().await;
    let mut e = ScriptedExecutor::listen(&[]).await;
    let mut first = boot(&server, &mut e, &[]).await;
    let assigned = |estimated: &str| json!({"state": "assigned", "estimated_start": estimated});
    let mission = |id: &String| format!("/api/v1/missions/{id}");

    // Exit 0, in the order most sessions show: assigned, start, listing, end.
    let ok = dispatch(&server, &mut e).await;
    first.executor.ack("mission.assigned", &ok, assigned("2026-11-30T09:26:05.220Z")).await;
    first.sandbox.send_only(session_start("s-ok")).await.unwrap();
    first.sandbox.send_only(session_listing("s-ok", &ok)).await.unwrap();
    server.eventually(&mission(&ok), "started from the session", |m| m["state"] == "running").await;
    first.sandbox.send_only(session_end("s-ok", 0)).await.unwrap();
    let m = server.eventually(&mission(&ok), "done from the session", |m| m["state"] == "done").await;
    assert_eq!(m["exit_code"], 0);
    assert_eq!(m["pty_session_ref"], "s-ok");

    // Exit 3, with the session starting before the executor's mission.assigned (13 of 68 in one run).
    let bad = dispatch(&server, &mut e).await;
    first.sandbox.send_only(session_start("s-bad")).await.unwrap();
    first.sandbox.send_only(session_listing("s-bad", &bad)).await.unwrap();
    server.eventually(&mission(&bad), "started", |m| m["state"] == "running").await;
    let late = first.executor.event("mission.assigned", &bad, assigned("2026-11-30T09:26:14.012Z")).await;
    assert_eq!(late["error"], "illegal_transition", "an assigned after the start is refused: {late}");
    first.sandbox.send_only(session_end("s-bad", 3)).await.unwrap();
    let m = server.eventually(&mission(&bad), "failed from the session", |m| m["state"] == "failed").await;
    assert_eq!(m["exit_code"], 3);
    assert!(m["error"].as_str().unwrap().starts_with("inferred by serve from sandbox session s-bad"), "{m}");

    // HITL: the executor socket asks; pause is refused honestly (the sandbox has no pause).
    let asking = dispatch(&server, &mut e).await;
    first.executor.ack("mission.assigned", &asking, assigned("2026-11-30T09:26:22.225Z")).await;
    first.sandbox.send_only(session_start("s-ask")).await.unwrap();
    first.sandbox.send_only(session_listing("s-ask", &asking)).await.unwrap();
    server.eventually(&mission(&asking), "started", |m| m["state"] == "running").await;
    first
        .executor
        .ack("mission.hitl_required", &asking, json!({"hitl_id": "h-9", "prompt": "Deploy?", "context": "c"}))
        .await;
    let r = server.client.post(&format!("{}/pause", mission(&asking)), &json!(null)).await;
    r.assert_error(409, "control_unsupported");

    // SIGTERM: suspended for every mission it holds, ended ones included; sockets dropped.
    for id in [&ok, &bad, &asking] {
        let data =
            json!({"state": "suspended", "checkpoint_id": format!("auto-{id}"), "reason": "mgmt_server_shutdown"});
        first.executor.event("mission.suspended", id, data).await;
    }
    drop(first);
    server.eventually(&format!("/api/v1/executors/{}", e.id), "disconnected", |b| b["connected"] == false).await;
    assert_eq!(server.mission(&asking).await["state"], "suspended");

    // Restart: resync lists all three, then reconnected + resumed for each.
    let mut second = boot(&server, &mut e, &[&ok, &bad, &asking]).await;
    for id in [&ok, &bad, &asking] {
        second.executor.event("mission.reconnected", id, json!({"checkpoint_id": ""})).await;
        second.executor.event("mission.resumed", id, json!({"state": "running", "resumed_from": "suspended"})).await;
    }
    assert_eq!(server.mission(&ok).await["state"], "done");
    assert_eq!(server.mission(&bad).await["state"], "failed");
    let m = server.mission(&asking).await;
    assert_eq!(m["state"], "hitl-required", "the agent still waits for its answer: {m}");
    let r = server
        .client
        .post(&format!("{}/hitl_response", mission(&asking)), &json!({"hitl_id": "h-9", "response": "yes"}))
        .await;
    assert_eq!((r.status, &r.body["state"]), (202, &json!("running")), "{}", r.body);

    // The third restart quarantines everything, the mission that exited 0 included: it stays done.
    let quarantine = json!({"state": "failed_preserved", "reason": "mission_quarantined", "error": "repeated reconnect/resume",
                            "failure_count": 3, "threshold": 3});
    let refused = second.executor.event("mission.failed", &ok, quarantine).await;
    assert_eq!(refused["error"], "illegal_transition", "{refused}");
    let m = server.mission(&ok).await;
    assert_eq!((&m["state"], &m["exit_code"]), (&json!("done"), &json!(0)));
    // Had the executor reported the end itself, after serve inferred it: a duplicate, not an error.
    let own = second
        .executor
        .event("mission.failed", &bad, json!({"state": "failed", "reason": "exit", "exit_code": 3}))
        .await;
    assert_eq!(own["duplicate"], true, "{own}");
    // And the session end of the HITL mission ends it.
    second.sandbox.send_only(session_end("s-ask", 0)).await.unwrap();
    server.eventually(&mission(&asking), "done", |m| m["state"] == "done").await;
}

/// Issue 12, finding 2: a restart that re-announces 51 ended missions used to close the executor
/// socket with 1008, for good (the sandbox never reopens it alone).
#[tokio::test]
async fn restating_many_ended_missions_is_not_a_flood() {
    let server = TestServer::start().await;
    let mut e = ScriptedExecutor::listen(&[]).await;
    let first = boot(&server, &mut e, &[]).await;
    let mut ended = Vec::new();
    for _ in 0..51 {
        let id = dispatch(&server, &mut e).await;
        assert_eq!(server.client.post(&format!("/api/v1/missions/{id}/abort"), &json!(null)).await.status, 202);
        ended.push(id);
    }
    drop(first);
    let owned: Vec<&str> = ended.iter().map(String::as_str).collect();
    let mut second = boot(&server, &mut e, &owned).await;
    for id in &ended {
        second
            .executor
            .send_json(&second.executor.envelope("mission.reconnected", Some(id), json!({"checkpoint_id": ""})))
            .await;
        second
            .executor
            .send_json(&second.executor.envelope("mission.resumed", Some(id), json!({"state": "running"})))
            .await;
    }
    // Still open and still heard: a fresh mission's events are acknowledged, and it is still connected.
    let id = dispatch(&server, &mut e).await;
    assert_eq!(second.executor.event("mission.assigned", &id, json!({"state": "assigned"})).await["ack"], true);
    assert_eq!(server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body["connected"], true);
}

/// Issue 12, findings 5 and 7: ids the sandbox cannot handle are refused at dispatch, ids that would
/// share a session are warned about, and its `executor_filter.agent_id` extension is accepted.
#[tokio::test]
async fn mission_ids_are_checked_and_agent_pins_forwarded() {
    let server = TestServer::start().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let dispatch = |id: &str| json!({"mission_id": id, "objective": "o", "completion": "c"});
    let long = "m".repeat(129);
    for bad in ["mission 1", "m-caf\u{e9}-000001", "-m-1", "m/1", long.as_str()] {
        let r = server.client.post("/api/v1/sessions/s/dispatch", &dispatch(bad)).await;
        r.assert_error(400, "schema_violation");
        assert!(r.body["details"].to_string().contains("/mission_id"), "{bad}: {}", r.body);
    }
    assert!(e.no_dispatch_pending(), "nothing refused was forwarded");

    let first = server.client.post("/api/v1/sessions/s/dispatch", &dispatch("mission-0001")).await;
    assert_eq!(first.status, 202, "{}", first.body);
    assert!(first.body.get("warnings").is_none(), "{}", first.body);
    e.next_dispatch().await;
    let second = server.client.post("/api/v1/sessions/s/dispatch", &dispatch("mission-0002")).await;
    assert_eq!(second.status, 202, "{}", second.body);
    let warning = second.body["warnings"][0].as_str().unwrap_or_else(|| panic!("a warning: {}", second.body));
    assert!(warning.contains("mission-0001") && warning.contains("first 8 bytes"), "{warning}");
    e.next_dispatch().await;

    let mut pinned = dispatch(&mission_id());
    pinned["executor_filter"] = json!({"executor_id": e.id, "agent_id": "fake-agent-1"});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &pinned).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(e.next_dispatch().await.body["executor_filter"]["agent_id"], "fake-agent-1", "forwarded untouched");
}

/// Issue 12, finding 6: every sandbox socket cycle left one more executor socket open, pinged forever.
/// Past `hub.max_sockets_per_executor` the oldest is closed with 4000, and what the executor still sent
/// on it is committed.
#[tokio::test]
async fn old_sockets_are_closed_past_the_limit_without_losing_their_frames() {
    let server = TestServer::start_with(|c| c.hub.max_sockets_per_executor = 2).await;
    let (mut e, mut oldest) = ScriptedExecutor::online(&server, &[]).await;
    let id = dispatch(&server, &mut e).await;
    let _second = e.connect(&server).await;
    let mut newest = e.connect(&server).await;
    // The executor had this in flight on its oldest socket when serve closed it.
    let late = oldest.envelope("mission.progress", Some(&id), json!({"summary": "sent on the old socket"}));
    oldest.send_only(Message::text(late.to_string())).await.unwrap();
    let closed = oldest.closed().await;
    assert_eq!((closed.code, closed.reason.as_str()), (4000, "superseded by a newer socket"));
    server
        .eventually(&format!("/api/v1/missions/{id}"), "the late frame committed", |m| {
            m["recent_events"]
                .as_array()
                .is_some_and(|events| events.iter().any(|ev| ev["data"]["summary"] == "sent on the old socket"))
        })
        .await;
    // The newer sockets carry on.
    assert!(newest.ack("mission.started", &id, json!({"state": "running"})).await > 0);
    let status = server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body;
    assert_eq!(status["connected"], true);
}
