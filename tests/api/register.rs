//! `POST /api/v1/executors/register`: identity, tokens, validation.

use serde_json::{json, Value};

use crate::support::{ScriptedExecutor, TestServer};

async fn register(server: &TestServer, body: &Value) -> crate::support::Resp {
    server.client.post("/api/v1/executors/register", body).await
}

#[tokio::test]
async fn register_issues_a_random_token_and_lists_the_executor() {
    let server = TestServer::start().await;
    let e = ScriptedExecutor::listen(&["isolation:vm", "runtime:claude-code", "platform:linux/x64", "hitl"]).await;
    let r = register(&server, &e.register_payload()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["executor_id"], e.id.as_str());
    let token = r.body["token"].as_str().unwrap();
    assert_eq!(token.len(), 43, "256 bits in base64url");
    assert!(r.body["registered_at"].as_str().unwrap().ends_with('Z'));

    let other = ScriptedExecutor::listen(&[]).await;
    let r2 = register(&server, &other.register_payload()).await;
    assert_ne!(r2.body["token"], r.body["token"], "tokens are per executor and random");

    let list = server.executors().await;
    let mine = list["executors"].as_array().unwrap().iter().find(|x| x["executor_id"] == e.id.as_str()).unwrap();
    assert_eq!(mine["connected"], false);
    assert_eq!(mine["active_mission_count"], 0);
    let declared = json!(["isolation:vm", "runtime:claude-code", "platform:linux/x64", "hitl", "x-acks"]);
    assert_eq!(mine["capabilities"], declared);
    assert!(mine.get("last_event_ts").is_none() && mine.get("disconnected_at").is_none());
    let one = server.client.get(&format!("/api/v1/executors/{}", e.id)).await;
    assert_eq!(one.status, 200);
    assert_eq!(&one.body, mine);
}

#[tokio::test]
async fn re_register_with_the_current_token_keeps_it_and_without_rotates_it() {
    let server = TestServer::start().await;
    let mut e = ScriptedExecutor::register(&server, &["hitl"]).await;
    let first = e.token.clone();
    let registered_at = server.client.get(&format!("/api/v1/executors/{}", e.id)).await.body["registered_at"].clone();

    let auth = format!("Bearer {first}");
    let mut payload = e.register_payload();
    payload["name"] = json!("renamed");
    let kept = server.client.post_with("/api/v1/executors/register", &payload, &[("authorization", &auth)]).await;
    assert_eq!(kept.status, 201);
    assert_eq!(kept.body["token"], first.as_str(), "presenting the current token keeps it");
    assert_eq!(kept.body["registered_at"], registered_at, "the identity is reclaimed, not recreated");
    let shown = server.client.get(&format!("/api/v1/executors/{}", e.id)).await;
    assert_eq!(shown.body["name"], "renamed");

    let rotated = register(&server, &payload).await;
    assert_eq!(rotated.status, 201);
    let second = rotated.body["token"].as_str().unwrap().to_owned();
    assert_ne!(second, first, "without the token a new one is issued");

    // The old token no longer authenticates; the new one does.
    let stale = server.client.delete(&format!("/api/v1/executors/{}", e.id), Some(&first)).await;
    stale.assert_error(401, "token_invalid");
    e.token = first;
    let mut old_socket = e.connect(&server).await;
    assert_eq!(old_socket.closed().await.code, 4001);
    e.token = second;
    let _live = e.connect(&server).await;
    server.eventually(&format!("/api/v1/executors/{}", e.id), "connected", |b| b["connected"] == true).await;
}

#[tokio::test]
async fn a_newer_minor_spec_version_is_served_with_a_warning_and_another_major_is_refused() {
    let server = TestServer::start().await;
    let e = ScriptedExecutor::listen(&[]).await;
    let mut payload = e.register_payload();
    payload["spec_version"] = json!("1.9.0");
    let r = register(&server, &payload).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let warning = r.header("warning").expect("a Warning header");
    assert!(warning.starts_with("299 aiwg-serve") && warning.contains("1.9.0"), "{warning}");

    let other = ScriptedExecutor::listen(&[]).await;
    let mut payload = other.register_payload();
    payload["spec_version"] = json!("2.0.0");
    register(&server, &payload).await.assert_error(400, "unsupported_spec_version");
    assert_eq!(server.client.get(&format!("/api/v1/executors/{}", other.id)).await.status, 404, "nothing stored");
}

