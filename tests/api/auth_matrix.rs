//! The auth matrix (issue 11, "keep it that way"): with operator tokens configured, every route against
//! every kind of credential, each answer asserted. An executor's token acts only on that executor; an
//! operator token never acts as an executor; nothing but the right credential gets through.

use axum::http::Method;
use serde_json::json;

use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer};

const OPERATOR: &str = "operator-token-0123456789abcdef";

#[derive(Clone, Copy, Debug)]
enum Who {
    Nobody,
    Garbage,
    Operator,
    ThisExecutor,
    OtherExecutor,
}

#[tokio::test]
async fn every_route_against_every_credential() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![OPERATOR.into()]).await;
    let auth = [("authorization", format!("Bearer {OPERATOR}"))];
    let as_operator: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // Online without `eventually` (its reads carry no operator token): an acknowledged frame means the
    // socket is attached.
    let mut e = ScriptedExecutor::register(&server, &["hitl"]).await;
    let mut ws = e.connect(&server).await;
    let resync = ws.envelope("executor.resync", None, json!({"owned_mission_ids": []}));
    assert_eq!(ws.send_json(&resync).await["ack"], true);
    let other = ScriptedExecutor::register(&server, &[]).await;
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["executor_filter"]["executor_id"] = json!(e.id);
    let r = server.client.post_with("/api/v1/sessions/s/dispatch", &body, &as_operator).await;
    assert_eq!(r.status, 202, "{}", r.body);
    e.next_dispatch().await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;

    let token = |who: Who| match who {
        Who::Nobody => None,
        Who::Garbage => Some("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".to_owned()),
        Who::Operator => Some(OPERATOR.to_owned()),
        Who::ThisExecutor => Some(e.token.clone()),
        Who::OtherExecutor => Some(other.token.clone()),
    };
    let executor = format!("/api/v1/executors/{}", e.id);
    let mission = format!("/api/v1/missions/{id}");
    // (method, path, body): operator routes, which change nothing when refused.
    let operator_routes = [
        (Method::GET, "/api/v1/executors".to_owned(), None),
        (Method::GET, executor.clone(), None),
        (Method::POST, format!("{executor}/drain"), None),
        (Method::POST, format!("{executor}/remove"), None),
        (Method::GET, format!("{executor}/readiness"), None),
        (Method::POST, "/api/v1/sessions/s/dispatch".to_owned(), Some(dispatch_body(&mission_id()))),
        (Method::POST, "/api/v1/dispatch/plan".to_owned(), Some(dispatch_body(&mission_id()))),
        (Method::GET, "/api/v1/missions".to_owned(), None),
        (Method::GET, mission.clone(), None),
        (Method::POST, format!("{mission}/pause"), None),
        (Method::POST, format!("{mission}/abort"), None),
        (Method::POST, format!("{mission}/hitl_response"), Some(json!({"hitl_id": "h", "response": "r"}))),
        (Method::GET, "/api/v1/events?follow=false".to_owned(), None),
        (Method::GET, "/metrics".to_owned(), None),
        (Method::GET, "/api/v1/overview".to_owned(), None),
        (Method::GET, "/api/v1/sandboxes".to_owned(), None),
        // Adding a runtime points serve at a URL it will call: operators only.
        (Method::GET, "/api/v1/runtimes".to_owned(), None),
        (Method::POST, "/api/v1/runtimes".to_owned(), Some(json!({"name": "rt", "base_url": "http://127.0.0.1:9/"}))),
        (Method::GET, "/api/v1/runtimes/rt".to_owned(), None),
        (Method::POST, "/api/v1/runtimes/rt/check".to_owned(), None),
        (Method::DELETE, "/api/v1/runtimes/rt".to_owned(), None),
        (Method::GET, "/api/v1/operators".to_owned(), None),
        (Method::GET, "/api/v1/audit".to_owned(), None),
        (Method::GET, "/api/v1/hitl".to_owned(), None),
        (Method::POST, "/api/v1/operators".to_owned(), Some(json!({"name": "x", "role": "admin"}))),
        (Method::DELETE, "/api/v1/operators/config-1".to_owned(), None),
    ];
    for (method, path, body) in &operator_routes {
        for who in [Who::Nobody, Who::Garbage, Who::ThisExecutor, Who::OtherExecutor] {
            let header = token(who).map(|t| format!("Bearer {t}"));
            let headers: Vec<(&str, &str)> = header.iter().map(|h| ("authorization", h.as_str())).collect();
            let bytes = body.as_ref().map(|b| axum::body::Bytes::from(b.to_string()));
            let r = server.client.request(method.clone(), path, bytes, &headers).await;
            let (status, code) = match who {
                Who::Nobody => (401, "unauthorized"),
                Who::Garbage => (401, "token_invalid"),
                _ => (403, "forbidden"),
            };
            assert_eq!(
                (r.status, r.body["error"].as_str()),
                (status, Some(code)),
                "{method} {path} as {who:?}: {}",
                r.body
            );
        }
    }
    // Nothing a refused call asked for happened.
    let status = server.client.get_with(&executor, &as_operator).await.body;
    assert!(status.get("draining").is_none(), "{status}");
    assert_eq!(server.client.get_with(&mission, &as_operator).await.body["state"], "running");
    assert_eq!(server.client.get_with("/api/v1/runtimes", &as_operator).await.body["runtimes"], json!([]));
    let operators = server.client.get_with("/api/v1/operators", &as_operator).await.body;
    assert_eq!(operators["operators"].as_array().map(Vec::len), Some(1), "{operators}");

    // The executor's own route: only its own token deregisters it.
    for who in [Who::Nobody, Who::Garbage, Who::Operator, Who::OtherExecutor] {
        let r = server.client.delete(&executor, token(who).as_deref()).await;
        let (status, code) = match who {
            Who::Nobody => (401, "unauthorized"),
            Who::Garbage | Who::Operator => (401, "token_invalid"),
            _ => (403, "forbidden"),
        };
        assert_eq!((r.status, r.body["error"].as_str()), (status, Some(code)), "DELETE as {who:?}: {}", r.body);
    }
    // Its socket: only its own token (an operator token or another's is refused with 4001).
    for who in [Who::Garbage, Who::Operator, Who::OtherExecutor] {
        let url = server.ws_url(&format!("/ws/executors/{}?token={}", e.id, token(who).unwrap()));
        let mut socket = crate::support::ExecSocket::open(&url, &e.id).await;
        assert_eq!(socket.closed().await.code, 4001, "socket as {who:?}");
    }
    // And the right credentials work.
    assert_eq!(server.client.get_with("/api/v1/executors", &as_operator).await.status, 200);
    assert_eq!(server.client.delete(&executor, Some(&e.token)).await.status, 204);
}
