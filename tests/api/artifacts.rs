//! Artifacts (issue 52): files a mission produced, uploaded by its executor with its own token, streamed
//! and bounded by `[artifacts]` (not by `server.max_body_bytes`), kept once per sha256, listed and
//! downloaded by operators as attachments no page of serve's origin renders; every bad upload refused
//! with its code, nothing of it kept.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::cli::{cli, stdout};
use crate::support::{running_mission, ExecSocket, ScriptedExecutor, TestServer};

/// PUTs `bytes` as the mission's artifact `name` with `token`; the status and the JSON answer.
async fn put(server: &TestServer, mission_id: &str, name: &str, token: Option<&str>, bytes: Vec<u8>) -> (u16, Value) {
    let url = format!("http://{}/api/v1/missions/{mission_id}/artifacts/{name}", server.addr());
    let mut request = reqwest::Client::new().put(url).header("content-type", "text/html").body(bytes);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

/// The same as a stream of 64 KiB chunks with no `Content-Length` (as a file is streamed).
async fn put_streamed(server: &TestServer, mission_id: &str, name: &str, token: &str, bytes: Vec<u8>) -> (u16, Value) {
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = bytes.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let url = format!("http://{}/api/v1/missions/{mission_id}/artifacts/{name}", server.addr());
    let response = reqwest::Client::new().put(url).bearer_auth(token).body(body).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

pub(crate) fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect::<String>())
}

