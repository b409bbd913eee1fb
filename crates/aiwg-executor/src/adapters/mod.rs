//! The executor's adapters: which binary runs a mission, for which class of situation, how a lease's
//! tool policy becomes that binary's allowlist flags, what its exit codes mean, and the readiness report
//! it makes about itself. Pure data and functions; the registry can take temporary entries (tests,
//! plugins) that are undone when their guard drops. The readiness reports are in `readiness`.

mod readiness;
mod usage;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use aiwg_contract::{Lease, ToolPolicy};
use aiwg_domain::capabilities::{lease_lists, LEASE_NEEDS, LEASE_REQUIRED};
use aiwg_domain::readiness::{ExecutorClass, Report};
pub(crate) use readiness::Host;
use readiness::{claude_readiness, codex_readiness, shell_readiness, spine_readiness};
pub(crate) use usage::{Format as UsageFormat, Seen, Tally};

/// A refusal to run: the lease does not let this adapter run, with why.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Refused(pub(crate) String);

pub(crate) struct Adapter {
    pub(crate) name: &'static str,
    pub(crate) binary: &'static str,
    pub(crate) class: ExecutorClass,
    /// The `runtime:` capability the executor declares.
    pub(crate) runtime: &'static str,
    /// The lease's tool policy (absent = no policy) to the binary's allowlist arguments, or a refusal.
    /// Every adapter refuses a lease without a tool list (declared as `x-lease:required`).
    pub(crate) allowlist: fn(Option<&ToolPolicy>) -> Result<Vec<String>, Refused>,
    /// Tools the lease must list (case ignored) or the adapter refuses, declared to serve as
    /// `x-lease-needs:<tool>` so that it routes such missions elsewhere.
    pub(crate) lease_needs: &'static [&'static str],
    /// The full argv (without the binary) for an objective and its allowlist arguments.
    pub(crate) argv: fn(&[String], &str) -> Vec<String>,
    /// The failure reason an exit code stands for, when it stands for one.
    pub(crate) exit_reason: fn(i32) -> Option<&'static str>,
    pub(crate) readiness: fn(&dyn Host) -> Report,
    /// Provider API keys reach the process (not for executors that must never see them).
    pub(crate) keeps_provider_keys: bool,
    /// Variables the process gets when the executor's environment does not set them.
    pub(crate) env_defaults: &'static [(&'static str, &'static str)],
    /// How its CLI says what it used (`usage`), read from its stdout for the mission's end.
    pub(crate) usage: UsageFormat,
}

impl Adapter {
    /// The allowlist for a lease as it travels (`{"tools": [...]}` or `{"tools": "none"}`): anything
    /// that is not a lease counts as no tool policy, which every adapter refuses, so that a malformed
    /// lease never runs an agent open.
    pub(crate) fn allowlist_for(&self, lease: &Value) -> Result<Vec<String>, Refused> {
        let lease: Option<Lease> = serde_json::from_value(lease.clone()).ok();
        self.allow(lease.as_ref().map(|l| &l.tools))
    }

    /// The binary's allowlist arguments for a tool policy, or the refusal: the adapter's own, then a
    /// tool it needs that the list does not name.
    fn allow(&self, policy: Option<&ToolPolicy>) -> Result<Vec<String>, Refused> {
        let allowlist = (self.allowlist)(policy)?;
        let listed = match policy {
            Some(ToolPolicy::List(list)) => list.as_slice(),
            _ => &[],
        };
        match self.lease_needs.iter().find(|needed| !lease_lists(listed, needed)) {
            Some(needed) => Err(Refused(format!("the {} adapter runs only when the lease lists {needed}", self.name))),
            None => Ok(allowlist),
        }
    }

    /// What the adapter declares it refuses, for serve to route around: a lease without tools, and
    /// each tool it needs.
    pub(crate) fn lease_capabilities(&self) -> impl Iterator<Item = String> + '_ {
        let needs = self.lease_needs.iter().map(|t| format!("{LEASE_NEEDS}{}", t.to_ascii_lowercase()));
        std::iter::once(LEASE_REQUIRED.to_owned()).chain(needs)
    }
}

