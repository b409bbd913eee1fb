//! `aiwg-serve missions`: list and show missions, follow one to its end (also for `dispatch --wait`),
//! and the controls (pause, resume, abort, answer a HITL request).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use clap::Subcommand;
use serde_json::{json, Value};

mod outputs;
mod show;

use super::output::Output;
use super::{enc, lost, shortened, summary, text, Exit, Failure};
use aiwg_client::{CallError, Client};
use show::{executor_name, reason_of, respond_command, show_mission};

#[derive(Subcommand, Debug)]
pub enum MissionsCommand {
    /// List missions, newest first, a page at a time
    List {
        /// Only missions in these states (comma-separated or repeated)
        #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(
            aiwg_domain::MissionState::ALL.iter().map(|s| s.as_str())))]
        state: Vec<String>,
        /// Only missions of this executor: its id, name or id prefix
        #[arg(long, add = crate::cli::complete::executors())]
        executor: Option<String>,
        #[arg(long)]
        session: Option<String>,
        /// Only missions whose id or objective contains this, whatever the case
        #[arg(long)]
        search: Option<String>,
        /// The order: created (newest first), updated (most recently active first), duration (ended
        /// ones, longest first)
        #[arg(long, value_parser = ["created", "updated", "duration"])]
        sort: Option<String>,
        /// Missions per page (1-500)
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Start at this page (the `next_cursor` of the previous one)
        #[arg(long, conflicts_with = "all")]
        cursor: Option<String>,
        /// Every page, not only the first
        #[arg(long)]
        all: bool,
    },
    /// Show one mission with its recent events
    Show {
        #[arg(add = crate::cli::complete::missions())]
        mission_id: String,
    },
    /// Follow a mission's events until it ends, then show it; exit 0 only if it is done
    Watch {
        #[arg(add = crate::cli::complete::missions())]
        mission_id: String,
        /// Give up after this many seconds
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Print a mission's log: what its agents wrote to stdout and stderr (executors that declare x-log)
    Logs {
        #[arg(add = crate::cli::complete::missions())]
        mission_id: String,
        /// Keep printing new output until the mission ends (a restart of serve is waited out)
        #[arg(short, long)]
        follow: bool,
        /// Only what the agents wrote to stderr
        #[arg(long, conflicts_with = "stdout")]
        stderr: bool,
        /// Only what the agents wrote to stdout
        #[arg(long)]
        stdout: bool,
        /// Only the last N lines (then, with --follow, what comes)
        #[arg(long)]
        tail: Option<u64>,
    },
    /// List a mission's artifacts (files its executor uploaded), or download one
    Artifacts {
        #[arg(add = crate::cli::complete::missions())]
        mission_id: String,
        /// Download this artifact
        #[arg(long, value_name = "NAME")]
        get: Option<String>,
        /// Where to write it (default: its name, here; `-`: stdout)
        #[arg(short, long, requires = "get", value_name = "FILE")]
        output: Option<std::path::PathBuf>,
    },
    /// Pause a mission
    Pause {
        #[arg(add = crate::cli::complete::missions())]
        mission_id: String,
    },
    /// Resume a paused mission
    Resume {
        #[arg(add = crate::cli::complete::missions())]
        mission_id: String,
    },
    /// Abort a mission (final; aborting an aborted mission succeeds, so scripts may retry)
    Abort {
        #[arg(add = crate::cli::complete::missions())]
        mission_id: String,
    },
    /// Answer a mission's pending HITL request
    Respond {
        #[arg(add = crate::cli::complete::missions())]
        mission_id: String,
        #[arg(long)]
        hitl_id: String,
        /// The answer
        text: String,
    },
}

