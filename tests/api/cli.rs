//! The operator command line, run as the real binary against the real server: the findings of issue 10,
//! each one pinned.

use std::os::fd::FromRawFd;
use std::process::{Output, Stdio};

use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

use crate::support::{
    checked_out_commit, dispatch_body, mission_id, running_mission, ScriptedExecutor, TestServer, WAIT,
};

/// `aiwg-serve <args>` with none of the operator's own environment leaking in.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aiwg-serve"));
    command
        .args(args)
        .env_remove("AIWG_SERVE_TOKEN")
        .env_remove("AIWG_SERVE_URL")
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs a command to its end with the stdio it was given (`Command::output` would replace them with pipes);
/// one that outlives any wait of the tests is a failure, not a hang.
pub async fn finish(mut command: Command) -> Output {
    let bound = WAIT * 3;
    let child = command.spawn().expect("spawn the CLI");
    tokio::time::timeout(bound, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the CLI did not exit within {bound:?}"))
        .expect("run the CLI")
}

/// Runs `aiwg-serve --server <server> <args>`.
pub async fn cli(server: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = command(&["--server", server]);
    command.args(args).envs(env.iter().copied());
    finish(command).await
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
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
        "--lease-tools",
        "Bash",
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

/// Issue 36: a bug report quotes `--version`; from a checkout it names the commit built.
#[tokio::test]
async fn the_version_names_the_commit() {
    let out = finish(command(&["--version"])).await;
    let head = checked_out_commit();
    let expected = match head {
        Some(commit) => format!("aiwg-serve {} ({commit})\n", env!("CARGO_PKG_VERSION")),
        None => format!("aiwg-serve {}\n", env!("CARGO_PKG_VERSION")),
    };
    assert_eq!(stdout(&out), expected);
}

/// Issue 36: `serve --token X` was silently ignored; a flag a command takes no notice of is refused,
/// wherever it is written, while the same setting from the environment (an operator's shell) is not.
#[tokio::test]
async fn flags_a_command_ignores_are_refused() {
    for args in [&["serve", "--token", "x"][..], &["--token", "x", "serve"], &["completions", "bash", "--json"]] {
        let out = finish(command(args)).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let name = if args.contains(&"serve") { "serve" } else { "completions" };
        let flag = if args.contains(&"--json") { "--json" } else { "--token" };
        let expected = format!("{flag} is for the operator commands; `{name}` takes no notice of it");
        assert!(stderr(&out).contains(&expected), "{args:?}: {}", stderr(&out));
    }
    let mut from_env = command(&["completions", "bash"]);
    from_env.env("AIWG_SERVE_TOKEN", "x");
    assert_eq!(finish(from_env).await.status.code(), Some(0));
}

/// Issue 36: a script waiting on a mission tells apart a failed mission (1), a refused request (4), a
/// wait that timed out (5) and Ctrl-C (130); the last two leave the mission going, and say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_ends_by_exit_codes_a_script_can_tell_apart() {
    for help in [&["--help"][..], &["dispatch", "--help"], &["missions", "watch", "--help"]] {
        let out = finish(command(help)).await;
        let text = stdout(&out);
        assert!(
            text.contains("Exit codes:") && text.contains("  4    the server refused the request"),
            "{help:?}: {text}"
        );
    }
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;

    let out = cli(&server.base, &["missions", "watch", &id, "--timeout", "1"], &[]).await;
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("it did not end within 1s; mission {id} goes on")), "{}", stderr(&out));

    let mut watch = command(&["--server", &server.base, "missions", "watch", &id]);
    let mut child = watch.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let following = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("mission.started") {
                return;
            }
        }
        panic!("watch ended before it showed the mission");
    });
    following.await.expect("watch shows the mission");
    send_signal(child.id().unwrap(), "INT");
    let status = tokio::time::timeout(WAIT, child.wait()).await.unwrap().unwrap();
    let mut rest = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        rest.push_str(&line);
    }
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(rest.contains(&format!("stopped following; mission {id} goes on")), "{rest}");
    assert_eq!(server.mission(&id).await["state"], "running", "following stopped, not the mission");

    let out = cli(&server.base, &["missions", "show", "m-no-such-mission"], &[]).await;
    assert_eq!(out.status.code(), Some(4), "a refusal: {}", stderr(&out));
}

