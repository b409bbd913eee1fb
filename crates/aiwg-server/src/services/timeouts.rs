//! Missions' timeouts (`aiwg_domain::timeouts`): schedule-to-start, start-to-close and heartbeat.
//!
//! No timer is kept, in memory or in the store: each deadline is computed from what the store already
//! holds (a mission's state, when it was dispatched, when it was last heard of, its lifecycle events),
//! so that a restart, or the replica that takes over, finds every deadline where it was and fires what
//! came due meanwhile. One task (on the leading replica: the services run only there) looks at the
//! missions that have not ended, fires what is due, and sleeps until the next deadline (at most
//! [`LOOK_AGAIN`], for missions dispatched meanwhile). A firing is serve's verdict on the mission,
//! judged again under the ledger's lock (it may have started, or ended, since its clocks were read), so
//! it moves the mission once or not at all, and it is an event in the log with the timeout as its
//! reason; the executor is then told to abort the mission.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::dispatcher::Dispatcher;
use super::ledger::{Ledger, Verdict};
use super::registry::Registry;
use super::sandboxes::Sandboxes;
use super::Core;
use crate::store::{EventQuery, MissionClock, Store, StoreError};
use aiwg_contract::clock;
use aiwg_contract::{DispatchTimeouts, EventType};
use aiwg_domain::capabilities::{Abilities, Ability};
use aiwg_domain::timeouts::{self, Expiry, Limits, Ran, Seen};
use aiwg_domain::{AbortedBy, MissionState, ServeEvent};

/// The longest sleep between two looks: a mission dispatched meanwhile is first seen within this.
const LOOK_AGAIN: Duration = Duration::from_secs(1);
/// The shortest: deadlines that close together are fired by one look.
const LOOK_SOONEST: Duration = Duration::from_millis(20);
/// A mission's lifecycle events read at once to count how long it ran.
const LIFECYCLE_PAGE: u32 = 1_000;

/// Watches the timeouts of every mission that has not ended, and fires them.
pub struct Timeouts {
    ledger: Arc<Ledger>,
    registry: Arc<Registry>,
    store: Store,
    /// A queued mission's schedule-to-start timeout takes it out of the dispatcher's queue.
    dispatcher: Arc<Dispatcher>,
    /// Which executors are agentic-sandbox executors (they act on no abort).
    sandboxes: Arc<Sandboxes>,
    /// The configuration's `[timeouts]`: what a dispatch leaves out.
    defaults: Limits,
    /// Each mission's limits once read from its dispatch, and how long it ran when last counted.
    watched: Mutex<HashMap<String, Watched>>,
    shutdown: watch::Receiver<bool>,
}

#[derive(Clone, Copy)]
struct Watched {
    limits: Limits,
    ran: Option<Ran>,
}

impl Timeouts {
    pub(crate) fn new(
        core: &Core,
        dispatcher: Arc<Dispatcher>,
        sandboxes: Arc<Sandboxes>,
        defaults: Limits,
        shutdown: watch::Receiver<bool>,
    ) -> Timeouts {
        Timeouts {
            ledger: core.ledger.clone(),
            registry: core.registry.clone(),
            store: core.store.clone(),
            dispatcher,
            sandboxes,
            defaults,
            watched: Mutex::default(),
            shutdown,
        }
    }

