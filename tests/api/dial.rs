//! Executors that only listen (`serve::dial`): serve opens their WebSocket, with their token, and the
//! socket works as one they opened: frames acknowledged, pushes delivered, redialled when it drops.

use serde_json::{json, Value};

use crate::support::executor::{DialListener, ScriptedExecutor};
use crate::support::{dispatch_body, mission_id, TestServer};

/// A scripted executor whose WebSocket endpoint only listens, registered with `capabilities`.
async fn listening(server: &TestServer, capabilities: &[&str]) -> (ScriptedExecutor, DialListener) {
    let mut e = ScriptedExecutor::listen(capabilities).await;
    let dials = DialListener::start(&e.id).await;
    let mut payload = e.register_payload();
    payload["transport_endpoints"]["ws"] = json!(dials.url);
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    assert_eq!(r.status, 201, "{}", r.body);
    e.token = r.body["token"].as_str().unwrap().to_owned();
    (e, dials)
}

async fn connected(server: &TestServer, e: &ScriptedExecutor, yes: bool) -> Value {
    let path = format!("/api/v1/executors/{}", e.id);
    server.eventually(&path, "the executor's connection", |b| b["connected"] == yes).await
}

#[tokio::test]
async fn an_executor_that_only_listens_is_dialled_runs_a_mission_and_is_dialled_again() {
    let server = TestServer::start_with(|c| c.hub.dial_after_s = 0).await;
    let (mut e, mut dials) = listening(&server, &["x-dial-in"]).await;

    // Dialled at once, on the path serve itself serves, with the executor's token both ways.
    let dialled = dials.next().await;
    assert_eq!(dialled.path_and_query, format!("/ws/executors/{}?token={}", e.id, e.token));
    assert_eq!(dialled.authorization, Some(format!("Bearer {}", e.token)));
    let mut ws = dialled.socket;
    connected(&server, &e, true).await;

    // A mission runs over it: events acknowledged with their sequence, serve's pushes delivered.
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["executor_id"] = json!(e.id);
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body).await.status, 202);
    assert_eq!(e.next_dispatch().await.body["mission_id"], json!(id));
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h1", "prompt": "Ship it?"})).await;
    let r = server
        .client
        .post(&format!("/api/v1/missions/{id}/hitl_response"), &json!({"hitl_id": "h1", "response": "yes"}))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let answer = ws.next_pushed().await;
    assert_eq!(
        (answer["event"].as_str(), answer["data"]["response"].as_str()),
        (Some("mission.hitl_responded"), Some("yes"))
    );
    let bad = ws.send_json(&json!({"event": "mission.teleported"})).await;
    assert_eq!(bad["error"], "unknown_event_type", "refusals travel back as on any socket: {bad}");
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    assert_eq!(server.mission(&id).await["state"], "done");

    // The socket drops: serve dials again, and the new socket carries frames.
    ws.close().await;
    let mut again = dials.next().await.socket;
    connected(&server, &e, true).await;
    let resync = again.envelope("executor.resync", None, json!({"owned_mission_ids": [], "protocol_version": "1.0.0"}));
    assert_eq!(again.send_json(&resync).await["ack"], true);
}

/// `hub.dial_after_s` delays the first dial of an executor declaring `x-dial-in`; one that does not
/// declare it is never dialled (issue 53: registration is open, and serve dialled every executor that
/// never connected, sending its token wherever `ws` pointed); one with a socket of its own never is; a
/// deregistered one is let go.
#[tokio::test]
async fn only_executors_declaring_dial_in_are_dialled_after_the_wait_and_never_one_with_a_socket() {
    let server = TestServer::start_with(|c| c.hub.dial_after_s = 1).await;
    let (_silent, mut silent_dials) = listening(&server, &[]).await;
    let (own, mut own_dials) = listening(&server, &["x-dial-in"]).await;
    let _own_ws = own.connect(&server).await;
    let (quiet, mut quiet_dials) = listening(&server, &["x-dial-in"]).await;
    let before = tokio::time::Instant::now();
    let dialled = quiet_dials.next().await;
    assert!(before.elapsed() >= std::time::Duration::from_millis(500), "dialled after its wait, not at once");
    assert_eq!(dialled.authorization, Some(format!("Bearer {}", quiet.token)));
    connected(&server, &quiet, true).await;
    // Registered before it and waiting as long: it would have been dialled by now.
    assert!(silent_dials.none_pending(), "an executor that does not declare x-dial-in is never dialled");
    assert!(own_dials.none_pending(), "an executor with its own socket is not dialled");

    // Deregistered, it is not dialled again after its socket closes.
    let r = server.client.delete(&format!("/api/v1/executors/{}", quiet.id), Some(&quiet.token)).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let mut socket = dialled.socket;
    assert!(socket.closed().await.code > 0);
    assert!(quiet_dials.none_pending());
}

