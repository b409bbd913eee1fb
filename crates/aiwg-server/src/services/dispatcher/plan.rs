//! `POST /api/v1/dispatch/plan`: where a dispatch would go now and why the other executors would not
//! take it, with nothing stored and nothing forwarded (Nomad's `job plan`). It is routed exactly as a
//! dispatch is (readiness asked of the executors a dispatch would ask), so the answer is a dispatch's
//! as of this moment: the fleet may change before the dispatch is sent.

use serde::Serialize;
use serde_json::Value;

use super::{Dispatcher, Turn};
use crate::error::Error;
use aiwg_contract::DispatchPayload;

/// What a dispatch would do now.
#[derive(Debug, Serialize)]
pub(crate) struct Planned {
    pub outcome: Outcome,
    /// The executors it would be handed to in turn, the first unless it refuses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Candidate>,
    /// The routing record the mission would keep: the choice, and why each other executor was passed
    /// over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing: Option<Value>,
    /// Why it would wait in the queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_reason: Option<String>,
    /// The dispatch's answer if it were refused: its code and message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Refused>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Outcome {
    Assign,
    Queue,
    Refuse,
}

#[derive(Debug, Serialize)]
pub(crate) struct Candidate {
    pub executor_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Refused {
    pub code: &'static str,
    pub message: String,
}

impl Planned {
    /// A plan with nothing but its outcome, for the others to fill in.
    fn bare(outcome: Outcome) -> Planned {
        Planned { outcome, candidates: Vec::new(), routing: None, queued_reason: None, error: None }
    }

    fn refused(error: &Error) -> Planned {
        let error = Some(Refused { code: error.code(), message: error.to_string() });
        Planned { error, ..Planned::bare(Outcome::Refuse) }
    }
}

/// See the module. A mission id already used would be refused (`conflict`) by the dispatch.
pub(super) async fn plan(d: &Dispatcher, body: &Value, payload: &DispatchPayload) -> crate::error::Result<Planned> {
    let mission_id = &payload.mission_id;
    if d.ledger.contains(mission_id) || d.store.mission(mission_id).await?.is_some() {
        return Ok(Planned::refused(&Error::Conflict(format!("mission {mission_id} already exists"))));
    }
    if let Err(e) = Dispatcher::refuse_early(payload, body) {
        return Ok(Planned::refused(&e));
    }
    let (attempts, record) = match d.candidates(payload, Turn::Look).await {
        Ok(found) => found,
        Err(none) => {
            return Ok(match d.unplaced(payload, none) {
                Ok(reason) => Planned { queued_reason: Some(reason), ..Planned::bare(Outcome::Queue) },
                Err(e) => Planned::refused(&e),
            })
        }
    };
    let candidates = attempts
        .into_iter()
        .map(|executor_id| Candidate { name: d.registry.name(&executor_id), executor_id })
        .collect();
    let routing = Some(record.kept(&d.registry));
    Ok(Planned { candidates, routing, ..Planned::bare(Outcome::Assign) })
}
