//! The operator's command line: a REST client of a running serve, for humans (tables, a progress line)
//! and scripts (`--json`, exit codes).
//!
//! Exit codes: 0 success; 1 the server refused, or a waited-for mission ended failed or aborted, or the
//! wait timed out; 2 bad usage; 3 the server could not be reached.

pub mod client;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use client::{CallError, Client};

#[derive(Args, Clone, Debug)]
pub struct Global {
    /// URL of the serve to talk to
    #[arg(long, global = true, env = "AIWG_SERVE_URL", default_value = "http://127.0.0.1:7337")]
    pub server: String,
    /// Operator bearer token, when the serve requires one
    #[arg(long, global = true, env = "AIWG_SERVE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print JSON (one document per line) instead of tables
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum ExecutorsCommand {
    /// List registered executors
    List,
}

#[derive(Subcommand, Debug)]
pub enum MissionsCommand {
    /// List missions, newest first
    List {
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        executor: Option<String>,
        #[arg(long)]
        session: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Show one mission with its recent events
    Show { mission_id: String },
    /// Pause a mission
    Pause { mission_id: String },
    /// Resume a paused mission
    Resume { mission_id: String },
    /// Abort a mission (final)
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
    /// Tools the lease allows, comma-separated or repeated (`none` denies all); no flag = no lease
    #[arg(long = "lease-tools", value_delimiter = ',')]
    pub lease_tools: Vec<String>,
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
    #[arg(long)]
    pub since: Option<i64>,
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

/// A failed command: what to print and the exit code.
struct Failure(u8, String);

impl From<CallError> for Failure {
    fn from(e: CallError) -> Failure {
        match e {
            CallError::Unreachable(_) => Failure(3, e.to_string()),
            CallError::Refused { .. } => Failure(1, e.to_string()),
        }
    }
}

pub async fn run(global: Global, command: Operator) -> ExitCode {
    let client = Client::new(&global.server, global.token.clone());
    let out = Output { json: global.json };
    let result = match command {
        Operator::Executors(ExecutorsCommand::List) => executors(&client, &out).await,
        Operator::Missions(cmd) => missions(&client, &out, cmd).await,
        Operator::Dispatch(args) => dispatch(&client, &out, args).await,
        Operator::Events(args) => events(&client, &out, args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, message)) => {
            eprintln!("aiwg-serve: {message}");
            ExitCode::from(code)
        }
    }
}

struct Output {
    json: bool,
}

impl Output {
    fn json(&self, v: &Value) {
        println!("{v}");
    }

