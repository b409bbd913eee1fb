//! The operator tools of the command line (drain, paging, watch, tail, completions, colour), run as the
//! real binary against the real server.

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cli::{cli, command, finish, stderr, stdout};
use crate::support::{dispatch_body, mission_id, ScriptedExecutor, TestServer, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_and_undrain_an_executor() {
    let server = TestServer::start().await;
    let (e, _ws) = ScriptedExecutor::online(&server, &[]).await;
    let out = cli(&server.base, &["executors", "drain", &e.id], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("executor {}: draining (no new missions; its current missions go on)\n", e.id));
    assert_eq!(server.executors().await["executors"][0]["draining"], true);
    let out = cli(&server.base, &["executors", "list"], &[]).await;
    assert!(stdout(&out).lines().nth(1).unwrap().contains("  draining  "), "{}", stdout(&out));
    let out = cli(&server.base, &["executors", "undrain", &e.id], &[]).await;
    assert_eq!(stdout(&out), format!("executor {}: accepting missions again\n", e.id));
    assert_eq!(server.executors().await["executors"][0].get("draining"), None);
    let out = cli(&server.base, &["executors", "drain", "no-such-executor"], &[]).await;
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missions_list_pages_with_cursor_and_all() {
    let server = TestServer::start().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = mission_id();
        let body = json!({"mission_id": id, "objective": "o", "completion": "c", "queue": true});
        assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body).await.status, 202);
        ids.push(id);
    }
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    let listed = |out: &std::process::Output| -> Vec<String> {
        stdout(out).lines().skip(1).map(|l| l.split_whitespace().next().unwrap().to_owned()).collect()
    };
    let out = cli(&server.base, &["missions", "list", "--limit", "2"], &[]).await;
    assert_eq!(listed(&out), newest_first[..2]);
    let cursor =
        stderr(&out).strip_prefix("more: --cursor ").and_then(|r| r.strip_suffix(" (or --all)\n")).map(str::to_owned);
    let cursor = cursor.unwrap_or_else(|| panic!("where the next page starts: {}", stderr(&out)));
    let out = cli(&server.base, &["missions", "list", "--limit", "2", "--cursor", &cursor], &[]).await;
    assert_eq!((listed(&out), stderr(&out)), (newest_first[2..].to_vec(), String::new()));
    let out = cli(&server.base, &["missions", "list", "--limit", "2", "--all"], &[]).await;
    assert_eq!((listed(&out), stderr(&out)), (newest_first.clone(), String::new()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missions_watch_follows_to_the_end_and_exits_by_it() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let (done, failed) = (mission_id(), mission_id());
    for id in [&done, &failed] {
        assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(id)).await.status, 202);
        e.next_dispatch().await;
    }
    let base = server.base.clone();
    let id = done.clone();
    let watching = tokio::spawn(async move { cli(&base, &["missions", "watch", &id], &[]).await });
    ws.ack("mission.started", &done, json!({"state": "running"})).await;
    ws.ack("mission.completed", &done, json!({"state": "done", "exit_code": 0})).await;
    let out = watching.await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("state:        done"), "{}", stdout(&out));
    assert!(stderr(&out).contains(&format!("{done}: mission.completed")), "{}", stderr(&out));

    // A mission that has ended already: watch reads its end from the log at once.
    ws.ack("mission.failed", &failed, json!({"state": "failed", "reason": "tests_failed", "exit_code": 2})).await;
    let out = cli(&server.base, &["missions", "watch", &failed], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&format!("mission {failed} ended with mission.failed")), "{}", stderr(&out));
}

