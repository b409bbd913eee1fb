//! The kernel's wire types, field for field (protocol §1). Fields are declared in the kernel's order
//! because serde writes struct fields in declaration order and some of these bytes are hashed
//! (the kernel's candidate hash, the policy spec). No type denies unknown fields: the kernel accepts extra fields
//! in both directions, so an executor that adds one must not be refused here either. A `Vec` with no
//! default is required (a missing array is a decode error in the kernel too); an `Option` reads a
//! missing key or `null` as `None`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `GET /capabilities`. All four fields are required; the kernel checks only `profiles`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuntimeCapabilities {
    pub task_types: Vec<String>,
    pub profiles: Vec<String>,
    pub provider_family: String,
    pub model_id: String,
}

/// A reference to an artifact (candidate output, evidence). `digest` is `sha256:<hex>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArtifactRef {
    pub uri: String,
    pub digest: String,
    pub size_bytes: u64,
    pub mime: String,
    /// Milliseconds since the epoch.
    pub created_at: u64,
    pub producer: String,
}

/// Evidence carried in the answer itself; the kernel bounds and screens it (§1.4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InlineEvidence {
    pub mime: String,
    pub content: String,
}

/// `POST /execute`, kernel → executor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecuteRequest {
    pub task_id: String,
    /// `exec-p-<uuid>`; the kernel may send the same one up to 5 times (transport retries), so it is
    /// the idempotency key.
    pub execution_id: String,
    pub task_type: String,
    /// Exactly `task_contract.inputs`.
    pub inputs: Value,
    pub profile: String,
    pub task_contract: TaskContract,
    /// `EXPLORE`, `DIVERGE_MODE` or `DECIDE` (not the seed document's lowercase stages).
    pub stage: String,
    /// Always equal to `execution_id`.
    pub attempt_id: String,
    /// Written as `null` when absent: the kernel always sends the key.
    pub seed_bundle: Option<Value>,
}

/// `POST /execute`, executor → kernel. All three keys are required, the arrays may be empty.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecuteResponse {
    pub candidate_output: Value,
    pub evidence_inline: Vec<InlineEvidence>,
    pub evidence_refs: Vec<ArtifactRef>,
    /// Our extension (a kernel ignores it): what the execution used, in the shape of the executor
    /// contract's `usage` (`input_tokens`, `output_tokens`, ..., `model`, `cost_usd`). Serve keeps it as
    /// the mission's usage; absent, nothing is reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
}

/// The candidate as the kernel stores it and sends it to `/verify`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub candidate_id: String,
    /// The proposer's execution id, not the verifier's.
    pub execution_id: String,
    pub output_ref: ArtifactRef,
    /// Optional on the wire: a missing key reads as `null`.
    #[serde(default)]
    pub output: Value,
    pub evidence_inline: Vec<InlineEvidence>,
    pub evidence_refs: Vec<ArtifactRef>,
}

/// Which policy verifies a task, pinned by hash (§5.1). `policy_params` is not hashed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyBinding {
    pub policy_id: String,
    pub policy_version: String,
    /// Bare lowercase hex; a `sha256:` prefix is refused.
    pub policy_hash: String,
    pub policy_params: Value,
}

/// `POST /verify`, kernel → executor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerifyRequest {
    pub candidate: Candidate,
    pub output_schema: Value,
    pub policy: PolicyBinding,
}

/// A verdict. Any other string is a decode error, as in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerificationStatus {
    Passed,
    Failed,
    Inconclusive,
}

/// `POST /verify`, executor → kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerifyResponse {
    /// Missing or `null`: the kernel infers it ([`super::checks::status_of`]).
    pub verification_status: Option<VerificationStatus>,
    pub passed: bool,
    /// A JSON integer (`1`) is accepted.
    pub score: f64,
    /// `u16` so that a code above 65535 is a decode error, as in the kernel.
    pub reason_codes: Vec<u16>,
    pub verifier_result_hash: String,
    pub provider_family: String,
    pub model_id: String,
}

/// What running a policy on an output gives (§4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub passed: bool,
    pub score: f64,
    pub reason_codes: Vec<u16>,
}