/// Where `vagaris-exec` finds the provider gateway unless told otherwise.
const DEFAULT_GATEWAY: &str = "http://127.0.0.1:3014";

/// `claude-local`, `Claude_Local` and `CLAUDE-LOCAL` name the same adapter.
pub(crate) fn normalize(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace('_', "-")
}

fn tools(policy: Option<&ToolPolicy>, what: &str) -> Result<Vec<String>, Refused> {
    match policy {
        None => Err(Refused(format!("the lease has no tool policy: {what} never runs without an allowlist"))),
        Some(p) if p.denies_all() => Err(Refused("lease A3 axis denies all tools".into())),
        Some(ToolPolicy::Keyword(k)) => Err(Refused(format!("unknown tool policy {k:?}"))),
        Some(ToolPolicy::List(list)) if list.is_empty() => {
            Err(Refused(format!("the lease's allowlist is empty: {what} never runs open")))
        }
        Some(ToolPolicy::List(list)) => Ok(list.clone()),
    }
}

fn no_exit_reason(_: i32) -> Option<&'static str> {
    None
}

fn spine_exit_reason(code: i32) -> Option<&'static str> {
    match code {
        2 => Some("bad_arguments"),
        3 => Some("no_workload_identity"),
        4 => Some("no_tool_allowlist"),
        5 => Some("gateway_refused"),
        _ => None,
    }
}

/// The adapters the executor knows, in the order of `super::ADAPTERS` (tests take them by index).
fn built_ins() -> Vec<Adapter> {
    vec![claude_local(), codex_local(), spine_unattended(), shell()]
}

/// Claude Code on a person's own login: `claude -p OBJECTIVE --output-format stream-json --verbose
/// --allowedTools ...` (a JSON line per step, so the log is live and says what it used as it goes; the
/// CLI wants `--verbose` for this format with `-p`).
fn claude_local() -> Adapter {
    Adapter {
        name: "claude-local",
        binary: "claude",
        class: ExecutorClass::InteractiveLocal,
        runtime: "runtime:claude-code",
        allowlist: |p| tools(p, "claude").map(|t| std::iter::once("--allowedTools".to_owned()).chain(t).collect()),
        argv: |allow, objective| {
            let mut v = vec!["-p".to_owned(), objective.to_owned(), "--output-format".into(), "stream-json".into()];
            v.push("--verbose".into());
            v.extend_from_slice(allow);
            v
        },
        exit_reason: no_exit_reason,
        readiness: claude_readiness,
        lease_needs: &[],
        keeps_provider_keys: true,
        env_defaults: &[],
        usage: UsageFormat::ClaudeStream,
    }
}

/// Codex on a person's own login: `codex --tool A,B OBJECTIVE`.
fn codex_local() -> Adapter {
    Adapter {
        name: "codex-local",
        binary: "codex",
        class: ExecutorClass::InteractiveLocal,
        runtime: "runtime:codex",
        allowlist: |p| match p {
            Some(ToolPolicy::List(list)) if !list.is_empty() => Ok(vec!["--tool".into(), list.join(",")]),
            Some(p) if p.denies_all() => Err(Refused("lease A3 axis denies all tools".into())),
            _ => Err(Refused("lease carries no token allowlist for codex".into())),
        },
        argv: |allow, objective| {
            let mut v = allow.to_vec();
            v.push(objective.to_owned());
            v
        },
        exit_reason: no_exit_reason,
        readiness: codex_readiness,
        lease_needs: &[],
        keeps_provider_keys: true,
        env_defaults: &[],
        usage: UsageFormat::CodexTurns,
    }
}

