//! Events: one to append, and one as recorded (with its sequence number).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use aiwg_contract::Envelope;

/// An event to append; the writer gives it its sequence number and commit time.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    pub event: std::borrow::Cow<'static, str>,
    pub executor_id: String,
    pub mission_id: Option<String>,
    pub ts: String,
    pub data: Value,
    pub raw: Option<Value>,
    pub origin: Origin,
}

/// Who an event is the word of: the executor it is filed under (its own frame, or a runtime's answer
/// serve relays), serve (its decision or inference: a failed forward, a lost executor, a timeout), or
/// the named operator whose action it records. Timelines say "who did what" from it; the executor the
/// envelope names is whose mission it is, which an event of serve's or an operator's does not change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    #[default]
    Executor,
    Serve,
    Operator {
        name: String,
    },
}

impl Origin {
    /// How the store keeps it: nothing for the executor's word (most of the log, and every event
    /// recorded before origins were), else `serve` or `operator:<name>`.
    pub fn column(&self) -> Option<String> {
        match self {
            Origin::Executor => None,
            Origin::Serve => Some("serve".to_owned()),
            Origin::Operator { name } => Some(format!("operator:{name}")),
        }
    }

    /// The inverse of [`Origin::column`]; a value it never writes reads as the executor's.
    pub fn from_column(column: Option<&str>) -> Origin {
        match column {
            Some("serve") => Origin::Serve,
            Some(other) => match other.strip_prefix("operator:") {
                Some(name) => Origin::Operator { name: name.to_owned() },
                None => Origin::Executor,
            },
            None => Origin::Executor,
        }
    }
}

impl NewEvent {
    /// Files the event as operator `name`'s action: its origin, and `by` in its data (our extension,
    /// which webhooks' summaries and readers of logs older than origins go by).
    pub fn by_operator(&mut self, name: &str) {
        if let Some(fields) = self.data.as_object_mut() {
            fields.insert("by".into(), name.into());
        }
        self.origin = Origin::Operator { name: name.to_owned() };
    }

    /// The event as a frame on an executor's socket: its envelope as JSON text.
    pub fn frame(&self) -> String {
        serde_json::to_string(&self.envelope()).expect("envelopes serialize")
    }

    /// The event as it travels on the wire.
    pub fn envelope(&self) -> Envelope {
        Envelope {
            event: self.event.to_string(),
            executor_id: self.executor_id.clone(),
            mission_id: self.mission_id.clone(),
            ts: self.ts.clone(),
            data: Some(self.data.clone()),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct StoredEvent {
    pub seq: i64,
    pub envelope: Envelope,
    pub received_at: DateTime<Utc>,
    pub origin: Origin,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_round_trip_through_their_column() {
        for origin in [Origin::Executor, Origin::Serve, Origin::Operator { name: "alice:ops".into() }] {
            assert_eq!(Origin::from_column(origin.column().as_deref()), origin);
        }
        assert_eq!(Origin::from_column(Some("someone")), Origin::Executor);
        let json = serde_json::to_value(Origin::Operator { name: "alice".into() }).unwrap();
        assert_eq!(json, serde_json::json!({"kind": "operator", "name": "alice"}));
        assert_eq!(serde_json::to_value(Origin::Serve).unwrap(), serde_json::json!({"kind": "serve"}));
    }
}
