//! Named operators and their roles (issue 37): a viewer reads, an operator drives missions, an admin
//! runs the installation; tokens are shown once, revoked at once; the first named operator closes
//! open routes.

use axum::http::Method;
use serde_json::{json, Value};

use crate::support::{dispatch_body, mission_id, Resp, ScriptedExecutor, TestServer};

const ADMIN: &str = "admin-token-0123456789abcdef";

/// Calls `path` with `token`.
async fn call(server: &TestServer, method: Method, path: &str, body: Option<Value>, token: &str) -> Resp {
    let bearer = format!("Bearer {token}");
    let bytes = body.map(|b| axum::body::Bytes::from(b.to_string()));
    server.client.request(method, path, bytes, &[("authorization", bearer.as_str())]).await
}

/// Adds an operator as `by`; its token.
async fn add(server: &TestServer, by: &str, name: &str, role: &str) -> String {
    let r = call(server, Method::POST, "/api/v1/operators", Some(json!({"name": name, "role": role})), by).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!((r.body["name"].as_str(), r.body["role"].as_str()), (Some(name), Some(role)));
    r.body["token"].as_str().expect("a token").to_owned()
}

/// Every operator route against each role: what the role allows passes the role check (whatever the
/// route then answers), what it does not is 403 `forbidden` naming the role needed, and changes nothing.
#[tokio::test]
async fn each_role_does_what_it_may_and_is_refused_the_rest_by_name() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let viewer = add(&server, ADMIN, "vera", "viewer").await;
    let operator = add(&server, ADMIN, "otto", "operator").await;
    let admin = add(&server, ADMIN, "ada", "admin").await;
    let e = ScriptedExecutor::register(&server, &[]).await;
    let executor = format!("/api/v1/executors/{}", e.id);
    let mission = format!("/api/v1/missions/{}", mission_id());
    // (method, path as documented, path called, body, role needed): every operation the OpenAPI
    // document gives a role, which the document must agree with.
    let rt = "/api/v1/runtimes/rt";
    let routes: Vec<(Method, &str, String, Option<Value>, &str)> = vec![
        (Method::GET, "/api/v1/executors", "/api/v1/executors".into(), None, "viewer"),
        (Method::GET, "/api/v1/executors/{id}", executor.clone(), None, "viewer"),
        (Method::GET, "/api/v1/executors/{id}/readiness", format!("{executor}/readiness"), None, "viewer"),
        (Method::GET, "/api/v1/missions", "/api/v1/missions".into(), None, "viewer"),
        (Method::GET, "/api/v1/hitl", "/api/v1/hitl".into(), None, "viewer"),
        (Method::GET, "/api/v1/missions/{id}", mission.clone(), None, "viewer"),
        (Method::GET, "/api/v1/missions/{id}/log", format!("{mission}/log"), None, "viewer"),
        (Method::GET, "/api/v1/missions/{id}/artifacts", format!("{mission}/artifacts"), None, "viewer"),
        (Method::GET, "/api/v1/missions/{id}/artifacts/{name}", format!("{mission}/artifacts/a.txt"), None, "viewer"),
        (Method::GET, "/api/v1/events", "/api/v1/events?follow=false".into(), None, "viewer"),
        (Method::GET, "/ws/events", "/ws/events".into(), None, "viewer"),
        (Method::GET, "/metrics", "/metrics".into(), None, "viewer"),
        (Method::GET, "/api/v1/overview", "/api/v1/overview".into(), None, "viewer"),
        (Method::GET, "/api/v1/sandboxes", "/api/v1/sandboxes".into(), None, "viewer"),
        (Method::GET, "/api/v1/runtimes", "/api/v1/runtimes".into(), None, "viewer"),
        (Method::GET, "/api/v1/runtimes/{id}", rt.into(), None, "viewer"),
        (
            Method::POST,
            "/api/v1/sessions/{id}/dispatch",
            "/api/v1/sessions/s/dispatch".into(),
            Some(dispatch_body(&mission_id())),
            "operator",
        ),
        (
            Method::POST,
            "/api/v1/dispatch/plan",
            "/api/v1/dispatch/plan".into(),
            Some(dispatch_body(&mission_id())),
            "operator",
        ),
        (Method::POST, "/api/v1/missions/{id}/pause", format!("{mission}/pause"), None, "operator"),
        (Method::POST, "/api/v1/missions/{id}/resume", format!("{mission}/resume"), None, "operator"),
        (Method::POST, "/api/v1/missions/{id}/abort", format!("{mission}/abort"), None, "operator"),
        (
            Method::POST,
            "/api/v1/missions/{id}/hitl_response",
            format!("{mission}/hitl_response"),
            Some(json!({"hitl_id": "h", "response": "r"})),
            "operator",
        ),
        (Method::POST, "/api/v1/executors/{id}/drain", format!("{executor}/drain"), None, "admin"),
        (Method::DELETE, "/api/v1/executors/{id}/drain", format!("{executor}/drain"), None, "admin"),
        (Method::POST, "/api/v1/executors/{id}/remove", format!("{executor}/remove"), None, "admin"),
        (
            Method::POST,
            "/api/v1/runtimes",
            "/api/v1/runtimes".into(),
            Some(json!({"name": "rt", "base_url": "http://127.0.0.1:9/"})),
            "admin",
        ),
        (Method::POST, "/api/v1/runtimes/{id}/check", format!("{rt}/check"), None, "admin"),
        (Method::DELETE, "/api/v1/runtimes/{id}", rt.into(), None, "admin"),
        (Method::POST, "/api/v1/store/compact", "/api/v1/store/compact".into(), None, "admin"),
        (Method::GET, "/api/v1/audit", "/api/v1/audit".into(), None, "admin"),
        (Method::GET, "/api/v1/usage", "/api/v1/usage".into(), None, "operator"),
        (
            Method::PATCH,
            "/api/v1/missions/{id}/budget",
            format!("{mission}/budget"),
            Some(json!({"max_tokens": 5})),
            "operator",
        ),
        (Method::GET, "/api/v1/budgets", "/api/v1/budgets".into(), None, "admin"),
        (
            Method::POST,
            "/api/v1/budgets",
            "/api/v1/budgets".into(),
            Some(json!({"scope": "all", "max_tokens": 5, "period": "1d"})),
            "admin",
        ),
        (Method::DELETE, "/api/v1/budgets/{id}", "/api/v1/budgets/bud_x".into(), None, "admin"),
        (Method::GET, "/api/v1/whoami", "/api/v1/whoami".into(), None, "viewer"),
        (Method::GET, "/api/v1/operators", "/api/v1/operators".into(), None, "admin"),
        (
            Method::POST,
            "/api/v1/operators",
            "/api/v1/operators".into(),
            Some(json!({"name": "x", "role": "viewer"})),
            "admin",
        ),
        (Method::DELETE, "/api/v1/operators/{name}", "/api/v1/operators/x".into(), None, "admin"),
        (Method::GET, "/api/v1/webhooks", "/api/v1/webhooks".into(), None, "admin"),
        (
            Method::POST,
            "/api/v1/webhooks",
            "/api/v1/webhooks".into(),
            Some(json!({"url": "http://203.0.113.9:9/", "events": ["mission.failed"]})),
            "admin",
        ),
        (Method::DELETE, "/api/v1/webhooks/{id}", "/api/v1/webhooks/wh_x".into(), None, "admin"),
        (Method::GET, "/api/v1/webhooks/{id}/deliveries", "/api/v1/webhooks/wh_x/deliveries".into(), None, "admin"),
        (
            Method::POST,
            "/api/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver",
            "/api/v1/webhooks/wh_x/deliveries/msg_x/redeliver".into(),
            None,
            "admin",
        ),
    ];
    let document = server.client.get("/api/v1/openapi.json").await.body;
    let mut documented = std::collections::BTreeSet::new();
    for (path, operations) in document["paths"].as_object().unwrap() {
        for (method, op) in operations.as_object().unwrap() {
            if let Some(role) = op["x-aiwg-role"].as_str() {
                documented.insert((method.to_uppercase(), path.clone(), role.to_owned()));
            }
        }
    }
    let tested = routes.iter().map(|(m, doc, _, _, role)| (m.to_string(), doc.to_string(), role.to_string())).collect();
    assert_eq!(documented, tested, "the roles the OpenAPI document names are the ones served");
    let ranks = ["viewer", "operator", "admin"];
    let rank = |r: &str| ranks.iter().position(|x| *x == r).unwrap();
    for (who, role, token) in [("vera", "viewer", &viewer), ("otto", "operator", &operator)] {
        for (method, _, path, body, needed) in &routes {
            let r = call(&server, method.clone(), path, body.clone(), token).await;
            if rank(role) >= rank(needed) {
                assert!(![401, 403].contains(&r.status), "{method} {path} as {role}: {} {}", r.status, r.body);
                continue;
            }
            let message = r.assert_error(403, "forbidden");
            let article = if role == "viewer" { "a" } else { "an" };
            assert_eq!(message, format!("this needs the {needed} role; {who} is {article} {role}"), "{method} {path}");
        }
    }
    // Nothing a refused call asked for happened: the executor is registered and not draining, no
    // runtime, no operator x.
    let status = call(&server, Method::GET, &executor, None, &admin).await.body;
    assert!(status.get("draining").is_none(), "{status}");
    assert_eq!(call(&server, Method::GET, "/api/v1/runtimes", None, &admin).await.body["runtimes"], json!([]));
    assert_eq!(call(&server, Method::GET, "/api/v1/webhooks", None, &admin).await.body["webhooks"], json!([]));
    let listed = call(&server, Method::GET, "/api/v1/operators", None, &admin).await.body;
    let mut names: Vec<&str> =
        listed["operators"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names.remove(0), "config-1", "configured tokens first");
    names.sort_unstable();
    assert_eq!(names, ["ada", "otto", "vera"], "then the named ones (added within a millisecond: by name)");
    // An admin may do it all: the named one as the configured one.
    let r = call(&server, Method::POST, &format!("{executor}/drain"), None, &admin).await;
    assert_eq!((r.status, &r.body["draining"]), (202, &json!(true)), "{}", r.body);
}

