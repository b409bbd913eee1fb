//! The operator event stream (WebSocket and SSE), resumption without gaps, and conditional polling.

use std::time::Duration;

use aiwg_server::services::feed::{EndReason, Feed, Filter, Next};
use aiwg_server::store::{Change, NewEvent, Synchronous};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer, WAIT};

type OperatorSocket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn operator_socket(server: &TestServer, query: &str) -> OperatorSocket {
    let (ws, _) =
        tokio_tungstenite::connect_async(server.ws_url(&format!("/ws/events{query}"))).await.expect("upgrade");
    ws
}

async fn next_item(ws: &mut OperatorSocket) -> Value {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.expect("an item in time").expect("open").expect("readable") {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Close(f) => panic!("closed: {f:?}"),
            _ => continue,
        }
    }
}

/// An executor running one mission through a few events; returns the mission id.
/// A page of one mission's events (`follow=false` and `query`), answered 200.
async fn mission_page(server: &TestServer, id: &str, query: &str) -> Value {
    let r = server.client.get(&format!("/api/v1/events?follow=false&mission_id={id}&{query}")).await;
    assert_eq!(r.status, 200, "{query}: {:?}", r.body);
    r.body
}

async fn some_history(server: &TestServer) -> (ScriptedExecutor, crate::support::ExecSocket, String) {
    let (mut e, mut ws) = ScriptedExecutor::online(server, &[]).await;
    let id = mission_id();
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&id)).await.status, 202);
    e.next_dispatch().await;
    ws.ack("mission.assigned", &id, json!({"state": "assigned"})).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    (e, ws, id)
}

#[tokio::test]
async fn a_websocket_follower_gets_everything_in_order_and_resumes_without_gap_or_duplicate() {
    let server = TestServer::start().await;
    let (e, mut ws, id) = some_history(&server).await;
    let mut follower = operator_socket(&server, "?since=0").await;
    let first = next_item(&mut follower).await;
    assert_eq!((first["seq"].as_i64(), first["envelope"]["event"].as_str()), (Some(1), Some("executor.registered")));
    assert_eq!(first["envelope"]["executor_id"], e.id.as_str());
    let mut seen = vec![first["seq"].as_i64().unwrap()];
    for _ in 0..2 {
        seen.push(next_item(&mut follower).await["seq"].as_i64().unwrap());
    }
    // Live events follow the backlog.
    ws.ack("mission.progress", &id, json!({"summary": "live"})).await;
    let live = next_item(&mut follower).await;
    assert_eq!(live["envelope"]["data"]["summary"], "live");
    seen.push(live["seq"].as_i64().unwrap());
    drop(follower);

    // Events committed while nobody listens are picked up on resume.
    for i in 0..5 {
        ws.ack("mission.progress", &id, json!({"iteration": i})).await;
    }
    let mut resumed = operator_socket(&server, &format!("?since={}", seen.last().unwrap())).await;
    for _ in 0..5 {
        seen.push(next_item(&mut resumed).await["seq"].as_i64().unwrap());
    }
    assert_eq!(seen, (1..=9).collect::<Vec<i64>>(), "contiguous: no gap, no duplicate");
}

#[tokio::test]
async fn sse_with_filters_and_last_event_id() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) = some_history(&server).await;
    let (_other, mut other_ws, other) = some_history(&server).await;
    let mut sse = server.client.sse(&format!("/api/v1/events?since=0&mission_id={id}"), &[]).await;
    assert_eq!(sse.status, 200);
    let a = sse.next().await.unwrap();
    assert_eq!(a.event.as_deref(), Some("mission.assigned"));
    assert_eq!(a.data["envelope"]["mission_id"], id.as_str());
    let b = sse.next().await.unwrap();
    assert_eq!(b.event.as_deref(), Some("mission.started"));
    other_ws.ack("mission.progress", &other, json!({"summary": "not for this follower"})).await;
    ws.ack("mission.progress", &id, json!({"summary": "for this follower"})).await;
    let c = sse.next().await.unwrap();
    assert_eq!(c.data["envelope"]["data"]["summary"], "for this follower");
    assert_eq!(c.id.as_deref(), Some(c.data["seq"].to_string().as_str()));
    drop(sse);

    ws.ack("mission.completed", &id, json!({"state": "done"})).await;
    let mut resumed = server
        .client
        .sse(&format!("/api/v1/events?mission_id={id}"), &[("last-event-id", c.id.as_deref().unwrap())])
        .await;
    let d = resumed.next().await.unwrap();
    assert_eq!(d.event.as_deref(), Some("mission.completed"));

    let mut by_executor = server.client.sse(&format!("/api/v1/events?since=0&executor_id={}", _other.id), &[]).await;
    let first = by_executor.next().await.unwrap();
    assert_eq!(first.event.as_deref(), Some("executor.registered"));
    assert_eq!(first.data["envelope"]["executor_id"], _other.id.as_str());
}

