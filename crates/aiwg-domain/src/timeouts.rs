//! A mission's timeouts (our extension): how long it may wait for its start, run, and stay silent.
//!
//! Pure: when each is due is computed from what the store keeps of the mission (its state, when its attempt was
//! scheduled, when it was last heard of) and, for start-to-close, from its lifecycle events, so that a
//! restarted serve or the replica that takes over computes the same deadlines as the one before it: the
//! timers are durable because they are derived, never kept. Paused and `hitl-required` time does not
//! count against start-to-close (and a heartbeat is only watched while the mission runs); suspended time
//! does, so that a mission whose executor went away for good still ends.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::MissionState;
use aiwg_contract::{DispatchTimeouts, EventType};

/// The longest timeout a dispatch or the configuration may set (30 days), as the schema says.
pub const MAX_SECONDS: f64 = 2_592_000.0;

/// A mission's timeouts, resolved: what its dispatch asked, else serve's default, else none.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    pub schedule_to_start: Option<Duration>,
    pub start_to_close: Option<Duration>,
    pub heartbeat: Option<Duration>,
}

/// A number of seconds as a timeout: positive and at most [`MAX_SECONDS`], else none.
pub fn seconds(s: f64) -> Option<Duration> {
    (s > 0.0 && s <= MAX_SECONDS).then(|| Duration::from_secs_f64(s))
}

impl Limits {
    /// What a dispatch asked (`asked`), each one left out taken from `defaults`.
    pub fn of(asked: Option<&DispatchTimeouts>, defaults: Limits) -> Limits {
        let asked = asked.copied().unwrap_or_default();
        let pick = |a: Option<f64>, d: Option<Duration>| a.and_then(seconds).or(d);
        Limits {
            schedule_to_start: pick(asked.schedule_to_start_s, defaults.schedule_to_start),
            start_to_close: pick(asked.start_to_close_s, defaults.start_to_close),
            heartbeat: pick(asked.heartbeat_s, defaults.heartbeat),
        }
    }

    pub fn is_none(&self) -> bool {
        *self == Limits::default()
    }
}

/// Which timeout expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    ScheduleToStart,
    StartToClose,
    Heartbeat,
}

impl Expiry {
    /// The reason its event records (and the abort frame to the executor carries).
    pub fn reason(self) -> &'static str {
        match self {
            Expiry::ScheduleToStart => "schedule_to_start_timeout",
            Expiry::StartToClose => "start_to_close_timeout",
            Expiry::Heartbeat => "heartbeat_timeout",
        }
    }

    /// Where it takes the mission: a run that went on too long is aborted, as an operator would; a
    /// mission that never started or went silent failed.
    pub fn to(self) -> MissionState {
        match self {
            Expiry::StartToClose => MissionState::Aborted,
            Expiry::ScheduleToStart | Expiry::Heartbeat => MissionState::Failed,
        }
    }

    /// Whether it still applies to a mission in `state` (judged again under the ledger's lock when it
    /// fires: the mission may have started, or ended, since its clocks were read).
    pub fn applies(self, state: MissionState) -> bool {
        use MissionState as S;
        match self {
            Expiry::ScheduleToStart => matches!(state, S::Queued | S::Assigned),
            Expiry::StartToClose => matches!(state, S::Running | S::Paused | S::HitlRequired | S::Suspended),
            Expiry::Heartbeat => state == S::Running,
        }
    }
}

/// What the store says of a live mission's clocks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Seen {
    pub state: MissionState,
    /// When its current attempt was scheduled: its dispatch, or the retry that queued it again.
    pub scheduled_at: DateTime<Utc>,
    /// When it was last heard of: every event of the mission (and a linked sandbox's session frames)
    /// moves it, and so does serve's return of it to running (a resume, a HITL answer).
    pub updated_at: DateTime<Utc>,
}

/// How long a mission has run, as its lifecycle events say at `as_of`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ran {
    pub counted: Duration,
    /// The clock runs at `as_of` (started, neither paused nor asking an operator).
    pub running: bool,
    pub as_of: DateTime<Utc>,
}

/// Folds a mission's lifecycle events (type, when serve received it; in log order) into how long it
/// has run by `now`.
pub fn ran(events: impl IntoIterator<Item = (EventType, DateTime<Utc>)>, now: DateTime<Utc>) -> Ran {
    let (mut started, mut paused, mut asking) = (false, false, false);
    let mut counted = chrono::Duration::zero();
    let mut since: Option<DateTime<Utc>> = None;
    for (event, at) in events {
        match event {
            EventType::MissionStarted => started = true,
            EventType::MissionPaused => paused = true,
            EventType::MissionResumed => paused = false,
            EventType::MissionHitlRequired => asking = true,
            EventType::MissionHitlResponded => asking = false,
            EventType::MissionCompleted | EventType::MissionFailed | EventType::MissionAborted => started = false,
            _ => continue,
        }
        let counting = started && !paused && !asking;
        match (since, counting) {
            (Some(from), false) => {
                counted += at - from;
                since = None;
            }
            (None, true) => since = Some(at),
            _ => {}
        }
    }
    if let Some(from) = since {
        counted += now - from;
    }
    Ran { counted: counted.to_std().unwrap_or_default(), running: since.is_some(), as_of: now }
}

