//! The operator command line, run as the real binary against the real server.

use std::process::{Command, Output};

use serde_json::{json, Value};

use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer};

/// Runs `aiwg-serve <args>` against `server` (off the async runtime: it blocks until the CLI exits).
async fn cli(server: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aiwg-serve"));
    command.args(["--server", server]).args(args).env_remove("AIWG_SERVE_TOKEN").env_remove("AIWG_SERVE_URL");
    for (k, v) in env {
        command.env(k, v);
    }
    tokio::task::spawn_blocking(move || command.output().expect("run the CLI")).await.unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_wait_follows_the_mission_to_its_end() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["runtime:codex"]).await;
    let id = mission_id();
    let base = server.base.clone();
    let args = [
        "dispatch",
        "--objective",
        "echo hello",
        "--completion",
        "prints hello",
        "--capability",
        "runtime:codex",
        "--mission-id",
        &id,
        "--wait",
        "--timeout",
        "20",
    ]
    .map(str::to_owned);
    let run = tokio::spawn(async move { cli(&base, &args.iter().map(String::as_str).collect::<Vec<_>>(), &[]).await });
    let received = e.next_dispatch().await;
    assert_eq!(received.body["objective"], "echo hello");
    assert_eq!(received.body["executor_filter"]["capabilities"], json!(["runtime:codex"]));
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    ws.ack("mission.progress", &id, json!({"summary": "saying hello"})).await;
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0, "summary": "hello"})).await;
    let out = run.await.unwrap();
    assert_eq!(out.status.code(), Some(0), "stdout: {}\nstderr: {}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("state:        done"), "{}", stdout(&out));
    assert!(stderr(&out).contains("mission.progress saying hello"), "progress lines: {}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_mission_makes_dispatch_wait_exit_1() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    let base = server.base.clone();
    let args = ["dispatch", "--objective", "o", "--completion", "c", "--mission-id", &id, "--wait", "--json"]
        .map(str::to_owned);
    let run = tokio::spawn(async move { cli(&base, &args.iter().map(String::as_str).collect::<Vec<_>>(), &[]).await });
    e.next_dispatch().await;
    ws.ack("mission.failed", &id, json!({"state": "failed", "reason": "tests_failed", "exit_code": 2})).await;
    let out = run.await.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let mission: Value = serde_json::from_str(stdout(&out).trim()).expect("--json prints the mission");
    assert_eq!(mission["state"], "failed");
    assert!(stderr(&out).contains("ended with mission.failed"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_showing_controlling_and_answering() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl", "x-pause-resume", "x-abort"]).await;
    let id = mission_id();
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&id)).await.status, 202);
    e.next_dispatch().await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;

    let out = cli(&server.base, &["executors", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(0));
    let table = stdout(&out);
    assert!(table.starts_with("EXECUTOR"), "{table}");
    assert!(table.lines().nth(1).unwrap().contains(&e.id) && table.contains("yes"), "{table}");
    let out = cli(&server.base, &["--json", "executors", "list"], &[]).await;
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["executors"][0]["executor_id"], e.id.as_str());

    let out = cli(&server.base, &["missions", "list", "--state", "running"], &[]).await;
    assert!(stdout(&out).lines().nth(1).unwrap().starts_with(&id), "{}", stdout(&out));
    let out = cli(&server.base, &["missions", "show", &id], &[]).await;
    assert!(stdout(&out).contains("mission.started"), "{}", stdout(&out));

    ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h-cli", "prompt": "Ship it?"})).await;
    let out = cli(&server.base, &["missions", "respond", &id, "--hitl-id", "h-cli", "ship it"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), format!("mission {id}: running (delivered to the executor)"));
    let answer = ws.next_pushed().await;
    assert_eq!((answer["data"]["hitl_id"].as_str(), answer["data"]["text"].as_str()), (Some("h-cli"), Some("ship it")));

    let out = cli(&server.base, &["missions", "pause", &id], &[]).await;
    assert_eq!(stdout(&out).trim(), format!("mission {id}: paused (delivered to the executor)"));
    let out = cli(&server.base, &["missions", "abort", &id], &[]).await;
    assert_eq!(out.status.code(), Some(0));
    let out = cli(&server.base, &["missions", "resume", &id], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("409 illegal_transition"), "{}", stderr(&out));

    let out = cli(&server.base, &["--json", "events", "--since", "0", "--mission", &id], &[]).await;
    assert_eq!(out.status.code(), Some(0));
    let events: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let names: Vec<&str> = events.iter().map(|e| e["envelope"]["event"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["mission.started", "mission.hitl_required", "mission.hitl_responded", "mission.paused", "mission.aborted"]
    );
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_unreachable_servers() {
    let token = "operator-token-for-the-cli";
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec![token.into()]).await;
    let out = cli(&server.base, &["missions", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("401 unauthorized"), "{}", stderr(&out));
    let out = cli(&server.base, &["missions", "list"], &[("AIWG_SERVE_TOKEN", token)]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = cli(&server.base, &["--token", token, "executors", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(0));
    let out = cli("http://127.0.0.1:9", &["executors", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("cannot reach the server"), "{}", stderr(&out));
    let out = cli(&server.base, &["missions", "frobnicate"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
}

/// The client the CLI and `aiwg-bench` share hands a non-JSON success body (the `/metrics` text) back as
/// a string, and JSON bodies as JSON.
#[tokio::test]
async fn the_client_returns_text_bodies_as_strings() {
    let server = TestServer::start().await;
    let _online = ScriptedExecutor::online(&server, &[]).await;
    let client = aiwg_serve::cli::client::Client::new(&server.base, None);
    let metrics = client.get("/metrics").await.expect("metrics answer");
    let text = metrics.as_str().expect("the metrics text as a string");
    assert!(text.contains("aiwg_executors_connected 1\n"), "{text}");
    let executors = client.get("/api/v1/executors").await.expect("executors answer");
    assert_eq!(executors["executors"].as_array().map(Vec::len), Some(1), "{executors}");
}
