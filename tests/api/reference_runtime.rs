//! The reference executor as a WattSwarm HTTP agent runtime (`aiwg-serve executor --http-runtime`): the
//! real binary, driven with reqwest (the kernel's client) by kernel-shaped requests, its answers held
//! to the checks a kernel applies.

use std::process::Stdio;

use aiwg_wattswarm::checks::{check_execute_answer, check_verify_answer, output_ref};
use aiwg_wattswarm::hash::VerifierResultFields;
use aiwg_wattswarm::policy::{evaluate, PolicyId};
use aiwg_wattswarm::task::{default_output_schema, sample_contract};
use aiwg_wattswarm::wire::{Candidate, ExecuteRequest, ExecuteResponse, VerifyRequest, VerifyResponse};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use crate::support::WAIT;

/// The runtime as a child process, killed when the test ends however it ends (`kill_on_drop`).
struct Runtime {
    child: Child,
    url: String,
    /// The agents' working directory: a scratch directory, never this checkout.
    workdir: tempfile::TempDir,
    /// Held open so that the runtime never writes to a closed pipe.
    _stdout: BufReader<ChildStdout>,
    client: reqwest::Client,
}

impl Runtime {
    /// Starts `executor --http-runtime 127.0.0.1:0 --adapter shell` plus `flags`, and reads the address
    /// from the line it prints once bound.
    async fn start(flags: &[&str]) -> Runtime {
        let workdir = tempfile::tempdir().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_aiwg-serve"));
        command
            .args(["executor", "--http-runtime", "127.0.0.1:0", "--adapter", "shell", "--kill-grace-s", "1"])
            .arg("--workdir")
            .arg(workdir.path())
            .args(flags)
            .current_dir(workdir.path())
            .env("AIWG_SERVE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("spawn the runtime");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        tokio::time::timeout(WAIT, stdout.read_line(&mut line)).await.expect("the runtime binds").unwrap();
        let url = line
            .trim()
            .strip_prefix("listening as an HTTP agent runtime on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        let client = reqwest::Client::builder().timeout(WAIT).build().unwrap();
        Runtime { child, url, workdir, _stdout: stdout, client }
    }

    async fn post(&self, path: &str, body: &impl serde::Serialize) -> reqwest::Response {
        self.client.post(format!("{}{path}", self.url)).json(body).send().await.unwrap()
    }

    async fn execute(&self, request: &ExecuteRequest) -> ExecuteResponse {
        let answer = self.post("/execute", request).await;
        assert_eq!(answer.status(), 200);
        answer.json().await.unwrap()
    }
}

/// A request as a kernel sends it: the default contract around `inputs`.
fn request(inputs: Value) -> ExecuteRequest {
    let execution_id = format!("exec-p-{}", uuid::Uuid::new_v4());
    let binding = PolicyId::SchemaOnly.binding(json!({}));
    let now = aiwg_contract::clock::now().timestamp_millis() as u64;
    let contract = sample_contract("task-1", inputs.clone(), default_output_schema(), binding, now);
    ExecuteRequest {
        task_id: "task-1".into(),
        execution_id: execution_id.clone(),
        task_type: "swarm".into(),
        inputs,
        profile: "default".into(),
        task_contract: contract,
        stage: "EXPLORE".into(),
        attempt_id: execution_id,
        seed_bundle: None,
    }
}

fn bash(prompt: &str) -> Value {
    json!({"prompt": prompt, "lease": {"tools": ["Bash"]}})
}

async fn status_and_text(answer: reqwest::Response) -> (u16, String) {
    (answer.status().as_u16(), answer.text().await.unwrap())
}

#[tokio::test]
async fn health_and_capabilities_come_from_the_flags() {
    let rt = Runtime::start(&["--profiles", "default,careful", "--model-id", "m1"]).await;
    let health = rt.client.get(format!("{}/health", rt.url)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.json::<Value>().await.unwrap(), json!({"status": "ok"}));
    let caps: Value = rt.client.get(format!("{}/capabilities", rt.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        caps,
        json!({"task_types": ["swarm"], "profiles": ["default", "careful"], "provider_family": "aiwg-serve",
               "model_id": "m1"})
    );
}

#[tokio::test]
async fn execute_runs_the_prompt_and_answers_what_a_kernel_accepts() {
    let rt = Runtime::start(&[]).await;
    let request = request(bash("echo hello; echo on-stderr >&2"));
    let answer = rt.execute(&request).await;
    let output = &answer.candidate_output;
    assert_eq!((output["answer"].as_str(), output["exit_code"].as_i64()), (Some("hello"), Some(0)));
    assert_eq!(output["confidence"], 1.0);
    assert_eq!(output["check_summary"], "shell exited 0");
    let evidence = &answer.evidence_inline[0].content;
    assert!(evidence.starts_with("shell ran ") && evidence.ends_with(" ms\non-stderr"), "{evidence}");
    check_execute_answer(&answer, &request.task_contract.evidence_policy).unwrap();

    let failing = rt.execute(&self::request(bash("echo partial; exit 3"))).await;
    assert_eq!(
        (failing.candidate_output["exit_code"].as_i64(), failing.candidate_output["confidence"].as_f64()),
        (Some(3), Some(0.0))
    );
    let evidence = &failing.evidence_inline[0].content;
    assert!(evidence.starts_with("shell ran ") && evidence.ends_with(" ms"), "no stderr, only the time: {evidence}");
}

#[tokio::test]
async fn a_resent_execution_runs_once_and_gets_the_same_answer() {
    let rt = Runtime::start(&[]).await;
    let request = request(bash("echo ran >> runs.log; sleep 0.3; echo done"));
    let (first, second) = tokio::join!(rt.execute(&request), rt.execute(&request));
    assert_eq!(first, second);
    let after = rt.execute(&request).await;
    assert_eq!(after, first, "a finished execution answers from memory");
    let log = std::fs::read_to_string(rt.workdir.path().join("runs.log")).unwrap();
    assert_eq!(log, "ran\n", "one process for three sends");

    let mut other = request.clone();
    other.inputs = bash("echo something else");
    let (status, text) = status_and_text(rt.post("/execute", &other).await).await;
    assert_eq!((status, text), (409, format!("execution {} was already sent with another body", request.execution_id)));
}

#[tokio::test]
async fn requests_it_cannot_run_are_refused_before_anything_runs() {
    let rt = Runtime::start(&[]).await;
    let no_bash = request(json!({"prompt": "echo hi > ran", "lease": {"tools": ["Read"]}}));
    let (status, text) = status_and_text(rt.post("/execute", &no_bash).await).await;
    assert_eq!((status, text.as_str()), (422, "the shell adapter runs only when the lease lists Bash"));
    let no_lease = request(json!({"prompt": "echo hi > ran"}));
    let (status, text) = status_and_text(rt.post("/execute", &no_lease).await).await;
    assert_eq!(status, 422);
    assert!(text.contains("no tool policy") && text.contains("--default-lease TOOLS"), "says how to allow it: {text}");
    let no_prompt = request(json!({"prompt": 7, "lease": {"tools": ["Bash"]}}));
    assert_eq!(rt.post("/execute", &no_prompt).await.status(), 400);
    let mut careful = request(bash("echo hi > ran"));
    careful.profile = "careful".into();
    let (status, text) = status_and_text(rt.post("/execute", &careful).await).await;
    assert_eq!((status, text.as_str()), (400, "profile 'careful' not supported"));
    let unchecked =
        request(json!({"prompt": "echo hi > ran", "lease": {"tools": ["Bash"]}, "completion_check": "true"}));
    let (status, text) = status_and_text(rt.post("/execute", &unchecked).await).await;
    assert_eq!(
        (status, text.as_str()),
        (422, "this runtime does not run completion checks (start it with --completion-check shell)"),
        "a check it would skip is refused, never dropped"
    );

    let mut no_contract = serde_json::to_value(request(bash("echo hi > ran"))).unwrap();
    no_contract.as_object_mut().unwrap().remove("task_contract");
    let (status, text) = status_and_text(rt.post("/execute", &no_contract).await).await;
    assert_eq!(status, 422);
    assert!(text.contains("missing field `task_contract`"), "{text}");
    let url = format!("{}/execute", rt.url);
    let not_json = rt.client.post(&url).header("content-type", "application/json").body("{nope").send().await.unwrap();
    assert_eq!(not_json.status(), 400);
    let untyped = rt.client.post(&url).body(serde_json::to_vec(&no_lease).unwrap()).send().await.unwrap();
    assert_eq!(untyped.status(), 415);
    assert!(!rt.workdir.path().join("ran").exists(), "no refused request ran its prompt");
}

#[tokio::test]
async fn an_agent_that_cannot_start_is_a_bad_gateway() {
    let rt = Runtime::start(&[]).await;
    std::fs::remove_dir(rt.workdir.path()).unwrap();
    let (status, text) = status_and_text(rt.post("/execute", &request(bash("echo hi"))).await).await;
    assert_eq!(status, 502);
    assert!(text.starts_with("cannot start sh: "), "{text}");
}

#[tokio::test]
async fn the_completion_check_decides_the_confidence() {
    let rt = Runtime::start(&["--completion-check", "shell"]).await;
    let inputs = |prompt: &str, check: &str| {
        json!({"prompt": prompt, "lease": {"tools": ["Bash"]}, "completion": "the objective is met",
               "completion_check": check})
    };
    let answer = rt.execute(&request(inputs("touch done", "test -f done"))).await;
    assert_eq!(answer.candidate_output["confidence"], 1.0);
    assert!(answer.candidate_output["check_summary"].as_str().unwrap().ends_with("; completion check passed"));
    let answer = rt.execute(&request(inputs("true", "test -f missing"))).await;
    assert_eq!(answer.candidate_output["confidence"], 0.0);
    let summary = answer.candidate_output["check_summary"].as_str().unwrap();
    assert!(summary.ends_with("; completion check failed: exit 1"), "{summary}");
    let answer = rt.execute(&request(inputs("true", "no-such-checker --all"))).await;
    let summary = answer.candidate_output["check_summary"].as_str().unwrap();
    assert!(summary.ends_with("; completion check failed: command not found (exit 127)"), "{summary}");

    // Prose is never run: the sentence would be `sh -c`'s exit 127, failing a run that succeeded.
    let prose = json!({"prompt": "true", "lease": {"tools": ["Bash"]}, "completion": "the objective is met"});
    let answer = rt.execute(&request(prose)).await;
    assert_eq!(answer.candidate_output["confidence"], 1.0);
    assert_eq!(answer.candidate_output["check_summary"], "shell exited 0");
}

#[tokio::test]
async fn verify_judges_the_executed_candidate_as_a_kernel_checks_it() {
    let rt = Runtime::start(&[]).await;
    let executed = request(bash("echo hello"));
    let answer = rt.execute(&executed).await;
    let candidate = Candidate {
        candidate_id: format!("cand-{}", executed.execution_id),
        execution_id: executed.execution_id.clone(),
        output_ref: output_ref(&answer.candidate_output, "node-1", 1),
        output: answer.candidate_output.clone(),
        evidence_inline: answer.evidence_inline,
        evidence_refs: answer.evidence_refs,
    };
    let mut verify = VerifyRequest {
        candidate,
        output_schema: default_output_schema(),
        policy: executed.task_contract.acceptance.verifier_policy.clone(),
    };
    let verdict: VerifyResponse = rt.post("/verify", &verify).await.json().await.unwrap();
    assert!(verdict.passed);
    assert_eq!(verdict.reason_codes, [100]);
    let policy_hash = PolicyId::SchemaOnly.hash();
    let expected = VerifierResultFields {
        candidate_id: &verify.candidate.candidate_id,
        execution_id: &executed.execution_id,
        model_id: "shell",
        passed: true,
        policy_hash: &policy_hash,
        provider_family: "aiwg-serve",
        reason_codes: &[100],
        score: verdict.score,
    }
    .hash();
    assert_eq!(verdict.verifier_result_hash, expected);
    let local = evaluate(PolicyId::SchemaOnly, &answer.candidate_output, &default_output_schema(), &json!({}));
    check_verify_answer(&verdict, PolicyId::SchemaOnly, &local).unwrap();

    verify.policy.policy_hash = format!("sha256:{policy_hash}");
    let (status, text) = status_and_text(rt.post("/verify", &verify).await).await;
    assert_eq!((status, text.as_str()), (400, "policy binding invalid: policy hash mismatch"));
}

#[tokio::test]
async fn agent_events_are_acknowledged() {
    let rt = Runtime::start(&[]).await;
    let event = json!({"event": {"event_id": "evt-1", "event_type": "friend_request", "source_kind": "peer_relationship",
                                 "payload": {}, "requires_commit": true, "created_at": 1}});
    let ack: Value = rt.post("/agent-events", &event).await.json().await.unwrap();
    assert_eq!((ack["ok"].as_bool(), ack["detail"].as_str()), (Some(true), Some("received friend_request")));
    assert!(ack["acked_at"].as_u64().unwrap() > 0);
    assert_eq!(rt.post("/agent-events", &json!({"event": {}})).await.status(), 422);
    // An event type the kernel does not send is refused as the reference runtime refuses it.
    let mut unknown = event.clone();
    unknown["event"]["event_type"] = json!("surprise");
    let (status, text) = status_and_text(rt.post("/agent-events", &unknown).await).await;
    assert_eq!(status, 422);
    assert!(text.contains("unknown variant `surprise`"), "{text}");
}

/// Issue 42, finding 9: the kernel's default task (`task run-real`) carries no lease, and was refused.
/// Deny by default stays; an operator may name the tools such a task gets (`--default-lease`); a task
/// that carries its own lease is judged by it, never widened.
#[tokio::test]
async fn a_task_without_a_lease_takes_the_operators_default_lease() {
    let rt = Runtime::start(&["--default-lease", "Read,Bash"]).await;
    let answer = rt.execute(&request(json!({"prompt": "echo hi > ran"}))).await;
    assert!(rt.workdir.path().join("ran").exists(), "the default lease let it run: {answer:?}");
    let own = request(json!({"prompt": "echo hi > own", "lease": {"tools": ["Read"]}}));
    let (status, text) = status_and_text(rt.post("/execute", &own).await).await;
    assert_eq!((status, text.as_str()), (422, "the shell adapter runs only when the lease lists Bash"));
    assert!(!rt.workdir.path().join("own").exists());
}

/// Issue 53, item 15: a run its own SIGTERM stopped answered 200 with the stopped agent's exit code
/// 143, and a kernel finalized that partial output as the task's answer. The caller gets a 503 instead.
#[tokio::test]
async fn a_signal_stops_the_running_agents_and_their_callers_get_a_503_not_a_partial_answer() {
    let mut rt = Runtime::start(&[]).await;
    let fifo = rt.workdir.path().join("started");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    // Opened for writing too, so that reads wait for the agent's line instead of seeing no writer as EOF.
    let receiver = tokio::net::unix::pipe::OpenOptions::new().read_write(true).open_receiver(&fifo).unwrap();
    let request = request(bash("echo started > started; exec sleep 30"));
    let pending = tokio::spawn({
        let (client, url) = (rt.client.clone(), format!("{}/execute", rt.url));
        async move { status_and_text(client.post(url).json(&request).send().await.unwrap()).await }
    });
    let mut line = String::new();
    tokio::time::timeout(WAIT, BufReader::new(receiver).read_line(&mut line)).await.expect("the agent starts").unwrap();
    let pid = rt.child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let (status, text) = tokio::time::timeout(WAIT, pending).await.expect("the caller is answered").unwrap();
    assert_eq!(status, 503, "{text}");
    assert!(text.starts_with("the runtime stopped while this execution ran; it has no answer"), "{text}");
    let exit = tokio::time::timeout(WAIT, rt.child.wait()).await.expect("the runtime exits").unwrap();
    assert!(exit.success(), "{exit:?}");
}

/// Issue 52: a run's agent never outlives its runtime, `kill -9` included: its guard stops its group.
#[tokio::test]
async fn a_runs_agent_dies_with_its_runtime_killed_9() {
    let mut rt = Runtime::start(&[]).await;
    let fifo = rt.workdir.path().join("started");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let receiver = tokio::net::unix::pipe::OpenOptions::new().read_write(true).open_receiver(&fifo).unwrap();
    let request = request(bash("echo $$ > started; sleep 30; echo x > f"));
    let (client, url) = (rt.client.clone(), format!("{}/execute", rt.url));
    // Its caller is cut off with the runtime: what it hears is not this test's question.
    tokio::spawn(async move { client.post(url).json(&request).send().await.map(|_| ()) });
    let mut line = String::new();
    tokio::time::timeout(WAIT, BufReader::new(receiver).read_line(&mut line)).await.expect("the agent starts").unwrap();
    let pgid: u32 = line.trim().parse().unwrap();
    crate::executor_outputs::group_of_size(pgid, 2, "sh and its sleep").await;
    rt.child.kill().await.unwrap();
    crate::executor_outputs::group_of_size(pgid, 0, "the run's group dies with its runtime").await;
    assert!(!rt.workdir.path().join("f").exists());
}

/// What the issue asked for end to end: a mission dispatched through serve's own route runs on the
/// reference executor in runtime mode, and two of them cross-check each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_drives_the_reference_runtime_end_to_end() {
    let server = crate::support::TestServer::start().await;
    let (a, b) = (Runtime::start(&[]).await, Runtime::start(&[]).await);
    for (name, rt) in [("ref-a", &a), ("ref-b", &b)] {
        let added = server.client.post("/api/v1/runtimes", &json!({"name": name, "base_url": rt.url})).await;
        assert_eq!((added.status, added.body["healthy"].as_bool()), (201, Some(true)), "{}", added.body);
        assert_eq!(added.body["capabilities"]["model_id"], "shell");
    }
    let dispatch = |task: Value| {
        json!({"mission_id": crate::support::mission_id(), "objective": "echo hello", "completion": "prints hello",
               "lease": {"tools": ["Bash"]}, "task": task})
    };
    for (task, agreeing) in [(json!({}), 1), (json!({"crosscheck": {"executions": 2, "quorum": 2}}), 2)] {
        let r = server.client.post("/api/v1/sessions/s/dispatch", &dispatch(task)).await;
        assert_eq!(r.status, 202, "{}", r.body);
        let path = format!("/api/v1/missions/{}", r.body["mission_id"].as_str().unwrap());
        let m =
            server.eventually(&path, "the mission to end", |m| m["state"] == "done" || m["state"] == "failed").await;
        assert_eq!(m["state"], "done", "{m}");
        let last = m["recent_events"].as_array().unwrap().last().unwrap().clone();
        let data = &last["data"];
        assert_eq!(data["summary"], "hello", "{data}");
        assert_eq!(data["output"]["exit_code"], 0);
        assert_eq!(data["verifier_result"]["passed"], true);
        assert_eq!(data["verifier_result"]["provider_family"], "aiwg-serve");
        assert_eq!(data["agreeing"].as_array().unwrap().len(), agreeing, "{data}");
    }
}
