//! Operator actions: the HITL round trip, pause / resume / abort, and their refusals.

use serde_json::{json, Value};

use crate::support::{dispatch_to, running_mission, ExecSocket, ScriptedExecutor, TestServer};

/// An online executor with one mission it has started.
async fn running(server: &TestServer) -> (ScriptedExecutor, ExecSocket, String) {
    let (mut e, mut ws) = ScriptedExecutor::online(server, &["hitl", "x-pause-resume", "x-abort"]).await;
    let id = dispatch_to(server, &mut e).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    (e, ws, id)
}

async fn post(server: &TestServer, path: &str, body: Value) -> crate::support::Resp {
    server.client.post(path, &body).await
}

#[tokio::test]
async fn hitl_round_trip_reaches_the_executor_and_the_mission_completes() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) = running(&server).await;
    ws.ack(
        "mission.hitl_required",
        &id,
        json!({"hitl_id": "h-1", "prompt": "Deploy to prod?", "context": "tests pass"}),
    )
    .await;
    assert_eq!(server.mission(&id).await["state"], "hitl-required");

    let r =
        post(&server, &format!("/api/v1/missions/{id}/hitl_response"), json!({"hitl_id": "h-1", "response": "yes"}))
            .await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.body, json!({"mission_id": id, "state": "running", "delivered": true, "confirmed": true}));
    let frame = ws.next_pushed().await;
    assert_eq!(frame["event"], "mission.hitl_responded");
    assert_eq!(frame["mission_id"], id.as_str());
    assert_eq!(frame["data"]["hitl_id"], "h-1");
    assert_eq!(frame["data"]["response"], "yes");
    assert_eq!(frame["data"]["text"], "yes", "the agentic-sandbox executor reads `text`");
    assert!(frame["data"]["responded_at"].is_string());

    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let m = server.mission(&id).await;
    assert_eq!(m["state"], "done");
    let events: Vec<&str> =
        m["recent_events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["mission.started", "mission.hitl_required", "mission.hitl_responded", "mission.completed"]);
}

#[tokio::test]
async fn bad_hitl_responses_are_refused_and_change_nothing() {
    let server = TestServer::start().await;
    let (e, mut ws, id) = running(&server).await;
    let path = format!("/api/v1/missions/{id}/hitl_response");
    // Not waiting for an answer yet.
    post(&server, &path, json!({"hitl_id": "h-1", "response": "yes"})).await.assert_error(409, "conflict");
    ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "Proceed?"})).await;
    let before = server.mission(&id).await;

    for body in [
        json!({"hitl_id": "h-1"}),
        json!({"response": "yes"}),
        json!({"hitl_id": "h-1", "response": ""}),
        json!({"hitl_id": "h-1", "response": 42}),
        json!({"hitl_id": 1, "response": "yes"}),
        json!({"hitl_id": "h-1", "response": "yes", "extra": true}),
    ] {
        post(&server, &path, body).await.assert_error(400, "schema_violation");
    }
    server.client.post_raw(&path, "{oops").await.assert_error(400, "invalid_json");
    post(&server, &path, json!({"hitl_id": "h-other", "response": "yes"})).await.assert_error(409, "conflict");
    post(&server, "/api/v1/missions/m-nope/hitl_response", json!({"hitl_id": "h-1", "response": "yes"}))
        .await
        .assert_error(404, "not_found");
    assert_eq!(server.mission(&id).await, before, "nothing stored");

    // Offline: refused, and still answerable once the executor is back.
    ws.close().await;
    server.eventually(&format!("/api/v1/executors/{}", e.id), "disconnected", |b| b["connected"] == false).await;
    post(&server, &path, json!({"hitl_id": "h-1", "response": "yes"}))
        .await
        .assert_error(409, "executor_not_connected");
    assert_eq!(server.mission(&id).await, before);
    let mut ws = e.connect(&server).await;
    server.eventually(&format!("/api/v1/executors/{}", e.id), "connected", |b| b["connected"] == true).await;
    assert_eq!(post(&server, &path, json!({"hitl_id": "h-1", "response": "yes"})).await.status, 202);
    assert_eq!(ws.next_pushed().await["data"]["hitl_id"], "h-1");
    // A duplicate answer finds nothing pending.
    post(&server, &path, json!({"hitl_id": "h-1", "response": "yes"})).await.assert_error(409, "conflict");
    ws.ack("mission.completed", &id, json!({"state": "done"})).await;
    post(&server, &path, json!({"hitl_id": "h-1", "response": "again"})).await.assert_error(409, "illegal_transition");
}

