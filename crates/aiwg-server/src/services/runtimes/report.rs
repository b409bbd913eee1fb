//! What a runtime mission's data keeps of its executions: each one's report and verdict, and the last
//! event the settlement makes of them.

use serde_json::{json, Value};

use aiwg_contract::EventType;
use aiwg_domain::runtime_task::{status_word, Execution, Settlement};
use aiwg_domain::MissionState;
use aiwg_wattswarm::wire::{PolicyBinding, VerifyResponse};

/// One execution: what settles the mission, and what its data keeps of it.
pub(super) struct Run {
    pub(super) execution: Execution,
    pub(super) report: Value,
}

/// The mission's last event: `mission.completed` or `mission.failed`, the state it ends in, its data.
pub(super) struct LastEvent {
    pub(super) event: EventType,
    pub(super) to: MissionState,
    pub(super) data: Value,
}

/// The last event of a settled mission: the agreeing output and its verdict, or the reason it failed
/// with every reason code; each execution's report in either.
pub(super) fn last_event(settlement: Settlement, runs: &[Run]) -> LastEvent {
    let reports: Vec<Value> = runs.iter().map(|r| r.report.clone()).collect();
    match settlement {
        Settlement::Completed { agreeing } => {
            let first = &runs[agreeing[0]].report;
            let output = first["candidate_output"].clone();
            let summary = output["answer"].as_str().map_or_else(
                || format!("verified output {}", first["output_ref"]["digest"].as_str().unwrap_or_default()),
                str::to_owned,
            );
            let agreeing: Vec<Value> = agreeing.iter().map(|i| runs[*i].report["runtime"].clone()).collect();
            // The policy decides done or failed, as a kernel's does; the agent's own exit code, when its
            // output has one, is the mission's.
            let exit_code = output_exit_code(&output).unwrap_or(0);
            let data = json!({"state": "done", "exit_code": exit_code, "summary": summary, "output": output,
                              "output_ref": first["output_ref"], "verifier_result": first["verifier_result"],
                              "agreeing": agreeing, "executions": reports});
            LastEvent { event: EventType::MissionCompleted, to: MissionState::Done, data }
        }
        Settlement::Failed { reason, error } => {
            let codes: Vec<Value> = reports
                .iter()
                .flat_map(|r| {
                    let verdict = r["verifier_result"]["reason_codes"].as_array().cloned().unwrap_or_default();
                    verdict.into_iter().chain(r.get("reason_code").cloned())
                })
                .collect();
            let mut data = json!({"state": "failed", "reason": reason, "error": error, "reason_codes": codes,
                                  "executions": reports});
            if let Some(code) = reports.iter().find_map(|r| output_exit_code(&r["candidate_output"])) {
                data["exit_code"] = json!(code);
            }
            LastEvent { event: EventType::MissionFailed, to: MissionState::Failed, data }
        }
    }
}

/// The verdict as the mission's data keeps it: the runtime's answer and the binding it was judged under.
pub(super) fn verifier_result(v: &VerifyResponse, binding: &PolicyBinding) -> Value {
    json!({
        "verification_status": v.verification_status.map(status_word),
        "passed": v.passed, "score": v.score, "reason_codes": v.reason_codes,
        "verifier_result_hash": v.verifier_result_hash,
        "provider_family": v.provider_family, "model_id": v.model_id,
        "policy_id": binding.policy_id, "policy_version": binding.policy_version, "policy_hash": binding.policy_hash,
    })
}

/// The agent's exit code in a runtime's output (`output.exit_code`), when it reports one.
fn output_exit_code(output: &Value) -> Option<i64> {
    output.get("exit_code").and_then(Value::as_i64)
}
