//! Driving a mission on HTTP runtimes, as a WattSwarm kernel runs a task (reference §3):
//!
//! 1. probe the runtime: `/health`, then `/capabilities` (each retried 5 times on any error); a profile
//!    it lacks stops the execution before any `/execute` (`profile_not_supported`);
//! 2. `mission.started` (once, by the first runtime to get there);
//! 3. `POST /execute` with the full `TaskContract`, an `execution_id` `exec-p-<uuid>`, the same value as
//!    `attempt_id`, stage `EXPLORE` (the ids of every execution are recorded before the first call, a
//!    `mission.progress {phase: "executing"}`, so that a drive after a restart of serve sends the same
//!    ones: the runtime joins its run instead of running it twice; `resume.rs`); the answer decoded
//!    strictly and held to the kernel's rules (size,
//!    inline evidence, digests); `output_ref` computed as the kernel does; `mission.progress`
//!    (`phase: "executed"`);
//! 4. `POST /verify` with the candidate, the output schema and the policy binding. A failed call becomes
//!    an inconclusive verdict (201 on a timeout, else 200), never a pass. An answer is held to every
//!    rule a kernel applies, the policy evaluated locally included (a "passed" the local evaluation
//!    fails is refused); `mission.progress` (`phase: "verified"`);
//! 5. the executions settle the mission (`domain::runtime_task::settle`): `mission.completed` with the
//!    output and the verdict, or `mission.failed` with the reason, the reason codes and every execution.
//!
//! A cross-check runs steps 1-4 on several runtimes at once. Every event is recorded as the mission's
//! owner (the first runtime), naming the runtime it is about. An abort drops the drive: the call in
//! flight is dropped with it, which closes its connection. A runtime whose call failed in transport is
//! as good as one that failed its probe: it is not routed to until the prober finds it back.

use std::sync::Arc;

use futures_util::future::join_all;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::report::{last_event, verifier_result, LastEvent, Run};
use super::resume::{now_ms, Plan, Planned};
use super::usage::Executions;
use super::{Endpoint, Inflight, Runtimes};
use crate::runtime_client::{CallError, RuntimeClient};
use crate::services::ledger::Verdict;
use aiwg_contract::{DispatchPayload, EventType};
use aiwg_domain::runtime_task::{agreement, settle, status_word, Execution, Settlement, Task};
use aiwg_domain::usage::Reported;
use aiwg_domain::{MissionState, ServeEvent};
use aiwg_wattswarm::checks::{check_execute_answer, check_verify_answer, output_ref};
use aiwg_wattswarm::hash::inconclusive_hash;
use aiwg_wattswarm::policy::evaluate;
use aiwg_wattswarm::reason;
use aiwg_wattswarm::wire::{
    Candidate, ExecuteRequest, RuntimeCapabilities, TaskContract, VerificationStatus, VerifyRequest, VerifyResponse,
};

/// The `producer` of the `output_ref`s serve computes (a kernel names its node).
const PRODUCER: &str = "aiwg-serve";
/// Why an execution stopped before a verdict, with the kernel's `TaskError` code where it has one.
struct Stop {
    reason: &'static str,
    error: String,
    code: Option<u16>,
}

impl Stop {
    fn new(reason: &'static str, error: impl Into<String>) -> Stop {
        Stop { reason, error: error.into(), code: None }
    }

    /// A failed call: `runtime_timeout` (300), `runtime_refused` (a status; 0), `runtime_invalid_answer`
    /// (301) or `runtime_unreachable` (0).
    fn call(e: CallError) -> Stop {
        let (reason, code) = match &e {
            CallError::Transport { timeout: true, .. } => ("runtime_timeout", reason::TASK_TIMEOUT),
            CallError::Transport { .. } => ("runtime_unreachable", reason::UNKNOWN),
            CallError::Status { .. } => ("runtime_refused", reason::UNKNOWN),
            CallError::Decode(_) => ("runtime_invalid_answer", reason::INVALID_OUTPUT),
        };
        Stop { reason, error: e.to_string(), code: Some(code) }
    }
}