    /// Starts the task that fires the timeouts.
    pub fn start(self: &Arc<Self>) {
        let timeouts = Arc::clone(self);
        let mut shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            loop {
                let wait = match timeouts.look().await {
                    Ok(wait) => wait,
                    Err(e) => {
                        tracing::warn!(error = %e, "mission timeouts: cannot read the missions' clocks");
                        LOOK_AGAIN
                    }
                };
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = shutdown.changed() => return,
                }
            }
        });
    }

    /// One look at every mission that has not ended: fires what is due, and says how long until the
    /// next deadline.
    async fn look(&self) -> Result<Duration, StoreError> {
        let clocks = self.store.mission_clocks().await?;
        self.watched.lock().expect("watched lock").retain(|id, _| clocks.iter().any(|c| &c.mission_id == id));
        let mut soonest = clock::now() + LOOK_AGAIN;
        for MissionClock { mission_id, seen } in clocks {
            let Some(watched) = self.watched(&mission_id).await? else { continue };
            match self.due(&mission_id, &seen, watched).await? {
                Due::Now(expiry) => self.fire(&mission_id, seen.state, expiry).await,
                Due::At(at) => soonest = soonest.min(at),
                Due::Never => {}
            }
        }
        Ok((soonest - clock::now()).to_std().unwrap_or_default().max(LOOK_SOONEST))
    }

    /// A mission's limits (its dispatch read once; `None` when it has none).
    async fn watched(&self, mission_id: &str) -> Result<Option<Watched>, StoreError> {
        if let Some(w) = self.watched.lock().expect("watched lock").get(mission_id) {
            return Ok(Some(*w).filter(|w| !w.limits.is_none()));
        }
        let Some(mission) = self.store.mission(mission_id).await? else { return Ok(None) };
        let asked =
            mission.payload.get("timeouts").and_then(|t| serde_json::from_value::<DispatchTimeouts>(t.clone()).ok());
        let watched = Watched { limits: Limits::of(asked.as_ref(), self.defaults), ran: None };
        self.watched.lock().expect("watched lock").insert(mission_id.to_owned(), watched);
        Ok(Some(watched).filter(|w| !w.limits.is_none()))
    }

    /// What is due of a mission's timeouts. A start-to-close deadline that came is checked against the
    /// mission's lifecycle, counted again: a pause since the last count moved it later.
    async fn due(&self, mission_id: &str, seen: &Seen, watched: Watched) -> Result<Due, StoreError> {
        let now = clock::now();
        let Some((at, expiry)) = timeouts::next(&watched.limits, seen, watched.ran.as_ref()) else {
            return Ok(Due::Never);
        };
        if at > now {
            return Ok(Due::At(at));
        }
        if expiry != Expiry::StartToClose {
            return Ok(Due::Now(expiry));
        }
        let ran = self.ran(mission_id).await?;
        if let Some(w) = self.watched.lock().expect("watched lock").get_mut(mission_id) {
            w.ran = Some(ran);
        }
        Ok(match timeouts::next(&watched.limits, seen, Some(&ran)) {
            Some((at, expiry)) if at <= now => Due::Now(expiry),
            Some((at, _)) => Due::At(at),
            None => Due::Never,
        })
    }

    /// How long the mission has run, from its lifecycle events.
    async fn ran(&self, mission_id: &str) -> Result<Ran, StoreError> {
        let mut steps = Vec::new();
        let mut after = 0;
        loop {
            let page = self
                .store
                .events_after(EventQuery::after(after, LIFECYCLE_PAGE).mission(Some(mission_id)).lifecycle())
                .await?;
            after = page.events.last().map_or(after, |e| e.seq);
            steps
                .extend(page.events.iter().filter_map(|e| Some((EventType::parse(&e.envelope.event)?, e.received_at))));
            if !page.more {
                return Ok(timeouts::ran(steps, clock::now()));
            }
        }
    }

    /// Moves a mission whose timeout expired, once, and tells its executor to stop.
    async fn fire(&self, mission_id: &str, state: MissionState, expiry: Expiry) {
        let error = format!("{} timed out", expiry.reason().trim_end_matches("_timeout").replace('_', "-"));
        if state == MissionState::Queued {
            match self.dispatcher.time_out_queued(mission_id, expiry.reason(), error).await {
                Ok(true) => tracing::info!(mission_id, reason = expiry.reason(), "queued mission timed out"),
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, mission_id, "recording a queued mission's timeout failed"),
            }
            return;
        }
        let said = ServeEvent::ending(expiry.to(), expiry.reason(), Some(error));
        let judge = |live: &aiwg_domain::Live| expiry.applies(live.state()).then(|| Verdict::new(said, expiry.to()));
        let owner = match self.ledger.serve_decides_one(None, mission_id, judge).await {
            Ok(Some(moved)) => moved.executor_id,
            Ok(None) => return,
            Err(e) => return tracing::warn!(error = %e, mission_id, "recording a mission's timeout failed"),
        };
        tracing::info!(mission_id, executor_id = %owner, reason = expiry.reason(), "mission timed out");
        let abilities =
            self.registry.abilities(&owner, self.sandboxes.linked(&owner)).unwrap_or(Abilities::UNREGISTERED);
        if !matches!(abilities.abort, Ability::Unable(_)) {
            let abort = ServeEvent::Aborted { by: AbortedBy::System, reason: expiry.reason() };
            self.registry.send(&owner, abort.frame(&owner, mission_id, clock::now()));
        }
    }
}

/// What is due of a mission's timeouts.
enum Due {
    Now(Expiry),
    At(DateTime<Utc>),
    Never,
}
