//! The operator's command line: a REST client of a running serve, for humans (tables, a progress line,
//! colour on a terminal) and scripts (`--json`, exit codes).
//!
//! Exit codes: 0 success (also when whoever reads stdout goes away, as `| head` does); 1 the server
//! refused, or a followed mission ended failed or aborted, or the wait timed out; 2 bad usage; 3 the
//! server could not be reached.

pub mod client;
mod output;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use client::{CallError, Client};
use output::Output;

/// Where a serve listens unless told otherwise.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7337";

#[derive(Args, Clone, Debug)]
pub struct Global {
    /// URL of the serve to talk to (https:// through a TLS proxy)
    #[arg(long, global = true, env = "AIWG_SERVE_URL", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Operator bearer token, when the serve requires one
    #[arg(long, global = true, env = "AIWG_SERVE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM certificate(s) to trust beside the built-in roots, for a TLS proxy with a private CA
    #[arg(long, global = true, env = "AIWG_SERVE_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// Print JSON (one document per line) instead of tables
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum ExecutorsCommand {
    /// List registered executors
    List,
    /// Stop assigning new missions to an executor; its current missions go on
    Drain { executor_id: String },
    /// Assign new missions to a drained executor again
    Undrain { executor_id: String },
    /// Remove a stale, disconnected executor: its token is revoked, its live missions are suspended or
    /// failed (missions and events are kept), and its id may be registered again by anyone
    Remove { executor_id: String },
}

#[derive(Subcommand, Debug)]
pub enum MissionsCommand {
    /// List missions, newest first, a page at a time
    List {
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        executor: Option<String>,
        #[arg(long)]
        session: Option<String>,
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
    Show { mission_id: String },
    /// Follow a mission's events until it ends, then show it; exit 0 only if it is done
    Watch {
        mission_id: String,
        /// Give up after this many seconds
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Pause a mission
    Pause { mission_id: String },
    /// Resume a paused mission
    Resume { mission_id: String },
    /// Abort a mission (final; aborting an aborted mission succeeds, so scripts may retry)
    Abort { mission_id: String },
    /// Answer a mission's pending HITL request
    Respond {
        mission_id: String,
        #[arg(long)]
        hitl_id: String,
        /// The answer
        text: String,
    },
}

#[derive(Args, Debug)]
pub struct DispatchArgs {
    /// What the agent should do
    #[arg(long)]
    pub objective: String,
    /// How to tell it is done
    #[arg(long)]
    pub completion: String,
    /// A capability the executor must have (repeatable)
    #[arg(long = "capability")]
    pub capabilities: Vec<String>,
    /// Route only to resumable executors
    #[arg(long)]
    pub long_running: bool,
    /// Tools the mission may use, comma-separated or repeated (Bash for the shell adapter; Read,Edit,...
    /// for claude-local). Required, or --no-lease
    #[arg(long = "lease-tools", value_delimiter = ',', conflicts_with = "no_lease")]
    pub lease_tools: Vec<String>,
    /// Send no lease: only for executors that do not enforce one (the reference executor refuses it)
    #[arg(long)]
    pub no_lease: bool,
    /// Nobody will answer prompts: route only to unattended executors that report ready
    #[arg(long)]
    pub unattended: bool,
    /// Wait in serve's queue instead of failing when no executor fits now
    #[arg(long)]
    pub queue: bool,
    /// Pin to one executor
    #[arg(long)]
    pub executor: Option<String>,
    /// Mission id (default: m-<random>)
    #[arg(long)]
    pub mission_id: Option<String>,
    /// Session id in the dispatch path
    #[arg(long, default_value = "cli")]
    pub session: String,
    /// Follow the mission until it ends; exit 0 only if it is done
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this many seconds
    #[arg(long)]
    pub timeout: Option<u64>,
}

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Keep following new events
    #[arg(long)]
    pub follow: bool,
    /// Start after this sequence number (default: from the beginning, or from now with --follow)
    #[arg(long, conflicts_with = "tail")]
    pub since: Option<i64>,
    /// Only the last N events (1-1000), then stop, or go on with --follow
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub tail: Option<u32>,
    #[arg(long)]
    pub mission: Option<String>,
    #[arg(long)]
    pub executor: Option<String>,
}

pub enum Operator {
    Executors(ExecutorsCommand),
    Missions(MissionsCommand),
    Dispatch(DispatchArgs),
    Events(EventsArgs),
}

/// Why a command stopped early.
enum Failure {
    /// Print the message and exit with the code.
    Exit(u8, String),
    /// Whoever read our stdout went away (`| head`): there is nothing left to do, and that is success.
    StdoutClosed,
}

impl From<CallError> for Failure {
    fn from(e: CallError) -> Failure {
        match &e {
            CallError::Unreachable { cause, .. } if cause == "connection refused" => Failure::Exit(
                3,
                format!(
                    "{e}\nIs it running? Start one with `aiwg-serve serve`, or point --server (AIWG_SERVE_URL) at it."
                ),
            ),
            CallError::Unreachable { .. } => Failure::Exit(3, e.to_string()),
            // The server's sentence for a wrong token is addressed to executors ("re-register"); an
            // operator's fix is the token they pass.
            CallError::Refused { status: 401, code, .. } if code == "token_invalid" => Failure::Exit(
                1,
                "401 token_invalid: the server did not accept the operator token: check --token or \
                 AIWG_SERVE_TOKEN against its server.operator_tokens"
                    .into(),
            ),
            CallError::Refused { status: 401, code, .. } if code == "unauthorized" => Failure::Exit(
                1,
                "401 unauthorized: this server requires an operator token: pass --token or set AIWG_SERVE_TOKEN".into(),
            ),
            CallError::Refused { .. } => Failure::Exit(1, e.to_string()),
        }
    }
}

fn usage(message: String) -> Failure {
    Failure::Exit(2, message)
}

pub async fn run(global: Global, command: Operator) -> ExitCode {
    let client = match Client::with_ca_cert(&global.server, global.token.clone(), global.ca_cert.as_deref()) {
        Ok(c) => c,
        Err(e) => return finish(Err(usage(e))),
    };
    let mut out = Output::new(global.json);
    if global.server != DEFAULT_SERVER {
        out.server = Some(global.server.clone());
    }
    let result = match command {
        Operator::Executors(cmd) => executors(&client, &out, cmd).await,
        Operator::Missions(cmd) => missions(&client, &out, cmd).await,
        Operator::Dispatch(args) => dispatch(&client, &out, args).await,
        Operator::Events(args) => events(&client, &out, args).await,
    };
    finish(result)
}

fn finish(result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) | Err(Failure::StdoutClosed) => ExitCode::SUCCESS,
        Err(Failure::Exit(code, message)) => {
            eprintln!("aiwg-serve: {message}");
            ExitCode::from(code)
        }
    }
}

