//! The `/execute` answer made of a finished run: the end of the agent's stdout as the answer, the end of
//! its stderr as inline evidence, bounded so that the kernel always accepts the answer.

use std::process::ExitStatus;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::spawn::Completion;
use aiwg_wattswarm::checks::check_execute_answer;
use aiwg_wattswarm::wire::{EvidencePolicy, ExecuteResponse, InlineEvidence};

/// The answer's bound, well under the kernel's 64 KiB for a whole candidate output.
pub(super) const ANSWER_BYTES: usize = 16 * 1024;
/// The evidence's bound: the stderr tail is what says why a run failed.
pub(super) const EVIDENCE_BYTES: usize = 8 * 1024;

/// How the agent's process ended.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Exit {
    Code(i32),
    Signal(i32),
    /// Waiting for it failed; the process is lost to us.
    Unknown(String),
}

impl Exit {
    pub(super) fn of(status: std::io::Result<ExitStatus>) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(code), _) => Exit::Code(code),
                (None, signal) => Exit::Signal(signal.unwrap_or_default()),
            },
            Err(e) => Exit::Unknown(format!("waiting for it failed: {e}")),
        }
    }

    /// The code a shell would report: 128 + the signal for a killed process, -1 when unknown.
    fn code(&self) -> i32 {
        match self {
            Exit::Code(code) => *code,
            Exit::Signal(signal) => 128 + signal,
            Exit::Unknown(_) => -1,
        }
    }

    pub(super) fn succeeded(&self) -> bool {
        *self == Exit::Code(0)
    }
}

/// A finished run, as the answer reports it.
pub(super) struct Run {
    pub(super) adapter: &'static str,
    pub(super) exit: Exit,
    pub(super) elapsed_ms: u128,
    pub(super) stdout: Vec<u8>,
    pub(super) stderr: Vec<u8>,
    pub(super) completion: Option<Completion>,
    /// What the agent's CLI said it used (`adapters::Tally`).
    pub(super) usage: Option<Value>,
}

impl Run {
    /// The agent exited 0 and the completion check, when there was one, passed.
    pub(super) fn succeeded(&self) -> bool {
        self.exit.succeeded() && matches!(self.completion, None | Some(Completion::Met))
    }
}

/// The answer to `/execute`. Confidence is all or nothing: the runtime knows only whether the agent
/// (and the completion check) succeeded, not how good its answer is. The output holds only what the run
/// came to, never how long it took: runs that agree must produce the same output (serve's cross-checks
/// compare outputs by digest), so the time is evidence.
pub(super) fn build(run: &Run, policy: &EvidencePolicy) -> ExecuteResponse {
    let succeeded = run.succeeded();
    let stderr = tail_text(&run.stderr, EVIDENCE_BYTES);
    let took = format!("{} ran {} ms", run.adapter, run.elapsed_ms);
    let content = if stderr.is_empty() { took } else { format!("{took}\n{stderr}") };
    let answer = ExecuteResponse {
        candidate_output: json!({
            "answer": tail_text(&run.stdout, ANSWER_BYTES),
            "confidence": if succeeded { 1.0 } else { 0.0 },
            "check_summary": summary(run),
            "exit_code": run.exit.code(),
        }),
        evidence_inline: vec![InlineEvidence { mime: "text/plain".to_owned(), content }],
        evidence_refs: Vec::new(),
        usage: run.usage.clone(),
    };
    screened(answer, policy)
}

fn summary(run: &Run) -> String {
    let mut summary = format!("{} exited {}", run.adapter, run.exit.code());
    match &run.exit {
        Exit::Signal(signal) => summary.push_str(&format!(" (killed by signal {signal})")),
        Exit::Unknown(why) => summary.push_str(&format!(" ({why})")),
        Exit::Code(_) => {}
    }
    match run.completion.as_ref().map(Completion::failure) {
        Some(None) => summary.push_str("; completion check passed"),
        Some(Some(why)) => summary.push_str(&format!("; completion check failed: {why}")),
        None => {}
    }
    summary
}

/// The kernel refuses a whole proposal over one inline evidence it does not take (a mime the contract
/// does not allow, media in the agent's stderr). The evidence is dropped instead, and the summary says
/// why, so that the agent's answer still reaches the kernel.
fn screened(mut answer: ExecuteResponse, policy: &EvidencePolicy) -> ExecuteResponse {
    if let Err(rule) = check_execute_answer(&answer, policy) {
        answer.evidence_inline.clear();
        if let Some(Value::String(summary)) = answer.candidate_output.get_mut("check_summary") {
            summary.push_str(&format!("; stderr withheld: {rule}"));
        }
    }
    answer
}

/// Reads a stream to its end and keeps its last `limit` bytes: an agent may print without bound, and
/// only the end is answered (the agent's conclusion; the error that ended it).
pub(super) async fn read_tail(stream: Option<impl AsyncRead + Unpin>, limit: usize) -> Vec<u8> {
    let Some(mut stream) = stream else { return Vec::new() };
    let mut kept = Vec::new();
    let mut chunk = [0u8; 8192];
    while let Ok(n @ 1..) = stream.read(&mut chunk).await {
        kept.extend_from_slice(&chunk[..n]);
        // Trimmed at twice the bound, so that the copy is paid once per `limit` bytes read.
        if kept.len() > 2 * limit {
            kept.drain(..kept.len() - limit);
        }
    }
    kept.drain(..kept.len().saturating_sub(limit));
    kept
}