fn send_signal(pid: u32, name: &str) {
    let sent = std::process::Command::new("kill").args([&format!("-{name}"), &pid.to_string()]).status().unwrap();
    assert!(sent.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_mission_makes_dispatch_wait_exit_1() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    let base = server.base.clone();
    let args =
        ["dispatch", "--objective", "o", "--completion", "c", "--no-lease", "--mission-id", &id, "--wait", "--json"]
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

/// `dispatch --plan` says where the mission would go, by name, and who was passed over and why, and sends
/// nothing; a dispatch nobody fits says it would wait or be refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_plan_says_where_it_would_go_and_sends_nothing() {
    let server = TestServer::start().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &["x-planned"]).await;
    let (_other, _other_ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    let args = ["dispatch", "--objective", "o", "--completion", "c", "--no-lease", "--capability", "x-planned"];
    let planned = [&args[..], &["--mission-id", &id, "--plan"]].concat();
    let out = cli(&server.base, &planned, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(said.starts_with(&format!("would be assigned to scripted-executor ({})", e.id)), "{said}");
    assert!(said.contains("passed over scripted-executor (") && said.contains("x-planned"), "{said}");
    assert!(e.no_dispatch_pending(), "nothing sent");
    server.client.get(&format!("/api/v1/missions/{id}")).await.assert_error(404, "not_found");

    let nobody =
        ["dispatch", "--objective", "o", "--completion", "c", "--no-lease", "--capability", "x-none", "--plan"];
    let said = stdout(&cli(&server.base, &nobody, &[]).await);
    assert!(said.starts_with("would be refused: ") && said.contains("(no_executor_available)"), "{said}");
    let said = stdout(&cli(&server.base, &[&nobody[..], &["--queue"]].concat(), &[]).await);
    assert!(said.starts_with("would wait in the queue: ") && said.contains("x-none"), "{said}");
    let out = cli(&server.base, &[&args[..], &["--plan", "--wait"]].concat(), &[]).await;
    assert_eq!(out.status.code(), Some(2), "--plan and --wait exclude each other: {}", stderr(&out));
}

/// `--check` is the completion check, its own field beside the prose, and shown as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_check_travels_as_its_own_field() {
    let server = TestServer::start().await;
    let (mut e, _ws) = ScriptedExecutor::online(&server, &["x-completion-check:shell"]).await;
    let id = mission_id();
    let args = [
        "dispatch",
        "--objective",
        "o",
        "--completion",
        "the tests pass",
        "--check",
        "cargo test",
        "--no-lease",
        "--mission-id",
        &id,
    ];
    let out = cli(&server.base, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sent = e.next_dispatch().await.body;
    assert_eq!(
        (sent["completion"].as_str(), sent["completion_check"].as_str()),
        (Some("the tests pass"), Some("cargo test"))
    );
    let shown = stdout(&cli(&server.base, &["missions", "show", &id], &[]).await);
    assert!(shown.contains("completion:   the tests pass") && shown.contains("check:        cargo test"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_showing_controlling_and_answering() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &["hitl", "x-pause-resume", "x-abort"]).await;
    let id = running_mission(&server, &mut e, &mut ws).await;

    let out = cli(&server.base, &["executors", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(0));
    let table = stdout(&out);
    assert!(table.starts_with("NAME"), "tables lead with names: {table}");
    assert!(table.lines().nth(1).unwrap().starts_with("scripted-executor"), "{table}");
    assert!(table.lines().nth(1).unwrap().contains(&e.id) && table.contains("yes"), "{table}");
    let out = cli(&server.base, &["--json", "executors", "list"], &[]).await;
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["executors"][0]["executor_id"], e.id.as_str());

    let out = cli(&server.base, &["missions", "list", "--state", "running"], &[]).await;
    let row = stdout(&out).lines().nth(1).unwrap().to_owned();
    // Issue 36: the executor by name, when it was dispatched, for how long so far, and what for.
    assert!(row.starts_with(&id) && row.contains(" scripted-executor "), "{row}");
    assert!(row.contains(" so far ") && row.contains("Add JWT validation to /auth/login"), "{row}");
    let out =
        cli(&server.base, &["missions", "list", "--state", "done,paused", "--executor", "scripted-executor"], &[])
            .await;
    assert_eq!(stdout(&out).lines().count(), 1, "several states, none of them the mission's: {}", stdout(&out));
    let out = cli(&server.base, &["missions", "list", "--state", "running", "--state", "done"], &[]).await;
    assert!(stdout(&out).contains(&id), "{}", stdout(&out));
    let out = cli(&server.base, &["missions", "list", "--state", "runing"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("possible values: queued, assigned"), "{}", stderr(&out));
    let r = server.client.get("/api/v1/missions?state=running,runing").await;
    assert!(r.assert_error(400, "invalid_query").contains("the states are queued, assigned"), "{}", r.body);
    let listed = server.client.get("/api/v1/missions?state=running").await;
    assert_eq!(listed.body["missions"][0]["objective"], "Add JWT validation to /auth/login");
    assert!(listed.body["missions"][0].get("duration_s").is_none(), "a live mission's is the reader's to say");
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
    // Repeated, as a retried script would: the state it asked for is what it gets, and success.
    let out = cli(&server.base, &["missions", "pause", &id], &[]).await;
    assert_eq!((out.status.code(), stdout(&out)), (Some(0), format!("mission {id}: already paused\n")));
    let out = cli(&server.base, &["missions", "abort", &id], &[]).await;
    assert_eq!(out.status.code(), Some(0));
    let ended = server.client.get("/api/v1/missions").await.body["missions"][0].clone();
    assert!(ended["duration_s"].as_f64().is_some_and(|d| d >= 0.0), "an ended mission says how long: {ended}");
    let out = cli(&server.base, &["missions", "resume", &id], &[]).await;
    assert_eq!(out.status.code(), Some(4));
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
    assert_eq!(out.status.code(), Some(4));
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
    let client = aiwg_client::Client::new(&server.base, None);
    let metrics = client.get("/metrics").await.expect("metrics answer");
    let text = metrics.as_str().expect("the metrics text as a string");
    assert!(text.contains("aiwg_executors_connected 1\n"), "{text}");
    let executors = client.get("/api/v1/executors").await.expect("executors answer");
    assert_eq!(executors["executors"].as_array().map(Vec::len), Some(1), "{executors}");
}

/// Finding 1: the CAPABILITIES column was always dashes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_list_shows_capabilities() {
    let server = TestServer::start().await;
    let (e, _ws) = ScriptedExecutor::online(&server, &["hitl", "runtime:codex"]).await;
    let out = cli(&server.base, &["executors", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let row = stdout(&out).lines().nth(1).map(str::to_owned).unwrap_or_default();
    assert!(row.starts_with("scripted-executor") && row.contains(&e.id), "{}", stdout(&out));
    assert!(row.ends_with("  hitl,runtime:codex,x-acks"), "{}", stdout(&out));
}

/// Finding 2: a queued mission was reported `assigned to executor -`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_queue_says_queued_and_why() {
    let server = TestServer::start().await;
    let id = mission_id();
    let args = ["dispatch", "--objective", "o", "--completion", "c", "--lease-tools", "Bash", "--queue"];
    let out = cli(&server.base, &[&args[..], &["--mission-id", &id]].concat(), &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reason = server.mission(&id).await["queued_reason"].as_str().expect("a queued reason").to_owned();
    assert_eq!(stdout(&out), format!("mission {id} queued: {reason}\n"));
}

/// Finding 3: the server's `details` (which field failed which check) were dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_violation_prints_the_details() {
    let server = TestServer::start().await;
    let out =
        cli(&server.base, &["dispatch", "--objective", "", "--completion", "c", "--lease-tools", "Bash"], &[]).await;
    assert_eq!(out.status.code(), Some(4));
    let lines: Vec<String> = stderr(&out).lines().map(str::to_owned).collect();
    assert!(lines[0].starts_with("aiwg-serve: 400 schema_violation: "), "{lines:?}");
    assert!(lines[1].starts_with("  at /objective: ") && lines[1].ends_with(" (minLength)"), "{lines:?}");
}

/// Finding 5: `aiwg-serve events | head` panicked (exit 101) once the reader had gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_the_command_quietly() {
    let server = TestServer::start().await;
    let _online = ScriptedExecutor::online(&server, &[]).await;
    let server_flag = ["--server", server.base.as_str()];
    for args in [&["events", "--since", "0"][..], &["executors", "list"], &["completions", "bash"]] {
        // A pipe whose reading end is closed before the CLI starts: its first write meets EPIPE.
        let mut fds = [0; 2];
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        unsafe { libc::close(fds[0]) };
        let write_end = unsafe { std::os::fd::OwnedFd::from_raw_fd(fds[1]) };
        // Completions talk to no server (and refuse the flag).
        let mut command = command(if args[0] == "completions" { &[] } else { &server_flag });
        command.args(args).stdout(Stdio::from(write_end));
        let out = finish(command).await;
        assert_eq!((out.status.code(), stderr(&out)), (Some(0), String::new()), "{args:?}");
    }
}

/// Finding 6: `executor --server URL` was taken as the operator flag and ignored; misspelt flags must
/// fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_takes_server_and_refuses_misspelt_flags() {
    let server = TestServer::start().await;
    let url = server.base.as_str();
    // Its own flag, the older spelling, and the operator commands' flag before the subcommand.
    for place in [["executor", "--server", url], ["executor", "--serve", url], ["--server", url, "executor"]] {
        let name = format!("exec-{}", uuid::Uuid::new_v4().simple());
        let mut child = command(&place)
            .args(["--adapter", "shell", "--name", &name])
            .env("AIWG_SERVE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the executor");
        server
            .eventually("/api/v1/executors", "the executor registered", |b| {
                b["executors"].as_array().unwrap().iter().any(|e| e["name"] == name.as_str() && e["connected"] == true)
            })
            .await;
        child.kill().await.unwrap();
    }
    let out = finish(command(&["executor", "--sever", &server.base])).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with("error: unexpected argument '--sever' found"), "{}", stderr(&out));
    assert!(stderr(&out).contains("a similar argument exists: '--server'"), "{}", stderr(&out));
}

/// Finding 7: a wrong operator token was answered with the executor's "re-register".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_operator_token_says_what_to_check() {
    let server = TestServer::start_with(|c| c.server.operator_tokens = vec!["operator-token-for-the-cli".into()]).await;
    let out = cli(&server.base, &["--token", "not-the-operator-token", "missions", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(
        stderr(&out),
        "aiwg-serve: 401 token_invalid: the server did not accept the operator token: check --token or \
         AIWG_SERVE_TOKEN against its server.operator_tokens and its named operators (revoked?)\n"
    );
}

/// Finding 8: `cannot reach the server: client error (Connect)` named neither the URL nor the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_named_with_the_cause() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let out = cli(&url, &["missions", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        stderr(&out),
        format!(
            "aiwg-serve: cannot reach the server at {url}: connection refused\nIs it running? Start one with \
             `aiwg-serve serve`, or point --server (AIWG_SERVE_URL) at it.\n"
        )
    );
}

