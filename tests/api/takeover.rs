//! Nobody takes over a live executor (issue 11, finding 2): a re-register without the identity's
//! token is refused unless it comes from the loopback address the identity was registered from (where
//! the real agentic-sandbox executor re-registers tokenless on every socket cycle).

use serde_json::{json, Value};

use crate::support::{dispatch_body, dispatch_to, mission_id, Client, ScriptedExecutor, TestServer};

#[tokio::test]
async fn a_tokenless_re_register_from_another_address_is_refused_and_changes_nothing() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let elsewhere = Client::from_address(&server.base, "127.0.0.2".parse().unwrap());

    // The attacker's payload points dispatches at its own listener.
    let attacker = ScriptedExecutor::listen(&[]).await;
    let mut payload = attacker.register_payload();
    payload["executor_id"] = json!(e.id);
    let r = elsewhere.post("/api/v1/executors/register", &payload).await;
    let message = r.assert_error(409, "conflict");
    assert!(message.contains("current token") && message.contains("executors remove"), "{message}");
    // A wrong token is no better.
    let wrong = [("authorization", "Bearer AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")];
    elsewhere.post_with("/api/v1/executors/register", &payload, &wrong).await.assert_error(409, "conflict");

    // The real executor keeps its token, its endpoint and its missions.
    let listed = server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body;
    assert_eq!(listed["transport_endpoints"]["rest"], format!("http://{}", e.rest));
    let second = e.connect(&server).await;
    drop(second);
    let id = mission_id();
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&id)).await.status, 202);
    assert_eq!(e.next_dispatch().await.body["mission_id"], id.as_str(), "the dispatch went to the real executor");
    ws.ack("mission.started", &id, json!({"state": "running"})).await;

    // With the token, the identity moves wherever its holder is.
    let auth = [("authorization", format!("Bearer {}", e.token))];
    let auth: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = elsewhere.post_with("/api/v1/executors/register", &e.register_payload(), &auth).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["token"], e.token.as_str(), "kept: 127.0.0.2 is still loopback");
}

