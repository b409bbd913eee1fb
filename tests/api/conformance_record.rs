//! `aiwg-serve conformance record`, run as the real binary between a scripted executor (and an
//! operator) and our server: the fixture it writes holds every step in the order the recorder saw it,
//! in upstream's format, with no token in it, and is a valid fixture at every moment.

use std::path::PathBuf;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::cli::command;
use crate::support::{dispatch_body, mission_id, ExecSocket, ScriptedExecutor, TestServer, WAIT};

const REDACTED: &str = "exec_tk_REDACTED";

/// The recorder, between the test and `server`, writing to a fixture in a temporary directory.
struct Recorder {
    child: Child,
    /// Where executors and operators reach serve through it.
    front: TestServer,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Recorder {
    async fn start(server: &TestServer) -> Recorder {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("hitl-roundtrip.json");
        let args = ["conformance", "record", "--url", &server.base, "--out", out.to_str().unwrap()];
        let mut child = command(&args).spawn().expect("spawn the recorder");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(WAIT, lines.next_line()).await.expect("the recorder announces itself in time");
        let line = line.unwrap().expect("a first line");
        let at = line.strip_prefix("recording at ").and_then(|l| l.strip_suffix(&format!(" -> {}", server.base)));
        let base = at.unwrap_or_else(|| panic!("not the announcement: {line}"));
        let front = TestServer::external(base, server.config.clone());
        Recorder { child, front, out, _dir: dir }
    }

    /// The fixture as it is on disk now, checked to be one.
    fn fixture(&self) -> Value {
        let text = std::fs::read_to_string(&self.out).expect("the fixture exists");
        let fixture: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        assert_eq!(fixture["_fixture"], "hitl-roundtrip", "{fixture}");
        assert!(fixture["_recorded_by"].as_str().unwrap().starts_with("aiwg-serve "), "{fixture}");
        assert!(fixture["_recorded_at"].as_str().unwrap().ends_with('Z'), "{fixture}");
        let numbers: Vec<u64> =
            fixture["steps"].as_array().unwrap().iter().map(|s| s["_step"].as_u64().unwrap()).collect();
        assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>(), "steps numbered from 1: {fixture}");
        fixture
    }

    /// Sends `signal` and waits for the recorder to end; its exit code (`None`: ended by the signal).
    async fn stop(mut self, signal: libc::c_int) -> (Option<i32>, Value) {
        let pid = self.child.id().expect("still running") as libc::pid_t;
        // SAFETY: kill(2) with the pid of a child this test spawned and has not reaped.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let status = tokio::time::timeout(WAIT, self.child.wait()).await.expect("the recorder ends in time").unwrap();
        (status.code(), self.fixture())
    }
}

