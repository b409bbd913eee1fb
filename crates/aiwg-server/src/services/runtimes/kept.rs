//! What a runtime's run produced, kept as any executor's is: its candidate output, inline evidence and
//! verdict in the mission's log (a runtime has no stdout; this is what it said), its output as an
//! artifact whose bytes are the ones its `output_ref` names, and its evidence refs as artifacts serve
//! holds no bytes of (their producer keeps them at their `uri`). Nothing here can fail the mission: a
//! store that refuses is logged, the drive goes on.

use aiwg_contract::log::Stream;
use aiwg_domain::artifacts::ArtifactRecord;
use aiwg_wattswarm::wire::{ArtifactRef, Candidate, VerifyResponse};

use super::Runtimes;
use crate::services::artifacts::download_path;

impl Runtimes {
    /// After `/execute`: the candidate in the log, its output and evidence refs as artifacts.
    pub(super) async fn keep_execution(&self, mission_id: &str, runtime: &str, candidate: &Candidate) {
        let out = &candidate.output_ref;
        let mut text = format!(
            "[{runtime}] /execute {}: candidate {} ({} bytes)\n{}\n",
            candidate.execution_id,
            out.digest,
            out.size_bytes,
            serde_json::to_string_pretty(&candidate.output).unwrap_or_default()
        );
        for (i, e) in candidate.evidence_inline.iter().enumerate() {
            text.push_str(&format!("[{runtime}] evidence {i} ({}):\n{}\n", e.mime, e.content));
        }
        for r in &candidate.evidence_refs {
            text.push_str(&format!("[{runtime}] evidence {} {} ({} bytes)\n", r.uri, r.digest, r.size_bytes));
        }
        self.log(mission_id, &text).await;
        // The bytes `output_ref` names, as a kernel makes them.
        let bytes = aiwg_wattswarm::hash::json_bytes(&candidate.output);
        let name = format!("output-{runtime}.json");
        let output = record(mission_id, &name, out, runtime, Some(download_path(mission_id, &name)));
        let kept = self.outputs.artifacts.keep(output, Some(bytes)).await;
        let refs = candidate.evidence_refs.iter().enumerate().map(|(i, r)| {
            let name = format!("evidence-{runtime}-{i}");
            record(mission_id, &name, r, &r.producer, None)
        });
        let mut failed = kept.err();
        for evidence in refs {
            failed = failed.or(self.outputs.artifacts.keep(evidence, None).await.err());
        }
        if let Some(e) = failed {
            tracing::warn!(mission_id, runtime, error = %e, "a runtime's output was not kept as the mission's artifacts");
        }
    }

    /// After `/verify`: the verdict in the log.
    pub(super) async fn keep_verdict(&self, mission_id: &str, runtime: &str, verdict: &VerifyResponse) {
        let text = format!(
            "[{runtime}] /verify: passed {}, score {}, reason codes {:?}\n",
            verdict.passed, verdict.score, verdict.reason_codes
        );
        self.log(mission_id, &text).await;
    }

    async fn log(&self, mission_id: &str, text: &str) {
        if let Err(e) = self.outputs.logs.append(mission_id, Stream::Stdout, text.as_bytes()).await {
            tracing::warn!(mission_id, error = %e, "a runtime's output was not kept in the mission's log");
        }
    }
}

/// An artifact as a runtime's `ArtifactRef` describes it; `uri` serve's own route when serve keeps the
/// bytes.
fn record(mission_id: &str, name: &str, r: &ArtifactRef, producer: &str, uri: Option<String>) -> ArtifactRecord {
    let created_at =
        chrono::DateTime::from_timestamp_millis(r.created_at as i64).unwrap_or_else(aiwg_contract::clock::now);
    ArtifactRecord {
        mission_id: mission_id.to_owned(),
        name: name.to_owned(),
        uri: uri.unwrap_or_else(|| r.uri.clone()),
        digest: r.digest.clone(),
        size_bytes: r.size_bytes,
        mime: r.mime.clone(),
        created_at,
        producer: producer.to_owned(),
    }
}