#[tokio::test]
async fn an_expired_hitl_request_fails_the_mission_and_stops_the_executor() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) = running(&server).await;
    let soon = aiwg_contract::clock::format(chrono::Utc::now() + chrono::Duration::milliseconds(300));
    ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h-exp", "prompt": "Quick?", "expires_at": soon})).await;
    let m = server.eventually(&format!("/api/v1/missions/{id}"), "hitl expiry", |m| m["state"] == "failed").await;
    assert_eq!(m["error"], "HITL request h-exp expired unanswered");
    assert_eq!(m["recent_events"].as_array().unwrap().last().unwrap()["data"]["reason"], "hitl_expired");
    let abort = ws.next_pushed().await;
    assert_eq!(abort["event"], "mission.aborted");
    assert_eq!(abort["data"]["reason"], "hitl_expired");
    post(&server, &format!("/api/v1/missions/{id}/hitl_response"), json!({"hitl_id": "h-exp", "response": "late"}))
        .await
        .assert_error(409, "illegal_transition");
}

/// Issue 36: a question that names no deadline waited forever, holding its mission and the executor's
/// slot. It gets `hitl.default_expiry_s`, shown with the pending request, and expires like any other.
#[tokio::test]
async fn a_hitl_request_without_a_deadline_gets_the_default_one() {
    let server = TestServer::start_with(|c| c.hitl.default_expiry_s = 1).await;
    let (_e, mut ws, id) = running(&server).await;
    ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h-forgotten", "prompt": "Anyone?"})).await;
    let m = server.mission(&id).await;
    let requested = aiwg_contract::clock::parse(m["hitl"]["requested_at"].as_str().unwrap()).unwrap();
    let expires = aiwg_contract::clock::parse(m["hitl"]["expires_at"].as_str().expect("a deadline, shown")).unwrap();
    assert_eq!((expires - requested).num_milliseconds(), 1000, "{m}");
    assert!(
        m["recent_events"].as_array().unwrap().last().unwrap()["data"].get("expires_at").is_none(),
        "the event is the executor's"
    );
    let m = server.eventually(&format!("/api/v1/missions/{id}"), "hitl expiry", |m| m["state"] == "failed").await;
    assert_eq!(m["error"], "HITL request h-forgotten expired unanswered");
    assert_eq!(ws.next_pushed().await["data"]["reason"], "hitl_expired", "and the executor is told");
}

/// Issue 35, finding 11: the expiry timer of every superseded HITL request slept on until its deadline
/// (20,000 requests held 36 MiB). A mission has one timer at most: replaced by its next request, gone
/// with the answer and with the mission's end.
#[tokio::test]
async fn a_missions_hitl_deadline_is_watched_once_and_forgotten_when_moot() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) = running(&server).await;
    let watched = || async {
        let metrics = server.client.get("/metrics").await.body;
        let line = metrics.as_str().unwrap().lines().find_map(|l| l.strip_prefix("aiwg_hitl_deadlines_watched "));
        line.expect("the gauge is exported").trim().parse::<i64>().unwrap()
    };
    let tomorrow = aiwg_contract::clock::format(chrono::Utc::now() + chrono::Duration::days(1));
    let ask = |n: usize| json!({"hitl_id": format!("h-{n}"), "prompt": "?", "expires_at": tomorrow});
    for n in 0..50 {
        ws.ack("mission.hitl_required", &id, ask(n)).await;
    }
    assert_eq!(watched().await, 1, "one timer, however many requests superseded each other");
    let path = format!("/api/v1/missions/{id}/hitl_response");
    assert_eq!(post(&server, &path, json!({"hitl_id": "h-49", "response": "yes"})).await.status, 202);
    assert_eq!(watched().await, 0, "answered");
    ws.ack("mission.hitl_required", &id, ask(50)).await;
    assert_eq!(watched().await, 1);
    ws.ack("mission.completed", &id, json!({"state": "done"})).await;
    assert_eq!(watched().await, 0, "the mission ended");
}

