//! Row mapping: rows of either adapter back into the store's records, every failure naming where it is.
//!
//! Both schemas keep the same columns with the same meaning (times and JSON as text, the token hash as
//! bytes), so one mapping serves both: it reads through [`Cols`], which any sqlx row whose database
//! decodes these few types provides.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{ColumnIndex, Decode, Row, Type};

use crate::store::{
    ExecutorRecord, HitlOutcome, HitlRequest, Mission, MissionClock, Result, SandboxRecord, StoreError, StoredEvent,
};
use aiwg_contract::clock;
use aiwg_contract::{Envelope, RegisterPayload};
use aiwg_domain::idempotency::Answered;
use aiwg_domain::operators::{AuditRecord, OperatorRecord, Role};
use aiwg_domain::timeouts::Seen;
use aiwg_domain::webhooks::{Delivery, DeliveryState, Format, Topic, Webhook};
use aiwg_domain::{MissionState, Origin};

/// The column reads the mapping needs, for any row whose database decodes text, 64-bit integers,
/// booleans and bytes (SQLite reads its 0/1 integers as booleans).
pub(super) trait Cols {
    fn text(&self, col: &str) -> Result<String>;
    fn text_opt(&self, col: &str) -> Result<Option<String>>;
    fn int(&self, col: &str) -> Result<i64>;
    fn int_opt(&self, col: &str) -> Result<Option<i64>>;
    fn flag(&self, col: &str) -> Result<bool>;
    fn bytes(&self, col: &str) -> Result<Vec<u8>>;
}

impl<R> Cols for R
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> bool: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
{
    fn text(&self, col: &str) -> Result<String> {
        Ok(self.try_get(col)?)
    }

    fn text_opt(&self, col: &str) -> Result<Option<String>> {
        Ok(self.try_get(col)?)
    }

    fn int(&self, col: &str) -> Result<i64> {
        Ok(self.try_get(col)?)
    }

    fn int_opt(&self, col: &str) -> Result<Option<i64>> {
        Ok(self.try_get(col)?)
    }

    fn flag(&self, col: &str) -> Result<bool> {
        Ok(self.try_get(col)?)
    }

    fn bytes(&self, col: &str) -> Result<Vec<u8>> {
        Ok(self.try_get(col)?)
    }
}

/// A domain count or position (`u64`) as both databases store it (a 64-bit signed integer); none comes
/// near the difference.
pub(super) fn db_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A row mapper that names the table and the row's key in its error: a corrupt row at start-up must say
/// where it is (sqlx's own decode errors name the column), not just "storage failure".
pub(super) fn located<R: Cols, T>(
    table: &'static str,
    key: &'static str,
    map: fn(&R) -> Result<T>,
) -> impl Fn(&R) -> Result<T> {
    move |r| {
        map(r).map_err(|e| {
            let id = r.text(key).unwrap_or_else(|_| "(unreadable)".into());
            StoreError::Corrupt(format!("table {table}, row {key} = {id:?}: {e}"))
        })
    }
}

pub(super) fn parse_state(s: String) -> Result<MissionState> {
    MissionState::parse(&s).ok_or_else(|| StoreError::Corrupt(format!("unknown mission state {s:?}")))
}

fn parse_outcome(s: &str) -> Result<HitlOutcome> {
    HitlOutcome::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown HITL outcome {s:?}")))
}

