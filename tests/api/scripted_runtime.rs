//! The scripted WattSwarm runtime the dispatch tests stand behind a kernel, checked on its own with a
//! plain HTTP client (reqwest, as a kernel uses) and, for what a client library hides, a raw socket: its
//! default answers below a prefix, the scripted faults a kernel's client sees, and its keep-alive parser.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Behavior, ScriptedRuntime, WAIT};

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(WAIT).build().unwrap()
}

/// What a kernel posts to /execute, trimmed to the fields the default answer reads.
fn execute_body() -> Value {
    json!({"task_id": "t-1", "execution_id": "exec-p-1", "task_type": "swarm", "inputs": {"prompt": "hello"},
           "profile": "careful", "stage": "EXPLORE", "attempt_id": "exec-p-1", "seed_bundle": null})
}

async fn execute(client: &reqwest::Client, rt: &ScriptedRuntime) -> reqwest::Result<reqwest::Response> {
    client.post(format!("{}/execute", rt.url())).json(&execute_body()).send().await
}

#[tokio::test]
async fn answers_the_four_endpoints_below_its_prefix() {
    let rt = ScriptedRuntime::start_at("/rt").await;
    assert!(rt.url().ends_with("/rt"), "{}", rt.url());
    let c = client();

    let health = c.get(format!("{}/health", rt.url())).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.json::<Value>().await.unwrap(), json!({"status": "ok"}));

    let caps: Value = c.get(format!("{}/capabilities", rt.url())).send().await.unwrap().json().await.unwrap();
    assert_eq!(caps["profiles"], json!(["default"]));
    assert_eq!(caps["provider_family"], "scripted-runtime");

    let executed = execute(&c, &rt).await.unwrap();
    assert_eq!(executed.status(), 200);
    let executed: Value = executed.json().await.unwrap();
    assert_eq!(
        executed["candidate_output"],
        json!({"answer": "careful::hello", "confidence": 0.93, "check_summary": "stage=EXPLORE attempt=exec-p-1"})
    );
    assert_eq!(executed["evidence_inline"], json!([{"mime": "text/plain", "content": "trace:exec-p-1"}]));
    assert_eq!(executed["evidence_refs"], json!([]));

    let verify = json!({"candidate": {"output": executed["candidate_output"]}, "output_schema": {}, "policy": {}});
    let verdict: Value =
        c.post(format!("{}/verify", rt.url())).json(&verify).send().await.unwrap().json().await.unwrap();
    assert_eq!(verdict["verification_status"], "passed");
    assert_eq!(verdict["reason_codes"], json!([100]));
    assert_eq!(verdict["model_id"], "scripted-v1");

    // The request is recorded relative to the prefix, as JSON and as sent.
    let seen = rt.wait_for("/execute", 1).await;
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].target, "/rt/execute");
    assert_eq!(seen[0].json, Some(execute_body()));
    assert_eq!(seen[0].header("Content-Type"), Some("application/json"));
    assert_eq!(rt.requests_to("/verify")[0].json, Some(verify));

    // Outside the prefix, or an unknown path below it: 404, and no endpoint is counted for it.
    let root = rt.url().trim_end_matches("/rt").to_owned();
    assert_eq!(c.post(format!("{root}/execute")).json(&execute_body()).send().await.unwrap().status(), 404);
    assert_eq!(c.get(format!("{}/nope", rt.url())).send().await.unwrap().status(), 404);
    assert_eq!(rt.count("/execute"), 1);
    assert_eq!(rt.requests().len(), 6);
}

#[tokio::test]
async fn the_default_output_and_capabilities_can_be_replaced() {
    let rt = ScriptedRuntime::start().await;
    rt.set_output(json!({"answer": 42}));
    rt.set_capabilities(json!({"task_types": [], "profiles": ["p"], "provider_family": "f", "model_id": "m"}));
    let c = client();
    let executed: Value = execute(&c, &rt).await.unwrap().json().await.unwrap();
    assert_eq!(executed["candidate_output"], json!({"answer": 42}));
    assert_eq!(executed["evidence_inline"][0]["content"], "trace:exec-p-1");
    let caps: Value = c.get(format!("{}/capabilities", rt.url())).send().await.unwrap().json().await.unwrap();
    assert_eq!(caps["profiles"], json!(["p"]));
}

/// A dropped connection is a transport error (what a kernel retries); the retry comes on a new connection.
#[tokio::test]
async fn a_dropped_request_is_a_transport_error_then_the_script_runs_out() {
    let rt = ScriptedRuntime::start().await;
    rt.script("/execute", [Behavior::Drop, Behavior::Ok]);
    let c = client();

    let dropped = execute(&c, &rt).await.expect_err("a dropped connection is an error");
    assert!(!dropped.is_status() && !dropped.is_timeout(), "a transport error, got {dropped:?}");
    let ok = execute(&c, &rt).await.unwrap();
    assert_eq!(ok.status(), 200);

    let seen = rt.wait_for("/execute", 2).await;
    assert_eq!(seen.len(), 2);
    assert_eq!((seen[0].attempt, seen[1].attempt), (1, 2));
    assert_ne!(seen[0].connection, seen[1].connection, "the dropped connection is not reused");
}

