//! The SQL of the writer's statements, written once for both adapters: each method writes one
//! statement, with its parameters, through a [`Builder`]. SQLite's writer runs the statements itself,
//! each prepared once and stepped row by row (`sqlite::raw`); PostgreSQL's builds a query per statement
//! (its extended protocol takes one statement per query), multi-row where a statement takes many rows.

mod outputs;
mod upserts;
mod usage;

use std::borrow::Cow;

use crate::store::{Change, Mission, MissionPatch, NewEvent};
use aiwg_contract::clock;
use upserts::Upsert;

/// An event's `data` and `raw`, as JSON text (encoded by the submitting task, not the writer).
pub(super) type Encoded = (String, Option<String>);

/// A parameter's value, typed as its column is: PostgreSQL needs the type of a NULL too.
pub(super) enum Value<'a> {
    Text(Option<Cow<'a, str>>),
    Int(Option<i64>),
    Bool(bool),
    Blob(&'a [u8]),
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(v: &'a str) -> Value<'a> {
        Value::Text(Some(Cow::Borrowed(v)))
    }
}

impl<'a> From<Option<&'a str>> for Value<'a> {
    fn from(v: Option<&'a str>) -> Value<'a> {
        Value::Text(v.map(Cow::Borrowed))
    }
}

impl<'a> From<&'a String> for Value<'a> {
    fn from(v: &'a String) -> Value<'a> {
        Value::from(v.as_str())
    }
}

impl From<String> for Value<'_> {
    fn from(v: String) -> Self {
        Value::Text(Some(Cow::Owned(v)))
    }
}

impl From<Option<String>> for Value<'_> {
    fn from(v: Option<String>) -> Self {
        Value::Text(v.map(Cow::Owned))
    }
}

impl From<i64> for Value<'_> {
    fn from(v: i64) -> Self {
        Value::Int(Some(v))
    }
}

impl From<Option<i64>> for Value<'_> {
    fn from(v: Option<i64>) -> Self {
        Value::Int(v)
    }
}

impl From<bool> for Value<'_> {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

impl<'a> From<&'a [u8]> for Value<'a> {
    fn from(v: &'a [u8]) -> Value<'a> {
        Value::Blob(v)
    }
}

/// Where an adapter takes the statements: their text, their parameters (each writes its own
/// placeholder), and where each ends.
pub(super) trait Builder<'a> {
    /// Rows one multi-row statement takes: PostgreSQL saves round trips with many, SQLite's writer
    /// steps one prepared statement per row, which every batch reuses.
    const ROWS: usize;

    fn push(&mut self, sql: &str);

    fn bind(&mut self, value: Value<'a>);

    /// Ends the statement being written.
    fn end(&mut self);
}

/// Statements under construction, for an adapter's builder.
pub(super) struct Script<B>(pub(super) B);

/// A row of parameters in a `VALUES` list, or a list of them after `IN`: separated by commas.
pub(super) struct List<'b, B> {
    builder: &'b mut B,
    first: bool,
}

impl<'b, B> List<'b, B> {
    fn new(builder: &'b mut B) -> List<'b, B> {
        List { builder, first: true }
    }

    fn bind<'a>(&mut self, value: impl Into<Value<'a>>) -> &mut Self
    where
        B: Builder<'a>,
    {
        if !std::mem::take(&mut self.first) {
            self.builder.push(", ");
        }
        self.builder.bind(value.into());
        self
    }
}

impl<'a, B: Builder<'a>> Script<B> {
    fn push(&mut self, sql: &str) -> &mut Self {
        self.0.push(sql);
        self
    }

    fn bind(&mut self, value: impl Into<Value<'a>>) -> &mut Self {
        self.0.bind(value.into());
        self
    }

    fn end(&mut self) {
        self.0.end();
    }

    /// `VALUES (..), (..)`: one parenthesised row of parameters per item, written by `row`.
    fn values<T>(&mut self, rows: impl IntoIterator<Item = T>, mut row: impl FnMut(&mut List<'_, B>, T)) {
        self.push("VALUES ");
        for (i, item) in rows.into_iter().enumerate() {
            self.push(if i == 0 { "(" } else { ", (" });
            row(&mut List::new(&mut self.0), item);
            self.push(")");
        }
    }

    /// Parameters separated by commas (inside an `IN (..)`).
    fn list<T: Into<Value<'a>>>(&mut self, items: impl IntoIterator<Item = T>) {
        let mut list = List::new(&mut self.0);
        for item in items {
            list.bind(item);
        }
    }