/// The end of an output as trimmed text that takes at most `limit` bytes as a JSON string: bounded
/// after escaping, so that control characters (six bytes each once escaped) cannot carry the candidate
/// output over the kernel's bound. Cut at a character boundary; a character the tail cut in two is
/// dropped rather than shown as a replacement.
pub(super) fn tail_text(bytes: &[u8], limit: usize) -> String {
    let cut_char = bytes.iter().take(3).take_while(|b| **b & 0xC0 == 0x80).count();
    let lossy = String::from_utf8_lossy(&bytes[cut_char..]);
    let text = lossy.trim();
    let mut budget = limit;
    let mut start = text.len();
    for (i, c) in text.char_indices().rev() {
        match budget.checked_sub(escaped_len(c)) {
            Some(left) => (budget, start) = (left, i),
            None => break,
        }
    }
    text[start..].trim_start().to_owned()
}

/// The bytes serde_json writes for a character inside a JSON string.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aiwg_wattswarm::policy::PolicyId;
    use aiwg_wattswarm::task::{default_output_schema, sample_contract};

    /// The kernel's default evidence policy, as its default contract carries it.
    fn policy() -> EvidencePolicy {
        let binding = PolicyId::SchemaOnly.binding(json!({}));
        sample_contract("task-1", json!({}), default_output_schema(), binding, 0).evidence_policy
    }

    fn run(exit: Exit, stdout: &[u8], stderr: &[u8], completion: Option<Completion>) -> Run {
        let (stdout, stderr) = (stdout.to_vec(), stderr.to_vec());
        Run { adapter: "shell", exit, elapsed_ms: 12, stdout, stderr, completion, usage: None }
    }

    #[test]
    fn a_successful_run_answers_its_stdout_with_full_confidence() {
        let answer = build(&run(Exit::Code(0), b"  hello\n", b"", None), &policy());
        assert_eq!(
            answer.candidate_output,
            json!({"answer": "hello", "confidence": 1.0, "check_summary": "shell exited 0", "exit_code": 0})
        );
        assert_eq!(
            answer.evidence_inline,
            [InlineEvidence { mime: "text/plain".into(), content: "shell ran 12 ms".into() }]
        );
        assert!(answer.evidence_refs.is_empty());
        check_execute_answer(&answer, &policy()).unwrap();
    }

    #[test]
    fn failures_have_no_confidence_and_say_how_they_ended() {
        let failed = build(&run(Exit::Code(3), b"", b"boom\n", None), &policy());
        assert_eq!(
            (failed.candidate_output["confidence"].as_f64(), failed.candidate_output["exit_code"].as_i64()),
            (Some(0.0), Some(3))
        );
        assert_eq!(failed.evidence_inline[0].content, "shell ran 12 ms\nboom");
        let killed = build(&run(Exit::Signal(9), b"", b"", None), &policy());
        assert_eq!(killed.candidate_output["check_summary"], "shell exited 137 (killed by signal 9)");
        let unmet = build(&run(Exit::Code(0), b"x", b"", Some(Completion::NotMet(1))), &policy());
        assert_eq!(unmet.candidate_output["confidence"], 0.0);
        assert_eq!(unmet.candidate_output["check_summary"], "shell exited 0; completion check failed: exit 1");
        let met = build(&run(Exit::Code(0), b"x", b"", Some(Completion::Met)), &policy());
        assert_eq!(met.candidate_output["confidence"], 1.0);
        assert!(met.candidate_output["check_summary"].as_str().unwrap().ends_with("; completion check passed"));
    }

    #[test]
    fn outputs_are_bounded_even_when_escaping_multiplies_them() {
        let controls = vec![0x01u8; 3 * ANSWER_BYTES];
        let answer = build(&run(Exit::Code(0), &controls, &vec![b'e'; 3 * EVIDENCE_BYTES], None), &policy());
        let text = answer.candidate_output["answer"].as_str().unwrap();
        assert!(serde_json::to_string(text).unwrap().len() <= ANSWER_BYTES + 2);
        assert_eq!(answer.evidence_inline[0].content.len(), "shell ran 12 ms\n".len() + EVIDENCE_BYTES);
        check_execute_answer(&answer, &policy()).unwrap();
    }

    #[test]
    fn escaped_lengths_are_serde_jsons() {
        for c in ['a', '"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}', '\u{1}', '\u{1f}', '\u{7f}', 'é', '€', '🦀']
        {
            assert_eq!(escaped_len(c) + 2, serde_json::to_string(&c.to_string()).unwrap().len(), "{c:?}");
        }
    }

    #[test]
    fn a_tail_cut_inside_a_character_drops_the_character() {
        let bytes = "é".repeat(10).into_bytes();
        assert_eq!(tail_text(&bytes[1..], 100), "é".repeat(9));
        assert_eq!(tail_text("aé".as_bytes(), 2), "é");
        assert_eq!(tail_text("abcé".as_bytes(), 3), "cé");
    }

    #[test]
    fn evidence_the_kernel_would_refuse_is_withheld_not_the_answer() {
        let mut csv_only = policy();
        csv_only.inline_mime_allowlist = vec!["text/csv".into()];
        let answer = build(&run(Exit::Code(0), b"hi", b"trace", None), &csv_only);
        assert!(answer.evidence_inline.is_empty());
        assert_eq!(answer.candidate_output["answer"], "hi");
        let summary = answer.candidate_output["check_summary"].as_str().unwrap();
        assert!(
            summary.ends_with("stderr withheld: evidence_inline[0]: mime text/plain is not in the inline allowlist"),
            "{summary}"
        );
        check_execute_answer(&answer, &csv_only).unwrap();
    }

    #[tokio::test]
    async fn read_tail_keeps_the_end_of_a_long_stream() {
        let long: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(read_tail(Some(&long[..]), 1000).await, long[long.len() - 1000..]);
        assert_eq!(read_tail(Some(&b"short"[..]), 1000).await, b"short");
        assert!(read_tail(None::<&[u8]>, 1000).await.is_empty());
    }
}
