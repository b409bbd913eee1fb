//! The agentic-sandbox executor as observed on the wire, replayed against the real server by a peer
//! that behaves as the real one does (`support::agentic`): legacy sandbox registration first, two
//! sockets, old sockets left open, DELETE before every re-register, resync with reconnected/resumed
//! pairs, HITL answers read from `text`, suspension on SIGTERM, restart; no acknowledgement read, a
//! 64-frame inbound channel whose overflow ends its HITL handling, and a forwarder per socket that drops
//! an event when serve closes its socket.

use aiwg_contract::Schema;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::support::agentic::AgenticPeer;
use crate::support::{mission_id, ExecSocket, ScriptedExecutor, TestServer};

pub(crate) fn mission_path(id: &str) -> String {
    format!("/api/v1/missions/{id}")
}

/// Dispatches a fresh mission (the agentic peer is the only executor) and waits until its REST
/// listener has it; returns its id.
pub(crate) async fn dispatch_to_peer(server: &TestServer, peer: &mut AgenticPeer, id: &str) {
    let body = json!({"mission_id": id, "objective": format!("work on {id}"), "completion": "exits 0"});
    let r = server.client.post("/api/v1/sessions/sess-1/dispatch", &body).await;
    assert_eq!((r.status, r.body["executor_id"].as_str()), (202, Some(peer.id())), "{}", r.body);
    peer.rest.next_dispatch().await;
}

/// The peer's own `mission.assigned`, as it sends it right after the 202, waited for until stored.
pub(crate) async fn assigned(server: &TestServer, peer: &mut AgenticPeer, id: &str) {
    peer.emit("mission.assigned", id, json!({"state": "assigned", "estimated_start": aiwg_contract::clock::stamp()}))
        .await;
    server
        .eventually(&mission_path(id), "the peer's mission.assigned stored", |m| {
            m["recent_events"].as_array().is_some_and(|e| e.iter().any(|e| e["event"] == "mission.assigned"))
        })
        .await;
}

