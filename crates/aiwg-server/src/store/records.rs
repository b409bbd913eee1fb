//! What a unit of writes is made of ([`Change`]), the filters of a mission listing, and a place in the
//! writer's queue. The records themselves are the domain's (`aiwg_domain`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use super::Result;
use aiwg_domain::idempotency::Answered;
use aiwg_domain::operators::{AuditRecord, OperatorRecord};
use aiwg_domain::webhooks::{Delivery, Webhook};
use aiwg_domain::{
    ExecutorRecord, HitlOutcome, HitlRequest, Mission, MissionPatch, MissionState, NewEvent, Recorded, SandboxRecord,
    StoredEvent,
};

/// A mission that is not terminal, as the working set is rebuilt from it at start.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveMission {
    pub mission_id: String,
    pub executor_id: String,
    pub state: MissionState,
    /// The agent session it is bound to, if one was reported.
    pub pty_session_ref: Option<String>,
    /// The number of its current attempt.
    pub attempt: u32,
}

/// A mission that has not ended (queued ones included) with its clocks, for its timeouts.
#[derive(Clone, Debug, PartialEq)]
pub struct MissionClock {
    pub mission_id: String,
    pub seen: aiwg_domain::timeouts::Seen,
    /// Its dispatch's own timeouts, if it named any.
    pub timeouts: Option<aiwg_contract::DispatchTimeouts>,
}

/// A recent `mission.progress` of a live mission, as the key that recognises its resend
/// ([`progress_key`](aiwg_domain::progress_key)): the events themselves are not kept.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgressSeen {
    pub mission_id: String,
    pub key: u64,
}

/// One change; a unit of changes commits atomically.
#[derive(Clone, Debug)]
pub enum Change {
    PutExecutor(Box<ExecutorRecord>),
    /// The executor's latest event timestamp; coalesced per executor within a batch.
    ExecutorSeen {
        executor_id: String,
        ts: String,
    },
    /// Fails the unit with [`StoreError::DuplicateMission`](super::StoreError::DuplicateMission) when the
    /// id exists; must come first in its unit.
    InsertMission(Box<Mission>),
    /// Fields left `None` keep their value. A mission that a commit only touches (its patches set
    /// nothing but `updated_at`) gets the commit time as `updated_at`, the `received_at` of the events
    /// committed with it: the writer touches them all in one statement.
    PatchMission {
        mission_id: String,
        patch: MissionPatch,
    },
    AppendEvent(NewEvent),
    PutHitl(Box<HitlRequest>),
    PutSandbox(Box<SandboxRecord>),
    /// Appends a record to the audit trail (its `seq` is the store's to give).
    AppendAudit(Box<AuditRecord>),
    /// Adds the record's `count` to the count of refusals of its source in its minute (`at`), created
    /// with the record when it is the first.
    CountRefusals(Box<AuditRecord>),
    /// Removes the audit records older than `before` (retention).
    ForgetAudit {
        before: chrono::DateTime<chrono::Utc>,
    },
    /// Removes the audit records up to this sequence number (the trail beyond its bound, oldest first).
    TrimAudit {
        through_seq: i64,
    },
    /// Adds a named operator, or replaces its row (revoked, or a revoked one's name given again).
    PutOperator(Box<OperatorRecord>),
    /// Adds a stored webhook subscription, or replaces its row (removed).
    PutWebhook(Box<Webhook>),
    /// Queues a delivery in the outbox, unless its subscription has one from the same source already
    /// (a notice is queued once, however often the log is read again).
    QueueDelivery(Box<Delivery>),
    /// How far the log has been read for notifications (its sequence number).
    NotifiedUpTo(i64),
    /// A delivery's state after an attempt, or sent again (by its id).
    PutDelivery(Box<Delivery>),
    /// Removes the deliveries queued before `before` that are done, delivered or failed (retention).
    ForgetDeliveries {
        before: chrono::DateTime<chrono::Utc>,
    },
    /// Keeps the answer to a keyed request (replacing an expired one of the key).
    PutIdempotent(Box<Answered>),
    /// Removes the kept answers older than `before` (retention).
    ForgetIdempotent {
        before: chrono::DateTime<chrono::Utc>,
    },
    /// A mission's log state, written with each of its rows.
    PutLogState(Box<aiwg_domain::log::LogState>),
    /// What a mission produced: its log's rows, its artifacts and their bytes.
    Output(Output),
    /// Removes a deregistered sandbox's row (until then it counts against `server.max_sandboxes`).
    ForgetSandbox(String),
    /// Removes events of an ended mission (retention; `seqs` are its own, as
    /// [`Storage::compactable_events`](super::Storage::compactable_events) names them), or with no
    /// mission events that belong to none (as [`Storage::loose_events`](super::Storage::loose_events)
    /// names them), and moves the compaction horizon up to the highest; `done` marks the mission compacted
    /// at the commit time.
    CompactEvents {
        mission_id: Option<String>,
        seqs: Vec<i64>,
        done: bool,
    },
    /// An attempt's usage of a model as it now stands: kept, and what it changes of the row as stored
    /// added to the sums (so they stay the sum of the rows). A batch writes each row once, as its last
    /// report of the day left it.
    Usage(Box<aiwg_domain::usage::Record>),
    /// A mission's budget as serve watches it (`aiwg_domain::budget`).
    PutBudget(Box<super::MissionBudget>),
    /// A standing budget added or removed through the API (`aiwg_domain::standing`).
    PutStanding(Box<aiwg_domain::standing::Standing>),
}

