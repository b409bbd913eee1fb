//! Which attempt of each mission this executor runs (it declares `x-attempts`): serve says so in the
//! dispatch (`attempt`), and every event the executor sends about the mission names it back in its
//! `data`, so that serve never takes a word about an attempt it abandoned for the current one's.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

/// The attempt of each mission serve handed this executor, by mission id.
#[derive(Default)]
pub(super) struct Attempts(Mutex<HashMap<String, u64>>);

impl Attempts {
    /// Remembers the attempt a dispatch carries (none from a serve that does not number them).
    pub(super) fn dispatched(&self, mission_id: &str, payload: &Value) {
        let mut attempts = self.0.lock().expect("attempts lock");
        match payload.get("attempt").and_then(Value::as_u64) {
            Some(attempt) => attempts.insert(mission_id.to_owned(), attempt),
            None => attempts.remove(mission_id),
        };
    }

    /// The mission's attempt, when serve numbered it.
    pub(super) fn of(&self, mission_id: &str) -> Option<u64> {
        self.0.lock().expect("attempts lock").get(mission_id).copied()
    }

    /// An event's data, naming the mission's attempt when serve numbered it.
    pub(super) fn stamped(&self, mission_id: &str, mut data: Value) -> Value {
        let attempt = self.of(mission_id);
        if let (Some(attempt), Some(fields)) = (attempt, data.as_object_mut()) {
            fields.insert("attempt".into(), attempt.into());
        }
        data
    }

    /// The mission is over here.
    pub(super) fn forget(&self, mission_id: &str) {
        self.0.lock().expect("attempts lock").remove(mission_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_name_the_attempt_serve_dispatched() {
        let attempts = Attempts::default();
        assert_eq!(attempts.stamped("m", json!({"state": "running"})), json!({"state": "running"}));
        attempts.dispatched("m", &json!({"mission_id": "m", "attempt": 2}));
        assert_eq!(attempts.stamped("m", json!({"state": "running"})), json!({"state": "running", "attempt": 2}));
        attempts.dispatched("m", &json!({"mission_id": "m"}));
        assert_eq!(attempts.stamped("m", json!({})), json!({}), "a serve that does not number attempts");
        attempts.dispatched("m", &json!({"mission_id": "m", "attempt": 3}));
        attempts.forget("m");
        assert_eq!(attempts.stamped("m", json!({})), json!({}));
    }
}
