//! Issue 38: retry policies. A failure the policy lists ends only the mission's attempt: the same
//! mission goes to another executor after its wait, the first one is told to abort and can no longer
//! end it, and the read shows every attempt; an unlisted reason, or the last attempt, fails it.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::support::executor::{Answer, ExecSocket, ScriptedExecutor};
use crate::support::{dispatch_body, mission_id, TestServer};

fn at(v: &Value) -> DateTime<Utc> {
    aiwg_contract::clock::parse(v.as_str().unwrap_or_else(|| panic!("a time, not {v}"))).unwrap()
}

/// Two executors that both fit, and a mission with `retry` (and `timeouts`) dispatched to one of them:
/// (the one that got it, its socket, the other, its socket, the mission).
pub(crate) async fn two_and_a_mission(
    server: &TestServer,
    retry: Value,
    timeouts: Value,
) -> ((ScriptedExecutor, ExecSocket), (ScriptedExecutor, ExecSocket), String) {
    let a = ScriptedExecutor::online(server, &["x-abort", "x-retry-pool"]).await;
    let b = ScriptedExecutor::online(server, &["x-abort", "x-retry-pool"]).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["capabilities"] = json!(["x-retry-pool"]);
    body["retry"] = retry;
    if !timeouts.is_null() {
        body["timeouts"] = timeouts;
    }
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let (mut first, second) = if r.body["executor_id"] == json!(a.0.id) { (a, b) } else { (b, a) };
    first.0.next_dispatch().await;
    first.1.ack("mission.started", &id, json!({"state": "running"})).await;
    (first, second, id)
}

/// The executor comes back without the mission: the resync says it lost it.
pub(crate) async fn lose(server: &TestServer, e: &ScriptedExecutor) -> ExecSocket {
    let mut ws = e.connect(server).await;
    let frame = ws.envelope("executor.resync", None, json!({"owned_mission_ids": [], "protocol_version": "1.0.0"}));
    let answer = ws.send_json(&frame).await;
    assert_eq!(answer["ack"], true, "{answer}");
    ws
}