/// The changes of what missions produced (`aiwg_domain::log`, `aiwg_domain::artifacts`), each written by
/// a statement of its own, in order.
#[derive(Clone, Debug)]
pub enum Output {
    /// A row of a mission's log (`aiwg_domain::log`).
    AppendLog(Box<aiwg_domain::log::LogRow>),
    /// Removes a log's rows in `[from, to)`: a segment its cap drops.
    DropLog { mission_id: String, from: u64, to: u64 },
    /// Removes a mission's log rows (retention; its state stays).
    ForgetLog(String),
    /// A part of an artifact's bytes kept in the database, under the name of the upload that received it
    /// (`blob`; `store::BlobSink`).
    PutBlobPart { blob: String, part: u32, bytes: Vec<u8> },
    /// An upload's bytes become those of their digest (named, never moved: moving parts rewrote every
    /// byte of them, since a part's name is in its key), unless that digest has bytes already: identical
    /// bytes are kept once, and the upload's then go when it is let go of (`Storage::release_blob`).
    SealUpload { upload: String, digest: String },
    /// Removes an upload's parts, unless they were sealed as a digest's bytes (an abandoned upload's, or
    /// one whose digest had bytes already).
    ForgetBlob(String),
    /// Removes a digest's bytes unless an artifact names the digest (the one an artifact replaced)...
    ForgetBlobUnlessUsed(String),
    /// ...and then, in the same unit, its name (the bytes are found by it).
    ForgetBlobNameUnlessUsed(String),
    /// An artifact's row, replacing the mission's artifact of the same name.
    PutArtifact(Box<aiwg_domain::artifacts::ArtifactRecord>),
    /// Removes the bytes of a mission's artifacts that no other mission's artifact names (retention,
    /// before [`Output::ForgetArtifacts`])...
    ForgetArtifactBlobs(String),
    /// ...and then their names.
    ForgetArtifactBlobNames(String),
    /// Removes a mission's artifacts (retention).
    ForgetArtifacts(String),
    /// Removes every unsealed upload's parts: no upload survives a restart.
    ForgetUploads,
}

impl From<Output> for Change {
    fn from(o: Output) -> Change {
        Change::Output(o)
    }
}

impl Change {
    /// The change that keeps an attempt's usage of a model and counts it in the sums.
    pub fn usage(record: aiwg_domain::usage::Record) -> Change {
        Change::Usage(Box::new(record))
    }

    /// The changes that record a serve event: the event, then its mission's update.
    pub fn recorded(r: Recorded) -> Vec<Change> {
        let mut changes = vec![Change::AppendEvent(r.event)];
        if let Some((mission_id, patch)) = r.patch {
            changes.push(Change::PatchMission { mission_id, patch });
        }
        changes
    }
}

/// What a queued unit yields once committed: the sequence numbers of its events (an error when the
/// writer is gone).
pub struct Pending(oneshot::Receiver<(Result<Vec<i64>>, Returned)>);