/// Issue 55: `GET /api/v1/whoami` says who calls, as what, and every operation that role may call: the
/// OpenAPI document's roles, exactly (what the dashboard shows each caller is derived from it). Without a
/// valid operator token it is refused as every operator read is; a revoked operator is no one.
#[tokio::test]
async fn whoami_says_who_calls_and_every_operation_their_role_may_call() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let document = server.client.get("/api/v1/openapi.json").await.body;
    let ranks = ["viewer", "operator", "admin"];
    let rank = |r: &str| ranks.iter().position(|x| *x == r).unwrap();
    let may = |role: &str| -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        for (path, operations) in document["paths"].as_object().unwrap() {
            for (method, op) in operations.as_object().unwrap() {
                if op["x-aiwg-role"].as_str().is_some_and(|needed| rank(needed) <= rank(role)) {
                    out.insert(format!("{} {path}", method.to_uppercase()));
                }
            }
        }
        out
    };
    let viewer = add(&server, ADMIN, "vera", "viewer").await;
    let operator = add(&server, ADMIN, "otto", "operator").await;
    for (token, name, role) in
        [(viewer.as_str(), "vera", "viewer"), (&operator, "otto", "operator"), (ADMIN, "config-1", "admin")]
    {
        let r = call(&server, Method::GET, "/api/v1/whoami", None, token).await;
        assert_eq!(
            (r.status, r.body["name"].as_str(), r.body["role"].as_str()),
            (200, Some(name), Some(role)),
            "{}",
            r.body
        );
        let listed: Vec<String> = serde_json::from_value(r.body["may"].clone()).unwrap();
        let set: std::collections::BTreeSet<String> = listed.iter().cloned().collect();
        assert_eq!(set.len(), listed.len(), "each once: {listed:?}");
        assert_eq!(set, may(role), "{role}: the document's roles, exactly");
        assert_eq!(r.body.as_object().unwrap().len(), 3, "name, role, may and nothing else: {}", r.body);
    }
    let seen = |token: &str| {
        let server = &server;
        let token = token.to_owned();
        async move { call(server, Method::GET, "/api/v1/whoami", None, &token).await.body["may"].to_string() }
    };
    let (as_viewer, as_operator) = (seen(&viewer).await, seen(&operator).await);
    assert!(as_viewer.contains("GET /api/v1/missions") && !as_viewer.contains("/abort"), "{as_viewer}");
    assert!(as_operator.contains("POST /api/v1/missions/{id}/abort") && !as_operator.contains("/api/v1/audit"));

    server.client.get("/api/v1/whoami").await.assert_error(401, "unauthorized");
    call(&server, Method::GET, "/api/v1/whoami", None, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
        .await
        .assert_error(401, "token_invalid");
    let e = ScriptedExecutor::register(&server, &[]).await;
    call(&server, Method::GET, "/api/v1/whoami", None, &e.token).await.assert_error(403, "forbidden");
    call(&server, Method::POST, "/api/v1/whoami", Some(json!({})), &viewer)
        .await
        .assert_error(405, "method_not_allowed");
    assert_eq!(call(&server, Method::DELETE, "/api/v1/operators/vera", None, ADMIN).await.status, 204);
    call(&server, Method::GET, "/api/v1/whoami", None, &viewer).await.assert_error(401, "token_invalid");
}

