//! Row mapping: SQLite rows back into the store's records, every failure naming where it is.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

use crate::clock;
use crate::contract::{Envelope, RegisterPayload};
use crate::domain::MissionState;
use crate::store::{ExecutorRecord, HitlOutcome, HitlRequest, Mission, Result, SandboxRecord, StoreError, StoredEvent};

/// A row mapper that names the table and the row's key in its error: a corrupt row at start-up must say
/// where it is (sqlx's own decode errors name the column), not just "storage failure".
pub(super) fn located<T>(
    table: &'static str,
    key: &'static str,
    map: fn(&SqliteRow) -> Result<T>,
) -> impl Fn(&SqliteRow) -> Result<T> {
    move |r| {
        map(r).map_err(|e| {
            let id = r.try_get::<String, _>(key).unwrap_or_else(|_| "(unreadable)".into());
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
fn time(r: &SqliteRow, col: &str) -> Result<DateTime<Utc>> {
    let text: String = r.try_get(col)?;
    clock::parse(&text).ok_or_else(|| StoreError::Corrupt(format!("{col} {text:?} is not a time")))
}

fn time_opt(r: &SqliteRow, col: &str) -> Result<Option<DateTime<Utc>>> {
    let text: Option<String> = r.try_get(col)?;
    text.map(|t| clock::parse(&t).ok_or_else(|| StoreError::Corrupt(format!("{col} {t:?} is not a time")))).transpose()
}

fn token_hash(hash: Vec<u8>) -> Result<[u8; 32]> {
    hash.try_into().map_err(|_| StoreError::Corrupt("token_hash is not 32 bytes".into()))
}

pub(super) fn executor_from_row(r: &SqliteRow) -> Result<ExecutorRecord> {
    let hash: Vec<u8> = r.try_get("token_hash")?;
    Ok(ExecutorRecord {
        identity: RegisterPayload {
            executor_id: r.try_get("executor_id")?,
            a2a_instance_id: r.try_get("a2a_instance_id")?,
            name: r.try_get("name")?,
            version: r.try_get("version")?,
            spec_version: r.try_get("spec_version")?,
            transport_endpoints: parse_json(r.try_get("transport_endpoints")?, "transport_endpoints")?,
            capabilities: parse_json(r.try_get("capabilities")?, "capabilities")?,
        },
        token_hash: token_hash(hash)?,
        registered_at: time(r, "registered_at")?,
        registered_from: r.try_get("registered_from")?,
        seen_non_loopback: r.try_get::<i64, _>("seen_non_loopback")? != 0,
        draining: r.try_get::<i64, _>("draining")? != 0,
        last_event_ts: r.try_get("last_event_ts")?,
        disconnected_at: time_opt(r, "disconnected_at")?,
        deregistered_at: time_opt(r, "deregistered_at")?,
        runtime: match r.try_get::<Option<&str>, _>("runtime")? {
            Some(text) => Some(parse_json(text, "runtime")?),
            None => None,
        },
    })
}

pub(super) fn sandbox_from_row(r: &SqliteRow) -> Result<SandboxRecord> {
    let hash: Vec<u8> = r.try_get("token_hash")?;
    Ok(SandboxRecord {
        sandbox_id: r.try_get("sandbox_id")?,
        name: r.try_get("name")?,
        registration: parse_json(r.try_get("registration")?, "registration")?,
        token_hash: token_hash(hash)?,
        registered_at: time(r, "registered_at")?,
        registered_from: r.try_get("registered_from")?,
        deregistered_at: time_opt(r, "deregistered_at")?,
    })
}

pub(super) fn mission_from_row(r: &SqliteRow) -> Result<Mission> {
    let opt_json = |col: &str| -> Result<Option<Value>> {
        r.try_get::<Option<String>, _>(col)?.map(|s| parse_json(&s, col)).transpose()
    };
    Ok(Mission {
        mission_id: r.try_get("mission_id")?,
        session_id: r.try_get("session_id")?,
        executor_id: r.try_get("executor_id")?,
        state: parse_state(r.try_get("state")?)?,
        payload: parse_json(r.try_get("payload")?, "payload")?,
        created_at: time(r, "created_at")?,
        updated_at: time(r, "updated_at")?,
        completed_at: time_opt(r, "completed_at")?,
        pty_session_ref: r.try_get("pty_session_ref")?,
        exit_code: r.try_get("exit_code")?,
        error: r.try_get("error")?,
        estimated_start: r.try_get("estimated_start")?,
        routing: opt_json("routing")?,
        terminal_data: opt_json("terminal_data")?,
        queued_reason: r.try_get("queued_reason")?,
        checkpoint_id: r.try_get("checkpoint_id")?,
    })
}

pub(super) fn hitl_from_row(r: &SqliteRow) -> Result<HitlRequest> {
    Ok(HitlRequest {
        mission_id: r.try_get("mission_id")?,
        hitl_id: r.try_get("hitl_id")?,
        prompt: r.try_get("prompt")?,
        context: r.try_get("context")?,
        expires_at: time_opt(r, "expires_at")?,
        requested_at: time(r, "requested_at")?,
        outcome: parse_outcome(r.try_get("outcome")?)?,
        response: r.try_get("response")?,
        responded_at: time_opt(r, "responded_at")?,
        delivered_at: time_opt(r, "delivered_at")?,
    })
}

pub(super) fn event_from_row(r: &SqliteRow) -> Result<StoredEvent> {
    Ok(StoredEvent {
        seq: r.try_get("seq")?,
        received_at: time(r, "received_at")?,
        envelope: Envelope {
            event: r.try_get("event")?,
            executor_id: r.try_get("executor_id")?,
            mission_id: r.try_get("mission_id")?,
            ts: r.try_get("ts")?,
            data: Some(parse_json(r.try_get("data")?, "event data")?),
        },
    })
}
