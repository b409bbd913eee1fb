//! Reading an executor's frame into the event to store: parsed, validated against the schema (its
//! `data` against its own event type's shape), of a direction executors may send, and reduced to
//! canonical form. A `mission.progress` report, the frame executors send most, has a typed reading of
//! its own that skips the general one's tree.

use serde_json::Value;

use super::super::links::FrameRef;
use super::Refusal;
use crate::error::Error;
use aiwg_contract::{progress, Envelope, EventType, Schema};
use aiwg_domain::NewEvent;

/// Reads a frame into the event to store: a `mission.progress` report already in canonical form by the
/// typed reading of [`progress`], anything else by the general one ([`parse`], then [`record`]).
pub(crate) fn read(schema: &Schema, executor_id: &str, text: &str) -> Result<(NewEvent, EventType, FrameRef), Refusal> {
    match read_progress(executor_id, text) {
        Some(read) => Ok(read),
        None => read_generally(schema, executor_id, text),
    }
}

/// The typed reading of a `mission.progress` frame, when it takes the frame.
pub(crate) fn read_progress(executor_id: &str, text: &str) -> Option<(NewEvent, EventType, FrameRef)> {
    let progress::Progress { mission_id, ts, data } = progress::read(text)?;
    let event = EventType::MissionProgress;
    let reference = FrameRef { event: Some(event.as_str().to_owned()), mission_id: Some(mission_id.clone()) };
    let row = NewEvent {
        event: event.as_str().into(),
        executor_id: executor_id.to_owned(),
        mission_id: Some(mission_id),
        ts,
        data,
        raw: None,
        origin: aiwg_domain::Origin::Executor,
    };
    Some((row, event, reference))
}

/// The general reading of any frame: parsed, validated, and reduced to canonical form.
pub(crate) fn read_generally(
    schema: &Schema,
    executor_id: &str,
    text: &str,
) -> Result<(NewEvent, EventType, FrameRef), Refusal> {
    let (mut envelope, event, reference) = parse(schema, text)?;
    Ok((record(schema, executor_id, event, &mut envelope), event, reference))
}

/// The event as stored: its data in canonical form (what was received, if that differed, kept
/// beside it), under the socket's authenticated identity whatever the frame claims (as upstream does).
/// Takes the envelope's `data` (the frame's tree is not copied).
fn record(schema: &Schema, executor_id: &str, event: EventType, envelope: &mut Envelope) -> NewEvent {
    let received = envelope.data.take();
    let data = schema.canonical_data(event, received.as_ref());
    let raw = received.filter(|d| *d != data);
    NewEvent {
        event: event.as_str().into(),
        executor_id: executor_id.to_owned(),
        mission_id: envelope.mission_id.clone(),
        ts: envelope.ts.clone(),
        data,
        raw,
        origin: aiwg_domain::Origin::Executor,
    }
}

/// Parses and validates a frame: JSON, a known event type, the schema of the envelope and of its
/// data, and a direction executors may send.
fn parse(schema: &Schema, text: &str) -> Result<(Envelope, EventType, FrameRef), Refusal> {
    let frame: Value = serde_json::from_str(text)
        .map_err(|e| Refusal { error: Error::InvalidJson(e.to_string()), reference: FrameRef::default() })?;
    let reference = FrameRef::of(&frame);
    let refuse = |error: Error| Refusal { error, reference: reference.clone() };
    if let Some(name) = frame.get("event").and_then(Value::as_str) {
        if EventType::parse(name).is_none() {
            return Err(refuse(Error::UnknownEventType(name.chars().take(64).collect())));
        }
    }
    schema
        .validate("event_envelope", &frame)
        .map_err(|details| refuse(Error::SchemaViolation { what: "the event", details }))?;
    let envelope: Envelope = serde_json::from_value(frame).map_err(|e| refuse(Error::InvalidJson(e.to_string())))?;
    let event =
        EventType::parse(&envelope.event).ok_or_else(|| refuse(Error::UnknownEventType(envelope.event.clone())))?;
    if event.is_server_originated() {
        return Err(refuse(Error::Forbidden(format!("{event} is sent by serve, never by an executor"))));
    }
    Ok((envelope, event, reference))
}