/// What a mission was handed to the runtimes with.
struct Job<'a> {
    mission_id: &'a str,
    /// The mission's owner, under whom every event is recorded.
    owner: &'a str,
    task: &'a Task,
    contract: &'a TaskContract,
    /// What its executions said they used, summed per model.
    usage: Executions,
}

impl Runtimes {
    /// Drives a recorded mission (assigned to `runtimes[0]`) in the background and returns at once.
    /// `runtimes` are routing's candidates in preference order; a cross-check runs on the first
    /// `executions` of them.
    pub(crate) fn take(self: &Arc<Self>, mission_id: &str, body: &Value, runtimes: Vec<String>) {
        self.drive(mission_id, body, runtimes, None);
    }

    /// Drives a mission on the plan recorded for it before (`recorded`: its executions, owner first,
    /// with their `execution_id`s), or, with none, on the first of `runtimes` it needs.
    pub(super) fn drive(
        self: &Arc<Self>,
        mission_id: &str,
        body: &Value,
        runtimes: Vec<String>,
        recorded: Option<Plan>,
    ) {
        let task = serde_json::from_value::<DispatchPayload>(body.clone())
            .map_err(|e| e.to_string())
            .and_then(|payload| Task::of(&payload, body));
        let chosen: Vec<String> = match (&task, &recorded) {
            (_, Some(plan)) => plan.executions.iter().map(|p| p.executor_id.clone()).collect(),
            (Ok(t), None) => runtimes.iter().take(t.executions).cloned().collect(),
            (Err(_), None) => runtimes[..1].to_vec(),
        };
        let (cancel, mut cancelled) = watch::channel(false);
        let inflight = Inflight { runtimes: chosen.clone(), cancel };
        self.inflight.lock().expect("inflight lock").insert(mission_id.to_owned(), inflight);
        let this = self.clone();
        let mission_id = mission_id.to_owned();
        // A trace per runtime mission (`otel.endpoint`): each call to a runtime is a child span.
        let span = tracing::debug_span!("runtime.mission", mission_id = %mission_id);
        let drive = async move {
            tokio::select! {
                _ = cancelled.wait_for(|c| *c) => {}
                _ = this.run(&mission_id, task, &chosen, recorded) => {}
            }
            this.inflight.lock().expect("inflight lock").remove(&mission_id);
        };
        tokio::spawn(tracing::Instrument::instrument(drive, span));
    }

    async fn run(
        &self,
        mission_id: &str,
        task: std::result::Result<Task, String>,
        runtimes: &[String],
        recorded: Option<Plan>,
    ) {
        let owner = &runtimes[0];
        let task = match task {
            Ok(task) => task,
            Err(error) => {
                let settlement = Settlement::Failed { reason: "invalid_task", error };
                return self.conclude(mission_id, owner, settlement, Vec::new()).await;
            }
        };
        let plan = match recorded {
            Some(plan) => plan,
            None => self.plan(mission_id, owner, runtimes).await,
        };
        let contract = task.contract(mission_id, plan.contract_ms);
        let job = Job { mission_id, owner, task: &task, contract: &contract, usage: Executions::default() };
        let runs = join_all(plan.executions.iter().map(|p| self.execution(&job, p))).await;
        let executions: Vec<Execution> = runs.iter().map(|r| r.execution.clone()).collect();
        let settlement = if runtimes.len() < task.executions {
            Settlement::Failed {
                reason: "crosscheck_short_of_runtimes",
                error: format!(
                    "the cross-check asks for {} runtimes; {} could be given it",
                    task.executions,
                    runtimes.len()
                ),
            }
        } else {
            settle(&executions, task.quorum)
        };
        self.conclude(mission_id, owner, settlement, runs).await;
    }

