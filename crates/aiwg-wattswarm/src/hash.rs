//! The hashes of the protocol (§5): all SHA-256 as bare lowercase hex, over compact JSON whose object
//! keys are sorted (serde_json without `preserve_order`) or over `|`-joined text. Each preimage is
//! built explicitly, in the order the kernel writes it, so that neither a feature flag turned on
//! elsewhere in the crate graph nor a map's iteration order can change a hash.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 of the bytes, lowercase hex, no `sha256:` prefix.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    Sha256::digest(bytes).iter().fold(String::with_capacity(64), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    })
}

/// The kernel's bytes of a JSON value: compact, object keys sorted, floats in serde_json's shortest
/// form (`1.0`, `0.2`).
pub fn json_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("a JSON value always serializes")
}

/// The preimage of the reference runtime's `verifier_result_hash` (§5.2). The fields are declared in
/// sorted key order because the runtime builds the preimage with `json!`, whose map sorts its keys.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VerifierResultFields<'a> {
    pub candidate_id: &'a str,
    pub execution_id: &'a str,
    pub model_id: &'a str,
    pub passed: bool,
    pub policy_hash: &'a str,
    pub provider_family: &'a str,
    pub reason_codes: &'a [u16],
    pub score: f64,
}

impl VerifierResultFields<'_> {
    /// The hash, as the reference runtime computes it. The kernel treats it as opaque.
    pub fn hash(&self) -> String {
        sha256_hex(&serde_json::to_vec(self).expect("the preimage always serializes"))
    }
}

/// The hash the kernel gives the inconclusive result it synthesizes when `/verify` fails (§5.3).
pub fn inconclusive_hash(
    task_id: &str,
    candidate_id: &str,
    verify_execution_id: &str,
    reason_code: u16,
    created_at_ms: u64,
) -> String {
    sha256_hex(format!("{task_id}|{candidate_id}|{verify_execution_id}|{reason_code}|{created_at_ms}").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SCHEMA_ONLY_HASH: &str = "a52d250d216f425973eb5a13c392d4dbc172357181b683e86caa4a5c64db94a7";
    const THRESHOLDS_HASH: &str = "052312b5f56ed81a7c6f693d5d24fde5dc42825ecc61c6f77bccf07c444c4edf";

    #[test]
    fn sha256_hex_is_bare_lowercase_hex() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    // The hashes assume serde_json writes a Value's keys sorted. If a crate in the graph ever turns on
    // `serde_json/preserve_order`, keys keep insertion order and every Value-derived hash changes.
    #[test]
    fn values_serialize_with_sorted_keys() {
        assert_eq!(json_bytes(&json!({"b": 1, "a": 2})), br#"{"a":2,"b":1}"#);
        assert_eq!(
            json_bytes(&json!({"z": {"y": 1, "x": [1, 2.5]}, "a": null})),
            br#"{"a":null,"z":{"x":[1,2.5],"y":1}}"#
        );
    }

    #[test]
    fn floats_are_written_in_shortest_form_with_a_point() {
        assert_eq!(json_bytes(&json!([1.0, 0.0, 0.2, 0.9, 0.3, 0.93])), b"[1.0,0.0,0.2,0.9,0.3,0.93]");
    }

    #[test]
    fn verifier_result_hash_of_the_schema_only_example() {
        let fields = VerifierResultFields {
            candidate_id: "cand-x",
            execution_id: "exec-x",
            model_id: "swarm-model-v1",
            passed: true,
            policy_hash: SCHEMA_ONLY_HASH,
            provider_family: "swarm-runtime",
            reason_codes: &[100],
            score: 1.0,
        };
        let preimage = format!(
            r#"{{"candidate_id":"cand-x","execution_id":"exec-x","model_id":"swarm-model-v1","passed":true,"policy_hash":"{SCHEMA_ONLY_HASH}","provider_family":"swarm-runtime","reason_codes":[100],"score":1.0}}"#
        );
        assert_eq!(serde_json::to_string(&fields).unwrap(), preimage);
        let expected = "3a0c8afe2d2e9da390c372273f52e368160c5e0d9f879dfe2e64ec224b3d649d";
        assert_eq!(fields.hash(), expected);
    }

    #[test]
    fn verifier_result_hash_of_the_thresholds_example() {
        let hash = VerifierResultFields {
            candidate_id: "cand-x",
            execution_id: "exec-x",
            model_id: "swarm-model-v1",
            passed: false,
            policy_hash: THRESHOLDS_HASH,
            provider_family: "swarm-runtime",
            reason_codes: &[100, 103],
            score: 0.2,
        }
        .hash();
        assert_eq!(hash, "1973292c4ef33a927efdc67eb905bb75d30d1c39771d52b890b8f059fb4c3a38");
    }

    #[test]
    fn verifier_result_hash_ignores_nothing_it_covers() {
        let base = || VerifierResultFields {
            candidate_id: "c",
            execution_id: "e",
            model_id: "m",
            passed: true,
            policy_hash: "p",
            provider_family: "f",
            reason_codes: &[100],
            score: 1.0,
        };
        let h = base().hash();
        assert_ne!(VerifierResultFields { passed: false, ..base() }.hash(), h);
        assert_ne!(VerifierResultFields { score: 0.9, ..base() }.hash(), h);
        assert_ne!(VerifierResultFields { reason_codes: &[100, 105], ..base() }.hash(), h);
        assert_ne!(VerifierResultFields { model_id: "n", ..base() }.hash(), h);
    }

    #[test]
    fn inconclusive_hash_joins_its_fields_with_bars() {
        let expected = sha256_hex(b"task-1|cand-exec-p-1|exec-v-1|200|1796000507083");
        assert_eq!(inconclusive_hash("task-1", "cand-exec-p-1", "exec-v-1", 200, 1_796_000_507_083), expected);
        assert_ne!(inconclusive_hash("task-1", "cand-exec-p-1", "exec-v-1", 201, 1_796_000_507_083), expected);
    }
}