impl Pending {
    pub fn new(rx: oneshot::Receiver<(Result<Vec<i64>>, Returned)>) -> Pending {
        Pending(rx)
    }
}

/// What an adapter hands back with a unit's outcome for [`Pending`] to drop: the unit's allocations,
/// made by the task that submitted it and freed on that task's thread. Freed by a writer's thread, each
/// string of a unit was a free across threads, which mimalloc makes through a shared list the owning
/// thread collects later, and the one writer spent its time on it (`docs/performance.md`).
pub struct Returned {
    _unit: Box<dyn Send>,
}

impl Returned {
    pub fn new(unit: Box<dyn Send>) -> Returned {
        Returned { _unit: unit }
    }
}

impl Future for Pending {
    type Output = std::result::Result<Result<Vec<i64>>, oneshot::error::RecvError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|done| done.map(|(outcome, _unit)| outcome))
    }
}

/// A place taken in the writer's queue ([`super::Storage::reserve`]): queueing into it never waits.
/// Dropped unused, it frees the place.
pub struct CommitSlot<'a>(Box<dyn FnOnce(Vec<Change>) -> Pending + Send + 'a>);

impl<'a> CommitSlot<'a> {
    pub fn new(queue: impl FnOnce(Vec<Change>) -> Pending + Send + 'a) -> CommitSlot<'a> {
        CommitSlot(Box::new(queue))
    }

    /// Queues a unit of changes.
    pub fn submit(self, changes: Vec<Change>) -> Pending {
        (self.0)(changes)
    }
}

/// Filters of `GET /api/v1/missions`; all optional, combined with AND.
#[derive(Clone, Debug, Default)]
pub struct MissionQuery {
    /// Any of these states (none: every state).
    pub states: Vec<MissionState>,
    pub executor_id: Option<String>,
    pub session_id: Option<String>,
    pub updated_since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only missions whose id or objective contains this, whatever the case.
    pub text: Option<String>,
    pub sort: MissionSort,
    /// Only missions after this one in the order of `sort` (the cursor of the previous page).
    pub before_id: Option<i64>,
    pub limit: u32,
}

/// The order of a mission listing, newest or largest first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissionSort {
    /// By dispatch.
    #[default]
    Created,
    /// By the last change (an event, a control): the most recently active first.
    Updated,
    /// Ended missions only, the longest first.
    Duration,
}

impl MissionSort {
    pub const ALL: [(&'static str, MissionSort); 3] =
        [("created", MissionSort::Created), ("updated", MissionSort::Updated), ("duration", MissionSort::Duration)];
}

/// A read of a mission's log: the rows holding the bytes from `from` on (positions in the whole log,
/// or in `stream`'s when it names one), at most `rows` of them.
#[derive(Clone, Copy, Debug)]
pub struct LogQuery<'a> {
    pub mission_id: &'a str,
    pub stream: Option<aiwg_contract::log::Stream>,
    pub from: u64,
    pub rows: u32,
}

/// Where a log row is and what it holds, without its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogMeta {
    pub pos: u64,
    pub stream_pos: u64,
    pub len: u64,
    pub lines: u64,
}

/// Filters of the HITL inbox (`GET /api/v1/hitl`): requests of one outcome, optionally of one
/// executor's missions, in the order they were asked, after a cursor.
#[derive(Clone, Debug)]
pub struct HitlQuery {
    pub outcome: HitlOutcome,
    pub executor_id: Option<String>,
    pub after: Option<HitlCursor>,
    pub limit: u32,
}

/// Where a page of the inbox ends: the request's place in the order asked.
#[derive(Clone, Debug, PartialEq)]
pub struct HitlCursor {
    pub requested_at: chrono::DateTime<chrono::Utc>,
    pub mission_id: String,
    pub hitl_id: String,
}

/// A request in the inbox, with the executor of its mission.
#[derive(Clone, Debug, PartialEq)]
pub struct AskedRequest {
    pub request: HitlRequest,
    pub executor_id: Option<String>,
}

/// Filters of `GET /api/v1/audit`; all optional, combined with AND. Newest first.
#[derive(Clone, Debug, Default)]
pub struct AuditQuery {
    pub operator: Option<String>,
    pub mission_id: Option<String>,
    pub executor_id: Option<String>,
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// Only records before this one (the cursor of the previous page).
    pub before_seq: Option<i64>,
    pub limit: u32,
}

