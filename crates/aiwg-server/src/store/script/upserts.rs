//! The records written by a statement of their own, one upsert (or insert) each: executors, sandboxes,
//! operators, HITL requests, audit records, webhook subscriptions and their deliveries, the answers
//! to keyed requests, missions' budgets and standing budgets.

use super::{Builder, Script};
use crate::store::rows::db_int;
use crate::store::{ExecutorRecord, HitlRequest, MissionBudget, SandboxRecord};
use aiwg_contract::clock;
use aiwg_domain::idempotency::Answered;
use aiwg_domain::operators::{minute_of, AuditRecord, OperatorRecord};
use aiwg_domain::standing::Standing;
use aiwg_domain::webhooks::{Delivery, Webhook};

/// A record that one statement writes.
pub(super) trait Upsert<'a> {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>);
}

impl<'a> Upsert<'a> for ExecutorRecord {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        s.push(
            "INSERT INTO executors (executor_id, name, version, spec_version, transport_endpoints, capabilities, \
                 a2a_instance_id, token_hash, registered_at, registered_from, seen_non_loopback, last_event_ts, \
                 disconnected_at, deregistered_at, draining, runtime) ",
        );
        s.values([self], |b, e| {
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
        s.push(
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
}

impl<'a> Upsert<'a> for SandboxRecord {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        s.push(
            "INSERT INTO sandboxes (sandbox_id, name, registration, token_hash, registered_at, registered_from, \
                 deregistered_at) ",
        );
        s.values([self], |b, r| {
            b.bind(r.sandbox_id.as_str())
                .bind(r.name.as_str())
                .bind(r.registration.to_string())
                .bind(&r.token_hash[..])
                .bind(clock::format(r.registered_at))
                .bind(r.registered_from.as_deref())
                .bind(r.deregistered_at.map(clock::format));
        });
        s.push(
            " ON CONFLICT (sandbox_id) DO UPDATE SET name = excluded.name, registration = excluded.registration, \
                 token_hash = excluded.token_hash, registered_from = excluded.registered_from, \
                 deregistered_at = excluded.deregistered_at",
        )
        .end();
    }
}

impl<'a> Upsert<'a> for OperatorRecord {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        s.push("INSERT INTO operators (id, name, role, token_hash, created_at, created_by, revoked_at) ");
        s.values([self], |b, o| {
            b.bind(o.id.as_str())
                .bind(o.name.as_str())
                .bind(o.role.as_str())
                .bind(&o.token_hash[..])
                .bind(clock::format(o.created_at))
                .bind(o.created_by.as_str())
                .bind(o.revoked_at.map(clock::format));
        });
        s.push(
            " ON CONFLICT (name) DO UPDATE SET id = excluded.id, role = excluded.role, token_hash = excluded.token_hash, \
                 created_at = excluded.created_at, created_by = excluded.created_by, revoked_at = excluded.revoked_at",
        )
        .end();
    }
}

impl<'a> Upsert<'a> for AuditRecord {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        audit_insert(self, None, s);
        s.end();
    }
}

/// The audit record's insert, with its `bucket` (the key of a count of refusals) when it has one.
fn audit_insert<'a, B: Builder<'a>>(a: &'a AuditRecord, bucket: Option<String>, s: &mut Script<B>) {
    s.push(
        "INSERT INTO audit (at, operator, role, source, method, route, target, detail, mission_id, executor_id, \
             status, outcome, count, bucket) ",
    );
    s.values([a], |b, a| {
        b.bind(clock::format(a.at))
            .bind(a.operator.as_deref())
            .bind(a.role.map(|r| r.as_str()))
            .bind(a.source.as_deref())
            .bind(a.method.as_str())
            .bind(a.route.as_str())
            .bind(a.target.as_deref())
            .bind(a.detail.as_ref().map(serde_json::Value::to_string))
            .bind(a.mission_id.as_deref())
            .bind(a.executor_id.as_deref())
            .bind(i64::from(a.status))
            .bind(a.outcome.as_str())
            .bind(i64::try_from(a.count).unwrap_or(i64::MAX))
            .bind(bucket.clone());
    });
}

/// A count of refusals of one source in one minute (that of `a.at`): added to the record of that source
/// and minute, which is created with the first. A method or route that differs from the record's
/// becomes `*` there.
pub(super) fn count_refusals<'a, B: Builder<'a>>(a: &'a AuditRecord, s: &mut Script<B>) {
    let bucket = format!("{} {}", a.source.as_deref().unwrap_or("-"), clock::format(minute_of(a.at)));
    audit_insert(a, Some(bucket), s);
    s.push(
        " ON CONFLICT (bucket) DO UPDATE SET count = audit.count + excluded.count, \
             method = CASE WHEN audit.method = excluded.method THEN audit.method ELSE '*' END, \
             route = CASE WHEN audit.route = excluded.route THEN audit.route ELSE '*' END",
    )
    .end();
}