#[tokio::test]
async fn answering_an_already_expired_request_fails_the_mission_at_once() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) = running(&server).await;
    ws.ack(
        "mission.hitl_required",
        &id,
        json!({"hitl_id": "h-old", "prompt": "?", "expires_at": "2000-01-01T00:00:00Z"}),
    )
    .await;
    let path = format!("/api/v1/missions/{id}/hitl_response");
    // The timer may fire first; either way the answer is refused and the mission fails.
    let r = post(&server, &path, json!({"hitl_id": "h-old", "response": "yes"})).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body["error"] == "conflict" || r.body["error"] == "illegal_transition", "{}", r.body);
    let m = server.eventually(&format!("/api/v1/missions/{id}"), "failed", |m| m["state"] == "failed").await;
    assert_eq!(m["error"], "HITL request h-old expired unanswered");
}

#[tokio::test]
async fn pause_resume_and_abort_reach_the_executor_and_are_recorded() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) = running(&server).await;
    let r = post(&server, &format!("/api/v1/missions/{id}/pause"), json!(null)).await;
    let paused = json!({"mission_id": id, "state": "paused", "delivered": true, "confirmed": true});
    assert_eq!((r.status, r.body.clone()), (202, paused));
    let frame = ws.next_pushed().await;
    assert_eq!(
        (frame["event"].as_str(), frame["data"].clone()),
        (Some("mission.paused"), json!({"state": "paused", "reason": "operator_request"}))
    );
    ws.ack("mission.paused", &id, json!({"state": "paused"})).await;
    post(&server, &format!("/api/v1/missions/{id}/pause"), json!(null)).await.assert_error(409, "illegal_transition");

    let r = post(&server, &format!("/api/v1/missions/{id}/resume"), json!(null)).await;
    assert_eq!(r.body["state"], "running");
    let frame = ws.next_pushed().await;
    assert_eq!(frame["data"], json!({"state": "running", "resumed_from": "paused"}));
    post(&server, &format!("/api/v1/missions/{id}/resume"), json!(null)).await.assert_error(409, "illegal_transition");

    let r = post(&server, &format!("/api/v1/missions/{id}/abort"), json!(null)).await;
    assert_eq!(r.body["state"], "aborted");
    let frame = ws.next_pushed().await;
    assert_eq!(frame["data"], json!({"state": "aborted", "aborted_by": "operator", "reason": "operator_request"}));
    // The executor confirming the abort in its own words is a repeat, not an error.
    let confirm = ws.event("mission.aborted", &id, json!({"state": "aborted", "reason": "killed"})).await;
    assert_eq!(confirm["duplicate"], true, "{confirm}");
    for action in ["pause", "resume", "abort"] {
        post(&server, &format!("/api/v1/missions/{id}/{action}"), json!(null))
            .await
            .assert_error(409, "illegal_transition");
    }
    let m = server.mission(&id).await;
    assert_eq!(m["state"], "aborted");
    let events: Vec<&str> =
        m["recent_events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["mission.started", "mission.paused", "mission.paused", "mission.resumed", "mission.aborted"]);
    let executor = server.executors().await;
    assert_eq!(executor["executors"][0]["active_mission_count"], 0);
}

#[tokio::test]
async fn controls_on_unknown_and_offline_missions() {
    let server = TestServer::start().await;
    for action in ["pause", "resume", "abort"] {
        post(&server, &format!("/api/v1/missions/m-nope/{action}"), json!(null)).await.assert_error(404, "not_found");
    }
    let (e, ws, id) = running(&server).await;
    ws.close().await;
    server.eventually(&format!("/api/v1/executors/{}", e.id), "disconnected", |b| b["connected"] == false).await;
    post(&server, &format!("/api/v1/missions/{id}/pause"), json!(null))
        .await
        .assert_error(409, "executor_not_connected");
    assert_eq!(server.mission(&id).await["state"], "running");
    // Abort is authoritative even offline.
    let r = post(&server, &format!("/api/v1/missions/{id}/abort"), json!(null)).await;
    assert_eq!((&r.body["state"], &r.body["delivered"]), (&json!("aborted"), &json!(false)), "{}", r.body);
    assert!(r.body["note"].as_str().unwrap().contains("no live socket"), "{}", r.body);
    assert_eq!(server.mission(&id).await["state"], "aborted");
}

