//! The built-in dashboard's server side (issue 16): its embedded assets with their security headers,
//! the overview it starts from, and the readiness check of the fleet page. What the page does in a
//! browser is in `dashboard_browser.rs`.

use axum::http::Method;
use serde_json::json;

use crate::support::http::auth_header;
use crate::support::{dispatch_to, ScriptedExecutor, TestServer};

const OPERATOR: &str = "dashboard-operator-token-0123456789";

#[tokio::test]
async fn the_page_is_embedded_small_and_locked_down() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![OPERATOR.into()]).await;
    let mut total = 0;
    for (path, kind) in
        [("/", "text/html"), ("/ui/", "text/html"), ("/ui/app.js", "text/javascript"), ("/ui/style.css", "text/css")]
    {
        // Public, like any login page: the data behind it is what needs the token.
        let r = server.client.get(path).await;
        assert_eq!(r.status, 200, "{path}");
        assert!(r.header("content-type").unwrap().starts_with(kind), "{path}: {:?}", r.header("content-type"));
        let csp = r.header("content-security-policy").unwrap();
        for directive in ["default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        assert!(!csp.contains("unsafe"), "{path}: {csp}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("x-frame-options"), Some("DENY"));
        assert_eq!(r.header("cache-control"), Some("no-cache"));
        if path != "/ui/" {
            total += r.body.as_str().unwrap().len();
        }
        // A browser revalidating its copy moves no body.
        let tag = r.header("etag").unwrap().to_owned();
        let again = server.client.get_with(path, &[("if-none-match", &tag)]).await;
        assert_eq!((again.status, again.body.clone()), (304, json!(null)), "{path}");
    }
    assert!(total < 150_000, "the page weighs {total} bytes");
    // The page runs no inline script: its one script is a module from serve itself.
    let page = server.client.get("/").await.body.as_str().unwrap().to_owned();
    assert!(page.contains(r#"<script type="module" src="/ui/app.js"></script>"#));
    assert_eq!(page.matches("<script").count(), 1, "{page}");

    // The API's answers cannot be framed or sniffed into a page either.
    let (name, value) = auth_header(OPERATOR);
    let r = server.client.get_with("/api/v1/missions", &[(name, value.as_str())]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-security-policy"), Some("default-src 'none'; frame-ancestors 'none'"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    server.client.get("/api/v1/missions").await.assert_error(401, "unauthorized");
    server.client.request(Method::POST, "/", None, &[]).await.assert_error(405, "method_not_allowed");
    server.client.get("/ui/missing.js").await.assert_error(404, "not_found");
}

#[tokio::test]
async fn the_overview_counts_missions_and_says_where_the_log_stands() {
    let server = TestServer::start().await;
    let empty = server.client.get("/api/v1/overview").await;
    assert_eq!(empty.status, 200, "{}", empty.body);
    assert_eq!(empty.body["last_seq"], 0);
    assert_eq!(empty.body["missions_total"], 0);
    assert_eq!(empty.body["missions"].as_object().unwrap().len(), 9, "every state, zero included");

    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let done = dispatch_to(&server, &mut e).await;
    let running = dispatch_to(&server, &mut e).await;
    ws.ack("mission.started", &done, json!({"state": "running"})).await;
    ws.ack("mission.completed", &done, json!({"state": "done", "exit_code": 0})).await;
    let last = ws.ack("mission.started", &running, json!({"state": "running"})).await;
    let o =
        server.eventually("/api/v1/overview", "the last event counted", |o| o["last_seq"].as_i64() >= Some(last)).await;
    assert_eq!(o["last_seq"], last, "nothing after the last acknowledged event: {o}");
    assert_eq!((o["missions"]["done"].as_i64(), o["missions"]["running"].as_i64()), (Some(1), Some(1)), "{o}");
    assert_eq!(o["missions_total"], 2);
    assert_eq!((o["executors_registered"].as_i64(), o["executors_connected"].as_i64()), (Some(1), Some(1)));

    // Following the stream from last_seq misses nothing that happens after the read.
    let mut stream = server.client.sse(&format!("/api/v1/events?since={last}"), &[]).await;
    ws.ack("mission.progress", &running, json!({"summary": "after"})).await;
    let next = stream.next().await.expect("the next event");
    assert_eq!(next.id.as_deref(), Some((last + 1).to_string().as_str()));

    let r = server.client.get("/api/v1/overview").await;
    let tag = r.header("etag").unwrap().to_owned();
    assert_eq!(server.client.get_with("/api/v1/overview", &[("if-none-match", &tag)]).await.status, 304);
}

#[tokio::test]
async fn readiness_is_asked_for_not_inferred() {
    let server = TestServer::start().await;
    let (e, _ws) = ScriptedExecutor::online(&server, &["x-class:unattended_machine"]).await;
    let path = format!("/api/v1/executors/{}/readiness", e.id);

    // No report served: no readiness, and why.
    let r = server.client.get(&path).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!((r.body["report"].clone(), r.body["unattended_ready"].clone()), (json!(null), json!(false)));
    assert!(r.body["error"].as_str().unwrap().contains("404"), "{}", r.body);

    let report = json!({"ready": false, "executor_class": "unattended_machine", "credential_expires_at": null,
        "budget": {"state": "ok"}, "gaps": [{"kind": "identity", "detail": "not signed in to the provider"}]});
    e.report_readiness(Some(report.clone()));
    let r = server.client.get(&path).await;
    assert_eq!(r.body["report"], report, "served as the executor reported it");
    assert_eq!(r.body["unattended_ready"], false);
    assert!(r.body["gap"].as_str().unwrap().contains("not signed in to the provider"), "{}", r.body);
    assert!(r.body.get("error").is_none());

    let mut ready = report;
    ready["ready"] = json!(true);
    ready["gaps"] = json!([]);
    e.report_readiness(Some(ready));
    let r = server.client.get(&path).await;
    assert_eq!(r.body["unattended_ready"], true, "{}", r.body);

    server.client.get("/api/v1/executors/nobody/readiness").await.assert_error(404, "not_found");
}
