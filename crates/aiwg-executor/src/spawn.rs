//! Starting an agent process: a sanitised environment, its own process group (so that pause, resume
//! and abort reach every process it starts), in its own git worktree when the working directory is a
//! repository (see `worktrees`).

use std::ffi::OsStr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::adapters::Adapter;
use super::worktrees::{Workdir, Worktrees};

/// Variables that make an interpreter run foreign code, or point it at foreign code.
const INTERPRETER_HOOKS: &[&str] = &[
    "LD_PRELOAD",
    "LD_AUDIT",
    "LD_LIBRARY_PATH",
    "DYLD_INSERT_LIBRARIES",
    "DYLD_LIBRARY_PATH",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PYTHONHOME",
    "PERL5OPT",
    "PERL5LIB",
    "RUBYOPT",
    "BASH_ENV",
    "ENV",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
];

/// Provider credentials: kept for adapters that call providers themselves, stripped for those that must
/// only ever talk to a gateway.
const PROVIDER_KEY_PREFIXES: &[&str] =
    &["ANTHROPIC_", "OPENAI_", "GEMINI_", "GOOGLE_API_KEY", "AZURE_OPENAI_", "MISTRAL_", "GROQ_", "XAI_", "COHERE_"];

/// The environment a mission's process gets: ours (`AIWG_*`, the product's configuration) and
/// interpreter hooks removed; provider keys kept only when `keep_provider_keys`; the mission's own
/// variables added.
pub(crate) fn sanitised_env(
    inherited: impl IntoIterator<Item = (String, String)>,
    keep_provider_keys: bool,
    mission: &[(&str, &str)],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = inherited
        .into_iter()
        .filter(|(k, _)| !k.starts_with("AIWG_"))
        .filter(|(k, _)| !INTERPRETER_HOOKS.contains(&k.as_str()))
        .filter(|(k, _)| keep_provider_keys || !PROVIDER_KEY_PREFIXES.iter().any(|p| k.starts_with(p)))
        .collect();
    env.extend(mission.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env.sort();
    env
}

/// A started agent.
pub(crate) struct Agent {
    /// The process the executor waits for: the agent's guard on Linux (which exits as the agent did),
    /// the agent itself elsewhere. Its stdio is the agent's.
    pub(crate) child: Child,
    /// The agent's process group: pause, resume and abort signal it.
    pub(crate) pgid: u32,
    /// Held while the agent runs: once dropped (or the executor dies), the guard stops the agent's group.
    _guard: Option<tokio::net::UnixStream>,
}

/// Starts `binary argv...` in a new process group with piped stdio; on Linux under its guard (see
/// `guard`), which stops it with `grace` between SIGTERM and SIGKILL when the executor is gone.
#[cfg(target_os = "linux")]
pub(crate) async fn start(
    binary: &str,
    argv: &[String],
    env: &[(String, String)],
    dir: &Path,
    grace: Duration,
) -> std::io::Result<Agent> {
    let guard = command(super::guard::PROGRAM, &[] as &[&str], env, dir, Stdio::piped);
    let (child, pgid, control) = super::guard::spawn(guard, binary, argv, grace).await?;
    Ok(Agent { child, pgid, _guard: Some(control) })
}

/// Starts `binary argv...` in a new process group with piped stdio.
#[cfg(not(target_os = "linux"))]
pub(crate) async fn start(
    binary: &str,
    argv: &[String],
    env: &[(String, String)],
    dir: &Path,
    _grace: Duration,
) -> std::io::Result<Agent> {
    let child = command(binary, argv, env, dir, Stdio::piped).process_group(0).kill_on_drop(false).spawn()?;
    let pgid = child.id().unwrap_or_default();
    Ok(Agent { child, pgid, _guard: None })
}

/// `binary args...` in `dir` with exactly `env` (nothing inherited) and each stdio stream from `stdio`.
fn command(
    binary: &str,
    args: &[impl AsRef<OsStr>],
    env: &[(String, String)],
    dir: &Path,
    stdio: fn() -> Stdio,
) -> Command {
    let mut command = Command::new(binary);
    command.args(args).env_clear().envs(env.iter().map(|(k, v)| (k, v))).current_dir(dir);
    command.stdin(stdio()).stdout(stdio()).stderr(stdio());
    command
}

/// Sends a signal to a whole process group.
pub(crate) fn signal_group(pgid: u32, signal: i32) -> bool {
    // SAFETY: killpg only reads its two integer arguments.
    unsafe { libc::killpg(pgid as libc::pid_t, signal) == 0 }
}

/// Whether any process of the group is still alive.
pub(crate) fn group_alive(pgid: u32) -> bool {
    signal_group(pgid, 0)
}

/// SIGTERM to the group, SIGKILL once `grace` has passed with any of its processes still alive.
pub(crate) async fn terminate_group(pgid: u32, grace: Duration) {
    signal_group(pgid, libc::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    while group_alive(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if group_alive(pgid) {
        signal_group(pgid, libc::SIGKILL);
    }
}

/// Where a run's agent works and with what environment: its own worktree of `base` (named after
/// `run_id`, on `branch` when given) when `base` is in a git repository, so that concurrent runs do not
/// edit one checkout; the sanitised environment with the run's variables, and the adapter's defaults
/// where ours has none.
pub(crate) async fn prepare(
    adapter: &Adapter,
    worktrees: &Worktrees,
    base: &Path,
    run_id: &str,
    branch: Option<String>,
    run_env: &[(&str, &str)],
) -> (Workdir, Vec<(String, String)>) {
    let dir = worktrees.create(base, run_id, branch).await;
    let mut vars = run_env.to_vec();
    vars.extend(adapter.env_defaults.iter().filter(|(k, _)| std::env::var_os(k).is_none()).copied());
    (dir, sanitised_env(std::env::vars(), adapter.keeps_provider_keys, &vars))
}

/// What a mission's completion check found.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Completion {
    Met,
    NotMet(i32),
    Unrunnable(String),
}

/// `sh` exits 127 for a command it cannot find.
const COMMAND_NOT_FOUND: i32 = 127;

impl Completion {
    /// Why the check did not pass, in a phrase (`None` when it did): an operator reading "exit 127"
    /// would have to know `sh`'s conventions, so a command that is not there is said.
    pub(crate) fn failure(&self) -> Option<String> {
        match self {
            Completion::Met => None,
            Completion::NotMet(COMMAND_NOT_FOUND) => Some(format!("command not found (exit {COMMAND_NOT_FOUND})")),
            Completion::NotMet(code) => Some(format!("exit {code}")),
            Completion::Unrunnable(why) => Some(format!("could not run: {why}")),
        }
    }
}

/// Runs a mission's completion check command with `sh -c` where the agent ran and with its
/// environment; its output is not kept, only whether it holds.
pub(crate) async fn check_completion(check: &str, dir: &Path, env: &[(String, String)]) -> Completion {
    match command("sh", &["-c", check], env, dir, Stdio::null).status().await {
        Ok(status) if status.success() => Completion::Met,
        Ok(status) => Completion::NotMet(status.code().unwrap_or(-1)),
        Err(e) => Completion::Unrunnable(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn hooks_and_product_variables_are_stripped_provider_keys_kept() {
        let inherited = env(&[
            ("PATH", "/bin"),
            ("LD_PRELOAD", "/evil.so"),
            ("NODE_OPTIONS", "--require x"),
            ("PYTHONSTARTUP", "/x.py"),
            ("AIWG_SERVE_TOKEN", "secret"),
            ("ANTHROPIC_API_KEY", "sk-1"),
            ("HOME", "/root"),
        ]);
        let out = sanitised_env(inherited.clone(), true, &[("AIWG_MISSION_ID", "m-1")]);
        assert_eq!(
            out,
            env(&[("AIWG_MISSION_ID", "m-1"), ("ANTHROPIC_API_KEY", "sk-1"), ("HOME", "/root"), ("PATH", "/bin")])
        );
        let gateway_only = sanitised_env(inherited, false, &[]);
        assert_eq!(gateway_only, env(&[("HOME", "/root"), ("PATH", "/bin")]));
    }
}
