//! Budgets (issue 54, part 2): missions' own (`aiwg_domain::budget`) and standing ones
//! (`aiwg_domain::standing`, `standing.rs`).
//!
//! A mission's tokens and cost are judged by ingestion, under the ledger's lock, with the usage report
//! that raised them (`services::ingest`): a mission without a budget costs nothing more there. Its
//! duration is judged here: one task, like the timeouts', looks at the live missions whose budget has a
//! duration mark still to cross (in memory, no store read), crosses what is due as the report would
//! (the warning recorded, the budget's marks kept), and sleeps until the next mark, at most
//! [`LOOK_AGAIN`]. A mission's marks are kept in the store with it, so that a restart warns and exhausts
//! each limit once. An operator raises a mission's budget here (`PATCH /api/v1/missions/{id}/budget`).
//! The same look reads the standing budgets' spend (`standing.rs`) and pauses or aborts the live
//! missions of a scope that ran out, once a period (again after a restart, which leaves a paused one
//! as it is).

mod standing;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::controls::Controls;
use super::ledger::{Decided, Ledger, REBUILD_WAIT};
use super::registry::Registry;
use super::Core;
use crate::error::{Error, Result};
use crate::store::{Change, Store};
use aiwg_domain::budget;
use aiwg_domain::usage::Scope;
pub(crate) use standing::{NewStanding, Standings};

/// The longest sleep between two looks at the durations: a mission handed out meanwhile is seen within it.
const LOOK_AGAIN: Duration = Duration::from_secs(1);
/// The shortest: marks close together are crossed by one look.
const LOOK_SOONEST: Duration = Duration::from_millis(20);

/// Missions' budgets and standing budgets.
pub struct Budgets {
    ledger: Arc<Ledger>,
    store: Store,
    registry: Arc<Registry>,
    /// Pauses or aborts a mission whose budget ran out.
    controls: Arc<Controls>,
    pub standings: Arc<Standings>,
    /// The standing budgets and periods whose missions were acted on (each once a period).
    acted: Mutex<HashSet<(String, String)>>,
    shutdown: watch::Receiver<bool>,
}

impl Budgets {
    pub(crate) fn new(
        core: &Core,
        controls: Arc<Controls>,
        standings: Arc<Standings>,
        shutdown: watch::Receiver<bool>,
    ) -> Budgets {
        let (ledger, store, registry) = (core.ledger.clone(), core.store.clone(), core.registry.clone());
        Budgets { ledger, store, registry, controls, standings, acted: Mutex::default(), shutdown }
    }

    /// Starts the task that crosses missions' duration marks.
    pub fn start(self: &Arc<Self>) {
        let budgets = Arc::clone(self);
        let mut shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = budgets.enforce().await {
                    tracing::warn!(error = %e, "standing budgets: cannot read their spend");
                }
                let wait = budgets.look().await;
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = shutdown.changed() => return,
                }
            }
        });
    }

    /// Crosses the duration marks that are due; how long until the next.
    async fn look(&self) -> Duration {
        let now = aiwg_contract::clock::now();
        let mut soonest = now + LOOK_AGAIN;
        for (mission_id, at) in self.ledger.duration_marks() {
            if at <= now {
                self.cross_clock(&mission_id).await;
            } else {
                soonest = soonest.min(at);
            }
        }
        (soonest - aiwg_contract::clock::now()).to_std().unwrap_or_default().max(LOOK_SOONEST)
    }

    /// Records what the clock crossed of a mission's budget, and acts on its exhaustion.
    async fn cross_clock(&self, mission_id: &str) {
        let now = aiwg_contract::clock::now();
        let Ok(slot) = self.store.reserve().await else { return };
        let decided = self.ledger.decide(mission_id, |live| {
            let Some(c) = budget::on_clock(live, mission_id, now) else { return (None, None) };
            let undo = live.undo_point();
            let mut changes: Vec<Change> = c.warnings.iter().cloned().map(Change::AppendEvent).collect();
            changes.push(Change::budget(mission_id, &c.watch));
            let commit = slot.submit(changes);
            live.budget_crossed(c.crossing);
            (Some((commit, c.exhausted())), Some(undo))
        });
        let Decided::Done((Some((commit, exhausted)), Some(ticket))) = decided else { return };
        if let Err(e) = self.ledger.conclude(commit, ticket, None).await {
            return tracing::warn!(error = %e, mission_id, "a mission's budget duration was not recorded");
        }
        if let Some((limit, policy)) = exhausted {
            self.controls.exhaust(mission_id, limit.as_str(), policy).await;
        }
    }

    /// Raises a live mission's budget (`raise`: the limits it names, validated by `$defs/budget_raise`),
    /// kept before it is answered; the budget as it now stands. A mission paused for its budget can then
    /// be resumed.
    pub async fn raise(&self, mission_id: &str, raise: &Value) -> Result<Value> {
        let now = aiwg_contract::clock::now();
        if !self.ledger.rebuilt(mission_id, REBUILD_WAIT).await {
            return Err(Error::StorageUnavailable("the mission is being re-read from the store; try again".into()));
        }
        let slot = self.store.reserve().await?;
        let decided = self.ledger.decide(mission_id, |live| {
            let Some(w) = live.budget() else {
                let why = format!("mission {mission_id} was dispatched without a budget: there is none to raise");
                return (Err(Error::InvalidBudget(why)), None);
            };
            let raised = match w.budget.raised(raise) {
                Ok(b) => w.raised(b, w.spend(live.usage()), w.elapsed_ms(now)),
                Err(why) => return (Err(Error::InvalidBudget(why)), None),
            };
            let undo = live.undo_point();
            let commit = slot.submit(vec![Change::budget(mission_id, &raised)]);
            let view = raised.view();
            live.rebudgeted(raised);
            (Ok((commit, view)), Some(undo))
        });
        match decided {
            Decided::Done((Ok((commit, view)), Some(ticket))) => {
                self.ledger.conclude(commit, ticket, None).await?;
                Ok(view)
            }
            Decided::Done((Ok(_), None)) => unreachable!("a queued raise has an undo point"),
            Decided::Done((Err(e), _)) => Err(e),
            Decided::Rebuilding => Err(Error::StorageUnavailable("the mission is being re-read; try again".into())),
            Decided::NotLive => match self.store.mission(mission_id).await? {
                Some(m) => Err(Error::Conflict(format!(
                    "mission {mission_id} is {}: only a live mission's budget is raised",
                    m.state
                ))),
                None => Err(Error::NotFound(format!("mission {mission_id} not found"))),
            },
        }
    }

    /// Pauses or aborts, as its policy says, every live mission a newly exhausted standing budget binds,
    /// once a period.
    async fn enforce(&self) -> Result<()> {
        let now = self.standings.now();
        for (s, limit) in self.standings.exhausted_now().await? {
            let period = (s.id.clone(), s.window(now).first_day.to_string());
            if !self.acted.lock().expect("acted lock").insert(period) {
                continue;
            }
            tracing::info!(budget = %s.id, scope = %s.scope.as_text(), limit, "standing budget exhausted");
            for (mission_id, executor_id) in self.ledger.live_owners() {
                let name = self.registry.name(&executor_id).unwrap_or_default();
                let operator = match s.scope {
                    Scope::Operator(_) => self.store.mission(&mission_id).await?.and_then(|m| m.dispatched_by),
                    _ => None,
                };
                if s.binds(operator.as_deref(), (&executor_id, &name)) {
                    self.controls.exhaust(&mission_id, limit, s.on_exhausted).await;
                }
            }
        }
        Ok(())
    }
}
