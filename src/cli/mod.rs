//! The operator's command line: a REST client of a running serve, for humans (tables, a progress line,
//! colour on a terminal) and scripts (`--json`, exit codes).
//!
//! Exit codes are [`Exit`]'s, listed in `--help`: a script waiting on a mission must tell a failed
//! mission from a refused request, an unreachable server and a wait that timed out (the mission goes on).
//!
//! One file per command family: `executors`, `runtimes`, `missions`, `dispatch` (which, with `--wait`,
//! follows the mission as `missions watch` does), `events`, `store`, `operators`, `audit`, `hitl`, `webhooks` and `usage`; what they share (the failure, the exit,
//! how values print) is here, what a typed reference names in `names`, and the shell's live completions
//! in `complete`.

mod audit;
pub mod complete;
mod dispatch;
mod events;
mod executors;
mod hitl;
mod missions;
mod names;
mod operators;
mod output;
mod runtimes;
mod store;
mod usage;
mod webhooks;

use std::process::ExitCode;

use serde_json::Value;

use aiwg_client::{CallError, Client, Global, DEFAULT_SERVER};
pub use audit::AuditArgs;
pub use dispatch::DispatchArgs;
pub use events::EventsArgs;
pub use executors::ExecutorsCommand;
pub use hitl::HitlCommand;
pub use missions::MissionsCommand;
pub use operators::OperatorsCommand;
use output::Output;
pub use runtimes::RuntimesCommand;
pub use store::StoreCommand;
pub use usage::UsageArgs;
pub use webhooks::WebhooksCommand;

pub enum Operator {
    Executors(ExecutorsCommand),
    Runtimes(RuntimesCommand),
    Missions(MissionsCommand),
    Dispatch(Box<DispatchArgs>),
    Events(EventsArgs),
    Store(StoreCommand),
    Operators(OperatorsCommand),
    Audit(AuditArgs),
    Hitl(HitlCommand),
    Webhooks(WebhooksCommand),
    Usage(UsageArgs),
}

/// How a command that did not succeed ended: one row per exit code (0 is success, also when whoever
/// reads stdout goes away, as `| head` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    Failed,
    Usage,
    Unreachable,
    Refused,
    TimedOut,
    Interrupted,
}

impl Exit {
    const ALL: [Exit; 6] =
        [Exit::Failed, Exit::Usage, Exit::Unreachable, Exit::Refused, Exit::TimedOut, Exit::Interrupted];

    fn code(self) -> u8 {
        match self {
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Unreachable => 3,
            Exit::Refused => 4,
            Exit::TimedOut => 5,
            Exit::Interrupted => 130,
        }
    }

    fn meaning(self) -> &'static str {
        match self {
            Exit::Failed => "the mission followed ended failed or aborted (or what was checked is not healthy)",
            Exit::Usage => "bad usage: a flag or value the command does not take",
            Exit::Unreachable => "the server could not be reached",
            Exit::Refused => "the server refused the request (the message says why: 4xx, 5xx)",
            Exit::TimedOut => "--timeout passed before the mission ended; the mission goes on",
            Exit::Interrupted => "interrupted (Ctrl-C) while following; the mission goes on",
        }
    }
}

/// The exit codes, as `--help` ends with them.
pub fn exit_codes() -> String {
    let mut help = String::from("Exit codes:\n  0    success; a followed mission ended done\n");
    for exit in Exit::ALL {
        help.push_str(&format!("  {:<4} {}\n", exit.code(), exit.meaning()));
    }
    help
}

/// Why a command stopped early.
enum Failure {
    /// Print the message and exit with the code.
    Exit(Exit, String),
    /// Whoever read our stdout went away (`| head`): there is nothing left to do, and that is success.
    StdoutClosed,
}

impl From<CallError> for Failure {
    fn from(e: CallError) -> Failure {
        match &e {
            CallError::Unreachable { cause, .. } if cause == "connection refused" => Failure::Exit(
                Exit::Unreachable,
                format!(
                    "{e}\nIs it running? Start one with `aiwg-serve serve`, or point --server (AIWG_SERVE_URL) at it."
                ),
            ),
            CallError::Unreachable { .. } | CallError::Tls { .. } => Failure::Exit(Exit::Unreachable, e.to_string()),
            // The server's sentence for a wrong token is addressed to executors ("re-register"); an
            // operator's fix is the token they pass.
            CallError::Refused { status: 401, code, .. } if code == "token_invalid" => Failure::Exit(
                Exit::Refused,
                "401 token_invalid: the server did not accept the operator token: check --token or \
                 AIWG_SERVE_TOKEN against its server.operator_tokens and its named operators (revoked?)"
                    .into(),
            ),
            CallError::Refused { status: 401, code, .. } if code == "unauthorized" => Failure::Exit(
                Exit::Refused,
                "401 unauthorized: this server requires an operator token: pass --token or set AIWG_SERVE_TOKEN".into(),
            ),
            CallError::Refused { .. } => Failure::Exit(Exit::Refused, e.to_string()),
        }
    }
}

