//! `POST /execute`: the task's prompt run as the agent's objective, under the lease the inputs carry,
//! once per `execution_id` however often the kernel re-sends it.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use tokio::sync::watch;

use super::answer::{self, Exit, Run, ANSWER_BYTES, EVIDENCE_BYTES};
use super::runs::Claim;
use super::{text, HttpRuntime};
use crate::adapters::Tally;
use crate::{spawn, CompletionCheck};
use aiwg_wattswarm::hash::{json_bytes, sha256_hex};
use aiwg_wattswarm::wire::{EvidencePolicy, ExecuteRequest, ExecuteResponse};

/// How an execution ended, kept for the re-sends.
pub(super) enum Outcome {
    Answered(ExecuteResponse),
    /// The agent could not be started (its binary is missing, the working directory is gone).
    Unstartable(String),
    /// The runtime stopped while the agent ran, and stopped it: its exit is the stop's, not an answer
    /// (a kernel would finalize the partial output as the task's).
    Interrupted,
}

impl Outcome {
    fn response(&self) -> Response {
        match self {
            Outcome::Answered(answer) => Json(answer).into_response(),
            Outcome::Unstartable(why) => text(StatusCode::BAD_GATEWAY, why),
            Outcome::Interrupted => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the runtime stopped while this execution ran; it has no answer: send it again once the runtime is back",
            ),
        }
    }
}

/// What a run needs from the request, checked before anything starts.
struct Job {
    execution_id: String,
    task_id: String,
    objective: String,
    allowlist: Vec<String>,
    /// `inputs.completion_check`, run after the agent exits 0 (`inputs.completion` is prose).
    completion_check: Option<String>,
    evidence_policy: EvidencePolicy,
}

pub(super) async fn execute(State(runtime): State<Arc<HttpRuntime>>, Json(request): Json<ExecuteRequest>) -> Response {
    let job = match runtime.job(&request) {
        Ok(job) => job,
        Err((status, why)) => return text(status, why),
    };
    let mut outcome = match runtime.runs.claim(&request.execution_id, &fingerprint(&request)) {
        Claim::Start(done, outcome) => {
            // A task of its own: a caller that hangs up does not end the run, so a re-send finds it.
            tokio::spawn(Arc::clone(&runtime).run(job, done));
            outcome
        }
        Claim::Join(outcome) => outcome,
        Claim::Conflict => {
            let why = format!("execution {} was already sent with another body", request.execution_id);
            return text(StatusCode::CONFLICT, why);
        }
        Claim::Stopping => return text(StatusCode::SERVICE_UNAVAILABLE, "the runtime is stopping"),
    };
    let ended = outcome.wait_for(Option::is_some).await.map(|o| o.clone());
    match ended {
        Ok(Some(outcome)) => outcome.response(),
        _ => text(StatusCode::INTERNAL_SERVER_ERROR, "the run ended without an outcome"),
    }
}

/// The whole request, hashed: only an identical request is a re-send of the same execution.
fn fingerprint(request: &ExecuteRequest) -> String {
    sha256_hex(&json_bytes(&serde_json::to_value(request).expect("a request always serializes")))
}