/// The earliest moment one of the mission's timeouts may expire, and which. For start-to-close that is
/// when the events must be read again (`ran`, when read; before that, the run cannot have been longer
/// than the time since the dispatch): the mission may have been paused meanwhile, which only delays it.
pub fn next(limits: &Limits, seen: &Seen, ran: Option<&Ran>) -> Option<(DateTime<Utc>, Expiry)> {
    let after =
        |from: DateTime<Utc>, d: Duration| from + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
    let due = |expiry: Expiry, limit: Option<Duration>| {
        let limit = limit.filter(|_| expiry.applies(seen.state))?;
        let at = match expiry {
            Expiry::ScheduleToStart => after(seen.scheduled_at, limit),
            Expiry::Heartbeat => after(seen.updated_at, limit),
            Expiry::StartToClose => match ran {
                Some(r) => after(r.as_of, limit.saturating_sub(r.counted)),
                None => after(seen.scheduled_at, limit),
            },
        };
        Some((at, expiry))
    };
    [
        due(Expiry::ScheduleToStart, limits.schedule_to_start),
        due(Expiry::Heartbeat, limits.heartbeat),
        due(Expiry::StartToClose, limits.start_to_close),
    ]
    .into_iter()
    .flatten()
    .min_by_key(|(at, _)| *at)
}

/// Serve's restart grace (`hub.restart_grace_s`): while serve was down nobody could be heard, so no
/// mission live when it started times out before the grace ends, whatever its clocks say; a mission
/// scheduled after the start (dispatched, or queued again for a new attempt) keeps its own clocks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RestartGrace {
    pub started_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
}

impl RestartGrace {
    /// When a deadline at `at` of a mission with these clocks may fire.
    pub fn hold(&self, seen: &Seen, at: DateTime<Utc>) -> DateTime<Utc> {
        if seen.scheduled_at < self.started_at {
            at.max(self.ends_at)
        } else {
            at
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EventType as E;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// What the dispatch asked wins; what it left out is the default; nonsense is none.
    #[test]
    fn a_dispatch_overrides_the_defaults_one_by_one() {
        let defaults = Limits { schedule_to_start: Some(secs(60)), start_to_close: Some(secs(3600)), heartbeat: None };
        let asked =
            DispatchTimeouts { schedule_to_start_s: None, start_to_close_s: Some(1.5), heartbeat_s: Some(-1.0) };
        let limits = Limits::of(Some(&asked), defaults);
        assert_eq!(limits.schedule_to_start, Some(secs(60)));
        assert_eq!(limits.start_to_close, Some(Duration::from_millis(1500)));
        assert_eq!(limits.heartbeat, None);
        assert!(Limits::of(None, Limits::default()).is_none());
        assert_eq!(seconds(MAX_SECONDS + 1.0), None);
    }

    /// Paused and asking time is not counted, suspended time is; the clock stops at the end.
    #[test]
    fn only_running_and_suspended_time_counts() {
        let events = [
            (E::MissionAssigned, t(0)),
            (E::MissionStarted, t(10)),
            (E::MissionProgress, t(12)),
            (E::MissionPaused, t(20)),
            (E::MissionResumed, t(50)),
            (E::MissionHitlRequired, t(55)),
            (E::MissionHitlResponded, t(100)),
            (E::MissionSuspended, t(110)),
        ];
        let r = ran(events, t(130));
        assert_eq!((r.counted, r.running), (secs(10 + 5 + 10 + 20), true));
        let ended = ran(events.into_iter().chain([(E::MissionFailed, t(200))]), t(300));
        assert_eq!((ended.counted, ended.running), (secs(10 + 5 + 10 + 90), false));
        assert_eq!(ran([(E::MissionAssigned, t(0))], t(99)).counted, Duration::ZERO, "never started");
    }

    /// A resume of a mission paused while it asked returns it to asking: still not counted.
    #[test]
    fn a_resume_while_asking_keeps_the_clock_stopped() {
        let events = [
            (E::MissionStarted, t(0)),
            (E::MissionHitlRequired, t(10)),
            (E::MissionPaused, t(20)),
            (E::MissionResumed, t(30)),
        ];
        let r = ran(events, t(100));
        assert_eq!((r.counted, r.running), (secs(10), false));
    }

    /// Each timeout is due from its own clock, only in the states it watches; the earliest wins.
    #[test]
    fn the_next_deadline_is_the_earliest_that_applies() {
        let limits =
            Limits { schedule_to_start: Some(secs(30)), start_to_close: Some(secs(100)), heartbeat: Some(secs(20)) };
        let seen = |state| Seen { state, scheduled_at: t(0), updated_at: t(50) };
        assert_eq!(next(&limits, &seen(MissionState::Queued), None), Some((t(30), Expiry::ScheduleToStart)));
        assert_eq!(next(&limits, &seen(MissionState::Running), None), Some((t(70), Expiry::Heartbeat)));
        assert_eq!(next(&limits, &seen(MissionState::Paused), None), Some((t(100), Expiry::StartToClose)));
        let ran = Ran { counted: secs(40), running: false, as_of: t(120) };
        assert_eq!(next(&limits, &seen(MissionState::HitlRequired), Some(&ran)), Some((t(180), Expiry::StartToClose)));
        assert_eq!(next(&limits, &seen(MissionState::Done), None), None);
        assert_eq!(next(&Limits::default(), &seen(MissionState::Running), None), None);
    }

    /// A mission live when serve started times out no earlier than the grace's end; one scheduled after
    /// the start keeps its own deadline.
    #[test]
    fn the_restart_grace_holds_only_the_missions_live_at_the_start() {
        let grace = RestartGrace { started_at: t(100), ends_at: t(220) };
        let live_then = Seen { state: MissionState::Running, scheduled_at: t(0), updated_at: t(50) };
        assert_eq!(grace.hold(&live_then, t(70)), t(220), "silent while serve was down");
        assert_eq!(grace.hold(&live_then, t(300)), t(300), "due after the grace anyway");
        let after = Seen { scheduled_at: t(101), ..live_then };
        assert_eq!(grace.hold(&after, t(121)), t(121));
    }
}