/// One line per step: who sent it, and what it was.
fn outline(step: &Value) -> String {
    let to = match step["_direction"].as_str() {
        Some("aiwg_serve → executor") => "to executor: ",
        Some("executor → aiwg_serve") => "to serve: ",
        Some(other) => panic!("unknown direction {other}"),
        None => "",
    };
    if let Some(r) = step.get("request") {
        return format!(
            "{to}{} {} {}",
            r["method"].as_str().unwrap(),
            r["path"].as_str().unwrap(),
            step["response"]["status"]
        );
    }
    if let Some(event) = step["event"].as_str() {
        return format!("{to}{event}");
    }
    match &step["_frame"] {
        Value::Null => format!("disconnect: {}", step["ws_disconnect"]["_description"].as_str().unwrap()),
        frame if frame["ack"] == true => format!("{to}ack"),
        frame => format!("{to}frame {frame}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hitl_round_trip_is_recorded_in_order_and_without_tokens() {
    let server = TestServer::start().await;
    let recorder = Recorder::start(&server).await;
    let mut e = ScriptedExecutor::register(&recorder.front, &["hitl"]).await;
    let mut ws = e.connect(&recorder.front).await;
    server.eventually(&format!("/api/v1/executors/{}", e.id), "connected", |b| b["connected"] == true).await;
    let id = mission_id();
    let mut dispatch = dispatch_body(&id);
    dispatch["executor_filter"]["executor_id"] = json!(e.id);
    assert_eq!(recorder.front.client.post("/api/v1/sessions/s/dispatch", &dispatch).await.status, 202);
    assert_eq!(e.next_dispatch().await.authorization, Some(format!("Bearer {}", e.token)));
    ws.ack("mission.assigned", &id, json!({"state": "assigned"})).await;
    ws.ack("mission.started", &id, json!({"state": "running"})).await;
    ws.ack("mission.progress", &id, json!({"summary": "reading the tests"})).await;
    ws.ack("mission.hitl_required", &id, json!({"hitl_id": "h-1", "prompt": "422 or 400?"})).await;
    let answer = json!({"hitl_id": "h-1", "response": "422"});
    let path = format!("/api/v1/missions/{id}/hitl_response");
    assert_eq!(recorder.front.client.post(&path, &answer).await.status, 202);
    let responded = ws.next_pushed().await;
    assert_eq!(responded["event"], "mission.hitl_responded", "{responded}");
    ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let progress = ws.envelope("mission.progress", Some(&id), json!({"summary": "reading the tests"}));
    ws.close().await;

    let (code, fixture) = recorder.stop(libc::SIGINT).await;
    assert_eq!(code, Some(0));
    let text = fixture.to_string();
    assert!(!text.contains(&e.token), "a token in the fixture: {text}");
    let between = format!("Recorded by aiwg-serve conformance record between the executors and {}", server.base);
    assert_eq!(fixture["_description"], between);
    let steps = fixture["steps"].as_array().unwrap();
    let mission = |event: &str| [format!("to serve: mission.{event}"), "to executor: ack".to_owned()];
    let expected: Vec<String> = [
        vec![
            "POST /api/v1/executors/register 201".to_owned(),
            format!("GET /ws/executors/{}?token={REDACTED} 101", e.id),
            "POST /api/v1/sessions/s/dispatch 202".to_owned(),
            "to executor: POST /api/v1/sessions/s/dispatch 202".to_owned(),
        ],
        ["assigned", "started", "progress", "hitl_required"].into_iter().flat_map(mission).collect(),
        vec![format!("POST {path} 202"), "to executor: mission.hitl_responded".to_owned()],
        mission("completed").to_vec(),
        vec!["disconnect: the executor's socket closed (code 1005)".to_owned()],
    ]
    .concat();
    assert_eq!(steps.iter().map(outline).collect::<Vec<_>>(), expected, "{text}");

    // The register payload as the executor sent it, and serve's answer with its token hidden.
    assert_eq!(steps[0]["request"]["body"], e.register_payload());
    assert_eq!(steps[0]["request"]["headers"], json!({"Content-Type": "application/json"}));
    assert_eq!(steps[0]["response"]["body"]["token"], REDACTED);
    // The dispatch as serve forwarded it, with the executor's (hidden) token.
    assert_eq!(steps[3]["request"]["headers"]["Authorization"], format!("Bearer {REDACTED}"));
    assert_eq!(steps[3]["request"]["body"]["mission_id"], id.as_str());
    // Events as sent, and serve's frames as it sent them.
    let mut sent = steps[8].clone();
    sent.as_object_mut().unwrap().retain(|k, _| !k.starts_with('_'));
    assert_eq!(sent, progress);
    let mut pushed = steps[13].clone();
    pushed.as_object_mut().unwrap().retain(|k, _| !k.starts_with('_'));
    assert_eq!(pushed, responded);
    assert_eq!(steps[5]["_frame"]["seq"].as_i64().map(|s| s > 0), Some(true), "{}", steps[5]);

    // The recording is a fixture `conformance replay` plays back against another server, step by step.
    let fresh = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("recorded.json");
    std::fs::write(&file, text).unwrap();
    let out = crate::cli::cli(&fresh.base, &["--json", "conformance", "replay", file.to_str().unwrap()], &[]).await;
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(report["results"][0]["outcome"], "pass", "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_is_a_fixture_after_every_step_even_when_the_recorder_is_killed() {
    let server = TestServer::start().await;
    let recorder = Recorder::start(&server).await;
    assert_eq!(recorder.fixture()["steps"], json!([]), "written before the first step");
    let e = ScriptedExecutor::register(&recorder.front, &[]).await;
    assert_eq!(recorder.fixture()["steps"].as_array().unwrap().len(), 1);
    let mut ws = e.connect(&recorder.front).await;
    assert_eq!(recorder.fixture()["steps"].as_array().unwrap().len(), 2);
    // An event serve refuses (no such mission): its answer is a frame of serve's.
    let refusal = ws.event("mission.progress", "m-nobody-dispatched", json!({"summary": "?"})).await;
    let steps = recorder.fixture()["steps"].as_array().unwrap().clone();
    assert_eq!(steps.len(), 4, "{steps:?}");
    assert_eq!(steps[2]["_direction"], "executor → aiwg_serve");
    assert_eq!(steps[3], json!({"_step": 4, "_direction": "aiwg_serve → executor", "_frame": refusal}));

    let (code, fixture) = recorder.stop(libc::SIGKILL).await;
    assert_eq!(code, None, "killed");
    assert_eq!(fixture["steps"].as_array().unwrap(), &steps, "what was written stays");
    assert!(!fixture.to_string().contains(&e.token));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_serve_refuses_is_closed_through_the_recorder_with_serves_code() {
    let server = TestServer::start().await;
    let recorder = Recorder::start(&server).await;
    let e = ScriptedExecutor::register(&recorder.front, &[]).await;
    let wrong = "exec_tk_not-the-one-serve-issued";
    let url = recorder.front.ws_url(&format!("/ws/executors/{}?token={wrong}", e.id));
    let closed = ExecSocket::open(&url, &e.id).await.closed().await;
    assert_eq!((closed.code, closed.reason.as_str()), (4001, "Unauthorized"), "serve's close frame, as it sent it");

    let (code, fixture) = recorder.stop(libc::SIGTERM).await;
    assert_eq!(code, Some(0));
    let steps: Vec<String> = fixture["steps"].as_array().unwrap().iter().map(outline).collect();
    assert_eq!(steps[1], format!("GET /ws/executors/{}?token={REDACTED} 101", e.id));
    assert_eq!(steps.last().unwrap(), "disconnect: the executor's socket closed (code 4001)");
    let text = fixture.to_string();
    assert!(!text.contains(wrong) && !text.contains(&e.token), "{text}");
}