/// Field finding: an operator's `watch` died at every deploy. A graceful stop ends serve's streams with
/// `server_shutdown`, which the CLI took for the end of the watch (exit 1, the mission still running).
/// `missions watch` and `events --follow` now wait for serve to come back and follow on from where they
/// were, missing nothing and repeating nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_and_follow_survive_a_graceful_restart() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let id = mission_id();
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(&id)).await.status, 202);
    e.next_dispatch().await;
    let started = ws.ack("mission.started", &id, json!({"state": "running"})).await;

    let mut watch =
        command(&["--server", &server.base, "missions", "watch", &id]).stderr(Stdio::piped()).spawn().unwrap();
    let mut watched = BufReader::new(watch.stderr.take().unwrap()).lines();
    let follow = ["--server", &server.base, "--json", "events", "--follow", "--mission", &id, "--since", "0"];
    let mut follower = command(&follow).stdout(Stdio::piped()).spawn().unwrap();
    let mut followed = BufReader::new(follower.stdout.take().unwrap()).lines();
    let next_seq = async |lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>| {
        let line = tokio::time::timeout(WAIT, lines.next_line()).await.expect("a line in time").unwrap().unwrap();
        serde_json::from_str::<Value>(&line).unwrap()["seq"].as_i64().unwrap()
    };
    let mut seen = Vec::new();
    while seen.last() != Some(&started) {
        seen.push(next_seq(&mut followed).await);
    }
    loop {
        let line = tokio::time::timeout(WAIT, watched.next_line()).await.expect("in time").unwrap().unwrap();
        if line.contains("mission.started") {
            break;
        }
    }

    let server = server.restart_on_same_port().await;
    let mut ws = e.connect(&server).await;
    let progress = ws.ack("mission.progress", &id, json!({"summary": "after the restart"})).await;
    let completed = ws.ack("mission.completed", &id, json!({"state": "done", "exit_code": 0})).await;
    let out = tokio::time::timeout(WAIT, watch.wait_with_output()).await.expect("watch ends with the mission").unwrap();
    let mut rest = String::new();
    // The process has ended: its stderr is read to the end.
    while let Some(line) = watched.next_line().await.unwrap() {
        rest.push_str(&line);
        rest.push('\n');
    }
    assert_eq!(out.status.code(), Some(0), "{rest}");
    assert!(rest.contains("reconnecting") && rest.contains(&format!("{id}: mission.completed")), "{rest}");
    // The follower: every event after the restart, once, in order (serve's own resumed-mission events
    // included).
    while seen.last() != Some(&completed) {
        seen.push(next_seq(&mut followed).await);
    }
    assert!(seen.contains(&progress), "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "nothing repeated: {seen:?}");
    follower.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_tail_prints_the_last_n_and_follows_on() {
    let server = TestServer::start().await;
    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let (one, other) = (mission_id(), mission_id());
    for id in [&one, &other] {
        assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(id)).await.status, 202);
        e.next_dispatch().await;
    }
    for i in 0..6 {
        let id = if i % 2 == 0 { &one } else { &other };
        ws.ack("mission.progress", id, json!({"summary": format!("step {i}")})).await;
    }
    let seqs = |out: &std::process::Output| -> Vec<i64> {
        stdout(out).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["seq"].as_i64().unwrap()).collect()
    };
    let all = seqs(&cli(&server.base, &["--json", "events", "--since", "0"], &[]).await);
    let out = cli(&server.base, &["--json", "events", "--tail", "3"], &[]).await;
    assert_eq!(seqs(&out), all[all.len() - 3..]);
    let mine = seqs(&cli(&server.base, &["--json", "events", "--since", "0", "--mission", &one], &[]).await);
    let out = cli(&server.base, &["--json", "events", "--tail", "2", "--mission", &one], &[]).await;
    assert_eq!(seqs(&out), mine[mine.len() - 2..]);
    let out = cli(&server.base, &["--json", "events", "--tail", "1000"], &[]).await;
    assert_eq!(seqs(&out), all, "fewer events than asked for: all of them");
    // Without a starting point: the latest 50, not the whole log.
    for i in 0..50 {
        ws.ack("mission.progress", &other, json!({"summary": format!("more {i}")})).await;
    }
    let all = seqs(&cli(&server.base, &["--json", "events", "--since", "0"], &[]).await);
    assert_eq!(seqs(&cli(&server.base, &["--json", "events"], &[]).await), all[all.len() - 50..]);

    let mut follower = command(&["--server", &server.base, "--json", "events", "--tail", "1", "--follow"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follower.stdout.take().unwrap()).lines();
    let mut next_seq = async || {
        let line = tokio::time::timeout(WAIT, lines.next_line()).await.expect("a line in time").unwrap().unwrap();
        serde_json::from_str::<Value>(&line).unwrap()["seq"].as_i64().unwrap()
    };
    assert_eq!(next_seq().await, *all.last().unwrap());
    let new = ws.ack("mission.progress", &one, json!({"summary": "after the tail"})).await;
    assert_eq!(next_seq().await, new);
    follower.kill().await.unwrap();
}

/// Issue 55: each shell's script asks this very binary at each TAB (clap_complete's engine), by its
/// absolute path.
#[tokio::test]
async fn completions_for_each_shell() {
    let binary = env!("CARGO_BIN_EXE_aiwg-serve");
    for (shell, marker) in [
        ("bash", "-F _clap_complete_aiwg_serve aiwg-serve"),
        ("zsh", "#compdef aiwg-serve"),
        ("fish", "complete --keep-order --exclusive --command aiwg-serve"),
    ] {
        let out = finish(command(&["completions", shell])).await;
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains(marker) && script.contains(binary) && script.contains("COMPLETE"), "{shell}: {script}");
    }
    let out = finish(command(&["completions", "tcsh"])).await;
    assert_eq!(out.status.code(), Some(2));
}

