//! One mission's task: start the agent in its working directory, follow its output (its log, progress
//! and HITL requests, see `output`), keep its work on its branch, upload what it produced, and report
//! how it ended, unless serve or a shutdown ended it.

use std::path::Path;
use std::process::ExitStatus;
use std::sync::Arc;

use serde_json::{json, Value};

use super::{spawn, Executor};
use crate::spawn::Agent;
use crate::worktrees::{Work, Workdir};
use aiwg_contract::clock;

impl Executor {
    /// Runs one mission to its end and reports it.
    pub(super) async fn run_mission(
        self: Arc<Self>,
        mission_id: String,
        session: String,
        payload: Value,
        allowlist: Vec<String>,
    ) {
        self.emit("mission.assigned", &mission_id, json!({"state": "assigned", "estimated_start": clock::now()}));
        self.logs.open(&mission_id, self.attempts.of(&mission_id));
        let (mut dir, env) = self.prepare(&mission_id, &session).await;
        let outcome = self.run_agent(&mission_id, &payload, &allowlist, &dir.path, &env).await;
        let work = self.worktrees.keep_work(&mut dir, !self.args.no_commit_leftovers, &mission_id).await;
        if outcome.is_some() {
            self.upload_outputs(&mission_id, &dir, work.as_ref()).await;
        }
        // Freed before the end is reported: once serve has the end, nothing of the mission is left here.
        let succeeded = outcome.as_ref().is_some_and(|o| o["state"] == "done");
        self.worktrees.release(dir, succeeded).await;
        match outcome {
            Some(outcome) => {
                // The end follows the whole log: once serve stores the end, the log is complete.
                self.logs.delivered(&mission_id).await;
                self.finish(&mission_id, with_work(outcome, work)).await
            }
            // The executor is stopping: it reported the mission suspended (or failed) already.
            None => {
                self.running.lock().expect("running lock").remove(&mission_id);
            }
        }
    }

    /// Runs the agent to its end: how the mission ended, as the data of its final event; `None` when
    /// the executor's shutdown ended it.
    async fn run_agent(
        &self,
        mission_id: &str,
        payload: &Value,
        allowlist: &[String],
        dir: &Path,
        env: &[(String, String)],
    ) -> Option<Value> {
        let objective = payload["objective"].as_str().unwrap_or_default();
        let argv = (self.adapter.argv)(allowlist, objective);
        let mut agent = match spawn::start(self.adapter.binary, &argv, env, dir, self.args.kill_grace()).await {
            Ok(agent) => agent,
            Err(e) => return Some(spawn_failure(self.adapter.binary, &e)),
        };
        self.started(mission_id, &mut agent).await;
        let (stdout, stderr) = (agent.child.stdout.take(), agent.child.stderr.take());
        let (out, last_err) =
            tokio::join!(self.follow_stdout(mission_id, stdout), self.follow_stderr(mission_id, stderr));
        let status = agent.child.wait().await;
        self.agents.ended(mission_id).await;
        let ended_by = self.running.lock().expect("running lock").get(mission_id).and_then(|r| r.ended_by);
        let mut end = match ended_by {
            Some("shutdown") => return None,
            Some(by) => json!({"state": "aborted", "aborted_by": by, "reason": "process group terminated"}),
            None => self.outcome(status, payload, dir, env, out.last, last_err).await,
        };
        // What the CLI said it used, in the end serve keeps (`usage`, contract v1.1).
        if let Some(usage) = out.usage {
            end["usage"] = usage;
        }
        Some(end)
    }

    /// The mission's working directory (its own git worktree in a repository) and environment.
    async fn prepare(&self, mission_id: &str, session: &str) -> (Workdir, Vec<(String, String)>) {
        let mission_env = [("AIWG_MISSION_ID", mission_id), ("AIWG_SESSION_HINT", session)];
        let branch = Some(self.args.branch(mission_id));
        spawn::prepare(&self.adapter, &self.worktrees, &self.args.workdir(), mission_id, branch, &mission_env).await
    }