pub(super) async fn run(client: &Client, out: &Output, cmd: MissionsCommand) -> Result<(), Failure> {
    match cmd {
        MissionsCommand::List { state, executor, session, search, sort, limit, cursor, all } => {
            // Serve resolves the executor (id, name or id prefix; an id it no longer knows as written).
            let state = (!state.is_empty()).then(|| state.join(","));
            let mut query = vec![format!("limit={limit}")];
            let filters =
                [("state", state), ("executor_id", executor), ("session_id", session), ("q", search), ("sort", sort)];
            for (k, v) in filters {
                if let Some(v) = v {
                    query.push(format!("{k}={}", enc(&v)));
                }
            }
            list_missions(client, out, &query.join("&"), cursor, all).await
        }
        MissionsCommand::Show { mission_id } => {
            let m = client.get(&format!("/api/v1/missions/{}", enc(&mission_id))).await?;
            show(client, out, &m).await
        }
        MissionsCommand::Watch { mission_id, timeout } => {
            follow_to_end(client, out, &mission_id, timeout.map(Duration::from_secs)).await
        }
        MissionsCommand::Logs { mission_id, follow, stderr, stdout, tail } => {
            let stream = match (stderr, stdout) {
                (true, _) => Some("stderr"),
                (_, true) => Some("stdout"),
                _ => None,
            };
            outputs::logs(client, out, outputs::LogsArgs { mission_id, follow, stream, tail }).await
        }
        MissionsCommand::Artifacts { mission_id, get, output } => {
            outputs::artifacts(client, out, &mission_id, get, output).await
        }
        MissionsCommand::Pause { mission_id } => control(client, out, &mission_id, "pause").await,
        MissionsCommand::Resume { mission_id } => control(client, out, &mission_id, "resume").await,
        MissionsCommand::Abort { mission_id } => control(client, out, &mission_id, "abort").await,
        MissionsCommand::Respond { mission_id, hitl_id, text } => {
            respond(client, out, &mission_id, &hitl_id, text).await
        }
    }
}

/// One page, or with `all` every page (following `next_cursor`). Without `all`, where the next page
/// starts is said on stderr, so that stdout stays the table.
async fn list_missions(
    client: &Client,
    out: &Output,
    query: &str,
    mut cursor: Option<String>,
    all: bool,
) -> Result<(), Failure> {
    let mut rows = Vec::new();
    let names = if out.json { HashMap::new() } else { executor_names(client).await? };
    loop {
        let at = cursor.as_deref().map(|c| format!("&cursor={}", enc(c))).unwrap_or_default();
        let page = client.get(&format!("/api/v1/missions?{query}{at}")).await?;
        cursor = page["next_cursor"].as_str().map(str::to_owned);
        if out.json {
            out.json(&page)?;
        } else {
            let now = chrono::Utc::now();
            rows.extend(page["missions"].as_array().into_iter().flatten().map(|m| {
                let mut executor = m["executor_id"].as_str().map_or("-".to_owned(), |id| match names.get(id) {
                    Some(name) => name.clone(),
                    None => id.chars().take(8).collect(),
                });
                if let Some(attempt) = m["attempt"].as_u64() {
                    executor.push_str(&format!(" (attempt {attempt})"));
                }
                let objective = m["objective"].as_str().map_or("-".to_owned(), |o| shortened(o, OBJECTIVE_CHARS));
                vec![
                    text(m, "mission_id"),
                    text(m, "state"),
                    executor,
                    text(m, "session_id"),
                    text(m, "created_at"),
                    duration(m, now),
                    objective,
                    silent_for(m, now).unwrap_or_else(|| "-".into()),
                ]
            }));
        }
        match (&cursor, all) {
            (Some(_), true) => continue,
            (Some(next), false) if !out.json => {
                eprintln!("more: --cursor {} (or --all)", aiwg_client::printable(next))
            }
            _ => {}
        }
        break;
    }
    match out.json {
        true => Ok(()),
        false => {
            out.table(&["MISSION", "STATE", "EXECUTOR", "SESSION", "CREATED", "DURATION", "OBJECTIVE", "SILENT"], rows)
        }
    }
}

/// Answers a HITL request. An answer that names no pending request is refused by serve (409 conflict);
/// then the mission is read, to name the request that is pending (with the command that answers it), or
/// to say that none is.
pub(super) async fn respond(
    client: &Client,
    out: &Output,
    mission_id: &str,
    hitl_id: &str,
    answer: String,
) -> Result<(), Failure> {
    let body = json!({"hitl_id": hitl_id, "response": answer});
    let refusal = match client.post(&control_path(mission_id, "hitl_response"), &body).await {
        Ok(answer) => return print_control(out, mission_id, &answer),
        Err(CallError::Refused { status: 409, code, message }) if code == "conflict" => {
            CallError::Refused { status: 409, code, message }
        }
        Err(e) => return Err(e.into()),
    };
    let Ok(mission) = client.get(&format!("/api/v1/missions/{}", enc(mission_id))).await else {
        return Err(refusal.into());
    };
    let hint = match mission.get("hitl").filter(|h| h.is_object()) {
        Some(pending) => format!(
            "the pending HITL request of mission {mission_id} is {} ({}); answer it with:\n  {}",
            text(pending, "hitl_id"),
            text(pending, "prompt"),
            respond_command(out, mission_id, &text(pending, "hitl_id"))
        ),
        None => format!("mission {mission_id} has no pending HITL request (it is {})", text(&mission, "state")),
    };
    Err(Failure::Exit(Exit::Refused, format!("{refusal}\n{hint}")))
}