async fn events_of(server: &TestServer, id: &str) -> Vec<Value> {
    let r = server.client.get(&format!("/api/v1/events?follow=false&since=0&mission_id={id}&limit=1000")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["events"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_mission_its_executor_lost_is_retried_on_another_and_ends_there() {
    let server = TestServer::start().await;
    let retry = json!({"max_attempts": 3, "on": ["executor_lost"], "initial_interval_s": 0.3});
    let ((first, _old), (mut second, mut second_ws), id) = two_and_a_mission(&server, retry, json!(null)).await;
    let mut first_ws = lose(&server, &first).await;

    // The same mission goes to the other executor, once its wait is over.
    let again = second.next_dispatch().await;
    assert_eq!(again.body["mission_id"], json!(id));
    let abort = first_ws.next_pushed().await;
    assert_eq!((abort["event"].as_str(), abort["mission_id"].as_str()), (Some("mission.aborted"), Some(id.as_str())));
    assert_eq!(abort["data"]["reason"], "executor_lost");
    second_ws.ack("mission.started", &id, json!({"state": "running"})).await;

    // The first executor's late word is recorded, and cannot end it.
    let late = first_ws.event("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    assert_eq!(late["ack"], true, "{late}");
    assert_eq!(server.mission(&id).await["state"], "running");
    second_ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;

    let m = server.mission(&id).await;
    assert_eq!((m["state"].as_str(), m["executor_id"].as_str()), (Some("done"), Some(second.id.as_str())));
    let attempts = m["attempts"].as_array().expect("the attempts, shown");
    assert_eq!(attempts.len(), 2, "{m}");
    assert_eq!(
        (attempts[0]["attempt"].as_u64(), attempts[0]["executor_id"].as_str()),
        (Some(1), Some(first.id.as_str()))
    );
    assert_eq!(attempts[0]["reason"], "executor_lost");
    assert_eq!(
        (attempts[1]["attempt"].as_u64(), attempts[1]["executor_id"].as_str()),
        (Some(2), Some(second.id.as_str()))
    );
    assert_eq!(attempts[1]["reason"], "done");
    // The read and the listing say which attempt it is on (the first says nothing).
    let listed = server.client.get("/api/v1/missions").await.body;
    let item = listed["missions"].as_array().unwrap().iter().find(|i| i["mission_id"] == json!(id)).cloned();
    assert_eq!((m["attempt"].as_u64(), item.map(|i| i["attempt"].clone())), (Some(2), Some(json!(2))), "{listed}");
    let waited = (at(&attempts[0]["retry_at"]) - at(&attempts[0]["ended_at"])).num_milliseconds();
    assert!((100..=300).contains(&waited), "the first retry waits initial_interval_s from its decision: {waited} ms");

    // In the log: the attempt's end (a suspension, the mission queued again), the next one's start.
    let events = events_of(&server, &id).await;
    let said =
        |event: &str| -> Vec<Value> { events.iter().filter(|e| e["envelope"]["event"] == event).cloned().collect() };
    let ends = said("mission.suspended");
    assert_eq!(ends.len(), 1);
    assert_eq!(
        (ends[0]["envelope"]["data"]["attempt"].as_u64(), ends[0]["envelope"]["data"]["reason"].as_str()),
        (Some(1), Some("executor_lost"))
    );
    let starts = said("mission.assigned");
    let next = starts.iter().find(|e| e["envelope"]["data"]["attempt"] == 2).expect("the second attempt's start");
    assert_eq!(next["envelope"]["executor_id"], json!(second.id));
    assert!(at(&next["received_at"]) >= at(&attempts[0]["retry_at"]), "handed out after its wait");
    assert_eq!(said("mission.completed").len(), 1, "one end: the second executor's");
    assert!(said("mission.failed").is_empty());
}

#[tokio::test]
async fn a_reason_the_policy_does_not_list_or_the_last_attempt_fails_the_mission() {
    let server = TestServer::start().await;
    for retry in
        [json!({"max_attempts": 3, "on": ["heartbeat_timeout"]}), json!({"max_attempts": 1, "on": ["executor_lost"]})]
    {
        let ((first, _old), (second, _second_ws), id) = two_and_a_mission(&server, retry.clone(), json!(null)).await;
        let _ws = lose(&server, &first).await;
        let m = server.eventually(&format!("/api/v1/missions/{id}"), "the failure", |m| m["state"] == "failed").await;
        assert_eq!(
            m["recent_events"].as_array().unwrap().last().unwrap()["data"]["reason"],
            "executor_lost",
            "{retry}"
        );
        assert_eq!(m["attempts"].as_array().map(Vec::len), Some(1), "{m}");
        let mut second = second;
        assert!(second.no_dispatch_pending(), "not retried: {retry}");
    }
}

/// A silent mission whose policy retries heartbeat timeouts goes to the other executor; the silent one
/// is told to abort it.
#[tokio::test]
async fn a_heartbeat_timeout_is_retried_on_another_executor() {
    let server = TestServer::start().await;
    let retry = json!({"max_attempts": 2, "on": ["heartbeat_timeout"], "initial_interval_s": 0});
    let ((_first, mut first_ws), (mut second, mut second_ws), id) =
        two_and_a_mission(&server, retry, json!({"heartbeat_s": 0.5})).await;
    let again = second.next_dispatch().await;
    assert_eq!(again.body["mission_id"], json!(id));
    let abort = first_ws.next_pushed().await;
    assert_eq!(
        (abort["event"].as_str(), abort["data"]["reason"].as_str()),
        (Some("mission.aborted"), Some("heartbeat_timeout"))
    );
    second_ws.ack("mission.started", &id, json!({"state": "running"})).await;
    second_ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let m = server.mission(&id).await;
    assert_eq!(m["state"], "done");
    let reasons: Vec<&str> = m["attempts"].as_array().unwrap().iter().map(|a| a["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, ["heartbeat_timeout", "done"]);
}

/// A retry waiting for its time is in the store: a restart hands it out when the time comes (or at
/// once, when it came while nobody could take it), once.
#[tokio::test]
async fn a_retry_waiting_for_its_time_survives_a_restart() {
    let server = TestServer::start_with(|c| c.hub.restart_grace_s = 600).await;
    let retry = json!({"max_attempts": 2, "on": ["executor_lost"], "initial_interval_s": 1.5});
    let ((first, old_ws), (mut second, second_ws), id) = two_and_a_mission(&server, retry, json!(null)).await;
    let mut first_ws = lose(&server, &first).await;
    server.eventually(&format!("/api/v1/missions/{id}"), "queued again", |m| m["state"] == "queued").await;
    // A late end from the attempt that was lost, while the next one waits: recorded, and it ends nothing.
    let late = first_ws.event("mission.failed", &id, json!({"state": "failed", "reason": "crashed"})).await;
    assert_eq!(late["ack"], true, "{late}");
    assert_ne!(server.mission(&id).await["state"], "failed");
    // Nobody may take the attempt before the restart, however late the restart comes on a loaded
    // machine: with no executor connected, its time passing leaves it waiting in the store.
    drop((old_ws, first_ws, second_ws));
    for e in [&first, &second] {
        let path = format!("/api/v1/executors/{}", e.id);
        server.eventually(&path, "executor disconnected", |b| b["connected"] == false).await;
    }
    let server = server.restart().await;
    let _second_ws = second.connect(&server).await;
    let again = second.next_dispatch().await;
    assert_eq!(again.body["mission_id"], json!(id));
    let m = server.eventually(&format!("/api/v1/missions/{id}"), "assigned", |m| m["state"] == "assigned").await;
    let attempts = m["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{m}");
    assert_eq!(attempts[1]["executor_id"], json!(second.id), "the executor that lost it is passed over");
    assert!(second.no_dispatch_pending(), "handed out once");
}

/// Policies the schema does not accept are refused before anything is stored.
#[tokio::test]
async fn malformed_retry_policies_are_refused() {
    let server = TestServer::start().await;
    for retry in [
        json!({}),
        json!({"max_attempts": 0}),
        json!({"max_attempts": 21}),
        json!({"max_attempts": 2, "on": ["operator_request"]}),
        json!({"max_attempts": 2, "backoff": 0.5}),
        json!({"max_attempts": 2, "initial_interval_s": -1}),
        json!({"max_attempts": 2, "on": ["executor_lost", "executor_lost"]}),
        json!({"max_attempts": 2, "forever": true}),
        json!({"max_attempts": 2, "exit_codes": ["75"]}),
        json!({"max_attempts": 2, "exit_codes": [75, 75]}),
    ] {
        let id = mission_id();
        let mut body = dispatch_body(&id);
        body["retry"] = retry.clone();
        body["queue"] = json!(true);
        server.client.post("/api/v1/sessions/s/dispatch", &body).await.assert_error(400, "schema_violation");
        assert_eq!(server.client.get(&format!("/api/v1/missions/{id}")).await.status, 404, "{retry}");
    }
}

/// An executor's failure with an exit code the policy lists ends only the attempt: serve records the
/// attempt's end in its stead (acknowledged with that event's seq) and the other executor gets the
/// mission; an exit code it does not list fails the mission as ever.
#[tokio::test]
async fn a_listed_exit_code_is_retried_and_another_is_not() {
    let server = TestServer::start().await;
    let retry = json!({"max_attempts": 3, "exit_codes": [75], "initial_interval_s": 0});
    let ((first, mut first_ws), (mut second, mut second_ws), id) = two_and_a_mission(&server, retry, json!(null)).await;
    let failed = json!({"state": "failed", "exit_code": 75, "error": "temporary failure"});
    let seq = first_ws.ack("mission.failed", &id, failed).await;
    assert_eq!(second.next_dispatch().await.body["mission_id"], json!(id));

    let events = events_of(&server, &id).await;
    let ended = events.iter().find(|e| e["seq"] == seq).expect("the acknowledged event");
    assert_eq!(ended["envelope"]["event"], "mission.suspended", "{ended}");
    assert_eq!(ended["envelope"]["executor_id"], json!(first.id));
    let data = &ended["envelope"]["data"];
    assert_eq!((data["reason"].as_str(), data["exit_code"].as_i64()), (Some("exit_code"), Some(75)));
    assert_eq!((data["error"].as_str(), data["attempt"].as_u64()), (Some("temporary failure"), Some(1)));
    assert!(
        events.iter().all(|e| e["envelope"]["event"] != "mission.failed"),
        "the executor's failure is not the mission's"
    );

    second_ws.ack("mission.started", &id, json!({"state": "running"})).await;
    second_ws.ack("mission.failed", &id, json!({"state": "failed", "exit_code": 1, "error": "tests fail"})).await;
    let m = server.mission(&id).await;
    assert_eq!((m["state"].as_str(), m["exit_code"].as_i64()), (Some("failed"), Some(1)), "exit code 1 is not listed");
    let reasons: Vec<&str> = m["attempts"].as_array().unwrap().iter().map(|a| a["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, ["exit_code", "failed: tests fail"]);
}

/// A dispatch for the retry pool, with `retry`.
fn pooled(id: &str, retry: Value) -> Value {
    let mut body = dispatch_body(id);
    body["executor_filter"]["capabilities"] = json!(["x-retry-pool"]);
    body["retry"] = retry;
    body
}

#[tokio::test]
async fn a_dispatch_nobody_took_waits_for_its_next_attempt_when_its_policy_lists_forward_failed() {
    let server = TestServer::start().await;
    let (mut a, _a_ws) = ScriptedExecutor::online(&server, &["x-retry-pool"]).await;
    a.answer_with(Answer::Status(503));
    let id = mission_id();
    let retry = json!({"max_attempts": 3, "on": ["forward_failed"], "initial_interval_s": 0.2});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &pooled(&id, retry)).await;
    assert_eq!((r.status, r.body["status"].as_str()), (202, Some("queued")), "{}", r.body);
    assert!(r.body["queued_reason"].as_str().unwrap().contains("503"), "{}", r.body);
    a.next_dispatch().await;
    let m = server.mission(&id).await;
    assert_eq!(m["state"], "queued", "{m}");
    assert_eq!(m["attempts"][0]["reason"], "forward_failed", "{m}");
    assert_eq!(m["attempts"][0]["executor_id"], json!(a.id));

    // Another executor joins: the next attempt goes to it, passing over the one that refused.
    let (mut b, mut b_ws) = ScriptedExecutor::online(&server, &["x-retry-pool"]).await;
    assert_eq!(b.next_dispatch().await.body["mission_id"], json!(id));
    b_ws.ack("mission.started", &id, json!({"state": "running"})).await;
    b_ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let m = server.mission(&id).await;
    assert_eq!((m["state"].as_str(), m["executor_id"].as_str()), (Some("done"), Some(b.id.as_str())), "{m}");
    assert_eq!(m["attempts"].as_array().map(Vec::len), Some(2), "{m}");

    // The last attempt refused by all fails the mission as a dispatch without a policy would.
    b.answer_with(Answer::Status(503));
    let last = mission_id();
    let retry = json!({"max_attempts": 2, "on": ["forward_failed"], "initial_interval_s": 0.1});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &pooled(&last, retry)).await;
    assert_eq!(r.body["status"], "queued", "{}", r.body);
    let m = server
        .eventually(&format!("/api/v1/missions/{last}"), "the last attempt's failure", |m| m["state"] == "failed")
        .await;
    let events = events_of(&server, &last).await;
    let ended: Vec<&str> = events.iter().filter_map(|e| e["envelope"]["data"]["reason"].as_str()).collect();
    assert_eq!(ended, ["forward_failed", "executor_forward_failed"], "{m}");

    // A policy that does not list it: the refusal is the dispatch's answer.
    let unlisted = mission_id();
    let retry = json!({"max_attempts": 3, "on": ["executor_lost"]});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &pooled(&unlisted, retry)).await;
    r.assert_error(502, "executor_forward_failed");
    assert_eq!(server.mission(&unlisted).await["state"], "failed");
}

/// The executor of an abandoned attempt comes back still holding the mission: its resync is answered
/// with an abort, and nothing it says ends the mission, which its next attempt's executor finishes.
#[tokio::test]
async fn an_executor_back_with_an_abandoned_attempt_is_told_to_abort_it_and_cannot_end_it() {
    let server = TestServer::start_with(|c| {
        c.hub.disconnect_grace_s = 0;
        c.hub.restart_grace_s = 0;
    })
    .await;
    let retry = json!({"max_attempts": 2, "on": ["executor_disconnected"], "initial_interval_s": 0.1});
    let ((first, first_ws), (mut second, mut second_ws), id) = two_and_a_mission(&server, retry, json!(null)).await;
    first_ws.close().await;
    assert_eq!(second.next_dispatch().await.body["mission_id"], json!(id), "the next attempt, on the other");
    second_ws.ack("mission.started", &id, json!({"state": "running"})).await;

    let mut back = first.connect(&server).await;
    let frame = back.envelope("executor.resync", None, json!({"owned_mission_ids": [id], "protocol_version": "1.0.0"}));
    assert_eq!(back.send_json(&frame).await["ack"], true);
    let abort = back.next_pushed().await;
    assert_eq!((abort["event"].as_str(), abort["mission_id"].as_str()), (Some("mission.aborted"), Some(id.as_str())));
    assert_eq!(abort["data"]["reason"], "not_owned", "{abort}");
    // Its late completion is recorded, as its word about its own attempt, and does not end the mission.
    let late =
        back.event("mission.completed", &id, json!({"state": "done", "exit_code": 0, "summary": "all green"})).await;
    assert_eq!(late["ack"], true, "{late}");
    let seq = late["seq"].as_i64().expect("recorded under a sequence number");
    let item = events_of(&server, &id).await.into_iter().find(|e| e["seq"] == json!(seq)).expect("in the log");
    let recorded = &item["envelope"];
    assert_eq!(
        (recorded["event"].as_str(), recorded["executor_id"].as_str()),
        (Some("mission.progress"), Some(first.id.as_str()))
    );
    assert_eq!(recorded["data"]["phase"], "late_end", "{recorded}");
    assert_eq!(
        recorded["data"]["late_end"],
        json!({"attempt": 1, "event": "mission.completed", "data": {"state": "done", "exit_code": 0, "summary": "all green"}})
    );
    // Only an earlier attempt's executor is heard so: a stranger's end of the mission is refused.
    let (_stranger, mut stranger_ws) = ScriptedExecutor::online(&server, &[]).await;
    let refused = stranger_ws.event("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    assert_eq!(refused["error"], "forbidden", "{refused}");
    let m = server.mission(&id).await;
    assert_eq!((m["state"].as_str(), m["executor_id"].as_str()), (Some("running"), Some(second.id.as_str())), "{m}");
    second_ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let attempts: Vec<Value> = server.mission(&id).await["attempts"].as_array().unwrap().clone();
    let reasons: Vec<&str> = attempts.iter().filter_map(|a| a["reason"].as_str()).collect();
    assert_eq!(reasons, ["executor_disconnected", "done"]);
}