/// The rejected-frame count of one error code, from `/metrics`.
async fn rejected(server: &TestServer, code: &str) -> u64 {
    let metrics = server.client.get("/metrics").await.body;
    let text = metrics.as_str().unwrap_or_default();
    let key = format!("aiwg_frames_rejected_total{{code=\"{code}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(key.as_str())).map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test]
async fn the_agentic_sandbox_boot_reconnect_and_shutdown_sequence_works_end_to_end() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;
    let executor = format!("/api/v1/executors/{}", peer.id());
    server.eventually(&executor, "connected", |b| b["connected"] == true).await;

    // Sandbox events are stored and shown to operators.
    let session_start = json!({"type": "session_start", "agent_id": "agent-1", "session_id": "s-1", "command": "tmux"});
    peer.sandbox(session_start.clone()).await;
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

    // Dispatch, answered 202 by the executor's REST with serve's token; mission.assigned on the socket.
    let id = mission_id();
    dispatch_to_peer(&server, &mut peer, &id).await;
    assigned(&server, &mut peer, &id).await;

    // A sandbox-socket cycle: DELETE (no auth), both registrations again (new tokens), new sockets while
    // the old executor socket stays open; resync lists the mission, then reconnected/resumed pairs.
    assert!((200..300).contains(&server.client.delete("/api/sandboxes/not-a-sandbox", None).await.status));
    let old_token = peer.rest.token.clone();
    peer.cycle(&server, &[&id]).await;
    assert_ne!(peer.rest.token, old_token, "no Authorization header: a new token, the newest wins");
    peer.emit("mission.reconnected", &id, json!({"checkpoint_id": ""})).await;
    peer.emit("mission.resumed", &id, json!({"state": "running", "resumed_from": "suspended"})).await;
    server.eventually(&mission_path(&id), "running", |m| m["state"] == "running").await;

    // Events come on either socket; a HITL answer reaches the executor as `text`, once (its sockets all
    // feed one channel).
    peer.emit("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "Proceed?", "context": "pty"})).await;
    server.eventually(&mission_path(&id), "hitl-required", |m| m["state"] == "hitl-required").await;
    let r = server
        .client
        .post(&format!("/api/v1/missions/{id}/hitl_response"), &json!({"hitl_id": "h-1", "response": "yes"}))
        .await;
    assert_eq!((r.status, r.body["delivered"].as_bool()), (202, Some(true)), "{}", r.body);
    assert_eq!(peer.next_hitl_answer().await, Some(("h-1".into(), "yes".into())));

    // Dispatch with the new token works (serve calls the executor with the newest token).
    let next = mission_id();
    dispatch_to_peer(&server, &mut peer, &next).await;

    // SIGTERM: suspended for every mission it holds, sockets dropped without Close frames.
    for m in [&id, &next] {
        let data =
            json!({"state": "suspended", "checkpoint_id": format!("auto-{m}"), "reason": "mgmt_server_shutdown"});
        peer.emit("mission.suspended", m, data).await;
    }
    server.eventually(&mission_path(&next), "suspended", |m| m["state"] == "suspended").await;
    server.eventually(&mission_path(&id), "suspended", |m| m["state"] == "suspended").await;
    peer.stop();
    server.eventually(&executor, "disconnected", |b| b["connected"] == false).await;

    // Restart: same executor_id, no DELETE, resync lists both, reconnected/resumed pairs. Serve resumes
    // what was suspended; it sends the peer nothing (it acts on nothing but HITL answers).
    peer.restart(&server, &[&id, &next]).await;
    for m in [&id, &next] {
        peer.emit("mission.reconnected", m, json!({"checkpoint_id": ""})).await;
        peer.emit("mission.resumed", m, json!({"state": "running", "resumed_from": "suspended"})).await;
    }
    for m in [&id, &next] {
        let mission = server.eventually(&mission_path(m), "running", |m| m["state"] == "running").await;
        assert_eq!(mission["checkpoint_id"], format!("auto-{m}"));
    }
    // The quarantine path of the real client: failed_preserved with extra keys is a failure.
    let quarantined = json!({"state": "failed_preserved", "reason": "mission_quarantined", "error": "crash loop",
                             "failure_count": 3, "threshold": 3});
    peer.emit("mission.failed", &next, quarantined).await;
    server.eventually(&mission_path(&next), "failed", |m| m["state"] == "failed").await;
    assert_eq!(peer.hitl_answers(), Some(Vec::new()), "nothing else reached its HITL handler");
    assert_eq!(peer.received(), 1, "serve sent it the one HITL answer, nothing more");
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

/// What the sandbox socket says about one agent session (`mission-` + the first 8 bytes of the id).
pub(crate) fn session_listing(session_id: &str, mission_id: &str) -> Value {
    json!({"type": "agent_sessions", "agent_id": "fake-agent-1", "sessions": [{
        "session_id": session_id, "session_name": format!("mission-{}", &mission_id[..8]), "session_type": "background",
        "command": "work", "created_at_secs": 0, "has_screen": false}]})
}

pub(crate) fn session_start(session_id: &str) -> Value {
    json!({"type": "session_start", "agent_id": "fake-agent-1", "session_id": session_id, "command": "tmux"})
}

pub(crate) fn session_end(session_id: &str, exit_code: i64) -> Value {
    json!({"type": "session_end", "agent_id": "fake-agent-1", "session_id": session_id, "exit_code": exit_code})
}

/// Issue 12: the sandbox's real traffic (agentic-sandbox-wire.jsonl), replayed through the real server,
/// ends where an operator expects: exit 0 done, exit 3 failed with its code, HITL answerable after a
/// restart, pause refused honestly, quarantine unable to overwrite a mission that finished.
#[tokio::test]
async fn the_sandbox_sessions_end_its_missions() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;

    // Exit 0, in the order most sessions show: assigned, start, listing, end.
    let ok = mission_id();
    dispatch_to_peer(&server, &mut peer, &ok).await;
    assigned(&server, &mut peer, &ok).await;
    peer.sandbox(session_start("s-ok")).await;
    peer.sandbox(session_listing("s-ok", &ok)).await;
    server.eventually(&mission_path(&ok), "started from the session", |m| m["state"] == "running").await;
    peer.sandbox(session_end("s-ok", 0)).await;
    let m = server.eventually(&mission_path(&ok), "done from the session", |m| m["state"] == "done").await;
    assert_eq!(m["exit_code"], 0);
    assert_eq!(m["pty_session_ref"], "s-ok");
    // The executor's own mission.assigned can cross the session's end on the other socket: after the end,
    // a duplicate too.
    peer.emit("mission.assigned", &ok, json!({"state": "assigned", "estimated_start": aiwg_contract::clock::stamp()}))
        .await;

    // Exit 3, with the session starting before the executor's mission.assigned (13 of 68 in one run):
    // the late assigned is a duplicate, not an error (issue 42, finding 6).
    let bad = mission_id();
    dispatch_to_peer(&server, &mut peer, &bad).await;
    peer.sandbox(session_start("s-bad")).await;
    peer.sandbox(session_listing("s-bad", &bad)).await;
    server.eventually(&mission_path(&bad), "started", |m| m["state"] == "running").await;
    peer.emit("mission.assigned", &bad, json!({"state": "assigned", "estimated_start": "2026-11-30T09:26:14.012Z"}))
        .await;
    peer.sandbox(session_end("s-bad", 3)).await;
    let m = server.eventually(&mission_path(&bad), "failed from the session", |m| m["state"] == "failed").await;
    assert_eq!(m["exit_code"], 3);
    assert!(m["error"].as_str().unwrap().starts_with("inferred by serve from sandbox session s-bad"), "{m}");

    // HITL: the executor socket asks; pause and resume are refused honestly (the sandbox has no pause).
    let asking = mission_id();
    dispatch_to_peer(&server, &mut peer, &asking).await;
    assigned(&server, &mut peer, &asking).await;
    // Stored, so every frame sent before it on the executor socket has been judged.
    assert_eq!(rejected(&server, "illegal_transition").await, 0, "the late mission.assigned were not refused");
    peer.sandbox(session_start("s-ask")).await;
    peer.sandbox(session_listing("s-ask", &asking)).await;
    server.eventually(&mission_path(&asking), "started", |m| m["state"] == "running").await;
    peer.emit("mission.hitl_required", &asking, json!({"hitl_id": "h-9", "prompt": "Deploy?", "context": "c"})).await;
    server.eventually(&mission_path(&asking), "asking", |m| m["state"] == "hitl-required").await;
    for action in ["pause", "resume"] {
        let message = server
            .client
            .post(&format!("{}/{action}", mission_path(&asking)), &json!(null))
            .await
            .assert_error(409, "control_unsupported");
        assert!(message.contains("agentic-sandbox"), "{message}");
    }

    // SIGTERM: suspended for every mission it holds, ended ones included; sockets dropped.
    for id in [&ok, &bad, &asking] {
        let data =
            json!({"state": "suspended", "checkpoint_id": format!("auto-{id}"), "reason": "mgmt_server_shutdown"});
        peer.emit("mission.suspended", id, data).await;
    }
    server.eventually(&mission_path(&asking), "suspended", |m| m["state"] == "suspended").await;
    peer.stop();
    server.eventually(&format!("/api/v1/executors/{}", peer.id()), "disconnected", |b| b["connected"] == false).await;
    // Answered meanwhile: nobody is there to take it, and serve says so (field finding: it said
    // `conflict`, as if the question were gone).
    let early = json!({"hitl_id": "h-9", "response": "too early"});
    let message = server
        .client
        .post(&format!("{}/hitl_response", mission_path(&asking)), &early)
        .await
        .assert_error(409, "executor_not_connected");
    assert!(message.contains("once the executor is back"), "{message}");

    // Restart: resync lists all three, then reconnected + resumed for each.
    peer.restart(&server, &[&ok, &bad, &asking]).await;
    for id in [&ok, &bad, &asking] {
        peer.emit("mission.reconnected", id, json!({"checkpoint_id": ""})).await;
        peer.emit("mission.resumed", id, json!({"state": "running", "resumed_from": "suspended"})).await;
    }
    let m = server.eventually(&mission_path(&asking), "asking again", |m| m["state"] == "hitl-required").await;
    assert_eq!(m["hitl"]["hitl_id"], "h-9", "the agent still waits for its answer: {m}");
    assert_eq!(server.mission(&ok).await["state"], "done");
    assert_eq!(server.mission(&bad).await["state"], "failed");
    // But the peer keeps its questions in memory only: after its restart it drops the answer (field
    // finding: serve said `confirmed: true`). Serve still sends it, and says what will become of it.
    let r = server
        .client
        .post(&format!("{}/hitl_response", mission_path(&asking)), &json!({"hitl_id": "h-9", "response": "yes"}))
        .await;
    assert_eq!(
        (r.status, &r.body["state"], &r.body["delivered"], &r.body["confirmed"]),
        (202, &json!("running"), &json!(true), &json!(false)),
        "{}",
        r.body
    );
    assert!(r.body["note"].as_str().unwrap().contains("restarted after this question was asked"), "{}", r.body);
    assert_eq!(peer.next_forgotten_answer().await, ("h-9".into(), "yes".into()));
    // A question asked after the restart is remembered, and its answer confirmed.
    peer.emit("mission.hitl_required", &asking, json!({"hitl_id": "h-10", "prompt": "Really?", "context": "c"})).await;
    server.eventually(&mission_path(&asking), "asking anew", |m| m["hitl"]["hitl_id"] == "h-10").await;
    let r = server
        .client
        .post(&format!("{}/hitl_response", mission_path(&asking)), &json!({"hitl_id": "h-10", "response": "yes"}))
        .await;
    assert_eq!((r.status, &r.body["confirmed"]), (202, &json!(true)), "{}", r.body);
    assert_eq!(peer.next_hitl_answer().await, Some(("h-10".into(), "yes".into())));

    // The third restart quarantines everything, the mission that exited 0 included: it stays done.
    let quarantine = json!({"state": "failed_preserved", "reason": "mission_quarantined", "error": "repeated reconnect/resume",
                            "failure_count": 3, "threshold": 3});
    peer.emit("mission.failed", &ok, quarantine).await;
    // Had the executor reported the end itself, after serve inferred it: a duplicate, not an error.
    peer.emit("mission.failed", &bad, json!({"state": "failed", "reason": "exit", "exit_code": 3})).await;
    // And the session end of the HITL mission ends it.
    peer.sandbox(session_end("s-ask", 0)).await;
    server.eventually(&mission_path(&asking), "done", |m| m["state"] == "done").await;
    let m = server.mission(&ok).await;
    assert_eq!((&m["state"], &m["exit_code"]), (&json!("done"), &json!(0)));
    assert_eq!(server.mission(&bad).await["state"], "failed");
}

/// Field finding (real peers, round two): serve restarted while agent sessions ran; their ends were
/// stored but ended nothing, and the missions stayed `running` until the sandbox quarantined them to
/// `failed` although their agents exited 0. After a restart serve knows nothing of a session's name, and
/// the sandbox never lists an ended session again: the mission bound to the session (its
/// `pty_session_ref`, stored when the start was inferred) is what ties the end to it.
#[tokio::test]
async fn a_session_that_ends_after_serve_restarted_ends_its_mission() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;
    let (ok, bad) = (mission_id(), mission_id());
    for (id, session) in [(&ok, "s-live-ok"), (&bad, "s-live-bad")] {
        dispatch_to_peer(&server, &mut peer, id).await;
        assigned(&server, &mut peer, id).await;
        peer.sandbox(session_start(session)).await;
        peer.sandbox(session_listing(session, id)).await;
        server.eventually(&mission_path(id), "started from the session", |m| m["state"] == "running").await;
    }

    peer.stop();
    let server = server.restart_on_same_port().await;
    peer.restart(&server, &[&ok, &bad]).await;
    for id in [&ok, &bad] {
        peer.emit("mission.reconnected", id, json!({"checkpoint_id": ""})).await;
    }
    // The listing after an end no longer names the ended session: only the binding can tell.
    peer.sandbox(session_end("s-live-ok", 0)).await;
    peer.sandbox(json!({"type": "agent_sessions", "agent_id": "fake-agent-1", "sessions": []})).await;
    peer.sandbox(session_end("s-live-bad", 2)).await;
    let m = server.eventually(&mission_path(&ok), "done from the session", |m| m["state"] == "done").await;
    assert_eq!((&m["exit_code"], &m["pty_session_ref"]), (&json!(0), &json!("s-live-ok")));
    let m = server.eventually(&mission_path(&bad), "failed from the session", |m| m["state"] == "failed").await;
    assert_eq!((&m["exit_code"], &m["error_code"]), (&json!(2), &m["error_code"]));
    assert!(m["error"].as_str().unwrap().contains("s-live-bad: it ended with exit code 2"), "{m}");
    // The sandbox's later quarantine cannot overwrite the end its agent reported.
    let quarantine = json!({"state": "failed_preserved", "reason": "mission_quarantined", "error": "repeated reconnect/resume",
                            "failure_count": 3, "threshold": 3});
    peer.emit("mission.failed", &ok, quarantine).await;
    peer.emit("mission.progress", &ok, json!({"summary": "a frame after, to know the quarantine was taken"})).await;
    assert_eq!(server.mission(&ok).await["state"], "done");
}

/// Issue 12, finding 2: a restart that re-announces 51 ended missions used to close the executor
/// socket with 1008, for good (the sandbox never reopens it alone).
#[tokio::test]
async fn restating_many_ended_missions_is_not_a_flood() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;
    let mut ended = Vec::new();
    for _ in 0..51 {
        let id = mission_id();
        dispatch_to_peer(&server, &mut peer, &id).await;
        assert_eq!(server.client.post(&format!("/api/v1/missions/{id}/abort"), &json!(null)).await.status, 202);
        ended.push(id);
    }
    let owned: Vec<&str> = ended.iter().map(String::as_str).collect();
    peer.restart(&server, &owned).await;
    for id in &ended {
        peer.emit("mission.reconnected", id, json!({"checkpoint_id": ""})).await;
        peer.emit("mission.resumed", id, json!({"state": "running"})).await;
    }
    // Still open and still heard: a fresh mission's events are taken, and it is still connected.
    let id = mission_id();
    dispatch_to_peer(&server, &mut peer, &id).await;
    assigned(&server, &mut peer, &id).await;
    assert_eq!(server.client.get(&format!("/api/v1/executors/{}", peer.id())).await.body["connected"], true);
    assert_eq!(peer.open_sockets(), 1);
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
    assert!(first.header("warning").is_none(), "{:?}", first.headers);
    e.next_dispatch().await;
    let second = server.client.post("/api/v1/sessions/s/dispatch", &dispatch("mission-0002")).await;
    assert_eq!(second.status, 202, "{}", second.body);
    let warning = second.header("warning").unwrap_or_else(|| panic!("a warning: {:?}", second.headers));
    assert!(
        warning.starts_with("299 aiwg-serve \"mission id mission-0002 shares its first 8 bytes with 1"),
        "{warning}"
    );
    assert!(warning.contains("(mission-0001)"), "{warning}");
    // The body stays upstream's dispatch_response: nothing it does not allow.
    let upstream = crate::support::upstream::Upstream::load();
    assert_eq!(upstream.errors("dispatch_response", &second.body), Vec::<String>::new(), "{}", second.body);
    e.next_dispatch().await;

    let mut pinned = dispatch(&mission_id());
    pinned["executor_filter"] = json!({"executor_id": e.id, "agent_id": "fake-agent-1"});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &pinned).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(e.next_dispatch().await.body["executor_filter"]["agent_id"], "fake-agent-1", "forwarded untouched");
}

