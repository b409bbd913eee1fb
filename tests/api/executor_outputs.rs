//! What the reference executor's missions produce (issue 52), with the real executor process against the
//! real server: the whole log of each agent (`x-log`), the work of a git mission kept on its branch, its
//! patch and files as artifacts, and no agent that outlives its executor.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::artifacts::sha256;
use crate::executor::{body, pid_of, run_to_end, ExecutorProcess, Repo};
use crate::mission_log::log;
use crate::support::{mission_id, TestServer, WAIT};

/// The mission's log as text (200 asserted).
async fn text(server: &TestServer, id: &str, query: &str) -> String {
    let (status, text, _) = log(server, id, query).await;
    assert_eq!(status, 200, "{text}");
    text
}

/// `seq 1 N` as it prints it.
fn seq(n: u32) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_byte_an_agent_writes_is_its_missions_log_and_progress_stays_a_summary() {
    let server = TestServer::start().await;
    let workdir = tempfile::tempdir().unwrap();
    let wd = workdir.path().display().to_string();
    let e = ExecutorProcess::start(&server, "shell", &["--workdir", &wd], &[], None).await;
    let executor_id = e.wait_connected(&server).await;
    let listed = server.client.get(&format!("/api/v1/executors/{executor_id}")).await.body;
    assert!(listed["capabilities"].as_array().unwrap().contains(&json!("x-log")), "{listed}");

    let id = mission_id();
    let m = run_to_end(&server, &body(&id, "seq 1 1000; echo oops >&2; printf 'no end'", json!(["Bash"]))).await;
    assert_eq!(m["state"], "done", "{m}");
    // Complete once the end is stored: the executor sends the end after serve acknowledged the log.
    assert_eq!(text(&server, &id, "?stream=stdout").await, format!("{}no end", seq(1000)));
    assert_eq!(text(&server, &id, "?stream=stderr").await, "oops\n");
    // Both streams together, each in its order (two pipes read at once: their order between them is
    // the order the executor read them in).
    let whole = text(&server, &id, "").await;
    assert_eq!(whole.replacen("oops\n", "", 1), format!("{}no end", seq(1000)), "{whole}");
    assert_eq!((m["log"]["lines"].as_u64(), m["log"]["stderr_bytes"].as_u64()), (Some(1001), Some(5)), "{m}");
    let progress = m["recent_events"].as_array().unwrap().iter().filter(|e| e["event"] == "mission.progress").count();
    assert!((1..10).contains(&progress), "progress stays a few summaries, not a line each: {progress}");
}

/// A socket cut while the agent writes fast: what serve had not acknowledged is sent again, and serve
/// keeps each byte once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_streamed_across_a_restart_of_serve_has_every_line_once() {
    let server = TestServer::start().await;
    let workdir = tempfile::tempdir().unwrap();
    let wd = workdir.path().display().to_string();
    let _e = ExecutorProcess::start(&server, "shell", &["--workdir", &wd], &[], None).await;
    let id = mission_id();
    let objective = "i=0; while [ ! -e stop ]; do i=$((i+1)); echo \"line $i\"; done; echo end";
    let r = server.client.post("/api/v1/sessions/s/dispatch", &body(&id, objective, json!(["Bash"]))).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let path = format!("/api/v1/missions/{id}");
    server.eventually(&path, "the log grows", |m| m["log"]["lines"].as_u64() > Some(2000)).await;
    let server = server.restart_on_same_port().await;
    let before = server.mission(&id).await["log"]["lines"].as_u64().unwrap_or_default();
    server.eventually(&path, "the log grows again", |m| m["log"]["lines"].as_u64() > Some(before + 2000)).await;
    std::fs::write(workdir.path().join("stop"), b"").unwrap();
    let m = server.eventually(&path, "the mission ends", |m| m["state"] == "done").await;
    let whole = text(&server, &id, "").await;
    let lines: Vec<&str> = whole.lines().collect();
    assert_eq!(lines.last(), Some(&"end"), "{m}");
    for (n, line) in lines[..lines.len() - 1].iter().enumerate() {
        assert_eq!(*line, format!("line {}", n + 1), "line {} of {}", n + 1, lines.len());
    }
}

