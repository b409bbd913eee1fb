//! A mission whose budget ran out (`aiwg_domain::budget`): paused where its executor can pause and its
//! policy says so, aborted otherwise, as serve's own verdict, and its executor told.

use super::Controls;
use crate::services::ledger::Verdict;
use aiwg_contract::clock;
use aiwg_domain::budget::OnExhausted;
use aiwg_domain::capabilities::Ability;
use aiwg_domain::{on_control, Control, Live, MissionState, ServeEvent};

impl Controls {
    /// Pauses or aborts a live mission whose budget's `limit` (`tokens`, `cost`, `duration`) ran out
    /// (reason `budget_exhausted`, naming the limit), as `policy` says. Paused only where the policy is
    /// `pause` and the executor declares `x-pause-resume` and is connected: a pause nobody carries out
    /// would let the agent spend on. Nothing happens to a mission that ended, or is paused already.
    pub async fn exhaust(&self, mission_id: &str, limit: &'static str, policy: OnExhausted) {
        let judge = |live: &Live| {
            let owner = self.facts(live);
            let pausable = policy == OnExhausted::Pause
                && owner.abilities.pause_resume == Ability::Declared
                && owner.connected
                && on_control(live.state(), Control::Pause).is_some();
            let to = if pausable { MissionState::Paused } else { MissionState::Aborted };
            let settled = live.state().is_terminal() || (live.state() == MissionState::Paused && pausable);
            (!settled).then(|| Verdict::new(ServeEvent::OverBudget { to, limit }, to))
        };
        let moved = match self.ledger.serve_decides_one(None, mission_id, judge).await {
            Ok(Some(moved)) => moved,
            Ok(None) => return,
            Err(e) => return tracing::warn!(error = %e, mission_id, "a mission's exhausted budget was not acted on"),
        };
        tracing::info!(mission_id, limit, to = %moved.to, "mission budget exhausted");
        let said = ServeEvent::OverBudget { to: moved.to, limit };
        self.registry.send(&moved.executor_id, said.frame(&moved.executor_id, mission_id, clock::now()));
        if moved.to.is_terminal() {
            self.unwatch(mission_id, None, true);
        }
    }
}
