//! The three built-in verification policies (§4): what each checks, the reason codes it pushes and in
//! which order, the hash that pins it in a task contract (§5.1) and the registry check a binding must
//! pass (§4.5). The kernel re-runs the policy on every verifier result it receives and refuses a
//! `passed` verdict its own run does not give, so these rules must be the kernel's exactly, quirks
//! included: the schema check is a minimal top-level checker, not JSON Schema.

use std::fmt;
use std::sync::OnceLock;

use serde::Serialize;
use serde_json::{json, Value};

use super::hash::{json_bytes, sha256_hex};
use super::reason;
use super::wire::{Evaluation, PolicyBinding};

/// The version of every built-in policy.
pub const VERSION: &str = "1";

/// A built-in verification policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyId {
    /// `vp.schema_only.v1`: the output against the schema, nothing else.
    SchemaOnly,
    /// `vp.schema_thresholds.v1`: the schema, then `min_confidence` and `max_len`.
    SchemaThresholds,
    /// `vp.crosscheck.v1`: the schema, then a non-blank `check_summary` and `min_score`. Despite its
    /// name it compares nothing with other outputs.
    Crosscheck,
}

// The spec that is hashed, in the kernel's struct order (§5.1).
#[derive(Serialize)]
struct PolicySpec {
    policy_id: &'static str,
    policy_version: &'static str,
    params_schema: Value,
    reason_codes: Vec<u16>,
    io_contract: &'static str,
}

impl PolicyId {
    pub const ALL: [PolicyId; 3] = [PolicyId::SchemaOnly, PolicyId::SchemaThresholds, PolicyId::Crosscheck];

    /// The policy of an id (exact string), `None` for an id the registry does not know.
    pub fn parse(id: &str) -> Option<PolicyId> {
        Self::ALL.into_iter().find(|p| p.id() == id)
    }

    pub fn id(self) -> &'static str {
        match self {
            PolicyId::SchemaOnly => "vp.schema_only.v1",
            PolicyId::SchemaThresholds => "vp.schema_thresholds.v1",
            PolicyId::Crosscheck => "vp.crosscheck.v1",
        }
    }

    fn base_codes(self) -> &'static [u16] {
        match self {
            PolicyId::SchemaOnly => &[reason::SCHEMA_OK, reason::SCHEMA_INVALID],
            PolicyId::SchemaThresholds => {
                &[reason::SCHEMA_OK, reason::SCHEMA_INVALID, reason::CONFIDENCE_TOO_LOW, reason::OUTPUT_TOO_LARGE]
            }
            PolicyId::Crosscheck => {
                &[reason::SCHEMA_OK, reason::SCHEMA_INVALID, reason::CHECK_SUMMARY_MISSING, reason::SCORE_TOO_LOW]
            }
        }
    }

    /// The codes the policy's spec lists: its own, then the evidence codes 200-203, each appended only
    /// if not already there.
    pub fn spec_codes(self) -> Vec<u16> {
        let mut codes = self.base_codes().to_vec();
        for code in reason::EVIDENCE_UNREACHABLE..=reason::EVIDENCE_DIGEST_MISMATCH {
            if !codes.contains(&code) {
                codes.push(code);
            }
        }
        codes
    }

    fn spec(self) -> PolicySpec {
        let (params_schema, io_contract) = match self {
            PolicyId::SchemaOnly => {
                (json!({"type": "object", "properties": {}}), "validate candidate output against output_schema")
            }
            PolicyId::SchemaThresholds => (
                json!({"type": "object", "properties": {
                    "min_confidence": {"type": "number"}, "max_len": {"type": "integer"}}}),
                "schema + generic thresholds",
            ),
            PolicyId::Crosscheck => (
                json!({"type": "object", "properties": {"min_score": {"type": "number"}}}),
                "cross-check output and enforce check_summary",
            ),
        };
        PolicySpec {
            policy_id: self.id(),
            policy_version: VERSION,
            params_schema,
            reason_codes: self.spec_codes(),
            io_contract,
        }
    }

    /// The exact bytes whose SHA-256 is the policy hash.
    pub fn spec_bytes(self) -> Vec<u8> {
        serde_json::to_vec(&self.spec()).expect("a policy spec always serializes")
    }

    /// The policy hash, bare lowercase hex (a `sha256:` prefix is refused by the kernel).
    pub fn hash(self) -> String {
        static HASHES: OnceLock<[String; 3]> = OnceLock::new();
        // Indexed by discriminant, which is the position in `ALL`.
        let hashes = HASHES.get_or_init(|| PolicyId::ALL.map(|p| sha256_hex(&p.spec_bytes())));
        hashes[self as usize].clone()
    }

    /// Whether a verifier result under this policy may carry the code: the spec's codes, 0 and 999,
    /// and any code outside the protocol table (the kernel rejects only table codes the policy does not
    /// list, so 300-303 are always refused and 4242 is allowed).
    pub fn allows(self, code: u16) -> bool {
        code == reason::UNKNOWN
            || code == reason::CUSTOM_ERROR
            || !reason::in_table(code)
            || self.base_codes().contains(&code)
            || (reason::EVIDENCE_UNREACHABLE..=reason::EVIDENCE_DIGEST_MISMATCH).contains(&code)
    }

    /// The binding a contract carries for this policy.
    pub fn binding(self, params: Value) -> PolicyBinding {
        PolicyBinding {
            policy_id: self.id().to_owned(),
            policy_version: VERSION.to_owned(),
            policy_hash: self.hash(),
            policy_params: params,
        }
    }
}

