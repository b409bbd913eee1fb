//! A web page in the operator's browser must not drive a local serve (issue 11, finding 1): simple
//! cross-site requests, cross-origin WebSockets and DNS rebinding are refused, and nothing is stored.

use axum::http::Method;
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer};

#[tokio::test]
async fn a_text_plain_dispatch_from_another_site_is_refused_and_nothing_runs() {
    let server = TestServer::start().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    let body = bytes(&dispatch_body(&id));
    let path = "/api/v1/sessions/x/dispatch";

    // The request a page can send without a preflight: text/plain, from its own origin.
    let plain = [("content-type", "text/plain;charset=UTF-8"), ("origin", "https://evil.example")];
    let r = server.client.request(Method::POST, path, Some(body.clone()), &plain).await;
    r.assert_error(403, "forbidden");
    // Even without an Origin (a client that hides it), a non-JSON body is not a dispatch.
    let r = server.client.request(Method::POST, path, Some(body.clone()), &[("content-type", "text/plain")]).await;
    let message = r.assert_error(415, "unsupported_media_type");
    assert!(message.contains("application/json"), "{message}");
    let r = server.client.request(Method::POST, path, Some(body.clone()), &[("content-type", "")]).await;
    r.assert_error(415, "unsupported_media_type");
    let form = [("content-type", "application/x-www-form-urlencoded")];
    server
        .client
        .request(Method::POST, path, Some(body.clone()), &form)
        .await
        .assert_error(415, "unsupported_media_type");
    // What a browser says about a cross-site fetch, whatever its content type.
    let fetch = [("content-type", "application/json"), ("sec-fetch-site", "cross-site")];
    server.client.request(Method::POST, path, Some(body.clone()), &fetch).await.assert_error(403, "forbidden");

    assert!(e.no_dispatch_pending(), "no refused request reached the executor");
    server.client.get(&format!("/api/v1/missions/{id}")).await.assert_error(404, "not_found");

    // The same request from serve's own origin (a same-origin page) or from a non-browser goes through.
    let own = [("content-type", "application/json; charset=utf-8"), ("origin", server.base.as_str())];
    let r = server.client.request(Method::POST, path, Some(body), &own).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(e.next_dispatch().await.body["mission_id"], id.as_str());
}

#[tokio::test]
async fn every_state_changing_route_refuses_a_foreign_origin() {
    let server = TestServer::start().await;
    let evil = [("origin", "https://evil.example")];
    let json_routes = ["/api/v1/executors/register", "/api/sandboxes/register", "/api/v1/missions/m-1/hitl_response"];
    for path in json_routes {
        let r = server.client.request(Method::POST, path, Some(bytes(&json!({}))), &evil).await;
        r.assert_error(403, "forbidden");
        let r =
            server.client.request(Method::POST, path, Some(bytes(&json!({}))), &[("content-type", "text/plain")]).await;
        r.assert_error(415, "unsupported_media_type");
    }
    for path in ["/api/v1/missions/m-1/abort", "/api/v1/missions/m-1/pause", "/api/v1/executors/e/drain"] {
        server.client.request(Method::POST, path, None, &evil).await.assert_error(403, "forbidden");
    }
    for path in ["/api/v1/executors/e", "/api/sandboxes/s", "/api/v1/executors/e/drain"] {
        server.client.request(Method::DELETE, path, None, &evil).await.assert_error(403, "forbidden");
    }
    // A page may point a GET at serve (an <img>), and reading the answer is blocked by the browser.
    assert_eq!(server.client.get_with("/api/v1/missions", &evil).await.status, 200);
}

#[tokio::test]
async fn a_cross_origin_websocket_to_the_event_stream_is_refused() {
    let server = TestServer::start().await;
    let mut request = server.ws_url("/ws/events").into_client_request().unwrap();
    request.headers_mut().insert("origin", "https://evil.example".parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 403),
        other => panic!("expected a 403 refusal, got {:?}", other.map(|(_, r)| r.status())),
    }
    // Serve's own origin may subscribe (the dashboard).
    let mut request = server.ws_url("/ws/events").into_client_request().unwrap();
    request.headers_mut().insert("origin", server.base.parse().unwrap());
    tokio_tungstenite::connect_async(request).await.expect("same-origin upgrade");
}

#[tokio::test]
async fn a_rebound_host_name_is_refused_while_operator_routes_are_open() {
    let server = TestServer::start().await;
    // DNS rebinding: the page's own name now resolves to 127.0.0.1, so the request is same-origin.
    let rebound = [("host", "evil.example:7337"), ("origin", "http://evil.example:7337")];
    let body = bytes(&dispatch_body(&mission_id()));
    let r = server.client.request(Method::POST, "/api/v1/sessions/x/dispatch", Some(body), &rebound).await;
    let message = r.assert_error(403, "forbidden");
    assert!(message.contains("allowed_hosts"), "{message}");
    server.client.get_with("/api/v1/missions", &rebound[..1]).await.assert_error(403, "forbidden");
    for host in ["localhost:7337", "127.0.0.1", "[::1]:7337"] {
        assert_eq!(server.client.get_with("/api/v1/missions", &[("host", host)]).await.status, 200, "{host}");
    }

    // A name the operator allowed (a container's name for the host) is served.
    let server = TestServer::start_with(|c| c.server.allowed_hosts = vec!["host.docker.internal".into()]).await;
    let r = server.client.get_with("/api/v1/missions", &[("host", "host.docker.internal:7337")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Issue 35, finding 11: the guard read its fields more loosely than browsers and proxies write them: a
/// `Host` of `localhost:1@evil.example` passed as `localhost`, `Sec-Fetch-Site: Cross-Site` passed, and
/// only the first of several `Origin` fields was looked at.
#[tokio::test]
async fn the_guard_reads_hosts_sites_and_origins_strictly() {
    let server = TestServer::start().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    for host in ["localhost:1@evil.example", "localhost:x", "127.0.0.1:7337/evil", "[::1]evil"] {
        let r = server.client.get_with("/api/v1/missions", &[("host", host)]).await;
        r.assert_error(403, "forbidden");
    }
    let path = "/api/v1/sessions/x/dispatch";
    for site in ["Cross-Site", "SAME-SITE", "cross-site ", "something-new"] {
        let r = server
            .client
            .request(Method::POST, path, Some(bytes(&dispatch_body(&mission_id()))), &[("sec-fetch-site", site)])
            .await;
        r.assert_error(403, "forbidden");
    }
    let two = [("origin", server.base.as_str()), ("origin", "https://evil.example")];
    let r = server.client.request(Method::POST, path, Some(bytes(&dispatch_body(&mission_id()))), &two).await;
    r.assert_error(403, "forbidden");
    assert!(e.no_dispatch_pending(), "no refused request reached the executor");
    assert_eq!(server.client.get("/api/v1/missions").await.body["missions"], json!([]));
    // What a browser sends from serve's own page still goes through.
    let own = [("origin", server.base.as_str()), ("sec-fetch-site", "same-origin")];
    let r = server.client.request(Method::POST, path, Some(bytes(&dispatch_body(&mission_id()))), &own).await;
    assert_eq!(r.status, 202, "{}", r.body);
}

fn bytes(v: &serde_json::Value) -> axum::body::Bytes {
    axum::body::Bytes::from(v.to_string())
}
