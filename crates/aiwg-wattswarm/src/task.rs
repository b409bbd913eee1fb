//! The kernel's default task contract (§1.7, `sample_contract`): what `task run-real` and the run queue
//! send when no contract is given. Serve builds the same one so that an executor sees from serve what
//! it would see from a kernel, and so that the contract passes the kernel's task-creation checks.

use serde_json::{json, Value};

use super::wire::{
    Acceptance, Assignment, BadPenalty, Budget, BudgetMode, ClaimPolicy, DiminishingReturns, EvidencePolicy,
    ExploreAssignment, Feedback, FinalizeAssignment, MaxConcurrency, PolicyBinding, Settlement, TaskContract, TaskMode,
    VerifyAssignment, VotePolicy,
};

/// The inline evidence mimes of the default contract; the kernel requires all four in the allowlist.
pub const DEFAULT_INLINE_MIMES: [&str; 4] = ["application/json", "text/plain", "text/markdown", "text/csv"];

/// The protocol version the kernel writes.
pub const PROTOCOL_VERSION: &str = "v0.1";

/// How long after its creation the default contract expires.
pub const EXPIRY_AFTER_MS: u64 = 120_000;

/// The kernel's sample output schema: a required string `answer`, an optional number `confidence`
/// and an optional string `check_summary` (which `vp.crosscheck.v1` requires to be non-blank).
pub fn default_output_schema() -> Value {
    json!({"type": "object", "required": ["answer"], "properties": {
        "answer": {"type": "string"}, "confidence": {"type": "number"}, "check_summary": {"type": "string"}}})
}

/// The kernel's default contract for a task, with the caller's inputs, schema and policy.
pub fn sample_contract(
    task_id: &str,
    inputs: Value,
    output_schema: Value,
    verifier_policy: PolicyBinding,
    now_ms: u64,
) -> TaskContract {
    TaskContract {
        protocol_version: PROTOCOL_VERSION.to_owned(),
        task_id: task_id.to_owned(),
        task_type: "swarm".to_owned(),
        inputs,
        output_schema,
        budget: default_budget(),
        assignment: Assignment {
            mode: "CLAIM".to_owned(),
            claim: ClaimPolicy { lease_ms: 5_000, max_concurrency: MaxConcurrency { propose: 1, verify: 1 } },
            explore: ExploreAssignment::default(),
            verify: VerifyAssignment::default(),
            finalize: FinalizeAssignment::default(),
        },
        acceptance: default_acceptance(verifier_policy),
        task_mode: TaskMode::OneShot,
        expiry_ms: now_ms.saturating_add(EXPIRY_AFTER_MS),
        evidence_policy: EvidencePolicy {
            max_inline_evidence_bytes: 65_536,
            max_inline_media_bytes: 0,
            inline_mime_allowlist: DEFAULT_INLINE_MIMES.map(str::to_owned).to_vec(),
            max_snippet_bytes: 8_192,
            max_snippet_tokens: 2_048,
        },
    }
}

// The stage buckets (350 + 450 + 200) fill the 1000 units exactly: the kernel requires each > 0 and
// their sum ≤ cost_units.
fn default_budget() -> Budget {
    Budget {
        time_ms: 30_000,
        max_steps: 10,
        cost_units: 1_000,
        mode: BudgetMode::Lifetime,
        explore_cost_units: 350,
        verify_cost_units: 450,
        finalize_cost_units: 200,
        reuse_verify_time_ms: 20_000,
        reuse_verify_cost_units: 200,
        reuse_max_attempts: 1,
    }
}