/// Writes a shell completion script for `command` to stdout.
pub fn completions(shell: clap_complete::Shell, mut command: clap::Command) -> ExitCode {
    let mut script = Vec::new();
    let name = command.get_name().to_owned();
    clap_complete::generate(shell, &mut command, name, &mut script);
    finish(Output::new(false).bytes(&script))
}

fn text(v: &Value, key: &str) -> String {
    match &v[key] {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// Percent-encodes a path segment or query value.
fn enc(s: &str) -> String {
    crate::forward::encode_segment(s)
}

async fn executors(client: &Client, out: &Output, cmd: ExecutorsCommand) -> Result<(), Failure> {
    let (id, draining) = match cmd {
        ExecutorsCommand::List => return list_executors(client, out).await,
        ExecutorsCommand::Drain { executor_id } => (executor_id, true),
        ExecutorsCommand::Undrain { executor_id } => (executor_id, false),
        ExecutorsCommand::Remove { executor_id } => {
            let answer = client.post(&format!("/api/v1/executors/{}/remove", enc(&executor_id)), &Value::Null).await?;
            if out.json {
                return out.json(&answer);
            }
            return out.line(format!(
                "executor {executor_id}: removed (token revoked, missions kept; the id may register again)"
            ));
        }
    };
    let path = format!("/api/v1/executors/{}/drain", enc(&id));
    let answer = if draining { client.post(&path, &Value::Null).await? } else { client.delete(&path).await? };
    if out.json {
        return out.json(&answer);
    }
    match draining {
        true => out.line(format!("executor {id}: draining (no new missions; its current missions go on)")),
        false => out.line(format!("executor {id}: accepting missions again")),
    }
}

async fn list_executors(client: &Client, out: &Output) -> Result<(), Failure> {
    // Every page: the listing is paged (500 a page by default).
    let mut list = client.get("/api/v1/executors").await?;
    while let Some(cursor) = list.get("next_cursor").and_then(Value::as_str).map(enc) {
        let next = client.get(&format!("/api/v1/executors?cursor={cursor}")).await?;
        let more = next["executors"].as_array().cloned().unwrap_or_default();
        if let Some(all) = list["executors"].as_array_mut() {
            all.extend(more);
        }
        list["next_cursor"] = next.get("next_cursor").cloned().unwrap_or(Value::Null);
        if list["next_cursor"].is_null() {
            list.as_object_mut().map(|o| o.remove("next_cursor"));
        }
    }
    if out.json {
        return out.json(&list);
    }
    let rows = list["executors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let caps: Vec<&str> =
                e["capabilities"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            let connected = match (e["connected"] == true, e["draining"] == true) {
                (true, true) => "draining",
                (true, false) => "yes",
                (false, _) => "no",
            };
            vec![
                text(e, "executor_id"),
                text(e, "name"),
                connected.into(),
                text(e, "active_mission_count"),
                if caps.is_empty() { "-".into() } else { caps.join(",") },
            ]
        })
        .collect();
    out.table(&["EXECUTOR", "NAME", "CONNECTED", "ACTIVE", "CAPABILITIES"], rows)
}

async fn missions(client: &Client, out: &Output, cmd: MissionsCommand) -> Result<(), Failure> {
    match cmd {
        MissionsCommand::List { state, executor, session, limit, cursor, all } => {
            let mut query = vec![format!("limit={limit}")];
            for (k, v) in [("state", state), ("executor_id", executor), ("session_id", session)] {
                if let Some(v) = v {
                    query.push(format!("{k}={}", enc(&v)));
                }
            }
            list_missions(client, out, &query.join("&"), cursor, all).await
        }
        MissionsCommand::Show { mission_id } => {
            let m = client.get(&format!("/api/v1/missions/{}", enc(&mission_id))).await?;
            match out.json {
                true => out.json(&m),
                false => show_mission(out, &m),
            }
        }
        MissionsCommand::Watch { mission_id, timeout } => {
            follow_to_end(client, out, &mission_id, timeout.map(Duration::from_secs)).await
        }
        MissionsCommand::Pause { mission_id } => control(client, out, &mission_id, "pause", None).await,
        MissionsCommand::Resume { mission_id } => control(client, out, &mission_id, "resume", None).await,
        MissionsCommand::Abort { mission_id } => abort(client, out, &mission_id).await,
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
    loop {
        let at = cursor.as_deref().map(|c| format!("&cursor={}", enc(c))).unwrap_or_default();
        let page = client.get(&format!("/api/v1/missions?{query}{at}")).await?;
        cursor = page["next_cursor"].as_str().map(str::to_owned);
        if out.json {
            out.json(&page)?;
        } else {
            rows.extend(page["missions"].as_array().into_iter().flatten().map(|m| {
                ["mission_id", "state", "executor_id", "session_id", "updated_at"].iter().map(|k| text(m, k)).collect()
            }));
        }
        match (&cursor, all) {
            (Some(_), true) => continue,
            (Some(next), false) if !out.json => eprintln!("more: --cursor {next} (or --all)"),
            _ => {}
        }
        break;
    }
    match out.json {
        true => Ok(()),
        false => out.table(&["MISSION", "STATE", "EXECUTOR", "SESSION", "UPDATED"], rows),
    }
}

fn show_mission(out: &Output, m: &Value) -> Result<(), Failure> {
    let field = |key: &str, value: String| out.line(format!("{:<13} {value}", format!("{key}:")));
    for key in ["mission_id", "state", "executor_id", "session_id", "objective", "completion", "queued_reason"] {
        if !m[key].is_null() {
            let value = text(m, key);
            field(key, if key == "state" { out.state(&value) } else { value })?;
        }
    }
    for key in ["created_at", "updated_at", "completed_at", "exit_code", "error"] {
        if !m[key].is_null() {
            field(key, text(m, key))?;
        }
    }
    if let Some(routing) = m.get("routing").filter(|r| r.is_object()) {
        let reason = routing["reason"].as_str().filter(|r| !r.is_empty());
        let decision = match (routing["chosen"].as_str(), reason) {
            (Some(chosen), Some(reason)) => format!("chose {chosen} ({reason})"),
            (Some(chosen), None) => format!("chose {chosen}"),
            (None, Some(reason)) => format!("no executor chosen ({reason})"),
            (None, None) => "no executor chosen".into(),
        };
        field("routing", decision)?;
        for r in routing["rejected"].as_array().into_iter().flatten() {
            out.line(format!("  passed over {}: {}", text(r, "executor_id"), text(r, "reason")))?;
        }
        if let Some(n) = routing["rejected_omitted"].as_u64() {
            out.line(format!("  and {n} more passed over"))?;
        }
    }
    if let Some(hitl) = m.get("hitl").filter(|h| h.is_object()) {
        field("hitl", format!("{} asks: {}", text(hitl, "hitl_id"), text(hitl, "prompt")))?;
        for key in ["context", "requested_at", "expires_at"] {
            if let Some(v) = hitl[key].as_str() {
                out.line(format!("  {:<13} {v}", format!("{key}:")))?;
            }
        }
        out.line(format!("  answer with:  {}", respond_command(out, &text(m, "mission_id"), &text(hitl, "hitl_id"))))?;
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

/// The command that answers a mission's pending HITL request, ready to paste: the server named as this
/// command was given it (unless it is the default), never the token.
fn respond_command(out: &Output, mission_id: &str, hitl_id: &str) -> String {
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

/// A short, human description of an event's data.
fn summary(data: &Value) -> String {
    for key in ["summary", "prompt", "reason", "response", "phase"] {
        if let Some(s) = data.get(key).and_then(Value::as_str) {
            return s.chars().take(100).collect();
        }
    }
    String::new()
}

async fn control(
    client: &Client,
    out: &Output,
    mission_id: &str,
    action: &str,
    body: Option<Value>,
) -> Result<(), Failure> {
    let answer = client.post(&control_path(mission_id, action), &body.unwrap_or(Value::Null)).await?;
    print_control(out, mission_id, &answer)
}

/// Answers a HITL request. An answer that names no pending request is refused by serve (409 conflict);
/// then the mission is read, to name the request that is pending (with the command that answers it), or
/// to say that none is.
async fn respond(
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
    Err(Failure::Exit(1, format!("{refusal}\n{hint}")))
}

fn control_path(mission_id: &str, action: &str) -> String {
    format!("/api/v1/missions/{}/{action}", enc(mission_id))
}

fn print_control(out: &Output, mission_id: &str, answer: &Value) -> Result<(), Failure> {
    if out.json {
        return out.json(answer);
    }
    let delivered =
        if answer["delivered"] == true { "delivered to the executor" } else { "not delivered (executor offline)" };
    out.line(format!("mission {mission_id}: {} ({delivered})", out.state(&text(answer, "state"))))
}

/// Abort, idempotently: a mission that is aborted already is what the caller wanted, so a retried
/// script succeeds. A mission that ended otherwise (done, failed) is still a refusal.
async fn abort(client: &Client, out: &Output, mission_id: &str) -> Result<(), Failure> {
    let refusal = match client.post(&control_path(mission_id, "abort"), &Value::Null).await {
        Ok(answer) => return print_control(out, mission_id, &answer),
        Err(CallError::Refused { status: 409, code, message }) if code == "illegal_transition" => {
            CallError::Refused { status: 409, code, message }
        }
        Err(e) => return Err(e.into()),
    };
    let mission = client.get(&format!("/api/v1/missions/{}", enc(mission_id))).await?;
    if mission["state"] != "aborted" {
        return Err(refusal.into());
    }
    match out.json {
        true => out.json(&json!({"mission_id": mission_id, "state": "aborted", "already": true})),
        false => out.line(format!("mission {mission_id}: already {}", out.state("aborted"))),
    }
}

/// The lease flags, checked before anything is sent: without a lease every reference executor refuses
/// the mission, and serve then records a failed mission behind a 502.
fn lease(args: &DispatchArgs) -> Result<Option<Value>, Failure> {
    if args.no_lease {
        return Ok(None);
    }
    match args.lease_tools.as_slice() {
        [] => Err(usage(
            "dispatch needs a lease: add --lease-tools with the tools the mission may use (--lease-tools Bash for \
             the shell adapter, e.g. --lease-tools Read,Edit,Bash for claude-local), or --no-lease for an \
             executor that does not enforce leases"
                .into(),
        )),
        tools if tools.iter().any(|t| t == "none") => Err(usage(
            "--lease-tools none denies every tool, and serve refuses such a mission: name the tools it may use".into(),
        )),
        tools => Ok(Some(json!({"tools": tools}))),
    }
}

async fn dispatch(client: &Client, out: &Output, args: DispatchArgs) -> Result<(), Failure> {
    let lease = lease(&args)?;
    let mission_id = args.mission_id.unwrap_or_else(|| format!("m-{}", uuid::Uuid::new_v4().simple()));
    let mut payload = json!({
        "mission_id": mission_id,
        "objective": args.objective,
        "completion": args.completion,
        "long_running": args.long_running,
        "executor_filter": {"executor_id": args.executor, "capabilities": args.capabilities},
    });
    if let Some(lease) = lease {
        payload["lease"] = lease;
    }
    if args.unattended {
        payload["unattended"] = json!(true);
    }
    if args.queue {
        payload["queue"] = json!(true);
    }
    let answer = client.post(&format!("/api/v1/sessions/{}/dispatch", enc(&args.session)), &payload).await?;
    if args.wait {
        return follow_to_end(client, out, &mission_id, args.timeout.map(Duration::from_secs)).await;
    }
    if out.json {
        return out.json(&answer);
    }
    match answer["status"].as_str() {
        Some("queued") => out.line(format!(
            "mission {mission_id} {}: {}",
            out.state("queued"),
            answer["queued_reason"].as_str().unwrap_or("no executor fits it yet")
        )),
        _ => out.line(format!("mission {mission_id} assigned to executor {}", text(&answer, "executor_id"))),
    }
}

/// Follows a mission to its end (a progress line on stderr), shows it, and exits by how it ended: 0 if
/// done, 1 if failed or aborted.
async fn follow_to_end(
    client: &Client,
    out: &Output,
    mission_id: &str,
    timeout: Option<Duration>,
) -> Result<(), Failure> {
    let final_event = wait_for(client, mission_id, timeout).await?;
    let mission = client.get(&format!("/api/v1/missions/{}", enc(mission_id))).await?;
    match out.json {
        true => out.json(&mission)?,
        false => show_mission(out, &mission)?,
    }
    match final_event.as_str() {
        "mission.completed" => Ok(()),
        other => Err(Failure::Exit(1, format!("mission {mission_id} ended with {other}: {}", text(&mission, "error")))),
    }
}

/// Follows a mission's events until a terminal one; returns its name. Shows a progress line on stderr.
async fn wait_for(client: &Client, mission_id: &str, timeout: Option<Duration>) -> Result<String, Failure> {
    let follow = async {
        let mut events = client.events(&format!("/api/v1/events?mission_id={}", enc(mission_id)), Some(0));
        let tty = std::io::stderr().is_terminal();
        loop {
            let (name, item) = events.next().await?;
            if name == "end" {
                return Err(Failure::Exit(1, format!("the event stream ended: {}", text(&item, "reason"))));
            }
            let line = format!("{mission_id}: {name} {}", summary(&item["envelope"]["data"]));
            if tty {
                eprint!("\r\x1b[2K{line}");
            } else {
                eprintln!("{line}");
            }
            let _ = std::io::stderr().flush();
            if matches!(name.as_str(), "mission.completed" | "mission.failed" | "mission.aborted") {
                if tty {
                    eprintln!();
                }
                return Ok(name);
            }
        }
    };
    match timeout {
        Some(t) => tokio::time::timeout(t, follow).await.unwrap_or_else(|_| {
            Err(Failure::Exit(1, format!("mission {mission_id} did not end within {}s", t.as_secs())))
        }),
        None => follow.await,
    }
}

async fn events(client: &Client, out: &Output, args: EventsArgs) -> Result<(), Failure> {
    let mut filter = String::new();
    if let Some(m) = &args.mission {
        filter.push_str(&format!("&mission_id={}", enc(m)));
    }
    if let Some(e) = &args.executor {
        filter.push_str(&format!("&executor_id={}", enc(e)));
    }
    let print = |item: &Value| {
        if out.json {
            return out.json(item);
        }
        let e = &item["envelope"];
        out.line(format!(
            "{:>6}  {}  {:<24} {:<20} {}",
            text(item, "seq"),
            text(item, "received_at"),
            text(e, "event"),
            text(e, "mission_id"),
            summary(&e["data"])
        ))
    };
    let page = |since: i64, limit: u32| {
        let path = format!("/api/v1/events?follow=false&limit={limit}&since={since}{filter}");
        async move {
            let page = client.get(&path).await?;
            Ok::<_, Failure>(page["events"].as_array().cloned().unwrap_or_default())
        }
    };
    let mut since = match args.tail {
        Some(n) => {
            let start = tail_start(n, &page).await?;
            let tail = page(start, n).await?;
            tail.iter().try_for_each(print)?;
            Some(tail.last().and_then(|e| e["seq"].as_i64()).unwrap_or(start))
        }
        None => args.since,
    };
    if args.follow {
        let mut stream = client.events(&format!("/api/v1/events?{}", filter.trim_start_matches('&')), since);
        loop {
            let (name, item) = stream.next().await?;
            if name == "end" {
                let (reason, resume) = (text(&item, "reason"), text(&item, "resume_since"));
                return Err(Failure::Exit(1, format!("stream ended ({reason}); resume with --since {resume}")));
            }
            print(&item)?;
        }
    }
    if args.tail.is_some() {
        return Ok(());
    }
    loop {
        let items = page(since.unwrap_or(0), 1000).await?;
        let Some(last) = items.last() else { return Ok(()) };
        since = last["seq"].as_i64();
        items.iter().try_for_each(print)?;
    }
}

/// The sequence number after which exactly the last `n` events (of the filter) follow. The log is read
/// oldest first only, so this searches for the last point with `n` events after it: doubling, then
/// bisecting, each probe one page of at most `n` events.
async fn tail_start<F, Fut>(n: u32, page: &F) -> Result<i64, Failure>
where
    F: Fn(i64, u32) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Value>, Failure>>,
{
    let full = |since: i64| async move { Ok::<_, Failure>(page(since, n).await?.len() >= n as usize) };
    if !full(0).await? {
        return Ok(0);
    }
    // Invariant: at least n events follow `lo`, fewer than n follow `hi`.
    let (mut lo, mut hi) = (0i64, 1i64);
    while full(hi).await? {
        (lo, hi) = (hi, hi.saturating_mul(2));
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match full(mid).await? {
            true => lo = mid,
            false => hi = mid,
        }
    }
    Ok(lo)
}
