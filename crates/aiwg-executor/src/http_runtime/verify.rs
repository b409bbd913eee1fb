//! `POST /verify`: the contract's policy run on a candidate's output, answered as the reference runtime
//! answers (only `passed` or `failed`; the kernel infers nothing else from a policy it re-runs itself).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{text, HttpRuntime};
use aiwg_wattswarm::hash::VerifierResultFields;
use aiwg_wattswarm::policy::{evaluate, require_binding, BindingError};
use aiwg_wattswarm::wire::{RuntimeCapabilities, VerificationStatus, VerifyRequest, VerifyResponse};

pub(super) async fn verify(State(runtime): State<Arc<HttpRuntime>>, Json(request): Json<VerifyRequest>) -> Response {
    match verdict(&request, &runtime.capabilities) {
        Ok(verdict) => Json(verdict).into_response(),
        Err(e) => text(StatusCode::BAD_REQUEST, format!("policy binding invalid: {e}")),
    }
}

/// The verdict on a candidate, signed with this runtime's provider family and model id; the binding's
/// refusal when the policy is not one this runtime knows under that exact hash.
fn verdict(request: &VerifyRequest, capabilities: &RuntimeCapabilities) -> Result<VerifyResponse, BindingError> {
    let binding = &request.policy;
    let policy = require_binding(binding)?;
    let evaluation = evaluate(policy, &request.candidate.output, &request.output_schema, &binding.policy_params);
    let hash = VerifierResultFields {
        candidate_id: &request.candidate.candidate_id,
        execution_id: &request.candidate.execution_id,
        model_id: &capabilities.model_id,
        passed: evaluation.passed,
        policy_hash: &binding.policy_hash,
        provider_family: &capabilities.provider_family,
        reason_codes: &evaluation.reason_codes,
        score: evaluation.score,
    }
    .hash();
    let status = if evaluation.passed { VerificationStatus::Passed } else { VerificationStatus::Failed };
    Ok(VerifyResponse {
        verification_status: Some(status),
        passed: evaluation.passed,
        score: evaluation.score,
        reason_codes: evaluation.reason_codes,
        verifier_result_hash: hash,
        provider_family: capabilities.provider_family.clone(),
        model_id: capabilities.model_id.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aiwg_wattswarm::checks::{check_verify_answer, output_ref};
    use aiwg_wattswarm::policy::PolicyId;
    use aiwg_wattswarm::task::default_output_schema;
    use aiwg_wattswarm::wire::Candidate;
    use serde_json::{json, Value};

    fn capabilities() -> RuntimeCapabilities {
        RuntimeCapabilities {
            task_types: vec!["swarm".into()],
            profiles: vec!["default".into()],
            provider_family: "aiwg-serve".into(),
            model_id: "shell".into(),
        }
    }

    fn request(policy: PolicyId, params: Value, output: Value) -> VerifyRequest {
        let candidate = Candidate {
            candidate_id: "cand-exec-p-1".into(),
            execution_id: "exec-p-1".into(),
            output_ref: output_ref(&output, "node", 1),
            output,
            evidence_inline: Vec::new(),
            evidence_refs: Vec::new(),
        };
        VerifyRequest { candidate, output_schema: default_output_schema(), policy: policy.binding(params) }
    }

    #[test]
    fn every_policy_verdict_passes_the_kernels_checks() {
        let good = json!({"answer": "hello", "confidence": 1.0, "check_summary": "shell exited 0 in 3 ms"});
        for (policy, params, output, passed) in [
            (PolicyId::SchemaOnly, json!({}), good.clone(), true),
            (PolicyId::SchemaOnly, json!({}), json!({"confidence": 1.0}), false),
            (PolicyId::SchemaThresholds, json!({"min_confidence": 0.5}), good.clone(), true),
            (PolicyId::SchemaThresholds, json!({"min_confidence": 0.5}), json!({"answer": "a"}), false),
            (PolicyId::Crosscheck, json!({}), good.clone(), true),
            (PolicyId::Crosscheck, json!({"min_score": 0.95}), good.clone(), false),
        ] {
            let request = request(policy, params.clone(), output.clone());
            let answer = verdict(&request, &capabilities()).unwrap();
            assert_eq!(answer.passed, passed, "{policy:?} {params} {output}");
            let local = evaluate(policy, &output, &default_output_schema(), &params);
            let status = check_verify_answer(&answer, policy, &local).unwrap();
            assert_eq!(status == VerificationStatus::Passed, passed);
        }
    }

    #[test]
    fn the_hash_covers_this_runtimes_identity_and_the_verdict() {
        let request = request(PolicyId::SchemaOnly, json!({}), json!({"answer": "a"}));
        let answer = verdict(&request, &capabilities()).unwrap();
        let expected = VerifierResultFields {
            candidate_id: "cand-exec-p-1",
            execution_id: "exec-p-1",
            model_id: "shell",
            passed: true,
            policy_hash: &PolicyId::SchemaOnly.hash(),
            provider_family: "aiwg-serve",
            reason_codes: &[100],
            score: 1.0,
        }
        .hash();
        assert_eq!((answer.reason_codes.as_slice(), answer.verifier_result_hash), (&[100u16][..], expected));
    }

    #[test]
    fn a_binding_that_is_not_the_built_in_one_is_refused() {
        let mut prefixed = request(PolicyId::SchemaOnly, json!({}), json!({"answer": "a"}));
        prefixed.policy.policy_hash = format!("sha256:{}", PolicyId::SchemaOnly.hash());
        assert_eq!(verdict(&prefixed, &capabilities()).unwrap_err(), BindingError::HashMismatch);
        let mut unknown = prefixed.clone();
        unknown.policy.policy_id = "vp.other.v1".into();
        assert_eq!(
            verdict(&unknown, &capabilities()).unwrap_err().to_string(),
            "policy vp.other.v1 missing in registry"
        );
    }
}
