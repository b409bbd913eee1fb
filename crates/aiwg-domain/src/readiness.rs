//! Readiness is reported, never inferred (the Vagaris executor model). An executor answers
//! `GET /api/v1/readiness` with:
//!
//! ```json
//! {"ready": true, "executor_class": "unattended_machine", "credential_expires_at": "<RFC 3339>" | null,
//!  "budget": {"state": "ok" | "low" | "exhausted" | "unknown"}, "gaps": [{"kind": "identity", "detail": "..."}]}
//! ```
//!
//! `credential_expires_at: null` means no expiring credential; the key *absent* means the executor could
//! not tell. `budget.state: "unknown"` is not unlimited. This module is the report's shape and serve's
//! judgement of it, both pure.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

/// Executor classes, declared with the capability `x-class:<class>`; none declared means interactive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorClass {
    InteractiveLocal,
    UnattendedMachine,
}

impl ExecutorClass {
    pub(crate) fn of(capabilities: &[String]) -> ExecutorClass {
        if capabilities.iter().any(|c| c == "x-class:unattended_machine") {
            ExecutorClass::UnattendedMachine
        } else {
            ExecutorClass::InteractiveLocal
        }
    }

    pub fn capability(self) -> &'static str {
        match self {
            ExecutorClass::InteractiveLocal => "x-class:interactive_local",
            ExecutorClass::UnattendedMachine => "x-class:unattended_machine",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GapKind {
    Identity,
    Packaging,
    Credential,
    Budget,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gap {
    pub kind: GapKind,
    pub detail: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetState {
    Ok,
    Low,
    Exhausted,
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Budget {
    pub state: BudgetState,
}

/// What the expiry of the executor's credential is known to be.
#[derive(Clone, Debug, PartialEq)]
pub enum Expiry {
    /// No expiring credential: serialised as `null`.
    Never,
    /// Expires then.
    At(String),
    /// Could not tell: the key is left out.
    Unknown,
}

/// The report an executor serves.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub ready: bool,
    pub class: ExecutorClass,
    pub expiry: Expiry,
    pub budget: BudgetState,
    pub gaps: Vec<Gap>,
}

impl Report {
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::json!({
            "ready": self.ready,
            "executor_class": self.class,
            "budget": Budget { state: self.budget },
            "gaps": self.gaps,
        });
        match &self.expiry {
            Expiry::Never => v["credential_expires_at"] = Value::Null,
            Expiry::At(t) => v["credential_expires_at"] = Value::String(t.clone()),
            Expiry::Unknown => {}
        }
        v
    }
}

/// Why an executor whose report says its budget is exhausted gets no unattended mission.
pub const EXHAUSTED: &str = "budget exhausted: its readiness report says budget.state = exhausted, so it takes no \
                             unattended mission until it reports otherwise";

/// serve's judgement of a report before it routes a mission: `Err` names what stands in the way.
/// For an unattended mission an absent or unreadable report, `ready: false`, an unknown or exhausted
/// budget, and an unknown or past expiry each refuse; for an attended one only `ready: false` does.
pub fn judge(report: Option<&Value>, unattended: bool, now: DateTime<Utc>) -> Result<(), String> {
    let Some(report) = report.filter(|r| r.is_object()) else {
        return Err("no readable readiness report".into());
    };
    if report.get("ready") != Some(&Value::Bool(true)) {
        let gaps: Vec<&str> = report
            .get("gaps")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|g| g.get("detail").and_then(Value::as_str))
            .collect();
        return Err(if gaps.is_empty() {
            "not ready (no gap named)".into()
        } else {
            format!("not ready: {}", gaps.join("; "))
        });
    }
    if !unattended {
        return Ok(());
    }
    match report.get("budget").and_then(|b| b.get("state")).and_then(Value::as_str) {
        Some("ok") | Some("low") => {}
        Some("exhausted") => return Err(EXHAUSTED.into()),
        _ => return Err("budget unknown (unknown is not unlimited)".into()),
    }
    match report.get("credential_expires_at") {
        None => Err("credential expiry unknown".into()),
        Some(Value::Null) => Ok(()),
        Some(Value::String(s)) => match DateTime::parse_from_rfc3339(s) {
            Ok(t) if t > now => Ok(()),
            Ok(_) => Err(format!("credential expired at {s}")),
            Err(_) => Err(format!("credential expiry {s:?} is not a timestamp")),
        },
        Some(_) => Err("credential expiry unreadable".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        "2026-06-01T00:00:00Z".parse().unwrap()
    }

    fn ready(extra: Value) -> Value {
        let mut r = json!({"ready": true, "executor_class": "unattended_machine", "budget": {"state": "ok"},
                           "credential_expires_at": null, "gaps": []});
        r.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        r
    }

    #[test]
    fn unattended_missions_need_every_fact() {
        let cases: Vec<(Option<Value>, Result<(), &str>)> = vec![
            (None, Err("no readable readiness report")),
            (Some(json!("yes")), Err("no readable readiness report")),
            (Some(ready(json!({}))), Ok(())),
            (Some(ready(json!({"budget": {"state": "low"}}))), Ok(())),
            (Some(ready(json!({"credential_expires_at": "2026-06-02T00:00:00Z"}))), Ok(())),
            (
                Some(ready(json!({"credential_expires_at": "2026-05-31T00:00:00Z"}))),
                Err("credential expired at 2026-05-31T00:00:00Z"),
            ),
            (
                Some(ready(json!({"credential_expires_at": "soon"}))),
                Err("credential expiry \"soon\" is not a timestamp"),
            ),
            (Some(ready(json!({"budget": {"state": "unknown"}}))), Err("budget unknown (unknown is not unlimited)")),
            (Some(ready(json!({"budget": {}}))), Err("budget unknown (unknown is not unlimited)")),
            (Some(ready(json!({"budget": {"state": "exhausted"}}))), Err(EXHAUSTED)),
            (
                Some(ready(json!({"ready": false, "gaps": [{"kind": "identity", "detail": "identity not bound"},
                                                          {"kind": "packaging", "detail": "vagaris-exec not on PATH"}]}))),
                Err("not ready: identity not bound; vagaris-exec not on PATH"),
            ),
            (Some(ready(json!({"ready": false}))), Err("not ready (no gap named)")),
        ];
        for (report, expected) in cases {
            assert_eq!(judge(report.as_ref(), true, now()), expected.map_err(str::to_owned), "{report:?}");
        }
        let mut unknown_expiry = ready(json!({}));
        unknown_expiry.as_object_mut().unwrap().remove("credential_expires_at");
        assert_eq!(judge(Some(&unknown_expiry), true, now()), Err("credential expiry unknown".into()));
    }

    #[test]
    fn attended_missions_only_need_ready() {
        assert_eq!(judge(Some(&ready(json!({"budget": {"state": "unknown"}}))), false, now()), Ok(()));
        assert!(judge(Some(&ready(json!({"ready": false}))), false, now()).is_err());
        assert!(judge(None, false, now()).is_err());
    }

    #[test]
    fn null_and_absent_expiry_serialise_differently() {
        let report = |expiry| Report {
            ready: true,
            class: ExecutorClass::UnattendedMachine,
            expiry,
            budget: BudgetState::Unknown,
            gaps: vec![],
        };
        assert_eq!(report(Expiry::Never).to_json()["credential_expires_at"], Value::Null);
        assert!(report(Expiry::Never).to_json().get("credential_expires_at").is_some());
        assert!(report(Expiry::Unknown).to_json().get("credential_expires_at").is_none());
        assert_eq!(report(Expiry::At("t".into())).to_json()["credential_expires_at"], "t");
        assert_eq!(report(Expiry::Unknown).to_json()["budget"]["state"], "unknown");
    }

    #[test]
    fn classes_come_from_capabilities() {
        assert_eq!(ExecutorClass::of(&[]), ExecutorClass::InteractiveLocal);
        assert_eq!(ExecutorClass::of(&["x-class:unattended_machine".into()]), ExecutorClass::UnattendedMachine);
        assert_eq!(ExecutorClass::of(&["x-class:interactive_local".into()]), ExecutorClass::InteractiveLocal);
    }
}
