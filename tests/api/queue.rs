//! Queueing: missions wait with a reason and are assigned first come first served; capacity and drain.

use serde_json::{json, Value};

use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer};

async fn queue_dispatch(server: &TestServer, caps: &[&str]) -> (String, Value) {
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["queue"] = json!(true);
    body["executor_filter"]["capabilities"] = json!(caps);
    let r = server.client.post("/api/v1/sessions/q/dispatch", &body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    (id, r.body)
}

#[tokio::test]
async fn queued_missions_wait_with_a_reason_and_go_out_in_order_within_capacity() {
    let server = TestServer::start().await;
    let (first, answer) = queue_dispatch(&server, &["runtime:codex"]).await;
    assert_eq!(answer, json!({"mission_id": first, "status": "queued", "queued_reason": "no executor is registered"}));
    let m = server.mission(&first).await;
    assert_eq!((m["state"].as_str(), m["queued_reason"].as_str()), (Some("queued"), Some("no executor is registered")));
    assert!(m.get("executor_id").is_none());
    let (second, _) = queue_dispatch(&server, &["runtime:codex"]).await;
    let (needs_aider, _) = queue_dispatch(&server, &["runtime:aider"]).await;
    let (third, _) = queue_dispatch(&server, &["runtime:codex"]).await;
    let metrics = server.client.get("/metrics").await.body;
    assert!(metrics.as_str().unwrap().contains("aiwg_queue_depth 4\n"), "{metrics}");

    // A codex executor that takes one mission at a time connects: the oldest codex mission goes first,
    // the aider mission does not block the ones behind it.
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["runtime:codex", "x-max-missions:1"]).await;
    assert_eq!(e.next_dispatch().await.body["mission_id"], first.as_str());
    let m = server.mission(&first).await;
    assert_eq!((m["state"].as_str(), m["executor_id"].as_str()), (Some("assigned"), Some(e.id.as_str())));
    assert!(m.get("queued_reason").is_none());
    assert_eq!(server.mission(&second).await["state"], "queued", "capacity is respected");
    ws.ack("mission.completed", &first, json!({"state": "done"})).await;
    assert_eq!(e.next_dispatch().await.body["mission_id"], second.as_str(), "a freed slot takes the next");
    ws.ack("mission.failed", &second, json!({"state": "failed", "reason": "x"})).await;
    assert_eq!(e.next_dispatch().await.body["mission_id"], third.as_str());
    assert_eq!(server.mission(&needs_aider).await["state"], "queued");
    let (mut aider, _aider_ws) = ScriptedExecutor::online(&server, &["runtime:aider"]).await;
    assert_eq!(aider.next_dispatch().await.body["mission_id"], needs_aider.as_str());
}

#[tokio::test]
async fn the_queue_can_be_the_default_and_survives_a_restart() {
    let server = TestServer::start_with(|c| c.dispatch.queue_when_unavailable = true).await;
    let id = mission_id();
    let r = server.client.post("/api/v1/sessions/q/dispatch", &dispatch_body(&id)).await;
    assert_eq!((r.status, r.body["status"].as_str()), (202, Some("queued")));
    // An explicit "queue": false still answers 503.
    let mut body = dispatch_body(&mission_id());
    body["queue"] = json!(false);
    server.client.post("/api/v1/sessions/q/dispatch", &body).await.assert_error(503, "no_executor_available");

    let server = server.restart().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    assert_eq!(e.next_dispatch().await.body["mission_id"], id.as_str());
    assert_eq!(server.mission(&id).await["state"], "assigned");
}

#[tokio::test]
async fn aborting_a_queued_mission_takes_it_out_of_the_queue() {
    let server = TestServer::start().await;
    let (id, _) = queue_dispatch(&server, &[]).await;
    let r = server.client.post(&format!("/api/v1/missions/{id}/abort"), &json!(null)).await;
    assert_eq!((r.status, r.body["state"].as_str()), (202, Some("aborted")));
    server
        .client
        .post(&format!("/api/v1/missions/{id}/pause"), &json!(null))
        .await
        .assert_error(409, "illegal_transition");
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let (later, _) = queue_dispatch(&server, &[]).await;
    assert_eq!(e.next_dispatch().await.body["mission_id"], later.as_str(), "the aborted one was never sent");
    let m = server.mission(&id).await;
    assert_eq!(
        (m["state"].as_str(), m["error"].as_str()),
        (Some("aborted"), Some("aborted by anonymous while queued"))
    );
    // Its timeline says so, and who: an event under the nil executor id, as no executor had it.
    let events = m["recent_events"].as_array().unwrap();
    let aborted = events.iter().find(|e| e["event"] == "mission.aborted").expect("the abort is in the timeline");
    assert_eq!(aborted["executor_id"], "00000000-0000-0000-0000-000000000000");
    assert_eq!(
        (aborted["data"]["aborted_by"].as_str(), aborted["data"]["by"].as_str()),
        (Some("operator"), Some("anonymous")),
        "{aborted}"
    );
}

#[tokio::test]
async fn a_draining_executor_gets_no_new_missions_but_finishes_its_own() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let running = mission_id();
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&running)).await.status, 202);
    e.next_dispatch().await;
    let r = server.client.post(&format!("/api/v1/executors/{}/drain", e.id), &json!(null)).await;
    assert_eq!((r.status, r.body.clone()), (202, json!({"executor_id": e.id, "draining": true})));
    assert_eq!(server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body["draining"], true);
    let message = server
        .client
        .post("/api/v1/sessions/s/dispatch", &dispatch_body(&mission_id()))
        .await
        .assert_error(503, "no_executor_available");
    assert!(message.contains("draining"), "{message}");
    let (waiting, answer) = queue_dispatch(&server, &[]).await;
    assert!(answer["queued_reason"].as_str().unwrap().contains("draining"), "{answer}");
    ws.ack("mission.completed", &running, json!({"state": "done"})).await;
    assert_eq!(server.mission(&waiting).await["state"], "queued");

    let r = server.client.request(hyper::Method::DELETE, &format!("/api/v1/executors/{}/drain", e.id), None, &[]).await;
    assert_eq!(r.status, 202);
    assert_eq!(e.next_dispatch().await.body["mission_id"], waiting.as_str());
    assert!(server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body.get("draining").is_none());
    server
        .client
        .post("/api/v1/executors/00000000-0000-0000-0000-000000000000/drain", &json!(null))
        .await
        .assert_error(404, "not_found");
}