#[tokio::test]
async fn bad_stream_requests_are_refused() {
    let server = TestServer::start().await;
    for query in [
        "since=-1",
        "since=abc",
        "since=1.5",
        "colour=red",
        "follow=false&limit=0",
        "follow=false&limit=1001",
        "follow=maybe",
        "follow=false&max_bytes=1023",
        "follow=false&max_bytes=16777217",
        "follow=false&max_bytes=lots",
        "follow=false&tail=0",
        "follow=false&tail=1001",
        "follow=false&tail=3&since=1",
        "tail=3",
        "max_bytes=4096",
        "follow=false&before=0",
        "follow=false&before=x",
        "follow=false&before=5&since=1",
        "before=5",
        "progress=maybe",
    ] {
        server.client.get(&format!("/api/v1/events?{query}")).await.assert_error(400, "invalid_query");
    }
    server.client.get("/ws/events").await.assert_error(426, "upgrade_required");
}

/// Issue 35, finding 8: one page of a mission's history over 600 events of 1 MiB returned 572 MiB and
/// peaked serve at 1.8 GB. A page stops at `max_bytes` of event data (4 MiB by default), says `more`,
/// and reading on from `next_since` gets every event once; a follower catches up through the same pages.
#[tokio::test]
async fn pages_of_large_events_stop_at_their_byte_budget() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) = some_history(&server).await;
    const LARGE: usize = 900 * 1024;
    for n in 0..10 {
        ws.ack("mission.progress", &id, json!({"summary": format!("{n} {}", "x".repeat(LARGE))})).await;
    }
    ws.ack("mission.completed", &id, json!({"state": "done"})).await;
    let page = |query: String| {
        let (server, id) = (&server, &id);
        async move {
            let body = mission_page(server, id, &query).await;
            let events: Vec<Value> = body["events"].as_array().unwrap().clone();
            (events, body["next_since"].as_i64().unwrap(), body["more"].as_bool().unwrap())
        }
    };
    // assigned, started (small), then the large ones: 4 MiB holds four of them past the small ones.
    let (events, next, more) = page("limit=1000".into()).await;
    let large = events.iter().filter(|e| e["envelope"]["event"] == "mission.progress").count();
    assert_eq!((events.len(), large, more), (6, 4, true));
    assert!(events.iter().map(|e| e.to_string().len()).sum::<usize>() < 4 * 1024 * 1024 + 10_000);
    assert_eq!(next, events.last().unwrap()["seq"].as_i64().unwrap());
    // A smaller budget: the first event always, whatever its size.
    let (events, _, more) = page(format!("since={next}&max_bytes=1024")).await;
    assert_eq!((events.len(), more), (1, true));
    // Reading on while `more`: every event once, in order, and the last page says there is no more.
    let (mut seqs, mut since, mut pages) = (Vec::new(), 0, 0);
    loop {
        let (events, next, more) = page(format!("since={since}&max_bytes=2000000")).await;
        seqs.extend(events.iter().map(|e| e["seq"].as_i64().unwrap()));
        (since, pages) = (next, pages + 1);
        if !more {
            break;
        }
    }
    // Two large events per page, the small ones riding along: [a s L L] [L L] [L L] [L L] [L L completed].
    assert_eq!((seqs.len(), pages), (13, 5), "{seqs:?}");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // The tail: the last three of the mission, whatever their size, then the completion.
    let (events, _, more) = page("tail=3".into()).await;
    let summaries: Vec<&str> =
        events.iter().map(|e| e["envelope"]["data"]["summary"].as_str().unwrap_or("-")).collect();
    let heads: Vec<&str> = summaries.iter().map(|s| &s[..1]).collect();
    assert_eq!((heads, more), (vec!["8", "9", "-"], false));
    // The mission's detail (its latest events) is bounded too: 1 MiB holds one large event and the
    // completion, not the last fifty (the adversary's 45 MB read).
    let detail = server.mission(&id).await;
    let recent: Vec<&str> =
        detail["recent_events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(recent, ["mission.progress", "mission.completed"]);
    assert!(detail.to_string().len() < 1024 * 1024 + 10_000);
    // A follower from the start gets all of it through the same bounded reads.
    let mut sse = server.client.sse(&format!("/api/v1/events?since=0&mission_id={id}"), &[]).await;
    let mut followed = Vec::new();
    while followed.len() < seqs.len() {
        followed.push(sse.next().await.expect("an event").data["seq"].as_i64().unwrap());
    }
    assert_eq!(followed, seqs);
}