pub(super) fn parse_json<T: serde::de::DeserializeOwned>(s: &str, what: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// A time column (text in the stored format).
fn time(r: &impl Cols, col: &str) -> Result<DateTime<Utc>> {
    let text = r.text(col)?;
    clock::parse(&text).ok_or_else(|| StoreError::Corrupt(format!("{col} {text:?} is not a time")))
}

fn time_opt(r: &impl Cols, col: &str) -> Result<Option<DateTime<Utc>>> {
    let text = r.text_opt(col)?;
    text.map(|t| clock::parse(&t).ok_or_else(|| StoreError::Corrupt(format!("{col} {t:?} is not a time")))).transpose()
}

fn token_hash(hash: Vec<u8>) -> Result<[u8; 32]> {
    hash.try_into().map_err(|_| StoreError::Corrupt("token_hash is not 32 bytes".into()))
}

pub(super) fn executor_from_row<R: Cols>(r: &R) -> Result<ExecutorRecord> {
    let hash = r.bytes("token_hash")?;
    Ok(ExecutorRecord {
        identity: RegisterPayload {
            executor_id: r.text("executor_id")?,
            a2a_instance_id: r.text_opt("a2a_instance_id")?,
            name: r.text("name")?,
            version: r.text("version")?,
            spec_version: r.text("spec_version")?,
            transport_endpoints: parse_json(&r.text("transport_endpoints")?, "transport_endpoints")?,
            capabilities: parse_json(&r.text("capabilities")?, "capabilities")?,
        },
        token_hash: token_hash(hash)?,
        registered_at: time(r, "registered_at")?,
        registered_from: r.text_opt("registered_from")?,
        seen_non_loopback: r.flag("seen_non_loopback")?,
        draining: r.flag("draining")?,
        last_event_ts: r.text_opt("last_event_ts")?,
        disconnected_at: time_opt(r, "disconnected_at")?,
        deregistered_at: time_opt(r, "deregistered_at")?,
        runtime: r.text_opt("runtime")?.map(|text| parse_json(&text, "runtime")).transpose()?,
    })
}

pub(super) fn sandbox_from_row<R: Cols>(r: &R) -> Result<SandboxRecord> {
    let hash = r.bytes("token_hash")?;
    Ok(SandboxRecord {
        sandbox_id: r.text("sandbox_id")?,
        name: r.text("name")?,
        registration: parse_json(&r.text("registration")?, "registration")?,
        token_hash: token_hash(hash)?,
        registered_at: time(r, "registered_at")?,
        registered_from: r.text_opt("registered_from")?,
        deregistered_at: time_opt(r, "deregistered_at")?,
    })
}

pub(super) fn operator_from_row<R: Cols>(r: &R) -> Result<OperatorRecord> {
    let role = r.text("role")?;
    Ok(OperatorRecord {
        role: Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("unknown operator role {role:?}")))?,
        id: r.text("id")?,
        name: r.text("name")?,
        token_hash: token_hash(r.bytes("token_hash")?)?,
        created_at: time(r, "created_at")?,
        created_by: r.text("created_by")?,
        revoked_at: time_opt(r, "revoked_at")?,
    })
}

pub(super) fn audit_from_row<R: Cols>(r: &R) -> Result<AuditRecord> {
    let role = r.text_opt("role")?;
    let role = role.map(|s| Role::parse(&s).ok_or_else(|| StoreError::Corrupt(format!("unknown role {s:?}"))));
    let status = r.int("status")?;
    Ok(AuditRecord {
        seq: r.int("seq")?,
        at: time(r, "at")?,
        operator: r.text_opt("operator")?,
        role: role.transpose()?,
        source: r.text_opt("source")?,
        method: r.text("method")?,
        route: r.text("route")?,
        target: r.text_opt("target")?,
        detail: r
            .text_opt("detail")?
            .map(|d| serde_json::from_str(&d))
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("an audit record's detail is not JSON: {e}")))?,
        mission_id: r.text_opt("mission_id")?,
        executor_id: r.text_opt("executor_id")?,
        status: u16::try_from(status).map_err(|_| StoreError::Corrupt(format!("status {status}")))?,
        outcome: r.text("outcome")?,
        count: r.int_opt("count")?.map_or(1, |n| u64::try_from(n).unwrap_or(0)),
    })
}

pub(super) fn webhook_from_row<R: Cols>(r: &R) -> Result<Webhook> {
    let topics = r.text("topics")?;
    let topics = topics
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|t| Topic::parse(t).ok_or_else(|| StoreError::Corrupt(format!("unknown topic {t:?}"))))
        .collect::<Result<Vec<_>>>()?;
    let format = r.text("format")?;
    Ok(Webhook {
        id: r.text("id")?,
        url: r.text("url")?,
        topics,
        format: Format::parse(&format).ok_or_else(|| StoreError::Corrupt(format!("unknown format {format:?}")))?,
        secret: r.text("secret")?,
        created_at: time(r, "created_at")?,
        created_by: r.text_opt("created_by")?,
        removed_at: time_opt(r, "removed_at")?,
    })
}

pub(super) fn delivery_from_row<R: Cols>(r: &R) -> Result<Delivery> {
    let topic = r.text("topic")?;
    let state = r.text("state")?;
    let corrupt = |what: &str, value: &dyn std::fmt::Debug| StoreError::Corrupt(format!("{what} {value:?}"));
    let attempts = r.int("attempts")?;
    let status = r.int_opt("last_status")?;
    Ok(Delivery {
        seq: r.int("seq")?,
        id: r.text("id")?,
        webhook_id: r.text("webhook_id")?,
        source: r.text("source")?,
        topic: Topic::parse(&topic).ok_or_else(|| corrupt("unknown topic", &topic))?,
        body: r.text("body")?,
        created_at: time(r, "created_at")?,
        state: DeliveryState::parse(&state).ok_or_else(|| corrupt("unknown delivery state", &state))?,
        attempts: u32::try_from(attempts).map_err(|_| corrupt("attempts", &attempts))?,
        next_at: time_opt(r, "next_at")?,
        give_up_at: time(r, "give_up_at")?,
        last_status: status.map(|s| u16::try_from(s).map_err(|_| corrupt("status", &s))).transpose()?,
        last_error: r.text_opt("last_error")?,
        delivered_at: time_opt(r, "delivered_at")?,
    })
}