/// Finding 9: `https://` servers (serve behind a TLS proxy) were unreachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_talks_to_a_serve_behind_a_tls_proxy() {
    let server = TestServer::start().await;
    let (e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let proxy = TlsProxy::start(server.base.trim_start_matches("http://")).await;
    let ca = proxy.ca.path().to_str().unwrap().to_owned();
    let out = cli(&proxy.base, &["--ca-cert", &ca, "--json", "executors", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["executors"][0]["executor_id"], e.id.as_str());
    // Without the proxy's CA the certificate is refused, and the CLI says so.
    let out = cli(&proxy.base, &["executors", "list"], &[]).await;
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("certificate"), "{}", stderr(&out));
}

/// A TLS-terminating proxy in front of a serve, with a self-signed certificate for 127.0.0.1.
struct TlsProxy {
    base: String,
    ca: tempfile::NamedTempFile,
}

impl TlsProxy {
    async fn start(target: &str) -> TlsProxy {
        use tokio_rustls::rustls;
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        let ca = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(ca.path(), cert.cert.pem()).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(rustls::crypto::ring::default_provider().into())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://{}", listener.local_addr().unwrap());
        let target = target.to_owned();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, target) = (acceptor.clone(), target.clone());
                tokio::spawn(async move {
                    let (Ok(mut tls), Ok(mut upstream)) =
                        (acceptor.accept(tcp).await, tokio::net::TcpStream::connect(&target).await)
                    else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
                });
            }
        });
        TlsProxy { base, ca }
    }
}

