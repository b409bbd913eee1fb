//! Issue 38: missions that never hang. Each timeout (schedule-to-start, start-to-close, heartbeat) fires
//! once, at its time within the look's tolerance, records its reason, and tells the executor to abort;
//! paused time does not count; the deadlines survive a restart (they are derived from the store).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::cli::{cli, stdout};
use crate::support::executor::{ExecSocket, ScriptedExecutor};
use crate::support::{dispatch_body, mission_id, TestServer};

/// How late a timeout may fire: the look that finds it due runs at the deadline, plus a commit.
const LATE: i64 = 1_500;

fn at(v: &Value) -> DateTime<Utc> {
    aiwg_contract::clock::parse(v.as_str().unwrap_or_else(|| panic!("a time, not {v}"))).unwrap()
}

fn ms(from: &Value, to: &Value) -> i64 {
    (at(to) - at(from)).num_milliseconds()
}

/// Dispatches `id` to `e` (or to the queue when `e` is none) with `timeouts`; returns the 202's body.
async fn dispatch(server: &TestServer, id: &str, e: Option<&ScriptedExecutor>, timeouts: Value) -> Value {
    let mut body = dispatch_body(id);
    body["timeouts"] = timeouts;
    match e {
        Some(e) => body["executor_filter"]["executor_id"] = json!(e.id),
        None => body["queue"] = json!(true),
    }
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    r.body
}

async fn ended(server: &TestServer, id: &str) -> Value {
    server.eventually(&format!("/api/v1/missions/{id}"), "the mission's end", |m| m["completed_at"].is_string()).await
}

/// The mission's events of type `event` in the whole log.
async fn events_of(server: &TestServer, id: &str, event: &str) -> Vec<Value> {
    let r = server.client.get(&format!("/api/v1/events?follow=false&since=0&mission_id={id}&limit=1000")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let all = r.body["events"].as_array().unwrap().iter().map(|e| e["envelope"].clone());
    all.filter(|e| e["event"] == event).collect()
}

/// Its end is the one event of its kind, serve's, with the timeout's reason.
async fn ended_once_for(server: &TestServer, id: &str, event: &str, reason: &str) {
    let ends = events_of(server, id, event).await;
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["data"]["reason"], reason, "{ends:?}");
}

async fn running_with(server: &TestServer, caps: &[&str], timeouts: Value) -> (ScriptedExecutor, ExecSocket, String) {
    let (mut e, mut ws) = ScriptedExecutor::online(server, caps).await;
    let id = mission_id();
    dispatch(server, &id, Some(&e), timeouts).await;
    e.next_dispatch().await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    (e, ws, id)
}

/// A queued mission nobody could take fails at its deadline and leaves the queue; one the executor
/// received and never started fails too, and the executor is told to abort it; one started in time
/// does not.
#[tokio::test]
async fn schedule_to_start_fails_what_did_not_start_in_time() {
    let server = TestServer::start().await;
    let queued = mission_id();
    let answer = dispatch(&server, &queued, None, json!({"schedule_to_start_s": 0.5})).await;
    assert_eq!(answer["status"], "queued");
    let m = ended(&server, &queued).await;
    assert_eq!((m["state"].as_str(), m["error"].as_str()), (Some("failed"), Some("schedule-to-start timed out")));
    let waited = ms(&m["created_at"], &m["completed_at"]);
    assert!((500..500 + LATE).contains(&waited), "failed {waited} ms after its dispatch");
    ended_once_for(&server, &queued, "mission.failed", "schedule_to_start_timeout").await;
    assert_eq!(server.client.get("/api/v1/overview").await.body["queue_depth"], 0);

    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["x-abort"]).await;
    let (started, never) = (mission_id(), mission_id());
    dispatch(&server, &started, Some(&e), json!({"schedule_to_start_s": 0.5})).await;
    e.next_dispatch().await;
    ws.ack("mission.started", &started, json!({"state": "running"})).await;
    dispatch(&server, &never, Some(&e), json!({"schedule_to_start_s": 0.5})).await;
    e.next_dispatch().await;
    let m = ended(&server, &never).await;
    assert_eq!(m["state"], "failed");
    ended_once_for(&server, &never, "mission.failed", "schedule_to_start_timeout").await;
    let abort = ws.next_pushed().await;
    assert_eq!(
        (abort["event"].as_str(), abort["mission_id"].as_str()),
        (Some("mission.aborted"), Some(never.as_str()))
    );
    assert_eq!(
        (abort["data"]["aborted_by"].as_str(), abort["data"]["reason"].as_str()),
        (Some("system"), Some("schedule_to_start_timeout"))
    );
    assert_eq!(
        server.mission(&started).await["state"],
        "running",
        "started in time, its deadline passed with no effect"
    );
}