    /// One execution on a runtime; reports and texts name it by its name.
    async fn execution(&self, job: &Job<'_>, planned: &Planned) -> Run {
        let id = planned.executor_id.as_str();
        let view = self.registry.runtime(id);
        let runtime = view.as_ref().map_or(id, |v| v.name.as_str());
        let mut report = json!({ "runtime": runtime, "executor_id": id, "execution_id": planned.execution_id });
        let outcome = match &view {
            Some(v) => self.execute_and_verify(job, &v.runtime.base_url, runtime, &mut report).await,
            None => Err(Stop::new("runtime_removed", "the runtime was removed")),
        };
        match outcome {
            Ok(execution) => Run { execution, report },
            Err(stop) => {
                report["reason"] = json!(stop.reason);
                report["error"] = json!(stop.error);
                if let Some(code) = stop.code {
                    report["reason_code"] = json!(code);
                }
                tracing::warn!(mission_id = job.mission_id, runtime, reason = stop.reason, error = %stop.error,
                               "runtime execution stopped");
                Run {
                    execution: Execution::Stopped {
                        runtime: runtime.to_owned(),
                        reason: stop.reason,
                        error: stop.error,
                    },
                    report,
                }
            }
        }
    }

    async fn execute_and_verify(
        &self,
        job: &Job<'_>,
        base: &str,
        runtime: &str,
        report: &mut Value,
    ) -> std::result::Result<Execution, Stop> {
        let caps = self.ready(base, job.task, runtime).await?;
        let started = json!({"state": "running", "agent_runtime": format!("{}/{}", caps.provider_family, caps.model_id),
                             "runtime": runtime});
        let assigned = |s| s == MissionState::Assigned;
        self.record(job, EventType::MissionStarted, started, MissionState::Running, assigned, None).await;
        let candidate = self.execute(job, base, runtime, &caps.model_id, report).await?;
        self.keep_execution(job.mission_id, runtime, &candidate).await;
        let (verdict, status) = self.verify(job, base, &candidate, report).await?;
        self.keep_verdict(job.mission_id, runtime, &verdict).await;
        let digest = candidate.output_ref.digest.clone();
        let agreement = agreement(&candidate.output, &job.task.agree_on, &digest);
        let summary = format!(
            "{runtime}: verdict {} (score {}, reason codes {:?}, {})",
            status_word(status),
            verdict.score,
            verdict.reason_codes,
            job.task.binding.policy_id
        );
        let data = json!({"phase": "verified", "summary": summary, "runtime": runtime,
                          "verifier_result": report["verifier_result"].clone()});
        self.progress(job, data).await;
        Ok(Execution::Judged {
            runtime: runtime.to_owned(),
            digest,
            agreement,
            status,
            reason_codes: verdict.reason_codes,
        })
    }

    /// Step 1: the runtime answers, and has the profile.
    async fn ready(&self, base: &str, task: &Task, runtime: &str) -> std::result::Result<RuntimeCapabilities, Stop> {
        let t = self.timeout(task.timeout_ms);
        let health = RuntimeClient::probe(|| self.client.health(base, t)).await;
        self.count(Endpoint::Health, &health);
        if health.is_err() {
            self.unreachable(runtime, "/health").await;
        }
        health.map_err(|e| Stop { reason: "runtime_unreachable", ..Stop::call(e) })?;
        let caps = RuntimeClient::probe(|| self.client.capabilities(base, t)).await;
        self.count(Endpoint::Capabilities, &caps);
        let caps = caps.map_err(|e| Stop { reason: "runtime_unreachable", ..Stop::call(e) })?;
        if !caps.profiles.contains(&task.profile) {
            let error = format!("profile '{}' not supported by executor '{runtime}'", task.profile);
            return Err(Stop::new("profile_not_supported", error));
        }
        Ok(caps)
    }

