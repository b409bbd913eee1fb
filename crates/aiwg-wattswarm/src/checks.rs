//! What the kernel enforces on an executor's answers. An `/execute` answer that breaks a rule makes
//! the kernel refuse the proposal and the run fail (§1.4); a `/verify` answer that breaks one becomes a
//! `TaskError{INVALID_OUTPUT}` (§1.6). Checking first lets serve say which rule an executor broke
//! instead of forwarding an answer the kernel will refuse with less detail.

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;

use super::hash::{json_bytes, sha256_hex};
use super::policy::{PolicyId, VERSION};
use super::reason;
use super::wire::{
    ArtifactRef, Evaluation, EvidencePolicy, ExecuteResponse, InlineEvidence, VerificationStatus, VerifyResponse,
};

/// The kernel's bound on a serialized candidate output, an inline evidence's content and a serialized
/// verifier result.
pub const MAX_STRUCTURED_SUMMARY_BYTES: usize = 65_536;

// A base64 token shorter than this is not screened for media (the kernel's threshold).
const MIN_MEDIA_TOKEN_CHARS: usize = 64;

/// The reference the kernel computes for a candidate output (§5.4): the digest is over the compact,
/// key-sorted bytes and, unlike the protocol's other hashes, carries the `sha256:` prefix.
pub fn output_ref(output: &Value, producer: &str, created_at_ms: u64) -> ArtifactRef {
    let bytes = json_bytes(output);
    let digest = format!("sha256:{}", sha256_hex(&bytes));
    ArtifactRef {
        uri: format!("artifact://reference/{digest}"),
        digest,
        size_bytes: bytes.len() as u64,
        mime: "application/json".to_owned(),
        created_at: created_at_ms,
        producer: producer.to_owned(),
    }
}

/// The kernel's checks of an `/execute` answer, in its order: the output's size, each inline
/// evidence, each evidence reference's digest. The error names the entry and the rule.
pub fn check_execute_answer(answer: &ExecuteResponse, policy: &EvidencePolicy) -> Result<(), String> {
    let output_len = json_bytes(&answer.candidate_output).len();
    if output_len > MAX_STRUCTURED_SUMMARY_BYTES {
        return Err(format!("candidate_output is {output_len} bytes, over {MAX_STRUCTURED_SUMMARY_BYTES}"));
    }
    for (i, evidence) in answer.evidence_inline.iter().enumerate() {
        check_inline(evidence, policy).map_err(|rule| format!("evidence_inline[{i}]: {rule}"))?;
    }
    for (i, reference) in answer.evidence_refs.iter().enumerate() {
        // Blank counts as empty: a digest of spaces identifies nothing either.
        if reference.digest.trim().is_empty() {
            return Err(format!("evidence_refs[{i}]: digest is empty"));
        }
    }
    Ok(())
}

// Inline evidence is text: the kernel keeps media out of the event log (`max_inline_media_bytes` is 0),
// whether declared by its mime, embedded as a data URI or smuggled as a long base64 token.
fn check_inline(evidence: &InlineEvidence, policy: &EvidencePolicy) -> Result<(), String> {
    let mime = &evidence.mime;
    let lower = mime.to_ascii_lowercase();
    if ["image/", "video/", "audio/"].iter().any(|kind| lower.starts_with(kind)) {
        return Err(format!("mime {mime} is media"));
    }
    if !policy.inline_mime_allowlist.iter().any(|allowed| allowed == mime) {
        return Err(format!("mime {mime} is not in the inline allowlist"));
    }
    let content = &evidence.content;
    if content.len() > MAX_STRUCTURED_SUMMARY_BYTES {
        return Err(format!("content is {} bytes, over {MAX_STRUCTURED_SUMMARY_BYTES}", content.len()));
    }
    if mime == "application/json" {
        serde_json::from_str::<Value>(content).map_err(|e| format!("application/json content does not parse: {e}"))?;
    }
    let lower_content = content.to_ascii_lowercase();
    if let Some(uri) = ["data:image/", "data:video/", "data:audio/"].into_iter().find(|u| lower_content.contains(u)) {
        return Err(format!("content holds a {uri} URI"));
    }
    if content.split(|c| !is_base64_char(c)).any(decodes_to_media) {
        return Err("content holds a base64 token that decodes to media".to_owned());
    }
    Ok(())
}