/// Issue 12, finding 3: pause and resume used to answer `202 delivered: true` for an executor that has
/// no pause at all, and resuming a mission that never started put it in `running`.
/// Drop-in: an executor written for upstream says nothing about controls and handles the frames the
/// contract names. Pause then resume answer 202 and reach it, as upstream does; serve says it cannot
/// confirm they were acted on. (Refusing them with `control_unsupported` broke such executors.)
#[tokio::test]
async fn an_executor_that_declares_nothing_is_paused_and_resumed_as_the_contract_says() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl"]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    for (action, state, event) in [("pause", "paused", "mission.paused"), ("resume", "running", "mission.resumed")] {
        let r = post(&server, &format!("/api/v1/missions/{id}/{action}"), json!(null)).await;
        assert_eq!(
            (r.status, &r.body["state"], &r.body["delivered"], &r.body["confirmed"]),
            (202, &json!(state), &json!(true), &json!(false)),
            "{}",
            r.body
        );
        assert!(r.body["note"].as_str().unwrap().contains("x-pause-resume"), "{}", r.body);
        assert_eq!(ws.next_pushed().await["event"], event);
        assert_eq!(server.mission(&id).await["state"], state);
    }
    let r = post(&server, &format!("/api/v1/missions/{id}/abort"), json!(null)).await;
    assert_eq!(
        (r.status, &r.body["delivered"], &r.body["confirmed"]),
        (202, &json!(true), &json!(false)),
        "{}",
        r.body
    );
    assert!(r.body["note"].as_str().unwrap().contains("x-abort"), "{}", r.body);
    assert_eq!(ws.next_pushed().await["event"], "mission.aborted");
}

/// Honest where serve knows: an executor that declares it cannot pause gets neither pause nor resume
/// (409 `control_unsupported`, resume included, nothing sent, the mission as it was); its abort is still
/// final in serve's record.
#[tokio::test]
async fn controls_an_executor_declares_it_cannot_carry_out_are_refused() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl", "x-no-pause-resume"]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    for action in ["pause", "resume"] {
        let message = post(&server, &format!("/api/v1/missions/{id}/{action}"), json!(null))
            .await
            .assert_error(409, "control_unsupported");
        assert!(message.contains("declares x-no-pause-resume") && message.contains("stays running"), "{message}");
    }
    assert_eq!(server.mission(&id).await["state"], "running");
    let r = post(&server, &format!("/api/v1/missions/{id}/abort"), json!(null)).await;
    assert_eq!(
        (r.status, &r.body["state"], &r.body["confirmed"]),
        (202, &json!("aborted"), &json!(false)),
        "{}",
        r.body
    );
    // Nothing but the abort was sent: the first frame pushed is it.
    assert_eq!(ws.next_pushed().await["event"], "mission.aborted");
}

#[tokio::test]
async fn a_resume_returns_a_mission_to_the_state_it_was_paused_from() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl", "x-pause-resume"]).await;
    let id = dispatch_to(&server, &mut e).await;
    let r = post(&server, &format!("/api/v1/missions/{id}/pause"), json!(null)).await;
    assert_eq!(r.body["state"], "paused", "{}", r.body);
    let r = post(&server, &format!("/api/v1/missions/{id}/resume"), json!(null)).await;
    assert_eq!(r.body["state"], "assigned", "never started: back to assigned, {}", r.body);
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "Proceed?"})).await;
    assert_eq!(post(&server, &format!("/api/v1/missions/{id}/pause"), json!(null)).await.body["state"], "paused");
    let r = post(&server, &format!("/api/v1/missions/{id}/resume"), json!(null)).await;
    assert_eq!(r.body["state"], "hitl-required", "still waiting for its answer, {}", r.body);
    let r = post(&server, &format!("/api/v1/missions/{id}/hitl_response"), json!({"hitl_id": "h-1", "response": "go"}))
        .await;
    assert_eq!((r.status, &r.body["state"]), (202, &json!("running")), "{}", r.body);
}
