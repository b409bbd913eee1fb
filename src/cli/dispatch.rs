//! `aiwg-serve dispatch`: send a mission (with its lease) and, with `--wait`, follow it to its end; with
//! `--plan`, say where it would go now without sending it.

use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};

use super::missions::follow_to_end;
use super::output::Output;
use super::{enc, text, usage, Failure};
use aiwg_client::Client;

#[derive(Args, Debug)]
pub struct DispatchArgs {
    /// What the agent should do
    #[arg(long)]
    pub(crate) objective: String,
    /// How to tell it is done, in words (for the agent and for people; never run)
    #[arg(long)]
    pub(crate) completion: String,
    /// A shell command that checks the work after the agent exits 0; non-zero fails the mission. Goes
    /// only to executors that run checks (x-completion-check:shell)
    #[arg(long, value_name = "COMMAND")]
    pub(crate) check: Option<String>,
    /// A capability the executor must have (repeatable)
    #[arg(long = "capability")]
    pub(crate) capabilities: Vec<String>,
    /// Route only to resumable executors
    #[arg(long)]
    pub(crate) long_running: bool,
    /// Tools the mission may use, comma-separated or repeated (Bash for the shell adapter; Read,Edit,...
    /// for claude-local). Required, or --no-lease
    #[arg(long = "lease-tools", value_delimiter = ',', conflicts_with = "no_lease")]
    pub(crate) lease_tools: Vec<String>,
    /// Send no lease: only for executors that do not enforce one (the reference executor refuses it)
    #[arg(long)]
    pub(crate) no_lease: bool,
    /// Nobody will answer prompts: route only to unattended executors that report ready
    #[arg(long)]
    pub(crate) unattended: bool,
    /// Wait in serve's queue instead of failing when no executor fits now
    #[arg(long)]
    pub(crate) queue: bool,
    /// Pin to one executor
    #[arg(long)]
    pub(crate) executor: Option<String>,
    /// Mission id (default: m- and a random suffix)
    #[arg(long)]
    pub(crate) mission_id: Option<String>,
    /// Session id in the dispatch path
    #[arg(long, default_value = "cli")]
    pub(crate) session: String,
    /// Follow the mission until it ends; exit 0 only if it is done
    #[arg(long, conflicts_with = "plan")]
    pub(crate) wait: bool,
    /// Do not send it: say where it would go now, and why each other executor would not take it
    #[arg(long)]
    pub(crate) plan: bool,
    /// Give up waiting after this many seconds
    #[arg(long)]
    pub(crate) timeout: Option<u64>,
}

/// The lease flags, checked before anything is sent: every reference executor refuses a mission without
/// a lease (serve answers 422 `mission_refused` when it knows), so forgetting one is a usage error here.
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

pub(super) async fn run(client: &Client, out: &Output, args: DispatchArgs) -> Result<(), Failure> {
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
    if let Some(check) = args.check {
        payload["completion_check"] = json!(check);
    }
    if args.unattended {
        payload["unattended"] = json!(true);
    }
    if args.queue {
        payload["queue"] = json!(true);
    }
    if args.plan {
        return plan(out, &client.post("/api/v1/dispatch/plan", &payload).await?);
    }
    let answer = client.post(&format!("/api/v1/sessions/{}/dispatch", enc(&args.session)), &payload).await?;
    if args.wait {
        return follow_to_end(client, out, &mission_id, args.timeout.map(Duration::from_secs)).await;
    }
    if out.json {
        return out.json(&answer);
    }
    match answer["status"].as_str() {
        Some("queued") => out.line_with_state(
            &format!("mission {mission_id} "),
            "queued",
            &format!(": {}", answer["queued_reason"].as_str().unwrap_or("no executor fits it yet")),
        ),
        _ => out.line(format!("mission {mission_id} assigned to executor {}", text(&answer, "executor_id"))),
    }
}

/// A plan in words: where the dispatch would go (in turn), why, and who was passed over and why.
fn plan(out: &Output, planned: &Value) -> Result<(), Failure> {
    if out.json {
        return out.json(planned);
    }
    let named = |v: &Value| match v["name"].as_str() {
        Some(name) => format!("{name} ({})", text(v, "executor_id")),
        None => text(v, "executor_id"),
    };
    match planned["outcome"].as_str() {
        Some("assign") => {
            let candidates: Vec<String> = planned["candidates"].as_array().into_iter().flatten().map(named).collect();
            out.line(format!("would be assigned to {}", candidates.join(", then ")))?;
            out.line(format!("  why: {}", text(&planned["routing"], "reason")))?;
            for passed in planned["routing"]["rejected"].as_array().into_iter().flatten() {
                out.line(format!("  passed over {}: {}", named(passed), text(passed, "reason")))?;
            }
            Ok(())
        }
        Some("queue") => out.line(format!("would wait in the queue: {}", text(planned, "queued_reason"))),
        _ => out.line(format!(
            "would be refused: {} ({})",
            text(&planned["error"], "message"),
            text(&planned["error"], "code")
        )),
    }
}