/// The commits on `branch` after `base`, newest first, as `<subject>`.
fn subjects(repo: &Repo, range: &str) -> Vec<String> {
    repo.git(&["log", "--format=%s", range]).lines().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_missions_work_is_kept_on_its_branch_with_what_it_left_uncommitted() {
    let server = TestServer::start().await;
    let repo = Repo::new();
    let (wd, base) = (repo.path(), repo.git(&["rev-parse", "HEAD"]).trim().to_owned());
    let _e = ExecutorProcess::start(&server, "shell", &["--workdir", &wd], &[], None).await;
    let id = mission_id();
    let objective = "echo a > a.txt && git add a.txt && git -c user.email=a@a -c user.name=a commit -qm agent \
                     && echo b > b.txt";
    let m = run_to_end(&server, &body(&id, objective, json!(["Bash"]))).await;
    assert_eq!(m["state"], "done", "{m}");
    let branch = format!("aiwg/{id}");
    let head = repo.git(&["rev-parse", &branch]).trim().to_owned();
    assert_eq!(m["work"], json!({"branch": branch, "commit": head, "base": base}), "{m}");
    assert_eq!(
        subjects(&repo, &format!("{base}..{branch}")),
        [format!("aiwg: what mission {id} left uncommitted"), "agent".into()]
    );
    assert_eq!(repo.git(&["show", &format!("{branch}:b.txt")]), "b\n", "the leftover is on the branch");
    assert_eq!(repo.worktrees(), [wd.as_str()], "the worktree is removed all the same");

    // A mission that changed nothing leaves no branch behind, and names no work.
    let idle = mission_id();
    let m = run_to_end(&server, &body(&idle, "true", json!(["Bash"]))).await;
    assert_eq!((m["state"].as_str(), m.get("work")), (Some("done"), None), "{m}");
    assert_eq!(repo.git(&["branch", "--list", &format!("aiwg/{idle}")]), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_stay_out_of_the_branch_when_asked_and_the_prefix_is_the_operators() {
    let server = TestServer::start().await;
    let repo = Repo::new();
    let (wd, base) = (repo.path(), repo.git(&["rev-parse", "HEAD"]).trim().to_owned());
    let flags = ["--workdir", &wd, "--no-commit-leftovers", "--branch-prefix", "agents/"];
    let _e = ExecutorProcess::start(&server, "shell", &flags, &[], None).await;
    let id = mission_id();
    let objective = "git -c user.email=a@a -c user.name=a commit -q --allow-empty -m agent && echo b > b.txt";
    let m = run_to_end(&server, &body(&id, objective, json!(["Bash"]))).await;
    let branch = format!("agents/{id}");
    assert_eq!(m["work"]["branch"], branch.as_str(), "{m}");
    assert_eq!(subjects(&repo, &format!("{base}..{branch}")), ["agent"], "only what the agent committed");
    // Uncommitted and not asked to be kept: it went with the worktree.
    let left = m["work"]["commit"].as_str().unwrap().to_owned();
    assert_eq!(repo.git(&["ls-tree", "--name-only", &left]), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_patch_and_the_files_matched_are_the_missions_artifacts() {
    let server = TestServer::start().await;
    let repo = Repo::new();
    let wd = repo.path();
    let _e = ExecutorProcess::start(&server, "shell", &["--workdir", &wd, "--artifacts", "out/*.txt"], &[], None).await;
    let id = mission_id();
    let objective = "mkdir out && echo report > out/r.txt && echo skipped > out/r.log && echo code > main.rs";
    let m = run_to_end(&server, &body(&id, objective, json!(["Bash"]))).await;
    assert_eq!(m["state"], "done", "{m}");
    let (base, commit) = (m["work"]["base"].as_str().unwrap(), m["work"]["commit"].as_str().unwrap());
    let patch = Command::new("git").args(["diff", "--binary", base, commit]).current_dir(&wd).output().unwrap().stdout;
    assert!(String::from_utf8_lossy(&patch).contains("+code"), "the patch holds the work");
    let r = server.client.get(&format!("/api/v1/missions/{id}/artifacts")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let listed: Vec<(String, String)> = r.body["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["name"].as_str().unwrap().to_owned(), a["digest"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(listed, [("mission.patch".into(), sha256(&patch)), ("out_r.txt".into(), sha256(b"report\n"))]);
    let got = server.client.get(&format!("/api/v1/missions/{id}/artifacts/out_r.txt")).await;
    assert_eq!((got.status, got.body.as_str()), (200, Some("report\n")));
}

/// The pids in process group `pgid`, from /proc.
fn group(pgid: u32) -> Vec<u32> {
    let pids = std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse().ok());
    pids.filter(|pid: &u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat.rsplit_once(") ").map(|(_, rest)| rest.split(' ').collect()).unwrap_or_default();
        // State, parent, group: a zombie is gone already, only not reaped.
        fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
    })
    .collect()
}

/// Waits (at most `WAIT`) until group `pgid` has `count` processes.
pub(crate) async fn group_of_size(pgid: u32, count: usize, what: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while group(pgid).len() != count {
        assert!(tokio::time::Instant::now() < deadline, "{what}: group {pgid} has {:?}", group(pgid));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit_once(") ").unwrap().1.split(' ').nth(1).unwrap().parse().unwrap()
}

fn kill9(pid: u32) {
    assert!(Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_agent_outlives_its_executor_nor_what_a_crash_of_both_left() {
    let server = TestServer::start().await;
    let (state, workdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (sd, wd) = (state.path().display().to_string(), workdir.path().display().to_string());
    let flags = ["--state-dir", &sd, "--workdir", &wd];
    let mut e = ExecutorProcess::start(&server, "shell", &flags, &[], None).await;
    let work = "echo pid=$$; sleep 30; echo x > f";
    let id = mission_id();
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body(&id, work, json!(["Bash"]))).await.status, 202);
    let pgid = pid_of(&server, &id).await;
    group_of_size(pgid, 2, "sh and its sleep").await;
    e.child.kill().unwrap();
    e.child.wait().unwrap();
    group_of_size(pgid, 0, "the agent's group dies with its executor (kill -9)").await;
    assert!(!workdir.path().join("f").exists());

    // Its guard killed with it, the agent's shell goes (its parent-death signal) but its sleep would
    // stay: the next run of the executor kills it before it registers.
    let cwd = tempfile::tempdir().unwrap();
    let mut e = ExecutorProcess {
        child: e.child_restart(&server, &sd, cwd.path(), &["--workdir", &wd]),
        name: e.name.clone(),
        _cwd: cwd,
    };
    e.wait_connected(&server).await;
    let id = mission_id();
    assert_eq!(server.client.post("/api/v1/sessions/s/dispatch", &body(&id, work, json!(["Bash"]))).await.status, 202);
    let pgid = pid_of(&server, &id).await;
    group_of_size(pgid, 2, "sh and its sleep").await;
    kill9(parent_of(pgid));
    e.child.kill().unwrap();
    e.child.wait().unwrap();
    group_of_size(pgid, 1, "the sleep outlives its shell, guard and executor").await;
    let cwd = tempfile::tempdir().unwrap();
    let restarted = ExecutorProcess {
        child: e.child_restart(&server, &sd, cwd.path(), &["--workdir", &wd]),
        name: e.name.clone(),
        _cwd: cwd,
    };
    group_of_size(pgid, 0, "the restarted executor kills what is left").await;
    restarted.wait_connected(&server).await;
    assert!(!workdir.path().join("f").exists());
    let agents: Value = serde_json::from_slice(&std::fs::read(Path::new(&sd).join("agents.json")).unwrap()).unwrap();
    assert_eq!(agents, json!({}), "nothing recorded is left");
}