/// Issue 12, finding 6: every sandbox socket cycle left one more executor socket open, pinged forever.
/// Past `hub.max_sockets_per_executor` the one quiet the longest (here the oldest) is closed with 4000,
/// and what the executor still sent on it is committed.
#[tokio::test]
async fn old_sockets_are_closed_past_the_limit_without_losing_their_frames() {
    let server = TestServer::start_with(|c| c.hub.max_sockets_per_executor = 2).await;
    let (mut e, mut oldest) = ScriptedExecutor::online(&server, &[]).await;
    let id = crate::support::dispatch_to(&server, &mut e).await;
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

/// Issue 42, finding 2: the real client lists every mission it ever ran in each resync; serve answered
/// each ended one with `mission.aborted` on every live socket, the client's 64-frame channel overflowed,
/// and its HITL handling ended for good: answers were "delivered" and never reached the agent. Serve sends
/// it nothing it cannot act on (no aborts, no acks, no resumes), and each frame on one socket only.
#[tokio::test]
async fn hitl_answers_reach_the_agentic_sandbox_after_resyncs_restate_many_ended_missions() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;
    let mut ended = Vec::new();
    for _ in 0..70 {
        let id = mission_id();
        dispatch_to_peer(&server, &mut peer, &id).await;
        peer.emit("mission.assigned", &id, json!({"state": "assigned"})).await;
        let r = server.client.post(&format!("/api/v1/missions/{id}/abort"), &json!(null)).await;
        assert_eq!((r.status, &r.body["delivered"]), (202, &json!(false)), "{}", r.body);
        assert!(r.body["note"].as_str().unwrap().contains("may still be running"), "{}", r.body);
        ended.push(id);
    }
    let owned: Vec<&str> = ended.iter().map(String::as_str).collect();
    peer.restart(&server, &owned).await;
    for _ in 0..3 {
        peer.cycle(&server, &owned).await;
    }
    for id in &owned {
        peer.emit("mission.reconnected", id, json!({"checkpoint_id": ""})).await;
        peer.emit("mission.resumed", id, json!({"state": "running", "resumed_from": "suspended"})).await;
    }
    let id = mission_id();
    dispatch_to_peer(&server, &mut peer, &id).await;
    peer.emit("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "Go on?"})).await;
    server.eventually(&mission_path(&id), "asking", |m| m["state"] == "hitl-required").await;
    let r = server
        .client
        .post(&format!("/api/v1/missions/{id}/hitl_response"), &json!({"hitl_id": "h-1", "response": "go"}))
        .await;
    assert_eq!((r.status, &r.body["delivered"]), (202, &json!(true)), "{}", r.body);
    assert_eq!(peer.next_hitl_answer().await, Some(("h-1".into(), "go".into())), "the handler is alive");
    assert_eq!(peer.received(), 1, "the answer, once, and nothing else");
}

/// Issue 42, finding 3: the client opens a new executor socket on every cycle and never closes the old
/// ones; each one serve closes makes it drop a later event (2 of 6 HITL requests were lost after 8
/// cycles). An agentic-sandbox executor keeps many more sockets before one is closed.
#[tokio::test]
async fn socket_cycles_of_the_agentic_sandbox_lose_no_event() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;
    let mut missions = Vec::new();
    for _ in 0..6 {
        let id = mission_id();
        dispatch_to_peer(&server, &mut peer, &id).await;
        missions.push(id);
    }
    let owned: Vec<&str> = missions.iter().map(String::as_str).collect();
    for _ in 0..8 {
        peer.cycle(&server, &owned).await;
    }
    for (n, id) in missions.iter().enumerate() {
        peer.emit("mission.hitl_required", id, json!({"hitl_id": format!("h-{n}"), "prompt": "Proceed?"})).await;
    }
    for id in &missions {
        server.eventually(&mission_path(id), "asking", |m| m["state"] == "hitl-required").await;
    }
    assert!(peer.dropped.is_empty(), "events dropped: {:?}", peer.dropped);
    assert_eq!((peer.open_sockets(), peer.closes.lock().unwrap().len()), (9, 0));
}

