//! Shell completion with live values. `aiwg-serve completions bash` prints a script that asks the binary
//! itself what to offer at each TAB (clap_complete's engine: the script runs `COMPLETE=bash aiwg-serve --
//! <words>`), so subcommands and flags complete as the binary knows them, and the values that name
//! something (executors, missions, webhooks, operators, runtimes) complete with the names and ids the
//! serve lists now. Which serve: `AIWG_SERVE_URL` and `AIWG_SERVE_TOKEN`, as for every command (a
//! completer is not told the `--server` typed on the line). A serve that does not answer within
//! [`PATIENCE`] offers nothing rather than holding the shell.

use std::time::Duration;

use clap_complete::engine::{ArgValueCandidates, CompletionCandidate};
use clap_complete::env::Shells;
use serde_json::Value;

use aiwg_client::{Client, DEFAULT_SERVER};

/// The variable the script sets to ask for completions (clap_complete's default).
const VAR: &str = "COMPLETE";

/// How long a TAB waits for serve.
const PATIENCE: Duration = Duration::from_millis(800);

/// Answers the script's question, when this process was started to answer one (`COMPLETE` set):
/// prints what to offer and exits. Otherwise returns at once.
pub fn answer_if_asked(command: fn() -> clap::Command) {
    clap_complete::CompleteEnv::with_factory(command).var(VAR).complete();
}

/// The script for `shell`, which calls this very binary (by its absolute path: the script works from
/// any directory, and whatever `aiwg-serve` the PATH finds first).
pub(super) fn script(shell: clap_complete::Shell, name: &str) -> Result<Vec<u8>, String> {
    let builtins = Shells::builtins();
    let completer = builtins.completer(&shell.to_string()).ok_or_else(|| format!("no completion for {shell}"))?;
    let binary = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let mut script = Vec::new();
    completer
        .write_registration(VAR, name, name, &binary.to_string_lossy(), &mut script)
        .map_err(|e| format!("cannot write the script: {e}"))?;
    Ok(script)
}

/// A listing whose rows name something: where, and which fields.
struct Listing {
    path: &'static str,
    array: &'static str,
    id: &'static str,
    /// What is said beside a candidate: its name (for an id), its state (for a mission).
    name: Option<&'static str>,
}

const EXECUTORS: Listing =
    Listing { path: "/api/v1/executors", array: "executors", id: "executor_id", name: Some("name") };
const MISSIONS: Listing =
    Listing { path: "/api/v1/missions?limit=100", array: "missions", id: "mission_id", name: None };
const WEBHOOKS: Listing = Listing { path: "/api/v1/webhooks", array: "webhooks", id: "id", name: None };
const OPERATORS: Listing = Listing { path: "/api/v1/operators", array: "operators", id: "name", name: None };
const RUNTIMES: Listing = Listing { path: "/api/v1/runtimes", array: "runtimes", id: "name", name: Some("base_url") };

pub(crate) fn executors() -> ArgValueCandidates {
    ArgValueCandidates::new(|| live(&EXECUTORS))
}

pub(crate) fn missions() -> ArgValueCandidates {
    ArgValueCandidates::new(|| live(&MISSIONS))
}

pub(crate) fn webhooks() -> ArgValueCandidates {
    ArgValueCandidates::new(|| live(&WEBHOOKS))
}

pub(crate) fn operators() -> ArgValueCandidates {
    ArgValueCandidates::new(|| live(&OPERATORS))
}

pub(crate) fn runtimes() -> ArgValueCandidates {
    ArgValueCandidates::new(|| live(&RUNTIMES))
}

/// What `listing` names now: each row's name (its id said beside it) and its id (its name beside);
/// nothing when serve cannot be asked.
fn live(listing: &Listing) -> Vec<CompletionCandidate> {
    let Some(listed) = fetch(listing.path) else { return Vec::new() };
    let rows = listed[listing.array].as_array().cloned().unwrap_or_default();
    let said = |row: &Value, key: Option<&str>| key.and_then(|k| row[k].as_str()).map(str::to_owned);
    let mut candidates = Vec::new();
    for row in &rows {
        let Some(id) = row[listing.id].as_str() else { continue };
        let beside = said(row, listing.name).or_else(|| said(row, Some("state")));
        if let Some(name) = listing.name.and_then(|n| row[n].as_str()).filter(|_| listing.id != "name") {
            candidates.push(CompletionCandidate::new(name).help(Some(id.to_owned().into())));
        }
        candidates.push(CompletionCandidate::new(id).help(beside.map(Into::into)));
    }
    candidates
}

/// `GET path` of the serve the environment names, within [`PATIENCE`].
fn fetch(path: &str) -> Option<Value> {
    let server = std::env::var("AIWG_SERVE_URL").unwrap_or_else(|_| DEFAULT_SERVER.to_owned());
    let token = std::env::var("AIWG_SERVE_TOKEN").ok().filter(|t| !t.is_empty());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
    let client = Client::new(&server, token);
    runtime.block_on(async { tokio::time::timeout(PATIENCE, client.get(path)).await }).ok()?.ok()
}
