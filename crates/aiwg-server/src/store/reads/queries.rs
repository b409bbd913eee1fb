//! The reads' fixed queries, formatted once from the enums that name their states and outcomes.
//!
//! Mission states, HITL outcomes and event types are named in SQL by their enums (`as_str`), never
//! spelled again. The queries that compare against a fixed set of them are formatted once rather than
//! bound, so that the text the database plans (and the statement cache keys on) is the literal SQL it
//! always was: SQLite's planner matches a partial index (`hitl_open`) against a query's literal condition.

use std::sync::LazyLock;

use crate::store::{AuditQuery, HitlOutcome, HitlQuery};
use aiwg_contract::clock;
use aiwg_contract::EventType;
use aiwg_domain::MissionState;

/// `'done', 'failed', 'aborted'`: the states of a mission that is over.
pub(super) static ENDED: LazyLock<String> = LazyLock::new(|| states(MissionState::is_terminal));

/// `'queued', 'done', 'failed', 'aborted'`: the states of a mission that is not live (waiting for an
/// executor, or over).
pub(super) static NOT_LIVE: LazyLock<String> =
    LazyLock::new(|| states(|s| s == MissionState::Queued || s.is_terminal()));

/// The states `which` picks, as an SQL list of literals.
fn states(which: impl Fn(MissionState) -> bool) -> String {
    let names: Vec<String> = MissionState::ALL.into_iter().filter(|s| which(*s)).map(|s| format!("'{s}'")).collect();
    names.join(", ")
}

/// The notable event types as an SQL list of literals, in the order of
/// [`NOTABLE`](aiwg_domain::webhooks::NOTABLE): the condition of the partial index `events_notable`
/// (migrations 11 and postgres 9), which a query must repeat word for word for the planner to use it.
pub(super) static NOTABLE: LazyLock<String> = LazyLock::new(|| {
    let names: Vec<String> = aiwg_domain::webhooks::NOTABLE.iter().map(|e| format!("'{e}'")).collect();
    names.join(", ")
});

pub(super) static LIVE_MISSIONS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT mission_id, executor_id, state, pty_session_ref, attempt FROM missions WHERE state NOT IN ({}) \
             ORDER BY created_at, mission_id",
        *NOT_LIVE
    )
});

/// The clocks of the missions that have not ended (`only_timed`: whose dispatch named timeouts), read
/// every second: the states are listed (`IN`, not `NOT IN`) so that the index by state finds the few live
/// missions among a store's many ended ones instead of scanning them all.
fn mission_clocks(only_timed: bool) -> String {
    format!(
        "SELECT mission_id, state, COALESCE(scheduled_at, created_at) AS scheduled_at, updated_at, timeouts \
         FROM missions WHERE state IN ({}){} ORDER BY id",
        states(|s| !s.is_terminal()),
        if only_timed { " AND timeouts IS NOT NULL" } else { "" }
    )
}

pub(super) static MISSION_CLOCKS: LazyLock<String> = LazyLock::new(|| mission_clocks(false));
pub(super) static TIMED_MISSION_CLOCKS: LazyLock<String> = LazyLock::new(|| mission_clocks(true));

/// The window runs over sequence numbers only, and the data of the sixteen it keeps per mission is read
/// by key afterwards: a window over the rows with their data had the database materialise every progress
/// event of every live mission (200 of 900 KB made a restart take 213 MB of anonymous memory, the
/// adversary's RSS of 245 MB).
pub(super) static RECENT_PROGRESS_OF_LIVE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT mission_id, ts, data FROM events WHERE seq IN (SELECT seq FROM (SELECT m.seq, \
         ROW_NUMBER() OVER (PARTITION BY m.mission_id ORDER BY m.seq DESC) AS newest \
         FROM mission_events m WHERE m.event = '{progress}' \
         AND m.mission_id IN (SELECT mission_id FROM missions WHERE state NOT IN ({not_live}))) AS recent \
         WHERE newest <= 16) ORDER BY seq",
        progress = EventType::MissionProgress.as_str(),
        not_live = *NOT_LIVE,
    )
});

pub(super) static RECENT_PROGRESS_OF: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT ts, data FROM (SELECT ts, data, seq FROM mission_events WHERE mission_id = $1 AND event = '{}' \
         ORDER BY seq DESC LIMIT 16) AS newest ORDER BY seq",
        EventType::MissionProgress.as_str()
    )
});

pub(super) static QUEUED_MISSIONS: LazyLock<String> =
    LazyLock::new(|| format!("SELECT * FROM missions WHERE state = '{}' ORDER BY id", MissionState::Queued.as_str()));

