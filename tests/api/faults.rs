//! A failed write changes nothing (issue 11, finding 3): under an injected commit failure every
//! operation answers 500 `internal`, and afterwards memory agrees with the store, so the same operation
//! succeeds once the store is healthy again.

use serde_json::json;

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