#[tokio::test]
async fn the_same_loopback_address_may_re_register_without_its_token() {
    let server = TestServer::start().await;
    let (e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    // What the agentic-sandbox executor does on every socket cycle, old socket still open.
    let r = server.client.post("/api/v1/executors/register", &e.register_payload()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_ne!(r.body["token"], e.token.as_str(), "a new token is issued");

    // A deregistered identity may be claimed again from where it was registered, not from elsewhere.
    let token = r.body["token"].as_str().unwrap().to_owned();
    assert_eq!(server.client.delete(&format!("/api/v1/executors/{}", e.id), Some(&token)).await.status, 204);
    let elsewhere = Client::from_address(&server.base, "127.0.0.2".parse().unwrap());
    elsewhere.post("/api/v1/executors/register", &e.register_payload()).await.assert_error(409, "conflict");
    assert_eq!(server.client.post("/api/v1/executors/register", &e.register_payload()).await.status, 201);
}

/// Issue 42, finding 12: another process of the same host re-registered a connected executor's id
/// without its token, with its own endpoints, and received its dispatches. While the executor is
/// connected, a tokenless reclaim keeps its endpoints (what the agentic-sandbox executor does on every
/// cycle); another endpoint is refused, with how to free the identity, and changes nothing.
#[tokio::test]
async fn a_tokenless_reclaim_of_a_connected_executor_keeps_its_endpoints() {
    let server = TestServer::start().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let thief = ScriptedExecutor::listen(&[]).await;
    let mut stolen = e.register_payload();
    stolen["transport_endpoints"] = thief.register_payload()["transport_endpoints"].clone();
    let message = server.client.post("/api/v1/executors/register", &stolen).await.assert_error(409, "conflict");
    assert!(message.contains("other transport_endpoints") && message.contains("executors remove"), "{message}");
    let listed = server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body;
    assert_eq!(listed["transport_endpoints"], e.register_payload()["transport_endpoints"], "nothing changed");
    // The executor still gets its dispatches, with its own token.
    let id = crate::support::dispatch_to(&server, &mut e).await;
    assert_eq!(server.mission(&id).await["executor_id"], e.id.as_str());
    // With its token it may move; without, the same endpoints are taken (a new token issued).
    let moved = server
        .client
        .post_with("/api/v1/executors/register", &stolen, &[("authorization", &format!("Bearer {}", e.token))])
        .await;
    assert_eq!(moved.status, 201, "{}", moved.body);
    let back = server.client.post("/api/v1/executors/register", &stolen).await;
    assert_eq!(back.status, 201, "{}", back.body);
}

/// Issue 10's `executors remove`: a stale identity that lost its token is released by an operator (and
/// only once it is disconnected), so that the executor (or anyone) can register that id again.
#[tokio::test]
async fn an_operator_releases_a_stale_identity() {
    let server = TestServer::start().await;
    let (mut e, ws) = ScriptedExecutor::online(&server, &["resumable"]).await;
    let id = dispatch_to(&server, &mut e).await;
    let remove = format!("/api/v1/executors/{}/remove", e.id);
    server.client.post(&remove, &json!(null)).await.assert_error(409, "conflict");
    ws.close().await;
    server.eventually(&format!("/api/v1/executors/{}", e.id), "disconnected", |b| b["connected"] == false).await;

    // It restarts elsewhere without its token: refused until an operator releases the identity.
    let elsewhere = Client::from_address(&server.base, "127.0.0.2".parse().unwrap());
    elsewhere.post("/api/v1/executors/register", &e.register_payload()).await.assert_error(409, "conflict");
    let r = server.client.post(&remove, &json!(null)).await;
    assert_eq!((r.status, &r.body), (200, &json!({"executor_id": e.id, "removed": true})));
    server.client.get(&format!("/api/v1/executors/{}", e.id)).await.assert_error(404, "not_found");
    assert_eq!(server.mission(&id).await["state"], "suspended", "its missions are kept, suspended");
    let log = server.client.get(&format!("/api/v1/events?follow=false&executor_id={}", e.id)).await.body;
    let whose: Vec<(&str, &Value)> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["envelope"]["event"].as_str().unwrap(), &i["origin"]))
        .collect();
    let (registered, removed) = (&json!({"kind": "executor"}), &json!({"kind": "operator", "name": "anonymous"}));
    assert_eq!(whose.first(), Some(&("executor.registered", registered)), "{log}");
    let deregistered = whose.iter().find(|(event, _)| *event == "executor.deregistered");
    assert_eq!(deregistered, Some(&("executor.deregistered", removed)), "the operator's removal: {log}");
    let again = server.client.post(&remove, &json!(null)).await;
    assert_eq!((again.status, &again.body), (200, &json!({"executor_id": e.id, "removed": true, "already": true})));
    let r = elsewhere.post("/api/v1/executors/register", &e.register_payload()).await;
    assert_eq!(r.status, 201, "released: {}", r.body);
    server.client.post("/api/v1/executors/no-such-executor/remove", &json!(null)).await.assert_error(404, "not_found");
}

/// An executor that deregistered itself keeps its address: registering from elsewhere is refused, and
/// the refusal says `executors remove`, which must then release it (it was a 404: the id was not live).
#[tokio::test]
async fn removing_an_executor_that_left_releases_its_identity() {
    let server = TestServer::start().await;
    let e = ScriptedExecutor::register(&server, &[]).await;
    let gone = server.client.delete(&format!("/api/v1/executors/{}", e.id), Some(&e.token)).await;
    assert_eq!(gone.status, 204, "{}", gone.body);
    let elsewhere = Client::from_address(&server.base, "127.0.0.2".parse().unwrap());
    let refused = elsewhere.post("/api/v1/executors/register", &e.register_payload()).await;
    let message = refused.assert_error(409, "conflict");
    assert!(message.contains(&format!("aiwg-serve executors remove {}", e.id)), "{message}");

    let remove = format!("/api/v1/executors/{}/remove", e.id);
    let r = server.client.post(&remove, &json!(null)).await;
    assert_eq!((r.status, &r.body), (200, &json!({"executor_id": e.id, "removed": true})));
    let r = server.client.post(&remove, &json!(null)).await;
    assert_eq!(r.body["already"], true, "{}", r.body);
    // A departed executor is found by its exact id only: its name may be someone else's now.
    let by_name = format!("/api/v1/executors/{}/remove", e.register_payload()["name"].as_str().unwrap());
    server.client.post(&by_name, &json!(null)).await.assert_error(404, "not_found");
    let r = elsewhere.post("/api/v1/executors/register", &e.register_payload()).await;
    assert_eq!(r.status, 201, "released: {}", r.body);
}