/// Word for word the condition of the partial index `hitl_open` (migration 2), so that it is used.
pub(super) static OPEN_HITL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT * FROM hitl_requests WHERE outcome = '{pending}' OR (outcome = '{answered}' AND delivered_at IS NULL)",
        pending = HitlOutcome::Pending.as_str(),
        answered = HitlOutcome::Answered.as_str(),
    )
});

pub(super) static PENDING_HITL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT * FROM hitl_requests WHERE mission_id = $1 AND outcome = '{}' LIMIT 1",
        HitlOutcome::Pending.as_str()
    )
});

pub(super) static UNDELIVERED_ANSWERS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT h.* FROM hitl_requests h JOIN missions m ON m.mission_id = h.mission_id \
         WHERE h.outcome = '{}' AND h.delivered_at IS NULL AND m.executor_id = $1 ORDER BY h.responded_at",
        HitlOutcome::Answered.as_str()
    )
});

/// The newest audit record past `$1` bytes of records counted from the newest: each record's texts and
/// a fixed part for the rest, as `aiwg_domain::operators::audit_bytes` counts them (in characters here,
/// which both databases count alike; the bound is about the trail's size, not exact to the byte).
pub(super) static AUDIT_BEYOND: LazyLock<String> = LazyLock::new(|| {
    let texts = ["operator", "role", "source", "target", "detail", "mission_id", "executor_id"]
        .map(|c| format!("COALESCE(LENGTH({c}), 0)"))
        .join(" + ");
    format!(
        "SELECT seq FROM (SELECT seq, SUM({} + LENGTH(at) + LENGTH(method) + LENGTH(route) + LENGTH(outcome) + {texts}) \
         OVER (ORDER BY seq DESC) AS newer FROM audit) AS trail WHERE newer > $1 ORDER BY seq DESC LIMIT 1",
        aiwg_domain::operators::AUDIT_ROW_BYTES
    )
});

/// The query of a page of the audit trail, newest first, and the texts it binds in order (then
/// `before_seq` if any, then the limit).
pub(super) fn audit(q: &AuditQuery) -> (String, Vec<String>) {
    let mut sql = String::from("SELECT * FROM audit WHERE 1 = 1");
    let mut texts = Vec::new();
    let filters = [
        ("operator", "=", q.operator.clone()),
        ("mission_id", "=", q.mission_id.clone()),
        ("executor_id", "=", q.executor_id.clone()),
        ("at", ">=", q.since.map(clock::format)),
        ("at", "<", q.until.map(clock::format)),
    ];
    for (column, op, value) in filters {
        if let Some(value) = value {
            texts.push(value);
            sql.push_str(&format!(" AND {column} {op} ${}", texts.len()));
        }
    }
    let mut n = texts.len();
    if q.before_seq.is_some() {
        n += 1;
        sql.push_str(&format!(" AND seq < ${n}"));
    }
    sql.push_str(&format!(" ORDER BY seq DESC LIMIT ${}", n + 1));
    (sql, texts)
}

/// The query of a page of the HITL inbox, in the order asked, and the texts it binds in order (then
/// the limit).
pub(super) fn inbox(q: &HitlQuery) -> (String, Vec<String>) {
    let mut sql = String::from(
        "SELECT h.*, m.executor_id AS mission_executor FROM hitl_requests h \
         JOIN missions m ON m.mission_id = h.mission_id WHERE h.outcome = $1",
    );
    let mut texts = vec![q.outcome.as_str().to_owned()];
    if let Some(executor_id) = &q.executor_id {
        texts.push(executor_id.clone());
        sql.push_str(&format!(" AND m.executor_id = ${}", texts.len()));
    }
    if let Some(after) = &q.after {
        let n = texts.len();
        sql.push_str(&format!(" AND (h.requested_at, h.mission_id, h.hitl_id) > (${}, ${}, ${})", n + 1, n + 2, n + 3));
        texts.extend([clock::format(after.requested_at), after.mission_id.clone(), after.hitl_id.clone()]);
    }
    sql.push_str(&format!(" ORDER BY h.requested_at, h.mission_id, h.hitl_id LIMIT ${}", texts.len() + 1));
    (sql, texts)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_notable_events_index_has_the_condition_the_reads_write() {
        let condition = format!("WHERE event IN ({})", *super::NOTABLE);
        for migration in [
            include_str!("../../../../../migrations/0025_budgets.sql"),
            include_str!("../../../../../migrations/postgres/0023_budgets.sql"),
        ] {
            assert!(migration.contains(&format!("ON events (seq) {condition};")), "{condition}");
        }
    }
}
