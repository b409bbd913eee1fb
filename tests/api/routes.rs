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
    for path in [
        "/api/v1/executors",
        "/api/v1/missions",
        &format!("/api/v1/executors/{}", e.id),
        "/api/v1/missions/m1",
        "/metrics",
    ] {
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

#[tokio::test]
async fn metrics_count_what_happened() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let _idle = ScriptedExecutor::register(&server, &[]).await;
    let id = "m-metrics-1";
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(id)).await.status, 202);
    e.next_dispatch().await;
    ws.ack("mission.started", id, json!({"state": "running"})).await;
    ws.ack("mission.completed", id, json!({"state": "done"})).await;
    assert_eq!(ws.send(tokio_tungstenite::tungstenite::Message::text("nope")).await["error"], "invalid_json");
    e.answer_with(crate::support::executor::Answer::Status(500));
    server
        .client
        .post("/api/v1/sessions/s/dispatch", &dispatch_body("m-metrics-2"))
        .await
        .assert_error(502, "executor_forward_failed");
    let _second_socket = e.connect(&server).await;
    server
        .eventually("/metrics", "second socket counted", |m| {
            m.as_str().is_some_and(|t| t.contains("aiwg_executor_sockets 2\n"))
        })
        .await;

    let text = server.client.get("/metrics").await.body;
    let text = text.as_str().expect("text");
    for line in [
        "aiwg_executors_registered 2\n",
        "aiwg_executors_connected 1\n",
        "aiwg_missions{state=\"done\"} 1\n",
        "aiwg_missions{state=\"failed\"} 1\n",
        "aiwg_missions{state=\"running\"} 0\n",
        "aiwg_events_ingested_total 2\n",
        "aiwg_frames_rejected_total{code=\"invalid_json\"} 1\n",
        "aiwg_dispatch_latency_seconds_count 1\n",
        "aiwg_forward_failures_total{code=\"refused\"} 1\n",
        "aiwg_executor_reconnects_total 1\n",
        "# TYPE aiwg_commit_latency_seconds histogram\n",
        "aiwg_queue_depth 0\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}
