//! A mission's retry policy (our extension): which of serve's failure verdicts end only an attempt of
//! the mission, how long the next attempt waits, and the attempts as the mission's log tells them.
//!
//! An attempt ends with serve's `mission.suspended {reason, attempt, retry_at}` (the mission is queued
//! again, not failed: the contract's states are unchanged on the wire) and the next one begins with
//! serve's `mission.assigned {attempt}` to the executor it was routed to. Nothing else is stored: the
//! attempts are read back from the log, so a restart or the replica that takes over knows them.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use aiwg_contract::{clock, DispatchRetry, EventType};

/// The reasons a policy may list: serve's verdicts on a mission whose executor, not the mission, failed
/// (the schema's `retry.on` enum, which a test holds to this list).
pub const RETRYABLE: [&str; 5] =
    ["executor_lost", "executor_disconnected", "forward_failed", "heartbeat_timeout", "schedule_to_start_timeout"];

/// A dispatch's retry policy with its defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub max_attempts: u32,
    pub initial: Duration,
    pub backoff: f64,
    pub max_interval: Duration,
    pub on: Vec<String>,
    pub exit_codes: Vec<i64>,
}

/// What ended an attempt: one of serve's reasons, or the exit code an executor's agent failed with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cause<'a> {
    Reason(&'a str),
    ExitCode(i64),
}

impl Policy {
    pub fn of(spec: &DispatchRetry) -> Policy {
        let secs = |s: Option<f64>, default: f64| Duration::from_secs_f64(s.unwrap_or(default).clamp(0.0, 86_400.0));
        Policy {
            max_attempts: spec.max_attempts.max(1),
            initial: secs(spec.initial_interval_s, 1.0),
            backoff: spec.backoff.unwrap_or(2.0).clamp(1.0, 10.0),
            max_interval: secs(spec.max_interval_s, 60.0),
            on: spec.on.clone(),
            exit_codes: spec.exit_codes.clone(),
        }
    }

    /// The policy a stored dispatch carries, if any.
    pub fn in_payload(payload: &Value) -> Option<Policy> {
        let spec: DispatchRetry = serde_json::from_value(payload.get("retry")?.clone()).ok()?;
        Some(Policy::of(&spec))
    }

    /// Whether the policy retries what ended the attempt.
    pub fn lists(&self, cause: Cause<'_>) -> bool {
        match cause {
            Cause::Reason(reason) => self.on.iter().any(|r| r == reason),
            Cause::ExitCode(code) => self.exit_codes.contains(&code),
        }
    }

    /// How long the next attempt waits when attempt `attempt` (from 1) ends for `cause`; `None` when
    /// the mission fails instead (the cause is not listed, or no attempt is left).
    pub fn retry_after(&self, attempt: u32, cause: Cause<'_>) -> Option<Duration> {
        if attempt >= self.max_attempts || !self.lists(cause) {
            return None;
        }
        let factor = self.backoff.powi(i32::try_from(attempt - 1).unwrap_or(i32::MAX));
        Some(self.initial.mul_f64(factor.min(1e9)).min(self.max_interval.max(self.initial)))
    }
}

/// One attempt of a mission, as its read shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Attempt {
    pub attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "time")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "time")]
    pub ended_at: Option<DateTime<Utc>>,
    /// Why it ended: serve's reason, or the mission's end (`done`, `failed`, `aborted`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the attempt after it may start.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "time")]
    pub retry_at: Option<DateTime<Utc>>,
}

fn time<S: serde::Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.map(clock::format).unwrap_or_default())
}

/// One of a mission's lifecycle events, as the attempts are read from them.
pub struct Step<'a> {
    pub event: EventType,
    pub executor_id: &'a str,
    pub at: DateTime<Utc>,
    pub data: &'a Value,
}

impl<'a> Step<'a> {
    /// A stored event as a step (`None` for a type the contract does not name).
    pub fn of(e: &'a crate::StoredEvent) -> Option<Step<'a>> {
        static NO_DATA: Value = Value::Null;
        Some(Step {
            event: EventType::parse(&e.envelope.event)?,
            executor_id: &e.envelope.executor_id,
            at: e.received_at,
            data: e.envelope.data.as_ref().unwrap_or(&NO_DATA),
        })
    }

    /// Whether this step ends an attempt: serve's `mission.suspended {retry_at}`.
    pub fn ends_attempt(&self) -> bool {
        self.event == EventType::MissionSuspended && self.data.get("retry_at").is_some()
    }
}

/// The executors of a mission's ended attempts: its next attempt passes over them while another fits.
pub fn failed_executors(attempts: &[Attempt]) -> Vec<String> {
    attempts.iter().filter(|a| a.ended_at.is_some()).filter_map(|a| a.executor_id.clone()).collect()
}

/// The steps of the mission's current attempt: those after the last attempt's end.
pub fn current_attempt<'s, 'a>(steps: &'s [Step<'a>]) -> &'s [Step<'a>] {
    &steps[steps.iter().rposition(Step::ends_attempt).map_or(0, |i| i + 1)..]
}

