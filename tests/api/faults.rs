//! A failed write changes nothing (issue 11, finding 3): under an injected commit failure every
//! operation answers 500 `internal`, and afterwards memory agrees with the store, so the same operation
//! succeeds once the store is healthy again.

use serde_json::{json, Value};

use crate::support::{dispatch_to, ExecSocket, InjectedFault, ScriptedExecutor, TestServer};

async fn dispatched_running(server: &TestServer, e: &mut ScriptedExecutor, ws: &mut ExecSocket) -> String {
    let id = dispatch_to(server, e).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    id
}

#[tokio::test]
async fn mission_controls_that_fail_to_commit_leave_the_mission_as_it_was() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl", "x-pause-resume"]).await;
    let running = dispatched_running(&server, &mut e, &mut ws).await;
    let asking = dispatched_running(&server, &mut e, &mut ws).await;
    ws.ack("mission.hitl_required", &asking, json!({"hitl_id": "h-1", "prompt": "Proceed?"})).await;

    let fault = InjectedFault::inject(&server).await;
    let path = |id: &str, what: &str| format!("/api/v1/missions/{id}/{what}");
    for what in ["abort", "pause"] {
        let r = server.client.post(&path(&running, what), &json!(null)).await;
        r.assert_error(500, "internal");
        assert_eq!(server.mission(&running).await["state"], "running", "after a failed {what}");
    }
    let answer = json!({"hitl_id": "h-1", "response": "yes"});
    server.client.post(&path(&asking, "hitl_response"), &answer).await.assert_error(500, "internal");
    assert_eq!(server.mission(&asking).await["state"], "hitl-required");
    fault.heal().await;

    // Memory did not move ahead of the store: each operation is still possible, exactly once.
    let r = server.client.post(&path(&running, "pause"), &json!(null)).await;
    assert_eq!((r.status, &r.body["state"]), (202, &json!("paused")), "{}", r.body);
    assert_eq!(ws.next_pushed().await["event"], "mission.paused");
    let r = server.client.post(&path(&asking, "hitl_response"), &answer).await;
    assert_eq!((r.status, &r.body["state"]), (202, &json!("running")), "{}", r.body);
    assert_eq!(ws.next_pushed().await["data"]["text"], "yes");
    let r = server.client.post(&path(&running, "abort"), &json!(null)).await;
    assert_eq!((r.status, &r.body["state"]), (202, &json!("aborted")), "{}", r.body);
    assert_eq!(server.mission(&running).await["state"], "aborted");
}

#[tokio::test]
async fn identity_changes_that_fail_to_commit_leave_the_executor_as_it_was() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["resumable"]).await;
    let mission = dispatched_running(&server, &mut e, &mut ws).await;
    let drain = format!("/api/v1/executors/{}/drain", e.id);
    let this = format!("/api/v1/executors/{}", e.id);

    let fault = InjectedFault::inject(&server).await;
    server.client.post(&drain, &json!(null)).await.assert_error(500, "internal");
    assert!(server.client.get(&this).await.body.get("draining").is_none(), "not draining after a failed drain");
    // A re-register without the token (what the agentic-sandbox executor does on loopback) would rotate it.
    let r = server.client.post("/api/v1/executors/register", &e.register_payload()).await;
    r.assert_error(500, "internal");
    server.client.delete(&this, Some(&e.token)).await.assert_error(500, "internal");
    let status = server.client.get(&this).await;
    assert_eq!((status.status, &status.body["connected"]), (200, &json!(true)), "{}", status.body);
    fault.heal().await;

    // The old token still opens a socket, the first socket is still open, the mission still runs.
    let mut second = e.connect(&server).await;
    ws.ack("mission.progress", &mission, json!({"phase": "x", "summary": "still here", "iteration": 1})).await;
    assert_eq!(server.mission(&mission).await["state"], "running");
    let r = server.client.post(&drain, &json!(null)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(server.client.get(&this).await.body["draining"], true);
    assert_eq!(server.client.delete(&this, Some(&e.token)).await.status, 204);
    assert_eq!(second.closed().await.code, 1000);
    assert_eq!(server.mission(&mission).await["state"], "suspended");
}