// The alphabets of standard and URL-safe base64 together, padding included: a token is a maximal run
// of these characters.
fn is_base64_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_')
}

// Only the token's first whole 4-character groups are decoded, padding dropped, in either alphabet:
// the magic numbers sit in the first 12 bytes, and a token whose tail does not decode still carries
// the media its head announces.
fn decodes_to_media(token: &str) -> bool {
    if token.len() < MIN_MEDIA_TOKEN_CHARS {
        return false;
    }
    let unpadded = token.trim_end_matches('=');
    let whole = &unpadded[..unpadded.len() / 4 * 4];
    [STANDARD_NO_PAD, URL_SAFE_NO_PAD].iter().any(|engine| engine.decode(whole).is_ok_and(|bytes| is_media(&bytes)))
}

// PNG, JPEG, GIF, EBML (Matroska/WebM), Ogg, FLAC, ID3 (MP3), RIFF WAVE/WEBP/AVI, ISO BMFF (`ftyp`).
fn is_media(bytes: &[u8]) -> bool {
    const PREFIXES: [&[u8]; 7] = [b"\x89PNG", b"\xFF\xD8\xFF", b"GIF8", b"\x1A\x45\xDF\xA3", b"OggS", b"fLaC", b"ID3"];
    PREFIXES.iter().any(|magic| bytes.starts_with(magic))
        || (bytes.starts_with(b"RIFF") && matches!(bytes.get(8..12), Some(b"WAVE" | b"WEBP" | b"AVI ")))
        || bytes.get(4..8) == Some(b"ftyp")
}

/// The status the kernel records: the explicit one, else inferred (passed → Passed; else any of
/// 200-202 → Inconclusive; else Failed).
pub fn status_of(r: &VerifyResponse) -> VerificationStatus {
    r.verification_status.unwrap_or(if r.passed {
        VerificationStatus::Passed
    } else if r.reason_codes.iter().any(|c| reason::is_inconclusive(*c)) {
        VerificationStatus::Inconclusive
    } else {
        VerificationStatus::Failed
    })
}

/// The kernel's validity rules for a `/verify` answer (§1.6), in its order, given the policy of the
/// task and the kernel's own evaluation of the output (`local`, from [`super::policy::evaluate`]).
/// Rule 4 (the result's policy equals the contract's binding) always holds: the kernel, like serve,
/// copies the binding from the contract into the result, so there is nothing to check here.
pub fn check_verify_answer(
    r: &VerifyResponse,
    policy: PolicyId,
    local: &Evaluation,
) -> Result<VerificationStatus, String> {
    for (field, value) in [("provider_family", &r.provider_family), ("model_id", &r.model_id)] {
        if value.trim().is_empty() {
            return Err(format!("{field} is empty"));
        }
    }
    if !(0.0..=1.0).contains(&r.score) {
        return Err(format!("score {} is outside [0, 1]", r.score));
    }
    let status = status_of(r);
    let wants_passed = status == VerificationStatus::Passed;
    if r.passed != wants_passed {
        return Err(format!("status {} requires passed={wants_passed}", status_name(status)));
    }
    if r.reason_codes.is_empty() {
        return Err("reason_codes is empty".to_owned());
    }
    if let Some(code) = r.reason_codes.iter().find(|c| !policy.allows(**c)) {
        return Err(format!("unknown reason code {code} for {}", policy.id()));
    }
    if status == VerificationStatus::Inconclusive && !r.reason_codes.iter().any(|c| reason::is_inconclusive(*c)) {
        return Err("inconclusive requires reason code 200, 201 or 202".to_owned());
    }
    if status == VerificationStatus::Passed && !local.passed {
        return Err("verifier passed flag mismatch".to_owned());
    }
    let recorded = recorded_len(r, status, policy);
    if recorded > MAX_STRUCTURED_SUMMARY_BYTES {
        return Err(format!("verifier result is {recorded} bytes, over {MAX_STRUCTURED_SUMMARY_BYTES}"));
    }
    Ok(status)
}

