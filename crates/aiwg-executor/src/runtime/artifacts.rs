//! What a mission produced, uploaded as its artifacts once its agent exited and before its end is sent
//! (`PUT /api/v1/missions/{id}/artifacts/{name}` with the executor's token): the patch of its work
//! ([`PATCH`], its branch's diff from where it started) and the files its `--artifacts` patterns match
//! in its working directory. A failed upload is logged; it never fails the mission.

use serde_json::Value;

use super::Executor;
use crate::glob;
use crate::worktrees::{Work, Workdir};
use aiwg_client::CallError;

/// The artifact name of a mission's patch.
pub(super) const PATCH: &str = "mission.patch";

impl Executor {
    pub(super) async fn upload_outputs(&self, mission_id: &str, dir: &Workdir, work: Option<&Work>) {
        let client = self.client();
        let patch = match work {
            Some(work) => self.worktrees.patch(dir, work).await,
            None => None,
        };
        if let Some(patch) = patch {
            uploaded(mission_id, PATCH, client.put_artifact_bytes(mission_id, PATCH, glob::mime(PATCH), patch).await);
        }
        if self.args.artifacts.is_empty() {
            return;
        }
        let (root, patterns) = (dir.path.clone(), self.args.artifacts.clone());
        let files = tokio::task::spawn_blocking(move || glob::find(&root, &patterns)).await.unwrap_or_default();
        for relative in files {
            let name = glob::artifact_name(&relative);
            let file = dir.path.join(&relative);
            uploaded(mission_id, &name, client.put_artifact_file(mission_id, &name, glob::mime(&name), &file).await);
        }
    }
}

fn uploaded(mission_id: &str, name: &str, answer: Result<Value, CallError>) {
    match answer {
        Ok(artifact) => tracing::debug!(mission_id, name, digest = ?artifact["digest"], "artifact uploaded"),
        Err(e) => tracing::warn!(mission_id, name, error = %e, "uploading an artifact failed; the mission goes on"),
    }
}
