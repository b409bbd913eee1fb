//! Missions' timeouts (`aiwg_domain::timeouts`): schedule-to-start, start-to-close and heartbeat.
//!
//! No timer is kept, in memory or in the store: each deadline is computed from what the store already
//! holds (a mission's state, when its attempt was scheduled, when it was last heard of, its dispatch's
//! timeouts, its lifecycle events),
//! so that a restart, or the replica that takes over, finds every deadline where it was and fires what
//! came due meanwhile. One task (on the leading replica: the services run only there) looks at the
//! missions that have not ended, fires what is due, and sleeps until the next deadline (at most
//! [`LOOK_AGAIN`], for missions dispatched meanwhile). A firing is serve's verdict on the mission,
//! judged again under the ledger's lock (it may have started, or ended, since its clocks were read), so
//! it moves the mission once or not at all, and it is an event in the log with the timeout as its
//! reason; the executor is then told to abort the mission. A heartbeat or schedule-to-start expiry that
//! the mission's retry policy lists ends only its attempt (`services::retries`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::queue::Queue;
use super::retries::{Failure, Retries};
use super::Core;
use crate::config::HubConfig;
use crate::store::{MissionClock, Store, StoreError};
use aiwg_contract::clock;
use aiwg_domain::retry::{self, Step};
use aiwg_domain::timeouts::{self, Expiry, Limits, Ran, RestartGrace, Seen};
use aiwg_domain::{MissionState, ServeEvent};

/// The longest sleep between two looks: a mission dispatched meanwhile is first seen within this.
const LOOK_AGAIN: Duration = Duration::from_secs(1);
/// The shortest: deadlines that close together are fired by one look.
const LOOK_SOONEST: Duration = Duration::from_millis(20);

/// Watches the timeouts of every mission that has not ended, and fires them.
pub struct Timeouts {
    store: Store,
    /// A queued mission's schedule-to-start timeout takes it out of the queue.
    queue: Arc<Queue>,
    /// Every other expiry is a failure serve decides, which the mission's retry policy may retry.
    retries: Arc<Retries>,
    /// The configuration's `[timeouts]`: what a dispatch leaves out.
    defaults: Limits,
    /// Nobody live when serve started times out before `hub.restart_grace_s` has passed.
    grace: RestartGrace,
    /// How long each mission's current attempt had run when last counted (start-to-close).
    ran: Mutex<HashMap<String, Ran>>,
    shutdown: watch::Receiver<bool>,
}

impl Timeouts {
    pub(crate) fn new(
        core: &Core,
        retries: Arc<Retries>,
        defaults: Limits,
        hub: &HubConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Timeouts {
        let (store, queue) = (core.store.clone(), core.queue.clone());
        let started_at = clock::now();
        let grace = i64::try_from(hub.restart_grace_s).ok().and_then(chrono::Duration::try_seconds);
        let grace = grace.unwrap_or(chrono::Duration::MAX);
        let ends_at = started_at.checked_add_signed(grace).unwrap_or(DateTime::<Utc>::MAX_UTC);
        let grace = RestartGrace { started_at, ends_at };
        Timeouts { store, queue, retries, defaults, grace, ran: Mutex::default(), shutdown }
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
        let clocks = self.store.mission_clocks(self.defaults.is_none()).await?;
        self.ran.lock().expect("ran lock").retain(|id, _| clocks.iter().any(|c| &c.mission_id == id));
        let mut soonest = clock::now() + LOOK_AGAIN;
        for MissionClock { mission_id, seen, timeouts } in clocks {
            let limits = Limits::of(timeouts.as_ref(), self.defaults);
            if limits.is_none() {
                continue;
            }
            match self.due(&mission_id, &seen, &limits).await? {
                Due::Now(expiry) => self.fire(&mission_id, seen.state, expiry).await,
                Due::At(at) => soonest = soonest.min(at),
                Due::Never => {}
            }
        }
        Ok((soonest - clock::now()).to_std().unwrap_or_default().max(LOOK_SOONEST))
    }

    /// What is due of a mission's timeouts. A start-to-close deadline that came is checked against the
    /// mission's lifecycle, counted again: a pause since the last count moved it later.
    async fn due(&self, mission_id: &str, seen: &Seen, limits: &Limits) -> Result<Due, StoreError> {
        let now = clock::now();
        let counted = self.ran.lock().expect("ran lock").get(mission_id).copied();
        let Some((at, expiry)) = timeouts::next(limits, seen, counted.as_ref()) else { return Ok(Due::Never) };
        let at = self.grace.hold(seen, at);
        if at > now {
            return Ok(Due::At(at));
        }
        if expiry != Expiry::StartToClose {
            return Ok(Due::Now(expiry));
        }
        let ran = self.ran_of(mission_id).await?;
        self.ran.lock().expect("ran lock").insert(mission_id.to_owned(), ran);
        Ok(match timeouts::next(limits, seen, Some(&ran)).map(|(at, expiry)| (self.grace.hold(seen, at), expiry)) {
            Some((at, expiry)) if at <= now => Due::Now(expiry),
            Some((at, _)) => Due::At(at),
            None => Due::Never,
        })
    }

    /// How long the mission's current attempt has run, from its lifecycle events (a retry's
    /// `mission.suspended {retry_at}` ends the attempt before it).
    async fn ran_of(&self, mission_id: &str) -> Result<Ran, StoreError> {
        let events = self.store.lifecycle(mission_id).await?;
        let steps: Vec<Step> = events.iter().filter_map(Step::of).collect();
        Ok(timeouts::ran(retry::current_attempt(&steps).iter().map(|s| (s.event, s.at)), clock::now()))
    }

    /// Moves a mission whose timeout expired, once (or ends only its attempt, as its retry policy
    /// says), and tells its executor to stop.
    async fn fire(&self, mission_id: &str, state: MissionState, expiry: Expiry) {
        let error = format!("{} timed out", expiry.reason().trim_end_matches("_timeout").replace('_', "-"));
        if state == MissionState::Queued {
            match self.queue.time_out(mission_id, expiry.reason(), error).await {
                Ok(true) => tracing::info!(mission_id, reason = expiry.reason(), "queued mission timed out"),
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, mission_id, "recording a queued mission's timeout failed"),
            }
            return;
        }
        let (to, reason) = (expiry.to(), expiry.reason());
        // A mission that went silent, or never started, may yet run: its executor is fenced from a retry.
        let failure = Failure { to, said: ServeEvent::ending(to, reason, Some(error)), reason, may_run: true };
        let moved = match self.retries.fail(None, mission_id, failure, |s| expiry.applies(s)).await {
            Ok(Some(moved)) => moved,
            Ok(None) => return,
            Err(e) => return tracing::warn!(error = %e, mission_id, reason, "recording a timeout failed"),
        };
        tracing::info!(mission_id, executor_id = %moved.executor_id, reason, to = %moved.to, "mission timed out");
        if moved.to != MissionState::Queued {
            self.retries.tell_to_abort(&moved.executor_id, mission_id, reason);
        }
    }
}

/// What is due of a mission's timeouts.
enum Due {
    Now(Expiry),
    At(DateTime<Utc>),
    Never,
}