/// A run that goes on too long is aborted as an operator would abort it, the time it spent paused not
/// counted; the executor is told.
#[tokio::test]
async fn start_to_close_aborts_a_long_run_without_counting_its_pause() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) =
        running_with(&server, &["x-pause-resume", "x-abort"], json!({"start_to_close_s": 1.0})).await;
    let asked_at = Instant::now();
    let r = server.client.post(&format!("/api/v1/missions/{id}/pause"), &json!({})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(ws.next_pushed().await["event"], "mission.paused");
    // Serve's pause began between the ask and the executor being told, and ended between the resume's
    // ask and its answer: it lasted at least `surely` and at most `at_most`.
    let surely_from = Instant::now();
    tokio::time::sleep(Duration::from_millis(1_200)).await; // the pause lasts past the whole limit
    let surely = surely_from.elapsed().as_millis() as i64;
    let r = server.client.post(&format!("/api/v1/missions/{id}/resume"), &json!({})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let at_most = asked_at.elapsed().as_millis() as i64;
    assert_eq!(ws.next_pushed().await["event"], "mission.resumed");
    assert_eq!(server.mission(&id).await["state"], "running", "the pause did not count");
    let m = ended(&server, &id).await;
    assert_eq!(m["state"], "aborted");
    let ran = ms(&m["created_at"], &m["completed_at"]);
    assert!(
        (1_000 + surely..1_000 + at_most + LATE).contains(&ran),
        "aborted after {ran} ms, of them paused at least {surely} and at most {at_most}"
    );
    ended_once_for(&server, &id, "mission.aborted", "start_to_close_timeout").await;
    let abort = ws.next_pushed().await;
    assert_eq!(
        (abort["event"].as_str(), abort["data"]["reason"].as_str()),
        (Some("mission.aborted"), Some("start_to_close_timeout"))
    );
}

/// Progress keeps a mission alive; the read says how long it has been silent; silence past the
/// heartbeat fails it, and the executor is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_fails_a_silent_mission_and_reads_show_the_silence() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) = running_with(&server, &["x-abort"], json!({"heartbeat_s": 0.8})).await;
    let until = Instant::now() + Duration::from_millis(2_000);
    for step in 0.. {
        if Instant::now() >= until {
            break;
        }
        ws.ack("mission.progress", &id, json!({"iteration": step})).await;
        tokio::time::sleep(Duration::from_millis(200)).await; // the agent's pace, well inside the heartbeat
    }
    let m = server.mission(&id).await;
    assert_eq!(m["state"], "running", "two seconds of progress every 200 ms outlived a 0.8 s heartbeat: {m}");
    assert_eq!(m["timeouts"], json!({"heartbeat_s": 0.8}));
    let last_heard = m["updated_at"].clone();
    let shown = stdout(&cli(&server.base, &["missions", "show", &id], &[]).await);
    assert!(shown.contains("silent for") && shown.contains("heartbeat 0.8s"), "{shown}");
    let m = ended(&server, &id).await;
    assert_eq!((m["state"].as_str(), m["error"].as_str()), (Some("failed"), Some("heartbeat timed out")));
    let silence = ms(&last_heard, &m["completed_at"]);
    assert!((800..800 + LATE).contains(&silence), "failed after {silence} ms of silence");
    ended_once_for(&server, &id, "mission.failed", "heartbeat_timeout").await;
    let abort = ws.next_pushed().await;
    assert_eq!(
        (abort["event"].as_str(), abort["data"]["reason"].as_str()),
        (Some("mission.aborted"), Some("heartbeat_timeout"))
    );
    let late = ws.event("mission.progress", &id, json!({"iteration": 1_000_000})).await;
    assert!(late.get("seq").is_none(), "a late word is not recorded: {late}");
    assert_eq!(server.mission(&id).await["state"], "failed", "and changes nothing");
}

/// `[timeouts]` applies to a dispatch that names none; a dispatch's own overrides it, one by one.
#[tokio::test]
async fn the_configured_defaults_apply_where_a_dispatch_names_none() {
    let server = TestServer::start_with(|c| {
        c.timeouts.heartbeat_s = 0.5;
        c.timeouts.start_to_close_s = 3600.0;
    })
    .await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let (defaulted, own) = (mission_id(), mission_id());
    dispatch(&server, &own, Some(&e), json!({"heartbeat_s": 600})).await;
    e.next_dispatch().await;
    ws.ack("mission.started", &own, json!({"state": "running"})).await;
    let mut body = dispatch_body(&defaulted);
    body["executor_filter"]["executor_id"] = json!(e.id);
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body).await.status, 202);
    e.next_dispatch().await;
    ws.ack("mission.started", &defaulted, json!({"state": "running"})).await;
    assert_eq!(server.mission(&defaulted).await["timeouts"], json!({"heartbeat_s": 0.5, "start_to_close_s": 3600.0}));
    let m = ended(&server, &defaulted).await;
    assert_eq!(m["state"], "failed");
    ended_once_for(&server, &defaulted, "mission.failed", "heartbeat_timeout").await;
    let m = server.mission(&own).await;
    assert_eq!(
        (m["state"].as_str(), &m["timeouts"]),
        (Some("running"), &json!({"heartbeat_s": 600.0, "start_to_close_s": 3600.0}))
    );
}

