//! Read models: missions as the API shows them.

pub(crate) mod usage;

use aiwg_contract::clock;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Serialize;
use serde_json::Value;

use aiwg_contract::Envelope;
use aiwg_domain::retry::Attempt;
use aiwg_domain::timeouts::Limits;
use aiwg_domain::{Control, MissionState};
use aiwg_domain::{ExitCodes, HitlOutcome, HitlRequest, Mission, StoredEvent};
use chrono::{DateTime, Utc};

/// `GET /api/v1/missions/{id}`: the contract's `mission_status_response`, plus our extensions: the
/// routing decision, what the mission asked for (`objective`, `completion`, `completion_check`, from its
/// dispatch) and the HITL request waiting for an operator.
#[derive(Debug, Serialize)]
pub struct MissionStatus {
    /// With the whole objective (the detail reads the whole payload).
    #[serde(flatten)]
    pub summary: MissionSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_check: Option<String>,
    /// What else its dispatch asked for, as it asked (to dispatch it again alike).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_filter: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<Value>,
    /// Its retry policy as asked; absent (never null) without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Value>,
    pub recent_events: Vec<Envelope>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing: Option<Value>,
    /// The pending HITL request, while there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hitl: Option<PendingHitl>,
    /// Its timeouts as they apply (what its dispatch asked, else serve's defaults), while it has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<TimeoutsView>,
    /// Every attempt, when its dispatch has a retry policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<Attempt>>,
    /// Whose `exit_code` is: the agent's, the completion check's, or both where serve knows them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_codes: Option<ExitCodes>,
    /// The operator controls its state allows (`pause`, `resume`, `abort`, `hitl_response`), by the
    /// state machine, less pause and resume where serve knows the executor cannot pause: a page offers
    /// these and no others. Whether the executor acts on them is the control's answer to say.
    pub controls: Vec<&'static str>,
    /// Its log, once its executor sent one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<LogView>,
    /// Where its executor kept its work, as its end event said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work: Option<WorkView>,
    /// Its budget as it stands (raised ones included), the limits that warned and the one that ran out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<Value>,
}

/// A mission's log in its read: how long, and what its cap dropped.
#[derive(Debug, Serialize)]
pub struct LogView {
    pub bytes: u64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub lines: u64,
    pub dropped_bytes: u64,
    pub dropped_lines: u64,
}

impl From<aiwg_domain::log::LogState> for LogView {
    fn from(s: aiwg_domain::log::LogState) -> LogView {
        LogView {
            bytes: s.end,
            stdout_bytes: s.stdout,
            stderr_bytes: s.stderr,
            lines: s.lines,
            dropped_bytes: s.dropped(),
            dropped_lines: s.dropped_lines,
        }
    }
}

/// Where a mission's work was kept: a git branch, its head commit, the commit it started from.
#[derive(Debug, Serialize)]
pub struct WorkView {
    pub branch: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
}

impl WorkView {
    /// The `work` of an end event's data, when it names a branch: the executor's word, taken only in the
    /// shape the read promises (a branch name of at most 255 bytes, commits of at most 64).
    fn of(terminal_data: Option<&Value>) -> Option<WorkView> {
        let work = terminal_data?.get("work")?;
        let text = |key: &str, max: usize| {
            work.get(key)?.as_str().filter(|s| !s.is_empty() && s.len() <= max).map(str::to_owned)
        };
        Some(WorkView { branch: text("branch", 255)?, commit: text("commit", 64), base: text("base", 64) })
    }
}

/// A mission's timeouts, in seconds.
#[derive(Debug, Serialize)]
pub struct TimeoutsView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_to_start_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_to_close_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat_s: Option<f64>,
}

impl From<Limits> for TimeoutsView {
    fn from(l: Limits) -> TimeoutsView {
        let s = |d: Option<std::time::Duration>| d.map(|d| d.as_millis() as f64 / 1000.0);
        TimeoutsView {
            schedule_to_start_s: s(l.schedule_to_start),
            start_to_close_s: s(l.start_to_close),
            heartbeat_s: s(l.heartbeat),
        }
    }
}

impl MissionStatus {
    pub fn from_row(mut row: Mission, events: Vec<StoredEvent>) -> MissionStatus {
        let routing = row.routing.take();
        let text = |key: &str| row.payload.get(key).and_then(Value::as_str).map(str::to_owned);
        let (completion, completion_check) = (text("completion"), text("completion_check"));
        let asked = |key: &str| row.payload.get(key).filter(|v| !v.is_null()).cloned();
        let (executor_filter, lease, retry) = (asked("executor_filter"), asked("lease"), asked("retry"));
        let controls = Control::allowed(row.state).into_iter().map(Control::as_str).collect();
        let exit_codes = row.exit_codes();
        let work = WorkView::of(row.terminal_data.as_ref());
        MissionStatus {
            summary: MissionSummary::from(row),
            completion,
            completion_check,
            executor_filter,
            lease,
            retry,
            recent_events: events.into_iter().map(|e| e.envelope).collect(),
            routing,
            hitl: None,
            timeouts: None,
            attempts: None,
            exit_codes,
            controls,
            log: None,
            work,
            budget: None,
        }
    }