/// The bash script, run in bash as bash runs it for a TAB: what it offers after each line typed.
/// Subcommands and flags at every level (issue 36), and live names and ids from the serve the
/// environment names (issue 55).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_completes_subcommands_flags_and_live_names() {
    let server = TestServer::start().await;
    let mut e = ScriptedExecutor::listen(&[]).await;
    let mut payload = e.register_payload();
    payload["name"] = serde_json::json!("builder-c");
    let r = server.client.post("/api/v1/executors/register", &payload).await;
    assert_eq!(r.status, 201, "{}", r.body);
    e.token = r.body["token"].as_str().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("aiwg-serve.bash");
    std::fs::write(&script, finish(command(&["completions", "bash"])).await.stdout).unwrap();
    let base = server.base.clone();
    let offered = |line: &str| {
        let probe = format!(
            "source {}; COMP_WORDS=({line}); COMP_CWORD=$((${{#COMP_WORDS[@]}}-1)); COMP_LINE='{line}'; \
             COMP_POINT=${{#COMP_LINE}}; _clap_complete_aiwg_serve aiwg-serve \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; \
             echo \"${{COMPREPLY[*]}}\"",
            script.display()
        );
        let out = std::process::Command::new("bash")
            .args(["-c", &probe])
            .env("AIWG_SERVE_URL", &base)
            .env_remove("AIWG_SERVE_TOKEN")
            .output()
            .expect("bash runs");
        assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(offered("aiwg-serve mis"), "missions");
    assert_eq!(offered("aiwg-serve missions w"), "watch");
    assert_eq!(offered("aiwg-serve executors und"), "undrain");
    assert_eq!(offered("aiwg-serve missions watch --ti"), "--timeout");
    assert_eq!(offered("aiwg-serve conformance server --pro"), "--profile");
    assert_eq!(offered("aiwg-serve dispatch --executor build"), "builder-c");
    assert_eq!(offered("aiwg-serve executors drain build"), "builder-c");
    assert_eq!(offered(&format!("aiwg-serve executors drain {}", &e.id[..6])), e.id);
}

/// Colour on a terminal, never through a pipe or with NO_COLOR set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colour_only_on_a_terminal_without_no_color() {
    let server = TestServer::start().await;
    let _online = ScriptedExecutor::online(&server, &[]).await;
    let on_terminal = terminal_output(&server.base, &[]).await;
    assert!(on_terminal.contains("\x1b[1mNAME"), "{on_terminal:?}");
    assert!(on_terminal.contains("\x1b[32myes\x1b[0m"), "{on_terminal:?}");
    let no_color = terminal_output(&server.base, &[("NO_COLOR", "1")]).await;
    assert!(no_color.starts_with("NAME") && !no_color.contains('\x1b'), "{no_color:?}");
    let piped = cli(&server.base, &["executors", "list"], &[]).await;
    assert!(!stdout(&piped).contains('\x1b'), "{}", stdout(&piped));
}

/// `executors list` with a pseudo-terminal as stdout; what it printed.
async fn terminal_output(server: &str, env: &[(&str, &str)]) -> String {
    let (mut master, mut slave) = (0, 0);
    let opened =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(opened, 0, "openpty");
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    // Read while the child writes: Linux drops what is unread on the terminal when its last writer closes.
    // The child holds the only other end, so reading ends (EIO) when it exits.
    let reader = std::thread::spawn(move || {
        let mut printed = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::fs::File::from(master), &mut printed);
        printed
    });
    let mut command = command(&["--server", server, "executors", "list"]);
    command.envs(env.iter().copied()).stdout(Stdio::from(slave));
    let out = finish(command).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed = tokio::task::spawn_blocking(move || reader.join().unwrap()).await.unwrap();
    String::from_utf8_lossy(&printed).replace("\r\n", "\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_a_stale_executor_and_list_every_page() {
    let server = TestServer::start_with(|c| c.server.max_executors = 700).await;
    let (e, ws) = ScriptedExecutor::online(&server, &[]).await;
    let out = cli(&server.base, &["executors", "remove", &e.id], &[]).await;
    assert_eq!(out.status.code(), Some(4), "a connected executor is not removed");
    assert!(stderr(&out).contains("409 conflict"), "{}", stderr(&out));
    ws.close().await;
    server.eventually(&format!("/api/v1/executors/{}", e.id), "disconnected", |b| b["connected"] == false).await;
    let out = cli(&server.base, &["executors", "remove", &e.id], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("executor {}: removed (token revoked, missions kept; the id may register again)\n", e.id)
    );
    let out = cli(&server.base, &["executors", "remove", &e.id], &[]).await;
    assert_eq!((out.status.code(), stdout(&out)), (Some(0), format!("executor {}: already removed\n", e.id)));

    // More than one page of executors: the listing shows them all.
    for _ in 0..600 {
        ScriptedExecutor::register(&server, &[]).await;
    }
    let out = cli(&server.base, &["--json", "executors", "list"], &[]).await;
    let listed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(listed["executors"].as_array().unwrap().len(), 600);
    assert!(listed.get("next_cursor").is_none());
}

