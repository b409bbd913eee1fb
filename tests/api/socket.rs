//! The executor WebSocket: authentication, keepalive, and every kind of bad frame.

use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{dispatch_body, mission_id, ExecSocket, ScriptedExecutor, TestServer};

/// An online executor with one dispatched mission.
async fn with_mission(server: &TestServer) -> (ScriptedExecutor, ExecSocket, String) {
    let (mut e, ws) = ScriptedExecutor::online(server, &["hitl"]).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["executor_id"] = json!(e.id);
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    e.next_dispatch().await;
    (e, ws, id)
}

#[tokio::test]
async fn a_bad_or_missing_token_completes_the_upgrade_then_closes_4001() {
    let server = TestServer::start().await;
    let e = ScriptedExecutor::register(&server, &[]).await;
    let other = ScriptedExecutor::register(&server, &[]).await;
    for query in ["?token=wrong".to_owned(), String::new(), "?token=".into(), format!("?token={}", other.token)] {
        let mut ws = ExecSocket::open(&server.ws_url(&format!("/ws/executors/{}{query}", e.id)), &e.id).await;
        let closed = ws.closed().await;
        assert_eq!((closed.code, closed.reason.as_str()), (4001, "Unauthorized"), "query {query:?}");
    }
    let unknown = uuid::Uuid::new_v4();
    let mut ws = ExecSocket::open(&server.ws_url(&format!("/ws/executors/{unknown}?token={}", e.token)), &e.id).await;
    assert_eq!(ws.closed().await.code, 4001);
    assert_eq!(server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body["connected"], false);
    // A plain GET on the socket path is not an upgrade.
    server.client.get(&format!("/ws/executors/{}", e.id)).await.assert_error(426, "upgrade_required");
}