impl<'a> Upsert<'a> for HitlRequest {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        s.push(
            "INSERT INTO hitl_requests (mission_id, hitl_id, prompt, context, expires_at, requested_at, outcome, \
                 response, responded_at, delivered_at, answered_by) ",
        );
        s.values([self], |b, h| {
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
        s.push(
            " ON CONFLICT (mission_id, hitl_id) DO UPDATE SET prompt = excluded.prompt, context = excluded.context, \
                 expires_at = excluded.expires_at, outcome = excluded.outcome, response = excluded.response, \
                 responded_at = excluded.responded_at, delivered_at = excluded.delivered_at, \
                 answered_by = excluded.answered_by",
        )
        .end();
    }
}

impl<'a> Upsert<'a> for Webhook {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        s.push("INSERT INTO webhooks (id, url, topics, format, secret, created_at, created_by, removed_at) ");
        s.values([self], |b, w| {
            let topics: Vec<&str> = w.topics.iter().map(|t| t.as_str()).collect();
            b.bind(w.id.as_str())
                .bind(w.url.as_str())
                .bind(topics.join(","))
                .bind(w.format.as_str())
                .bind(w.secret.as_str())
                .bind(clock::format(w.created_at))
                .bind(w.created_by.as_deref())
                .bind(w.removed_at.map(clock::format));
        });
        s.push(" ON CONFLICT (id) DO UPDATE SET removed_at = excluded.removed_at").end();
    }
}

impl<'a> Upsert<'a> for MissionBudget {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        s.push("INSERT INTO mission_budgets (mission_id, budget, since, warned, exhausted) ");
        s.values([self], |b, m| {
            b.bind(m.mission_id.as_str())
                .bind(m.budget.to_json().to_string())
                .bind(clock::format(m.since))
                .bind(m.warned.to_text())
                .bind(m.exhausted.map(|l| l.as_str()));
        });
        s.push(
            " ON CONFLICT (mission_id) DO UPDATE SET budget = excluded.budget, warned = excluded.warned, \
             exhausted = excluded.exhausted",
        )
        .end();
    }
}

impl<'a> Upsert<'a> for Standing {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        s.push(
            "INSERT INTO budgets (id, scope, max_tokens, max_cost_micros, period_days, on_exhausted, created_at, \
             created_by, removed_at) ",
        );
        s.values([self], |b, st| {
            b.bind(st.id.as_str())
                .bind(st.scope.as_text())
                .bind(st.max_tokens.map(db_int))
                .bind(st.max_cost_micros)
                .bind(i64::from(st.period_days))
                .bind(st.on_exhausted.as_str())
                .bind(clock::format(st.created_at))
                .bind(st.created_by.as_deref())
                .bind(st.removed_at.map(clock::format));
        });
        s.push(" ON CONFLICT (id) DO UPDATE SET removed_at = excluded.removed_at").end();
    }
}

/// Queues a delivery in the outbox, unless its subscription has one from the same source.
pub(super) fn queue<'a, B: Builder<'a>>(delivery: &'a Delivery, s: &mut Script<B>) {
    {
        s.push(
            "INSERT INTO webhook_deliveries (id, webhook_id, source, topic, body, created_at, state, attempts, \
             next_at, give_up_at) ",
        );
        s.values([delivery], |b, d| {
            b.bind(d.id.as_str())
                .bind(d.webhook_id.as_str())
                .bind(d.source.as_str())
                .bind(d.topic.as_str())
                .bind(d.body.as_str())
                .bind(clock::format(d.created_at))
                .bind(d.state.as_str())
                .bind(i64::from(d.attempts))
                .bind(d.next_at.map(clock::format))
                .bind(clock::format(d.give_up_at));
        });
        s.push(" ON CONFLICT (webhook_id, source) DO NOTHING").end();
    }
}

/// A delivery's state after an attempt (its body and source never change).
impl<'a> Upsert<'a> for Delivery {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        s.push("UPDATE webhook_deliveries SET state = ").bind(self.state.as_str());
        s.push(", attempts = ").bind(i64::from(self.attempts));
        s.push(", next_at = ").bind(self.next_at.map(clock::format));
        s.push(", give_up_at = ").bind(clock::format(self.give_up_at));
        s.push(", last_status = ").bind(self.last_status.map(i64::from));
        s.push(", last_error = ").bind(self.last_error.as_deref());
        s.push(", delivered_at = ").bind(self.delivered_at.map(clock::format));
        s.push(" WHERE id = ").bind(self.id.as_str());
        s.end();
    }
}

impl<'a> Upsert<'a> for Answered {
    fn upsert<B: Builder<'a>>(&'a self, s: &mut Script<B>) {
        s.push("INSERT INTO idempotency_keys (operator, key, fingerprint, status, body, created_at) ");
        s.values([self], |b, a| {
            b.bind(a.operator.as_str())
                .bind(a.key.as_str())
                .bind(&a.fingerprint[..])
                .bind(i64::from(a.status))
                .bind(a.body.as_str())
                .bind(clock::format(a.created_at));
        });
        s.push(
            " ON CONFLICT (operator, key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status, \
             body = excluded.body, created_at = excluded.created_at",
        )
        .end();
    }
}