/// Issue 53, item 1: a registrant names the path and query of its `ws` endpoint (`#` cut off the rest of
/// serve's own), and serve dialled exactly that, with the executor's token. Only the scheme, host and
/// port are used now.
#[tokio::test]
async fn a_dial_goes_to_serves_own_path_whatever_path_and_query_were_registered() {
    let server = TestServer::start().await;
    let mut e = ScriptedExecutor::listen(&["x-dial-in"]).await;
    let mut dials = DialListener::start(&e.id).await;
    let mut payload = e.register_payload();
    payload["transport_endpoints"]["ws"] = json!(format!("{}/internal/admin?x=#", dials.url));
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    assert_eq!(r.status, 201, "{}", r.body);
    e.token = r.body["token"].as_str().unwrap().to_owned();
    let dialled = dials.next().await;
    assert_eq!(dialled.path_and_query, format!("/ws/executors/{}?token={}", e.id, e.token));
    connected(&server, &e, true).await;
}

/// Issue 53, item 1, its repro: with `dispatch.executor_hosts`, `rest` was checked and `ws` (and `grpc`)
/// not, so a registration aimed serve's dialler at any address. Every endpoint obeys the list now, and
/// the listener inside receives nothing while an allowed executor is dialled.
#[tokio::test]
async fn every_endpoint_of_a_registration_obeys_the_executor_hosts() {
    let server =
        TestServer::start_with(|c| c.dispatch.executor_hosts = vec!["10.255.0.1".into(), "localhost".into()]).await;
    let e = ScriptedExecutor::listen(&["x-dial-in"]).await;
    let mut inside = DialListener::start(&e.id).await;
    let aimed = [
        ("ws", json!({"rest": "http://10.255.0.1:1", "ws": format!("{}/internal/admin?x=#", inside.url)})),
        ("grpc", json!({"rest": "http://10.255.0.1:1", "ws": "ws://10.255.0.1:2", "grpc": "http://127.0.0.1:9"})),
        ("ws", json!({"rest": "http://10.255.0.1:1", "ws": "localhost:9999"})),
    ];
    for (field, endpoints) in aimed {
        let mut payload = e.register_payload();
        payload["transport_endpoints"] = endpoints.clone();
        let r = server.client.post("/api/v1/executors/register", &payload).await;
        r.assert_error(400, "schema_violation");
        assert_eq!(r.body["details"][0]["instance_path"], format!("/transport_endpoints/{field}"), "{endpoints}");
    }

    // An executor on an allowed host is registered and dialled; the one aimed inside never was.
    let mut allowed = ScriptedExecutor::listen(&["x-dial-in"]).await;
    let mut dials = DialListener::start(&allowed.id).await;
    let mut payload = allowed.register_payload();
    let port = dials.url.rsplit(':').next().unwrap().to_owned();
    payload["transport_endpoints"] = json!({"rest": "http://10.255.0.1:1", "ws": format!("ws://localhost:{port}")});
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    assert_eq!(r.status, 201, "{}", r.body);
    allowed.token = r.body["token"].as_str().unwrap().to_owned();
    dials.next().await;
    connected(&server, &allowed, true).await;
    assert!(inside.none_pending(), "nothing reached the listener inside");
}