    /// A record's upsert (an executor, sandbox, operator, HITL request, audit record, webhook, delivery,
    /// a keyed request's answer), or rows forgotten (a sandbox, old audit records, deliveries, answers): written one by one, as they
    /// come; other changes write nothing here.
    pub(super) fn push_upsert(&mut self, change: &'a Change) {
        match change {
            Change::PutExecutor(e) => e.upsert(self),
            Change::PutSandbox(s) => s.upsert(self),
            Change::ForgetSandbox(id) => {
                self.push("DELETE FROM sandboxes WHERE deregistered_at IS NOT NULL AND sandbox_id = ")
                    .bind(id.as_str());
                self.end();
            }
            Change::PutHitl(h) => h.upsert(self),
            Change::PutOperator(o) => o.upsert(self),
            Change::AppendAudit(a) => a.upsert(self),
            Change::CountRefusals(a) => upserts::count_refusals(a, self),
            Change::ForgetAudit { before } => {
                self.push("DELETE FROM audit WHERE at < ").bind(clock::format(*before));
                self.end();
            }
            Change::TrimAudit { through_seq } => {
                self.push("DELETE FROM audit WHERE seq <= ").bind(*through_seq);
                self.end();
            }
            Change::PutWebhook(w) => w.upsert(self),
            Change::PutBudget(b) => b.upsert(self),
            Change::PutStanding(b) => b.upsert(self),
            Change::QueueDelivery(d) => upserts::queue(d, self),
            Change::NotifiedUpTo(seq) => {
                self.push("INSERT INTO notify_cursor (id, seq) VALUES (1, ").bind(*seq);
                self.push(") ON CONFLICT (id) DO UPDATE SET seq = excluded.seq").end();
            }
            Change::PutDelivery(d) => d.upsert(self),
            Change::PutIdempotent(a) => a.upsert(self),
            Change::ForgetIdempotent { before } => {
                self.push("DELETE FROM idempotency_keys WHERE created_at < ").bind(clock::format(*before));
                self.end();
            }
            Change::PutLogState(state) => state.upsert(self),
            Change::Output(output) => outputs::output(self, output),
            Change::ForgetDeliveries { before } => {
                self.push("DELETE FROM webhook_deliveries WHERE state <> 'pending' AND created_at < ")
                    .bind(clock::format(*before));
                self.end();
            }
            _ => {}
        }
    }

    /// Inserts a mission unless its id exists (the statement then changes no row).
    pub(super) fn insert_mission(&mut self, m: &'a Mission) {
        self.push(
            "INSERT INTO missions (mission_id, session_id, executor_id, state, payload, created_at, updated_at, \
             completed_at, pty_session_ref, exit_code, error, estimated_start, routing, terminal_data, queued_reason, \
             checkpoint_id, timeouts, dispatched_by) ",
        );
        self.values([m], |b, m| {
            b.bind(m.mission_id.as_str())
                .bind(m.session_id.as_str())
                .bind(m.executor_id.as_deref())
                .bind(m.state.as_str())
                .bind(m.payload.to_string())
                .bind(clock::format(m.created_at))
                .bind(clock::format(m.updated_at))
                .bind(m.completed_at.map(clock::format))
                .bind(m.pty_session_ref.as_deref())
                .bind(m.exit_code)
                .bind(m.error.as_deref())
                .bind(m.estimated_start.as_deref())
                .bind(m.routing.as_ref().map(|v| v.to_string()))
                .bind(m.terminal_data.as_ref().map(|v| v.to_string()))
                .bind(m.queued_reason.as_deref())
                .bind(m.checkpoint_id.as_deref())
                .bind(m.payload.get("timeouts").map(|t| t.to_string()))
                .bind(m.dispatched_by.as_deref());
        });
        self.push(" ON CONFLICT (mission_id) DO NOTHING").end();
    }

    pub(super) fn patch(&mut self, id: &'a str, p: &'a MissionPatch) {
        self.push("UPDATE missions SET mission_id = mission_id");
        if let Some(v) = p.state {
            self.push(", state = ").bind(v.as_str());
        }
        if let Some(v) = &p.executor_id {
            self.push(", executor_id = ").bind(v);
        }
        if let Some(v) = p.updated_at {
            self.push(", updated_at = ").bind(clock::format(v));
        }
        if let Some(v) = p.completed_at {
            self.push(", completed_at = ").bind(clock::format(v));
        }
        if let Some(v) = &p.pty_session_ref {
            self.push(", pty_session_ref = ").bind(v);
        }
        if let Some(v) = p.exit_code {
            self.push(", exit_code = ").bind(v);
        }
        if let Some(v) = &p.error {
            self.push(", error = ").bind(v);
        }
        if let Some(v) = &p.estimated_start {
            self.push(", estimated_start = ").bind(v);
        }
        if let Some(v) = &p.routing {
            self.push(", routing = ").bind(v.to_string());
        }
        if let Some(v) = &p.terminal_data {
            self.push(", terminal_data = ").bind(v.to_string());
        }
        if let Some(v) = &p.queued_reason {
            self.push(", queued_reason = ").bind(v);
        }
        if let Some(v) = &p.checkpoint_id {
            self.push(", checkpoint_id = ").bind(v);
        }
        if let Some(v) = p.scheduled_at {
            self.push(", scheduled_at = ").bind(clock::format(v));
        }
        if let Some(v) = p.attempt {
            self.push(", attempt = ").bind(i64::from(v));
        }
        if let Some(v) = &p.fence {
            self.push(", fence = ").bind(serde_json::to_string(v).expect("a fence serializes"));
        }
        self.push(" WHERE mission_id = ").bind(id).end();
    }