/// Issue 35, findings 1 and 2: after a failed commit serve removed the mission from memory and re-read
/// it; frames in flight meanwhile were refused `illegal_transition` (139 of 800 valid frames), and when
/// the re-read failed too the mission was never put back (every later frame refused, the executor's
/// count +1 for good). A failed commit leaves the mission as it was before that frame, and nothing else
/// is refused.
#[tokio::test]
async fn a_frame_whose_commit_fails_leaves_its_mission_as_it_was_and_refuses_nothing_else() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl"]).await;
    let fault = InjectedFault::poison(&server, "poison").await;
    let mut missions = Vec::new();
    for _ in 0..8 {
        missions.push(dispatched_running(&server, &mut e, &mut ws).await);
    }
    for (round, id) in missions.iter().enumerate() {
        // A failing frame, then valid ones sent at once behind it (in flight while it fails).
        let poisoned = ws.envelope("mission.hitl_required", Some(id), json!({"hitl_id": "h-1", "prompt": "poison"}));
        let mut frames = vec![poisoned];
        for i in 0..20 {
            frames.push(ws.envelope("mission.progress", Some(id), json!({"summary": format!("{round}-{i}")})));
        }
        if round % 2 == 0 {
            frames.push(ws.envelope("mission.completed", Some(id), json!({"state": "done", "exit_code": 0})));
        }
        for f in &frames {
            ws.send_only(tokio_tungstenite::tungstenite::Message::text(f.to_string())).await.unwrap();
        }
        let first = ws.next_answer().await;
        assert_eq!(first["error"], "internal", "the poisoned frame is refused: {first}");
        for f in &frames[1..] {
            let answer = ws.next_answer().await;
            assert_eq!(answer["ack"], true, "{} refused: {answer}", f["event"]);
        }
    }
    for (round, id) in missions.iter().enumerate() {
        let m = server.mission(id).await;
        let want = if round % 2 == 0 { "done" } else { "running" };
        assert_eq!(m["state"], want, "the failed hitl_required left no trace: {m}");
        assert!(m.get("hitl").is_none_or(Value::is_null), "{m}");
    }
    let executor = server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body;
    assert_eq!(executor["active_mission_count"], 4, "the four still running: {executor}");
    fault.heal().await;
    // The refused frame, sent again, is taken: nothing remembered it.
    let again = ws.event("mission.hitl_required", &missions[1], json!({"hitl_id": "h-1", "prompt": "poison"})).await;
    assert_eq!(again["ack"], true, "{again}");
}

/// Issue 35, finding 1: with the store failing for a while (every commit refused), frames, controls and
/// timers fail without wedging anything; once it heals, the mission goes on where it was and ends.
#[tokio::test]
async fn a_storage_outage_wedges_no_mission() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl", "x-abort"]).await;
    let id = dispatched_running(&server, &mut e, &mut ws).await;
    let other = dispatched_running(&server, &mut e, &mut ws).await;
    let fault = InjectedFault::inject(&server).await;
    for i in 0..20 {
        let answer = ws.event("mission.progress", &id, json!({"summary": format!("during the outage {i}")})).await;
        assert_eq!(answer["error"], "internal", "{answer}");
    }
    let answer = ws.event("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    assert_eq!(answer["error"], "internal", "{answer}");
    server.client.post(&format!("/api/v1/missions/{other}/abort"), &json!(null)).await.assert_error(500, "internal");
    assert_eq!(server.mission(&id).await["state"], "running");
    // Readiness names the failing store (an empty commit, which still succeeds, does not hide it).
    let ready = server.client.get("/readyz").await;
    assert!(ready.assert_error(503, "not_ready").contains("the store has failed to commit"), "{}", ready.body);
    assert_eq!(server.client.get("/api/v1/missions").await.status, 200, "reads do not wait on the failing writer");
    fault.heal().await;
    // The same completion, sent again, ends it; the operator's abort, asked again, is done.
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let r = server.client.post(&format!("/api/v1/missions/{other}/abort"), &json!(null)).await;
    assert_eq!((r.status, &r.body["state"]), (202, &json!("aborted")), "{}", r.body);
    let executor = server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body;
    assert_eq!(executor["active_mission_count"], 0, "{executor}");
    assert_eq!(server.client.get("/readyz").await.status, 200, "ready again once it commits");
}

/// Issue 35, finding 2, the harder half: a change decided on top of one whose commit then fails cannot
/// be undone in place; the mission is re-read from the store once both are resolved, and frames meanwhile
/// wait for it instead of being refused.
#[tokio::test]
async fn a_failed_change_with_another_decided_on_top_is_re_read_from_the_store() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl"]).await;
    let id = dispatched_running(&server, &mut e, &mut ws).await;
    let fault = InjectedFault::poison_slowly(&server, "slow-poison", true).await;
    let frames = [
        ws.envelope("mission.hitl_required", Some(&id), json!({"hitl_id": "h-1", "prompt": "slow-poison"})),
        // Decided while the first fails: from hitl-required back to running.
        ws.envelope("mission.resumed", Some(&id), json!({"state": "running"})),
        ws.envelope("mission.progress", Some(&id), json!({"summary": "after"})),
        ws.envelope("mission.paused", Some(&id), json!({"state": "paused"})),
    ];
    for f in &frames {
        ws.send_only(tokio_tungstenite::tungstenite::Message::text(f.to_string())).await.unwrap();
    }
    assert_eq!(ws.next_answer().await["error"], "internal");
    for f in &frames[1..] {
        let answer = ws.next_answer().await;
        assert_eq!(answer["ack"], true, "{}: {answer}", f["event"]);
    }
    let m = server.eventually(&format!("/api/v1/missions/{id}"), "paused", |m| m["state"] == "paused").await;
    assert!(m.get("hitl").is_none_or(Value::is_null), "the failed request is nowhere: {m}");
    fault.heal().await;
    ws.ack("mission.resumed", &id, json!({"state": "running"})).await;
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let executor = server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body;
    assert_eq!(executor["active_mission_count"], 0, "{executor}");
}