/// While routes are open the caller is the anonymous admin, and may call every operator operation.
#[tokio::test]
async fn on_open_routes_whoami_is_the_anonymous_admin() {
    let server = TestServer::start().await;
    let r = server.client.get("/api/v1/whoami").await;
    assert_eq!((r.status, &r.body["name"], &r.body["role"]), (200, &json!("anonymous"), &json!("admin")), "{}", r.body);
    let may = r.body["may"].to_string();
    assert!(may.contains("GET /api/v1/audit") && may.contains("POST /api/v1/executors/{id}/remove"), "{may}");
    assert!(!may.contains("/register"), "executors' routes are no operator's: {may}");
}

/// A token is shown once and never listed; a revoked one acts no more, at once; its name may be given
/// again (a new token); a name in use, a bad name or role are refused; an executor's token is no
/// operator's.
#[tokio::test]
async fn tokens_are_shown_once_revoked_at_once_and_names_are_checked() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let first = add(&server, ADMIN, "alice", "operator").await;
    assert_eq!(first.len(), 43, "256 random bits, base64url");
    let listed = call(&server, Method::GET, "/api/v1/operators", None, ADMIN).await;
    assert!(!listed.body.to_string().contains(&first), "the token is never listed: {}", listed.body);
    let alice = &listed.body["operators"][1];
    assert_eq!((alice["created_by"].as_str(), alice["configured"].as_bool()), (Some("config-1"), Some(false)));
    assert_eq!(listed.body["operators"][0]["configured"], true);

    let again = json!({"name": "alice", "role": "viewer"});
    call(&server, Method::POST, "/api/v1/operators", Some(again), ADMIN).await.assert_error(409, "conflict");
    for (body, why) in [
        (json!({"name": "a b", "role": "viewer"}), "an operator name is 1 to 64"),
        (json!({"name": "config-2", "role": "viewer"}), "a name serve gives itself"),
        (json!({"name": "anonymous", "role": "admin"}), "a name serve gives itself"),
        (json!({"name": "bob", "role": "root"}), "is not one of viewer, operator, admin"),
        (json!({"name": "bob"}), "the body is"),
        (json!({"name": "bob", "role": "viewer", "extra": 1}), "the body is"),
    ] {
        let r = call(&server, Method::POST, "/api/v1/operators", Some(body.clone()), ADMIN).await;
        let message = r.assert_error(422, "invalid_operator");
        assert!(message.contains(why), "{body}: {message}");
    }
    call(&server, Method::DELETE, "/api/v1/operators/config-1", None, ADMIN).await.assert_error(409, "conflict");
    call(&server, Method::DELETE, "/api/v1/operators/nobody", None, ADMIN).await.assert_error(404, "not_found");

    assert_eq!(call(&server, Method::GET, "/api/v1/missions", None, &first).await.status, 200);
    assert_eq!(call(&server, Method::DELETE, "/api/v1/operators/alice", None, ADMIN).await.status, 204);
    call(&server, Method::GET, "/api/v1/missions", None, &first).await.assert_error(401, "token_invalid");
    call(&server, Method::DELETE, "/api/v1/operators/alice", None, ADMIN).await.assert_error(404, "not_found");
    let listed = call(&server, Method::GET, "/api/v1/operators", None, ADMIN).await.body;
    assert!(listed["operators"][1]["revoked_at"].is_string(), "{listed}");

    let second = add(&server, ADMIN, "alice", "viewer").await;
    assert_ne!(first, second);
    call(&server, Method::GET, "/api/v1/missions", None, &first).await.assert_error(401, "token_invalid");
    assert_eq!(call(&server, Method::GET, "/api/v1/missions", None, &second).await.status, 200);

    let e = ScriptedExecutor::register(&server, &[]).await;
    call(&server, Method::GET, "/api/v1/operators", None, &e.token).await.assert_error(403, "forbidden");
}

