//! Retention: a long stream into a store with a size cap; ended missions are compacted oldest first
//! until the store is under its cap, live missions keep every event, compacted missions keep what the
//! policy promises, and the event stream says where it can resume instead of skipping.

use serde_json::{json, Value};

use crate::support::{running_mission, ExecSocket, ScriptedExecutor, TestServer};

/// The cap: well under what the stream writes (about 2.5 MB of progress).
const CAP: u64 = 1 << 20;
const MISSIONS: usize = 12;
const PROGRESS: usize = 100;

async fn metric(server: &TestServer, name: &str) -> i64 {
    gauge(&server.client.get("/metrics").await.body, name)
}

/// One gauge of a `/metrics` body (text, which the test client hands back as a string value).
fn gauge(metrics: &serde_json::Value, name: &str) -> i64 {
    metrics
        .as_str()
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
}

/// A mission's events as kept, by name.
async fn kept(server: &TestServer, mission_id: &str) -> Vec<String> {
    let page = server.client.get(&format!("/api/v1/events?follow=false&limit=1000&mission_id={mission_id}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    page.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["envelope"]["event"].as_str().unwrap().to_owned())
        .collect()
}

/// `n` progress events of 2 KB each (what fills a store), each distinct (an identical one would be
/// taken for a resend).
async fn progress(socket: &mut ExecSocket, mission_id: &str, n: usize) {
    static SENT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    for _ in 0..n {
        let i = SENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        socket.ack("mission.progress", mission_id, json!({"summary": format!("{i} {}", "x".repeat(2048))})).await;
    }
}

#[tokio::test]
async fn a_store_given_a_cap_it_is_above_compacts_the_oldest_ended_missions_and_keeps_what_it_promises() {
    // Filled with no cap first; then the operator sets one and restarts serve.
    let server = TestServer::start_with(|c| {
        // Nothing is old enough to go by age: the cap alone decides.
        c.retention.keep_days = 30.0;
        c.retention.interval_s = 3600;
    })
    .await;
    let sqlite = server.config.store.database_url.is_empty();
    let (mut e, mut socket) = ScriptedExecutor::online(&server, &["hitl"]).await;
    let live = running_mission(&server, &mut e, &mut socket).await;
    let mut ended = Vec::new();
    for _ in 0..MISSIONS {
        let id = running_mission(&server, &mut e, &mut socket).await;
        progress(&mut socket, &id, PROGRESS / 2).await;
        socket.ack("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "Go on?"})).await;
        let answer = server
            .client
            .post(&format!("/api/v1/missions/{id}/hitl_response"), &json!({"hitl_id": "h-1", "response": "yes"}))
            .await;
        assert_eq!(answer.status, 202, "{}", answer.body);
        // serve records the answer (mission.hitl_responded) and pushes it to the executor.
        assert_eq!(socket.next_pushed().await["event"], "mission.hitl_responded");
        progress(&mut socket, &id, PROGRESS / 2).await;
        socket.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
        progress(&mut socket, &live, 5).await;
        ended.push(id);
    }
    let before = metric(&server, "aiwg_store_bytes").await;
    let events_before = metric(&server, "aiwg_store_events").await;
    assert!(before > CAP as i64, "the stream filled the store past its cap ({before} bytes)");
    let whole = kept(&server, &ended[MISSIONS - 1]).await;
    let live_before = kept(&server, &live).await;

    let mut server = server;
    server.config.retention.max_store_bytes = CAP;
    let server = server.restart().await;
    // serve finds itself above the cap and compacts without being asked; a pass asked for meanwhile
    // waits for it, and finds the store under the cap.
    let pass = server.client.post("/api/v1/store/compact", &json!(null)).await;
    assert_eq!(pass.status, 200, "{}", pass.body);
    if sqlite {
        assert!(pass.body["store_bytes"].as_i64().unwrap() <= CAP as i64, "{}", pass.body);
    }
    let mut compacted = 0;
    for id in &ended {
        compacted += usize::from(server.mission(id).await["compacted_at"].is_string());
    }
    assert!(compacted >= 1);
    let removed = events_before - metric(&server, "aiwg_store_events").await;
    assert_eq!(removed as usize, compacted * PROGRESS, "every progress event of a compacted mission, no other");

    // Oldest end first: the compacted ones are the first to have ended.
    for (i, id) in ended.iter().enumerate() {
        let mission = server.mission(id).await;
        let events = kept(&server, id).await;
        if i < compacted {
            assert!(mission["compacted_at"].is_string(), "{mission}");
            assert_eq!(mission["state"], "done");
            // First and last kept, every event of another kind kept, progress gone.
            assert_eq!(events.first().map(String::as_str), Some("mission.started"));
            assert_eq!(events.last().map(String::as_str), Some("mission.completed"));
            assert!(
                events.contains(&"mission.hitl_required".to_owned())
                    && events.contains(&"mission.hitl_responded".to_owned())
            );
            let progress = events.iter().filter(|e| *e == "mission.progress").count();
            assert_eq!(progress, 0, "{events:?}");
        } else {
            assert!(mission.get("compacted_at").is_none(), "{mission}");
            assert_eq!(events.len(), whole.len(), "a mission not compacted keeps everything");
        }
    }
    assert_eq!(kept(&server, &live).await, live_before, "a live mission keeps every event");

    // The whole stream cannot resume from before the horizon, and says where it can.
    let horizon = metric(&server, "aiwg_store_compaction_horizon").await;
    assert!(horizon > 0);
    let refused = server.client.get("/api/v1/events?follow=false&since=0").await;
    let message = refused.assert_error(410, "events_compacted");
    assert!(message.contains(&format!("the first available is {}", horizon + 1)), "{message}");
    assert_eq!(refused.body["resume_since"], horizon, "where to resume, as a field: {}", refused.body);
    let resumed = server.client.get(&format!("/api/v1/events?follow=false&since={horizon}")).await;
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    if sqlite {
        // The file gives the freed pages back.
        let file = server.data_dir().join("aiwg-serve.db");
        server
            .eventually("/healthz", "the file back under the cap", |_| {
                std::fs::metadata(&file).is_ok_and(|m| m.len() <= CAP)
            })
            .await;
    } else {
        // PostgreSQL's database alone is above a 1 MiB cap: every ended mission goes, live ones stay.
        assert_eq!(compacted, MISSIONS);
    }
    assert_eq!(server.mission(&live).await["state"], "running");
}

#[tokio::test]
async fn past_its_retention_an_ended_mission_is_compacted_by_the_background_pass() {
    let server = TestServer::start_with(|c| {
        c.retention.keep_days = 0.0;
        c.retention.interval_s = 1;
    })
    .await;
    let (mut e, mut socket) = ScriptedExecutor::online(&server, &[]).await;
    let live = running_mission(&server, &mut e, &mut socket).await;
    progress(&mut socket, &live, 3).await;
    let id = running_mission(&server, &mut e, &mut socket).await;
    progress(&mut socket, &id, 10).await;
    socket.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    // No one asks: the pass of the next second finds it past a retention of zero days.
    let m = server.eventually(&format!("/api/v1/missions/{id}"), "compacted", |m| m["compacted_at"].is_string()).await;
    assert_eq!(m["state"], "done");
    assert_eq!(kept(&server, &id).await, ["mission.started", "mission.completed"]);
    assert_eq!(kept(&server, &live).await.len(), 4, "the live mission keeps everything");
}

#[tokio::test]
async fn under_a_steady_stream_the_store_keeps_itself_under_its_cap() {
    let server = TestServer::start_with(|c| {
        c.retention.max_store_bytes = CAP;
        // Neither age nor the interval's pass: the cap, checked by serve itself, is what compacts.
        c.retention.keep_days = 30.0;
        c.retention.interval_s = 3600;
    })
    .await;
    let sqlite = server.config.store.database_url.is_empty();
    let file = server.data_dir().join("aiwg-serve.db");
    let file_size = || std::fs::metadata(&file).map_or(0, |m| m.len());
    let (mut e, mut socket) = ScriptedExecutor::online(&server, &[]).await;
    let live = running_mission(&server, &mut e, &mut socket).await;
    // Four times the cap in all, one mission after another, with a live mission streaming beside them.
    let mut largest = 0;
    for _ in 0..2 * MISSIONS {
        let id = running_mission(&server, &mut e, &mut socket).await;
        progress(&mut socket, &id, PROGRESS).await;
        socket.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
        progress(&mut socket, &live, 2).await;
        largest = largest.max(metric(&server, "aiwg_store_bytes").await as u64);
        // Nobody asks for a pass.
        if sqlite {
            let under = |m: &serde_json::Value| gauge(m, "aiwg_store_bytes") as u64 <= CAP;
            server.eventually("/metrics", "the store back under its cap", under).await;
        } else {
            // PostgreSQL's database alone is above 1 MiB: each mission goes once it has ended.
            server.eventually(&format!("/api/v1/missions/{id}"), "compacted", |m| m["compacted_at"].is_string()).await;
        }
    }
    if sqlite {
        // Between two checks the store grows by at most what streamed meanwhile: here one mission.
        let one_mission = (PROGRESS * 2200) as u64;
        assert!(largest <= CAP + 2 * one_mission, "the store reached {largest} bytes against a cap of {CAP}");
        // And the file on disk follows: the freed pages go back to the file system.
        server.eventually("/healthz", "the file under the cap", |_| file_size() <= CAP).await;
    }
    assert_eq!(kept(&server, &live).await.len(), 1 + 2 * MISSIONS * 2, "the live mission keeps every event");
}

/// Issue 35, finding 5: sandbox frames and resyncs belong to no mission, so retention and the store's
/// cap never removed them (data dir 254 -> 419 MiB under a 20 MiB cap). Past their retention they go,
/// each executor's latest kept.
#[tokio::test]
async fn events_of_no_mission_are_removed_past_their_retention_but_each_executors_latest() {
    let server = TestServer::start_with(|c| c.retention.keep_days = 0.0).await;
    let (_e, mut socket) = ScriptedExecutor::online(&server, &[]).await;
    for n in 0..5 {
        let resync = socket.envelope("executor.resync", None, json!({"owned_mission_ids": [], "n": n}));
        assert_eq!(socket.send_json(&resync).await["ack"], true);
    }
    let loose = |page: &Value| {
        page["events"].as_array().unwrap().iter().filter(|i| i["envelope"]["event"] == "executor.resync").count()
    };
    let events = "/api/v1/events?follow=false&since=0&limit=1000";
    assert_eq!(loose(&server.client.get(events).await.body), 5);
    let r = server.client.post("/api/v1/store/compact", &json!(null)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body["events"].as_u64().unwrap() >= 4, "{}", r.body);
    // What is left, read from the compaction horizon (below it, the stream says 410 and where to resume).
    let refused = server.client.get(events).await;
    refused.assert_error(410, "events_compacted");
    let since = refused.body["resume_since"].as_i64().unwrap();
    let kept = server.client.get(&format!("/api/v1/events?follow=false&since={since}&limit=1000")).await.body;
    assert_eq!(loose(&kept), 1, "the executor's latest is kept: {kept}");
    let registered =
        kept["events"].as_array().unwrap().iter().filter(|i| i["envelope"]["event"] == "executor.registered");
    assert_eq!(registered.count(), 0, "older than it: {kept}");
}