/// The attempts of a mission from its lifecycle events, in log order (`no_executor`: the id of
/// serve's events about a mission nobody had).
pub fn attempts<'a>(steps: impl IntoIterator<Item = Step<'a>>, no_executor: &str) -> Vec<Attempt> {
    let fresh = |attempt| Attempt {
        attempt,
        executor_id: None,
        started_at: None,
        ended_at: None,
        reason: None,
        retry_at: None,
    };
    let mut done = Vec::new();
    let mut current = fresh(1);
    for step in steps {
        if current.executor_id.is_none() && step.executor_id != no_executor {
            current.executor_id = Some(step.executor_id.to_owned());
        }
        let text = |key: &str| step.data.get(key).and_then(Value::as_str).map(str::to_owned);
        match step.event {
            EventType::MissionStarted if current.started_at.is_none() => current.started_at = Some(step.at),
            _ if step.ends_attempt() => {
                let next = fresh(current.attempt + 1);
                let retry_at = text("retry_at").and_then(|t| clock::parse(&t));
                // Recorded under the attempt's executor, whether or not it ever said anything.
                let executor_id = Some(step.executor_id.to_owned());
                done.push(Attempt {
                    executor_id,
                    ended_at: Some(step.at),
                    reason: text("reason"),
                    retry_at,
                    ..current
                });
                current = next;
            }
            EventType::MissionCompleted | EventType::MissionFailed | EventType::MissionAborted => {
                let state = match step.event {
                    EventType::MissionCompleted => "done",
                    EventType::MissionFailed => "failed",
                    _ => "aborted",
                };
                current.ended_at = Some(step.at);
                let why = text("error").or_else(|| text("reason"));
                current.reason = Some(why.map_or(state.to_owned(), |r| format!("{state}: {r}")));
            }
            _ => {}
        }
    }
    done.push(current);
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The schema validates what a dispatch may list; serve must retry exactly that.
    #[test]
    fn the_schema_lists_the_retryable_reasons() {
        let schema: Value = serde_json::from_str(include_str!("../../../schemas/executor-v1.json")).unwrap();
        let listed = &schema["$defs"]["dispatch_payload"]["properties"]["retry"]["properties"]["on"]["items"]["enum"];
        assert_eq!(listed, &json!(RETRYABLE));
    }

    fn policy(on: &[&str]) -> Policy {
        let spec = DispatchRetry {
            max_attempts: 4,
            initial_interval_s: Some(2.0),
            backoff: Some(3.0),
            max_interval_s: Some(10.0),
            on: on.iter().map(|s| s.to_string()).collect(),
            exit_codes: vec![75],
        };
        Policy::of(&spec)
    }

    /// Listed reasons are retried with a growing wait, capped; others, and the last attempt, are not.
    #[test]
    fn waits_grow_to_the_cap_and_attempts_run_out() {
        let p = policy(&["executor_lost"]);
        let waits: Vec<_> = (1..=4).map(|n| p.retry_after(n, Cause::Reason("executor_lost"))).collect();
        assert_eq!(
            waits,
            [Some(Duration::from_secs(2)), Some(Duration::from_secs(6)), Some(Duration::from_secs(10)), None]
        );
        assert_eq!(p.retry_after(1, Cause::Reason("heartbeat_timeout")), None);
        assert_eq!(p.retry_after(1, Cause::ExitCode(75)), Some(Duration::from_secs(2)));
        assert_eq!(p.retry_after(1, Cause::ExitCode(1)), None);
        assert_eq!(Policy::in_payload(&json!({"retry": {"max_attempts": 2}})).unwrap().initial, Duration::from_secs(1));
        assert_eq!(Policy::in_payload(&json!({"objective": "x"})), None);
    }

    /// The log tells each attempt: who had it, when it started and ended, why, and when the next may go.
    #[test]
    fn attempts_are_read_from_the_log() {
        let t = |s: i64| DateTime::<Utc>::from_timestamp(1_800_000_000 + s, 0).unwrap();
        let retry = json!({"reason": "executor_lost", "attempt": 1, "retry_at": clock::format(t(12))});
        let (none, started, failed) = (json!({}), json!({"state": "running"}), json!({"reason": "boom"}));
        let second = json!({"attempt": 2});
        let steps = [
            Step { event: EventType::MissionAssigned, executor_id: "a", at: t(0), data: &none },
            Step { event: EventType::MissionStarted, executor_id: "a", at: t(1), data: &started },
            Step { event: EventType::MissionSuspended, executor_id: "a", at: t(10), data: &retry },
            Step { event: EventType::MissionAssigned, executor_id: "b", at: t(12), data: &second },
            Step { event: EventType::MissionStarted, executor_id: "b", at: t(13), data: &started },
            Step { event: EventType::MissionFailed, executor_id: "b", at: t(20), data: &failed },
        ];
        let current: Vec<_> = current_attempt(&steps).iter().map(|s| s.at).collect();
        assert_eq!(current, [t(12), t(13), t(20)], "the current attempt begins after the last one's end");
        let paused = [Step { event: EventType::MissionSuspended, executor_id: "a", at: t(5), data: &none }];
        assert_eq!(current_attempt(&paused).len(), 1, "a suspension without retry_at ends no attempt");
        let got = attempts(steps, "nobody");
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].executor_id.as_deref(), got[0].reason.as_deref()), (Some("a"), Some("executor_lost")));
        assert_eq!((got[0].started_at, got[0].ended_at, got[0].retry_at), (Some(t(1)), Some(t(10)), Some(t(12))));
        assert_eq!((got[1].attempt, got[1].executor_id.as_deref()), (2, Some("b")));
        assert_eq!((got[1].started_at, got[1].reason.as_deref()), (Some(t(13)), Some("failed: boom")));
        assert_eq!(failed_executors(&got), ["a", "b"], "each ended attempt's executor");
        let under_way = [got[0].clone(), Attempt { ended_at: None, ..got[1].clone() }];
        assert_eq!(failed_executors(&under_way), ["a"], "not the one under way");
        assert_eq!(
            attempts([], "nobody"),
            [Attempt { attempt: 1, executor_id: None, started_at: None, ended_at: None, reason: None, retry_at: None }]
        );
    }
}
