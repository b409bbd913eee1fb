//! The adversarial findings of issue 11 that are about sockets and protocol edges, each replayed
//! against the real server.

use std::time::Duration;

use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{
    dispatch_body, dispatch_to, mission_id, running_mission, Client, ExecSocket, ScriptedExecutor, TestServer, WAIT,
};

/// Finding 6: an executor that stops reading used to stay `connected: true` past its ping deadline,
/// because the socket task blocked in a send and its keepalive never ran; controls said `delivered`.
#[tokio::test]
async fn an_executor_that_stops_reading_is_dropped_at_its_deadline() {
    let server = TestServer::start_with(|c| {
        c.hub.ping_interval_s = 1;
        c.hub.pong_timeout_s = 1;
    })
    .await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl"]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;
    let mut silent = ws.into_silent();
    let connected =
        || async { server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body["connected"] == true };
    // Answers of 900 KiB each, which it never reads: a few fill every buffer between the two, and
    // then serve's socket task is stuck in a send.
    let answer = "y".repeat(900 * 1024);
    let path = format!("/api/v1/missions/{id}");
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut n = 0;
    while connected().await {
        assert!(tokio::time::Instant::now() < deadline, "still connected after {n} unread answers");
        let frame = json!({"event": "mission.hitl_required", "executor_id": e.id, "mission_id": id,
                           "ts": "2026-11-30T10:00:00.000Z", "data": {"hitl_id": format!("h-{n}"), "prompt": "?"}});
        // Once serve stops reading, this send may not complete either: give it a moment, no more.
        let _ = tokio::time::timeout(Duration::from_millis(200), silent.send(Message::text(frame.to_string()))).await;
        while server.client.get(&path).await.body["state"] != "hitl-required" && connected().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let answered = json!({"hitl_id": format!("h-{n}"), "response": answer});
        let r = server.client.post(&format!("{path}/hitl_response"), &answered).await;
        assert!(matches!(r.status, 202 | 409), "status {}", r.status);
        n += 1;
    }
    let status = server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body;
    assert!(status["disconnected_at"].is_string(), "{status}");
    drop(silent);
}

/// Finding 9: the operator's event socket took any message size and a 128 KiB read buffer.
#[tokio::test]
async fn the_operator_event_socket_has_the_hubs_limits() {
    let server = TestServer::start().await;
    let mut ws = ExecSocket::open(&server.ws_url("/ws/events"), "operator").await;
    ws.send_only(Message::text("x".repeat(64 * 1024))).await.unwrap();
    assert_eq!(ws.closed().await.code, 1009);
}

/// Finding 14: invalid UTF-8 in a text frame is 1007, a protocol violation 1002 (they used to drop the
/// socket without a close code).
#[tokio::test]
async fn broken_frames_get_their_close_codes() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::start().await;
    let (e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    for (frame, code) in [
        // FIN + text, masked, 2 bytes of invalid UTF-8.
        (vec![0x81u8, 0x82, 0, 0, 0, 0, 0xff, 0xfe], 1007u16),
        // A lone continuation frame.
        (vec![0x80u8, 0x81, 0, 0, 0, 0, b'x'], 1002u16),
    ] {
        let mut raw = raw_socket(&server, &e).await;
        raw.write_all(&frame).await.unwrap();
        assert_eq!(read_close_code(&mut raw).await, code);
    }
}

/// A WebSocket handshake by hand, so that broken frames can be written below tungstenite.
async fn raw_socket(server: &TestServer, e: &ScriptedExecutor) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "GET /ws/executors/{}?token={} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        e.id, e.token
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        tcp.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    tcp
}

/// Reads server frames until a close frame; returns its code.
async fn read_close_code(tcp: &mut tokio::net::TcpStream) -> u16 {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut head = [0u8; 2];
        tokio::time::timeout_at(deadline, tcp.read_exact(&mut head))
            .await
            .expect("a frame in time")
            .expect("no close code: the socket was dropped");
        let mut len = u64::from(head[1] & 0x7f);
        if len == 126 {
            let mut ext = [0u8; 2];
            tcp.read_exact(&mut ext).await.unwrap();
            len = u64::from(u16::from_be_bytes(ext));
        } else if len == 127 {
            let mut ext = [0u8; 8];
            tcp.read_exact(&mut ext).await.unwrap();
            len = u64::from_be_bytes(ext);
        }
        let mut payload = vec![0u8; len as usize];
        tcp.read_exact(&mut payload).await.unwrap();
        if head[0] & 0x0f == 0x8 {
            return u16::from_be_bytes([payload[0], payload[1]]);
        }
    }
}

