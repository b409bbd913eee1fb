//! What the ledger holds of live missions' budgets (`aiwg_domain::budget`): the next mark of each
//! duration, and the watch a hand-out starts from.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::{stored, Ledger};
use crate::store::{Store, StoreError};
use aiwg_domain::budget::{Spend, Watch};

impl Ledger {
    /// Each live mission whose budget's duration has a mark still to cross, with when it is due.
    /// A walk of the live missions, without a store read, for the budgets' timer.
    pub(crate) fn duration_marks(&self) -> Vec<(String, DateTime<Utc>)> {
        let live = self.lock();
        let marked = live.by_id.iter().filter(|(_, e)| !e.rebuild && !e.live.state().is_terminal());
        marked.filter_map(|(id, e)| Some((id.clone(), e.live.budget()?.next_duration_mark()?))).collect()
    }

    /// Every live mission that has not ended, with its owner (a standing budget that ran out walks them).
    pub(crate) fn live_owners(&self) -> Vec<(String, String)> {
        let live = self.lock();
        let going = live.by_id.iter().filter(|(_, e)| !e.live.state().is_terminal());
        going.map(|(id, e)| (id.clone(), e.live.executor_id().to_owned())).collect()
    }
}

/// The watch of a mission's budget as kept, for attempt `attempt` about to be handed out (which keeps
/// no usage yet: what every earlier attempt spent counts); `None` when it has no budget.
pub(crate) async fn kept_watch(store: &Store, mission_id: &str, attempt: u32) -> Result<Option<Watch>, StoreError> {
    let rows = store.mission_budgets(Some(&[mission_id.to_owned()])).await?;
    if attempt <= 1 {
        return Ok(rows.into_iter().next().map(|r| r.watch(Spend::default())));
    }
    Ok(stored::watches(store, rows, &HashMap::new()).await?.remove(mission_id))
}
