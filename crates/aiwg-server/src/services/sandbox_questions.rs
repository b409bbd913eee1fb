//! HITL questions an agentic-sandbox relays on its sandbox socket (`hitl_input_required`), raised on
//! their mission when the executor's own `mission.hitl_required` does not follow.
//!
//! After every restart of serve the sandbox's executor loses one event: the forwarder of the socket
//! serve closed takes one queued event and drops it, sometimes a HITL question. The question still
//! arrives intact on the sandbox socket, and the sandbox matches an answer by `hitl_id` alone, so serve
//! raises it itself ([`QUESTION_WAIT`] after the frame, unless the mission's log has it by then): the
//! operator sees it, and the answer reaches the agent. The mission is the one bound to a session on the
//! asking agent, else the executor's only live mission; a question that fits several is left alone.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{watch, Semaphore};

use super::ingest::Ingest;
use super::ledger::Ledger;
use super::sandboxes::Sandboxes;
use super::Core;
use crate::store::{Store, StoreError};
use aiwg_contract::EventType;
use aiwg_domain::sandbox_sessions::Question;

/// How long the executor's own `mission.hitl_required` has to follow the sandbox's frame (in the real
/// sandbox's traffic the two arrive within milliseconds, either first).
pub(crate) const QUESTION_WAIT: Duration = Duration::from_secs(1);
/// Relayed questions being looked after at once; beyond, the sandbox's queue fills and drops them.
const LOOKED_AFTER: usize = 256;

/// Raises the questions sandboxes relay that their executors did not ask.
pub(crate) struct SandboxQuestions {
    ingest: Arc<Ingest>,
    sandboxes: Arc<Sandboxes>,
    ledger: Arc<Ledger>,
    store: Store,
}

impl SandboxQuestions {
    pub(crate) fn new(core: &Core, ingest: Arc<Ingest>, sandboxes: Arc<Sandboxes>) -> SandboxQuestions {
        SandboxQuestions { ingest, sandboxes, ledger: core.ledger.clone(), store: core.store.clone() }
    }

    /// Looks after every question the sandboxes relay, until serve stops.
    pub(crate) fn listen(self, mut shutdown: watch::Receiver<bool>) {
        let Some(mut questions) = self.sandboxes.questions() else { return };
        let this = Arc::new(self);
        let room = Arc::new(Semaphore::new(LOOKED_AFTER));
        tokio::spawn(async move {
            loop {
                let question = tokio::select! {
                    q = questions.recv() => q,
                    _ = shutdown.changed() => return,
                };
                let (Some(question), Ok(permit)) = (question, room.clone().acquire_owned().await) else { return };
                let this = Arc::clone(&this);
                tokio::spawn(async move {
                    tokio::time::sleep(QUESTION_WAIT).await;
                    this.look_after(question).await;
                    drop(permit);
                });
            }
        });
    }

    /// Raises the question on its mission, unless the executor asked it meanwhile.
    async fn look_after(&self, question: Question) {
        let (Some(hitl_id), Some(data)) = (question.hitl_id(), question.data()) else { return };
        let executor_id = question.executor_id.as_str();
        let Some(mission_id) = self.asker(&question) else {
            return tracing::info!(executor_id, hitl_id, "a relayed HITL question fits no single live mission");
        };
        match self.asked(&mission_id, hitl_id).await {
            Ok(false) => {}
            Ok(true) => return,
            Err(e) => return tracing::warn!(error = %e, %mission_id, "cannot read whether a question was asked"),
        }
        match self.ingest.raise_hitl(executor_id, &mission_id, &data).await {
            Ok(true) => tracing::info!(%mission_id, hitl_id, "HITL question raised from the sandbox's frame"),
            Ok(false) => {}
            Err(e) => tracing::info!(%mission_id, hitl_id, error = %e, "a relayed HITL question was not raised"),
        }
    }

    /// The mission that asks: the one bound to a session on the asking agent, else the executor's only
    /// live mission.
    fn asker(&self, question: &Question) -> Option<String> {
        let executor_id = &question.executor_id;
        let on_agent = question.agent_id.as_deref().map(|a| self.sandboxes.agent_missions(executor_id, a));
        let candidates = match on_agent {
            Some(missions) if !missions.is_empty() => missions,
            _ => self.ledger.owned_by(executor_id),
        };
        let [only] = candidates.as_slice() else { return None };
        Some(only.clone())
    }

    /// Whether the mission's log has the question already (its executor asked it).
    async fn asked(&self, mission_id: &str, hitl_id: &str) -> Result<bool, StoreError> {
        let steps = self.store.lifecycle(mission_id).await?;
        Ok(steps.iter().any(|e| {
            e.envelope.event == EventType::MissionHitlRequired.as_str()
                && e.envelope.data.as_ref().and_then(|d| d.get("hitl_id")).and_then(Value::as_str) == Some(hitl_id)
        }))
    }
}
