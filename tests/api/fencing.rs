//! Issue 53, item 6 (and the late-end bound of item 10): attempts are fenced. A retry never hands the
//! mission back to the executor of an attempt that may still run until it confirmed the attempt
//! stopped; an executor declaring `x-attempts` is told each attempt's number and names it, so that its
//! word about an earlier attempt never ends the current one; an abandoned attempt ends late once.

use serde_json::{json, Value};

use crate::retries::{lose, two_and_a_mission};
use crate::support::executor::{ExecSocket, ScriptedExecutor};
use crate::support::{dispatch_body, mission_id, TestServer};

/// One executor (`capabilities`, and a pool of its own) and a mission on it whose silence is retried:
/// the executor, its socket, the mission, and the first dispatch's body.
async fn a_silent_mission_with_one_executor(
    server: &TestServer,
    capabilities: &[&str],
) -> (ScriptedExecutor, ExecSocket, String, Value) {
    let pool = format!("x-pool-{}", &mission_id()[2..10]);
    let caps: Vec<&str> = capabilities.iter().copied().chain([pool.as_str(), "x-abort"]).collect();
    let (mut e, mut ws) = ScriptedExecutor::online(server, &caps).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["capabilities"] = json!([pool]);
    body["retry"] = json!({"max_attempts": 2, "on": ["heartbeat_timeout"], "initial_interval_s": 0.1});
    body["timeouts"] = json!({"heartbeat_s": 0.3});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let first = e.next_dispatch().await.body;
    ws.ack("mission.started", &id, json!({"state": "running", "attempt": 1})).await;
    // It goes silent: the heartbeat ends its attempt, and it is told to abort it.
    let abort = ws.next_pushed().await;
    assert_eq!((abort["event"].as_str(), abort["mission_id"].as_str()), (Some("mission.aborted"), Some(id.as_str())));
    assert_eq!(abort["data"]["reason"], "heartbeat_timeout", "{abort}");
    (e, ws, id, first)
}

async fn late_ends(server: &TestServer, id: &str) -> Vec<Value> {
    let r = server.client.get(&format!("/api/v1/events?follow=false&since=0&mission_id={id}&limit=1000")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let events = r.body["events"].as_array().unwrap().clone();
    events.into_iter().filter(|e| e["envelope"]["data"]["phase"] == "late_end").map(|e| e["envelope"].clone()).collect()
}

/// The field finding: with one executor, attempt 2 went back to it a second after the abort, and its
/// `mission.completed` of attempt 1 ended attempt 2, which never started. Now attempt 2 waits, saying
/// for what, until the executor's word about attempt 1 (here its late completion, recorded as such)
/// confirms that it stopped; only then is the executor handed attempt 2, which it runs and ends.
#[tokio::test]
async fn a_retry_goes_back_to_the_same_executor_only_once_it_confirmed_the_old_attempt_stopped() {
    let server = TestServer::start().await;
    let (mut e, mut ws, id, first) = a_silent_mission_with_one_executor(&server, &[]).await;
    assert!(first.get("attempt").is_none(), "an executor written for upstream gets the body it knows: {first}");

    let path = format!("/api/v1/missions/{id}");
    let waiting = server
        .eventually(&path, "the retry waiting for the old attempt's stop", |m| {
            m["queued_reason"].as_str().is_some_and(|r| r.contains("has not confirmed that attempt 1 stopped"))
        })
        .await;
    assert_eq!((waiting["state"].as_str(), waiting["attempt"].as_u64()), (Some("queued"), Some(2)), "{waiting}");
    assert!(e.no_dispatch_pending(), "not handed back before the executor confirmed");

    let late = ws.event("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    assert_eq!(late["ack"], true, "{late}");
    let second = e.next_dispatch().await;
    assert_eq!(second.body["mission_id"], json!(id));
    let m = server.mission(&id).await;
    assert_eq!(
        (m["state"].as_str(), m["attempt"].as_u64()),
        (Some("assigned"), Some(2)),
        "not ended by attempt 1: {m}"
    );
    let recorded = late_ends(&server, &id).await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["data"]["late_end"]["attempt"], 1);

    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let m = server.mission(&id).await;
    let reasons: Vec<&str> = m["attempts"].as_array().unwrap().iter().filter_map(|a| a["reason"].as_str()).collect();
    assert_eq!((m["state"].as_str(), reasons), (Some("done"), vec!["heartbeat_timeout", "done"]), "{m}");
}

/// An executor declaring `x-attempts` is told which attempt it runs and names it in its events: after
/// its resync without the mission confirms that attempt 1 stopped, it is handed attempt 2, and its
/// word about attempt 1 (an end queued before it restarted) neither ends nor starts attempt 2.
#[tokio::test]
async fn an_executor_declaring_x_attempts_is_told_its_attempt_and_a_word_about_another_is_not_the_current_ones() {
    let server = TestServer::start().await;
    let (mut e, _old_ws, id, first) = a_silent_mission_with_one_executor(&server, &["x-attempts"]).await;
    assert_eq!(first["attempt"], 1, "{first}");

    let mut ws = lose(&server, &e).await;
    let second = e.next_dispatch().await.body;
    assert_eq!((second["mission_id"].as_str(), second["attempt"].as_u64()), (Some(id.as_str()), Some(2)), "{second}");

    let late = ws.event("mission.completed", &id, json!({"state": "done", "exit_code": 0, "attempt": 1})).await;
    assert_eq!(late["ack"], true, "recorded as attempt 1's late end: {late}");
    let stale = ws.event("mission.started", &id, json!({"state": "running", "attempt": 1})).await;
    assert_eq!(stale["error"], "illegal_transition", "{stale}");
    assert!(stale["message"].as_str().unwrap().contains("names attempt 1"), "{stale}");
    let m = server.mission(&id).await;
    assert_eq!((m["state"].as_str(), m["attempt"].as_u64()), (Some("assigned"), Some(2)), "{m}");

    ws.ack("mission.started", &id, json!({"state": "running", "attempt": 2})).await;
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0, "attempt": 2})).await;
    assert_eq!(server.mission(&id).await["state"], "done");
    let recorded = late_ends(&server, &id).await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["data"]["late_end"]["attempt"], 1);
    assert_eq!(recorded[0]["data"]["late_end"]["data"]["attempt"], 1, "what it said, kept");
}