/// The task contract (§1.7). Fields marked (d) in the protocol have serde defaults, the rest are
/// required: the reference runtime parses the contract strictly, and so do we.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskContract {
    pub protocol_version: String,
    pub task_id: String,
    pub task_type: String,
    pub inputs: Value,
    pub output_schema: Value,
    pub budget: Budget,
    pub assignment: Assignment,
    pub acceptance: Acceptance,
    #[serde(default)]
    pub task_mode: TaskMode,
    pub expiry_ms: u64,
    pub evidence_policy: EvidencePolicy,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskMode {
    #[default]
    #[serde(rename = "ONE_SHOT")]
    OneShot,
    #[serde(rename = "CONTINUOUS")]
    Continuous,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum BudgetMode {
    #[default]
    #[serde(rename = "LIFETIME")]
    Lifetime,
    #[serde(rename = "EPOCH_RENEW")]
    EpochRenew,
}

/// Budget in ms, steps and cost units; the per-stage buckets are budget accounting, not `stage`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    pub time_ms: u64,
    pub max_steps: u32,
    pub cost_units: u64,
    #[serde(default)]
    pub mode: BudgetMode,
    #[serde(default)]
    pub explore_cost_units: u64,
    #[serde(default)]
    pub verify_cost_units: u64,
    #[serde(default)]
    pub finalize_cost_units: u64,
    pub reuse_verify_time_ms: u64,
    pub reuse_verify_cost_units: u64,
    pub reuse_max_attempts: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    /// `CLAIM` is the only mode the kernel accepts when it creates a task.
    pub mode: String,
    pub claim: ClaimPolicy,
    #[serde(default)]
    pub explore: ExploreAssignment,
    #[serde(default)]
    pub verify: VerifyAssignment,
    #[serde(default)]
    pub finalize: FinalizeAssignment,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimPolicy {
    pub lease_ms: u64,
    pub max_concurrency: MaxConcurrency,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MaxConcurrency {
    pub propose: u32,
    pub verify: u32,
}

// The protocol's defaults (1 proposer, top 3, 3 rounds), not zeros: `Default` is what a missing
// `explore` object means, so it must equal an empty `{}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExploreAssignment {
    #[serde(default = "one")]
    pub max_proposers: u32,
    #[serde(default = "three")]
    pub topk: u32,
    #[serde(default)]
    pub stop: ExploreStop,
}

impl Default for ExploreAssignment {
    fn default() -> Self {
        Self { max_proposers: one(), topk: three(), stop: ExploreStop::default() }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExploreStop {
    #[serde(default = "three")]
    pub no_new_evidence_rounds: u32,
}

impl Default for ExploreStop {
    fn default() -> Self {
        Self { no_new_evidence_rounds: three() }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerifyAssignment {
    #[serde(default = "one")]
    pub max_verifiers: u32,
}

impl Default for VerifyAssignment {
    fn default() -> Self {
        Self { max_verifiers: one() }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FinalizeAssignment {
    #[serde(default = "one")]
    pub max_finalizers: u32,
}

impl Default for FinalizeAssignment {
    fn default() -> Self {
        Self { max_finalizers: one() }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Acceptance {
    pub quorum_threshold: u32,
    pub verifier_policy: PolicyBinding,
    pub vote: VotePolicy,
    pub settlement: Settlement,
    #[serde(default = "one")]
    pub da_quorum_threshold: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VotePolicy {
    pub commit_reveal: bool,
    pub reveal_deadline_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settlement {
    pub window_ms: u64,
    pub implicit_weight: f64,
    pub implicit_diminishing_returns: DiminishingReturns,
    pub bad_penalty: BadPenalty,
    pub feedback: Feedback,
}

/// The wire keys are the single capitals `W` and `K`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiminishingReturns {
    #[serde(rename = "W")]
    pub w: u32,
    #[serde(rename = "K")]
    pub k: u32,
}

/// The wire key is `P`. Signed because the kernel reads it signed: a negative penalty it accepts
/// must not be a decode error here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BadPenalty {
    #[serde(rename = "P")]
    pub p: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Feedback {
    /// `CAPABILITY` is the only mode the kernel accepts when it creates a task.
    pub mode: String,
    pub authority_pubkey: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvidencePolicy {
    pub max_inline_evidence_bytes: u64,
    pub max_inline_media_bytes: u64,
    pub inline_mime_allowlist: Vec<String>,
    #[serde(default = "default_max_snippet_bytes")]
    pub max_snippet_bytes: u64,
    #[serde(default = "default_max_snippet_tokens")]
    pub max_snippet_tokens: u64,
}

fn one() -> u32 {
    1
}

fn three() -> u32 {
    3
}

fn default_max_snippet_bytes() -> u64 {
    8192
}

fn default_max_snippet_tokens() -> u64 {
    2048
}

#[cfg(test)]
mod tests {
    use super::super::policy::PolicyId;
    use super::super::task::{default_output_schema, sample_contract};
    use super::*;
    use serde_json::json;

    fn decode<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    fn verify_response() -> Value {
        json!({"verification_status": "passed", "passed": true, "score": 1.0, "reason_codes": [100],
            "verifier_result_hash": "0579c913", "provider_family": "swarm-runtime", "model_id": "swarm-model-v1"})
    }

    fn without(mut v: Value, key: &str) -> Value {
        v.as_object_mut().unwrap().remove(key);
        v
    }

    fn with(mut v: Value, key: &str, value: Value) -> Value {
        v[key] = value;
        v
    }

    #[test]
    fn capabilities_need_all_four_fields_and_ignore_extras() {
        let caps = json!({"task_types": ["swarm"], "profiles": ["default"], "provider_family": "p", "model_id": "m",
            "version": "2"});
        let decoded: RuntimeCapabilities = decode(caps.clone()).unwrap();
        assert_eq!(decoded.profiles, ["default"]);
        for key in ["task_types", "profiles", "provider_family", "model_id"] {
            let err = decode::<RuntimeCapabilities>(without(caps.clone(), key)).unwrap_err();
            assert!(err.contains("missing field"), "{key}: {err}");
        }
    }

    #[test]
    fn execute_response_needs_all_three_keys() {
        let full = json!({"candidate_output": {"answer": "a"}, "evidence_inline": [], "evidence_refs": [], "extra": 1});
        assert!(decode::<ExecuteResponse>(full.clone()).is_ok());
        assert!(decode::<ExecuteResponse>(with(full.clone(), "candidate_output", json!("bare"))).is_ok());
        for key in ["candidate_output", "evidence_inline", "evidence_refs"] {
            let err = decode::<ExecuteResponse>(without(full.clone(), key)).unwrap_err();
            assert!(err.contains(&format!("missing field `{key}`")), "{err}");
        }
    }

    #[test]
    fn artifact_refs_need_their_six_fields() {
        let r = json!({"uri": "u", "digest": "sha256:ab", "size_bytes": 94, "mime": "application/json",
            "created_at": 1_796_000_507_083_u64, "producer": "p"});
        assert_eq!(decode::<ArtifactRef>(r.clone()).unwrap().size_bytes, 94);
        for key in ["uri", "digest", "size_bytes", "mime", "created_at", "producer"] {
            assert!(decode::<ArtifactRef>(without(r.clone(), key)).is_err(), "{key}");
        }
        assert!(decode::<ArtifactRef>(with(r, "size_bytes", json!(-1))).is_err());
    }

    #[test]
    fn verify_response_decoding_rules() {
        let ok: VerifyResponse = decode(verify_response()).unwrap();
        assert_eq!(ok.verification_status, Some(VerificationStatus::Passed));
        let missing: VerifyResponse = decode(without(verify_response(), "verification_status")).unwrap();
        assert_eq!(missing.verification_status, None);
        let null: VerifyResponse = decode(with(verify_response(), "verification_status", json!(null))).unwrap();
        assert_eq!(null.verification_status, None);
        for status in ["inconclusive", "failed"] {
            assert!(decode::<VerifyResponse>(with(verify_response(), "verification_status", json!(status))).is_ok());
        }
        for bad in [json!("PASSED"), json!("ok"), json!(true)] {
            assert!(decode::<VerifyResponse>(with(verify_response(), "verification_status", bad)).is_err());
        }
        assert!(decode::<VerifyResponse>(with(verify_response(), "reason_codes", json!([65536]))).is_err());
        assert!(decode::<VerifyResponse>(with(verify_response(), "reason_codes", json!([65535]))).is_ok());
        assert!(decode::<VerifyResponse>(with(verify_response(), "reason_codes", json!([-1]))).is_err());
        assert_eq!(decode::<VerifyResponse>(with(verify_response(), "score", json!(1))).unwrap().score, 1.0);
        assert!(decode::<VerifyResponse>(with(verify_response(), "passed", json!("true"))).is_err());
        assert!(decode::<VerifyResponse>(with(verify_response(), "extra_field", json!({"x": 1}))).is_ok());
        for key in ["passed", "score", "reason_codes", "verifier_result_hash", "provider_family", "model_id"] {
            assert!(decode::<VerifyResponse>(without(verify_response(), key)).is_err(), "{key}");
        }
    }

    #[test]
    fn verify_response_serializes_in_wire_order() {
        let r: VerifyResponse = decode(verify_response()).unwrap();
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"verification_status":"passed","passed":true,"score":1.0,"reason_codes":[100],"#,
                r#""verifier_result_hash":"0579c913","provider_family":"swarm-runtime","model_id":"swarm-model-v1"}"#
            )
        );
        let none = VerifyResponse { verification_status: None, ..r };
        assert!(serde_json::to_string(&none).unwrap().starts_with(r#"{"verification_status":null,"#));
    }

    fn candidate_json() -> Value {
        json!({"candidate_id": "cand-exec-p-1", "execution_id": "exec-p-1",
            "output_ref": {"uri": "artifact://reference/sha256:ab", "digest": "sha256:ab", "size_bytes": 9,
                "mime": "application/json", "created_at": 7, "producer": "node"},
            "output": {"a": "b"}, "evidence_inline": [{"mime": "text/plain", "content": "trace:exec-p-1"}],
            "evidence_refs": []})
    }

    #[test]
    fn candidate_output_is_optional_and_reads_as_null() {
        let c: Candidate = decode(without(candidate_json(), "output")).unwrap();
        assert_eq!(c.output, Value::Null);
        let c: Candidate = decode(with(candidate_json(), "output", json!(null))).unwrap();
        assert_eq!(c.output, Value::Null);
        let c: Candidate = decode(candidate_json()).unwrap();
        assert_eq!(c.output, json!({"a": "b"}));
        assert!(decode::<Candidate>(without(candidate_json(), "evidence_refs")).is_err());
        assert!(decode::<Candidate>(without(candidate_json(), "output_ref")).is_err());
    }

    #[test]
    fn verify_request_round_trips_in_wire_order() {
        let request = json!({"candidate": candidate_json(), "output_schema": default_output_schema(),
            "policy": PolicyId::SchemaOnly.binding(json!({}))});
        let decoded: VerifyRequest = decode(request.clone()).unwrap();
        assert_eq!(serde_json::to_value(&decoded).unwrap(), request);
        let text = serde_json::to_string(&decoded).unwrap();
        assert!(
            text.starts_with(r#"{"candidate":{"candidate_id":"cand-exec-p-1","execution_id":"exec-p-1","output_ref""#)
        );
        assert!(text.contains(r#""policy":{"policy_id":"vp.schema_only.v1","policy_version":"1","policy_hash":""#));
    }

    fn execute_request() -> Value {
        let binding = PolicyId::SchemaOnly.binding(json!({}));
        let contract = sample_contract("task-1", json!({"prompt": "hello"}), default_output_schema(), binding, 1);
        json!({"task_id": "task-1", "execution_id": "exec-p-1", "task_type": "swarm", "inputs": {"prompt": "hello"},
            "profile": "default", "task_contract": contract, "stage": "EXPLORE", "attempt_id": "exec-p-1",
            "seed_bundle": null})
    }

    #[test]
    fn a_kernel_shaped_execute_request_round_trips() {
        let decoded: ExecuteRequest = decode(execute_request()).unwrap();
        assert_eq!(decoded.seed_bundle, None);
        assert_eq!(serde_json::to_value(&decoded).unwrap(), execute_request());
        let text = serde_json::to_string(&decoded).unwrap();
        assert!(text.starts_with(r#"{"task_id":"task-1","execution_id":"exec-p-1","task_type":"swarm","inputs""#));
        assert!(text.ends_with(r#","stage":"EXPLORE","attempt_id":"exec-p-1","seed_bundle":null}"#), "{text}");
        let seed = json!({"seed_type": "SIMILAR_HITS_V1", "hits": [], "constraints": {}});
        let with_seed: ExecuteRequest = decode(with(execute_request(), "seed_bundle", seed.clone())).unwrap();
        assert_eq!(with_seed.seed_bundle, Some(seed));
        assert_eq!(decode::<ExecuteRequest>(without(execute_request(), "seed_bundle")).unwrap().seed_bundle, None);
        assert!(decode::<ExecuteRequest>(without(execute_request(), "task_contract")).is_err());
    }

    fn contract_json() -> Value {
        execute_request()["task_contract"].clone()
    }

    #[test]
    fn task_contract_defaults_apply_to_omitted_fields() {
        let mut c = contract_json();
        for (object, key) in [
            ("budget", "mode"),
            ("budget", "explore_cost_units"),
            ("budget", "verify_cost_units"),
            ("budget", "finalize_cost_units"),
            ("assignment", "explore"),
            ("assignment", "verify"),
            ("assignment", "finalize"),
            ("acceptance", "da_quorum_threshold"),
            ("evidence_policy", "max_snippet_bytes"),
            ("evidence_policy", "max_snippet_tokens"),
        ] {
            c[object].as_object_mut().unwrap().remove(key);
        }
        c.as_object_mut().unwrap().remove("task_mode");
        let decoded: TaskContract = decode(c).unwrap();
        assert_eq!(decoded.budget.mode, BudgetMode::Lifetime);
        assert_eq!(decoded.budget.explore_cost_units + decoded.budget.verify_cost_units, 0);
        assert_eq!(decoded.budget.finalize_cost_units, 0);
        let explore = &decoded.assignment.explore;
        assert_eq!((explore.max_proposers, explore.topk, explore.stop.no_new_evidence_rounds), (1, 3, 3));
        assert_eq!(decoded.assignment.verify.max_verifiers, 1);
        assert_eq!(decoded.assignment.finalize.max_finalizers, 1);
        assert_eq!(decoded.acceptance.da_quorum_threshold, 1);
        assert_eq!(decoded.task_mode, TaskMode::OneShot);
        assert_eq!(
            (decoded.evidence_policy.max_snippet_bytes, decoded.evidence_policy.max_snippet_tokens),
            (8192, 2048)
        );
    }

    #[test]
    fn nested_defaults_apply_inside_present_objects() {
        let mut c = contract_json();
        c["assignment"]["explore"] = json!({"topk": 5, "stop": {}});
        c["assignment"]["verify"] = json!({});
        let decoded: TaskContract = decode(c).unwrap();
        let explore = &decoded.assignment.explore;
        assert_eq!((explore.max_proposers, explore.topk, explore.stop.no_new_evidence_rounds), (1, 5, 3));
        assert_eq!(decoded.assignment.verify, VerifyAssignment::default());
        assert_eq!(decode::<ExploreAssignment>(json!({})).unwrap(), ExploreAssignment::default());
    }

    #[test]
    fn task_contract_required_fields_are_required() {
        for key in ["protocol_version", "inputs", "output_schema", "budget", "expiry_ms", "evidence_policy"] {
            assert!(decode::<TaskContract>(without(contract_json(), key)).is_err(), "{key}");
        }
        for (object, key) in [
            ("budget", "reuse_max_attempts"),
            ("assignment", "claim"),
            ("acceptance", "verifier_policy"),
            ("acceptance", "settlement"),
            ("evidence_policy", "inline_mime_allowlist"),
        ] {
            let mut c = contract_json();
            c[object].as_object_mut().unwrap().remove(key);
            let err = decode::<TaskContract>(c).unwrap_err();
            assert!(err.contains(&format!("missing field `{key}`")), "{err}");
        }
        let mut c = contract_json();
        c["acceptance"]["settlement"]["implicit_diminishing_returns"] = json!({"w": 10, "k": 50});
        assert!(decode::<TaskContract>(c).is_err(), "the keys are capital W and K");
    }

    #[test]
    fn enums_use_the_kernels_spelling() {
        assert_eq!(serde_json::to_value(TaskMode::Continuous).unwrap(), json!("CONTINUOUS"));
        assert_eq!(serde_json::to_value(TaskMode::OneShot).unwrap(), json!("ONE_SHOT"));
        assert_eq!(serde_json::to_value(BudgetMode::EpochRenew).unwrap(), json!("EPOCH_RENEW"));
        assert_eq!(serde_json::to_value(BudgetMode::Lifetime).unwrap(), json!("LIFETIME"));
        assert!(decode::<TaskMode>(json!("one_shot")).is_err());
        assert_eq!(serde_json::to_value(VerificationStatus::Inconclusive).unwrap(), json!("inconclusive"));
        let mut c = contract_json();
        c["task_mode"] = json!("CONTINUOUS");
        c["budget"]["mode"] = json!("EPOCH_RENEW");
        let decoded: TaskContract = decode(c).unwrap();
        assert_eq!((decoded.task_mode, decoded.budget.mode), (TaskMode::Continuous, BudgetMode::EpochRenew));
    }
}