fn status_name(status: VerificationStatus) -> &'static str {
    match status {
        VerificationStatus::Passed => "passed",
        VerificationStatus::Failed => "failed",
        VerificationStatus::Inconclusive => "inconclusive",
    }
}

// The verifier result as the kernel records it, in its field order. The candidate's and execution's
// ids are not known here and count as empty: they add a few dozen bytes to a bound of 64 KiB.
#[derive(Serialize)]
struct RecordedResult<'a> {
    candidate_id: &'a str,
    execution_id: &'a str,
    verification_status: VerificationStatus,
    passed: bool,
    score: f64,
    reason_codes: &'a [u16],
    verifier_result_hash: &'a str,
    provider_family: &'a str,
    model_id: &'a str,
    policy_id: &'a str,
    policy_version: &'a str,
    policy_hash: &'a str,
}

fn recorded_len(r: &VerifyResponse, status: VerificationStatus, policy: PolicyId) -> usize {
    let hash = policy.hash();
    let recorded = RecordedResult {
        candidate_id: "",
        execution_id: "",
        verification_status: status,
        passed: r.passed,
        score: r.score,
        reason_codes: &r.reason_codes,
        verifier_result_hash: &r.verifier_result_hash,
        provider_family: &r.provider_family,
        model_id: &r.model_id,
        policy_id: policy.id(),
        policy_version: VERSION,
        policy_hash: &hash,
    };
    serde_json::to_vec(&recorded).expect("a verifier result always serializes").len()
}

