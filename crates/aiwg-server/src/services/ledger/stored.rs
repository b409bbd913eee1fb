//! The projection as the store holds it: every live mission's at start, one mission's again after a
//! failed commit whose undo could not be trusted.

use std::collections::HashMap;

use super::missions::Missions;
use crate::store::{HitlOutcome, HitlRequest, Mission, MissionBudget, Store, StoreError};
use aiwg_domain::budget::{Spend, Watch};
use aiwg_domain::usage::Kept;
use aiwg_domain::{progress_key, Live, MissionState, Projection};

/// Every live mission's projection, read from the store at start: its state, session and attempt, its
/// pending HITL request, the keys of its latest progress reports and what its attempt keeps of its usage.
pub(super) async fn load(store: &Store) -> Result<Missions, StoreError> {
    let pending = store.open_hitl().await?.into_iter().filter(|h| h.outcome == HitlOutcome::Pending);
    let mut pending: HashMap<String, HitlRequest> = pending.map(|h| (h.mission_id.clone(), h)).collect();
    let mut usage: HashMap<String, Vec<Kept>> = HashMap::new();
    for row in store.kept_usage(None).await? {
        usage.entry(row.mission_id).or_default().push(row.kept);
    }
    let mut budgets = watches(store, store.mission_budgets(None).await?, &usage).await?;
    let mut live = Missions::default();
    for row in store.live_missions().await? {
        let hitl = pending.remove(&row.mission_id);
        let loaded = Live::loaded(&row.executor_id, row.state, row.pty_session_ref, hitl)
            .on_attempt(row.attempt)
            .with_usage(usage.remove(&row.mission_id).unwrap_or_default())
            .with_budget(budgets.remove(&row.mission_id));
        live.insert(row.mission_id, loaded);
    }
    for seen in store.recent_progress_of_live().await? {
        if let Some(e) = live.by_id.get_mut(&seen.mission_id) {
            e.live.remember_progress(seen.key);
        }
    }
    Ok(live)
}

/// The watches of missions' budgets as kept (`rows`), `current` being what their current attempts keep
/// of their usage: what their earlier attempts spent is their whole usage less that.
pub(crate) async fn watches(
    store: &Store,
    rows: Vec<MissionBudget>,
    current: &HashMap<String, Vec<Kept>>,
) -> Result<HashMap<String, Watch>, StoreError> {
    if rows.is_empty() {
        return Ok(HashMap::new());
    }
    let ids: Vec<String> = rows.iter().map(|r| r.mission_id.clone()).collect();
    let mut total: HashMap<String, Spend> = HashMap::new();
    for u in store.mission_usage(&ids).await? {
        let spend = Spend { tokens: u.sum.tokens.limited(), micros: u.sum.cost_micros };
        let entry = total.entry(u.mission_id).or_default();
        *entry = entry.plus(spend);
    }
    let watch = |r: MissionBudget| {
        let (all, now) = (total.get(&r.mission_id).copied().unwrap_or_default(), current.get(&r.mission_id));
        let now = Spend::of(now.into_iter().flatten());
        let earlier = Spend { tokens: all.tokens.saturating_sub(now.tokens), micros: all.micros - now.micros };
        (r.mission_id.clone(), r.watch(earlier))
    };
    Ok(rows.into_iter().map(watch).collect())
}

/// One mission as the store holds it, read again after a failed commit.
pub(super) struct Stored {
    mission: Option<Mission>,
    hitl: Option<HitlRequest>,
    progress: Vec<u64>,
    usage: Vec<Kept>,
    budget: Option<Watch>,
}

impl Stored {
    pub(super) async fn read(store: &Store, mission_id: &str) -> Result<Stored, StoreError> {
        let mission = store.mission(mission_id).await?;
        let hitl = store.pending_hitl(mission_id).await?;
        let progress = store.recent_progress(mission_id).await?;
        let usage: Vec<Kept> = store.kept_usage(Some(mission_id)).await?.into_iter().map(|u| u.kept).collect();
        let rows = store.mission_budgets(Some(&[mission_id.to_owned()])).await?;
        let current = HashMap::from([(mission_id.to_owned(), usage.clone())]);
        let budget = watches(store, rows, &current).await?.remove(mission_id);
        Ok(Stored {
            mission,
            hitl,
            progress: progress.iter().map(|(ts, data)| progress_key(ts, data)).collect(),
            usage,
            budget,
        })
    }

    /// Puts the stored projection in `live`; `false` when the mission is live no more (ended, queued
    /// again, gone).
    pub(super) fn restore(self, live: &mut Live) -> bool {
        let Some(m) = self.mission.filter(|m| !m.state.is_terminal() && m.state != MissionState::Queued) else {
            return false;
        };
        let projection = Projection {
            state: m.state,
            terminal_data: None,
            hitl: self.hitl,
            // Memory only: what a re-read cannot tell is assumed not to have happened.
            hitl_outlived: false,
            paused_from: None,
            session: m.pty_session_ref,
            usage: self.usage,
            budget: self.budget.map(Box::new),
            progress: None,
        };
        live.rebuilt(projection, self.progress);
        true
    }
}
