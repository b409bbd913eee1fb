//! `Idempotency-Key` on the creating routes (issue 38): one mission for ten requests sent at once, the
//! first answer ten times; another request with the key refused; keys per operator, kept across a
//! restart; the same for runtimes and webhooks.

use serde_json::{json, Value};

use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer};

async fn keyed(server: &TestServer, path: &str, body: &Value, key: &str) -> crate::support::Resp {
    server.client.post_with(path, body, &[("idempotency-key", key)]).await
}

/// Ten dispatches with one key at once: one mission, handed to the executor once, and ten answers
/// alike (nine of them replays).
#[tokio::test]
async fn ten_dispatches_with_one_key_at_once_make_one_mission_and_ten_identical_answers() {
    let server = TestServer::start().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["executor_id"] = json!(e.id);
    let answers = futures_util::future::join_all((0..10).map(|_| {
        let (server, body) = (&server, &body);
        async move { keyed(server, "/api/v1/sessions/s/dispatch", body, "dispatch-1").await }
    }))
    .await;
    let first = answers.iter().find(|r| r.header("idempotent-replayed").is_none()).expect("one carried out");
    assert_eq!((first.status, first.body["mission_id"].as_str()), (202, Some(id.as_str())), "{}", first.body);
    for r in &answers {
        assert_eq!((r.status, &r.body), (first.status, &first.body));
    }
    let replays = answers.iter().filter(|r| r.header("idempotent-replayed") == Some("true")).count();
    assert_eq!(replays, 9);
    assert_eq!(e.next_dispatch().await.body["mission_id"], id.as_str());
    assert!(e.no_dispatch_pending(), "handed to the executor once");

    // Another request with the key is refused, and creates nothing.
    let other = mission_id();
    let mut changed = dispatch_body(&other);
    changed["executor_filter"]["executor_id"] = json!(e.id);
    let r = keyed(&server, "/api/v1/sessions/s/dispatch", &changed, "dispatch-1").await;
    let message = r.assert_error(409, "idempotency_conflict");
    assert!(message.contains("another request"), "{message}");
    assert_eq!(server.client.get(&format!("/api/v1/missions/{other}")).await.status, 404);
    // A new key is a new request.
    let r = keyed(&server, "/api/v1/sessions/s/dispatch", &changed, "dispatch-2").await;
    assert_eq!((r.status, r.header("idempotent-replayed")), (202, None), "{}", r.body);
    server.stop().await;
}

/// The answer is kept across a restart; a refusal is kept too (the same request would be refused
/// again), but not an answer that says "not now".
#[tokio::test]
async fn kept_answers_survive_a_restart_and_failures_now_are_not_kept() {
    let server = TestServer::start().await;
    let id = mission_id();
    let body = dispatch_body(&id);
    // No executor: 503, not kept; the same key later, with an executor, carries the request out.
    let r = keyed(&server, "/api/v1/sessions/s/dispatch", &body, "k").await;
    r.assert_error(503, "no_executor_available");
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let r = keyed(&server, "/api/v1/sessions/s/dispatch", &body, "k").await;
    assert_eq!((r.status, r.header("idempotent-replayed")), (202, None), "{}", r.body);
    e.next_dispatch().await;
    let first = r.body;

    let server = server.restart().await;
    let r = keyed(&server, "/api/v1/sessions/s/dispatch", &body, "k").await;
    assert_eq!((r.status, r.header("idempotent-replayed")), (202, Some("true")));
    assert_eq!(r.body, first);
    assert!(e.no_dispatch_pending());
    // A refusal the same request would get again is kept as it is.
    let bad = json!({"mission_id": "m-x"});
    let refused = keyed(&server, "/api/v1/sessions/s/dispatch", &bad, "bad").await;
    refused.assert_error(400, "schema_violation");
    let again = keyed(&server, "/api/v1/sessions/s/dispatch", &bad, "bad").await;
    assert_eq!((again.status, &again.body, again.header("idempotent-replayed")), (400, &refused.body, Some("true")));
    server.stop().await;
}

/// Keys are each operator's own; a runtime and a webhook are created once per key (the webhook's
/// secret is its first answer's); a key that cannot be one is refused.
#[tokio::test]
async fn keys_are_per_operator_and_cover_runtimes_and_webhooks() {
    let server = TestServer::start().await;
    let r = server.client.post("/api/v1/operators", &json!({"name": "ada", "role": "admin"})).await;
    let ada = format!("Bearer {}", r.body["token"].as_str().unwrap());
    let as_ada = [("authorization", ada.as_str())];
    let r = server.client.post_with("/api/v1/operators", &json!({"name": "bob", "role": "admin"}), &as_ada).await;
    let bob = format!("Bearer {}", r.body["token"].as_str().unwrap());

    let hook = json!({"url": "http://203.0.113.9:9/hook", "events": ["mission.failed"]});
    let with = |who: &str, key: &'static str| [("authorization", who.to_owned()), ("idempotency-key", key.to_owned())];
    let post = |path: &'static str, body: Value, headers: [(&'static str, String); 2]| {
        let server = &server;
        async move {
            let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            server.client.post_with(path, &body, &headers).await
        }
    };
    let first = post("/api/v1/webhooks", hook.clone(), with(&ada, "h")).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let again = post("/api/v1/webhooks", hook.clone(), with(&ada, "h")).await;
    assert_eq!((again.status, &again.body), (201, &first.body), "the same subscription and secret");
    let bobs = post("/api/v1/webhooks", hook.clone(), with(&bob, "h")).await;
    assert_eq!((bobs.status, bobs.header("idempotent-replayed")), (201, None), "bob's key h is not ada's");
    assert_ne!(bobs.body["id"], first.body["id"]);
    let listed = server.client.get_with("/api/v1/webhooks", &as_ada).await.body;
    assert_eq!(listed["webhooks"].as_array().unwrap().len(), 2);

    let runtime = json!({"name": "rt", "base_url": "http://127.0.0.1:9/"});
    let r = post("/api/v1/runtimes", runtime.clone(), with(&ada, "r")).await;
    let again = post("/api/v1/runtimes", runtime.clone(), with(&ada, "r")).await;
    assert_eq!((again.status, &again.body, again.header("idempotent-replayed")), (r.status, &r.body, Some("true")));
    // The key of a webhook, on another route: another request.
    post("/api/v1/runtimes", runtime, with(&ada, "h")).await.assert_error(409, "idempotency_conflict");

    // (The test client sends no empty header; an empty key is refused by the same check, unit-tested.)
    for bad in ["a\tb", "with space", &"k".repeat(256)] {
        let headers = [("authorization", ada.as_str()), ("idempotency-key", bad)];
        let r = server.client.post_with("/api/v1/webhooks", &hook, &headers).await;
        r.assert_error(400, "invalid_idempotency_key");
    }
    server.stop().await;
}