/// A follower that does not read is cut off with its resume point, and resuming from it loses nothing.
/// Driven against the real store, so the lag is deterministic.
#[tokio::test]
async fn a_lagging_follower_is_cut_off_and_resumes_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _writer) =
        aiwg_server::store::sqlite::open(dir.path(), Synchronous::Normal, 8, Default::default()).await.unwrap();
    let executor = uuid::Uuid::new_v4().to_string();
    let register = |n: i64| {
        Change::AppendEvent(NewEvent {
            event: "executor.resync".into(),
            executor_id: executor.clone(),
            mission_id: None,
            ts: "2026-01-01T00:00:00Z".into(),
            data: json!({"owned_mission_ids": [], "protocol_version": n.to_string()}),
            raw: None,
            origin: Default::default(),
        })
    };
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    // A follower from "now" is live at once: the first event committed after it starts reaches it.
    store.commit(vec![register(1)]).await.unwrap();
    let feed = Feed::new(store.clone(), shutdown);
    let (_standing, revoked) = tokio::sync::watch::channel(false);
    let mut rx = feed.follow(None, Filter::default(), revoked.clone());
    store.commit(vec![register(2)]).await.unwrap();
    let first = match tokio::time::timeout(WAIT, rx.recv()).await.expect("in time").unwrap() {
        Next::Event(item) => item.seq,
        Next::End(end) => panic!("ended: {end:?}"),
    };
    assert_eq!(first, 2, "event 1 predates the follower");
    // Then more than the hand-off buffer plus the lag limit, committed while the follower is not read.
    let total = 400;
    for chunk in (3..=total).collect::<Vec<i64>>().chunks(50) {
        store.commit(chunk.iter().map(|n| register(*n)).collect()).await.unwrap();
    }
    let mut got = vec![first];
    let end = loop {
        match tokio::time::timeout(WAIT, rx.recv()).await.expect("in time").expect("an end arrives") {
            Next::Event(item) => got.push(item.seq),
            Next::End(end) => break end,
        }
    };
    assert_eq!(end.reason, EndReason::Lagged);
    assert!(got.len() < total as usize, "it was cut off");
    assert_eq!(
        got,
        (2..=end.resume_since).collect::<Vec<i64>>(),
        "what it got is exactly what precedes the resume point"
    );

    let mut rx = feed.follow(Some(end.resume_since), Filter::default(), revoked);
    while (got.len() as i64) < total - 1 {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("in time").unwrap() {
            Next::Event(item) => got.push(item.seq),
            Next::End(end) => panic!("ended early: {end:?}"),
        }
    }
    assert_eq!(got, (2..=total).collect::<Vec<i64>>(), "every event once, in order");
}

#[tokio::test]
async fn polling_answers_304_to_a_matching_etag() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) = some_history(&server).await;
    for path in ["/api/v1/missions".to_owned(), "/api/v1/executors".into(), format!("/api/v1/missions/{id}")] {
        let first = server.client.get(&path).await;
        let tag = first.header("etag").expect("an ETag").to_owned();
        assert!(tag.starts_with("W/\""), "{tag}");
        let again = server.client.get_with(&path, &[("if-none-match", &tag)]).await;
        assert_eq!((again.status, again.body.clone()), (304, Value::Null), "{path}");
        assert_eq!(again.header("etag"), Some(tag.as_str()));
        let other = server.client.get_with(&path, &[("if-none-match", "W/\"something-else\"")]).await;
        assert_eq!(other.status, 200);
    }
    let tag = server.client.get("/api/v1/missions").await.header("etag").unwrap().to_owned();
    ws.ack("mission.progress", &id, json!({"summary": "a change"})).await;
    let changed = server.client.get_with("/api/v1/missions", &[("if-none-match", &tag)]).await;
    assert_eq!(changed.status, 200, "a change moves the ETag");
    assert_ne!(changed.header("etag"), Some(tag.as_str()));
}