/// Finding 10: without a lease every reference executor refuses, and the mission failed behind a 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_without_a_lease_is_refused_up_front() {
    let server = TestServer::start().await;
    let _online = ScriptedExecutor::online(&server, &[]).await;
    let out = cli(&server.base, &["dispatch", "--objective", "echo hi", "--completion", "c"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("add --lease-tools") && stderr(&out).contains("--lease-tools Bash"),
        "{}",
        stderr(&out)
    );
    let out =
        cli(&server.base, &["dispatch", "--objective", "o", "--completion", "c", "--lease-tools", "none"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let listed = server.client.get("/api/v1/missions").await.body;
    assert_eq!(listed["missions"], json!([]), "nothing was dispatched");
}

/// Finding 11: config errors named neither the key nor its source; unknown keys and variables passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_errors_name_the_key_and_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("serve.toml");
    let serve = |env: &[(&str, &str)]| {
        let mut command = command(&["serve", "--bind", "127.0.0.1:0", "--data-dir"]);
        command.arg(dir.path()).arg("--config").arg(&file).envs(env.iter().copied());
        finish(command)
    };
    std::fs::write(&file, "[hub]\nping_interval_s = \"fast\"\n").unwrap();
    let out = serve(&[]).await;
    assert_eq!(out.status.code(), Some(2));
    let expected = format!(
        "aiwg-serve: config: hub.ping_interval_s = \"fast\" (from {}): invalid type: string \"fast\", expected u64\n",
        file.display()
    );
    assert_eq!(stderr(&out), expected);

    std::fs::write(&file, "[dispatch]\nmax_attempt = 2\n").unwrap();
    let out = serve(&[]).await;
    assert_eq!(out.status.code(), Some(2));
    let expected = format!(
        "aiwg-serve: config: unknown key dispatch.max_attempt in {}; did you mean dispatch.max_attempts?\n",
        file.display()
    );
    assert_eq!(stderr(&out), expected);

    std::fs::write(&file, "").unwrap();
    let out = serve(&[("AIWG_SERVE_FORWARD_TIMEOUT_MS", "100")]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("aiwg-serve: config: unknown environment variable AIWG_SERVE_FORWARD_TIMEOUT_MS; did you mean AIWG_SERVE_DISPATCH_FORWARD_TIMEOUT_MS?"),
        "{}",
        stderr(&out)
    );
}

/// Finding 12: `--adapter bash` was refused without naming the valid adapters.
#[tokio::test]
async fn an_unknown_adapter_lists_the_valid_ones() {
    let out = finish(command(&["executor", "--adapter", "bash"])).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(
            "no CLI-hosted executor for adapter 'bash'; the adapters are claude-local, codex-local, spine-unattended, shell"
        ),
        "{}",
        stderr(&out)
    );
}