    /// Event rows, one multi-row insert (at most [`Builder::ROWS`]), all received at the commit time
    /// `now`.
    pub(super) fn events(&mut self, rows: &[(i64, &'a NewEvent, &'a Encoded)], now: &'a str) {
        self.push("INSERT INTO events (seq, event, executor_id, mission_id, ts, received_at, data, raw, origin) ");
        self.values(rows, |b, (seq, ev, (data, raw))| {
            b.bind(*seq)
                .bind(ev.event.as_ref())
                .bind(ev.executor_id.as_str())
                .bind(ev.mission_id.as_deref())
                .bind(ev.ts.as_str())
                .bind(now)
                .bind(data.as_str())
                .bind(raw.as_deref())
                .bind(ev.origin.column());
        });
        self.end();
    }

    /// Missions whose patches only said "changed" (at most [`Builder::ROWS`]): `updated_at` becomes the
    /// commit time, in one statement.
    pub(super) fn touches(&mut self, touched: &[&'a str], now: &'a str) {
        self.push("UPDATE missions SET updated_at = ").bind(now).push(" WHERE mission_id IN (");
        self.list(touched.iter().copied());
        self.push(")").end();
    }

    /// Executors' latest event timestamps, `(executor_id, ts)` (at most [`Builder::ROWS`]), in one
    /// statement.
    pub(super) fn seen(&mut self, seen: &[(&'a str, &'a str)]) {
        self.push("UPDATE executors SET last_event_ts = v.column2 FROM (");
        self.values(seen, |b, (id, ts)| {
            b.bind(*id).bind(*ts);
        });
        self.push(") AS v WHERE executors.executor_id = v.column1").end();
    }

    /// Removes events of one mission, or of none (at most [`Builder::ROWS`]); the mission in the
    /// condition keeps a wrong sequence number from removing another mission's event.
    pub(super) fn delete_events(&mut self, mission_id: Option<&'a str>, seqs: &[i64]) {
        match mission_id {
            Some(mission_id) => self.push("DELETE FROM events WHERE mission_id = ").bind(mission_id),
            None => self.push("DELETE FROM events WHERE mission_id IS NULL"),
        };
        self.push(" AND seq IN (");
        self.list(seqs.iter().copied());
        self.push(")").end();
    }

    /// Adds to the sums what an attempt's usage of a model changes of its row as stored.
    pub(super) fn usage_sums(&mut self, r: &'a aiwg_domain::usage::Record) {
        usage::sums(r, self);
    }

    /// Keeps an attempt's usage of a model as it now stands (after [`Script::usage_sums`]).
    pub(super) fn usage_row(&mut self, r: &'a aiwg_domain::usage::Record) {
        usage::row(r, self);
    }

    /// Marks a mission's history compacted at the commit time.
    pub(super) fn compacted(&mut self, mission_id: &'a str, now: &'a str) {
        self.push("UPDATE missions SET compacted_at = ").bind(now);
        self.push(" WHERE mission_id = ").bind(mission_id).end();
    }

    /// Moves the compaction horizon up to `horizon` (never down) and counts `removed` more events.
    pub(super) fn compaction(&mut self, horizon: i64, removed: i64) {
        self.push("UPDATE compaction SET horizon = CASE WHEN horizon < ").bind(horizon);
        self.push(" THEN ").bind(horizon).push(" ELSE horizon END, removed = removed + ").bind(removed).end();
    }
}

/// Where the writer writes a batch's gathered rows (`Gathered::push_rows`): into one builder for the
/// whole batch (SQLite's), or into a builder per statement (PostgreSQL's).
pub(super) trait Scripts<'a> {
    type Builder: Builder<'a>;

    fn next(&mut self) -> &mut Script<Self::Builder>;
}

/// One builder for everything (SQLite's batch).
impl<'a, B: Builder<'a>> Scripts<'a> for Script<B> {
    type Builder = B;

    fn next(&mut self) -> &mut Script<B> {
        self
    }
}

/// A builder per statement (PostgreSQL's), each one made by the function beside them.
impl<'a, B: Builder<'a>, F: FnMut() -> B> Scripts<'a> for (Vec<Script<B>>, F) {
    type Builder = B;

    fn next(&mut self) -> &mut Script<B> {
        self.0.push(Script((self.1)()));
        self.0.last_mut().expect("just pushed")
    }
}