/// Issue 36, finding 3: `executors drain builder-1`, `executors drain b1c4b006` and `missions show
/// m-5c281c48` were all 404. An executor is named by its id, its name when unique, or a unique start of
/// its id; a mission by its id or a unique start of it; what fits several is 409 `ambiguous`, listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_and_missions_are_named_as_an_operator_types_them() {
    let server = TestServer::start().await;
    let mut named = Vec::new();
    for name in ["builder-1", "twin", "twin"] {
        let mut e = ScriptedExecutor::listen(&[]).await;
        let mut payload = e.register_payload();
        payload["name"] = json!(name);
        let r = server.client.post("/api/v1/executors/register", &payload).await;
        assert_eq!(r.status, 201, "{}", r.body);
        e.token = r.body["token"].as_str().unwrap().to_owned();
        named.push(e);
    }
    let builder = &named[0].id;
    let out = cli(&server.base, &["executors", "drain", "builder-1"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with(&format!("executor {builder}: draining")), "{}", stdout(&out));
    assert_eq!(server.client.get(&format!("/api/v1/executors/{builder}")).await.body["draining"], true);
    let out = cli(&server.base, &["executors", "undrain", &builder[..8].to_uppercase()], &[]).await;
    assert_eq!(out.status.code(), Some(0), "a prefix, in any case: {}", stderr(&out));
    assert_eq!(server.client.get(&format!("/api/v1/executors/{builder}")).await.body.get("draining"), None);
    let out = cli(&server.base, &["executors", "drain", "twin"], &[]).await;
    assert_eq!(out.status.code(), Some(4));
    let said = stderr(&out);
    assert!(said.contains("409 ambiguous") && said.contains(&named[1].id) && said.contains(&named[2].id), "{said}");
    server.client.get("/api/v1/executors/twin").await.assert_error(409, "ambiguous");
    server.client.get("/api/v1/executors/no-such-one").await.assert_error(404, "not_found");

    let (mut e, mut ws) = ScriptedExecutor::online(&server, &[]).await;
    let shared = format!("m-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let (first, second) = (format!("{shared}a1"), format!("{shared}b2"));
    // An id that is the start of another's.
    let longer = format!("{first}x");
    for id in [&first, &second, &longer] {
        assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &dispatch_body(id)).await.status, 202);
        e.next_dispatch().await;
        ws.ack("mission.started", id, json!({"state": "running"})).await;
    }
    let shown = |out: std::process::Output| serde_json::from_slice::<Value>(&out.stdout).unwrap()["mission_id"].clone();
    let out = cli(&server.base, &["--json", "missions", "show", &format!("{shared}b")], &[]).await;
    assert_eq!(shown(out), second.as_str());
    // The whole id is taken as it is, although another starts with it.
    let out = cli(&server.base, &["--json", "missions", "show", &first], &[]).await;
    assert_eq!(shown(out), first.as_str());
    let out = cli(&server.base, &["missions", "show", &shared], &[]).await;
    assert_eq!(out.status.code(), Some(4));
    assert!(stderr(&out).contains(&format!("{first}, {longer}, {second}")), "{}", stderr(&out));
    // Followed by a prefix too (the event stream filters by the whole id: it waited forever).
    let watch = {
        let (base, reference) = (server.base.clone(), format!("{shared}b"));
        tokio::spawn(async move { cli(&base, &["missions", "watch", &reference], &[]).await })
    };
    let out = cli(&server.base, &["missions", "abort", &format!("{shared}b")], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with(&format!("mission {second}: aborted")),
        "the id, not the prefix: {}",
        stdout(&out)
    );
    let watched = watch.await.unwrap();
    assert_eq!(watched.status.code(), Some(1), "it saw the abort: {}", stderr(&watched));
    assert!(stderr(&watched).contains(&format!("mission {second} ended with mission.aborted")), "{}", stderr(&watched));
    assert_eq!(server.mission(&second).await["state"], "aborted");
    server.client.get("/api/v1/missions/m-x").await.assert_error(404, "not_found");
}