fn control_path(mission_id: &str, action: &str) -> String {
    format!("/api/v1/missions/{}/{action}", enc(mission_id))
}

fn print_control(out: &Output, reference: &str, answer: &Value) -> Result<(), Failure> {
    if out.json {
        return out.json(answer);
    }
    // The mission serve resolved the reference to, not the prefix typed.
    let mission_id = answer["mission_id"].as_str().unwrap_or(reference);
    let delivered = match (answer["delivered"] == true, answer["confirmed"] == true) {
        (true, true) => "delivered to the executor",
        (true, false) => "delivered to the executor, not confirmed",
        (false, _) => "not delivered",
    };
    out.line_with_state(&format!("mission {mission_id}: "), &text(answer, "state"), &format!(" ({delivered})"))?;
    match answer["note"].as_str() {
        Some(note) => out.line(format!("  {note}")),
        None => Ok(()),
    }
}

/// How long a live mission has gone without an event (its `updated_at` is its latest event's, or its
/// executor's latest sign of life): a lost agent leaves a mission `running` and silent. `None` for a
/// queued or ended mission.
fn silent_for(m: &Value, now: chrono::DateTime<chrono::Utc>) -> Option<String> {
    let state = m["state"].as_str()?;
    if matches!(state, "queued" | "done" | "failed" | "aborted") {
        return None;
    }
    let since = aiwg_contract::clock::parse(m["updated_at"].as_str()?)?;
    Some(human((now - since).num_seconds()))
}

/// How long a mission took (ended: what serve says) or has taken so far (live: by this clock).
fn duration(m: &Value, now: chrono::DateTime<chrono::Utc>) -> String {
    if let Some(secs) = m["duration_s"].as_f64() {
        return human(secs as i64);
    }
    match m["created_at"].as_str().and_then(aiwg_contract::clock::parse) {
        Some(created) => format!("{} so far", human((now - created).num_seconds())),
        None => "-".into(),
    }
}

/// Seconds as a person reads them: `42s`, `3m 05s`, `2h 10m`, `1d 04h`.
pub(super) fn human(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m {:02}s", secs / 60, secs % 60),
        3600..=86399 => format!("{}h {:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d {:02}h", secs / 86400, secs % 86400 / 3600),
    }
}

/// How much of an objective a row of the table shows.
const OBJECTIVE_CHARS: usize = 40;