#[tokio::test]
async fn pings_are_answered_and_idle_peers_are_pinged() {
    let server = TestServer::start_with(|c| c.hub.ping_interval_s = 1).await;
    let (_e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    assert_eq!(ws.ping(b"are you there").await, b"are you there");
    ws.pinged().await;
}

#[tokio::test]
async fn a_peer_that_stops_reading_is_dropped_after_its_ping_deadline() {
    let server = TestServer::start_with(|c| {
        c.hub.ping_interval_s = 1;
        c.hub.pong_timeout_s = 1;
    })
    .await;
    let (e, ws) = ScriptedExecutor::online(&server, &[]).await;
    let _silent = ws.into_silent();
    server.eventually(&format!("/api/v1/executors/{}", e.id), "disconnected", |b| b["connected"] == false).await;
    let shown = server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body;
    assert!(shown["disconnected_at"].is_string(), "{shown}");
}

#[tokio::test]
async fn bad_frames_get_error_frames_keep_the_socket_and_change_nothing() {
    let server = TestServer::start().await;
    let (e, mut ws, id) = with_mission(&server).await;
    let (_other, mut other_ws, foreign) = with_mission(&server).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    let before = server.mission(&id).await;

    let answer = ws.send(Message::text("this is not json")).await;
    assert_eq!(answer["error"], "invalid_json", "{answer}");
    let answer = ws.send(Message::binary(b"{}".to_vec())).await;
    assert_eq!(answer["error"], "invalid_frame", "{answer}");
    let answer = ws.send_json(&ws.envelope("mission.exploded", Some(&id), json!({}))).await;
    assert_eq!(
        (answer["error"].as_str(), answer["ref"]["event"].as_str()),
        (Some("unknown_event_type"), Some("mission.exploded"))
    );
    let mut no_ts = ws.envelope("mission.progress", Some(&id), json!({}));
    no_ts.as_object_mut().unwrap().remove("ts");
    assert_eq!(ws.send_json(&no_ts).await["error"], "schema_violation");
    let no_mission = ws.envelope("mission.progress", None, json!({}));
    assert_eq!(ws.send_json(&no_mission).await["error"], "schema_violation");
    let wrong_type = ws.event("mission.progress", &id, json!({"iteration": "three"})).await;
    assert_eq!(wrong_type["error"], "schema_violation");
    assert_eq!(wrong_type["ref"], json!({"event": "mission.progress", "mission_id": id}));
    let hitl_without_id = ws.event("mission.hitl_required", &id, json!({"prompt": "ok?"})).await;
    assert_eq!(hitl_without_id["error"], "schema_violation");
    let resync_without_list = ws.send_json(&ws.envelope("executor.resync", None, json!({}))).await;
    assert_eq!(resync_without_list["error"], "schema_violation");
    let answer = ws.event("mission.hitl_responded", &id, json!({"hitl_id": "h", "response": "yes"})).await;
    assert_eq!(answer["error"], "forbidden", "serve-originated events are refused: {answer}");
    let answer = ws.event("mission.completed", &foreign, json!({"state": "done"})).await;
    assert_eq!(answer["error"], "forbidden", "{answer}");
    let answer = ws.event("mission.completed", "m-does-not-exist", json!({"state": "done"})).await;
    assert_eq!(answer["error"], "forbidden", "unknown and foreign missions look alike: {answer}");
    // A late mission.assigned restates what happened: a duplicate, not an error (issue 42, finding 6).
    let answer = ws.event("mission.assigned", &id, json!({"state": "assigned"})).await;
    assert_eq!(
        (&answer["ack"], &answer["duplicate"]),
        (&json!(true), &json!(true)),
        "assigned after started: {answer}"
    );

    assert_eq!(server.mission(&id).await, before, "nothing was stored");
    assert_eq!(server.mission(&foreign).await["state"], "assigned");
    // The socket is still usable.
    ws.ack("mission.progress", &id, json!({"summary": "still here"})).await;
    other_ws.ack("mission.started", &foreign, json!({"state": "running"})).await;
    drop(e);
}

#[tokio::test]
async fn terminal_states_are_final_and_an_identical_repeat_is_idempotent() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) = with_mission(&server).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    let done = json!({"state": "done", "exit_code": 0});
    ws.ack("mission.completed", &id, done.clone()).await;
    let after = server.mission(&id).await;

    let repeat = ws.event("mission.completed", &id, done).await;
    assert_eq!(
        repeat,
        json!({"ack": true, "duplicate": true, "ref": {"event": "mission.completed", "mission_id": id}})
    );
    for (event, data) in [
        ("mission.started", json!({"state": "running"})),
        ("mission.completed", json!({"state": "done", "exit_code": 1})),
        ("mission.failed", json!({"state": "failed", "reason": "late"})),
        ("mission.aborted", json!({"state": "aborted"})),
        ("mission.progress", json!({})),
    ] {
        let answer = ws.event(event, &id, data).await;
        assert_eq!(answer["error"], "illegal_transition", "{event} after done: {answer}");
    }
    assert_eq!(server.mission(&id).await, after, "the terminal mission is untouched");
}

#[tokio::test]
async fn oversized_frames_close_the_socket_with_1009() {
    let server = TestServer::start_with(|c| c.hub.max_frame_bytes = 64 * 1024).await;
    let (e, mut ws, id) = with_mission(&server).await;
    let big = ws.envelope("mission.progress", Some(&id), json!({"summary": "x".repeat(100 * 1024)}));
    ws.send_only(Message::text(big.to_string())).await.expect("sent");
    assert_eq!(ws.closed().await.code, 1009);
    assert_eq!(server.mission(&id).await["recent_events"], json!([]));
    let mut again = e.connect(&server).await;
    again.ack("mission.progress", &id, json!({"summary": "small"})).await;
}