#[tokio::test]
async fn open_streams_end_on_shutdown_and_do_not_hold_it_up() {
    let server = TestServer::start().await;
    let _history = some_history(&server).await;
    let mut sse = server.client.sse("/api/v1/events", &[]).await;
    let mut follower = operator_socket(&server, "?since=0").await;
    next_item(&mut follower).await;
    tokio::time::timeout(WAIT, server.stop()).await.expect("graceful stop is not held up by followers");
    let end = sse.next().await.expect("a last event");
    assert_eq!(end.event.as_deref(), Some("end"));
    assert_eq!(end.data["reason"], "server_shutdown");
    let end = loop {
        let item = next_item_or_close(&mut follower).await;
        if item.get("end").is_some() || item.get("close").is_some() {
            break item;
        }
    };
    assert_eq!(end["end"]["reason"], "server_shutdown", "{end}");
}

async fn next_item_or_close(ws: &mut OperatorSocket) -> Value {
    match tokio::time::timeout(WAIT, ws.next()).await.expect("in time") {
        Some(Ok(Message::Text(t))) => serde_json::from_str(t.as_str()).unwrap(),
        Some(Ok(Message::Close(f))) => json!({"close": f.map(|f| u16::from(f.code))}),
        other => json!({"close": format!("{other:?}")}),
    }
}

/// History, newest first: `before` walks back a page at a time to the first event, `older` says when
/// it got there, and `progress=false` leaves the progress out of pages and streams alike.
#[tokio::test]
async fn history_pages_walk_back_and_progress_can_be_left_out() {
    let server = TestServer::start().await;
    let (_e, mut ws, id) = some_history(&server).await;
    let mut follower = operator_socket(&server, &format!("?since=0&mission_id={id}&progress=false")).await;
    for n in 0..25 {
        ws.ack("mission.progress", &id, json!({"summary": format!("step {n}")})).await;
    }
    ws.ack("mission.completed", &id, json!({"state": "done"})).await;
    let page = |query: String| {
        let (server, id) = (&server, &id);
        async move {
            let body = mission_page(server, id, &query).await;
            let seqs: Vec<i64> =
                body["events"].as_array().unwrap().iter().map(|e| e["seq"].as_i64().unwrap()).collect();
            (seqs, body["older"].clone())
        }
    };
    let (everything, older) = page("limit=1000".into()).await;
    assert_eq!((everything.len(), older), (28, Value::Null), "assigned, started, 25 steps, completed");
    let (mut walked, mut before, mut pages) = (Vec::new(), None::<i64>, 0);
    loop {
        let query = before.map_or("tail=10".to_owned(), |b| format!("before={b}&limit=10"));
        let (seqs, older) = page(query).await;
        assert!(seqs.len() <= 10 && !seqs.is_empty(), "{seqs:?}");
        before = seqs.first().copied();
        walked.splice(0..0, seqs);
        pages += 1;
        if older == json!(false) {
            break;
        }
        assert_eq!(older, json!(true));
    }
    assert_eq!((walked, pages), (everything.clone(), 3), "every event once, newest page first");

    let (steps, _) = page("progress=false".into()).await;
    assert_eq!(steps.len(), 3, "assigned, started, completed: {steps:?}");
    let (last_step, older) = page("progress=false&tail=1".into()).await;
    assert_eq!((last_step, older), (vec![*everything.last().unwrap()], json!(true)));
    for expected in ["mission.assigned", "mission.started", "mission.completed"] {
        assert_eq!(next_item(&mut follower).await["envelope"]["event"], expected, "the stream skips progress too");
    }
}