#[tokio::test]
async fn malformed_register_payloads_are_refused_and_store_nothing() {
    let server = TestServer::start().await;
    let e = ScriptedExecutor::listen(&[]).await;
    let good = e.register_payload();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut p = good.clone();
        f(&mut p);
        p
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        ("non-UUID executor_id", with(&|p| p["executor_id"] = json!("my-exec")), "/executor_id"),
        ("capability outside the vocabulary", with(&|p| p["capabilities"] = json!(["gpu"])), "/capabilities/0"),
        ("unknown runtime", with(&|p| p["capabilities"] = json!(["runtime:gemini"])), "/capabilities/0"),
        ("duplicate capabilities", with(&|p| p["capabilities"] = json!(["hitl", "hitl"])), "/capabilities"),
        ("unknown top-level field", with(&|p| p["color"] = json!("red")), ""),
        ("unknown endpoint key", with(&|p| p["transport_endpoints"]["ftp"] = json!("ftp://x")), "/transport_endpoints"),
        (
            "missing name",
            with(&|p| {
                p.as_object_mut().unwrap().remove("name");
            }),
            "",
        ),
        ("empty name", with(&|p| p["name"] = json!("")), "/name"),
        ("name too long", with(&|p| p["name"] = json!("n".repeat(129))), "/name"),
        ("wrong type", with(&|p| p["capabilities"] = json!("hitl")), "/capabilities"),
        ("spec_version not semver", with(&|p| p["spec_version"] = json!("v1")), "/spec_version"),
        (
            "endpoint without scheme",
            with(&|p| p["transport_endpoints"]["rest"] = json!("not a uri")),
            "/transport_endpoints/rest",
        ),
        ("not an object", json!([1, 2]), ""),
    ];
    for (what, body, path) in cases {
        let r = register(&server, &body).await;
        r.assert_error(400, "schema_violation");
        let details = r.body["details"].as_array().unwrap_or_else(|| panic!("{what}: no details in {}", r.body));
        assert!(details.iter().any(|d| d["instance_path"] == path), "{what}: no detail at {path:?}: {}", r.body);
    }
    register(&server, &json!(null)).await.assert_error(400, "schema_violation");
    server.client.post_raw("/api/v1/executors/register", "{\"executor_id\":").await.assert_error(400, "invalid_json");
    server.client.post_raw("/api/v1/executors/register", "").await.assert_error(400, "invalid_json");
    let huge = format!("{{\"name\":\"{}\"}}", "x".repeat(2 * 1024 * 1024));
    server.client.post_raw("/api/v1/executors/register", huge).await.assert_error(413, "payload_too_large");

    assert_eq!(server.executors().await["executors"], json!([]), "nothing was stored");
    // Upstream-compatible oddities that must be accepted.
    let ok = with(&|p| {
        p["capabilities"] = json!(["x-roko-mode", "isolation:gpu-box", "runtime:custom:foo"]);
        p["version"] = json!("2026.8.5");
        p["executor_id"] = json!(p["executor_id"].as_str().unwrap().to_uppercase());
    });
    assert_eq!(register(&server, &ok).await.status, 201);
}

/// Issue 35, finding 3: a WebSocket executor registered as `x-kind:http-runtime` / `x-runtime:<name>`
/// received task missions meant for HTTP runtimes (prompt included, verification skipped) and missions
/// pinned to a runtime by name. The names serve assigns to what it drives itself are serve's alone.
#[tokio::test]
async fn capabilities_serve_assigns_to_runtimes_are_refused_at_register() {
    let server = TestServer::start().await;
    for reserved in ["x-kind:http-runtime", "x-runtime:rt", "x-runtime-kind:local", "x-profile:default", "x-model:m"] {
        let e = ScriptedExecutor::listen(&[reserved]).await;
        let r = register(&server, &e.register_payload()).await;
        let message = r.assert_error(403, "forbidden");
        assert!(message.contains(reserved) && message.contains("serve assigns"), "{message}");
        assert_eq!(server.client.get(&format!("/api/v1/executors/{}", e.id)).await.status, 404, "nothing stored");
    }
    let e = ScriptedExecutor::listen(&["x-kind", "x-runtimes-fan"]).await;
    assert_eq!(register(&server, &e.register_payload()).await.status, 201, "only the assigned prefixes");
}

/// Issue 35, finding 11: the upper-case and `urn:uuid:` spellings of one executor id registered as two
/// executors. Serve keeps the lower-case hyphenated form, whatever spelling reaches it: registration,
/// its socket, the operator's routes and a pinned dispatch all find the one executor.
#[tokio::test]
async fn every_spelling_of_an_executor_id_is_the_same_executor() {
    let server = TestServer::start().await;
    let mut e = ScriptedExecutor::listen(&[]).await;
    let canonical = e.id.clone();
    let (upper, urn) = (canonical.to_uppercase(), format!("urn:uuid:{canonical}"));
    let mut payload = e.register_payload();
    payload["executor_id"] = json!(upper);
    let r = register(&server, &payload).await;
    assert_eq!((r.status, r.body["executor_id"].as_str()), (201, Some(canonical.as_str())), "{}", r.body);
    e.token = r.body["token"].as_str().unwrap().to_owned();
    payload["executor_id"] = json!(urn);
    let again = server
        .client
        .post_with("/api/v1/executors/register", &payload, &[("authorization", &format!("Bearer {}", e.token))])
        .await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert_eq!(again.body["token"], e.token.as_str(), "the same identity: its token kept");
    let listed = server.executors().await["executors"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["executor_id"], canonical.as_str());

    let mut ws = crate::support::ExecSocket::open(
        &server.ws_url(&format!("/ws/executors/{upper}?token={}", e.token)),
        &canonical,
    )
    .await;
    assert_eq!(ws.ping(b"up").await, b"up");
    for spelling in [&upper, &urn] {
        let shown = server.client.get(&format!("/api/v1/executors/{}", spelling.replace(':', "%3A"))).await;
        assert_eq!((shown.status, &shown.body["connected"]), (200, &json!(true)), "{spelling}: {}", shown.body);
    }
    let id = crate::support::mission_id();
    let body = json!({"mission_id": id, "objective": "o", "completion": "c", "executor_filter": {"executor_id": urn}});
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body).await;
    assert_eq!((r.status, r.body["executor_id"].as_str()), (202, Some(canonical.as_str())), "{}", r.body);
    e.next_dispatch().await;
}