    fn table(&self, headers: &[&str], rows: Vec<Vec<String>>) {
        let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<String>| {
            let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            println!("{}", padded.join("  ").trim_end());
        };
        line(headers.iter().map(|h| h.to_string()).collect());
        for row in rows {
            line(row);
        }
    }
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

async fn executors(client: &Client, out: &Output) -> Result<(), Failure> {
    let list = client.get("/api/v1/executors").await?;
    if out.json {
        out.json(&list);
        return Ok(());
    }
    let rows = list["executors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let caps: Vec<String> = e["capabilities"].as_array().into_iter().flatten().map(|c| text(c, "")).collect();
            vec![
                text(e, "executor_id"),
                text(e, "name"),
                if e["connected"] == true { "yes".into() } else { "no".into() },
                text(e, "active_mission_count"),
                caps.join(","),
            ]
        })
        .collect();
    out.table(&["EXECUTOR", "NAME", "CONNECTED", "ACTIVE", "CAPABILITIES"], rows);
    Ok(())
}

async fn missions(client: &Client, out: &Output, cmd: MissionsCommand) -> Result<(), Failure> {
    match cmd {
        MissionsCommand::List { state, executor, session, limit } => {
            let mut query = vec![format!("limit={limit}")];
            for (k, v) in [("state", state), ("executor_id", executor), ("session_id", session)] {
                if let Some(v) = v {
                    query.push(format!("{k}={}", enc(&v)));
                }
            }
            let page = client.get(&format!("/api/v1/missions?{}", query.join("&"))).await?;
            if out.json {
                out.json(&page);
                return Ok(());
            }
            let rows = page["missions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| {
                    ["mission_id", "state", "executor_id", "session_id", "updated_at"]
                        .iter()
                        .map(|k| text(m, k))
                        .collect()
                })
                .collect();
            out.table(&["MISSION", "STATE", "EXECUTOR", "SESSION", "UPDATED"], rows);
        }
        MissionsCommand::Show { mission_id } => {
            let m = client.get(&format!("/api/v1/missions/{}", enc(&mission_id))).await?;
            if out.json {
                out.json(&m);
            } else {
                show_mission(&m);
            }
        }
        MissionsCommand::Pause { mission_id } => control(client, out, &mission_id, "pause", None).await?,
        MissionsCommand::Resume { mission_id } => control(client, out, &mission_id, "resume", None).await?,
        MissionsCommand::Abort { mission_id } => control(client, out, &mission_id, "abort", None).await?,
        MissionsCommand::Respond { mission_id, hitl_id, text } => {
            let body = json!({"hitl_id": hitl_id, "response": text});
            control(client, out, &mission_id, "hitl_response", Some(body)).await?
        }
    }
    Ok(())
}

fn show_mission(m: &Value) {
    for key in [
        "mission_id",
        "state",
        "executor_id",
        "session_id",
        "created_at",
        "updated_at",
        "completed_at",
        "exit_code",
        "error",
    ] {
        if !m[key].is_null() {
            println!("{:<13} {}", format!("{key}:"), text(m, key));
        }
    }
    let events = m["recent_events"].as_array().cloned().unwrap_or_default();
    if !events.is_empty() {
        println!("events:");
        for e in events {
            println!("  {}  {:<24} {}", text(&e, "ts"), text(&e, "event"), summary(&e["data"]));
        }
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
    let path = format!("/api/v1/missions/{}/{action}", enc(mission_id));
    let answer = client.post(&path, &body.unwrap_or(Value::Null)).await?;
    if out.json {
        out.json(&answer);
    } else {
        let delivered =
            if answer["delivered"] == true { "delivered to the executor" } else { "not delivered (executor offline)" };
        println!("mission {mission_id}: {} ({delivered})", text(&answer, "state"));
    }
    Ok(())
}

async fn dispatch(client: &Client, out: &Output, args: DispatchArgs) -> Result<(), Failure> {
    let mission_id = args.mission_id.unwrap_or_else(|| format!("m-{}", uuid::Uuid::new_v4().simple()));
    let mut payload = json!({
        "mission_id": mission_id,
        "objective": args.objective,
        "completion": args.completion,
        "long_running": args.long_running,
        "executor_filter": {"executor_id": args.executor, "capabilities": args.capabilities},
    });
    match args.lease_tools.as_slice() {
        [] => {}
        [none] if none == "none" => payload["lease"] = json!({"tools": "none"}),
        tools => payload["lease"] = json!({"tools": tools}),
    }
    if args.unattended {
        payload["unattended"] = json!(true);
    }
    if args.queue {
        payload["queue"] = json!(true);
    }
    let answer = client.post(&format!("/api/v1/sessions/{}/dispatch", enc(&args.session)), &payload).await?;
    if !args.wait {
        if out.json {
            out.json(&answer);
        } else {
            println!("mission {mission_id} assigned to executor {}", text(&answer, "executor_id"));
        }
        return Ok(());
    }
    let waited = wait_for(client, &mission_id, args.timeout.map(Duration::from_secs));
    let final_event = waited.await?;
    let mission = client.get(&format!("/api/v1/missions/{}", enc(&mission_id))).await?;
    if out.json {
        out.json(&mission);
    } else {
        show_mission(&mission);
    }
    match final_event.as_str() {
        "mission.completed" => Ok(()),
        other => Err(Failure(1, format!("mission {mission_id} ended with {other}: {}", text(&mission, "error")))),
    }
}

/// Follows a mission's events until a terminal one; returns its name. Shows a progress line on stderr.
async fn wait_for(client: &Client, mission_id: &str, timeout: Option<Duration>) -> Result<String, Failure> {
    let follow = async {
        let mut events = client.events(&format!("/api/v1/events?since=0&mission_id={}", enc(mission_id))).await?;
        let tty = std::io::stderr().is_terminal();
        while let Some((name, item)) = events.next().await {
            if name == "end" {
                return Err(Failure(1, format!("the event stream ended: {}", text(&item, "reason"))));
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
        Err(Failure(3, "the server closed the event stream".into()))
    };
    match timeout {
        Some(t) => tokio::time::timeout(t, follow)
            .await
            .unwrap_or_else(|_| Err(Failure(1, format!("mission {mission_id} did not end within {}s", t.as_secs())))),
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
            out.json(item);
        } else {
            let e = &item["envelope"];
            println!(
                "{:>6}  {}  {:<24} {:<20} {}",
                text(item, "seq"),
                text(item, "received_at"),
                text(e, "event"),
                text(e, "mission_id"),
                summary(&e["data"])
            );
        }
    };
    if args.follow {
        let since = args.since.map(|s| format!("since={s}")).unwrap_or_default();
        let mut stream = client.events(&format!("/api/v1/events?{since}{filter}")).await?;
        while let Some((name, item)) = stream.next().await {
            if name == "end" {
                return Err(Failure(
                    1,
                    format!(
                        "stream ended ({}); resume with --since {}",
                        text(&item, "reason"),
                        text(&item, "resume_since")
                    ),
                ));
            }
            print(&item);
        }
        return Err(Failure(3, "the server closed the event stream".into()));
    }
    let mut since = args.since.unwrap_or(0);
    loop {
        let page = client.get(&format!("/api/v1/events?follow=false&limit=1000&since={since}{filter}")).await?;
        let items = page["events"].as_array().cloned().unwrap_or_default();
        if items.is_empty() {
            return Ok(());
        }
        items.iter().for_each(print);
        since = page["next_since"].as_i64().unwrap_or(since);
    }
}