/// Each event says whose word it is: the executor's frames, serve's decisions (here a dispatch nobody
/// took), an operator's action by name (here an abort); the stream says it as the pages do.
#[tokio::test]
async fn each_event_says_whether_the_executor_serve_or_which_operator_did_it() {
    let server = TestServer::start().await;
    let (e, _ws, id) = some_history(&server).await;
    let mut follower = operator_socket(&server, "?since=0").await;
    assert_eq!(server.client.post(&format!("/api/v1/missions/{id}/abort"), &json!({})).await.status, 202);
    e.answer_with(crate::support::executor::Answer::Status(503));
    let refused = mission_id();
    server
        .client
        .post("/api/v1/sessions/s/dispatch", &dispatch_body(&refused))
        .await
        .assert_error(502, "executor_forward_failed");

    let whose = |page: &Value| -> Vec<(String, Value)> {
        let events = page["events"].as_array().unwrap();
        events.iter().map(|i| (i["envelope"]["event"].as_str().unwrap().to_owned(), i["origin"].clone())).collect()
    };
    let executor = json!({"kind": "executor"});
    let expected = vec![
        ("mission.assigned".to_owned(), executor.clone()),
        ("mission.started".to_owned(), executor.clone()),
        ("mission.aborted".to_owned(), json!({"kind": "operator", "name": "anonymous"})),
    ];
    assert_eq!(whose(&mission_page(&server, &id, "").await), expected);
    let failed = vec![("mission.failed".to_owned(), json!({"kind": "serve"}))];
    assert_eq!(whose(&mission_page(&server, &refused, "").await), failed);
    let mut streamed = Vec::new();
    while streamed.len() < 4 {
        let item = next_item(&mut follower).await;
        if item["envelope"]["mission_id"].is_string() {
            streamed.push((item["envelope"]["event"].as_str().unwrap().to_owned(), item["origin"].clone()));
        }
    }
    assert_eq!(streamed, [expected, failed].concat());
}

/// A browser's WebSocket sets no Authorization header: it offers its token as a subprotocol,
/// `aiwg.bearer.<base64url>`, beside `aiwg.events`, which serve answers. A wrong or missing one is
/// refused before the upgrade, as a wrong bearer is.
#[tokio::test]
async fn the_event_socket_takes_a_token_offered_as_a_subprotocol() {
    use base64::Engine;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    const TOKEN: &str = "subprotocol-operator-token-0123456789 with spaces";
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![TOKEN.into()]).await;
    let offer = |token: Option<&str>| {
        let mut request = server.ws_url("/ws/events?since=0").into_client_request().unwrap();
        let mut protocols = "aiwg.events".to_owned();
        if let Some(t) = token {
            protocols += &format!(", aiwg.bearer.{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(t));
        }
        request.headers_mut().insert("sec-websocket-protocol", protocols.parse().unwrap());
        request
    };
    let (mut ws, answer) = tokio_tungstenite::connect_async(offer(Some(TOKEN))).await.expect("upgraded");
    assert_eq!(answer.headers()["sec-websocket-protocol"], "aiwg.events");
    let e = ScriptedExecutor::register(&server, &[]).await;
    let registered = next_item(&mut ws).await;
    assert_eq!(
        (registered["envelope"]["event"].as_str(), registered["envelope"]["executor_id"].as_str()),
        (Some("executor.registered"), Some(e.id.as_str()))
    );
    for refused in [Some("not-the-token"), None] {
        match tokio_tungstenite::connect_async(offer(refused)).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 401, "{refused:?}"),
            other => panic!("{refused:?}: {:?}", other.map(|(_, r)| r.status())),
        }
    }
}

/// Issue 53, item 3: revoking an operator left their open event streams delivering for seconds (until
/// the client reconnected). They end at once: over SSE with an `end` event `revoked`, over the socket
/// with the same and a close 4001; another operator's stream goes on.
#[tokio::test]
async fn revoking_an_operator_ends_their_open_event_streams_at_once() {
    const ADMIN: &str = "admin-token-0123456789abcdef";
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let admin = format!("Bearer {ADMIN}");
    let r = server
        .client
        .post_with("/api/v1/operators", &json!({"name": "vera", "role": "viewer"}), &[("authorization", &admin)])
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let vera = r.body["token"].as_str().unwrap().to_owned();
    let mut sse = server.client.sse("/api/v1/events", &[("authorization", &format!("Bearer {vera}"))]).await;
    assert_eq!(sse.status, 200);
    let mut socket = operator_socket(&server, &format!("?token={vera}")).await;
    let mut admins = server.client.sse("/api/v1/events", &[("authorization", &admin)]).await;

    let r = server.client.delete("/api/v1/operators/vera", Some(ADMIN)).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let end = sse.next().await.expect("an end event");
    assert_eq!((end.event.as_deref(), end.data["reason"].as_str()), (Some("end"), Some("revoked")), "{end:?}");
    assert_eq!(sse.next().await, None, "and the stream is over");
    let end = next_item_or_close(&mut socket).await;
    assert_eq!(end["end"]["reason"], "revoked", "{end}");
    assert_eq!(next_item_or_close(&mut socket).await, json!({"close": 4001}));

    // The admin's stream carries on.
    ScriptedExecutor::register(&server, &[]).await;
    let next = admins.next().await.expect("an event");
    assert_ne!(next.event.as_deref(), Some("end"), "{next:?}");
}