/// Issue 35, finding 4: behind a reverse proxy on the same host, every client looked like 127.0.0.1: a
/// client of the network took over executors without a token, the per-address limit was off, and the
/// first-non-loopback rotation never happened. Untrusted, the proxy's clients count as not loopback;
/// trusted (`server.behind_proxy`), its `X-Forwarded-For` names each one.
#[tokio::test]
async fn behind_a_proxy_on_the_same_host_clients_are_not_the_operators_host() {
    let server = TestServer::start_with(|c| c.server.registrations_per_minute = 5).await;
    let proxied = Client::new(&crate::support::proxy::start(&server.base, "203.0.113.9").await);
    let (e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    // A tokenless re-register through the proxy is a takeover attempt from the network.
    proxied.post("/api/v1/executors/register", &e.register_payload()).await.assert_error(409, "conflict");
    // The per-address limit applies to what comes through it.
    let mut statuses = Vec::new();
    for _ in 0..7 {
        let other = ScriptedExecutor::listen(&[]).await;
        statuses.push(proxied.post("/api/v1/executors/register", &other.register_payload()).await.status);
    }
    // Five a minute, the refused takeover attempt included.
    assert_eq!(statuses, [201, 201, 201, 201, 429, 429, 429]);

    // Trusted, the proxy's word names the client: the first registration from it, with the token,
    // rotates the token, as it would without the proxy.
    let server = TestServer::start_with(|c| c.server.behind_proxy = vec!["127.0.0.1".parse().unwrap()]).await;
    let proxied = Client::new(&crate::support::proxy::start(&server.base, "203.0.113.9").await);
    let (e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let bearer = format!("Bearer {}", e.token);
    let r = proxied.post_with("/api/v1/executors/register", &e.register_payload(), &[("authorization", &bearer)]).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.header("x-aiwg-warning").is_some_and(|w| w.contains("Token rotated")), "{:?}", r.headers);
    assert_ne!(r.body["token"], e.token.as_str());
}

/// Issue 35, finding 11: the per-address registration limit did nothing against IPv6, where one host
/// commonly holds a whole /64. Clients named by a trusted proxy, from one /64 and then another.
#[tokio::test]
async fn an_ipv6_client_is_limited_by_its_64() {
    let server = TestServer::start_with(|c| {
        c.server.registrations_per_minute = 3;
        c.server.behind_proxy = vec!["127.0.0.1".parse().unwrap()];
    })
    .await;
    let mut statuses = Vec::new();
    for n in 1..=6 {
        let e = ScriptedExecutor::listen(&[]).await;
        let client = format!("2001:db8:7:7::{n}");
        let r = server
            .client
            .post_with("/api/v1/executors/register", &e.register_payload(), &[("x-forwarded-for", &client)])
            .await;
        statuses.push(r.status);
    }
    assert_eq!(statuses, [201, 201, 201, 429, 429, 429]);
    let e = ScriptedExecutor::listen(&[]).await;
    let r = server
        .client
        .post_with("/api/v1/executors/register", &e.register_payload(), &[("x-forwarded-for", "2001:db8:7:8::1")])
        .await;
    assert_eq!(r.status, 201, "another /64: {}", r.body);
}