/// A deadline is derived from the store, not kept by a timer: a restart finds each one where it was,
/// and each fires once (the restart grace, a second here, is over by then).
#[tokio::test]
async fn every_timeout_fires_once_across_a_restart() {
    let server = TestServer::start_with(|c| c.hub.restart_grace_s = 1).await;
    let (_e, mut ws, silent) = running_with(&server, &[], json!({"heartbeat_s": 1.5})).await;
    ws.ack("mission.progress", &silent, json!({"summary": "last words"})).await;
    let last_heard = server.mission(&silent).await["updated_at"].clone();
    let (_f, long_ws, long) = running_with(&server, &[], json!({"start_to_close_s": 1.5})).await;
    let queued = mission_id();
    dispatch(&server, &queued, None, json!({"schedule_to_start_s": 1.5})).await;
    drop((ws, long_ws));
    let server = server.restart().await;

    let m = ended(&server, &silent).await;
    assert_eq!(m["state"], "failed");
    let silence = ms(&last_heard, &m["completed_at"]);
    assert!((1_500..1_500 + LATE).contains(&silence), "failed after {silence} ms of silence, a restart between");
    ended_once_for(&server, &silent, "mission.failed", "heartbeat_timeout").await;

    let m = ended(&server, &long).await;
    assert_eq!(m["state"], "aborted");
    let page = server.client.get(&format!("/api/v1/events?follow=false&since=0&mission_id={long}&limit=1000")).await;
    let events = page.body["events"].as_array().unwrap();
    let started = events.iter().find(|e| e["envelope"]["event"] == "mission.started").expect("its start");
    let ran = ms(&started["received_at"], &m["completed_at"]);
    assert!((1_500..1_500 + LATE).contains(&ran), "aborted after {ran} ms of running, a restart between");
    ended_once_for(&server, &long, "mission.aborted", "start_to_close_timeout").await;

    let m = ended(&server, &queued).await;
    assert_eq!(m["state"], "failed");
    let waited = ms(&m["created_at"], &m["completed_at"]);
    assert!((1_500..1_500 + LATE).contains(&waited), "failed {waited} ms after its dispatch, a restart between");
    ended_once_for(&server, &queued, "mission.failed", "schedule_to_start_timeout").await;
    assert_eq!(server.client.get("/api/v1/overview").await.body["queue_depth"], 0, "it left the queue");
}

/// Issue 53, item 13: nobody times out within `hub.restart_grace_s` of serve's start. A mission live
/// when serve started, silent past its heartbeat while serve was down, fails only once the grace is
/// over; one dispatched after the start keeps its own clocks and fails within the grace.
#[tokio::test]
async fn missions_live_when_serve_started_do_not_time_out_within_the_restart_grace() {
    const GRACE_MS: i64 = 3_000;
    let server = TestServer::start_with(|c| c.hub.restart_grace_s = 3).await;
    let (_e, ws, before) = running_with(&server, &[], json!({"heartbeat_s": 2})).await;
    drop(ws);
    let stopping = aiwg_contract::clock::now();
    let server = server.restart().await;
    let (_f, mut after_ws, after) = running_with(&server, &[], json!({"heartbeat_s": 0.3})).await;
    after_ws.ack("mission.progress", &after, json!({"summary": "then silence"})).await;

    let m = ended(&server, &after).await;
    assert_eq!(m["state"], "failed", "{m}");
    ended_once_for(&server, &after, "mission.failed", "heartbeat_timeout").await;
    let own = (at(&m["completed_at"]) - stopping).num_milliseconds();
    assert!(own < GRACE_MS, "a mission dispatched after the start keeps its own clocks: failed {own} ms after");

    let m = ended(&server, &before).await;
    assert_eq!(m["state"], "failed", "{m}");
    ended_once_for(&server, &before, "mission.failed", "heartbeat_timeout").await;
    let held = (at(&m["completed_at"]) - stopping).num_milliseconds();
    assert!((GRACE_MS..GRACE_MS + LATE).contains(&held), "failed {held} ms after serve stopped, within the grace");
}

/// Timeouts that are not positive numbers of seconds up to 30 days, or that name something else, are
/// refused before anything is stored.
#[tokio::test]
async fn malformed_timeouts_are_refused_and_nothing_is_stored() {
    let server = TestServer::start().await;
    for timeouts in [
        json!({"heartbeat_s": 0}),
        json!({"heartbeat_s": -1}),
        json!({"heartbeat_s": "5"}),
        json!({"start_to_close_s": 2_592_001}),
        json!({"schedule_to_start_s": null}),
        json!({"heartbeat": 5}),
        json!([5]),
        json!("5s"),
    ] {
        let id = mission_id();
        let mut body = dispatch_body(&id);
        body["timeouts"] = timeouts.clone();
        body["queue"] = json!(true);
        let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
        r.assert_error(400, "schema_violation");
        assert_eq!(server.client.get(&format!("/api/v1/missions/{id}")).await.status, 404, "{timeouts}");
    }
}
