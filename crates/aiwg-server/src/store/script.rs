//! The SQL of the writer's statements, written once for both adapters: each method writes one
//! statement, with its parameters, through a [`Builder`]. SQLite's writer runs the statements itself,
//! each prepared once and stepped row by row (`sqlite::raw`); PostgreSQL's builds a query per statement
//! (its extended protocol takes one statement per query), multi-row where a statement takes many rows.

use std::borrow::Cow;

use crate::store::{Change, ExecutorRecord, HitlRequest, Mission, MissionPatch, NewEvent, SandboxRecord};
use aiwg_contract::clock;
use aiwg_domain::operators::{AuditRecord, OperatorRecord};

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

    /// An executor, sandbox, operator or HITL request upsert, an audit record, or a sandbox or old audit
    /// records forgotten: written one by one, as they come; other changes write nothing here.
    pub(super) fn push_upsert(&mut self, change: &'a Change) {
        match change {
            Change::PutExecutor(e) => self.put_executor(e),
            Change::PutSandbox(s) => self.put_sandbox(s),
            Change::ForgetSandbox(id) => {
                self.push("DELETE FROM sandboxes WHERE deregistered_at IS NOT NULL AND sandbox_id = ")
                    .bind(id.as_str());
                self.end();
            }
            Change::PutHitl(h) => self.put_hitl(h),
            Change::PutOperator(o) => self.put_operator(o),
            Change::AppendAudit(a) => self.append_audit(a),
            Change::ForgetAudit { before } => {
                self.push("DELETE FROM audit WHERE at < ").bind(clock::format(*before));
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
             checkpoint_id) ",
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
                .bind(m.checkpoint_id.as_deref());
        });
        self.push(" ON CONFLICT (mission_id) DO NOTHING").end();
    }

    pub(super) fn put_executor(&mut self, e: &'a ExecutorRecord) {
        self.push(
            "INSERT INTO executors (executor_id, name, version, spec_version, transport_endpoints, capabilities, \
             a2a_instance_id, token_hash, registered_at, registered_from, seen_non_loopback, last_event_ts, \
             disconnected_at, deregistered_at, draining, runtime) ",
        );
        self.values([e], |b, e| {
            b.bind(e.identity.executor_id.as_str())
                .bind(e.identity.name.as_str())
                .bind(e.identity.version.as_str())
                .bind(e.identity.spec_version.as_str())
                .bind(serde_json::to_string(&e.identity.transport_endpoints).expect("endpoints serialize"))
                .bind(serde_json::to_string(&e.identity.capabilities).expect("capabilities serialize"))
                .bind(e.identity.a2a_instance_id.as_deref())
                .bind(&e.token_hash[..])
                .bind(clock::format(e.registered_at))
                .bind(e.registered_from.as_deref())
                .bind(e.seen_non_loopback)
                .bind(e.last_event_ts.as_deref())
                .bind(e.disconnected_at.map(clock::format))
                .bind(e.deregistered_at.map(clock::format))
                .bind(e.draining)
                .bind(e.runtime.as_ref().map(|r| serde_json::to_string(r).expect("runtime serializes")));
        });
        self.push(
            " ON CONFLICT (executor_id) DO UPDATE SET name = excluded.name, version = excluded.version, \
             spec_version = excluded.spec_version, transport_endpoints = excluded.transport_endpoints, \
             capabilities = excluded.capabilities, a2a_instance_id = excluded.a2a_instance_id, \
             token_hash = excluded.token_hash, registered_from = excluded.registered_from, \
             seen_non_loopback = excluded.seen_non_loopback, last_event_ts = excluded.last_event_ts, \
             disconnected_at = excluded.disconnected_at, deregistered_at = excluded.deregistered_at, \
             draining = excluded.draining, runtime = excluded.runtime",
        )
        .end();
    }

    pub(super) fn put_sandbox(&mut self, s: &'a SandboxRecord) {
        self.push(
            "INSERT INTO sandboxes (sandbox_id, name, registration, token_hash, registered_at, registered_from, \
             deregistered_at) ",
        );
        self.values([s], |b, s| {
            b.bind(s.sandbox_id.as_str())
                .bind(s.name.as_str())
                .bind(s.registration.to_string())
                .bind(&s.token_hash[..])
                .bind(clock::format(s.registered_at))
                .bind(s.registered_from.as_deref())
                .bind(s.deregistered_at.map(clock::format));
        });
        self.push(
            " ON CONFLICT (sandbox_id) DO UPDATE SET name = excluded.name, registration = excluded.registration, \
             token_hash = excluded.token_hash, registered_from = excluded.registered_from, \
             deregistered_at = excluded.deregistered_at",
        )
        .end();
    }

    fn put_operator(&mut self, o: &'a OperatorRecord) {
        self.push("INSERT INTO operators (name, role, token_hash, created_at, created_by, revoked_at) ");
        self.values([o], |b, o| {
            b.bind(o.name.as_str())
                .bind(o.role.as_str())
                .bind(&o.token_hash[..])
                .bind(clock::format(o.created_at))
                .bind(o.created_by.as_str())
                .bind(o.revoked_at.map(clock::format));
        });
        self.push(
            " ON CONFLICT (name) DO UPDATE SET role = excluded.role, token_hash = excluded.token_hash, \
             created_at = excluded.created_at, created_by = excluded.created_by, revoked_at = excluded.revoked_at",
        )
        .end();
    }

    fn append_audit(&mut self, a: &'a AuditRecord) {
        self.push(
            "INSERT INTO audit (at, operator, role, source, method, route, target, mission_id, executor_id, status, \
             outcome) ",
        );
        self.values([a], |b, a| {
            b.bind(clock::format(a.at))
                .bind(a.operator.as_deref())
                .bind(a.role.map(|r| r.as_str()))
                .bind(a.source.as_deref())
                .bind(a.method.as_str())
                .bind(a.route.as_str())
                .bind(a.target.as_deref())
                .bind(a.mission_id.as_deref())
                .bind(a.executor_id.as_deref())
                .bind(i64::from(a.status))
                .bind(a.outcome.as_str());
        });
        self.end();
    }

    pub(super) fn put_hitl(&mut self, h: &'a HitlRequest) {
        self.push(
            "INSERT INTO hitl_requests (mission_id, hitl_id, prompt, context, expires_at, requested_at, outcome, \
             response, responded_at, delivered_at, answered_by) ",
        );
        self.values([h], |b, h| {
            b.bind(h.mission_id.as_str())
                .bind(h.hitl_id.as_str())
                .bind(h.prompt.as_str())
                .bind(h.context.as_deref())
                .bind(h.expires_at.map(clock::format))
                .bind(clock::format(h.requested_at))
                .bind(h.outcome.as_str())
                .bind(h.response.as_deref())
                .bind(h.responded_at.map(clock::format))
                .bind(h.delivered_at.map(clock::format))
                .bind(h.answered_by.as_deref());
        });
        self.push(
            " ON CONFLICT (mission_id, hitl_id) DO UPDATE SET prompt = excluded.prompt, context = excluded.context, \
             expires_at = excluded.expires_at, outcome = excluded.outcome, response = excluded.response, \
             responded_at = excluded.responded_at, delivered_at = excluded.delivered_at, \
             answered_by = excluded.answered_by",
        )
        .end();
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
        self.push(" WHERE mission_id = ").bind(id).end();
    }

    /// Event rows, one multi-row insert (at most [`Builder::ROWS`]), all received at the commit time
    /// `now`.
    pub(super) fn events(&mut self, rows: &[(i64, &'a NewEvent, &'a Encoded)], now: &'a str) {
        self.push("INSERT INTO events (seq, event, executor_id, mission_id, ts, received_at, data, raw) ");
        self.values(rows, |b, (seq, ev, (data, raw))| {
            b.bind(*seq)
                .bind(ev.event.as_ref())
                .bind(ev.executor_id.as_str())
                .bind(ev.mission_id.as_deref())
                .bind(ev.ts.as_str())
                .bind(now)
                .bind(data.as_str())
                .bind(raw.as_deref());
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
