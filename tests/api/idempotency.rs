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

/// The answer is kept across a restart; an answer that says "not now" is not.
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
    server.stop().await;
}

/// Issue 53, item 9: a refusal was kept, so the corrected request, sent again with the same key as a
/// client does, got 409 `idempotency_conflict`. Only successes are kept: the refused request is judged
/// again, and its correction is carried out.
#[tokio::test]
async fn a_refused_request_is_not_kept_and_its_correction_with_the_same_key_is_carried_out() {
    let server = TestServer::start().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["executor_id"] = json!(e.id);
    let mut wrong = body.clone();
    wrong["lease"] = json!({"tools": "none"});
    let refused = keyed(&server, "/api/v1/sessions/s/dispatch", &wrong, "fix-me").await;
    refused.assert_error(422, "lease_denies_all_tools");
    let again = keyed(&server, "/api/v1/sessions/s/dispatch", &wrong, "fix-me").await;
    again.assert_error(422, "lease_denies_all_tools");
    assert_eq!(again.header("idempotent-replayed"), None, "judged again, not replayed");
    let corrected = keyed(&server, "/api/v1/sessions/s/dispatch", &body, "fix-me").await;
    assert_eq!((corrected.status, corrected.header("idempotent-replayed")), (202, None), "{}", corrected.body);
    assert_eq!(e.next_dispatch().await.body["mission_id"], id.as_str());
    let replayed = keyed(&server, "/api/v1/sessions/s/dispatch", &body, "fix-me").await;
    assert_eq!((replayed.status, replayed.header("idempotent-replayed")), (202, Some("true")));
    server.stop().await;
}

/// Issue 53, item 9: keys belonged to the operator's name, so a new operator given a revoked one's name
/// replayed its answers (and was refused its own requests as conflicts). They are bound to the
/// operator's id: the new holder of the name starts with no key.
#[tokio::test]
async fn a_name_given_again_does_not_inherit_the_revoked_operators_keys() {
    const ADMIN: &str = "admin-token-0123456789abcdef";
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let admin = format!("Bearer {ADMIN}");
    let add = |name: &'static str| {
        let (server, admin) = (&server, admin.clone());
        async move {
            let body = json!({"name": name, "role": "operator"});
            let r = server.client.post_with("/api/v1/operators", &body, &[("authorization", &admin)]).await;
            assert_eq!(r.status, 201, "{}", r.body);
            format!("Bearer {}", r.body["token"].as_str().unwrap())
        }
    };
    let mut e = ScriptedExecutor::register(&server, &[]).await;
    let mut ws = e.connect(&server).await;
    let resync = ws.envelope("executor.resync", None, json!({"owned_mission_ids": []}));
    assert_eq!(ws.send_json(&resync).await["ack"], true, "the socket is attached");
    let executor = e.id.clone();
    let dispatch = |token: String, id: String| {
        let (server, executor) = (&server, executor.clone());
        async move {
            let mut body = dispatch_body(&id);
            body["executor_filter"]["executor_id"] = json!(executor);
            let headers = [("authorization", token.as_str()), ("idempotency-key", "daily-run")];
            server.client.post_with("/api/v1/sessions/s/dispatch", &body, &headers).await
        }
    };
    let first = mission_id();
    let old_ada = add("ada").await;
    assert_eq!(dispatch(old_ada.clone(), first.clone()).await.status, 202);
    e.next_dispatch().await;
    let r = server.client.delete("/api/v1/operators/ada", Some(ADMIN)).await;
    assert_eq!(r.status, 204, "{}", r.body);

    let new_ada = add("ada").await;
    let r = dispatch(new_ada.clone(), first.clone()).await;
    assert_eq!(r.header("idempotent-replayed"), None, "not the old ada's answer: {}", r.body);
    let second = mission_id();
    let r = dispatch(new_ada, second.clone()).await;
    assert_eq!((r.status, r.body["mission_id"].as_str()), (202, Some(second.as_str())), "{}", r.body);
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