/// Issue 42, finding 4: missions whose ids share their first 8 characters never ended, the first
/// included: a session was matched by its name's prefix only, found two missions and took neither. A
/// session goes to the mission bound to it, else to the first unclaimed mission of its prefix. The
/// sandbox runs one session per name (issue 53, item 14): the second waits in the queue until the first
/// ended, and its session, of the same name, is its own and not the first's.
#[tokio::test]
async fn sessions_of_missions_sharing_a_prefix_end_each_its_own() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;
    let (first, second) = ("m-shared-first".to_owned(), "m-shared-second".to_owned());
    dispatch_to_peer(&server, &mut peer, &first).await;
    assigned(&server, &mut peer, &first).await;
    let queued = json!({"mission_id": second, "objective": "o", "completion": "c", "queue": true});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &queued).await;
    assert_eq!((r.status, r.body["status"].as_str()), (202, Some("queued")), "{}", r.body);
    assert!(
        r.body["queued_reason"].as_str().unwrap().contains("runs m-shared-first, whose id shares them"),
        "{}",
        r.body
    );
    peer.sandbox(session_start("s-1")).await;
    peer.sandbox(session_listing("s-1", &first)).await;
    let m = server.eventually(&mission_path(&first), "first started", |m| m["state"] == "running").await;
    assert_eq!(m["pty_session_ref"], "s-1");
    assert_eq!(server.mission(&second).await["state"], "queued", "one session name, one live mission");
    peer.sandbox(session_end("s-1", 0)).await;
    let m = server.eventually(&mission_path(&first), "first done", |m| m["state"] == "done").await;
    assert_eq!(m["exit_code"], 0);

    assert_eq!(peer.rest.next_dispatch().await.body["mission_id"], json!(second), "handed out once the first ended");
    assigned(&server, &mut peer, &second).await;
    peer.sandbox(session_start("s-2")).await;
    peer.sandbox(session_listing("s-2", &second)).await;
    let m = server.eventually(&mission_path(&second), "second started", |m| m["state"] == "running").await;
    assert_eq!(m["pty_session_ref"], "s-2");
    peer.sandbox(session_end("s-2", 3)).await;
    let m = server.eventually(&mission_path(&second), "second failed", |m| m["state"] == "failed").await;
    assert_eq!(m["exit_code"], 3);
    assert_eq!(server.mission(&first).await["exit_code"], 0, "the first kept its end");
}