/// Every registered executor's name, by id: the table shows names, not UUIDs.
async fn executor_names(client: &Client) -> Result<HashMap<String, String>, Failure> {
    let listed = client.get("/api/v1/executors").await?;
    Ok(listed["executors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| (text(e, "executor_id"), text(e, "name")))
        .collect())
}

/// Pause, resume or abort, idempotently: a mission already in the state asked for is what the caller
/// wanted, so a retried script succeeds (`already paused`). Any other refusal stays one: a mission that
/// ended otherwise (done, failed) cannot be aborted, one that is queued cannot be paused.
async fn control(client: &Client, out: &Output, mission_id: &str, action: &str) -> Result<(), Failure> {
    let wanted = match action {
        "pause" => "paused",
        "resume" => "running",
        _ => "aborted",
    };
    let refusal = match client.post(&control_path(mission_id, action), &Value::Null).await {
        Ok(answer) => return print_control(out, mission_id, &answer),
        Err(CallError::Refused { status: 409, code, message }) if code == "illegal_transition" => {
            CallError::Refused { status: 409, code, message }
        }
        Err(e) => return Err(e.into()),
    };
    let mission = client.get(&format!("/api/v1/missions/{}", enc(mission_id))).await?;
    if mission["state"] != wanted {
        return Err(refusal.into());
    }
    match out.json {
        true => out.json(&json!({"mission_id": mission_id, "state": wanted, "already": true})),
        false => out.line_with_state(&format!("mission {mission_id}: already "), wanted, ""),
    }
}

/// Prints a mission as read: JSON, or a field a line with its attempts' executors by name.
async fn show(client: &Client, out: &Output, m: &Value) -> Result<(), Failure> {
    if out.json {
        return out.json(m);
    }
    let has_attempts = m["attempts"].as_array().is_some_and(|a| !a.is_empty());
    let names = if has_attempts { executor_names(client).await? } else { HashMap::new() };
    show_mission(out, m, &names)
}

/// Follows a mission to its end (a progress line on stderr), shows it, and exits by how it ended: 0 if
/// done, [`Exit::Failed`] if failed or aborted; a timeout or Ctrl-C stops following only.
pub(super) async fn follow_to_end(
    client: &Client,
    out: &Output,
    reference: &str,
    timeout: Option<Duration>,
) -> Result<(), Failure> {
    // The event stream filters by the whole id: a prefix (`watch m-5c28`) is resolved by serve first,
    // or the follower would wait for events that never match.
    let mission = client.get(&format!("/api/v1/missions/{}", enc(reference))).await?;
    let mission_id = text(&mission, "mission_id");
    let mission_id = mission_id.as_str();
    let (final_event, data) = wait_for(client, mission_id, timeout).await.map_err(|e| lost(e, mission_id, None))?;
    let ended = Some(final_event.as_str());
    let mission = client
        .get(&format!("/api/v1/missions/{}", enc(mission_id)))
        .await
        .map_err(|e| lost(e.into(), mission_id, ended))?;
    show(client, out, &mission).await?;
    match final_event.as_str() {
        "mission.completed" => Ok(()),
        other => Err(Failure::Exit(
            Exit::Failed,
            format!("mission {mission_id} ended with {other}: {}", reason_of(&data).unwrap_or_else(|| "-".into())),
        )),
    }
}

/// Follows a mission's events until a terminal one; returns its name and data. Shows a progress line on
/// stderr, and a line of its own for each attempt that begins or ends.
async fn wait_for(client: &Client, mission_id: &str, timeout: Option<Duration>) -> Result<(String, Value), Failure> {
    let follow = async {
        let mut events = client.events(&format!("/api/v1/events?mission_id={}", enc(mission_id)), Some(0));
        let tty = std::io::stderr().is_terminal();
        let mut names: Option<HashMap<String, String>> = None;
        loop {
            let (name, item) = events.next().await?;
            let envelope = &item["envelope"];
            let mut line = format!("{mission_id}: {name} {}", summary(&envelope["data"]));
            // Serve's words on attempts: one begins (assigned) or ends (suspended).
            let attempt = envelope["data"]["attempt"]
                .as_u64()
                .filter(|_| matches!(name.as_str(), "mission.assigned" | "mission.suspended"));
            if let Some(attempt) = attempt {
                if names.is_none() {
                    names = Some(executor_names(client).await?);
                }
                let by = executor_name(names.as_ref().expect("read above"), &text(envelope, "executor_id"));
                line = format!("{line} [attempt {attempt}, executor {by}]");
            }
            let line = aiwg_client::printable(&line);
            // An attempt's line stays on a terminal: the progress line overwrites only the others.
            let stays = attempt.is_some();
            if tty && !stays {
                eprint!("\r\x1b[2K{line}");
            } else {
                eprintln!("{}{line}", if tty { "\r\x1b[2K" } else { "" });
            }
            let _ = std::io::stderr().flush();
            if matches!(name.as_str(), "mission.completed" | "mission.failed" | "mission.aborted") {
                if tty && !stays {
                    eprintln!();
                }
                return Ok((name, envelope["data"].clone()));
            }
        }
    };
    let goes_on = |why: String| {
        format!("{why}; mission {mission_id} goes on (`aiwg-serve missions abort {mission_id}` stops it)")
    };
    let waited = timeout.map_or(0, |t| t.as_secs());
    let timeout = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        ended = follow => ended,
        () = timeout => Err(Failure::Exit(Exit::TimedOut, goes_on(format!("it did not end within {waited}s")))),
        _ = tokio::signal::ctrl_c() => Err(Failure::Exit(Exit::Interrupted, goes_on("\nstopped following".into()))),
    }
}