    /// A runtime that did not answer a mission's call (after the kernel's retries) is as good as one
    /// that failed its probe: no more missions go there until the prober finds it back (it would have
    /// taken every mission until its next probe).
    async fn unreachable(&self, runtime: &str, call: &str) {
        let id = self.registry.runtime_named(runtime).map(|v| v.id).unwrap_or_default();
        if let Ok(true) = self.registry.runtime_probed(&id, false, None).await {
            tracing::warn!(runtime, call, "runtime unhealthy: it did not answer a mission's call");
        }
    }

    /// Step 3: `/execute`, the answer held to the kernel's rules, the candidate as the kernel builds it.
    async fn execute(
        &self,
        job: &Job<'_>,
        base: &str,
        runtime: &str,
        model_id: &str,
        report: &mut Value,
    ) -> std::result::Result<Candidate, Stop> {
        let execution_id = report["execution_id"].as_str().unwrap_or_default().to_owned();
        let request = ExecuteRequest {
            task_id: job.mission_id.to_owned(),
            execution_id: execution_id.clone(),
            task_type: job.task.task_type.clone(),
            inputs: job.task.inputs.clone(),
            profile: job.task.profile.clone(),
            task_contract: job.contract.clone(),
            stage: "EXPLORE".into(),
            attempt_id: execution_id.clone(),
            seed_bundle: None,
        };
        let answer = self.client.execute(base, &request, self.timeout(job.task.timeout_ms)).await;
        self.count(Endpoint::Execute, &answer);
        if let Err(CallError::Transport { .. }) = &answer {
            self.unreachable(runtime, "/execute").await;
        }
        let answer = answer.map_err(Stop::call)?;
        check_execute_answer(&answer, &job.contract.evidence_policy).map_err(|e| Stop {
            code: Some(reason::INVALID_OUTPUT),
            ..Stop::new("invalid_output", format!("runtime /execute answer refused: {e}"))
        })?;
        let output_ref = output_ref(&answer.candidate_output, PRODUCER, now_ms());
        report["output_ref"] = json!(output_ref);
        report["candidate_output"] = answer.candidate_output.clone();
        report["evidence"] = json!({"inline": answer.evidence_inline.len(), "refs": answer.evidence_refs});
        let summary = format!("{runtime}: candidate {} ({} bytes)", output_ref.digest, output_ref.size_bytes);
        let mut data = json!({"phase": "executed", "summary": summary, "runtime": runtime, "execution_id": execution_id,
                          "output_ref": output_ref});
        // What it used, counted as an executor's report is (the model's total over the executions).
        let spent = answer.usage.as_ref().and_then(|u| job.usage.add(u, model_id));
        if let Some((_, usage)) = &spent {
            data["usage"] = usage.clone();
        }
        let running = |s| s == MissionState::Running;
        self.record(job, EventType::MissionProgress, data, MissionState::Running, running, spent.map(|s| s.0)).await;
        Ok(Candidate {
            candidate_id: format!("cand-{execution_id}"),
            execution_id,
            output_ref,
            output: answer.candidate_output,
            evidence_inline: answer.evidence_inline,
            evidence_refs: answer.evidence_refs,
        })
    }