/// Issue 42, finding 5: a lost agent leaves its mission running and silent. Its sandbox's session frames
/// are signs of life (the mission's `updated_at` moves), and the CLI says how long a live mission has
/// been silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missions_session_frames_are_signs_of_life_and_the_cli_says_how_long_it_was_silent() {
    let server = TestServer::start().await;
    let mut peer = AgenticPeer::boot(&server, &[]).await;
    let id = mission_id();
    dispatch_to_peer(&server, &mut peer, &id).await;
    peer.sandbox(session_start("s-live")).await;
    peer.sandbox(session_listing("s-live", &id)).await;
    let before = server.eventually(&mission_path(&id), "running", |m| m["state"] == "running").await;
    let before = before["updated_at"].as_str().unwrap().to_owned();
    // Another listing of the session, later: the sandbox says the agent is still there.
    peer.sandbox(session_listing("s-live", &id)).await;
    let listed = server
        .eventually("/api/v1/events?follow=false&since=0&limit=1000", "the second listing stored", |page| {
            page["events"]
                .as_array()
                .is_some_and(|e| e.iter().filter(|i| i["envelope"]["event"] == "sandbox.agent_sessions").count() == 2)
        })
        .await;
    let at = listed["events"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|i| i["envelope"]["event"] == "sandbox.agent_sessions")
        .unwrap()["envelope"]["ts"]
        .as_str()
        .unwrap()
        .to_owned();
    let m = server
        .eventually(&mission_path(&id), "touched by the listing", |m| {
            m["updated_at"].as_str().is_some_and(|u| u >= at.as_str())
        })
        .await;
    assert!(m["updated_at"].as_str().unwrap() >= before.as_str());
    assert_eq!(m["state"], "running", "a sign of life changes nothing else");

    let out = crate::cli::cli(&server.base, &["missions", "show", &id], &[]).await;
    let shown = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(shown.lines().any(|l| l.starts_with("silent for:") && l.contains("s (no event")), "{shown}");
    let out = crate::cli::cli(&server.base, &["missions", "list"], &[]).await;
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(table.lines().next().unwrap().contains(" SILENT"), "{table}");
}

/// Issue 42, finding 3: over the limit, the socket closed is the one that has carried no event for the
/// longest, not the oldest: a peer that still sends on an old socket may still read from it.
#[tokio::test]
async fn the_socket_closed_over_the_limit_is_the_one_quiet_the_longest() {
    let server = TestServer::start_with(|c| c.hub.max_sockets_per_executor = 2).await;
    let (mut e, mut oldest) = ScriptedExecutor::online(&server, &[]).await;
    let id = crate::support::dispatch_to(&server, &mut e).await;
    let mut quiet = e.connect(&server).await;
    // The oldest socket carries an event after the newer one opened: the newer one is the quietest.
    oldest.ack("mission.started", &id, json!({"state": "running"})).await;
    let mut newest = e.connect(&server).await;
    let closed = quiet.closed().await;
    assert_eq!((closed.code, closed.reason.as_str()), (4000, "superseded by a newer socket"));
    assert!(oldest.ack("mission.progress", &id, json!({"summary": "old socket, still open"})).await > 0);
    assert!(newest.ack("mission.progress", &id, json!({"summary": "new socket"})).await > 0);
}