/// A page of a subscription's delivery log, newest first.
#[derive(Clone, Debug)]
pub struct DeliveryQuery {
    pub webhook_id: String,
    /// Only deliveries queued before this one (the cursor of the previous page).
    pub before_seq: Option<i64>,
    pub limit: u32,
}

/// A page of the event log: the events after `after` (and before `before`, when given; optionally of one
/// mission and/or one executor), in order, at most `limit` of them and, past the first, at most
/// `max_bytes` of event data. An executor
/// decides how large its events are (up to a frame, 1 MiB): a count alone let one page of a mission's
/// history cost gigabytes.
#[derive(Clone, Copy, Debug)]
pub struct EventQuery<'a> {
    pub after: i64,
    pub before: Option<i64>,
    pub mission_id: Option<&'a str>,
    pub executor_id: Option<&'a str>,
    pub only: Only,
    pub limit: u32,
    pub max_bytes: usize,
}

impl<'a> EventQuery<'a> {
    /// Every event after `after`, `limit` at most, with no byte bound (set one with [`EventQuery::bytes`]
    /// wherever the events' size is not already known to be small).
    pub fn after(after: i64, limit: u32) -> EventQuery<'a> {
        EventQuery {
            after,
            before: None,
            mission_id: None,
            executor_id: None,
            only: Only::All,
            limit,
            max_bytes: usize::MAX,
        }
    }

    /// Only events below this sequence number.
    pub fn before(self, before: Option<i64>) -> EventQuery<'a> {
        EventQuery { before, ..self }
    }

    pub fn mission(self, mission_id: Option<&'a str>) -> EventQuery<'a> {
        EventQuery { mission_id, ..self }
    }

    pub fn executor(self, executor_id: Option<&'a str>) -> EventQuery<'a> {
        EventQuery { executor_id, ..self }
    }

    pub fn notable(self) -> EventQuery<'a> {
        EventQuery { only: Only::Notable, ..self }
    }

    pub fn lifecycle(self) -> EventQuery<'a> {
        EventQuery { only: Only::Lifecycle, ..self }
    }

    pub fn bytes(self, max_bytes: usize) -> EventQuery<'a> {
        EventQuery { max_bytes, ..self }
    }
}

/// Which kinds of events an [`EventQuery`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Only {
    All,
    /// The notable events (`aiwg_domain::webhooks::NOTABLE`: a mission's question and end, an
    /// executor's deregistration), read through an index of their own whatever the volume of the others.
    Notable,
    /// Every event but `mission.progress`: a mission's steps (what its timeouts are counted from).
    Lifecycle,
}

/// What an [`EventQuery`] read: its events, and whether more follow the last of them.
#[derive(Debug, Default)]
pub struct EventPage {
    pub events: Vec<StoredEvent>,
    pub more: bool,
}

/// A read of the kept sums (`GET /api/v1/usage`, a budget's spend): grouped by one key, from a day on
/// (`YYYY-MM-DD`, UTC; every day when `None`), of one scope. The sums are kept per day of everyone, of
/// each operator, executor and model, not per combination: a scope other than [`Scope::All`] is read by
/// day (`By::Day`) or as its one total (any other `by`, keyed by its name).
///
/// [`Scope::All`]: aiwg_domain::usage::Scope::All
#[derive(Clone, Debug)]
pub struct UsageQuery {
    pub by: aiwg_domain::usage::By,
    pub since: Option<String>,
    pub scope: aiwg_domain::usage::Scope,
}

/// One group of the kept sums: its key (a day, an operator's name, an executor's id, a model).
#[derive(Clone, Debug, PartialEq)]
pub struct UsageGroup {
    pub key: String,
    pub sum: aiwg_domain::usage::Sum,
}

/// What is kept of a mission's current attempt's usage of a model (the projection's, at start).
#[derive(Clone, Debug, PartialEq)]
pub struct KeptUsage {
    pub mission_id: String,
    pub kept: aiwg_domain::usage::Kept,
}

/// A mission's usage of a model, summed over its attempts.
#[derive(Clone, Debug, PartialEq)]
pub struct MissionUsage {
    pub mission_id: String,
    pub model: String,
    pub sum: aiwg_domain::usage::Sum,
}