/// Finding 16: `Expect: 100-continue` with a Content-Length over the limit is answered 413 at once.
#[tokio::test]
async fn an_oversized_expect_continue_is_refused_before_the_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start().await;
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "POST /api/v1/sessions/s/dispatch HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        64 * 1024 * 1024
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut answer))
        .await
        .expect("an answer without the body")
        .unwrap();
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("payload_too_large"), "{text}");
}

/// Finding 15: SIGTERM under ingestion load ended the process under its socket tasks: sockets got no
/// 1001, and committed events were never acknowledged (so executors sent them again, stored twice).
/// The real binary, four executors streaming, SIGTERM in the middle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_acknowledges_everything_it_committed_and_closes_with_1001() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_aiwg-serve"))
        .args(["serve", "--bind", &format!("127.0.0.1:{port}"), "--data-dir", dir.path().to_str().unwrap()])
        .env("AIWG_SERVE_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed if the test fails half-way: an orphan would hold the test run's pipes open.
    let mut child = KillOnDrop(Some(child));
    let mut config = aiwg_server::config::Config::default();
    config.server.data_dir = dir.path().to_owned();
    let server = TestServer::external(&format!("http://127.0.0.1:{port}"), config.clone());
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.client.try_get("/healthz").await.is_none() {
        assert!(tokio::time::Instant::now() < deadline, "serve did not come up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut streams = Vec::new();
    for _ in 0..4 {
        let (mut e, ws) = ScriptedExecutor::online(&server, &[]).await;
        let id = dispatch_to(&server, &mut e).await;
        streams.push((id, ws));
    }
    let readers: Vec<_> = streams
        .into_iter()
        .map(|(id, mut ws)| {
            tokio::spawn(async move {
                let mut acked = 0;
                let mut sent = 0;
                loop {
                    tokio::select! {
                        read = futures_util::StreamExt::next(ws.raw()) => match read {
                            Some(Ok(Message::Text(t))) => acked += usize::from(t.as_str().contains(r#""ack":true"#)),
                            Some(Ok(Message::Close(frame))) => return (id, acked, frame.map(|f| u16::from(f.code))),
                            Some(Ok(_)) => {}
                            _ => return (id, acked, None),
                        },
                        _ = std::future::ready(()), if sent < 5000 => {
                            let frame = ws.envelope("mission.progress", Some(&id), json!({"summary": format!("step {sent}")}));
                            if ws.send_only(Message::text(frame.to_string())).await.is_err() {
                                sent = usize::MAX;
                            } else {
                                sent += 1;
                            }
                        }
                    }
                }
            })
        })
        .collect();
    // Once acknowledgements flow, stop it in the middle of the stream.
    server
        .eventually("/api/v1/events?follow=false&since=0&limit=1000", "ingestion under way", |p| {
            p["events"].as_array().is_some_and(|e| e.len() > 200)
        })
        .await;
    // SAFETY: signalling the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let mut child = child.0.take().unwrap();
    let mut outcomes = Vec::new();
    for reader in readers {
        outcomes.push(tokio::time::timeout(WAIT, reader).await.expect("every socket closes in time").unwrap());
    }
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert!(status.success(), "{status}");

    let restarted = TestServer::boot_on(config).await;
    for (id, acked, close) in outcomes {
        assert_eq!(close, Some(1001), "mission {id}: closed with 1001");
        let mut stored = 0;
        let mut since = 0;
        loop {
            let page = restarted
                .client
                .get(&format!("/api/v1/events?follow=false&mission_id={id}&limit=1000&since={since}"))
                .await
                .body;
            let events = page["events"].as_array().unwrap();
            if events.is_empty() {
                break;
            }
            stored += events.iter().filter(|ev| ev["envelope"]["event"] == "mission.progress").count();
            since = page["next_since"].as_i64().unwrap();
        }
        assert_eq!(acked, stored, "mission {id}: every committed event was acknowledged, and only those");
    }
}

/// Finding 18: a dispatch racing a DELETE of its executor answered `202 assigned` for a mission the
/// deregistration had already failed.
#[tokio::test]
async fn a_dispatch_racing_its_executors_deregistration_does_not_claim_success() {
    let server = TestServer::start().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    e.answer_with(crate::support::executor::Answer::AcceptWhenOpened(gate.clone()));
    let id = mission_id();
    let client = server.client.clone();
    let body = dispatch_body(&id);
    let dispatch = tokio::spawn(async move { client.post("/api/v1/sessions/s/dispatch", &body).await });
    e.next_dispatch().await;
    assert_eq!(server.client.delete(&format!("/api/v1/executors/{}", e.id), Some(&e.token)).await.status, 204);
    gate.notify_one();
    let r = dispatch.await.unwrap();
    let message = r.assert_error(502, "executor_unreachable");
    assert!(
        message.contains("deregistered while the dispatch was forwarded") && message.contains("failed"),
        "{message}"
    );
    assert_eq!(server.mission(&id).await["state"], "failed");
}

/// Findings 13 and 19: a huge 1.x minor is a minor, and serve only calls http(s) endpoints.
#[tokio::test]
async fn spec_versions_and_rest_endpoints_are_judged_by_what_they_are() {
    let server = TestServer::start().await;
    let e = ScriptedExecutor::listen(&[]).await;
    let mut payload = e.register_payload();
    payload["spec_version"] = json!("1.99999999999999999999999.0");
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.header("warning").is_some_and(|w| w.contains("1.99999999999999999999999.0")));
    for rest in ["file:///etc/passwd", "gopher://127.0.0.1:70/", "http://", "not a url"] {
        let mut payload = ScriptedExecutor::listen(&[]).await.register_payload();
        payload["transport_endpoints"]["rest"] = json!(rest);
        let r = server.client.post("/api/v1/executors/register", &payload).await;
        r.assert_error(400, "schema_violation");
        assert_eq!(r.body["details"][0]["instance_path"], "/transport_endpoints/rest", "{rest}: {}", r.body);
    }
    let server = TestServer::start_with(|c| c.dispatch.executor_hosts = vec!["127.0.0.1".into()]).await;
    let mut payload = ScriptedExecutor::listen(&[]).await.register_payload();
    payload["transport_endpoints"]["rest"] = json!("http://10.1.2.3:8122");
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    assert!(r.assert_error(400, "schema_violation").contains("schema"), "{}", r.body);
    assert!(r.body["details"][0]["message"].as_str().unwrap().contains("dispatch.executor_hosts"));
    assert_eq!(ScriptedExecutor::register(&server, &[]).await.token.len(), 43, "127.0.0.1 is allowed");
}

/// Finding 10: one resync listing 60,000 unknown ids stored 60,001 events and queued 60,000 aborts,
/// 11.5 s of serial commits, on every reconnect.
#[tokio::test]
async fn a_resync_of_made_up_ids_costs_a_bounded_amount() {
    let server = TestServer::start().await;
    let (_e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let ids: Vec<String> = (0..5000).map(|i| format!("m-made-up-{i}")).collect();
    let frame = ws.envelope("executor.resync", None, json!({"owned_mission_ids": ids}));
    let started = std::time::Instant::now();
    assert_eq!(ws.send_json(&frame).await["ack"], true);
    // Reconciled after the acknowledgement, on a task of its own; a second resync is reconciled after
    // the first (in order), and lists nothing.
    let marker = ws.envelope("executor.resync", None, json!({"owned_mission_ids": []}));
    assert_eq!(ws.send_json(&marker).await["ack"], true);
    let aborts = |page: &Value| {
        page["events"].as_array().unwrap().iter().filter(|e| e["envelope"]["event"] == "mission.aborted").count()
    };
    let events = "/api/v1/events?follow=false&since=0&limit=1000";
    let page = server.eventually(events, "the made-up ids answered", |page| aborts(page) >= 256).await;
    assert_eq!(aborts(&page), 256, "only the first 256 made-up ids are answered");
    // The 256 abort frames reach the socket the resync came on, in paced bursts.
    for _ in 0..256 {
        assert_eq!(ws.next_pushed().await["event"], "mission.aborted");
    }
    assert!(started.elapsed() < WAIT, "bounded work");
    // Listed again, they are not answered again: the next frame pushed is the answer to a later resync
    // (resyncs of one executor are reconciled in order).
    assert_eq!(ws.send_json(&frame).await["ack"], true);
    let fresh = ws.envelope("executor.resync", None, json!({"owned_mission_ids": ["m-listed-once"]}));
    assert_eq!(ws.send_json(&fresh).await["ack"], true);
    assert_eq!(ws.next_pushed().await["mission_id"], "m-listed-once");
    assert_eq!(aborts(&server.client.get(events).await.body), 257);

    let too_many: Vec<String> = (0..10_001).map(|i| format!("m-{i}")).collect();
    let frame = ws.envelope("executor.resync", None, json!({"owned_mission_ids": too_many}));
    assert_eq!(ws.send_json(&frame).await["error"], "invalid_frame");
}

/// A child process that is killed when the test lets go of it.
struct KillOnDrop(Option<std::process::Child>);

impl KillOnDrop {
    fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, std::process::Child::id)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Finding 15, second half: a `mission.progress` whose acknowledgement was lost (serve died after the
/// commit) is sent again by the executor; it is acknowledged as a duplicate, not stored twice, also
/// after serve restarted.
#[tokio::test]
async fn a_resent_progress_event_is_stored_once() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["resumable"]).await;
    let id = dispatch_to(&server, &mut e).await;
    let frame = ws.envelope("mission.progress", Some(&id), json!({"summary": "step 7", "iteration": 7}));
    assert!(ws.send_json(&frame).await["seq"].is_i64());
    let again = ws.send_json(&frame).await;
    assert_eq!((&again["ack"], &again["duplicate"]), (&json!(true), &json!(true)), "{again}");
    // A different report with the same text at another time is a new event.
    let mut later = frame.clone();
    later["ts"] = json!("2026-05-08T19:30:06.000Z");
    assert!(ws.send_json(&later).await["seq"].is_i64());

    let server = server.restart().await;
    let mut ws = e.connect(&server).await;
    let again = ws.send_json(&frame).await;
    assert_eq!(again["duplicate"], true, "remembered across a restart: {again}");
    let page = server.client.get(&format!("/api/v1/events?follow=false&mission_id={id}")).await.body;
    let stored =
        page["events"].as_array().unwrap().iter().filter(|ev| ev["envelope"]["event"] == "mission.progress").count();
    assert_eq!(stored, 2);
}

/// U+0000 in any string (issue 17): PostgreSQL cannot store it in text, and no field of the contract
/// means it, so it is refused at the edge on every backend (before, SQLite stored it and PostgreSQL
/// failed the commit with a 500), and nothing of the refused input is stored.
#[tokio::test]
async fn a_nul_character_is_refused_at_the_edge_on_every_backend() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = dispatch_to(&server, &mut e).await;

    // A REST body: the register payload.
    let mut payload = e.register_payload();
    payload["executor_id"] = json!("e-nul");
    payload["name"] = json!("bad\u{0}name");
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    r.assert_error(400, "schema_violation");
    assert_eq!(r.body["details"][0]["keyword"], "nul", "{}", r.body);
    assert_eq!(r.body["details"][0]["instance_path"], "/name", "{}", r.body);
    server.client.get("/api/v1/executors/e-nul").await.assert_error(404, "not_found");

    // A WebSocket frame: refused, the socket stays, the mission is as it was.
    let mut frame = ws.envelope("mission.progress", Some(&id), json!({"summary": "fine"}));
    frame["ts"] = json!("2026-01-01T00:00:00\u{0}Z");
    let answer = ws.send_json(&frame).await;
    assert_eq!(answer["error"], "schema_violation", "{answer}");
    let page = server.client.get(&format!("/api/v1/events?follow=false&mission_id={id}")).await.body;
    let progress = page["events"].as_array().unwrap().iter().filter(|ev| ev["envelope"]["event"] == "mission.progress");
    assert_eq!(progress.count(), 0, "nothing of the refused frame is stored: {page}");
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    assert_eq!(server.mission(&id).await["state"], "running");

    // A path id and a query value.
    server.client.get("/api/v1/missions/m%00x").await.assert_error(400, "invalid_path");
    server.client.get("/api/v1/missions?executor_id=e%00x").await.assert_error(400, "invalid_query");
    assert_eq!(server.client.get("/readyz").await.status, 200, "no storage fault on the way");
}

/// Issue 35, finding 5: what a caller without a token can make serve keep grows no more. A capability
/// is at most 128 characters (a megabyte each was accepted); re-registering an unchanged identity records
/// no new `executor.registered` (200 re-registrations kept 200 full copies); a sandbox id registered and
/// deleted still counts against `server.max_sandboxes` until it is forgotten.
#[tokio::test]
async fn what_registrations_can_make_serve_keep_is_bounded() {
    let server = TestServer::start_with(|c| c.server.max_sandboxes = 3).await;
    let long = format!("x-{}", "a".repeat(127));
    let e = ScriptedExecutor::listen(&[&long]).await;
    let r = server.client.post("/api/v1/executors/register", &e.register_payload()).await;
    r.assert_error(400, "schema_violation");
    assert!(r.body["details"].to_string().contains("/capabilities/0"), "{}", r.body);

    let e = ScriptedExecutor::register(&server, &["hitl"]).await;
    let bearer = format!("Bearer {}", e.token);
    for _ in 0..20 {
        let r = server
            .client
            .post_with("/api/v1/executors/register", &e.register_payload(), &[("authorization", &bearer)])
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let mut renamed = e.register_payload();
    renamed["name"] = json!("renamed");
    assert_eq!(
        server.client.post_with("/api/v1/executors/register", &renamed, &[("authorization", &bearer)]).await.status,
        201
    );
    let page = server.client.get("/api/v1/events?follow=false&since=0&limit=1000").await.body;
    let registered: Vec<&Value> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["envelope"]["event"] == "executor.registered" && i["envelope"]["executor_id"] == e.id.as_str())
        .collect();
    assert_eq!(registered.len(), 2, "the first registration and the rename: {registered:?}");

    let sandbox = |id: &str| json!({"name": "s", "instance_id": id, "http_endpoint": "http://127.0.0.1:18122"});
    for id in ["s-1", "s-2", "s-3"] {
        assert_eq!(server.client.post("/api/sandboxes/register", &sandbox(id)).await.status, 201);
        assert_eq!(server.client.delete(&format!("/api/sandboxes/{id}"), None).await.status, 200);
    }
    let r = server.client.post("/api/sandboxes/register", &sandbox("s-4")).await;
    assert!(r.assert_error(429, "too_many_requests").contains("forgotten"), "{}", r.body);
    // A known sandbox registers again (what the agentic-sandbox client does after its DELETE).
    assert_eq!(server.client.post("/api/sandboxes/register", &sandbox("s-2")).await.status, 201);
}

/// Issue 35, finding 6: `DELETE /api/sandboxes/{id}` had no check at all: anyone tore any live sandbox
/// down. Only the address it was registered from (the client's own DELETE, with no token), or an
/// operator's token.
#[tokio::test]
async fn a_sandbox_is_deleted_only_from_where_it_registered_or_by_an_operator() {
    let operator = "operator-token-0123456789abcdef";
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![operator.into()]).await;
    let sandbox = json!({"name": "s", "instance_id": "s-1", "http_endpoint": "http://127.0.0.1:18122"});
    assert_eq!(server.client.post("/api/sandboxes/register", &sandbox).await.status, 201);
    let elsewhere = Client::from_address(&server.base, "127.0.0.2".parse().unwrap());
    let r = elsewhere.delete("/api/sandboxes/s-1", None).await;
    assert!(r.assert_error(403, "forbidden").contains("registered from another address"), "{}", r.body);
    let auth = format!("Bearer {operator}");
    let listed = server.client.get_with("/api/v1/sandboxes", &[("authorization", &auth)]).await.body;
    assert_eq!(listed["sandboxes"].as_array().unwrap().len(), 1, "still registered");
    let r = elsewhere.delete("/api/sandboxes/s-1", Some(operator)).await;
    assert_eq!((r.status, &r.body["deregistered"]), (200, &json!(true)), "{}", r.body);
    // Its own address needs no token, as before (the client sends none).
    assert_eq!(server.client.post("/api/sandboxes/register", &sandbox).await.status, 201);
    assert_eq!(server.client.delete("/api/sandboxes/s-1", None).await.body["deregistered"], true);
    assert_eq!(elsewhere.delete("/api/sandboxes/never-registered", None).await.status, 200, "unknown ids are fine");
}

/// Issue 35, finding 7: a U+0000 in a sandbox registration's `name` or `instance_id` was a 500 on
/// PostgreSQL, and failed its whole batch: refused at the edge, on every backend.
#[tokio::test]
async fn a_nul_in_a_sandbox_registration_is_refused() {
    let server = TestServer::start().await;
    for (field, path) in [("name", "/name"), ("instance_id", "/instance_id")] {
        let mut body = json!({"name": "s", "instance_id": "s-1", "http_endpoint": "http://127.0.0.1:18122"});
        body[field] = json!("bad\u{0}value");
        let r = server.client.post("/api/sandboxes/register", &body).await;
        r.assert_error(400, "schema_violation");
        assert_eq!(
            (r.body["details"][0]["keyword"].as_str(), r.body["details"][0]["instance_path"].as_str()),
            (Some("nul"), Some(path))
        );
    }
    assert_eq!(server.client.get("/api/v1/sandboxes").await.body["sandboxes"], json!([]));
    assert_eq!(server.client.get("/readyz").await.status, 200, "no storage fault on the way");
}
