//! One mission as an operator reads it (`missions show`, and where `missions watch` ends): its fields,
//! how routing chose its executor, its pending HITL request and its recent events.

use std::collections::HashMap;

use serde_json::Value;

use super::silent_for;
use crate::cli::output::Output;
use crate::cli::usage::{cost, tokens};
use crate::cli::{summary, text, Failure};

/// Prints a mission, as `GET /api/v1/missions/{id}` answers it, a field a line; `names` are the
/// executors' names by id, for its attempts.
pub(super) fn show_mission(out: &Output, m: &Value, names: &HashMap<String, String>) -> Result<(), Failure> {
    let keys = [
        "mission_id",
        "state",
        "executor_id",
        "session_id",
        "objective",
        "completion",
        "completion_check",
        "queued_reason",
    ];
    for key in keys {
        if !m[key].is_null() {
            let value = text(m, key);
            let label = if key == "completion_check" { "check" } else { key };
            field(out, label, value)?;
        }
    }
    for key in ["created_at", "updated_at", "completed_at", "exit_code", "error"] {
        if !m[key].is_null() {
            field(out, key, text(m, key))?;
        }
    }
    if m["error"].is_null() {
        if let Some(reason) = end_reason(m) {
            field(out, "reason", reason)?;
        }
    }
    show_attempts(out, m, names)?;
    if let Some(silent) = silent_for(m, chrono::Utc::now()) {
        field(out, "silent for", format!("{silent} (no event or sign of life from its executor since updated_at)"))?;
    }
    show_timeouts(out, m)?;
    show_outputs(out, m)?;
    show_usage(out, m)?;
    if !m["compacted_at"].is_null() {
        field(
            out,
            "compacted",
            format!("{} (retention: progress events removed; the others kept)", text(m, "compacted_at")),
        )?;
    }
    if let Some(routing) = m.get("routing").filter(|r| r.is_object()) {
        show_routing(out, routing)?;
    }
    if let Some(hitl) = m.get("hitl").filter(|h| h.is_object()) {
        show_hitl(out, m, hitl)?;
    }
    let events = m["recent_events"].as_array().cloned().unwrap_or_default();
    if !events.is_empty() {
        out.line("events:")?;
        for e in events {
            out.line(format!("  {}  {:<24} {}", text(&e, "ts"), text(&e, "event"), summary(&e["data"])))?;
        }
    }
    Ok(())
}

/// Why an ended mission without an `error` ended (an abort's reason, `start_to_close_timeout`, or who
/// aborted it), from its end event among the recent ones.
pub(super) fn end_reason(m: &Value) -> Option<String> {
    let state = m["state"].as_str()?;
    let events = m["recent_events"].as_array()?;
    let end_event = format!("mission.{}", end_event(state)?);
    let end = events.iter().rev().find(|e| e["event"].as_str() == Some(end_event.as_str()))?;
    reason_of(&end["data"])
}

fn end_event(state: &str) -> Option<&'static str> {
    match state {
        "aborted" => Some("aborted"),
        "failed" => Some("failed"),
        _ => None,
    }
}

/// The reason an end event's data gives: its `error` or `reason`, else who aborted it.
pub(super) fn reason_of(data: &Value) -> Option<String> {
    let said = |key: &str| data.get(key).and_then(Value::as_str).filter(|s| !s.is_empty());
    if let Some(reason) = said("error").or(said("reason")) {
        return Some(reason.to_owned());
    }
    said("by").or(said("aborted_by")).map(|by| format!("aborted by {by}"))
}

/// Its attempts, each with its executor by name, when it has a retry policy (its read lists them).
fn show_attempts(out: &Output, m: &Value, names: &HashMap<String, String>) -> Result<(), Failure> {
    let Some(attempts) = m["attempts"].as_array().filter(|a| !a.is_empty()) else { return Ok(()) };
    let most = m["retry"]["max_attempts"].as_u64().map(|n| format!(" of at most {n}")).unwrap_or_default();
    field(out, "attempts", format!("{}{most}", attempts.len()))?;
    for a in attempts {
        let executor = a["executor_id"].as_str().map_or("-".to_owned(), |id| executor_name(names, id));
        let mut line = format!("  {:<3} {executor}", text(a, "attempt"));
        if let Some(started) = a["started_at"].as_str() {
            line.push_str(&format!("  started {started}"));
        }
        if let Some(ended) = a["ended_at"].as_str() {
            line.push_str(&format!("  ended {ended}"));
        }
        if let Some(reason) = a["reason"].as_str() {
            line.push_str(&format!(": {reason}"));
        }
        if let Some(at) = a["retry_at"].as_str() {
            line.push_str(&format!(", next attempt at {at}"));
        }
        out.line(line)?;
    }
    Ok(())
}

/// An executor by name (with the start of its id, names need not be unique), or by the start of its id
/// when serve no longer knows it.
pub(super) fn executor_name(names: &HashMap<String, String>, id: &str) -> String {
    let short: String = id.chars().take(8).collect();
    match names.get(id) {
        Some(name) => format!("{name} ({short})"),
        None => short,
    }
}

