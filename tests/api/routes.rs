//! Health, compatibility routes, unknown routes and methods, operator authentication.

use serde_json::json;

use crate::support::{dispatch_body, ScriptedExecutor, TestServer};

#[tokio::test]
async fn health_and_unknown_routes_answer_json() {
    let server = TestServer::start().await;
    for path in ["/healthz", "/api/health"] {
        let r = server.client.get(path).await;
        assert_eq!((r.status, r.body.clone()), (200, json!({"status": "ok"})), "{path}");
    }
    server.client.get("/api/v1/nothing").await.assert_error(404, "not_found");
    server.client.get("/api/v1/executors/").await.assert_error(404, "not_found");
    server.client.post("/api/v1/executors", &json!({})).await.assert_error(405, "method_not_allowed");
    server.client.delete("/api/v1/missions", None).await.assert_error(405, "method_not_allowed");
}

const OPERATOR: &str = "operator-token-0123456789";

#[tokio::test]
async fn with_operator_tokens_configured_operator_routes_need_one() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![OPERATOR.into()]).await;
    let e = ScriptedExecutor::register(&server, &[]).await;
    let operator = format!("Bearer {OPERATOR}");
    let executor = format!("Bearer {}", e.token);
    for path in ["/api/v1/executors", "/api/v1/missions", &format!("/api/v1/executors/{}", e.id), "/api/v1/missions/m1"]
    {
        server.client.get(path).await.assert_error(401, "unauthorized");
        server
            .client
            .get_with(path, &[("authorization", "Bearer wrong-token")])
            .await
            .assert_error(401, "token_invalid");
        server.client.get_with(path, &[("authorization", &executor)]).await.assert_error(403, "forbidden");
        let ok = server.client.get_with(path, &[("authorization", &operator)]).await;
        assert!(ok.status == 200 || (ok.status == 404 && path.ends_with("m1")), "{path}: {}", ok.body);
    }
    let body = dispatch_body("m-op");
    server.client.post("/api/v1/sessions/s/dispatch", &body).await.assert_error(401, "unauthorized");
    server
        .client
        .post_with("/api/v1/sessions/s/dispatch", &body, &[("authorization", &executor)])
        .await
        .assert_error(403, "forbidden");
    let r = server.client.post_with("/api/v1/sessions/s/dispatch", &body, &[("authorization", &operator)]).await;
    r.assert_error(503, "no_executor_available");
    for path in ["/api/v1/missions/m1/pause", "/api/v1/missions/m1/resume", "/api/v1/missions/m1/abort"] {
        server.client.post(path, &json!(null)).await.assert_error(401, "unauthorized");
        server
            .client
            .post_with(path, &json!(null), &[("authorization", &executor)])
            .await
            .assert_error(403, "forbidden");
        server
            .client
            .post_with(path, &json!(null), &[("authorization", &operator)])
            .await
            .assert_error(404, "not_found");
    }
    let answer = json!({"hitl_id": "h", "response": "yes"});
    let hitl = "/api/v1/missions/m1/hitl_response";
    server.client.post(hitl, &answer).await.assert_error(401, "unauthorized");
    server.client.post_with(hitl, &answer, &[("authorization", &executor)]).await.assert_error(403, "forbidden");
    server.client.post_with(hitl, &answer, &[("authorization", &operator)]).await.assert_error(404, "not_found");
    server.client.get("/api/v1/events").await.assert_error(401, "unauthorized");
    server.client.get(&format!("/api/v1/events?token={}", e.token)).await.assert_error(403, "forbidden");
    let sse = server.client.sse(&format!("/api/v1/events?token={OPERATOR}"), &[]).await;
    assert_eq!(sse.status, 200, "browsers pass the token in the query");
    let sse = server.client.sse("/api/v1/events", &[("authorization", &operator)]).await;
    assert_eq!(sse.status, 200);
    // Operator tokens never act as an executor.
    server
        .client
        .delete(&format!("/api/v1/executors/{}", e.id), Some(OPERATOR))
        .await
        .assert_error(401, "token_invalid");
}
