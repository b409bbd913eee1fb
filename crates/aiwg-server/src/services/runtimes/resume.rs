//! A drive's plan, recorded before its first call (`mission.progress {phase: "executing", contract_ms,
//! executions}`), and the runtime missions that were being driven when serve stopped, driven again when
//! it starts on the plan recorded for them: each execution under its `execution_id` and the same task
//! contract, so that a runtime still running (or done with) one joins it instead of running its side
//! effects twice, and a cross-check goes on on all of its runtimes. A mission whose drive had recorded
//! no plan yet had called nothing: driven from the start.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::Runtimes;
use crate::error::Result;
use crate::services::ledger::Verdict;
use crate::store::EventQuery;
use aiwg_contract::{DispatchPayload, EventType};
use aiwg_domain::runtime_task::Settlement;
use aiwg_domain::{Live, MissionState, ServeEvent};

/// Events of a mission read for its recorded executions: a runtime mission has a handful.
const READ: u32 = 1_000;
/// And at most this much of their data (a candidate's output is at most 64 KiB per execution).
const READ_BYTES: usize = 16 << 20;

/// The `phase` of the progress event that records a drive's executions before their first call.
const PLANNED: &str = "executing";

/// An execution of a mission on one runtime, with the `execution_id` it is sent under.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Planned {
    pub(super) executor_id: String,
    pub(super) execution_id: String,
}

/// A drive's plan, recorded before its first call: its executions, and when its task contract was made
/// (the contract's expiry counts from it), so that a drive after a restart sends identical requests,
/// which a runtime takes for re-sends of the same executions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Plan {
    pub(super) contract_ms: u64,
    pub(super) executions: Vec<Planned>,
}

impl Runtimes {
    /// Drives again every mission a runtime owned when serve stopped.
    pub(super) async fn resume_missions(self: &Arc<Self>) -> Result<()> {
        for view in self.registry.runtimes() {
            for mission_id in self.ledger.owned_by(&view.id) {
                let Some(mission) = self.store.mission(&mission_id).await? else { continue };
                let recorded = self.recorded_plan(&mission_id).await?;
                let payload: Option<DispatchPayload> = serde_json::from_value(mission.payload.clone()).ok();
                if recorded.is_none() && payload.is_some_and(|p| p.executions() > 1) {
                    // Stopped between its assignment and the record of its plan: which other runtimes
                    // it was given is not known (it called none of them yet).
                    let settlement = Settlement::Failed {
                        reason: "serve_restarted",
                        error: "serve restarted before the cross-check's runtimes were recorded; dispatch it again"
                            .into(),
                    };
                    self.conclude(&mission_id, &view.id, settlement, Vec::new()).await;
                    continue;
                }
                tracing::info!(%mission_id, runtime = view.name, resumed = recorded.is_some(),
                               "driving a runtime mission again after a restart");
                self.drive(&mission_id, &mission.payload, vec![view.id.clone()], recorded);
            }
        }
        Ok(())
    }

    /// The plan recorded for a mission's drive before its first call (none: it had called nothing).
    async fn recorded_plan(&self, mission_id: &str) -> Result<Option<Plan>> {
        let query = EventQuery::after(0, READ).mission(Some(mission_id)).bytes(READ_BYTES);
        let page = self.store.events_after(query).await?;
        Ok(page.events.iter().rev().find_map(|e| {
            let data = e.envelope.data.as_ref()?;
            let planned = e.envelope.event == EventType::MissionProgress.as_str()
                && data.get("phase").and_then(Value::as_str) == Some(PLANNED);
            planned.then(|| serde_json::from_value::<Plan>(data.clone()).ok()).flatten()
        }))
    }

    /// A drive's plan, recorded before the first call (`mission.progress {phase: "executing",
    /// contract_ms, executions}`): a drive after a restart follows it.
    pub(super) async fn plan(&self, mission_id: &str, owner: &str, runtimes: &[String]) -> Plan {
        let executions = runtimes
            .iter()
            .map(|r| Planned { executor_id: r.clone(), execution_id: format!("exec-p-{}", uuid::Uuid::new_v4()) })
            .collect();
        let plan = Plan { contract_ms: now_ms(), executions };
        let names: Vec<String> = runtimes.iter().map(|r| self.registry.name(r).unwrap_or_default()).collect();
        let mut data = json!({"phase": PLANNED, "summary": format!("executing on {}", names.join(", "))});
        data.as_object_mut().expect("an object").extend(json!(plan).as_object().expect("an object").clone());
        let said = ServeEvent::Runtime { event: EventType::MissionProgress, data };
        let assigned = |live: &Live| (live.state() == MissionState::Assigned).then(|| Verdict::new(said, live.state()));
        let _ = self.ledger.transition_as_serve(owner, mission_id, assigned).await;
        plan
    }
}

/// The time now in milliseconds, as the protocol's contracts and refs carry it.
pub(super) fn now_ms() -> u64 {
    u64::try_from(aiwg_contract::clock::now().timestamp_millis()).unwrap_or_default()
}