    /// The agent runs: its process group (recorded) and stdin are kept for pause, resume, abort and HITL
    /// answers.
    async fn started(&self, mission_id: &str, agent: &mut Agent) {
        let stdin = agent.child.stdin.take().map(|s| Arc::new(tokio::sync::Mutex::new(s)));
        if let Some(r) = self.running.lock().expect("running lock").get_mut(mission_id) {
            r.pgid = Some(agent.pgid);
            r.stdin = stdin;
        }
        self.agents.started(mission_id, agent.pgid).await;
        self.set_record_state(mission_id, "running").await;
        self.emit("mission.started", mission_id, json!({"state": "running", "agent_runtime": self.adapter.name}));
    }

    /// How a mission whose agent exited on its own ended, as the data of its final event.
    async fn outcome(
        &self,
        status: std::io::Result<ExitStatus>,
        payload: &Value,
        dir: &Path,
        env: &[(String, String)],
        last_out: Option<String>,
        last_err: Option<String>,
    ) -> Value {
        match status.map(|s| (s.code(), std::os::unix::process::ExitStatusExt::signal(&s))) {
            Ok((Some(0), _)) => self.check_completion(payload, dir, env, last_out).await,
            Ok((Some(code), _)) => {
                let reason = (self.adapter.exit_reason)(code).unwrap_or(if code == 127 {
                    "binary_not_found"
                } else {
                    "agent_failed"
                });
                let error = last_err.unwrap_or_else(|| format!("{} exited with {code}", self.adapter.binary));
                json!({"state": "failed", "reason": reason, "exit_code": code, "error": error})
            }
            Ok((None, signal)) => json!({"state": "failed", "reason": "killed",
                                        "error": format!("terminated by signal {}", signal.unwrap_or_default())}),
            Err(e) => {
                json!({"state": "failed", "reason": "agent_failed", "error": format!("waiting for the agent: {e}")})
            }
        }
    }

    async fn check_completion(
        &self,
        payload: &Value,
        dir: &Path,
        env: &[(String, String)],
        last_out: Option<String>,
    ) -> Value {
        let summary = last_out.unwrap_or_else(|| "exited 0".into());
        // `completion` is prose and never run; dispatch refused a check this executor does not run.
        let done = json!({"state": "done", "exit_code": 0, "summary": summary});
        let Some(check) = payload["completion_check"].as_str() else { return done };
        let found = spawn::check_completion(check, dir, env).await;
        let Some(why) = found.failure() else { return done };
        let mut failed = json!({"state": "failed", "reason": "completion_not_met",
                                "error": format!("the agent exited 0; the completion check `{check}` failed: {why}")});
        if let spawn::Completion::NotMet(code) = found {
            failed["exit_code"] = json!(code);
        }
        failed
    }

    /// Reports a mission's end and forgets it.
    async fn finish(&self, mission_id: &str, data: Value) {
        let event = match data["state"].as_str() {
            Some("done") => "mission.completed",
            Some("aborted") => "mission.aborted",
            _ => "mission.failed",
        };
        self.emit(event, mission_id, data);
        self.running.lock().expect("running lock").remove(mission_id);
        self.forget(mission_id).await;
    }

    /// A mission's new state in its record (on disk with a state dir).
    pub(super) async fn set_record_state(&self, mission_id: &str, state: &str) {
        self.records
            .update(|records| {
                if let Some(r) = records.get_mut(mission_id) {
                    r.state = state.to_owned();
                }
            })
            .await;
    }

    /// A mission's record removed (from disk too with a state dir): it has ended.
    pub(super) async fn forget(&self, mission_id: &str) {
        self.attempts.forget(mission_id);
        self.records
            .update(|records| {
                records.remove(mission_id);
            })
            .await;
    }
}

/// The end of a mission whose agent could not be started, with the exit code a shell would give.
fn spawn_failure(binary: &str, e: &std::io::Error) -> Value {
    let (reason, code) =
        if e.kind() == std::io::ErrorKind::NotFound { ("binary_not_found", 127) } else { ("spawn_failed", 126) };
    json!({"state": "failed", "reason": reason, "exit_code": code, "error": format!("cannot start {binary}: {e}")})
}

/// A mission's end with where its work was kept, when it was.
fn with_work(mut outcome: Value, work: Option<Work>) -> Value {
    if let Some(work) = work {
        outcome["work"] = json!({"branch": work.branch, "commit": work.commit, "base": work.base});
    }
    outcome
}