#[tokio::test]
async fn a_scripted_status_answers_once_then_the_default() {
    let rt = ScriptedRuntime::start().await;
    rt.script("/verify", [Behavior::status(503, "busy"), Behavior::raw(200, "text/plain", "not json")]);
    rt.script("/health", [Behavior::Json(json!({"status": "degraded"}))]);
    let c = client();
    let verify = || c.post(format!("{}/verify", rt.url())).json(&json!({})).send();

    let refused = verify().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.text().await.unwrap(), "busy");
    let raw = verify().await.unwrap();
    assert_eq!(raw.headers()["content-type"], "text/plain");
    assert_eq!(raw.text().await.unwrap(), "not json");
    assert_eq!(verify().await.unwrap().status(), 200);
    assert_eq!(rt.count("/verify"), 3);

    let health: Value = c.get(format!("{}/health", rt.url())).send().await.unwrap().json().await.unwrap();
    assert_eq!(health["status"], "degraded");
}

/// A client that times out before the headers hangs up, and the runtime notices; a released stall answers.
#[tokio::test]
async fn a_stalled_request_sees_the_client_hang_up_or_is_released() {
    let rt = ScriptedRuntime::start().await;
    rt.script("/execute", [Behavior::Stall, Behavior::Stall]);
    let c = client();

    // The short timeout is how the client gives up, not a synchronisation: nothing would ever answer.
    let gave_up = c
        .post(format!("{}/execute", rt.url()))
        .json(&execute_body())
        .timeout(Duration::from_millis(200))
        .send()
        .await
        .expect_err("a stalled request never answers");
    assert!(gave_up.is_timeout(), "{gave_up:?}");
    rt.wait_for_hangup("/execute").await;
    assert!(rt.requests_to("/execute")[0].hung_up);

    let pending = tokio::spawn({
        let c = c.clone();
        let url = format!("{}/execute", rt.url());
        async move { c.post(url).json(&execute_body()).send().await }
    });
    rt.wait_for("/execute", 2).await;
    rt.release();
    let answered = pending.await.unwrap().unwrap();
    assert_eq!(answered.status(), 200);
    assert_eq!(rt.hangups("/execute"), 1);
    assert!(!rt.requests_to("/execute")[1].hung_up);
}

#[tokio::test]
async fn a_refusing_runtime_is_a_connect_error() {
    let rt = ScriptedRuntime::start().await;
    let c = client();
    assert_eq!(c.get(format!("{}/health", rt.url())).send().await.unwrap().status(), 200);
    rt.refuse_connections().await;
    // A fresh client: the first one may still hold the (now cut) keep-alive connection.
    let refused = client().get(format!("{}/health", rt.url())).send().await.expect_err("refused");
    assert!(refused.is_connect(), "{refused:?}");

    let nowhere = ScriptedRuntime::refused_url().await;
    let refused = client().get(format!("{nowhere}/health")).send().await.expect_err("refused");
    assert!(refused.is_connect(), "{refused:?}");
}

/// Two requests written at once on one connection get two answers on it, the second closing it; a chunked
/// body is refused with 411 (and the refusal is read, not lost to a reset).
#[tokio::test]
async fn keep_alive_pipelining_and_chunked_bodies_on_a_raw_socket() {
    let rt = ScriptedRuntime::start().await;
    let mut tcp = TcpStream::connect(rt.addr()).await.unwrap();
    let body = execute_body().to_string();
    let two = format!(
        "POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}\
         GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tcp.write_all(two.as_bytes()).await.unwrap();
    let answers = read_until_closed(&mut tcp).await;
    assert_eq!(answers.matches("HTTP/1.1 200 OK").count(), 2, "{answers}");
    assert!(answers.contains("connection: keep-alive") && answers.ends_with(r#"{"status":"ok"}"#), "{answers}");
    let seen = rt.requests();
    assert_eq!((seen.len(), seen[0].connection, seen[1].connection), (2, 1, 1));
    assert_eq!(seen[0].raw, body.as_bytes());

    let mut tcp = TcpStream::connect(rt.addr()).await.unwrap();
    let chunked = "POST /execute HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
    tcp.write_all(chunked.as_bytes()).await.unwrap();
    tcp.shutdown().await.unwrap();
    let refused = read_until_closed(&mut tcp).await;
    assert!(refused.starts_with("HTTP/1.1 411 "), "{refused}");
    assert_eq!(rt.count("/execute"), 1, "a refused request is not recorded");
}

async fn read_until_closed(tcp: &mut TcpStream) -> String {
    let mut all = Vec::new();
    tokio::time::timeout(WAIT, tcp.read_to_end(&mut all)).await.expect("closed in time").expect("read");
    String::from_utf8(all).unwrap()
}
