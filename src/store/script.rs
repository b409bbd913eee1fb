//! The SQL of the writer's statements, written once for both adapters: each method pushes one
//! statement onto a [`Script`], with its binds. SQLite sends a whole batch as one script (one round trip
//! to its thread); PostgreSQL runs each statement as it comes (its extended protocol takes one statement
//! per query).

use sqlx::{Database, Encode, QueryBuilder, Type};

use crate::clock;
use crate::store::{Change, ExecutorRecord, HitlRequest, Mission, MissionPatch, NewEvent, SandboxRecord};

/// An event's `data` and `raw`, as JSON text (encoded by the submitting task, not the writer).
pub(super) type Encoded = (String, Option<String>);

/// Rows per multi-row statement: 8 parameters each stays far below either database's bound-parameter
/// limit.
pub(super) const ROWS_PER_STATEMENT: usize = 500;

/// Statements under construction, for a database that binds what the records hold.
pub(super) struct Script<'a, DB: Database>(pub(super) QueryBuilder<'a, DB>);

impl<'a, DB: Database> Script<'a, DB> {
    pub(super) fn new() -> Script<'a, DB> {
        Script(QueryBuilder::new(""))
    }

    /// No statement pushed yet.
    pub(super) fn is_empty(&self) -> bool {
        self.0.sql().is_empty()
    }
}

