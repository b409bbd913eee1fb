//! Path parameters (issue 11, finding 12): an `{id}` that is not UTF-8 once percent-decoded is our
//! JSON error on every route that has one, as the OpenAPI document says.

use axum::http::Method;
use serde_json::Value;

use crate::support::TestServer;

/// Finding 12: invalid UTF-8 in a path id was answered in plain text. Every `{id}` route, every method.
#[tokio::test]
async fn a_path_id_that_is_not_utf8_is_a_json_error_on_every_route() {
    let server = TestServer::start().await;
    let doc: Value = serde_json::from_str(aiwg_server::openapi::document()).unwrap();
    let mut probed = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.contains("{id}") {
            continue;
        }
        for (method, operation) in item.as_object().unwrap() {
            let Ok(method) = Method::from_bytes(method.to_ascii_uppercase().as_bytes()) else { continue };
            let uri = path.replace("{id}", "%FF%FE");
            let body = (method == Method::POST).then(|| axum::body::Bytes::from("{}"));
            let r = server.client.request(method.clone(), &uri, body, &[]).await;
            let message = r.assert_error(400, "invalid_path");
            assert!(message.contains("UTF-8"), "{method} {uri}: {message}");
            // And the document says so.
            let documented = &operation["responses"]["400"];
            assert!(documented.is_object(), "{method} {path} documents no 400");
            probed += 1;
        }
    }
    assert!(probed >= 14, "{probed} operations probed");
    let bad_request = doc["components"]["responses"]["BadRequest"]["description"].as_str().unwrap();
    assert!(bad_request.contains("invalid_path"), "{bad_request}");
    // A valid percent-encoded id is decoded as before.
    server.client.get("/api/v1/missions/m%2D1").await.assert_error(404, "not_found");
}