/// The unattended executor: `vagaris-exec --allow-tools A,B OBJECTIVE`, with a workload identity and
/// only the gateway, never provider keys.
fn spine_unattended() -> Adapter {
    Adapter {
        name: "spine-unattended",
        binary: "vagaris-exec",
        class: ExecutorClass::UnattendedMachine,
        runtime: "runtime:custom:vagaris",
        allowlist: |p| tools(p, "vagaris-exec").map(|t| vec!["--allow-tools".into(), t.join(",")]),
        argv: |allow, objective| {
            let mut v = allow.to_vec();
            v.push(objective.to_owned());
            v
        },
        exit_reason: spine_exit_reason,
        readiness: spine_readiness,
        lease_needs: &[],
        keeps_provider_keys: false,
        env_defaults: &[("VAGARY_GATEWAY_BASE", DEFAULT_GATEWAY)],
        usage: UsageFormat::None,
    }
}

/// `sh -c OBJECTIVE`, only for leases that list Bash.
fn shell() -> Adapter {
    Adapter {
        name: "shell",
        binary: "sh",
        class: ExecutorClass::InteractiveLocal,
        runtime: "runtime:custom:shell",
        allowlist: |p| tools(p, "the shell").map(|_| Vec::new()),
        lease_needs: &["Bash"],
        argv: |_, objective| vec!["-c".into(), objective.to_owned()],
        exit_reason: no_exit_reason,
        readiness: shell_readiness,
        keeps_provider_keys: true,
        env_defaults: &[],
        usage: UsageFormat::None,
    }
}

/// The adapters by normalised name.
pub(crate) struct Registry {
    entries: Mutex<HashMap<String, Arc<Adapter>>>,
}

/// Undoes a registration when dropped: the previous entry (or none) comes back. Only tests register
/// adapters today; the executor runs the built-in ones.
#[cfg(test)]
pub(crate) struct Registration<'a> {
    registry: &'a Registry,
    name: String,
    previous: Option<Arc<Adapter>>,
}

#[cfg(test)]
impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut entries = self.registry.entries.lock().expect("adapters lock");
        match self.previous.take() {
            Some(p) => entries.insert(self.name.clone(), p),
            None => entries.remove(&self.name),
        };
    }
}

impl Default for Registry {
    fn default() -> Registry {
        let entries = built_ins().into_iter().map(|a| (a.name.to_owned(), Arc::new(a))).collect();
        Registry { entries: Mutex::new(entries) }
    }
}