impl HttpRuntime {
    /// The run a request asks for, or the refusal: a profile this runtime does not serve (a kernel
    /// checks capabilities first, a careless caller may not), no prompt, a lease the adapter refuses.
    fn job(&self, request: &ExecuteRequest) -> Result<Job, (StatusCode, String)> {
        if !self.capabilities.profiles.contains(&request.profile) {
            return Err((StatusCode::BAD_REQUEST, format!("profile '{}' not supported", request.profile)));
        }
        let Some(prompt) = request.inputs.get("prompt").and_then(Value::as_str) else {
            return Err((
                StatusCode::BAD_REQUEST,
                "inputs.prompt must be a string: it is the agent's objective".to_owned(),
            ));
        };
        // A task with no lease takes the operator's --default-lease, if any; otherwise the adapter
        // refuses it (deny by default), and the refusal says how to allow it.
        let lease = match (&request.inputs["lease"], &self.args.default_lease) {
            (Value::Null, Some(default)) => default,
            (lease, _) => lease,
        };
        let allowlist = self.adapter.allowlist_for(lease).map_err(|refused| {
            let hint = match (&request.inputs["lease"], &self.args.default_lease) {
                (Value::Null, None) => {
                    "; a task may carry inputs.lease {\"tools\": [...]}, or start this runtime with --default-lease \
                     TOOLS for tasks that carry none"
                }
                _ => "",
            };
            (StatusCode::UNPROCESSABLE_ENTITY, format!("{}{hint}", refused.0))
        })?;
        let completion_check = request.inputs.get("completion_check").and_then(Value::as_str).map(str::to_owned);
        if completion_check.is_some() && self.args.completion_check == CompletionCheck::None {
            return Err((
                StatusCode::UNPROCESSABLE_ENTITY,
                "this runtime does not run completion checks (start it with --completion-check shell)".to_owned(),
            ));
        }
        Ok(Job {
            execution_id: request.execution_id.clone(),
            task_id: request.task_id.clone(),
            objective: prompt.to_owned(),
            allowlist,
            completion_check,
            evidence_policy: request.task_contract.evidence_policy.clone(),
        })
    }

    /// Runs the job to its end, hands its outcome to every caller waiting on it, and keeps it.
    async fn run(self: Arc<Self>, job: Job, done: watch::Sender<Option<Arc<Outcome>>>) {
        let outcome = self.outcome(&job).await;
        let outcome = if self.runs.stopping() { Outcome::Interrupted } else { outcome };
        let _ = done.send(Some(Arc::new(outcome)));
        self.runs.finished(&job.execution_id);
    }

    async fn outcome(&self, job: &Job) -> Outcome {
        // The agent sees the execution as its mission and the task as its session, as in WebSocket mode.
        let run_env = [("AIWG_MISSION_ID", job.execution_id.as_str()), ("AIWG_SESSION_HINT", job.task_id.as_str())];
        let base = self.args.workdir();
        let (dir, env) = spawn::prepare(&self.adapter, &self.worktrees, &base, &job.execution_id, None, &run_env).await;
        let run = self.run_agent(job, &dir.path, &env).await;
        self.worktrees.release(dir, run.as_ref().is_ok_and(Run::succeeded)).await;
        match run {
            Ok(run) => Outcome::Answered(answer::build(&run, &job.evidence_policy)),
            Err(unstartable) => Outcome::Unstartable(unstartable),
        }
    }

    /// Starts the agent in `dir`, waits for it, and checks its completion; or why it could not start.
    async fn run_agent(&self, job: &Job, dir: &std::path::Path, env: &[(String, String)]) -> Result<Run, String> {
        let argv = (self.adapter.argv)(&job.allowlist, &job.objective);
        let began = tokio::time::Instant::now();
        let mut agent = match spawn::start(self.adapter.binary, &argv, env, dir, self.args.kill_grace()).await {
            Ok(agent) => agent,
            Err(e) => return Err(format!("cannot start {}: {e}", self.adapter.binary)),
        };
        self.agents.started(&job.execution_id, agent.pgid).await;
        if !self.runs.started(&job.execution_id, agent.pgid) {
            spawn::terminate_group(agent.pgid, self.args.kill_grace()).await;
        }
        let child = &mut agent.child;
        // No one answers the agent's questions here: its stdin is closed, so a question reads EOF.
        drop(child.stdin.take());
        let (stdout, stderr) = tokio::join!(
            answer::read_tail(child.stdout.take(), ANSWER_BYTES),
            answer::read_tail(child.stderr.take(), EVIDENCE_BYTES)
        );
        let exit = Exit::of(child.wait().await);
        self.agents.ended(&job.execution_id).await;
        let elapsed_ms = began.elapsed().as_millis();
        let completion = match (exit.succeeded(), &job.completion_check) {
            (true, Some(check)) => Some(spawn::check_completion(check, dir, env).await),
            _ => None,
        };
        let usage = Tally::of_output(self.adapter.usage, &stdout);
        Ok(Run { adapter: self.adapter.name, exit, elapsed_ms, stdout, stderr, completion, usage })
    }
}