/// Open routes (loopback, no token anywhere) are one anonymous admin; the first named operator closes
/// them, and revoking the last one opens them again.
#[tokio::test]
async fn the_first_named_operator_closes_open_routes() {
    let server = TestServer::start().await;
    assert_eq!(server.client.get("/api/v1/missions").await.status, 200);
    let body = json!({"name": "root", "role": "admin"});
    let r = server.client.post("/api/v1/operators", &body).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let token = r.body["token"].as_str().unwrap().to_owned();
    server.client.get("/api/v1/missions").await.assert_error(401, "unauthorized");
    let mut dispatch = dispatch_body(&mission_id());
    dispatch["executor_filter"] = json!({"executor_id": "nobody"});
    server.client.post("/api/v1/sessions/s/dispatch", &dispatch).await.assert_error(401, "unauthorized");
    // A browser page may no longer count on open routes either; a real token works.
    assert_eq!(call(&server, Method::GET, "/api/v1/missions", None, &token).await.status, 200);
    let listed = call(&server, Method::GET, "/api/v1/operators", None, &token).await.body;
    assert_eq!(listed["operators"][0]["created_by"], "anonymous");
    assert_eq!(call(&server, Method::DELETE, "/api/v1/operators/root", None, &token).await.status, 204);
    assert_eq!(server.client.get("/api/v1/missions").await.status, 200);
}

