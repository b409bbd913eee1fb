//! The reference executor (`aiwg-serve executor`), run as the real binary against the real server, with
//! stub agent binaries on a temporary PATH that record their argv and environment.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{mission_id, TestServer, WAIT};

/// A stub agent: records argv (one per line) and env, prints a line, and exits with the code named by
/// an `exit=N` last argument (0 otherwise).
const STUB: &str = r#"#!/bin/sh
name=$(basename "$0")
printf '%s\n' "$@" > "$STUB_RECORD_DIR/$name.argv"
env > "$STUB_RECORD_DIR/$name.env"
echo "stub $name ran"
[ -n "$STUB_SAYS" ] && printf '%s\n' "$STUB_SAYS"
for last in "$@"; do :; done
case "$last" in exit=*) code=${last#exit=}; echo "failing with $code" >&2; exit "$code";; esac
exit 0
"#;

struct Stubs {
    dir: tempfile::TempDir,
}

impl Stubs {
    fn new(binaries: &[&str]) -> Stubs {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        for b in binaries {
            let path = dir.path().join(b);
            std::fs::write(&path, STUB).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Stubs { dir }
    }

    /// A "binary" that exists but cannot be executed: its interpreter is missing (ENOENT at exec).
    fn broken(&self, binary: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.dir.path().join(binary);
        std::fs::write(&path, "#!/nonexistent/interpreter\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn path(&self) -> String {
        format!("{}:{}", self.dir.path().display(), std::env::var("PATH").unwrap_or_default())
    }

    fn argv(&self, binary: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join(format!("{binary}.argv")))
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn env(&self, binary: &str) -> Vec<(String, String)> {
        std::fs::read_to_string(self.dir.path().join(format!("{binary}.env")))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect()
    }
}

/// `aiwg-serve executor` as a child process.
pub(crate) struct ExecutorProcess {
    pub(crate) child: Child,
    pub(crate) name: String,
    /// Its working directory: a scratch directory, not this checkout. Without `--workdir` the executor
    /// runs missions where it was started, in a git worktree of that repository per mission, which
    /// would leave worktrees of the project behind.
    pub(crate) _cwd: tempfile::TempDir,
}

impl ExecutorProcess {
    pub(crate) async fn start(
        server: &TestServer,
        adapter: &str,
        args: &[&str],
        env: &[(&str, &str)],
        path: Option<String>,
    ) -> ExecutorProcess {
        let name = format!("exec-{}", uuid::Uuid::new_v4().simple());
        let cwd = tempfile::tempdir().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_aiwg-serve"));
        command
            .current_dir(cwd.path())
            .args(["executor", "--serve", &server.base, "--adapter", adapter, "--name", &name, "--kill-grace-s", "1"])
            .args(args)
            .env("AIWG_SERVE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(p) = path {
            command.env("PATH", p);
        }
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command.spawn().expect("spawn the executor");
        let process = ExecutorProcess { child, name, _cwd: cwd };
        process.wait_connected(server).await;
        process
    }

    pub(crate) async fn wait_connected(&self, server: &TestServer) -> String {
        let name = self.name.clone();
        let listed = server
            .eventually("/api/v1/executors", "the executor connected", |b| {
                b["executors"].as_array().unwrap().iter().any(|e| e["name"] == name.as_str() && e["connected"] == true)
            })
            .await;
        listed["executors"].as_array().unwrap().iter().find(|e| e["name"] == self.name.as_str()).unwrap()["executor_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for ExecutorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn body(id: &str, objective: &str, tools: Value) -> Value {
    json!({"mission_id": id, "objective": objective, "completion": "c", "lease": {"tools": tools}})
}

pub(crate) async fn run_to_end(server: &TestServer, body: &Value) -> Value {
    let id = body["mission_id"].as_str().unwrap().to_owned();
    let r = server.client.post("/api/v1/sessions/s/dispatch", body).await;
    assert_eq!(r.status, 202, "{}", r.body);
    server
        .eventually(&format!("/api/v1/missions/{id}"), "the mission ends", |m| {
            matches!(m["state"].as_str(), Some("done" | "failed" | "aborted"))
        })
        .await
}

fn events(m: &Value) -> Vec<String> {
    m["recent_events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_gets_its_allowlist_and_a_sanitised_environment() {
    let server = TestServer::start().await;
    let stubs = Stubs::new(&["claude"]);
    let record = stubs.dir.path().display().to_string();
    let env = [
        ("STUB_RECORD_DIR", record.as_str()),
        ("NODE_OPTIONS", "--require /evil.js"),
        ("PYTHONSTARTUP", "/evil.py"),
        ("AIWG_SERVE_TOKEN", "product-secret"),
        ("ANTHROPIC_API_KEY", "sk-test"),
    ];
    let _e = ExecutorProcess::start(&server, "Claude_Local", &[], &env, Some(stubs.path())).await;
    let id = mission_id();
    let m = run_to_end(&server, &body(&id, "add a test", json!(["Read", "Edit"]))).await;
    assert_eq!(m["state"], "done", "{m}");
    assert_eq!(
        stubs.argv("claude"),
        ["-p", "add a test", "--output-format", "stream-json", "--verbose", "--allowedTools", "Read", "Edit"]
    );
    let env = stubs.env("claude");
    let has = |k: &str| env.iter().any(|(key, _)| key == k);
    assert!(!has("NODE_OPTIONS") && !has("PYTHONSTARTUP") && !has("AIWG_SERVE_TOKEN"), "{env:?}");
    assert!(env.contains(&("ANTHROPIC_API_KEY".into(), "sk-test".into())));
    assert!(env.contains(&("AIWG_MISSION_ID".into(), id.clone())));
    assert_eq!(events(&m), ["mission.assigned", "mission.started", "mission.progress", "mission.completed"]);
    assert_eq!(m["recent_events"][2]["data"]["summary"], "stub claude ran");
}

/// The claude and codex CLIs say what they used at the end of a run: the executor reports it in the
/// mission's end (claude's cached tokens counted in its input and its cost as reported, codex's turns
/// summed), and serve keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_reports_what_the_claude_and_codex_clis_said_they_used() {
    // Claude's stream: its init, a message that says something and used some, a tool's result, the result.
    let claude = [
        r#"{"type":"system","subtype":"init","model":"claude-sonnet-4-5"}"#,
        r#"{"type":"assistant","message":{"id":"msg_1","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Reading the tests."}],"usage":{"input_tokens":2,"cache_creation_input_tokens":100,"cache_read_input_tokens":500,"output_tokens":4}}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"ok"}]}}"#,
        r#"{"type":"result","subtype":"success","result":"All tests pass.","total_cost_usd":0.25,"usage":{"input_tokens":2,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":9},"modelUsage":{"claude-sonnet-4-5":{"costUSD":0.25}}}"#,
    ]
    .join("\n");
    let turn = r#"{"type":"turn.completed","usage":{"input_tokens":500,"cached_input_tokens":100,"output_tokens":40,"reasoning_output_tokens":8}}"#;
    let codex = format!("{turn}\n{turn}");
    let cases = [
        (
            "claude-local",
            "claude",
            claude,
            json!({"input_tokens": 1102, "output_tokens": 9,
            "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 100, "reasoning_output_tokens": 0,
            "models": [{"model": "claude-sonnet-4-5", "input_tokens": 1102, "output_tokens": 9,
                "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 100, "reasoning_output_tokens": 0,
                "cost_usd": 0.25, "cost_source": "reported"}]}),
        ),
        (
            "codex-local",
            "codex",
            codex,
            json!({"input_tokens": 1000, "output_tokens": 80,
            "cache_read_input_tokens": 200, "cache_creation_input_tokens": 0, "reasoning_output_tokens": 16,
            "models": [{"model": "codex", "input_tokens": 1000, "output_tokens": 80, "cache_read_input_tokens": 200,
                "cache_creation_input_tokens": 0, "reasoning_output_tokens": 16, "cost_source": "unpriced"}]}),
        ),
    ];
    for (adapter, binary, says, usage) in cases {
        let server = TestServer::start().await;
        let stubs = Stubs::new(&[binary]);
        let record = stubs.dir.path().display().to_string();
        let env = [("STUB_RECORD_DIR", record.as_str()), ("STUB_SAYS", says.as_str())];
        let _e = ExecutorProcess::start(&server, adapter, &[], &env, Some(stubs.path())).await;
        let m = run_to_end(&server, &body(&mission_id(), "add a test", json!(["Read", "Bash"]))).await;
        assert_eq!((m["state"].as_str(), &m["usage"]), (Some("done"), &usage), "{adapter}: {m}");
        if binary == "claude" {
            let events = m["recent_events"].as_array().unwrap();
            let end = events.last().unwrap().clone();
            assert_eq!(end["data"]["summary"], "All tests pass.", "the result's text is the summary: {end}");
            // As it ran: the message's text is the progress summary, with what was used so far; the
            // CLI's bookkeeping lines (init, the tool's result, the result) are no summary.
            let summaries: Vec<&Value> =
                events.iter().filter(|e| e["event"] == "mission.progress").map(|e| &e["data"]["summary"]).collect();
            assert_eq!(summaries, ["stub claude ran", "Reading the tests."]);
            // Sent at once (the message's 602) or, within the progress interval of the line before it, at
            // the end with the result's figures (1102): what was used as of when it went.
            let said = events.iter().find(|e| e["data"]["summary"] == "Reading the tests.").unwrap();
            let input = said["data"]["usage"]["input_tokens"].as_u64();
            assert!(matches!(input, Some(602 | 1102)), "{said}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_refuses_a_lease_without_a_list_and_joins_tools_with_commas() {
    let server = TestServer::start().await;
    let stubs = Stubs::new(&["codex"]);
    let record = stubs.dir.path().display().to_string();
    let _e =
        ExecutorProcess::start(&server, "codex-local", &[], &[("STUB_RECORD_DIR", &record)], Some(stubs.path())).await;
    let m = run_to_end(&server, &body(&mission_id(), "refactor", json!(["Read", "Bash"]))).await;
    assert_eq!(m["state"], "done");
    assert_eq!(stubs.argv("codex"), ["--tool", "Read,Bash", "refactor"]);

    // It declares x-lease:required, so serve knows the refusal before asking: 422 and nothing stored.
    let id = mission_id();
    let r = server
        .client
        .post("/api/v1/sessions/s/dispatch", &json!({"mission_id": id, "objective": "o", "completion": "c"}))
        .await;
    let message = r.assert_error(422, "mission_refused");
    assert!(message.contains("never runs without a lease that lists tools"), "the refusal names why: {message}");
    assert_eq!(server.client.get(&format!("/api/v1/missions/{id}")).await.status, 404, "nothing is stored");
}

/// A check command goes only to an executor that runs checks; one asked directly refuses it rather
/// than report unchecked work as done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_check_is_never_skipped() {
    let server = TestServer::start().await;
    let state = tempfile::tempdir().unwrap();
    let workdir = tempfile::tempdir().unwrap();
    let (state_dir, wd) = (state.path().display().to_string(), workdir.path().display().to_string());
    let e = ExecutorProcess::start(&server, "shell", &["--state-dir", &state_dir, "--workdir", &wd], &[], None).await;
    let executor_id = e.wait_connected(&server).await;
    let listed = server.client.get(&format!("/api/v1/executors/{executor_id}")).await.body;
    let caps: Vec<&str> = listed["capabilities"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert!(caps.contains(&"x-lease-needs:bash") && !caps.contains(&"x-completion-check:shell"), "{caps:?}");

    let id = mission_id();
    let mut checked = body(&id, "touch ran", json!(["Bash"]));
    checked["completion_check"] = json!("true");
    let r = server.client.post("/api/v1/sessions/s/dispatch", &checked).await;
    let message = r.assert_error(422, "mission_refused");
    assert!(message.contains("does not run completion checks (no x-completion-check:shell)"), "{message}");
    assert_eq!(server.client.get(&format!("/api/v1/missions/{id}")).await.status, 404, "nothing is stored");

    // Asked directly, as another control plane might, with the token serve issued it.
    let identity: Value = serde_json::from_slice(&std::fs::read(state.path().join("identity.json")).unwrap()).unwrap();
    let rest = listed["transport_endpoints"]["rest"].as_str().unwrap().trim_end_matches('/');
    let direct = reqwest::Client::new()
        .post(format!("{rest}/api/v1/sessions/s/dispatch"))
        .bearer_auth(identity["token"].as_str().unwrap())
        .json(&checked)
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), 422);
    let refusal: Value = direct.json().await.unwrap();
    assert_eq!(refusal["error"], "completion_check_unsupported", "{refusal}");
    assert!(!workdir.path().join("ran").exists(), "the refused mission did not run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unattended_executor_reports_its_gaps_and_maps_its_exit_codes() {
    let server = TestServer::start().await;
    // Not bound and not packaged: both gaps named, nothing routed.
    let empty = tempfile::tempdir().unwrap();
    let _unready = ExecutorProcess::start(
        &server,
        "spine-unattended",
        &[],
        &[],
        Some(format!("{}:/usr/bin:/bin", empty.path().display())),
    )
    .await;
    let mut unattended = body(&mission_id(), "o", json!(["Read"]));
    unattended["unattended"] = json!(true);
    let message =
        server.client.post("/api/v1/sessions/s/dispatch", &unattended).await.assert_error(503, "no_executor_available");
    assert!(message.contains("identity not bound") && message.contains("vagaris-exec not on PATH"), "{message}");
    drop(_unready);

    let stubs = Stubs::new(&["vagaris-exec"]);
    let record = stubs.dir.path().display().to_string();
    let env = [
        ("STUB_RECORD_DIR", record.as_str()),
        ("VAGARIS_WORKLOAD_SESSION", "sess-1"),
        ("VAGARIS_WORKLOAD_SESSION_SCOPES", "capability.execution.claim"),
        ("VAGARIS_WORKLOAD_SESSION_EXPIRES_AT", "4102444800"),
        ("VAGARIS_WORKLOAD_BUDGET", "ok"),
        ("ANTHROPIC_API_KEY", "sk-must-not-leak"),
    ];
    let _ready = ExecutorProcess::start(&server, "spine_unattended", &[], &env, Some(stubs.path())).await;
    for (code, reason) in
        [(2, "bad_arguments"), (3, "no_workload_identity"), (4, "no_tool_allowlist"), (5, "gateway_refused")]
    {
        let mut b = body(&mission_id(), &format!("exit={code}"), json!(["Read", "Edit"]));
        b["unattended"] = json!(true);
        let m = run_to_end(&server, &b).await;
        assert_eq!((m["state"].as_str(), m["exit_code"].as_i64()), (Some("failed"), Some(code)), "{m}");
        let failed = m["recent_events"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(failed["data"]["reason"], reason);
    }
    assert_eq!(stubs.argv("vagaris-exec"), ["--allow-tools", "Read,Edit", "exit=5"]);
    let env = stubs.env("vagaris-exec");
    assert!(!env.iter().any(|(k, _)| k == "ANTHROPIC_API_KEY"), "the gateway-only executor never sees provider keys");
    assert!(
        env.contains(&("VAGARY_GATEWAY_BASE".into(), "http://127.0.0.1:3014".into())),
        "the gateway default: {env:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_that_cannot_start_is_exit_127() {
    let server = TestServer::start().await;
    let stubs = Stubs::new(&[]);
    stubs.broken("claude");
    let _e = ExecutorProcess::start(&server, "claude-local", &[], &[], Some(stubs.path())).await;
    let m = run_to_end(&server, &body(&mission_id(), "o", json!(["Read"]))).await;
    assert_eq!((m["state"].as_str(), m["exit_code"].as_i64()), (Some("failed"), Some(127)), "{m}");
    assert_eq!(m["recent_events"].as_array().unwrap().last().unwrap()["data"]["reason"], "binary_not_found");
}

/// Polls until `check` holds for the process `pid`'s state letter in /proc (R, S, T, Z...), or it is gone.
async fn proc_state(pid: u32, what: &str, check: impl Fn(Option<char>) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(") ").next().and_then(|rest| rest.chars().next()));
        if check(state) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "process {pid} never {what} (state {state:?})");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn pid_of(server: &TestServer, id: &str) -> u32 {
    let m = server
        .eventually(&format!("/api/v1/missions/{id}"), "the pid is reported", |m| {
            m["recent_events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["data"]["summary"].as_str().is_some_and(|s| s.starts_with("pid="))))
        })
        .await;
    let summary = m["recent_events"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|e| e["data"]["summary"].as_str().filter(|s| s.starts_with("pid=")))
        .unwrap()
        .to_owned();
    summary.trim_start_matches("pid=").parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_missions_succeed_fail_ask_pause_resume_and_abort() {
    let server = TestServer::start().await;
    let workdir = tempfile::tempdir().unwrap();
    let wd = workdir.path().display().to_string();
    let _e =
        ExecutorProcess::start(&server, "shell", &["--workdir", &wd, "--completion-check", "shell"], &[], None).await;
    let bash = json!(["Bash"]);

    let checked = |objective: &str, check: &str| {
        let mut b = body(&mission_id(), objective, bash.clone());
        b["completion_check"] = json!(check);
        b
    };
    let m = run_to_end(&server, &checked("echo hello; touch done.txt", "test -f done.txt")).await;
    assert_eq!((m["state"].as_str(), m["exit_code"].as_i64()), (Some("done"), Some(0)), "{m}");
    assert_eq!(m["exit_codes"], json!({"agent": 0, "completion_check": 0}));

    // The contract's one exit code is the check's; the read says whose, and the agent's beside it.
    let m = run_to_end(&server, &checked("echo nothing", "test -f never.txt")).await;
    assert_eq!((m["state"].as_str(), m["exit_code"].as_i64()), (Some("failed"), Some(1)), "{m}");
    assert_eq!(m["exit_codes"], json!({"agent": 0, "completion_check": 1}));
    assert_eq!(m["error"], "the agent exited 0; the completion check `test -f never.txt` failed: exit 1");
    assert_eq!(m["recent_events"].as_array().unwrap().last().unwrap()["data"]["reason"], "completion_not_met");
    let m = run_to_end(&server, &checked("true", "no-such-checker --all")).await;
    let error = "the agent exited 0; the completion check `no-such-checker --all` failed: command not found (exit 127)";
    assert_eq!(m["error"], error);

    // `completion` is prose: never run, whatever it says.
    let mut prose = body(&mission_id(), "echo done", bash.clone());
    prose["completion"] = json!("the objective is met");
    assert_eq!(run_to_end(&server, &prose).await["state"], "done");

    let m = run_to_end(&server, &body(&mission_id(), "echo oops >&2; exit 3", bash.clone())).await;
    assert_eq!(
        (m["state"].as_str(), m["exit_code"].as_i64(), m["error"].as_str()),
        (Some("failed"), Some(3), Some("oops"))
    );
    assert_eq!(m["exit_codes"], json!({"agent": 3}), "no check ran");

    // It declares x-lease-needs:bash: serve knows it would refuse, and stores nothing.
    let id = mission_id();
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body(&id, "echo hi", json!(["Read"]))).await;
    assert!(r.assert_error(422, "mission_refused").contains("runs only when the lease lists bash"));
    assert_eq!(server.client.get(&format!("/api/v1/missions/{id}")).await.status, 404);

    // HITL: the prompt on stdout becomes a request, the answer arrives on stdin.
    let id = mission_id();
    let hitl = body(
        &id,
        "echo '::hitl:: Deploy to prod?'; read answer; echo \"answer was $answer\"; touch done.txt",
        bash.clone(),
    );
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &hitl).await.status, 202);
    let m = server.eventually(&format!("/api/v1/missions/{id}"), "hitl", |m| m["state"] == "hitl-required").await;
    let request =
        m["recent_events"].as_array().unwrap().iter().find(|e| e["event"] == "mission.hitl_required").unwrap().clone();
    assert_eq!(request["data"]["prompt"], "Deploy to prod?");
    let hitl_id = request["data"]["hitl_id"].as_str().unwrap();
    let r = server
        .client
        .post(&format!("/api/v1/missions/{id}/hitl_response"), &json!({"hitl_id": hitl_id, "response": "yes"}))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let m = server.eventually(&format!("/api/v1/missions/{id}"), "done", |m| m["state"] == "done").await;
    assert_eq!(m["recent_events"].as_array().unwrap().last().unwrap()["data"]["summary"], "answer was yes");

    // Pause and resume stop and continue the whole process group.
    let id = mission_id();
    let looping = body(&id, "echo pid=$$; while true; do sleep 0.05; done", bash.clone());
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &looping).await.status, 202);
    let pid = pid_of(&server, &id).await;
    assert_eq!(server.client.post(&format!("/api/v1/missions/{id}/pause"), &json!(null)).await.status, 202);
    proc_state(pid, "stopped", |s| s == Some('T')).await;
    assert_eq!(server.client.post(&format!("/api/v1/missions/{id}/resume"), &json!(null)).await.status, 202);
    proc_state(pid, "continued", |s| matches!(s, Some('S' | 'R'))).await;
    // Abort: the process group is gone, the mission aborted.
    assert_eq!(server.client.post(&format!("/api/v1/missions/{id}/abort"), &json!(null)).await.status, 202);
    proc_state(pid, "gone", |s| s.is_none() || s == Some('Z')).await;
    assert_eq!(server.mission(&id).await["state"], "aborted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missions_survive_an_executor_restart_honestly() {
    let server = TestServer::start().await;
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().display().to_string();
    let mut e = ExecutorProcess::start(&server, "shell", &["--state-dir", &state_dir], &[], None).await;
    let first_id = e.wait_connected(&server).await;
    let id = mission_id();
    assert_eq!(
        server
            .client
            .post("/api/v1/sessions/s/dispatch", &body(&id, "echo pid=$$; sleep 60", json!(["Bash"])))
            .await
            .status,
        202
    );
    let pid = pid_of(&server, &id).await;
    assert!(e.terminate().success());
    let m = server.mission(&id).await;
    assert_eq!(m["state"], "suspended", "suspended on SIGTERM: {m}");
    proc_state(pid, "gone", |s| s.is_none() || s == Some('Z')).await;

    let cwd = tempfile::tempdir().unwrap();
    let restarted = ExecutorProcess {
        child: e.child_restart(&server, &state_dir, cwd.path(), &[]),
        name: e.name.clone(),
        _cwd: cwd,
    };
    assert_eq!(restarted.wait_connected(&server).await, first_id, "the same identity comes back");
    let m = server.eventually(&format!("/api/v1/missions/{id}"), "settled", |m| m["state"] == "failed").await;
    assert_eq!(m["recent_events"].as_array().unwrap().last().unwrap()["data"]["reason"], "executor_restarted");
    let m = run_to_end(&server, &body(&mission_id(), "echo back", json!(["Bash"]))).await;
    assert_eq!(m["state"], "done");
}

impl ExecutorProcess {
    pub(crate) fn child_restart(
        &mut self,
        server: &TestServer,
        state_dir: &str,
        cwd: &std::path::Path,
        extra: &[&str],
    ) -> Child {
        Command::new(env!("CARGO_BIN_EXE_aiwg-serve"))
            .current_dir(cwd)
            .args([
                "executor",
                "--serve",
                &server.base,
                "--adapter",
                "shell",
                "--name",
                &self.name,
                "--state-dir",
                state_dir,
            ])
            .args(extra)
            .env("AIWG_SERVE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }
}

#[test]
fn unknown_adapters_are_refused_by_name() {
    let out = Command::new(env!("CARGO_BIN_EXE_aiwg-serve"))
        .args(["executor", "--adapter", "gemini-local"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no CLI-hosted executor for adapter 'gemini-local'"));
}

/// Issue 36: an executor that could run nothing started "ready" and failed every mission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_checks_itself_at_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_aiwg-serve"))
        .args(["executor", "--adapter", "shell", "--workdir", "/nonexistent/aiwg-work"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(said.contains("--workdir /nonexistent/aiwg-work: No such file or directory"), "{said}");

    // Without its binary it still registers (it may be installed while the executor runs), says why it
    // is not ready, and serve hears the same.
    let server = TestServer::start().await;
    let empty = Stubs::new(&[]);
    let name = format!("exec-{}", uuid::Uuid::new_v4().simple());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_aiwg-serve"))
        .args(["executor", "--serve", &server.base, "--adapter", "claude-local", "--name", &name])
        .current_dir(empty.dir.path())
        .env("PATH", empty.dir.path())
        .env("AIWG_SERVE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stderr.take().unwrap()));
    let warned = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("not ready") {
                return line;
            }
        }
        panic!("the executor ended without a word");
    });
    let line = warned.await.expect("the executor says it is not ready");
    assert!(line.contains("claude not on PATH"), "{line}");
    let listed = server
        .eventually("/api/v1/executors", "registered", |b| {
            b["executors"].as_array().unwrap().iter().any(|e| e["name"] == name.as_str())
        })
        .await;
    let id = listed["executors"].as_array().unwrap().iter().find(|e| e["name"] == name.as_str()).unwrap()
        ["executor_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let readiness = server.client.get(&format!("/api/v1/executors/{id}/readiness")).await;
    assert_eq!(readiness.status, 200, "{}", readiness.body);
    assert_eq!(readiness.body["report"]["ready"], false, "{}", readiness.body);
    assert!(readiness.body.to_string().contains("claude not on PATH"), "{}", readiness.body);
}

/// A git repository with one commit, as an operator's checkout.
pub(crate) struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    pub(crate) fn new() -> Repo {
        let repo = Repo { dir: tempfile::tempdir().unwrap() };
        repo.git(&["init", "-q"]);
        repo.git(&["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init"]);
        repo
    }

    pub(crate) fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git").args(args).current_dir(self.dir.path()).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The working trees `git worktree list` shows, the main checkout first.
    pub(crate) fn worktrees(&self) -> Vec<String> {
        self.git(&["worktree", "list", "--porcelain"])
            .lines()
            .filter_map(|l| l.strip_prefix("worktree ").map(str::to_owned))
            .collect()
    }

    pub(crate) fn path(&self) -> String {
        self.dir.path().display().to_string()
    }
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The field finding: 14 missions left 14 worktrees in the operator's checkout and 52 MB in /tmp, and
/// the token was world-readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missions_worktree_lives_as_long_as_the_mission_and_the_state_is_private() {
    let server = TestServer::start().await;
    let repo = Repo::new();
    let scratch = tempfile::tempdir().unwrap();
    let state = scratch.path().join("state");
    let sd = state.display().to_string();
    let wd = repo.path();
    let mut e = ExecutorProcess::start(&server, "shell", &["--workdir", &wd, "--state-dir", &sd], &[], None).await;
    assert_eq!((mode(&state), mode(&state.join("identity.json"))), (0o700, 0o600), "the token is private");
    assert_eq!(mode(&state.join("worktrees")), 0o700);

    let id = mission_id();
    let m = run_to_end(&server, &body(&id, "pwd > ran-in; pwd", json!(["Bash"]))).await;
    assert_eq!(m["state"], "done", "{m}");
    let pwd = m["recent_events"].as_array().unwrap().iter().find_map(|e| e["data"]["summary"].as_str()).unwrap();
    assert_eq!(pwd, format!("{sd}/worktrees/{id}"), "each mission runs in its own worktree");
    let failed = run_to_end(&server, &body(&mission_id(), "echo left > behind; exit 3", json!(["Bash"]))).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(repo.worktrees(), [wd.as_str()], "a worktree goes with its mission, failed or done");
    assert_eq!(entries(&state.join("worktrees")), Vec::<String>::new());
    assert_eq!(mode(&state.join("identity.json")), 0o600, "still private once rewritten");

    // A crash leaves a running mission's worktree behind; the next start removes it.
    let id = mission_id();
    let r =
        server.client.post("/api/v1/sessions/s/dispatch", &body(&id, "echo pid=$$; sleep 60", json!(["Bash"]))).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let pid = pid_of(&server, &id).await;
    assert_eq!(repo.worktrees().len(), 2, "the running mission has its worktree");
    e.child.kill().unwrap();
    e.child.wait().unwrap();
    Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    // Until serve has seen the crash, it lists the identity connected: the restart's connection (and
    // the clean-up before it) is only told apart from the crashed run's after that.
    let gone = e.name.clone();
    server
        .eventually("/api/v1/executors", "the crashed run's socket closed", |b| {
            b["executors"].as_array().unwrap().iter().any(|x| x["name"] == gone.as_str() && x["connected"] == false)
        })
        .await;
    let cwd = tempfile::tempdir().unwrap();
    let restarted = ExecutorProcess {
        child: e.child_restart(&server, &sd, cwd.path(), &["--workdir", &wd]),
        name: e.name.clone(),
        _cwd: cwd,
    };
    restarted.wait_connected(&server).await;
    assert_eq!(repo.worktrees(), [wd.as_str()], "what the crashed run left is removed at start");
    assert_eq!(entries(&state.join("worktrees")), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_missions_worktree_is_kept_only_when_asked_and_swept_after_its_executor_died() {
    let server = TestServer::start().await;
    let repo = Repo::new();
    let wd = repo.path();
    // Without a state dir the worktrees live in the temporary directory, under one root per process.
    let tmp = tempfile::tempdir().unwrap();
    let tmpdir = tmp.path().display().to_string();
    let env = [("TMPDIR", tmpdir.as_str())];
    let mut e =
        ExecutorProcess::start(&server, "shell", &["--workdir", &wd, "--keep-failed-worktrees"], &env, None).await;
    let failed = mission_id();
    assert_eq!(run_to_end(&server, &body(&failed, "exit 3", json!(["Bash"]))).await["state"], "failed");
    assert_eq!(run_to_end(&server, &body(&mission_id(), "true", json!(["Bash"]))).await["state"], "done");
    let shared = entries(tmp.path());
    assert!(shared.len() == 1 && shared[0].starts_with("aiwg-executor-"), "{shared:?}");
    let shared = tmp.path().join(&shared[0]);
    assert_eq!(mode(&shared), 0o700);
    let root = shared.join(e.child.id().to_string());
    assert_eq!(entries(&root), [failed.clone(), format!("{failed}.kept")], "only the failed one is kept");
    assert_eq!(repo.worktrees(), [wd.clone(), root.join(&failed).display().to_string()]);

    e.child.kill().unwrap();
    e.child.wait().unwrap();
    // The next executor keeps no failed worktree: what the dead one kept goes, and its root with it.
    let next = ExecutorProcess::start(&server, "shell", &["--workdir", &wd], &env, None).await;
    assert_eq!(repo.worktrees(), [wd.as_str()]);
    assert_eq!(entries(&shared), [next.child.id().to_string()], "the dead executor's root is gone");
}

/// It declares `x-attempts` (issue 53, item 6): serve tells it which attempt a dispatch is, and every
/// event it sends about the mission names that attempt back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_executor_names_the_attempt_of_each_event() {
    let server = TestServer::start().await;
    let e = ExecutorProcess::start(&server, "shell", &[], &[], None).await;
    let id = e.wait_connected(&server).await;
    let listed = server.client.get(&format!("/api/v1/executors/{id}")).await.body;
    assert!(listed["capabilities"].as_array().unwrap().contains(&json!("x-attempts")), "{listed}");
    let m = run_to_end(&server, &body(&mission_id(), "echo hello", json!(["Bash"]))).await;
    assert_eq!(m["state"], "done", "{m}");
    let named: Vec<(String, Value)> = m["recent_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["event"].as_str().unwrap().to_owned(), e["data"]["attempt"].clone()))
        .collect();
    assert!(named.len() >= 3 && named.iter().all(|(_, attempt)| attempt == &json!(1)), "{named:?}");
}
