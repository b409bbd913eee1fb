//! `aiwg-serve dispatch`: send a mission (with its lease) and, with `--wait`, follow it to its end; with
//! `--plan`, say where it would go now without sending it.

use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};

use super::missions::follow_to_end;
use super::output::Output;
use super::{enc, names, text, usage, Failure};
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
    /// Pin to one executor: its name, its id or a unique start of its id
    #[arg(long, add = crate::cli::complete::executors())]
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
    #[command(flatten)]
    pub(crate) more: More,
}

/// The dispatch's other fields: its timeouts, its retry policy, its idempotency key, which agent of a
/// sandbox, its metadata. Each one left out is left out of the request (serve's default applies).
#[derive(Args, Debug)]
pub(crate) struct More {
    /// Fail the mission when it is running and nothing is heard of it for this many seconds
    /// (heartbeat_timeout)
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    heartbeat: Option<f64>,
    /// Abort the mission when it has not ended this many seconds after it started, paused time not
    /// counted (start_to_close_timeout)
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    start_to_close: Option<f64>,
    /// Fail the mission when it has not started this many seconds after the dispatch
    /// (schedule_to_start_timeout)
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    schedule_to_start: Option<f64>,
    /// Give the mission at most N attempts in all (1-20): a failure --retry-on lists (or an exit code
    /// --retry-exit-code lists) ends only the attempt, and the mission is queued again
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=20))]
    retry: Option<u32>,
    /// Which of serve's failures a retry follows, comma-separated (default: the API's, which lists none,
    /// so that only --retry-exit-code retries)
    #[arg(long, value_delimiter = ',', requires = "retry", value_parser = clap::builder::PossibleValuesParser::new(
        aiwg_domain::retry::RETRYABLE))]
    retry_on: Vec<String>,
    /// The agent's exit codes a retry follows, comma-separated
    #[arg(long, value_delimiter = ',', requires = "retry", value_name = "CODES", allow_negative_numbers = true)]
    retry_exit_code: Vec<i64>,
    /// Seconds before the second attempt (default 1), multiplied by --retry-backoff at each attempt
    #[arg(long, requires = "retry", value_name = "SECONDS", value_parser = seconds)]
    retry_interval: Option<f64>,
    /// The factor between one attempt's wait and the next one's (1-10, default 2)
    #[arg(long, requires = "retry", value_name = "FACTOR")]
    retry_backoff: Option<f64>,
    /// The longest wait between two attempts, in seconds (default 60)
    #[arg(long, requires = "retry", value_name = "SECONDS", value_parser = seconds)]
    retry_max_interval: Option<f64>,
    /// Dispatch at most once under this key: the same dispatch sent again with it (a retried script)
    /// gets the first one's answer, not a second mission
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    /// Which agent of a sandbox executor runs the mission (its executor_filter.agent_id)
    #[arg(long, value_name = "AGENT")]
    agent: Option<String>,
    /// Metadata carried with the mission to its executor, KEY=VALUE (repeatable)
    #[arg(long = "metadata", value_name = "KEY=VALUE", value_parser = key_value)]
    metadata: Vec<(String, String)>,
}

/// A number of seconds: positive, fractions allowed.
fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Ok(secs),
        _ => Err(format!("{s:?} is not a number of seconds (e.g. 30 or 0.5)")),
    }
}

fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

impl More {
    /// Adds what was given to the dispatch's body.
    fn fill(&self, payload: &mut Value) {
        let timeouts = [
            ("heartbeat_s", self.heartbeat),
            ("start_to_close_s", self.start_to_close),
            ("schedule_to_start_s", self.schedule_to_start),
        ];
        let timeouts: serde_json::Map<String, Value> =
            timeouts.into_iter().filter_map(|(k, v)| Some((k.to_owned(), json!(v?)))).collect();
        if !timeouts.is_empty() {
            payload["timeouts"] = Value::Object(timeouts);
        }
        if let Some(max_attempts) = self.retry {
            let mut retry = json!({"max_attempts": max_attempts});
            let optional = [
                ("on", (!self.retry_on.is_empty()).then(|| json!(self.retry_on))),
                ("exit_codes", (!self.retry_exit_code.is_empty()).then(|| json!(self.retry_exit_code))),
                ("initial_interval_s", self.retry_interval.map(|s| json!(s))),
                ("backoff", self.retry_backoff.map(|b| json!(b))),
                ("max_interval_s", self.retry_max_interval.map(|s| json!(s))),
            ];
            for (key, value) in optional {
                if let Some(value) = value {
                    retry[key] = value;
                }
            }
            payload["retry"] = retry;
        }
        if let Some(agent) = &self.agent {
            payload["executor_filter"]["agent_id"] = json!(agent);
        }
        if !self.metadata.is_empty() {
            payload["metadata"] = Value::Object(self.metadata.iter().map(|(k, v)| (k.clone(), json!(v))).collect());
        }
    }

    /// A retry policy that lists nothing retries nothing: said, since `--retry 3` alone looks otherwise.
    fn warn_retrying_nothing(&self) {
        if self.retry.is_some_and(|n| n > 1) && self.retry_on.is_empty() && self.retry_exit_code.is_empty() {
            eprintln!(
                "note: --retry without --retry-on or --retry-exit-code retries nothing (the API lists no failure \
                 by default); e.g. --retry-on executor_lost,heartbeat_timeout"
            );
        }
    }
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
    let executor = match &args.executor {
        Some(reference) => Some(names::executor_id(client, reference).await?),
        None => None,
    };
    let mut payload = json!({
        "mission_id": mission_id,
        "objective": args.objective,
        "completion": args.completion,
        "long_running": args.long_running,
        "executor_filter": {"executor_id": executor, "capabilities": args.capabilities},
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
    args.more.fill(&mut payload);
    args.more.warn_retrying_nothing();
    if args.plan {
        return plan(out, &client.post("/api/v1/dispatch/plan", &payload).await?);
    }
    let path = format!("/api/v1/sessions/{}/dispatch", enc(&args.session));
    let answer = match &args.more.idempotency_key {
        Some(key) => client.post_with(&path, &payload, &[("idempotency-key", key)]).await?,
        None => client.post(&path, &payload).await?,
    };
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