/// A follower refused by serve halfway (auth turned on, its token revoked or its role lowered: 401,
/// 403) says that it lost its authorization while following, and how the mission stood, not only the
/// status; it exits [`Exit::Refused`] like every refusal.
fn lost(failure: Failure, mission_id: &str, ended: Option<&str>) -> Failure {
    let Failure::Exit(Exit::Refused, why) = failure else { return failure };
    if !why.starts_with("401 ") && !why.starts_with("403 ") {
        return Failure::Exit(Exit::Refused, why);
    }
    let stood = match ended {
        Some(event) => format!("the mission ended ({event}) but reading it was refused"),
        None => "the mission goes on, unfollowed".into(),
    };
    Failure::Exit(Exit::Refused, format!("lost authorization while following mission {mission_id}: {stood}.\n{why}"))
}

fn usage(message: String) -> Failure {
    Failure::Exit(Exit::Usage, message)
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
        Operator::Executors(cmd) => executors::run(&client, &out, cmd).await,
        Operator::Runtimes(cmd) => runtimes::run(&client, &out, cmd).await,
        Operator::Missions(cmd) => missions::run(&client, &out, cmd).await,
        Operator::Dispatch(args) => dispatch::run(&client, &out, *args).await,
        Operator::Events(args) => events::run(&client, &out, args).await,
        Operator::Store(cmd) => store::run(&client, &out, cmd).await,
        Operator::Operators(cmd) => operators::run(&client, &out, cmd).await,
        Operator::Audit(args) => audit::run(&client, &out, args).await,
        Operator::Hitl(cmd) => hitl::run(&client, &out, cmd).await,
        Operator::Webhooks(cmd) => webhooks::run(&client, &out, cmd).await,
        Operator::Usage(args) => usage::run(&client, &out, args).await,
    };
    finish(result)
}

fn finish(result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) | Err(Failure::StdoutClosed) => ExitCode::SUCCESS,
        Err(Failure::Exit(exit, message)) => {
            eprintln!("aiwg-serve: {message}");
            ExitCode::from(exit.code())
        }
    }
}

/// Writes the shell completion script for `command` to stdout: one that asks this binary at each TAB
/// ([`complete`]), so that names and ids complete from the serve as it is now.
pub fn completions(shell: clap_complete::Shell, command: clap::Command) -> ExitCode {
    let script = complete::script(shell, command.get_name()).map_err(|e| Failure::Exit(Exit::Failed, e));
    finish(script.and_then(|script| Output::new(false).bytes(&script)))
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
    aiwg_contract::encode_segment(s)
}

/// A short, human description of an event's data.
fn summary(data: &Value) -> String {
    let said = ["summary", "prompt", "reason", "response", "phase"]
        .into_iter()
        .find_map(|key| data.get(key).and_then(Value::as_str))
        .map_or_else(String::new, |s| shortened(s, 100));
    // Who did it, when an operator did (our extension of the events serve records for them).
    let Some(by) = data.get("by").and_then(Value::as_str) else { return said };
    let by = match data.get("waited_s").and_then(Value::as_i64) {
        Some(waited) => format!("answered by {by} after {}", missions::human(waited)),
        None => format!("by {by}"),
    };
    if said.is_empty() {
        by
    } else {
        format!("{said} ({by})")
    }
}

/// At most `max` characters of `text`: its beginning and its end, where a sentence says how it came out
/// ("... it ended with exit code 3"), with an ellipsis between.
fn shortened(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let head = (max - 1) * 2 / 3;
    let tail = max - 1 - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(count - tail).collect();
    format!("{start}…{end}")
}

#[cfg(test)]
mod tests {
    use super::{exit_codes, shortened, Exit};

    #[test]
    fn the_help_lists_every_exit_code_once() {
        let help = exit_codes();
        let mut codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), Exit::ALL.len(), "one code per way to end");
        assert_eq!(help.lines().count(), 2 + Exit::ALL.len(), "{help}");
        assert!(help.contains("  5    --timeout passed before the mission ended; the mission goes on"), "{help}");
    }

    #[test]
    fn a_long_summary_keeps_its_beginning_and_its_end() {
        let inferred = format!("inferred by serve from sandbox session {}: it ended with exit code 3", "0".repeat(36));
        let short = shortened(&inferred, 100);
        assert_eq!(short.chars().count(), 100);
        assert!(short.starts_with("inferred by serve") && short.ends_with("it ended with exit code 3"), "{short}");
        assert_eq!(shortened("brief", 100), "brief");
        assert_eq!(shortened("é".repeat(101).as_str(), 100).chars().count(), 100, "characters, not bytes");
    }
}