/// The command line, as an admin uses it: add prints the token once, list shows who added whom, the
/// new token reads but may not do what its role does not allow (exit 4, the reason), revoke ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_adds_lists_and_revokes_operators() {
    use crate::cli::{cli, stderr, stdout};
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![ADMIN.into()]).await;
    let as_admin = [("AIWG_SERVE_TOKEN", ADMIN)];
    let out = cli(&server.base, &["operators", "add", "vera", "--role", "viewer"], &as_admin).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed = stdout(&out);
    assert!(printed.starts_with("operator vera added as viewer"), "{printed}");
    let token = printed.lines().nth(1).expect("the token on its own line").to_owned();
    assert_eq!(token.len(), 43, "{printed}");

    let out = cli(&server.base, &["operators", "list"], &as_admin).await;
    let listed = stdout(&out);
    let vera = listed.lines().find(|l| l.starts_with("vera")).unwrap_or_else(|| panic!("{listed}"));
    assert!(vera.contains("viewer") && vera.contains("config-1"), "{listed}");
    assert!(!listed.contains(&token), "the token is never listed");

    let as_vera = [("AIWG_SERVE_TOKEN", token.as_str())];
    assert_eq!(cli(&server.base, &["missions", "list"], &as_vera).await.status.code(), Some(0));
    let out = cli(&server.base, &["operators", "add", "mallory", "--role", "admin"], &as_vera).await;
    assert_eq!(out.status.code(), Some(4), "a refusal: {}", stderr(&out));
    assert!(stderr(&out).contains("this needs the admin role; vera is a viewer"), "{}", stderr(&out));

    let out = cli(&server.base, &["operators", "revoke", "vera"], &as_admin).await;
    assert_eq!((out.status.code(), stdout(&out).trim()), (Some(0), "operator vera: revoked"));
    assert_eq!(cli(&server.base, &["missions", "list"], &as_vera).await.status.code(), Some(4));
}