/// The executor of an abandoned attempt ends it late once: its second late end is refused, while the
/// mission runs elsewhere and after it ended, and the log keeps one record.
#[tokio::test]
async fn an_abandoned_attempt_ends_late_once() {
    let server = TestServer::start().await;
    let retry = json!({"max_attempts": 2, "on": ["executor_lost"], "initial_interval_s": 0.1});
    let ((first, _), (mut second, mut second_ws), id) = two_and_a_mission(&server, retry, json!(null)).await;
    let mut first_ws = lose(&server, &first).await;
    assert_eq!(second.next_dispatch().await.body["mission_id"], json!(id));
    second_ws.ack("mission.started", &id, json!({"state": "running"})).await;

    let late = first_ws.event("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    assert_eq!(late["ack"], true, "{late}");
    for (event, data) in [
        ("mission.failed", json!({"state": "failed", "exit_code": 1})),
        ("mission.completed", json!({"state": "done", "exit_code": 0})),
    ] {
        let again = first_ws.event(event, &id, data).await;
        assert_eq!(again["error"], "illegal_transition", "{again}");
        assert!(again["message"].as_str().unwrap().contains("already ended late"), "{again}");
    }
    second_ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let after = first_ws.event("mission.aborted", &id, json!({"state": "aborted"})).await;
    assert_eq!(after["error"], "illegal_transition", "{after}");
    assert_eq!(late_ends(&server, &id).await.len(), 1);
    assert_eq!(server.mission(&id).await["state"], "done");
}

/// `attempt` is serve's to set: a dispatch that carries it is refused, and nothing is stored.
#[tokio::test]
async fn a_dispatch_naming_its_attempt_is_refused() {
    let server = TestServer::start().await;
    let _online = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["attempt"] = json!(2);
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    r.assert_error(400, "schema_violation");
    assert_eq!(r.body["details"][0]["instance_path"], "/attempt", "{}", r.body);
    assert_eq!(server.client.get(&format!("/api/v1/missions/{id}")).await.status, 404);
}