pub(super) fn answered_from_row<R: Cols>(r: &R) -> Result<Answered> {
    let status = r.int("status")?;
    let fingerprint = r.bytes("fingerprint")?;
    Ok(Answered {
        operator: r.text("operator")?,
        key: r.text("key")?,
        fingerprint: fingerprint.try_into().map_err(|_| StoreError::Corrupt("a fingerprint is not 32 bytes".into()))?,
        status: u16::try_from(status).map_err(|_| StoreError::Corrupt(format!("status {status}")))?,
        body: r.text("body")?,
        created_at: time(r, "created_at")?,
    })
}

pub(super) fn clock_from_row<R: Cols>(r: &R) -> Result<MissionClock> {
    let seen = Seen {
        state: parse_state(r.text("state")?)?,
        scheduled_at: time(r, "scheduled_at")?,
        updated_at: time(r, "updated_at")?,
    };
    // Written by serve from a dispatch the schema accepted; unreadable, it is as if absent.
    let timeouts = r.text_opt("timeouts")?.and_then(|t| serde_json::from_str(&t).ok());
    Ok(MissionClock { mission_id: r.text("mission_id")?, seen, timeouts })
}

pub(super) fn mission_from_row<R: Cols>(r: &R) -> Result<Mission> {
    let opt_json = |col: &str| -> Result<Option<Value>> { r.text_opt(col)?.map(|s| parse_json(&s, col)).transpose() };
    Ok(Mission {
        mission_id: r.text("mission_id")?,
        session_id: r.text("session_id")?,
        executor_id: r.text_opt("executor_id")?,
        state: parse_state(r.text("state")?)?,
        payload: parse_json(&r.text("payload")?, "payload")?,
        created_at: time(r, "created_at")?,
        updated_at: time(r, "updated_at")?,
        completed_at: time_opt(r, "completed_at")?,
        pty_session_ref: r.text_opt("pty_session_ref")?,
        exit_code: r.int_opt("exit_code")?,
        error: r.text_opt("error")?,
        estimated_start: r.text_opt("estimated_start")?,
        routing: opt_json("routing")?,
        terminal_data: opt_json("terminal_data")?,
        queued_reason: r.text_opt("queued_reason")?,
        checkpoint_id: r.text_opt("checkpoint_id")?,
        compacted_at: time_opt(r, "compacted_at")?,
        attempt: r.int_opt("attempt")?.and_then(|n| u32::try_from(n).ok()).unwrap_or(1),
        // Written by serve alone; unreadable, it is as if no attempt had been abandoned.
        fence: r.text_opt("fence")?.and_then(|f| serde_json::from_str(&f).ok()).unwrap_or_default(),
        dispatched_by: r.text_opt("dispatched_by")?,
    })
}

pub(super) fn hitl_from_row<R: Cols>(r: &R) -> Result<HitlRequest> {
    Ok(HitlRequest {
        mission_id: r.text("mission_id")?,
        hitl_id: r.text("hitl_id")?,
        prompt: r.text("prompt")?,
        context: r.text_opt("context")?,
        expires_at: time_opt(r, "expires_at")?,
        requested_at: time(r, "requested_at")?,
        outcome: parse_outcome(&r.text("outcome")?)?,
        response: r.text_opt("response")?,
        responded_at: time_opt(r, "responded_at")?,
        delivered_at: time_opt(r, "delivered_at")?,
        answered_by: r.text_opt("answered_by")?,
    })
}

pub(super) fn event_from_row<R: Cols>(r: &R) -> Result<StoredEvent> {
    Ok(StoredEvent {
        seq: r.int("seq")?,
        received_at: time(r, "received_at")?,
        envelope: Envelope {
            event: r.text("event")?,
            executor_id: r.text("executor_id")?,
            mission_id: r.text_opt("mission_id")?,
            ts: r.text("ts")?,
            data: Some(parse_json(&r.text("data")?, "event data")?),
        },
        origin: Origin::from_column(r.text_opt("origin")?.as_deref()),
    })
}