/// Why a binding is refused. The messages are the kernel's and the reference runtime's, which
/// answers `400 policy binding invalid: <message>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindingError {
    Unknown(String),
    VersionMismatch,
    HashMismatch,
}

impl fmt::Display for BindingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindingError::Unknown(id) => write!(f, "policy {id} missing in registry"),
            BindingError::VersionMismatch => f.write_str("policy version mismatch"),
            BindingError::HashMismatch => f.write_str("policy hash mismatch"),
        }
    }
}

impl std::error::Error for BindingError {}

/// The registry check, in the kernel's order: the id, then the version, then the hash. Only the
/// built-in hash is compatible: hashes added by the kernel's governance events never reach an
/// executor, so the reference runtime refuses them too.
pub fn require_binding(b: &PolicyBinding) -> Result<PolicyId, BindingError> {
    let policy = PolicyId::parse(&b.policy_id).ok_or_else(|| BindingError::Unknown(b.policy_id.clone()))?;
    if b.policy_version != VERSION {
        return Err(BindingError::VersionMismatch);
    }
    if b.policy_hash != policy.hash() {
        return Err(BindingError::HashMismatch);
    }
    Ok(policy)
}

/// The kernel's schema check (§4.1): the schema's top-level `type` (if a string), `required` (if an
/// array; non-string entries skipped) and the `type` of each present property (if `properties` is an
/// object and the value is one). No recursion and no other keyword: this is what the kernel accepts,
/// and being stricter would refuse outputs the kernel passes.
pub fn validate_schema_minimal(schema: &Value, value: &Value) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        return Err("schema must be an object".to_owned());
    };
    if let Some(ty) = schema.get("type").and_then(Value::as_str) {
        if !matches_type(value, ty) {
            return Err(format!("expected type {ty}"));
        }
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        let Some(object) = value.as_object() else {
            return Err("required fields need an object".to_owned());
        };
        for key in required.iter().filter_map(Value::as_str) {
            if !object.contains_key(key) {
                return Err(format!("missing required field {key}"));
            }
        }
    }
    if let (Some(properties), Some(object)) = (schema.get("properties").and_then(Value::as_object), value.as_object()) {
        for (key, property) in properties {
            let ty = property.get("type").and_then(Value::as_str);
            if let (Some(ty), Some(field)) = (ty, object.get(key)) {
                if !matches_type(field, ty) {
                    return Err(format!("field {key} expected type {ty}"));
                }
            }
        }
    }
    Ok(())
}