impl Registry {
    #[cfg(test)]
    pub(crate) fn register(&self, name: &str, adapter: Adapter) -> Registration<'_> {
        let name = normalize(name);
        let previous = self.entries.lock().expect("adapters lock").insert(name.clone(), Arc::new(adapter));
        Registration { registry: self, name, previous }
    }

    /// The adapter for a name, or the refusal the Vagaris CLI gives for anything else.
    pub(crate) fn get(&self, name: &str) -> Result<Arc<Adapter>, String> {
        self.entries
            .lock()
            .expect("adapters lock")
            .get(&normalize(name))
            .cloned()
            .ok_or_else(|| format!("no CLI-hosted executor for adapter '{name}'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(tools: &[&str]) -> ToolPolicy {
        ToolPolicy::List(tools.iter().map(|t| t.to_string()).collect())
    }

    fn allow(adapter: &str, policy: Option<&ToolPolicy>) -> Result<Vec<String>, Refused> {
        Registry::default().get(adapter).unwrap().allow(policy)
    }

    #[test]
    fn leases_become_each_binarys_allowlist_flags() {
        let read_edit = list(&["Read", "Edit", "Bash"]);
        assert_eq!(allow("claude-local", Some(&read_edit)).unwrap(), ["--allowedTools", "Read", "Edit", "Bash"]);
        assert_eq!(allow("codex_local", Some(&read_edit)).unwrap(), ["--tool", "Read,Edit,Bash"]);
        assert_eq!(allow("SPINE-UNATTENDED", Some(&read_edit)).unwrap(), ["--allow-tools", "Read,Edit,Bash"]);
        assert_eq!(allow("shell", Some(&read_edit)).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn every_adapter_refuses_none_and_no_policy() {
        let none = ToolPolicy::Keyword("none".into());
        for adapter in ["claude-local", "codex-local", "spine-unattended", "shell"] {
            assert_eq!(allow(adapter, Some(&none)), Err(Refused("lease A3 axis denies all tools".into())), "{adapter}");
            assert!(allow(adapter, None).is_err(), "{adapter}");
            assert!(allow(adapter, Some(&list(&[]))).is_err(), "{adapter}");
        }
        assert_eq!(allow("codex-local", None), Err(Refused("lease carries no token allowlist for codex".into())));
        assert_eq!(
            allow("shell", Some(&list(&["Read"]))),
            Err(Refused("the shell adapter runs only when the lease lists Bash".into()))
        );
        assert!(allow("shell", Some(&list(&["bash"]))).is_ok(), "as serve routes it: case ignored");
    }

    /// What serve routes by is what the adapters refuse: a lease without tools for all of them, and
    /// Bash missing for the shell.
    #[test]
    fn adapters_declare_what_they_refuse() {
        let registry = Registry::default();
        let declared = |name: &str| registry.get(name).unwrap().lease_capabilities().collect::<Vec<_>>();
        assert_eq!(declared("shell"), ["x-lease:required", "x-lease-needs:bash"]);
        for name in ["claude-local", "codex-local", "spine-unattended"] {
            assert_eq!(declared(name), ["x-lease:required"], "{name}");
        }
    }

    #[test]
    fn argv_never_runs_open() {
        let registry = Registry::default();
        for name in ["claude-local", "codex-local", "spine-unattended", "shell"] {
            let a = registry.get(name).unwrap();
            let allowlist = (a.allowlist)(Some(&list(&["Bash", "Read"]))).unwrap();
            let argv = (a.argv)(&allowlist, "do it");
            assert!(!argv.iter().any(|x| x.contains("dangerously")), "{name}: {argv:?}");
            assert!(argv.contains(&"do it".to_owned()), "{name}: {argv:?}");
        }
        let claude = registry.get("claude-local").unwrap();
        assert_eq!(
            (claude.argv)(&["--allowedTools".into(), "Read".into()], "obj"),
            ["-p", "obj", "--output-format", "stream-json", "--verbose", "--allowedTools", "Read"]
        );
    }

    #[test]
    fn names_are_normalised_and_others_refused() {
        let registry = Registry::default();
        assert_eq!(registry.get("Claude_Local").unwrap().name, "claude-local");
        assert_eq!(registry.get("gemini-local").err().unwrap(), "no CLI-hosted executor for adapter 'gemini-local'");
        assert_eq!(registry.get("process").err().unwrap(), "no CLI-hosted executor for adapter 'process'");
    }

    #[test]
    fn a_registration_is_undone_by_its_guard() {
        let registry = Registry::default();
        let temporary = Adapter { name: "claude-local", binary: "fake-claude", ..built_ins().remove(0) };
        {
            let _guard = registry.register("claude_local", temporary);
            assert_eq!(registry.get("claude-local").unwrap().binary, "fake-claude");
        }
        assert_eq!(registry.get("claude-local").unwrap().binary, "claude");
        {
            let _guard = registry.register("brand-new", built_ins().remove(3));
            assert!(registry.get("brand-new").is_ok());
        }
        assert!(registry.get("brand-new").is_err());
    }

    #[test]
    fn spine_exit_codes() {
        let a = Registry::default().get("spine-unattended").unwrap();
        let reasons: Vec<Option<&str>> = [2, 3, 4, 5, 1].iter().map(|c| (a.exit_reason)(*c)).collect();
        assert_eq!(
            reasons,
            [
                Some("bad_arguments"),
                Some("no_workload_identity"),
                Some("no_tool_allowlist"),
                Some("gateway_refused"),
                None
            ]
        );
    }
}