    /// With its timeouts, serve's `defaults` filling in what its dispatch left out. How long it has
    /// been silent is the reader's to say from `updated_at` (a field that changed with every read would
    /// defeat the read's ETag).
    pub fn with_timeouts(mut self, payload: &Value, defaults: Limits) -> MissionStatus {
        let asked = payload.get("timeouts").and_then(|t| serde_json::from_value(t.clone()).ok());
        let limits = Limits::of(asked.as_ref(), defaults);
        self.timeouts = (!limits.is_none()).then(|| limits.into());
        self
    }

    /// With the mission's pending HITL request (a request that is no longer pending is not shown).
    pub fn with_hitl(mut self, request: Option<HitlRequest>) -> MissionStatus {
        self.hitl = request.filter(|r| r.mission_id == self.summary.mission_id).map(PendingHitl::from);
        self
    }
}

/// A HITL request waiting for an operator's answer (`POST /api/v1/missions/{id}/hitl_response` with its
/// `hitl_id`).
#[derive(Debug, Serialize)]
pub struct PendingHitl {
    pub hitl_id: String,
    pub prompt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    pub requested_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

impl From<HitlRequest> for PendingHitl {
    fn from(r: HitlRequest) -> PendingHitl {
        PendingHitl {
            hitl_id: r.hitl_id,
            prompt: r.prompt,
            context: r.context,
            requested_at: clock::format(r.requested_at),
            expires_at: r.expires_at.map(clock::format),
        }
    }
}

/// A request in the HITL inbox (`GET /api/v1/hitl`): what was asked, of which mission and executor,
/// and, once settled, how.
#[derive(Debug, Serialize)]
pub struct AskedHitl {
    pub mission_id: String,
    pub hitl_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    /// The executor's name, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_name: Option<String>,
    pub prompt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    pub requested_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// `pending`, `answered`, `expired` or `withdrawn`.
    pub state: &'static str,
    /// Seconds it has waited for an answer (pending), or waited until answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waited_s: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub responded_at: Option<String>,
}

impl AskedHitl {
    /// `executor_name` as the registry knows it; `now` for how long a pending one has waited.
    pub fn new(
        r: HitlRequest,
        executor_id: Option<String>,
        executor_name: Option<String>,
        now: DateTime<Utc>,
    ) -> AskedHitl {
        let until = match r.outcome {
            HitlOutcome::Pending => Some(now),
            HitlOutcome::Answered => r.responded_at,
            _ => None,
        };
        AskedHitl {
            waited_s: until.map(|t| (t - r.requested_at).num_seconds().max(0)),
            state: r.outcome.as_str(),
            mission_id: r.mission_id,
            hitl_id: r.hitl_id,
            executor_id,
            executor_name,
            prompt: r.prompt,
            context: r.context,
            requested_at: clock::format(r.requested_at),
            expires_at: r.expires_at.map(clock::format),
            response: r.response,
            answered_by: r.answered_by,
            responded_at: r.responded_at.map(clock::format),
        }
    }
}

/// A page of the HITL inbox.
#[derive(Debug, Serialize)]
pub(crate) struct HitlPage {
    pub(crate) requests: Vec<AskedHitl>,
    pub next_cursor: Option<String>,
}

/// One row of `GET /api/v1/missions`.
#[derive(Debug, Serialize)]
pub struct MissionSummary {
    pub mission_id: String,
    /// Absent while the mission is queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    /// The executor's name, when serve knows the executor (listings lead with names).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_name: Option<String>,
    pub session_id: String,
    pub state: MissionState,
    /// While queued: the constraint no executor meets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_reason: Option<String>,
    /// The executor's checkpoint of a suspended (or resumed) mission.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pty_session_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When retention compacted the mission's history: its progress events are gone, its first and last
    /// events and every other kind kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compacted_at: Option<String>,
    /// What the mission is for (a listing reads its first 120 characters only: each store adapter's
    /// `LISTED_OBJECTIVE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objective: Option<String>,
    /// Seconds from the dispatch to the end, once ended (a live one's is the reader's clock's to say:
    /// a field that changed with every read would defeat the listing's ETag).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// The number of its current attempt, from 2 on: a retry policy queued it again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// What it used, summed over its attempts, once its executor reported any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<usage::MissionSpend>,
    /// What it cost, in US dollars; absent when unpriced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_source: Option<&'static str>,
    /// The operator who dispatched it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatched_by: Option<String>,
}

impl MissionSummary {
    /// With what it spent (`None`: it reported nothing).
    pub(crate) fn spent(&mut self, cost: Option<usage::MissionCost>) {
        if let Some(c) = cost {
            (self.usage, self.cost_usd, self.cost_source) = (Some(c.usage), c.cost_usd, c.cost_source);
        }
    }
}

impl From<Mission> for MissionSummary {
    fn from(r: Mission) -> MissionSummary {
        MissionSummary {
            mission_id: r.mission_id,
            // A mission queued again for a new attempt still names its last executor in the store.
            executor_id: r.executor_id.filter(|_| r.state != MissionState::Queued),
            executor_name: None,
            session_id: r.session_id,
            queued_reason: r.queued_reason.filter(|_| r.state == MissionState::Queued),
            checkpoint_id: r.checkpoint_id,
            state: r.state,
            created_at: clock::format(r.created_at),
            updated_at: clock::format(r.updated_at),
            completed_at: r.completed_at.map(clock::format),
            pty_session_ref: r.pty_session_ref,
            exit_code: r.exit_code,
            error: r.error,
            compacted_at: r.compacted_at.map(clock::format),
            objective: r.payload.get("objective").and_then(Value::as_str).map(str::to_owned),
            duration_s: r.completed_at.map(|end| (end - r.created_at).num_milliseconds().max(0) as f64 / 1000.0),
            attempt: (r.attempt > 1).then_some(r.attempt),
            usage: None,
            cost_usd: None,
            cost_source: None,
            dispatched_by: r.dispatched_by,
        }
    }
}

/// `GET /api/v1/overview`: counts for a dashboard's header, and where the event log stands.
#[derive(Debug, Serialize)]
pub struct Overview {
    /// The newest committed event's sequence: follow `/api/v1/events?since=` this to miss nothing.
    pub last_seq: i64,
    /// Every state, zero included, so that a client need not know the list.
    pub missions: std::collections::BTreeMap<&'static str, i64>,
    pub missions_total: i64,
    pub executors_registered: usize,
    pub executors_connected: usize,
    pub queue_depth: usize,
    pub queue_oldest_age_s: f64,
}

impl Overview {
    pub(crate) fn new(last_seq: i64, s: crate::metrics::Snapshot) -> Overview {
        Overview {
            last_seq,
            missions_total: s.missions_by_state.iter().map(|(_, n)| n).sum(),
            missions: s.missions_by_state.into_iter().collect(),
            executors_registered: s.executors_registered,
            executors_connected: s.executors_connected,
            queue_depth: s.queue_depth,
            queue_oldest_age_s: s.queue_oldest_age_s,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct MissionPage {
    pub missions: Vec<MissionSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Cursors are opaque to clients: base64url of the row position they continue after.
/// A mission listing's cursor.
pub(crate) fn encode_cursor(id: i64) -> String {
    tagged_cursor('m', id)
}

pub(crate) fn decode_cursor(cursor: &str) -> Option<i64> {
    untag_cursor('m', cursor).filter(|id| *id > 0)
}

/// An opaque token for a position in one listing, tagged so that one listing refuses another's cursor.
pub(crate) fn tagged_cursor(tag: char, n: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("{tag}{n}"))
}

pub(crate) fn untag_cursor(tag: char, cursor: &str) -> Option<i64> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    std::str::from_utf8(&bytes).ok()?.strip_prefix(tag)?.parse().ok().filter(|n| *n >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        assert_eq!(decode_cursor(&encode_cursor(42)), Some(42));
        assert_eq!(decode_cursor("not base64!"), None);
        assert_eq!(decode_cursor(&URL_SAFE_NO_PAD.encode("x42")), None);
        assert_eq!(decode_cursor(&URL_SAFE_NO_PAD.encode("m-1")), None);
    }
}

/// An artifact as the API shows it: WattSwarm's `ArtifactRef` shape.
#[derive(Debug, Serialize)]
pub(crate) struct ArtifactRef {
    name: String,
    uri: String,
    digest: String,
    size_bytes: u64,
    mime: String,
    created_at: String,
    producer: String,
}

impl From<aiwg_domain::artifacts::ArtifactRecord> for ArtifactRef {
    fn from(a: aiwg_domain::artifacts::ArtifactRecord) -> ArtifactRef {
        ArtifactRef {
            name: a.name,
            uri: a.uri,
            digest: a.digest,
            size_bytes: a.size_bytes,
            mime: a.mime,
            created_at: clock::format(a.created_at),
            producer: a.producer,
        }
    }
}