/// The timeouts that apply to it.
fn show_timeouts(out: &Output, m: &Value) -> Result<(), Failure> {
    let Some(limits) = m["timeouts"].as_object().filter(|t| !t.is_empty()) else { return Ok(()) };
    let names = [
        ("schedule_to_start_s", "schedule-to-start"),
        ("start_to_close_s", "start-to-close"),
        ("heartbeat_s", "heartbeat"),
    ];
    let set = names.iter().filter_map(|(key, name)| Some(format!("{name} {}s", limits.get(*key)?.as_f64()?)));
    field(out, "timeouts", set.collect::<Vec<_>>().join(", "))
}

/// What the mission produced: where its work was kept, and its log.
fn show_outputs(out: &Output, m: &Value) -> Result<(), Failure> {
    if let Some(work) = m.get("work").filter(|w| w.is_object()) {
        let commit = |key: &str| work[key].as_str().map(|c| c.chars().take(12).collect::<String>());
        let mut kept = format!("branch {}", text(work, "branch"));
        if let Some(head) = commit("commit") {
            kept.push_str(&format!(" at {head}"));
        }
        if let Some(base) = commit("base") {
            kept.push_str(&format!(" (from {base})"));
        }
        field(out, "work", kept)?;
    }
    if let Some(log) = m.get("log").filter(|l| l.is_object()) {
        let mut said = format!("{} bytes, {} lines", log["bytes"], log["lines"]);
        if log["dropped_bytes"].as_u64().is_some_and(|n| n > 0) {
            said.push_str(&format!(" ({} bytes dropped past its cap)", log["dropped_bytes"]));
        }
        field(out, "log", format!("{said}: aiwg-serve missions logs {}", text(m, "mission_id")))?;
    }
    Ok(())
}

/// What the mission used and cost, and each model's part when it used several; who dispatched it.
fn show_usage(out: &Output, m: &Value) -> Result<(), Failure> {
    if let Some(by) = m["dispatched_by"].as_str() {
        field(out, "operator", format!("{by} (dispatched it)"))?;
    }
    let Some(usage) = m.get("usage").filter(|u| u.is_object()) else { return Ok(()) };
    field(out, "usage", tokens(usage))?;
    field(out, "cost", cost(m))?;
    let models = usage["models"].as_array().cloned().unwrap_or_default();
    if models.len() > 1 {
        for model in models {
            out.line(format!("  {}: {}; {}", text(&model, "model"), tokens(&model), cost(&model)))?;
        }
    } else if let Some(model) = models.first() {
        out.line(format!("  model: {}", text(model, "model")))?;
    }
    Ok(())
}

/// One labelled line of a mission, its values aligned (a state coloured).
fn field(out: &Output, key: &str, value: String) -> Result<(), Failure> {
    let label = format!("{:<13} ", format!("{key}:"));
    match key {
        "state" => out.line_with_state(&label, &value, ""),
        _ => out.line(format!("{label}{value}")),
    }
}

/// How routing chose the mission's executor, and whom it passed over.
fn show_routing(out: &Output, routing: &Value) -> Result<(), Failure> {
    let reason = routing["reason"].as_str().filter(|r| !r.is_empty());
    // Names first, as the tables: a record kept before names were recorded shows the id alone.
    let who = |name: &Value, id: &str| match name.as_str() {
        Some(name) => format!("{name} ({id})"),
        None => id.to_owned(),
    };
    let decision = match (routing["chosen"].as_str().map(|id| who(&routing["chosen_name"], id)), reason) {
        (Some(chosen), Some(reason)) => format!("chose {chosen}: {reason}"),
        (Some(chosen), None) => format!("chose {chosen}"),
        (None, Some(reason)) => format!("no executor chosen ({reason})"),
        (None, None) => "no executor chosen".into(),
    };
    field(out, "routing", decision)?;
    for r in routing["rejected"].as_array().into_iter().flatten() {
        out.line(format!("  passed over {}: {}", who(&r["name"], &text(r, "executor_id")), text(r, "reason")))?;
    }
    if let Some(n) = routing["rejected_omitted"].as_u64() {
        out.line(format!("  and {n} more passed over"))?;
    }
    Ok(())
}

/// The mission's pending HITL request, and how (or when) it can be answered.
fn show_hitl(out: &Output, m: &Value, hitl: &Value) -> Result<(), Failure> {
    field(out, "hitl", format!("{} asks: {}", text(hitl, "hitl_id"), text(hitl, "prompt")))?;
    for key in ["context", "requested_at", "expires_at"] {
        if let Some(v) = hitl[key].as_str() {
            out.line(format!("  {:<13} {v}", format!("{key}:")))?;
        }
    }
    match m["state"].as_str() {
        Some("hitl-required") => out.line(format!(
            "  answer with:  {}",
            respond_command(out, &text(m, "mission_id"), &text(hitl, "hitl_id"))
        ))?,
        Some(state) => out.line(format!("  answerable once the mission is waiting for it again (it is {state})"))?,
        None => {}
    }
    Ok(())
}

/// The command that answers a mission's pending HITL request, ready to paste: the server named as this
/// command was given it (unless it is the default), never the token.
pub(super) fn respond_command(out: &Output, mission_id: &str, hitl_id: &str) -> String {
    let server = match out.server.as_deref() {
        Some(url) => format!("--server {} ", shell_quote(url)),
        None => String::new(),
    };
    format!(
        "aiwg-serve {server}missions respond {} --hitl-id {} '<answer>'",
        shell_quote(mission_id),
        shell_quote(hitl_id)
    )
}

/// `s` as one word for a POSIX shell: as is when that is safe, else single-quoted.
fn shell_quote(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
