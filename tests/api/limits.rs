//! Bounded everything (issue 11, findings 4 and 11): what a caller who needs no token can make serve
//! hold or do is capped, and the listings that grow with it are paged.

use serde_json::{json, Value};

use crate::support::{dispatch_body, mission_id, Client, ScriptedExecutor, TestServer};

fn sandbox(instance_id: &str, extra: usize) -> Value {
    json!({"name": "s", "instance_id": instance_id, "http_endpoint": "http://127.0.0.1:18122", "padding": "x".repeat(extra)})
}

#[tokio::test]
async fn sandbox_registrations_are_capped_in_size_count_and_origin_and_listed_by_page() {
    let server = TestServer::start_with(|c| c.server.max_sandboxes = 3).await;
    let path = "/api/sandboxes/register";
    server.client.post(path, &sandbox("big", 20 * 1024)).await.assert_error(413, "payload_too_large");
    for id in ["s-1", "s-2", "s-3"] {
        assert_eq!(server.client.post(path, &sandbox(id, 10)).await.status, 201);
    }
    let r = server.client.post(path, &sandbox("s-4", 10)).await;
    r.assert_error(429, "too_many_requests");
    assert!(r.header("retry-after").is_some());
    assert_eq!(server.client.post(path, &sandbox("s-2", 10)).await.status, 201, "a known sandbox re-registers");
    // Another address cannot take a sandbox id over (127.0.0.2 stands for another host).
    let elsewhere = Client::from_address(&server.base, "127.0.0.2".parse().unwrap());
    elsewhere.post(path, &sandbox("s-1", 10)).await.assert_error(409, "conflict");

    let first = server.client.get("/api/v1/sandboxes?limit=2").await.body;
    let ids = |page: &Value| {
        page["sandboxes"].as_array().unwrap().iter().map(|s| s["sandbox_id"].clone()).collect::<Vec<_>>()
    };
    assert_eq!(ids(&first), [json!("s-1"), json!("s-2")]);
    let cursor = first["next_cursor"].as_str().expect("more to come").to_owned();
    let second = server.client.get(&format!("/api/v1/sandboxes?limit=2&cursor={cursor}")).await.body;
    assert_eq!(ids(&second), [json!("s-3")]);
    assert!(second.get("next_cursor").is_none());
    for bad in ["limit=0", "limit=1001", "cursor=nope"] {
        server.client.get(&format!("/api/v1/sandboxes?{bad}")).await.assert_error(400, "invalid_query");
    }
    // A parameter it does not know is ignored (tolerant in what it accepts, as upstream is).
    let all = server.client.get("/api/v1/sandboxes?offset=3").await;
    assert_eq!((all.status, ids(&all.body).len()), (200, 3), "{}", all.body);
}

#[tokio::test]
async fn executor_identities_are_capped_and_listed_by_page() {
    let server = TestServer::start_with(|c| c.server.max_executors = 3).await;
    let mut known = Vec::new();
    for _ in 0..3 {
        known.push(ScriptedExecutor::register(&server, &[]).await);
    }
    let extra = ScriptedExecutor::listen(&[]).await;
    let r = server.client.post("/api/v1/executors/register", &extra.register_payload()).await;
    let message = r.assert_error(429, "too_many_requests");
    assert!(message.contains("server.max_executors"), "{message}");

    let first = server.client.get("/api/v1/executors?limit=2").await.body;
    let ids = |page: &Value| {
        page["executors"].as_array().unwrap().iter().map(|e| e["executor_id"].clone()).collect::<Vec<_>>()
    };
    assert_eq!(ids(&first), [json!(known[0].id), json!(known[1].id)]);
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let second = server.client.get(&format!("/api/v1/executors?cursor={cursor}")).await.body;
    assert_eq!(ids(&second), [json!(known[2].id)]);
    // One listing's cursor means nothing to another.
    server.client.get(&format!("/api/v1/sandboxes?cursor={cursor}")).await.assert_error(400, "invalid_query");
    server.client.get("/api/v1/executors?limit=5000").await.assert_error(400, "invalid_query");
    // Without a limit, the whole list; an unknown parameter (a client's cache-buster) is ignored.
    let all = server.client.get("/api/v1/executors?_=1764777600").await;
    assert_eq!((all.status, ids(&all.body).len()), (200, 3), "{}", all.body);
    assert!(all.body.get("next_cursor").is_none(), "{}", all.body);
}

/// A client written for upstream does not page: with 600 executors registered it must get all 600.
#[tokio::test]
async fn a_client_that_does_not_page_gets_every_executor() {
    let server = TestServer::start().await;
    let registrations = (0..600).map(|_| ScriptedExecutor::register(&server, &[]));
    let known = futures_util::future::join_all(registrations).await;
    let listed = server.client.get("/api/v1/executors").await.body;
    let listed: std::collections::HashSet<&str> =
        listed["executors"].as_array().unwrap().iter().filter_map(|e| e["executor_id"].as_str()).collect();
    assert_eq!(listed.len(), 600);
    assert!(known.iter().all(|e| listed.contains(e.id.as_str())));
}

#[tokio::test]
async fn routing_considers_connected_executors_and_counts_the_rest() {
    let server = TestServer::start().await;
    for _ in 0..20 {
        ScriptedExecutor::register(&server, &["runtime:codex"]).await;
    }
    let message = server
        .client
        .post("/api/v1/sessions/s/dispatch", &dispatch_body(&mission_id()))
        .await
        .assert_error(503, "no_executor_available");
    assert!(message.contains("20 registered executors are not connected"), "{message}");
    let (mut online, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&id)).await.status, 202);
    online.next_dispatch().await;
    let routing = &server.mission(&id).await["routing"];
    assert_eq!(routing["chosen"], online.id.as_str());
    assert_eq!(routing["rejected"], json!([]), "the offline identities cost no judgement: {routing}");
}
