//! The OpenAPI document against the real router: every route the server answers is documented with its
//! methods, every documented path and method is answered (not the "no such route" 404, not 405), every
//! status the server gave a probe is documented for that operation, and every documented error is the
//! `{error, message}` shape.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use aiwg_contract::Schema;
use aiwg_server::app::App;
use aiwg_server::config::Config;
use aiwg_server::metrics::Metrics;
use aiwg_server::tasks::Sockets;
use axum::body::Bytes;
use hyper::Method;
use serde_json::{json, Value};

use crate::support::TestServer;

type Routes = BTreeMap<String, BTreeSet<String>>;

/// The routes of the server's own router, read from its `Debug` form (axum has no other way to list
/// them): each route's path and the methods of its `Allow` header, HEAD left out (axum answers it with
/// GET).
async fn router_routes() -> Routes {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.server.data_dir = dir.path().to_path_buf();
    let metrics = Arc::new(Metrics::default());
    let (store, writer) =
        aiwg_server::store::sqlite::open(dir.path(), config.store.synchronous, 16, metrics.clone()).await.unwrap();
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let app = Arc::new(
        App::new(config, Schema::load().unwrap(), store.clone(), metrics, Sockets::start().unwrap(), stopped)
            .await
            .unwrap(),
    );
    let text = format!("{:?}", aiwg_server::http::router(app));
    store.close().await;
    writer.finished().await;
    let main = text.split("fallback_router").next().unwrap();
    // `RouteId(N): MethodRouter(... allow_header: Bytes(b"GET,HEAD") ...)` and `RouteId(N): "/path"`.
    let mut methods = BTreeMap::new();
    let mut paths = BTreeMap::new();
    for part in main.split("RouteId(").skip(1) {
        let (id, rest) = part.split_once("): ").unwrap();
        if let Some(path) = rest.strip_prefix('"') {
            paths.insert(id.to_owned(), path.split('"').next().unwrap().to_owned());
        } else if let Some(allow) = rest.split("allow_header: Bytes(b\"").nth(1) {
            let allow = allow.split('"').next().unwrap();
            let set: BTreeSet<String> =
                allow.split(',').filter(|m| *m != "HEAD").map(|m| m.to_ascii_lowercase()).collect();
            methods.insert(id.to_owned(), set);
        }
    }
    assert!(paths.len() >= 20 && paths.len() == methods.len(), "cannot read the router: {paths:?} {methods:?}");
    paths.into_iter().map(|(id, path)| (path, methods.remove(&id).unwrap())).collect()
}

fn documented(doc: &Value) -> Routes {
    doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(path, item)| {
            let methods = item
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| ["get", "put", "post", "delete", "patch", "options", "head", "trace"].contains(&k.as_str()))
                .cloned()
                .collect();
            (path.clone(), methods)
        })
        .collect()
}

/// A response object, with a `$ref` to `components/responses` followed.
fn resolve<'a>(doc: &'a Value, response: &'a Value) -> &'a Value {
    match response["$ref"].as_str() {
        Some(r) => doc.pointer(r.trim_start_matches('#')).unwrap_or_else(|| panic!("{r} points nowhere")),
        None => response,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_matches_the_router_and_the_server() {
    let server = TestServer::start().await;
    let r = server.client.get("/api/v1/openapi.json").await;
    assert_eq!((r.status, r.header("content-type")), (200, Some("application/json")));
    let doc = r.body;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc, serde_json::from_str::<Value>(aiwg_server::openapi::document()).unwrap());

    let routes = router_routes().await;
    assert_eq!(documented(&doc), routes, "documented paths and methods (left) against the router (right)");

    // The fallback's 404 is what "no such route" looks like; a known route never answers it.
    let missing = server.client.get("/api/v1/no-such-route").await;
    assert_eq!(missing.assert_error(404, "not_found"), "no such route");

    let error_schema = Schema::load().unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let streams = operation["responses"]["200"]["content"].get("text/event-stream").is_some();
            let mut uri = path.replace("{id}", "no-such-id");
            if streams {
                uri.push_str("?follow=false");
            }
            let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
            let body = (method == Method::POST).then(|| Bytes::from("{}"));
            let answer = server.client.request(method.clone(), &uri, body, &[]).await;
            let label = format!("{method} {uri}: {} {}", answer.status, answer.body);
            assert_ne!(answer.status, 405, "{label}");
            assert!(!(answer.status == 404 && answer.body["message"] == "no such route"), "{label}");
            let status = answer.status.to_string();
            assert!(operation["responses"].get(&status).is_some(), "status not documented for {label}");
            if answer.status >= 400 {
                if let Err(details) = error_schema.validate("error_response", &answer.body) {
                    panic!("{label} is not the error shape: {details:?}");
                }
            }
        }
    }

    // Every documented error is JSON in the `{error, message}` shape.
    let mut errors = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            for (status, response) in operation["responses"].as_object().unwrap() {
                if status.as_str() < "400" {
                    continue;
                }
                let schema = &resolve(&doc, response)["content"]["application/json"]["schema"];
                assert_eq!(*schema, json!({"$ref": "#/components/schemas/error_response"}), "{method} {path} {status}");
                errors += 1;
            }
        }
    }
    assert!(errors > 40, "{errors} documented errors");
    let shape = &doc["components"]["schemas"]["error_response"];
    assert_eq!(shape["required"], json!(["error", "message"]));
}