// `integer` is a JSON integer only (`2.0` is not), `number` any number; an unknown type name never
// matches, so a schema that uses one fails every output.
fn matches_type(value: &Value, ty: &str) -> bool {
    match ty {
        "object" => value.is_object(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => false,
    }
}

/// Runs the policy on an output, pushing reason codes in the kernel's order (§4.2-4.4).
pub fn evaluate(policy: PolicyId, output: &Value, output_schema: &Value, params: &Value) -> Evaluation {
    match policy {
        PolicyId::SchemaOnly => schema_only(output, output_schema),
        PolicyId::SchemaThresholds => schema_thresholds(output, output_schema, params),
        PolicyId::Crosscheck => crosscheck(output, output_schema, params),
    }
}

// The schema verdict every policy starts with: 100, or 101 and a failure.
fn schema_code(output: &Value, output_schema: &Value) -> (bool, u16) {
    match validate_schema_minimal(output_schema, output) {
        Ok(()) => (true, reason::SCHEMA_OK),
        Err(_) => (false, reason::SCHEMA_INVALID),
    }
}

fn schema_only(output: &Value, output_schema: &Value) -> Evaluation {
    let (passed, code) = schema_code(output, output_schema);
    Evaluation { passed, score: if passed { 1.0 } else { 0.0 }, reason_codes: vec![code] }
}

// The thresholds apply only when the params are an object. `max_len` is read as an unsigned integer,
// so `8.0` or `-1` is no threshold at all; a missing or non-numeric confidence counts as 0.0.
fn schema_thresholds(output: &Value, output_schema: &Value, params: &Value) -> Evaluation {
    let (mut passed, code) = schema_code(output, output_schema);
    let mut reason_codes = vec![code];
    if let Some(params) = params.as_object() {
        if let Some(min_confidence) = params.get("min_confidence").and_then(Value::as_f64) {
            let confidence = output.get("confidence").and_then(Value::as_f64).unwrap_or(0.0);
            if confidence < min_confidence {
                passed = false;
                reason_codes.push(reason::CONFIDENCE_TOO_LOW);
            }
        }
        if let Some(max_len) = params.get("max_len").and_then(Value::as_u64) {
            let len = json_bytes(output).len() as u64;
            if len > max_len {
                passed = false;
                reason_codes.push(reason::OUTPUT_TOO_LARGE);
            }
        }
    }
    Evaluation { passed, score: if passed { 1.0 } else { 0.2 }, reason_codes }
}

// The score is fixed before `min_score` is compared, and a score below it fails the output without
// changing the score: `false, 0.9` is a possible result.
fn crosscheck(output: &Value, output_schema: &Value, params: &Value) -> Evaluation {
    let (mut passed, code) = schema_code(output, output_schema);
    let mut reason_codes = vec![code];
    let summary = output.get("check_summary").and_then(Value::as_str);
    if summary.is_none_or(|s| s.trim().is_empty()) {
        passed = false;
        reason_codes.push(reason::CHECK_SUMMARY_MISSING);
    }
    let score = if passed { 0.9 } else { 0.3 };
    if let Some(min_score) = params.get("min_score").and_then(Value::as_f64) {
        if score < min_score {
            passed = false;
            reason_codes.push(reason::SCORE_TOO_LOW);
        }
    }
    Evaluation { passed, score, reason_codes }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA_ONLY_HASH: &str = "a52d250d216f425973eb5a13c392d4dbc172357181b683e86caa4a5c64db94a7";
    const THRESHOLDS_HASH: &str = "052312b5f56ed81a7c6f693d5d24fde5dc42825ecc61c6f77bccf07c444c4edf";
    const CROSSCHECK_HASH: &str = "236ef6d386d272715034acda035ae212c85a87dd6a09958e781c5d0b6880846d";

    fn sample_schema() -> Value {
        json!({"type": "object", "required": ["answer"], "properties": {
            "answer": {"type": "string"}, "confidence": {"type": "number"}, "check_summary": {"type": "string"}}})
    }

    // What the reference runtime answers to a swarm task with profile `default` and prompt `hello`.
    fn reference_output() -> Value {
        json!({"answer": "default::hello", "confidence": 0.93, "check_summary": "stage=EXPLORE attempt=exec-p-1"})
    }

    fn eval(policy: PolicyId, output: &Value, params: Value) -> (bool, f64, Vec<u16>) {
        let e = evaluate(policy, output, &sample_schema(), &params);
        (e.passed, e.score, e.reason_codes)
    }

    #[test]
    fn the_hashed_spec_bytes_are_the_kernels() {
        let prefix = |id: &str| format!(r#"{{"policy_id":"{id}","policy_version":"1","params_schema":"#);
        let expected = [
            (
                PolicyId::SchemaOnly,
                format!(
                    r#"{}{{"properties":{{}},"type":"object"}},"reason_codes":[100,101,200,201,202,203],"io_contract":"validate candidate output against output_schema"}}"#,
                    prefix("vp.schema_only.v1")
                ),
            ),
            (
                PolicyId::SchemaThresholds,
                format!(
                    r#"{}{{"properties":{{"max_len":{{"type":"integer"}},"min_confidence":{{"type":"number"}}}},"type":"object"}},"reason_codes":[100,101,102,103,200,201,202,203],"io_contract":"schema + generic thresholds"}}"#,
                    prefix("vp.schema_thresholds.v1")
                ),
            ),
            (
                PolicyId::Crosscheck,
                format!(
                    r#"{}{{"properties":{{"min_score":{{"type":"number"}}}},"type":"object"}},"reason_codes":[100,101,104,105,200,201,202,203],"io_contract":"cross-check output and enforce check_summary"}}"#,
                    prefix("vp.crosscheck.v1")
                ),
            ),
        ];
        for (policy, bytes) in expected {
            assert_eq!(String::from_utf8(policy.spec_bytes()).unwrap(), bytes);
        }
    }

    #[test]
    fn the_policy_hashes_are_the_kernels() {
        assert_eq!(PolicyId::SchemaOnly.hash(), SCHEMA_ONLY_HASH);
        assert_eq!(PolicyId::SchemaThresholds.hash(), THRESHOLDS_HASH);
        assert_eq!(PolicyId::Crosscheck.hash(), CROSSCHECK_HASH);
        for policy in PolicyId::ALL {
            assert_eq!(policy.hash(), sha256_hex(&policy.spec_bytes()));
        }
    }

    #[test]
    fn ids_parse_back_and_nothing_else_parses() {
        for policy in PolicyId::ALL {
            assert_eq!(PolicyId::parse(policy.id()), Some(policy));
        }
        assert_eq!(PolicyId::SchemaOnly.id(), "vp.schema_only.v1");
        assert_eq!(PolicyId::SchemaThresholds.id(), "vp.schema_thresholds.v1");
        assert_eq!(PolicyId::Crosscheck.id(), "vp.crosscheck.v1");
        for other in ["", "vp.schema_only", "VP.SCHEMA_ONLY.V1", " vp.schema_only.v1", "vp.schema_only.v2"] {
            assert_eq!(PolicyId::parse(other), None, "{other:?}");
        }
    }

    #[test]
    fn spec_codes_are_the_base_list_then_the_evidence_codes() {
        assert_eq!(PolicyId::SchemaOnly.spec_codes(), [100, 101, 200, 201, 202, 203]);
        assert_eq!(PolicyId::SchemaThresholds.spec_codes(), [100, 101, 102, 103, 200, 201, 202, 203]);
        assert_eq!(PolicyId::Crosscheck.spec_codes(), [100, 101, 104, 105, 200, 201, 202, 203]);
    }

    #[test]
    fn allows_is_the_spec_list_0_999_and_codes_outside_the_table() {
        let table_allowed =
            |p: PolicyId| -> Vec<u16> { reason::TABLE.iter().map(|(c, _)| *c).filter(|c| p.allows(*c)).collect() };
        assert_eq!(table_allowed(PolicyId::SchemaOnly), [0, 100, 101, 200, 201, 202, 203, 999]);
        assert_eq!(table_allowed(PolicyId::SchemaThresholds), [0, 100, 101, 102, 103, 200, 201, 202, 203, 999]);
        assert_eq!(table_allowed(PolicyId::Crosscheck), [0, 100, 101, 104, 105, 200, 201, 202, 203, 999]);
        for policy in PolicyId::ALL {
            for code in [1, 106, 204, 304, 4242, u16::MAX] {
                assert!(policy.allows(code), "{code}");
            }
            for code in 300..=303 {
                assert!(!policy.allows(code), "{code}");
            }
            for code in policy.spec_codes() {
                assert!(policy.allows(code), "{code}");
            }
        }
    }

    #[test]
    fn the_three_bindings_pass_the_registry() {
        for policy in PolicyId::ALL {
            let binding = policy.binding(json!({"min_score": 0.5}));
            assert_eq!(binding.policy_id, policy.id());
            assert_eq!(binding.policy_version, "1");
            assert_eq!(binding.policy_hash, policy.hash());
            assert_eq!(binding.policy_params, json!({"min_score": 0.5}));
            assert_eq!(require_binding(&binding), Ok(policy));
        }
    }

    #[test]
    fn bindings_are_refused_with_the_kernels_messages() {
        let good = PolicyId::SchemaOnly.binding(json!({}));
        let unknown = PolicyBinding { policy_id: "vp.nope.v1".into(), ..good.clone() };
        let err = require_binding(&unknown).unwrap_err();
        assert_eq!(err, BindingError::Unknown("vp.nope.v1".into()));
        assert_eq!(err.to_string(), "policy vp.nope.v1 missing in registry");
        let version = PolicyBinding { policy_version: "2".into(), ..good.clone() };
        assert_eq!(require_binding(&version).unwrap_err().to_string(), "policy version mismatch");
        let prefixed = PolicyBinding { policy_hash: format!("sha256:{SCHEMA_ONLY_HASH}"), ..good.clone() };
        assert_eq!(require_binding(&prefixed).unwrap_err().to_string(), "policy hash mismatch");
        let other = PolicyBinding { policy_hash: THRESHOLDS_HASH.into(), ..good.clone() };
        assert_eq!(require_binding(&other).unwrap_err(), BindingError::HashMismatch);
        let upper = PolicyBinding { policy_hash: SCHEMA_ONLY_HASH.to_uppercase(), ..good.clone() };
        assert_eq!(require_binding(&upper).unwrap_err(), BindingError::HashMismatch);
    }

    #[test]
    fn binding_checks_run_id_then_version_then_hash() {
        let all_wrong = PolicyBinding {
            policy_id: "x".into(),
            policy_version: "2".into(),
            policy_hash: "h".into(),
            policy_params: json!({}),
        };
        assert_eq!(require_binding(&all_wrong).unwrap_err(), BindingError::Unknown("x".into()));
        let version_and_hash = PolicyBinding { policy_id: "vp.crosscheck.v1".into(), ..all_wrong };
        assert_eq!(require_binding(&version_and_hash).unwrap_err(), BindingError::VersionMismatch);
    }

    #[test]
    fn schema_must_be_an_object() {
        assert!(validate_schema_minimal(&json!(["string"]), &json!("a")).is_err());
        assert!(validate_schema_minimal(&json!(null), &json!({})).is_err());
        assert!(validate_schema_minimal(&json!(true), &json!({})).is_err());
        assert!(validate_schema_minimal(&json!({}), &json!("anything")).is_ok());
        let e = evaluate(PolicyId::SchemaOnly, &reference_output(), &json!([]), &json!({}));
        assert_eq!((e.passed, e.score, e.reason_codes), (false, 0.0, vec![101]));
    }

    #[test]
    fn type_is_checked_only_when_a_string() {
        assert!(validate_schema_minimal(&json!({"type": "string"}), &json!(1)).is_err());
        assert!(validate_schema_minimal(&json!({"type": ["string", "null"]}), &json!(1)).is_ok());
        assert!(validate_schema_minimal(&json!({"type": 5}), &json!(1)).is_ok());
    }

    #[test]
    fn type_matching_follows_the_kernels_table() {
        let m = |ty: &str, v: Value| validate_schema_minimal(&json!({"type": ty}), &v).is_ok();
        assert!(m("object", json!({})) && !m("object", json!([])));
        assert!(m("array", json!([])) && !m("array", json!({})));
        assert!(m("string", json!("")) && !m("string", json!(1)));
        assert!(m("boolean", json!(false)) && !m("boolean", json!(0)));
        assert!(m("null", json!(null)) && !m("null", json!(0)));
        assert!(m("number", json!(1)) && m("number", json!(1.5)) && m("number", json!(-3)));
        assert!(!m("number", json!("1")));
        assert!(m("integer", json!(2)) && m("integer", json!(-2)) && m("integer", json!(u64::MAX)));
        assert!(!m("integer", json!(2.0)) && !m("integer", json!(2.5)));
        for v in [json!(null), json!(1), json!("a"), json!({}), json!([])] {
            assert!(!m("any", v.clone()) && !m("Object", v.clone()) && !m("", v), "unknown types never match");
        }
    }

    #[test]
    fn required_needs_an_object_holding_each_string_entry() {
        let schema = json!({"required": ["answer", 7, null]});
        assert!(validate_schema_minimal(&schema, &json!({"answer": null})).is_ok());
        assert!(validate_schema_minimal(&schema, &json!({"other": 1})).is_err());
        assert!(validate_schema_minimal(&schema, &json!(["answer"])).is_err());
        assert!(validate_schema_minimal(&json!({"required": "answer"}), &json!({})).is_ok());
        assert!(validate_schema_minimal(&json!({"required": []}), &json!("not an object")).is_err());
    }

    #[test]
    fn properties_check_present_fields_with_a_string_type_only() {
        let schema = json!({"properties": {"a": {"type": "string"}, "b": {"type": ["number"]}, "c": "string"}});
        assert!(validate_schema_minimal(&schema, &json!({})).is_ok());
        assert!(validate_schema_minimal(&schema, &json!({"a": "x", "b": "y", "c": 1})).is_ok());
        assert!(validate_schema_minimal(&schema, &json!({"a": 1})).is_err());
        assert!(validate_schema_minimal(&schema, &json!("not an object")).is_ok());
        assert!(validate_schema_minimal(&json!({"properties": []}), &json!({"a": 1})).is_ok());
    }

    #[test]
    fn there_is_no_recursion_and_no_other_keyword() {
        let schema = json!({"type": "object", "additionalProperties": false, "properties": {
            "inner": {"type": "object", "required": ["x"], "properties": {"y": {"type": "string"}}},
            "list": {"type": "array", "items": {"type": "string"}, "minItems": 3},
            "s": {"type": "string", "enum": ["a"], "minLength": 5}}});
        let value = json!({"inner": {"y": 1}, "list": [1], "s": "b", "extra": true});
        assert!(validate_schema_minimal(&schema, &value).is_ok());
    }

    #[test]
    fn schema_only_gives_100_or_101() {
        assert_eq!(eval(PolicyId::SchemaOnly, &reference_output(), json!({})), (true, 1.0, vec![100]));
        let params_ignored = eval(PolicyId::SchemaOnly, &reference_output(), json!({"min_score": 2}));
        assert_eq!(params_ignored, (true, 1.0, vec![100]));
        assert_eq!(eval(PolicyId::SchemaOnly, &json!({"answer": 1}), json!({})), (false, 0.0, vec![101]));
        assert_eq!(eval(PolicyId::SchemaOnly, &json!("bare string"), json!({})), (false, 0.0, vec![101]));
    }

    #[test]
    fn thresholds_worked_examples() {
        let out = reference_output();
        let t = PolicyId::SchemaThresholds;
        assert_eq!(eval(t, &out, json!({"min_confidence": 0.9, "max_len": 4096})), (true, 1.0, vec![100]));
        assert_eq!(eval(t, &out, json!({"min_confidence": 0.95, "max_len": 10})), (false, 0.2, vec![100, 102, 103]));
        let ab = json!({"a": "b"});
        assert_eq!(json_bytes(&ab).len(), 9);
        assert_eq!(eval(t, &ab, json!({"max_len": 9})).2, vec![101]);
        let schema = json!({});
        let e = |params: Value| {
            let e = evaluate(t, &ab, &schema, &params);
            (e.passed, e.score, e.reason_codes)
        };
        assert_eq!(e(json!({"max_len": 9})), (true, 1.0, vec![100]));
        assert_eq!(e(json!({"max_len": 8})), (false, 0.2, vec![100, 103]));
        assert_eq!(e(json!({"max_len": 8.0})), (true, 1.0, vec![100]));
        assert_eq!(e(json!({"max_len": -1})), (true, 1.0, vec![100]));
    }

    #[test]
    fn thresholds_confidence_rules() {
        let t = PolicyId::SchemaThresholds;
        let string_confidence = json!({"answer": "a", "confidence": "0.99"});
        assert_eq!(eval(t, &string_confidence, json!({"min_confidence": 0.5})), (false, 0.2, vec![101, 102]));
        let missing = json!({"answer": "a"});
        assert_eq!(eval(t, &missing, json!({"min_confidence": 0.0})), (true, 1.0, vec![100]));
        assert_eq!(eval(t, &missing, json!({"min_confidence": 0.01})), (false, 0.2, vec![100, 102]));
        let equal = json!({"answer": "a", "confidence": 0.93});
        assert_eq!(eval(t, &equal, json!({"min_confidence": 0.93})), (true, 1.0, vec![100]), "equality passes");
        assert!(eval(t, &json!({"answer": "a", "confidence": 1}), json!({"min_confidence": 1})).0);
        assert_eq!(eval(t, &equal, json!({"min_confidence": "0.99"})), (true, 1.0, vec![100]), "string param ignored");
    }

    #[test]
    fn thresholds_apply_only_when_params_are_an_object() {
        let t = PolicyId::SchemaThresholds;
        let out = json!({"answer": "a"});
        for params in [json!(null), json!([]), json!("min_confidence"), json!(0.99)] {
            assert_eq!(eval(t, &out, params), (true, 1.0, vec![100]));
        }
        assert_eq!(eval(t, &json!({"answer": 1}), json!(null)), (false, 0.2, vec![101]));
    }

    #[test]
    fn crosscheck_worked_examples() {
        let c = PolicyId::Crosscheck;
        let out = reference_output();
        assert_eq!(eval(c, &out, json!({})), (true, 0.9, vec![100]));
        assert_eq!(eval(c, &out, json!({"min_score": 0.95})), (false, 0.9, vec![100, 105]));
        assert_eq!(eval(c, &out, json!({"min_score": 0.9})), (true, 0.9, vec![100]));
        let blank = json!({"answer": "a", "check_summary": "   "});
        assert_eq!(eval(c, &blank, json!({"min_score": 0.5})), (false, 0.3, vec![100, 104, 105]));
        assert_eq!(eval(c, &blank, json!({})), (false, 0.3, vec![100, 104]));
        assert_eq!(eval(c, &blank, json!({"min_score": 0.3})), (false, 0.3, vec![100, 104]));
    }

    #[test]
    fn crosscheck_summary_must_be_a_non_blank_string() {
        let c = PolicyId::Crosscheck;
        let schema = json!({});
        let codes = |out: Value| evaluate(c, &out, &schema, &json!({})).reason_codes;
        assert_eq!(codes(json!({"answer": "a"})), [100, 104]);
        assert_eq!(codes(json!({"check_summary": 5})), [100, 104]);
        assert_eq!(codes(json!({"check_summary": "\t\n "})), [100, 104]);
        assert_eq!(codes(json!({"check_summary": " ok "})), [100]);
        assert_eq!(eval(c, &json!({"answer": 1, "check_summary": "s"}), json!({})), (false, 0.3, vec![101]));
        assert_eq!(eval(c, &json!({"answer": 1}), json!({"min_score": 1})), (false, 0.3, vec![101, 104, 105]));
    }
}