    /// Step 4: the verdict, or an inconclusive one when `/verify` failed (its provider and model read
    /// from a fresh `/capabilities`, `unknown` if that fails too, as a kernel does); `Err` when the
    /// runtime's verdict breaks a rule.
    async fn verify(
        &self,
        job: &Job<'_>,
        base: &str,
        candidate: &Candidate,
        report: &mut Value,
    ) -> std::result::Result<(VerifyResponse, VerificationStatus), Stop> {
        let task = job.task;
        let request = VerifyRequest {
            candidate: candidate.clone(),
            output_schema: task.output_schema.clone(),
            policy: task.binding.clone(),
        };
        let answer = self.client.verify(base, &request, self.timeout(task.timeout_ms)).await;
        self.count(Endpoint::Verify, &answer);
        let local = evaluate(task.policy, &candidate.output, &task.output_schema, &task.binding.policy_params);
        report["local_evaluation"] =
            json!({"passed": local.passed, "score": local.score, "reason_codes": local.reason_codes});
        let (verdict, status) = match answer {
            Ok(verdict) => {
                // A refused verdict is kept as evidence, apart: its codes are not the mission's.
                let kept = verifier_result(&verdict, &task.binding);
                let status = match check_verify_answer(&verdict, task.policy, &local) {
                    Ok(status) => status,
                    Err(e) => {
                        report["refused_verifier_result"] = kept;
                        return Err(Stop {
                            code: Some(reason::INVALID_OUTPUT),
                            ..Stop::new("verifier_rejected", format!("runtime /verify answer refused: {e}"))
                        });
                    }
                };
                report["verifier_result"] = kept;
                (verdict, status)
            }
            Err(e) => {
                report["verify_error"] = json!(e.to_string());
                let caps = self.client.capabilities(base, self.timeout(task.timeout_ms)).await;
                self.count(Endpoint::Capabilities, &caps);
                let caps = caps.unwrap_or_else(|_| RuntimeCapabilities {
                    task_types: Vec::new(),
                    profiles: Vec::new(),
                    provider_family: "unknown".into(),
                    model_id: "unknown".into(),
                });
                let verdict = inconclusive(job.mission_id, candidate, &caps, e.is_timeout());
                report["verifier_result"] = verifier_result(&verdict, &task.binding);
                (verdict, VerificationStatus::Inconclusive)
            }
        };
        Ok((verdict, status))
    }

    /// Step 5: the mission's last event.
    pub(super) async fn conclude(&self, mission_id: &str, owner: &str, settlement: Settlement, runs: Vec<Run>) {
        let LastEvent { event, to, data } = last_event(settlement, &runs);
        let job_owner = owner.to_owned();
        let said = ServeEvent::Runtime { event, data };
        let recorded = self
            .ledger
            .transition_as_serve(&job_owner, mission_id, |live| {
                (!live.state().is_terminal()).then(|| Verdict::new(said, to))
            })
            .await;
        if recorded.is_none() {
            tracing::info!(mission_id, "runtime mission already ended; its result was not recorded");
        }
    }

    async fn progress(&self, job: &Job<'_>, data: Value) {
        let running = |s| s == MissionState::Running;
        self.record(job, EventType::MissionProgress, data, MissionState::Running, running, None).await;
    }

    /// Records an event as the mission's owner when the mission is in a state `when` accepts, with the
    /// usage it reports (`spent`) kept.
    async fn record(
        &self,
        job: &Job<'_>,
        event: EventType,
        data: Value,
        to: MissionState,
        when: impl FnOnce(MissionState) -> bool,
        spent: Option<Reported>,
    ) {
        let said = ServeEvent::Runtime { event, data };
        let verdict = |said| match spent {
            Some(report) => Verdict::new(said, to).spending(report, self.pricing.clone()),
            None => Verdict::new(said, to),
        };
        let moved = self
            .ledger
            .transition_as_serve(job.owner, job.mission_id, |live| when(live.state()).then(|| verdict(said)))
            .await;
        if let Some(added) = moved.and_then(|m| m.added) {
            self.metrics.usage.add(&added);
        }
    }
}

/// The verdict a kernel synthesizes when `/verify` failed: inconclusive, 201 on a timeout, else 200.
fn inconclusive(task_id: &str, candidate: &Candidate, caps: &RuntimeCapabilities, timeout: bool) -> VerifyResponse {
    let code = if timeout { reason::EVIDENCE_TIMEOUT } else { reason::EVIDENCE_UNREACHABLE };
    let verify_execution_id = format!("exec-v-{}", uuid::Uuid::new_v4());
    VerifyResponse {
        verification_status: Some(VerificationStatus::Inconclusive),
        passed: false,
        score: 0.0,
        reason_codes: vec![code],
        verifier_result_hash: inconclusive_hash(task_id, &candidate.candidate_id, &verify_execution_id, code, now_ms()),
        provider_family: caps.provider_family.clone(),
        model_id: caps.model_id.clone(),
    }
}