#[tokio::test]
async fn a_flood_of_bad_frames_is_cut_off() {
    let server = TestServer::start().await;
    let (_e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    for _ in 0..200 {
        if ws.send_only(Message::text("nope")).await.is_err() {
            break;
        }
    }
    let closed = ws.closed().await;
    assert_eq!((closed.code, closed.reason.as_str()), (1008, "too many refused frames"));
}

#[tokio::test]
async fn events_are_accepted_from_every_socket_and_a_stale_close_does_not_disconnect() {
    let server = TestServer::start().await;
    let (e, mut first, id) = with_mission(&server).await;
    let mut second = e.connect(&server).await;
    first.ack("mission.started", &id, json!({"state": "running"})).await;
    second.ack("mission.progress", &id, json!({"summary": "from the newer socket"})).await;
    first.ack("mission.progress", &id, json!({"summary": "from the older socket"})).await;
    first.close().await;
    second.ack("mission.progress", &id, json!({"summary": "still connected"})).await;
    assert_eq!(server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body["connected"], true);
    second.close().await;
    server.eventually(&format!("/api/v1/executors/{}", e.id), "disconnected", |b| b["connected"] == false).await;
}

#[tokio::test]
async fn tolerant_reader_accepts_what_real_executors_send() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl", "resumable"]).await;
    let id = mission_id();
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&id)).await.status, 202);
    e.next_dispatch().await;
    // Bare started (upstream's oneOf rejects it), resync first with mission_id absent, extra keys.
    let resync = ws
        .send_json(&ws.envelope(
            "executor.resync",
            None,
            json!({"owned_mission_ids": [id], "protocol_version": "1.0.0"}),
        ))
        .await;
    assert_eq!(resync["ack"], true, "{resync}");
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    ws.ack("mission.resumed", &id, json!({"state": "running"})).await;
    ws.ack("mission.reconnected", &id, json!({"checkpoint_id": ""})).await;
    let mut no_data = ws.envelope("mission.progress", Some(&id), json!({}));
    no_data.as_object_mut().unwrap().remove("data");
    assert_eq!(ws.send_json(&no_data).await["ack"], true);
    ws.ack("mission.failed", &id, json!({"state": "failed_preserved", "reason": "mission_quarantined", "error": "crash loop", "failure_count": 3, "threshold": 3})).await;
    let m = server.mission(&id).await;
    assert_eq!(m["state"], "failed");
    assert_eq!(m["error"], "crash loop");
    let failed: &Value = m["recent_events"].as_array().unwrap().last().unwrap();
    assert_eq!(failed["data"], json!({"state": "failed", "reason": "mission_quarantined", "error": "crash loop"}));
}

#[tokio::test]
async fn only_resumable_executors_may_suspend() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) = with_mission(&server).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    for (event, data) in [
        ("mission.suspended", json!({"state": "suspended", "checkpoint_id": "c1"})),
        ("mission.reconnected", json!({"checkpoint_id": "c1"})),
    ] {
        let answer = ws.event(event, &id, data).await;
        assert_eq!(answer["error"], "illegal_transition", "{event}: {answer}");
        assert!(answer["message"].as_str().unwrap().contains("resumable"), "{answer}");
    }
    assert_eq!(server.mission(&id).await["state"], "running");
    // Resuming after a pause is not suspension: allowed.
    ws.ack("mission.paused", &id, json!({"state": "paused"})).await;
    ws.ack("mission.resumed", &id, json!({"state": "running", "resumed_from": "paused"})).await;
}

/// The executor is connected by the time its socket's upgrade is answered: a dispatch sent right after
/// the handshake, with no wait, reaches it (upstream's behaviour; the conformance suite relies on it).
/// Twenty executors, so that a race between the attach and the next request shows.
#[tokio::test]
async fn an_executor_is_connected_as_soon_as_its_upgrade_is_answered() {
    let server = TestServer::start().await;
    for _ in 0..20 {
        let mut e = ScriptedExecutor::register(&server, &[]).await;
        let _ws = e.connect(&server).await;
        let id = mission_id();
        let mut body = dispatch_body(&id);
        body["executor_filter"]["executor_id"] = json!(e.id);
        let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
        assert_eq!(r.status, 202, "dispatch right after the upgrade: {}", r.body);
        assert_eq!(e.next_dispatch().await.body["mission_id"], id.as_str());
    }
}
