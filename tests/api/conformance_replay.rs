//! `aiwg-serve conformance replay FILE`, run as the real binary against the real server: every upstream
//! fixture replays, and a fixture our server does not live up to is reported at its first divergence.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::cli::{cli, stderr, stdout};
use crate::support::TestServer;

const UPSTREAM: [&str; 8] = [
    "register-happy",
    "auth-token-rotation",
    "dispatch-happy",
    "dispatch-failed",
    "dispatch-aborted",
    "paused-event",
    "hitl-roundtrip",
    "resumable-suspend-resume",
];

fn upstream(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/upstream").join(format!("{name}.json"))
}

/// Replays `file` with `--json`: the exit code and the fixture's one result.
async fn replay(server: &TestServer, file: &Path) -> (Option<i32>, Value) {
    let out = cli(&server.base, &["--json", "conformance", "replay", file.to_str().unwrap()], &[]).await;
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("not a report: {}{}", stdout(&out), stderr(&out)));
    (out.status.code(), report["results"][0].clone())
}

/// `name`'s upstream fixture with `edit` applied to its text, written to a file in `dir`.
fn edited(dir: &tempfile::TempDir, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let text = std::fs::read_to_string(upstream(name)).unwrap();
    let path = dir.path().join(format!("{name}.json"));
    let changed = edit(text.clone());
    assert_ne!(changed, text, "the edit changed nothing");
    std::fs::write(&path, changed).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upstream_fixture_replays_against_our_server() {
    let server = TestServer::start().await;
    let runs = UPSTREAM.map(|name| {
        let server = &server;
        async move { (name, replay(server, &upstream(name)).await) }
    });
    for (name, (code, result)) in futures_util::future::join_all(runs).await {
        assert_eq!((code, result["outcome"].as_str()), (Some(0), Some("pass")), "{name}: {result}");
        assert_eq!(result["id"], format!("fixtures/{name}"));
    }
    let (_, rotation) = replay(&server, &upstream("auth-token-rotation")).await;
    let note = rotation["note"].as_str().unwrap();
    assert!(note.contains("step 2 (phase_2_non_loopback_register) skipped"), "{note}");
    assert!(note.contains("step 4 (phase_3_old_token_rejected) skipped"), "{note}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_status_is_reported_at_its_step() {
    let server = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    // The abort (step 5) recorded as 200 instead of the contract's (and our) 202.
    let file = edited(&dir, "dispatch-aborted", |t| {
        let at = t.find("\"abort_request\"").unwrap();
        let (before, after) = t.split_at(at);
        format!("{before}{}", after.replacen("\"status\": 202", "\"status\": 200", 1))
    });
    let (code, result) = replay(&server, &file).await;
    assert_eq!(code, Some(1), "{result}");
    let detail = result["detail"].as_str().unwrap();
    assert!(detail.starts_with("step 5 (abort_request): sent POST /api/v1/missions/m-"), "{detail}");
    assert!(
        detail.contains("; expected 200 null; got 202") && detail.ends_with("status 202, expected 200"),
        "{detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_our_server_refuses_diverges_there() {
    let server = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = uuid::Uuid::new_v4().to_string();
    let event =
        |name: &str, data: Value| json!({"event": name, "executor_id": executor, "mission_id": "m-1", "data": data});
    let fixture = json!({"_fixture": "reopened", "steps": [
        {"request": {"method": "POST", "path": "/api/v1/executors/register", "body": {
            "executor_id": executor, "name": "x", "version": "1", "spec_version": "1.0.0",
            "transport_endpoints": {"rest": "http://127.0.0.1:1", "ws": "ws://127.0.0.1:1"}, "capabilities": []}},
         "response": {"status": 201, "body": {"executor_id": executor, "token": "exec_tk_REDACTED"}}},
        {"request": {"method": "POST", "path": "/api/v1/sessions/s/dispatch",
                     "body": {"mission_id": "m-1", "objective": "o", "completion": "c"}},
         "response": {"status": 202, "body": {"mission_id": "m-1", "status": "assigned"}}},
        event("mission.assigned", json!({"state": "assigned"})),
        event("mission.started", json!({"state": "running"})),
        event("mission.completed", json!({"state": "done", "exit_code": 0})),
        event("mission.started", json!({"state": "running"})),
    ]});
    let file = dir.path().join("reopened.json");
    std::fs::write(&file, fixture.to_string()).unwrap();
    let (code, result) = replay(&server, &file).await;
    assert_eq!(code, Some(1), "{result}");
    let detail = result["detail"].as_str().unwrap();
    assert!(detail.starts_with("step 6 (steps[5]): sent {"), "{detail}");
    assert!(detail.contains("expected an ack; got {") && detail.contains("illegal_transition"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_a_fixture_exits_2_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"steps\": [").unwrap();
    let missing = dir.path().join("missing.json");
    // No server is needed to refuse a file: nothing listens on port 9.
    for (file, why) in [(&broken, "not JSON"), (&missing, "No such file")] {
        let out = cli("http://127.0.0.1:9", &["conformance", "replay", file.to_str().unwrap()], &[]).await;
        assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
        let err = stderr(&out);
        assert!(err.contains(&format!("{} is not a fixture to replay", file.display())) && err.contains(why), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_acknowledges_nothing_is_not_waited_for_again() {
    // Upstream aiwg serve acknowledges no frame; the small control plane does not either.
    let lax = crate::support::lax_server::start(crate::support::lax_server::Flaw::None).await;
    let out = cli(&lax, &["--json", "conformance", "replay", upstream("paused-event").to_str().unwrap()], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let note = report["results"][0]["note"].as_str().unwrap();
    assert!(note.starts_with("the server acknowledged no frame within 2s"), "{note}");
}