impl<'a, DB> Script<'a, DB>
where
    DB: Database,
    &'a str: Encode<'a, DB> + Type<DB>,
    Option<&'a str>: Encode<'a, DB> + Type<DB>,
    &'a [u8]: Encode<'a, DB> + Type<DB>,
    String: Encode<'a, DB> + Type<DB>,
    Option<String>: Encode<'a, DB> + Type<DB>,
    i64: Encode<'a, DB> + Type<DB>,
    Option<i64>: Encode<'a, DB> + Type<DB>,
    bool: Encode<'a, DB> + Type<DB>,
{
    /// An executor, sandbox or HITL request upsert; other changes are not upserts and push nothing.
    pub(super) fn push_upsert(&mut self, change: &'a Change) {
        match change {
            Change::PutExecutor(e) => self.put_executor(e),
            Change::PutSandbox(s) => self.put_sandbox(s),
            Change::PutHitl(h) => self.put_hitl(h),
            _ => {}
        }
    }

    /// Inserts a mission unless its id exists (the statement then changes no row).
    pub(super) fn insert_mission(&mut self, m: &'a Mission) {
        let q = &mut self.0;
        q.push(
            "INSERT INTO missions (mission_id, session_id, executor_id, state, payload, created_at, updated_at, \
             completed_at, pty_session_ref, exit_code, error, estimated_start, routing, terminal_data, queued_reason, \
             checkpoint_id) ",
        );
        q.push_values([m], |mut b, m| {
            b.push_bind(m.mission_id.as_str())
                .push_bind(m.session_id.as_str())
                .push_bind(m.executor_id.as_deref())
                .push_bind(m.state.as_str())
                .push_bind(m.payload.to_string())
                .push_bind(clock::format(m.created_at))
                .push_bind(clock::format(m.updated_at))
                .push_bind(m.completed_at.map(clock::format))
                .push_bind(m.pty_session_ref.as_deref())
                .push_bind(m.exit_code)
                .push_bind(m.error.as_deref())
                .push_bind(m.estimated_start.as_deref())
                .push_bind(m.routing.as_ref().map(|v| v.to_string()))
                .push_bind(m.terminal_data.as_ref().map(|v| v.to_string()))
                .push_bind(m.queued_reason.as_deref())
                .push_bind(m.checkpoint_id.as_deref());
        });
        q.push(" ON CONFLICT (mission_id) DO NOTHING;");
    }

    pub(super) fn put_executor(&mut self, e: &'a ExecutorRecord) {
        let q = &mut self.0;
        q.push(
            "INSERT INTO executors (executor_id, name, version, spec_version, transport_endpoints, capabilities, \
             a2a_instance_id, token_hash, registered_at, registered_from, seen_non_loopback, last_event_ts, \
             disconnected_at, deregistered_at, draining, runtime) ",
        );
        q.push_values([e], |mut b, e| {
            b.push_bind(e.identity.executor_id.as_str())
                .push_bind(e.identity.name.as_str())
                .push_bind(e.identity.version.as_str())
                .push_bind(e.identity.spec_version.as_str())
                .push_bind(serde_json::to_string(&e.identity.transport_endpoints).expect("endpoints serialize"))
                .push_bind(serde_json::to_string(&e.identity.capabilities).expect("capabilities serialize"))
                .push_bind(e.identity.a2a_instance_id.as_deref())
                .push_bind(&e.token_hash[..])
                .push_bind(clock::format(e.registered_at))
                .push_bind(e.registered_from.as_deref())
                .push_bind(e.seen_non_loopback)
                .push_bind(e.last_event_ts.as_deref())
                .push_bind(e.disconnected_at.map(clock::format))
                .push_bind(e.deregistered_at.map(clock::format))
                .push_bind(e.draining)
                .push_bind(e.runtime.as_ref().map(|r| serde_json::to_string(r).expect("runtime serializes")));
        });
        q.push(
            " ON CONFLICT (executor_id) DO UPDATE SET name = excluded.name, version = excluded.version, \
             spec_version = excluded.spec_version, transport_endpoints = excluded.transport_endpoints, \
             capabilities = excluded.capabilities, a2a_instance_id = excluded.a2a_instance_id, \
             token_hash = excluded.token_hash, registered_from = excluded.registered_from, \
             seen_non_loopback = excluded.seen_non_loopback, last_event_ts = excluded.last_event_ts, \
             disconnected_at = excluded.disconnected_at, deregistered_at = excluded.deregistered_at, \
             draining = excluded.draining, runtime = excluded.runtime;",
        );
    }

    pub(super) fn put_sandbox(&mut self, s: &'a SandboxRecord) {
        let q = &mut self.0;
        q.push(
            "INSERT INTO sandboxes (sandbox_id, name, registration, token_hash, registered_at, registered_from, \
             deregistered_at) ",
        );
        q.push_values([s], |mut b, s| {
            b.push_bind(s.sandbox_id.as_str())
                .push_bind(s.name.as_str())
                .push_bind(s.registration.to_string())
                .push_bind(&s.token_hash[..])
                .push_bind(clock::format(s.registered_at))
                .push_bind(s.registered_from.as_deref())
                .push_bind(s.deregistered_at.map(clock::format));
        });
        q.push(
            " ON CONFLICT (sandbox_id) DO UPDATE SET name = excluded.name, registration = excluded.registration, \
             token_hash = excluded.token_hash, registered_from = excluded.registered_from, \
             deregistered_at = excluded.deregistered_at;",
        );
    }

    pub(super) fn put_hitl(&mut self, h: &'a HitlRequest) {
        let q = &mut self.0;
        q.push(
            "INSERT INTO hitl_requests (mission_id, hitl_id, prompt, context, expires_at, requested_at, outcome, \
             response, responded_at, delivered_at) ",
        );
        q.push_values([h], |mut b, h| {
            b.push_bind(h.mission_id.as_str())
                .push_bind(h.hitl_id.as_str())
                .push_bind(h.prompt.as_str())
                .push_bind(h.context.as_deref())
                .push_bind(h.expires_at.map(clock::format))
                .push_bind(clock::format(h.requested_at))
                .push_bind(h.outcome.as_str())
                .push_bind(h.response.as_deref())
                .push_bind(h.responded_at.map(clock::format))
                .push_bind(h.delivered_at.map(clock::format));
        });
        q.push(
            " ON CONFLICT (mission_id, hitl_id) DO UPDATE SET prompt = excluded.prompt, context = excluded.context, \
             expires_at = excluded.expires_at, outcome = excluded.outcome, response = excluded.response, \
             responded_at = excluded.responded_at, delivered_at = excluded.delivered_at;",
        );
    }

    pub(super) fn patch(&mut self, id: &'a str, p: &'a MissionPatch) {
        let q = &mut self.0;
        q.push("UPDATE missions SET mission_id = mission_id");
        if let Some(v) = p.state {
            q.push(", state = ").push_bind(v.as_str());
        }
        if let Some(v) = &p.executor_id {
            q.push(", executor_id = ").push_bind(v);
        }
        if let Some(v) = p.updated_at {
            q.push(", updated_at = ").push_bind(clock::format(v));
        }
        if let Some(v) = p.completed_at {
            q.push(", completed_at = ").push_bind(clock::format(v));
        }
        if let Some(v) = &p.pty_session_ref {
            q.push(", pty_session_ref = ").push_bind(v);
        }
        if let Some(v) = p.exit_code {
            q.push(", exit_code = ").push_bind(v);
        }
        if let Some(v) = &p.error {
            q.push(", error = ").push_bind(v);
        }
        if let Some(v) = &p.estimated_start {
            q.push(", estimated_start = ").push_bind(v);
        }
        if let Some(v) = &p.routing {
            q.push(", routing = ").push_bind(v.to_string());
        }
        if let Some(v) = &p.terminal_data {
            q.push(", terminal_data = ").push_bind(v.to_string());
        }
        if let Some(v) = &p.queued_reason {
            q.push(", queued_reason = ").push_bind(v);
        }
        if let Some(v) = &p.checkpoint_id {
            q.push(", checkpoint_id = ").push_bind(v);
        }
        q.push(" WHERE mission_id = ").push_bind(id).push(";");
    }

    /// Event rows, one multi-row insert (at most [`ROWS_PER_STATEMENT`]), all received at the commit
    /// time `now`.
    pub(super) fn events(&mut self, rows: &[(i64, &'a NewEvent, &'a Encoded)], now: &'a str) {
        let q = &mut self.0;
        q.push("INSERT INTO events (seq, event, executor_id, mission_id, ts, received_at, data, raw) ");
        q.push_values(rows, |mut b, (seq, ev, (data, raw))| {
            b.push_bind(*seq)
                .push_bind(ev.event.as_ref())
                .push_bind(ev.executor_id.as_str())
                .push_bind(ev.mission_id.as_deref())
                .push_bind(ev.ts.as_str())
                .push_bind(now)
                .push_bind(data.as_str())
                .push_bind(raw.as_deref());
        });
        q.push(";");
    }

    /// Missions whose patches only said "changed" (at most [`ROWS_PER_STATEMENT`]): `updated_at` becomes
    /// the commit time, in one statement.
    pub(super) fn touches(&mut self, touched: &[&'a str], now: &'a str) {
        let q = &mut self.0;
        q.push("UPDATE missions SET updated_at = ").push_bind(now).push(" WHERE mission_id IN (");
        let mut ids = q.separated(", ");
        for id in touched {
            ids.push_bind(*id);
        }
        q.push(");");
    }

    /// Executors' latest event timestamps, `(executor_id, ts)` (at most [`ROWS_PER_STATEMENT`]), in one
    /// statement.
    pub(super) fn seen(&mut self, seen: &[(&'a str, &'a str)]) {
        let q = &mut self.0;
        q.push("UPDATE executors SET last_event_ts = v.column2 FROM (");
        q.push_values(seen, |mut b, (id, ts)| {
            b.push_bind(*id).push_bind(*ts);
        });
        q.push(") AS v WHERE executors.executor_id = v.column1;");
    }
}

/// Retention's statements.
impl<'a, DB> Script<'a, DB>
where
    DB: Database,
    &'a str: Encode<'a, DB> + Type<DB>,
    i64: Encode<'a, DB> + Type<DB>,
{
    /// Removes events of one mission (at most [`ROWS_PER_STATEMENT`]); the mission in the condition keeps
    /// a wrong sequence number from removing another mission's event.
    pub(super) fn delete_events(&mut self, mission_id: &'a str, seqs: &[i64]) {
        let q = &mut self.0;
        q.push("DELETE FROM events WHERE mission_id = ").push_bind(mission_id).push(" AND seq IN (");
        let mut list = q.separated(", ");
        for seq in seqs {
            list.push_bind(*seq);
        }
        q.push(");");
    }

    /// Marks a mission's history compacted at the commit time.
    pub(super) fn compacted(&mut self, mission_id: &'a str, now: &'a str) {
        let q = &mut self.0;
        q.push("UPDATE missions SET compacted_at = ").push_bind(now);
        q.push(" WHERE mission_id = ").push_bind(mission_id).push(";");
    }

    /// Moves the compaction horizon up to `horizon` (never down) and counts `removed` more events.
    pub(super) fn compaction(&mut self, horizon: i64, removed: i64) {
        let q = &mut self.0;
        q.push("UPDATE compaction SET horizon = CASE WHEN horizon < ").push_bind(horizon);
        q.push(" THEN ").push_bind(horizon).push(" ELSE horizon END, removed = removed + ").push_bind(removed);
        q.push(";");
    }
}

/// Where the writer pushes a batch's gathered rows (`Gathered::push_rows`): one script for a whole
/// batch (SQLite), or a statement each (PostgreSQL).
pub(super) trait Scripts<'s, DB: Database> {
    fn next(&mut self) -> &mut Script<'s, DB>;
}

/// One script for everything (SQLite's batch).
impl<'a, DB> Scripts<'a, DB> for Script<'a, DB>
where
    DB: Database,
{
    fn next(&mut self) -> &mut Script<'a, DB> {
        self
    }
}

/// A script per statement (PostgreSQL's), the empty ones to be skipped.
impl<'a, DB: Database> Scripts<'a, DB> for Vec<Script<'a, DB>> {
    fn next(&mut self) -> &mut Script<'a, DB> {
        self.push(Script::new());
        self.last_mut().expect("just pushed")
    }
}