async fn listed(server: &TestServer, mission_id: &str) -> Value {
    let r = server.client.get(&format!("/api/v1/missions/{mission_id}/artifacts")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["artifacts"].clone()
}

async fn online(server: &TestServer) -> (ScriptedExecutor, ExecSocket, String) {
    let (mut e, mut socket) = ScriptedExecutor::online(server, &[]).await;
    let id = running_mission(server, &mut e, &mut socket).await;
    (e, socket, id)
}

#[tokio::test]
async fn an_executor_uploads_its_missions_file_and_an_operator_downloads_it_as_an_attachment_only() {
    // Far below the artifact: uploads are not bounded by the request body limit.
    let server = TestServer::start_with(|c| c.server.max_body_bytes = 4096).await;
    let (e, _socket, id) = online(&server).await;
    let page: Vec<u8> = format!("<html><script>alert(1)</script>{}</html>", "x".repeat(3 << 20)).into_bytes();
    let (status, artifact) = put_streamed(&server, &id, "report.html", &e.token, page.clone()).await;
    assert_eq!(status, 201, "{artifact}");
    assert_eq!(
        (&artifact["name"], &artifact["digest"], &artifact["size_bytes"], &artifact["producer"]),
        (&json!("report.html"), &json!(sha256(&page)), &json!(page.len()), &json!(e.id))
    );
    assert_eq!(artifact["uri"], format!("/api/v1/missions/{id}/artifacts/report.html"));
    assert_eq!(listed(&server, &id).await[0], artifact);
    // Declared (Content-Length) far over the request body limit, and taken all the same.
    let (status, declared) = put(&server, &id, "declared.bin", Some(&e.token), vec![b'd'; 64 * 1024]).await;
    assert_eq!((status, &declared["size_bytes"]), (201, &json!(64 * 1024)), "{declared}");

    let url = format!("http://{}/api/v1/missions/{id}/artifacts/report.html", server.addr());
    let got = reqwest::get(&url).await.unwrap();
    assert_eq!(got.status(), 200);
    let header = |h: &str| got.headers().get(h).map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(
        header("content-disposition").as_deref(),
        Some("attachment; filename=\"report.html\"; filename*=UTF-8''report.html")
    );
    assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"));
    assert_eq!(header("content-security-policy").as_deref(), Some("default-src 'none'; sandbox"));
    assert_eq!(got.bytes().await.unwrap().to_vec(), page, "the bytes as uploaded");
}

#[tokio::test]
async fn an_upload_of_the_same_name_replaces_it_and_identical_bytes_are_kept_once() {
    let server = TestServer::start().await;
    let (e, _socket, id) = online(&server).await;
    assert_eq!(put(&server, &id, "a.txt", Some(&e.token), b"first".to_vec()).await.0, 201);
    assert_eq!(put(&server, &id, "b.txt", Some(&e.token), b"second".to_vec()).await.0, 201);
    let (status, replaced) = put(&server, &id, "a.txt", Some(&e.token), b"second".to_vec()).await;
    assert_eq!((status, &replaced["digest"]), (201, &json!(sha256(b"second"))));
    let names: Vec<Value> = listed(&server, &id).await.as_array().unwrap().iter().map(|a| a["name"].clone()).collect();
    assert_eq!(names, [json!("a.txt"), json!("b.txt")]);
    let url = format!("http://{}/api/v1/missions/{id}/artifacts/a.txt", server.addr());
    assert_eq!(reqwest::get(&url).await.unwrap().bytes().await.unwrap().as_ref(), b"second");
    let blobs = crate::support::kept_blobs(&server.config).await;
    assert_eq!(blobs, 1, "\"first\" went with its last artifact; \"second\" is kept once for both");
}

#[tokio::test]
async fn bad_uploads_are_refused_with_their_code_and_nothing_of_them_is_kept() {
    let server = TestServer::start_with(|c| {
        c.artifacts.max_bytes = 1000;
        c.artifacts.max_bytes_per_mission = 1500;
        c.artifacts.upload_grace_s = 0;
    })
    .await;
    let (e, mut socket, id) = online(&server).await;
    let (other, _other_socket, theirs) = online(&server).await;
    let cases: Vec<(&str, Option<&str>, usize, u16, &str)> = vec![
        ("ok.txt", None, 10, 401, "unauthorized"),
        ("ok.txt", Some("not-a-token"), 10, 401, "token_invalid"),
        ("a..b", Some(&e.token), 10, 400, "invalid_artifact_name"),
        ("a%2Fb", Some(&e.token), 10, 400, "invalid_artifact_name"),
        ("esc%1B%5B2K", Some(&e.token), 10, 400, "invalid_artifact_name"),
        ("nul%00", Some(&e.token), 10, 400, "invalid_path"),
        ("big.bin", Some(&e.token), 1001, 413, "payload_too_large"),
    ];
    for (name, token, size, status, code) in cases {
        let (got, body) = put(&server, &id, name, token, vec![b'x'; size]).await;
        assert_eq!((got, body["error"].as_str()), (status, Some(code)), "{name}: {body}");
    }
    let long = "n".repeat(256);
    assert_eq!(put(&server, &id, &long, Some(&e.token), b"x".to_vec()).await.1["error"], "invalid_artifact_name");
    // Too large only as it streams (no Content-Length to judge first).
    let (status, body) = put_streamed(&server, &id, "big.bin", &e.token, vec![b'x'; 1001]).await;
    assert_eq!((status, body["error"].as_str()), (413, Some("payload_too_large")));
    // Another executor's mission, one nobody dispatched; then the mission's bound across its artifacts.
    assert_eq!(put(&server, &theirs, "x", Some(&e.token), b"x".to_vec()).await.1["error"], "forbidden");
    assert_eq!(put(&server, "m-nobody", "x", Some(&e.token), b"x".to_vec()).await.1["error"], "not_found");
    assert_eq!(put(&server, &id, "one", Some(&e.token), vec![b'1'; 900]).await.0, 201);
    assert_eq!(put(&server, &id, "two", Some(&e.token), vec![b'2'; 700]).await.0, 413, "900 + 700 > 1500");
    assert_eq!(put(&server, &id, "one", Some(&e.token), vec![b'3'; 1000]).await.0, 201, "a replacement counts once");
    assert_eq!(listed(&server, &id).await.as_array().unwrap().len(), 1);
    assert_eq!(listed(&server, &theirs).await, json!([]));
    // After the mission's end, past its grace (0 here).
    socket.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    assert_eq!(put(&server, &id, "late", Some(&e.token), b"x".to_vec()).await.1["error"], "mission_ended");
    assert_eq!(crate::support::kept_blobs(&server.config).await, 1, "only the kept artifact's bytes");
    let _ = other;
    server.client.get(&format!("/api/v1/missions/{id}/artifacts/none")).await.assert_error(404, "not_found");
}

#[tokio::test]
async fn retention_removes_a_missions_artifacts_with_its_history() {
    let server = TestServer::start_with(|c| c.retention.keep_days = 0.0).await;
    let (e, mut socket, id) = online(&server).await;
    assert_eq!(put(&server, &id, "out.txt", Some(&e.token), b"result".to_vec()).await.0, 201);
    socket.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    assert_eq!(server.client.post("/api/v1/store/compact", &json!({})).await.status, 200);
    server.client.get(&format!("/api/v1/missions/{id}/artifacts")).await.assert_error(410, "mission_compacted");
    assert_eq!(crate::support::kept_blobs(&server.config).await, 0);
}

#[tokio::test]
async fn missions_artifacts_lists_them_and_gets_one_to_a_file() {
    let server = TestServer::start().await;
    let (e, _socket, id) = online(&server).await;
    assert_eq!(put(&server, &id, "mission.patch", Some(&e.token), b"--- a\n+++ b\n".to_vec()).await.0, 201);
    let listed = cli(&server.base, &["missions", "artifacts", &id[..10]], &[]).await;
    let table = stdout(&listed);
    assert!(
        table.starts_with("NAME") && table.contains("mission.patch") && table.contains(&sha256(b"--- a\n+++ b\n")),
        "{table}"
    );
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("out.patch");
    let got =
        cli(&server.base, &["missions", "artifacts", &id, "--get", "mission.patch", "-o", to.to_str().unwrap()], &[])
            .await;
    assert_eq!(got.status.code(), Some(0), "{}", String::from_utf8_lossy(&got.stderr));
    assert_eq!(std::fs::read(&to).unwrap(), b"--- a\n+++ b\n");
    let missing = cli(&server.base, &["missions", "artifacts", &id, "--get", "nope", "-o", "-"], &[]).await;
    assert_eq!(missing.status.code(), Some(4), "refused: {}", String::from_utf8_lossy(&missing.stderr));
}

/// The `aiwg_store_bytes` gauge of `/metrics`.
async fn store_bytes(server: &TestServer) -> i64 {
    let text = server.client.get("/metrics").await.body.as_str().unwrap().to_owned();
    let line = text.lines().find(|l| l.starts_with("aiwg_store_bytes ")).expect("the store's size");
    line["aiwg_store_bytes ".len()..].trim().parse().unwrap()
}

/// SQLite keeps artifacts' bytes as private files beside its database (written once; a PostgreSQL store
/// keeps them in the database, for every replica): they count toward the store's size, and a file no
/// artifact names (an upload a crash cut short) is gone after a restart while the named ones stay.
#[tokio::test]
async fn an_sqlite_store_keeps_artifacts_as_private_files_that_count_toward_its_size() {
    use std::os::unix::fs::PermissionsExt;
    let server = TestServer::start().await;
    if !server.config.store.database_url.is_empty() {
        return;
    }
    let (e, _socket, id) = online(&server).await;
    let before = store_bytes(&server).await;
    let bytes: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    assert_eq!(put_streamed(&server, &id, "big.bin", &e.token, bytes.clone()).await.0, 201);
    let blobs = server.data_dir().join("blobs");
    let files: Vec<_> = std::fs::read_dir(&blobs).unwrap().map(|f| f.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(std::fs::read(&files[0]).unwrap(), bytes, "the file holds the bytes as uploaded");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode(&blobs), mode(&files[0])), (0o700, 0o600));
    let grown = store_bytes(&server).await - before;
    assert!(grown >= bytes.len() as i64, "the store grew by {grown} bytes for a 3 MiB artifact");

    // What a crash mid-upload leaves: a file no digest names.
    let stray = blobs.join("0123456789abcdef0123456789abcdef");
    std::fs::write(&stray, b"half an upload").unwrap();
    let server = server.restart().await;
    assert!(!stray.exists(), "an unnamed file goes at start");
    assert!(files[0].exists());
    let url = format!("http://{}/api/v1/missions/{id}/artifacts/big.bin", server.addr());
    assert_eq!(reqwest::get(&url).await.unwrap().bytes().await.unwrap().to_vec(), bytes);
}

/// An upload its client cuts mid-way frees its name and leaves nothing: the next upload of that name is
/// taken, and only its bytes are kept.
#[tokio::test]
async fn an_upload_cut_by_its_client_frees_its_name_and_leaves_no_bytes() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::start().await;
    let (e, _socket, id) = online(&server).await;
    let mut tcp = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let head = format!(
        "PUT /api/v1/missions/{id}/artifacts/cut.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Length: 1000000\r\n\r\n",
        e.token
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&[b'x'; 300_000]).await.unwrap();
    drop(tcp);
    // The cut upload holds its name until serve has seen the cut: wait for the name to be free.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let (status, body) = loop {
        let (status, body) = put(&server, &id, "cut.bin", Some(&e.token), b"whole".to_vec()).await;
        if status != 409 || tokio::time::Instant::now() > deadline {
            break (status, body);
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(status, 201, "{body}");
    assert_eq!(crate::support::kept_blobs(&server.config).await, 1, "nothing of the cut upload is kept");
    let url = format!("http://{}/api/v1/missions/{id}/artifacts/cut.bin", server.addr());
    assert_eq!(reqwest::get(&url).await.unwrap().bytes().await.unwrap().as_ref(), b"whole");
}