/// The evaluation the kernel records when `/verify` fails: inconclusive, 0.0, and 201 for a timeout,
/// 200 for any other failure (transport, status, decode).
pub fn inconclusive(timeout: bool) -> Evaluation {
    let code = if timeout { reason::EVIDENCE_TIMEOUT } else { reason::EVIDENCE_UNREACHABLE };
    Evaluation { passed: false, score: 0.0, reason_codes: vec![code] }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    use serde_json::json;

    use super::super::policy::evaluate;
    use super::super::task::{default_output_schema, DEFAULT_INLINE_MIMES};
    use VerificationStatus::{Failed, Inconclusive, Passed};

    fn evidence_policy() -> EvidencePolicy {
        EvidencePolicy {
            max_inline_evidence_bytes: 65_536,
            max_inline_media_bytes: 0,
            inline_mime_allowlist: DEFAULT_INLINE_MIMES.map(str::to_owned).to_vec(),
            max_snippet_bytes: 8_192,
            max_snippet_tokens: 2_048,
        }
    }

    fn evidence_ref(digest: &str) -> ArtifactRef {
        ArtifactRef {
            uri: "https://runtime.local/task-1/exec-p-1".into(),
            digest: digest.into(),
            size_bytes: 94,
            mime: "application/json".into(),
            created_at: 1_796_000_507_083,
            producer: "swarm-runtime/swarm-model-v1".into(),
        }
    }

    // The reference runtime's answer: output, one trace, one evidence reference.
    fn answer() -> ExecuteResponse {
        ExecuteResponse {
            candidate_output: json!({"answer": "default::hello", "confidence": 0.93,
                "check_summary": "stage=EXPLORE attempt=exec-p-1"}),
            evidence_inline: vec![InlineEvidence { mime: "text/plain".into(), content: "trace:exec-p-1".into() }],
            evidence_refs: vec![evidence_ref(&format!("sha256:{}", sha256_hex(b"task-1|exec-p-1|default::hello")))],
            usage: None,
        }
    }

    fn with_inline(mime: &str, content: &str) -> ExecuteResponse {
        let mut a = answer();
        a.evidence_inline.push(InlineEvidence { mime: mime.into(), content: content.into() });
        a
    }

    fn png_bytes() -> Vec<u8> {
        let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        bytes.resize(96, 7);
        bytes
    }

    #[test]
    fn output_ref_of_a_known_value() {
        let r = output_ref(&json!({"a": "b"}), "node-1", 42);
        let digest = format!("sha256:{}", sha256_hex(br#"{"a":"b"}"#));
        assert_eq!(r.digest, digest);
        assert_eq!(r.size_bytes, 9);
        assert_eq!(r.uri, format!("artifact://reference/{digest}"));
        assert!(r.uri.starts_with("artifact://reference/sha256:"));
        assert_eq!((r.mime.as_str(), r.created_at, r.producer.as_str()), ("application/json", 42, "node-1"));
        let reordered = output_ref(&json!({"b": 1, "a": 2}), "n", 0);
        assert_eq!(reordered.digest, format!("sha256:{}", sha256_hex(br#"{"a":2,"b":1}"#)));
    }

    #[test]
    fn a_valid_answer_passes() {
        assert_eq!(check_execute_answer(&answer(), &evidence_policy()), Ok(()));
        let empty = ExecuteResponse {
            candidate_output: json!("bare"),
            evidence_inline: vec![],
            evidence_refs: vec![],
            usage: None,
        };
        assert_eq!(check_execute_answer(&empty, &evidence_policy()), Ok(()));
        for mime in DEFAULT_INLINE_MIMES {
            assert_eq!(check_execute_answer(&with_inline(mime, "{}"), &evidence_policy()), Ok(()), "{mime}");
        }
    }

    #[test]
    fn output_over_64_kib_is_refused() {
        let mut a = answer();
        // A string of n characters serializes to n + 2 bytes (its quotes).
        a.candidate_output = json!("x".repeat(MAX_STRUCTURED_SUMMARY_BYTES - 2));
        assert_eq!(check_execute_answer(&a, &evidence_policy()), Ok(()));
        a.candidate_output = json!("x".repeat(MAX_STRUCTURED_SUMMARY_BYTES - 1));
        let err = check_execute_answer(&a, &evidence_policy()).unwrap_err();
        assert_eq!(err, "candidate_output is 65537 bytes, over 65536");
    }

    #[test]
    fn media_mimes_are_refused() {
        let err = |mime: &str| check_execute_answer(&with_inline(mime, "x"), &evidence_policy()).unwrap_err();
        assert_eq!(err("image/png"), "evidence_inline[1]: mime image/png is media");
        assert_eq!(err("video/mp4"), "evidence_inline[1]: mime video/mp4 is media");
        assert_eq!(err("audio/ogg"), "evidence_inline[1]: mime audio/ogg is media");
        assert_eq!(err("Image/PNG"), "evidence_inline[1]: mime Image/PNG is media");
        let mut policy = evidence_policy();
        policy.inline_mime_allowlist.push("image/png".into());
        assert!(check_execute_answer(&with_inline("image/png", "x"), &policy).is_err(), "media even if allowed");
    }

    #[test]
    fn mimes_outside_the_allowlist_are_refused() {
        let err = check_execute_answer(&with_inline("text/html", "<p>"), &evidence_policy()).unwrap_err();
        assert_eq!(err, "evidence_inline[1]: mime text/html is not in the inline allowlist");
        let mut policy = evidence_policy();
        policy.inline_mime_allowlist = vec!["text/html".into()];
        assert_eq!(
            check_execute_answer(&with_inline("text/html", "<p>"), &policy).unwrap_err(),
            "evidence_inline[0]: mime text/plain is not in the inline allowlist"
        );
    }

    #[test]
    fn content_over_64_kib_is_refused() {
        let at_bound = "x".repeat(MAX_STRUCTURED_SUMMARY_BYTES);
        assert_eq!(check_execute_answer(&with_inline("text/plain", &at_bound), &evidence_policy()), Ok(()));
        let over = "x".repeat(MAX_STRUCTURED_SUMMARY_BYTES + 1);
        let err = check_execute_answer(&with_inline("text/plain", &over), &evidence_policy()).unwrap_err();
        assert_eq!(err, "evidence_inline[1]: content is 65537 bytes, over 65536");
    }

    #[test]
    fn json_content_must_parse() {
        let err = check_execute_answer(&with_inline("application/json", "{not json"), &evidence_policy()).unwrap_err();
        assert!(err.starts_with("evidence_inline[1]: application/json content does not parse"), "{err}");
        assert_eq!(check_execute_answer(&with_inline("text/plain", "{not json"), &evidence_policy()), Ok(()));
        assert_eq!(check_execute_answer(&with_inline("application/json", "[1, 2]"), &evidence_policy()), Ok(()));
    }

    #[test]
    fn media_data_uris_are_refused() {
        for (content, uri) in [
            ("see data:image/png;base64,AAAA", "data:image/"),
            ("data:video/mp4,x", "data:video/"),
            ("<audio src=\"DATA:AUDIO/ogg;base64,T2dn\">", "data:audio/"),
        ] {
            let err = check_execute_answer(&with_inline("text/markdown", content), &evidence_policy()).unwrap_err();
            assert_eq!(err, format!("evidence_inline[1]: content holds a {uri} URI"));
        }
        let text_uri = "data:text/plain,hello";
        assert_eq!(check_execute_answer(&with_inline("text/plain", text_uri), &evidence_policy()), Ok(()));
    }

    #[test]
    fn a_base64_png_token_is_refused() {
        let token = STANDARD.encode(png_bytes());
        assert!(token.len() >= 64);
        let content = format!("screenshot: {token} (attached)");
        let err = check_execute_answer(&with_inline("text/plain", &content), &evidence_policy()).unwrap_err();
        assert_eq!(err, "evidence_inline[1]: content holds a base64 token that decodes to media");
        let json_content = json!({"image": token}).to_string();
        assert!(check_execute_answer(&with_inline("application/json", &json_content), &evidence_policy()).is_err());
    }

    #[test]
    fn short_tokens_and_plain_base64_pass() {
        let short = STANDARD.encode(&png_bytes()[..45]);
        assert_eq!(short.len(), 60);
        assert_eq!(check_execute_answer(&with_inline("text/plain", &short), &evidence_policy()), Ok(()));
        let text = STANDARD.encode("just some ordinary text that is long enough to make a long token".repeat(2));
        assert!(text.len() >= 64);
        assert_eq!(check_execute_answer(&with_inline("text/plain", &text), &evidence_policy()), Ok(()));
        let hex = sha256_hex(b"x").repeat(2);
        assert_eq!(check_execute_answer(&with_inline("text/plain", &hex), &evidence_policy()), Ok(()));
    }

    #[test]
    fn every_media_magic_is_recognised_in_either_alphabet_padded_or_not() {
        let mut samples: Vec<Vec<u8>> = [
            &b"\x89PNG"[..],
            b"\xFF\xD8\xFF\xE0",
            b"GIF89a",
            b"\x1A\x45\xDF\xA3",
            b"OggS",
            b"fLaC",
            b"ID3\x04",
            b"RIFF\0\0\0\0WAVE",
            b"RIFF\0\0\0\0WEBP",
            b"RIFF\0\0\0\0AVI ",
            b"\0\0\0\x18ftypmp42",
        ]
        .iter()
        .map(|magic| magic.to_vec())
        .collect();
        for bytes in &mut samples {
            // 0xFB bytes make `+`/`/` in standard and `-`/`_` in URL-safe base64.
            bytes.resize(61, 0xFB);
            for token in [STANDARD.encode(&bytes), URL_SAFE.encode(&bytes), STANDARD_NO_PAD.encode(&bytes)] {
                assert!(token.len() >= 64);
                assert!(decodes_to_media(&token), "{:?} as {token}", &bytes[..12]);
            }
        }
        let riff_other = [&b"RIFF\0\0\0\0RMID"[..], &[0xFB; 49]].concat();
        assert!(!decodes_to_media(&STANDARD.encode(riff_other)));
    }

    #[test]
    fn empty_reference_digests_are_refused() {
        let mut a = answer();
        a.evidence_refs.push(evidence_ref(""));
        assert_eq!(check_execute_answer(&a, &evidence_policy()).unwrap_err(), "evidence_refs[1]: digest is empty");
        a.evidence_refs[1].digest = "  ".into();
        assert!(check_execute_answer(&a, &evidence_policy()).is_err());
        a.evidence_refs[1].digest = "anything".into();
        assert_eq!(check_execute_answer(&a, &evidence_policy()), Ok(()), "the format is not checked");
    }

    fn response(status: Option<VerificationStatus>, passed: bool, score: f64, codes: &[u16]) -> VerifyResponse {
        VerifyResponse {
            verification_status: status,
            passed,
            score,
            reason_codes: codes.to_vec(),
            verifier_result_hash: "0579c913".into(),
            provider_family: "swarm-runtime".into(),
            model_id: "swarm-model-v1".into(),
        }
    }

    fn passing() -> Evaluation {
        Evaluation { passed: true, score: 1.0, reason_codes: vec![100] }
    }

    fn failing() -> Evaluation {
        Evaluation { passed: false, score: 0.0, reason_codes: vec![101] }
    }

    #[test]
    fn status_is_explicit_or_inferred() {
        assert_eq!(status_of(&response(Some(Failed), true, 1.0, &[100])), Failed);
        assert_eq!(status_of(&response(None, true, 1.0, &[200])), Passed);
        for code in [200, 201, 202] {
            assert_eq!(status_of(&response(None, false, 0.0, &[101, code])), Inconclusive);
        }
        assert_eq!(status_of(&response(None, false, 0.0, &[203])), Failed);
        assert_eq!(status_of(&response(None, false, 0.0, &[])), Failed);
    }

    #[test]
    fn good_answers_give_their_status() {
        let so = PolicyId::SchemaOnly;
        assert_eq!(check_verify_answer(&response(Some(Passed), true, 1.0, &[100]), so, &passing()), Ok(Passed));
        assert_eq!(check_verify_answer(&response(None, true, 1.0, &[100]), so, &passing()), Ok(Passed));
        assert_eq!(check_verify_answer(&response(None, false, 0.0, &[101]), so, &failing()), Ok(Failed));
        assert_eq!(check_verify_answer(&response(None, false, 0.0, &[201]), so, &passing()), Ok(Inconclusive));
        let bounds = [response(Some(Failed), false, 0.0, &[101]), response(Some(Passed), true, 1.0, &[100])];
        for r in bounds {
            assert!(check_verify_answer(&r, so, &passing()).is_ok());
        }
    }

    #[test]
    fn provider_and_model_must_not_be_blank() {
        let mut r = response(Some(Passed), true, 1.0, &[100]);
        r.provider_family = " ".into();
        assert_eq!(check_verify_answer(&r, PolicyId::SchemaOnly, &passing()), Err("provider_family is empty".into()));
        r.provider_family = "p".into();
        r.model_id = String::new();
        assert_eq!(check_verify_answer(&r, PolicyId::SchemaOnly, &passing()), Err("model_id is empty".into()));
    }

    #[test]
    fn score_must_be_within_0_and_1() {
        for score in [1.2, -0.1, f64::NAN, f64::INFINITY] {
            let r = response(Some(Failed), false, score, &[101]);
            let err = check_verify_answer(&r, PolicyId::SchemaOnly, &failing()).unwrap_err();
            assert!(err.starts_with("score "), "{err}");
        }
    }

    #[test]
    fn status_and_passed_must_agree() {
        let so = PolicyId::SchemaOnly;
        let check = |status, passed| check_verify_answer(&response(Some(status), passed, 0.5, &[200]), so, &passing());
        assert_eq!(check(Failed, true), Err("status failed requires passed=false".into()));
        assert_eq!(check(Inconclusive, true), Err("status inconclusive requires passed=false".into()));
        assert_eq!(check(Passed, false), Err("status passed requires passed=true".into()));
    }

    #[test]
    fn reason_codes_must_not_be_empty() {
        let r = response(Some(Passed), true, 1.0, &[]);
        assert_eq!(check_verify_answer(&r, PolicyId::SchemaOnly, &passing()), Err("reason_codes is empty".into()));
    }

    #[test]
    fn reason_codes_must_be_allowed_by_the_policy() {
        let check = |policy, codes: &[u16]| check_verify_answer(&response(None, false, 0.2, codes), policy, &failing());
        assert_eq!(
            check(PolicyId::SchemaOnly, &[100, 102]),
            Err("unknown reason code 102 for vp.schema_only.v1".into())
        );
        assert_eq!(check(PolicyId::SchemaThresholds, &[100, 102]), Ok(Failed));
        assert_eq!(check(PolicyId::Crosscheck, &[103]), Err("unknown reason code 103 for vp.crosscheck.v1".into()));
        assert_eq!(check(PolicyId::SchemaOnly, &[4242]), Ok(Failed));
        assert_eq!(check(PolicyId::SchemaOnly, &[0, 999, 203]), Ok(Failed));
        assert_eq!(check(PolicyId::SchemaOnly, &[300]), Err("unknown reason code 300 for vp.schema_only.v1".into()));
    }

    #[test]
    fn inconclusive_needs_an_evidence_code() {
        let r = response(Some(Inconclusive), false, 0.0, &[101, 203]);
        let err = check_verify_answer(&r, PolicyId::SchemaOnly, &failing()).unwrap_err();
        assert_eq!(err, "inconclusive requires reason code 200, 201 or 202");
        let r = response(Some(Inconclusive), false, 0.0, &[101, 202]);
        assert_eq!(check_verify_answer(&r, PolicyId::SchemaOnly, &failing()), Ok(Inconclusive));
    }

    #[test]
    fn passed_must_agree_with_the_kernels_own_evaluation() {
        let r = response(Some(Passed), true, 1.0, &[100]);
        let err = check_verify_answer(&r, PolicyId::SchemaOnly, &failing()).unwrap_err();
        assert_eq!(err, "verifier passed flag mismatch");
        let stricter = response(Some(Failed), false, 0.0, &[101]);
        assert_eq!(check_verify_answer(&stricter, PolicyId::SchemaOnly, &passing()), Ok(Failed));
    }

    #[test]
    fn the_local_evaluation_is_the_policys() {
        let output = json!({"answer": 42});
        let local = evaluate(PolicyId::SchemaOnly, &output, &default_output_schema(), &json!({}));
        let r = response(None, true, 1.0, &[100]);
        assert_eq!(check_verify_answer(&r, PolicyId::SchemaOnly, &local), Err("verifier passed flag mismatch".into()));
    }

    #[test]
    fn the_recorded_result_must_fit_64_kib() {
        let mut r = response(Some(Failed), false, 0.0, &[101]);
        r.verifier_result_hash = "h".repeat(MAX_STRUCTURED_SUMMARY_BYTES);
        let err = check_verify_answer(&r, PolicyId::SchemaOnly, &failing()).unwrap_err();
        assert!(err.starts_with("verifier result is ") && err.ends_with(" bytes, over 65536"), "{err}");
        r.verifier_result_hash = "h".repeat(MAX_STRUCTURED_SUMMARY_BYTES - 400);
        assert_eq!(check_verify_answer(&r, PolicyId::SchemaOnly, &failing()), Ok(Failed));
    }

    #[test]
    fn the_synthesized_inconclusive_result_is_valid() {
        for (timeout, code) in [(true, 201), (false, 200)] {
            let e = inconclusive(timeout);
            assert_eq!(e, Evaluation { passed: false, score: 0.0, reason_codes: vec![code] });
            let r = response(Some(Inconclusive), e.passed, e.score, &e.reason_codes);
            for policy in PolicyId::ALL {
                assert_eq!(check_verify_answer(&r, policy, &failing()), Ok(Inconclusive));
            }
        }
    }
}