fn default_acceptance(verifier_policy: PolicyBinding) -> Acceptance {
    Acceptance {
        quorum_threshold: 1,
        verifier_policy,
        vote: VotePolicy { commit_reveal: true, reveal_deadline_ms: 10_000 },
        settlement: Settlement {
            window_ms: 86_400_000,
            implicit_weight: 0.1,
            implicit_diminishing_returns: DiminishingReturns { w: 10, k: 50 },
            bad_penalty: BadPenalty { p: 3 },
            feedback: Feedback { mode: "CAPABILITY".to_owned(), authority_pubkey: "ed25519:placeholder".to_owned() },
        },
        da_quorum_threshold: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::{require_binding, PolicyId};
    use super::*;

    fn contract() -> TaskContract {
        let binding = PolicyId::SchemaOnly.binding(json!({}));
        sample_contract("task-1", json!({"prompt": "hello"}), default_output_schema(), binding, 1_000)
    }

    #[test]
    fn the_default_contract_serializes_as_the_kernels() {
        let expected = json!({
            "protocol_version": "v0.1", "task_id": "task-1", "task_type": "swarm",
            "inputs": {"prompt": "hello"},
            "output_schema": {"type": "object", "required": ["answer"], "properties": {
                "answer": {"type": "string"}, "confidence": {"type": "number"}, "check_summary": {"type": "string"}}},
            "budget": {"time_ms": 30000, "max_steps": 10, "cost_units": 1000, "mode": "LIFETIME",
                "explore_cost_units": 350, "verify_cost_units": 450, "finalize_cost_units": 200,
                "reuse_verify_time_ms": 20000, "reuse_verify_cost_units": 200, "reuse_max_attempts": 1},
            "assignment": {"mode": "CLAIM", "claim": {"lease_ms": 5000, "max_concurrency": {"propose": 1, "verify": 1}},
                "explore": {"max_proposers": 1, "topk": 3, "stop": {"no_new_evidence_rounds": 3}},
                "verify": {"max_verifiers": 1}, "finalize": {"max_finalizers": 1}},
            "acceptance": {"quorum_threshold": 1,
                "verifier_policy": {"policy_id": "vp.schema_only.v1", "policy_version": "1",
                    "policy_hash": "a52d250d216f425973eb5a13c392d4dbc172357181b683e86caa4a5c64db94a7", "policy_params": {}},
                "vote": {"commit_reveal": true, "reveal_deadline_ms": 10000},
                "settlement": {"window_ms": 86400000, "implicit_weight": 0.1,
                    "implicit_diminishing_returns": {"W": 10, "K": 50}, "bad_penalty": {"P": 3},
                    "feedback": {"mode": "CAPABILITY", "authority_pubkey": "ed25519:placeholder"}},
                "da_quorum_threshold": 1},
            "task_mode": "ONE_SHOT", "expiry_ms": 121000,
            "evidence_policy": {"max_inline_evidence_bytes": 65536, "max_inline_media_bytes": 0,
                "inline_mime_allowlist": ["application/json", "text/plain", "text/markdown", "text/csv"],
                "max_snippet_bytes": 8192, "max_snippet_tokens": 2048}
        });
        assert_eq!(serde_json::to_value(contract()).unwrap(), expected);
    }

    #[test]
    fn the_default_contract_keeps_the_kernels_field_order() {
        let text = serde_json::to_string(&contract()).unwrap();
        let keys = [
            "protocol_version",
            "task_id",
            "task_type",
            "inputs",
            "output_schema",
            "budget",
            "assignment",
            "acceptance",
            "task_mode",
            "expiry_ms",
            "evidence_policy",
        ];
        let positions: Vec<usize> = keys.iter().map(|k| text.find(&format!("\"{k}\":")).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");
    }

    // The checks the kernel applies when it creates a task (§1.7), so a contract serve builds is one a
    // kernel would accept.
    #[test]
    fn the_default_contract_passes_the_kernels_creation_checks() {
        let c = contract();
        assert_eq!(c.assignment.mode, "CLAIM");
        assert!(c.acceptance.vote.commit_reveal);
        assert_eq!(c.evidence_policy.max_inline_evidence_bytes, 65_536);
        assert_eq!(c.evidence_policy.max_inline_media_bytes, 0);
        for mime in DEFAULT_INLINE_MIMES {
            assert!(c.evidence_policy.inline_mime_allowlist.iter().any(|m| m == mime), "{mime}");
        }
        let b = &c.budget;
        assert!(b.explore_cost_units > 0 && b.verify_cost_units > 0 && b.finalize_cost_units > 0);
        assert!(b.explore_cost_units + b.verify_cost_units + b.finalize_cost_units <= b.cost_units);
        assert_eq!(c.acceptance.settlement.feedback.mode, "CAPABILITY");
        assert_eq!(require_binding(&c.acceptance.verifier_policy), Ok(PolicyId::SchemaOnly));
    }

    #[test]
    fn the_contract_carries_the_given_policy_and_expires_two_minutes_on() {
        let binding = PolicyId::Crosscheck.binding(json!({"min_score": 0.5}));
        let c = sample_contract("t", json!(null), json!({}), binding.clone(), u64::MAX - 5);
        assert_eq!(c.acceptance.verifier_policy, binding);
        assert_eq!(c.expiry_ms, u64::MAX, "saturates instead of overflowing");
        assert_eq!(contract().expiry_ms, 1_000 + EXPIRY_AFTER_MS);
    }
}