/// Finding 15: aborting an aborted mission exited 1, so a retried script failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_an_aborted_mission_succeeds_and_a_done_one_does_not() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let (aborted, done) = (mission_id(), mission_id());
    for id in [&aborted, &done] {
        assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(id)).await.status, 202);
        e.next_dispatch().await;
    }
    ws.ack("mission.completed", &done, json!({"state": "done", "exit_code": 0})).await;
    let out = cli(&server.base, &["missions", "abort", &aborted], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = cli(&server.base, &["missions", "abort", &aborted], &[]).await;
    assert_eq!((out.status.code(), stdout(&out)), (Some(0), format!("mission {aborted}: already aborted\n")));
    let out = cli(&server.base, &["missions", "abort", &done], &[]).await;
    assert_eq!(out.status.code(), Some(4));
    assert!(stderr(&out).starts_with("aiwg-serve: 409 illegal_transition"), "{}", stderr(&out));
}

/// Issue 53, item 5: whoever calls serve writes what the command line prints: a path id holding `%0A`
/// and `%1B` forged rows and erased lines in `aiwg-serve audit`, and a mission's objective or an error
/// message can carry the same. Every human-readable output writes control characters out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_from_the_server_are_written_out_in_every_human_output() {
    let server = TestServer::start().await;
    let forged = "m%0A2099-01-01T00:00:00.000Z%20admin%20forged%1B%5B2K";
    let r =
        server.client.request(axum::http::Method::POST, &format!("/api/v1/missions/{forged}/abort"), None, &[]).await;
    r.assert_error(404, "not_found");
    let id = mission_id();
    let mut body = dispatch_body(&id);
    body["objective"] = json!("first line\nsecond line\x1b[2J\x07");
    body["queue"] = json!(true);
    let r = server.client.post("/api/v1/sessions/s%1B%5B31m%E2%80%AE/dispatch", &body).await;
    assert_eq!(r.status, 202, "{}", r.body);

    let outputs = [
        (vec!["audit"], "m\\n2099-01-01T00:00:00.000Z admin forged\\x1b[2K"),
        (vec!["missions", "list"], "first line\\nsecond line\\x1b[2J\\x07"),
        (vec!["missions", "show", &id], "first line\\nsecond line\\x1b[2J\\x07"),
        (vec!["missions", "show", &id], "s\\x1b[31m\\u{202e}"),
    ];
    for (args, written_out) in outputs {
        let out = cli(&server.base, &args, &[]).await;
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let printed = stdout(&out);
        assert!(printed.contains(written_out), "{args:?} should show {written_out}:\n{printed}");
        assert!(!printed.contains(['\x1b', '\x07', '\u{202e}']), "{args:?}: {printed:?}");
        if args[0] == "audit" {
            assert_eq!(printed.lines().count(), 3, "a header, the dispatch and the abort: {printed}");
        }
    }
    // An error message quotes what the caller sent.
    let out = cli(&server.base, &["missions", "abort", "x\n\x1b[2Kforged"], &[]).await;
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(!stderr(&out).contains('\x1b') && stderr(&out).lines().count() == 1, "{:?}", stderr(&out));
    assert!(stderr(&out).contains("x\\n\\x1b[2Kforged"), "{}", stderr(&out));
}
