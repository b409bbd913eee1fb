//! HTTP agent runtimes (the WattSwarm executor protocol), decided without I/O: the capabilities a
//! runtime is routed by, the task a dispatch becomes, and how the executions of a task settle its
//! mission. The protocol's own rules (wire types, policies, hashes, what a kernel accepts) are in
//! `aiwg_wattswarm`; the calls are made by `services::runtimes`.
//!
//! A runtime's executor id is a random UUID given when it is first added (executor ids are UUIDs on
//! the wire); an operator addresses it by its name (see `services::registry::runtimes`).
//!
//! Capabilities (what `executor_filter.capabilities` matches): `x-kind:http-runtime`, `x-runtime:<name>`
//! (to pin one by name), `x-runtime-kind:local|remote`, and from the latest `/capabilities`:
//! `x-profile:<p>` per profile, `x-task-type:<t>` per task type, `x-provider:<provider_family>`,
//! `x-model:<model_id>`, each name lowercased with anything outside `[a-z0-9_:-]` turned into `-` (the
//! contract's pattern for extension capabilities). Routing uses them like any executor's; the profile is
//! checked again against a fresh `/capabilities` before anything runs, as kernels do.
//!
//! Not `x-abort`: an abort drops serve's call in flight, but the protocol has no way to stop the
//! runtime's own work (a runtime finishes an execution whose caller hung up, so that a re-send finds
//! it), so an abort is answered `delivered: false`, honestly.

use serde_json::{json, Map, Value};
use sha2::Digest;

use super::capabilities::HTTP_RUNTIME;
use super::executor::RuntimeRecord;
use aiwg_contract::{DispatchPayload, TaskSpec};
use aiwg_wattswarm::policy::{require_binding, PolicyId};
use aiwg_wattswarm::task::{default_output_schema, sample_contract};
use aiwg_wattswarm::wire::{PolicyBinding, TaskContract, VerificationStatus};

/// The capabilities a runtime is routed by (see the module's opening).
pub fn capabilities_of(name: &str, r: &RuntimeRecord) -> Vec<String> {
    let mut caps = vec![
        HTTP_RUNTIME.to_owned(),
        format!("x-runtime:{}", token(name)),
        format!("x-runtime-kind:{}", r.kind.as_str()),
    ];
    if let Some(c) = &r.capabilities {
        caps.extend(c.profiles.iter().map(|p| format!("x-profile:{}", token(p))));
        caps.extend(c.task_types.iter().map(|t| format!("x-task-type:{}", token(t))));
        caps.push(format!("x-provider:{}", token(&c.provider_family)));
        caps.push(format!("x-model:{}", token(&c.model_id)));
    }
    caps.dedup();
    caps
}

/// The kernel's sample contract's task type and profile, a task's when it names none.
const DEFAULT_TASK_TYPE: &str = "swarm";
const DEFAULT_PROFILE: &str = "default";

/// What a runtime needs to take a dispatch's task: to be a runtime, and to list the task's profile (a
/// kernel refuses a runtime without it, and so does the drive, after the call: routed by it, a task goes
/// only where it can run).
pub fn required_capabilities(spec: &TaskSpec) -> [String; 2] {
    let profile = spec.profile.as_deref().unwrap_or(DEFAULT_PROFILE);
    [HTTP_RUNTIME.to_owned(), format!("x-profile:{}", token(profile))]
}

/// A runtime's name as a capability suffix.
fn token(name: &str) -> String {
    let t: String = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || "_:-".contains(c) { c } else { '-' })
        .collect();
    if t.is_empty() {
        "-".into()
    } else {
        t
    }
}

/// A dispatch's task with every default filled in and its policy binding checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    pub task_type: String,
    pub profile: String,
    pub inputs: Value,
    pub output_schema: Value,
    pub policy: PolicyId,
    pub binding: PolicyBinding,
    pub budget: aiwg_contract::BudgetSpec,
    pub timeout_ms: Option<u64>,
    pub executions: usize,
    pub quorum: usize,
    /// What a cross-check's executions must agree on: JSON pointers into the output (empty: all of it).
    pub agree_on: Vec<String>,
}

impl Task {
    /// The task of a dispatch: its `task`, or one built from `objective` and `completion` (the prompt
    /// and what done means, in the inputs the kernel's sample contract uses, with the lease so that a
    /// runtime that runs tools can honour it). `Err` names what is wrong with the task as given.
    pub fn of(payload: &DispatchPayload, body: &Value) -> Result<Task, String> {
        let spec = payload.task.clone().unwrap_or_default();
        let (executions, quorum) = spec.crosscheck.as_ref().map_or((1, 1), |c| (c.executions, c.quorum));
        if quorum > executions {
            return Err(format!("crosscheck quorum {quorum} is more than its {executions} executions"));
        }
        let agree_on = spec.crosscheck.as_ref().map(|c| c.agree_on.clone()).unwrap_or_default();
        if let Some(bad) = agree_on.iter().find(|p| !p.is_empty() && !p.starts_with('/')) {
            return Err(format!(
                "crosscheck agree_on {bad:?} is not a JSON pointer (RFC 6901: empty, or starting with '/', e.g. \"/answer\")"
            ));
        }
        let (policy, binding) = binding(&spec)?;
        Ok(Task {
            task_type: spec.task_type.unwrap_or_else(|| DEFAULT_TASK_TYPE.into()),
            profile: spec.profile.unwrap_or_else(|| DEFAULT_PROFILE.into()),
            inputs: spec.inputs.unwrap_or_else(|| default_inputs(body)),
            output_schema: spec.output_schema.unwrap_or_else(default_output_schema),
            policy,
            binding,
            budget: mapped_budget(spec.budget.unwrap_or_default(), body),
            timeout_ms: spec.timeout_ms,
            executions,
            quorum,
            agree_on,
        })
    }

    /// The full `TaskContract` sent with every `/execute`: the kernel's sample contract with this
    /// task's type, inputs, schema, policy and budget. `task_id` is the mission id.
    pub fn contract(&self, task_id: &str, now_ms: u64) -> TaskContract {
        let mut c =
            sample_contract(task_id, self.inputs.clone(), self.output_schema.clone(), self.binding.clone(), now_ms);
        c.task_type = self.task_type.clone();
        if let Some(ms) = self.budget.time_ms {
            c.budget.time_ms = ms;
        }
        if let Some(steps) = self.budget.max_steps {
            c.budget.max_steps = steps;
        }
        if let Some(units) = self.budget.cost_units {
            // The kernel requires every stage bucket > 0 and their sum <= cost_units: split as its
            // sample does (35/45/20).
            c.budget.cost_units = units;
            c.budget.explore_cost_units = (units * 35 / 100).max(1);
            c.budget.verify_cost_units = (units * 45 / 100).max(1);
            c.budget.finalize_cost_units = (units - c.budget.explore_cost_units - c.budget.verify_cost_units).max(1);
        }
        c
    }
}

/// The task's budget, what the mission's own (`budget` in the dispatch, `crate::budget`) says where the
/// task names none: its duration as `time_ms`, its tokens as `cost_units` (a unit a token). The
/// mission's budget still holds over what the runtime reports.
fn mapped_budget(task: aiwg_contract::BudgetSpec, body: &Value) -> aiwg_contract::BudgetSpec {
    let Some(mission) = crate::budget::Budget::of(body.get("budget")) else { return task };
    aiwg_contract::BudgetSpec {
        time_ms: task.time_ms.or(mission.max_duration_s.map(|s| s.saturating_mul(1000))),
        cost_units: task.cost_units.or(mission.max_tokens),
        ..task
    }
}

fn default_inputs(body: &Value) -> Value {
    let mut inputs = Map::new();
    for (from, to) in [("objective", "prompt"), ("completion", "completion"), ("lease", "lease")] {
        if let Some(v) = body.get(from) {
            inputs.insert(to.into(), v.clone());
        }
    }
    Value::Object(inputs)
}

/// The binding the task asks for (the schema-only policy by default). A version or hash given must be
/// the policy's, as kernels require when they create a task.
fn binding(spec: &TaskSpec) -> Result<(PolicyId, PolicyBinding), String> {
    let Some(v) = &spec.verification else {
        return Ok((PolicyId::SchemaOnly, PolicyId::SchemaOnly.binding(json!({}))));
    };
    let policy = PolicyId::parse(&v.policy_id).ok_or_else(|| {
        let known: Vec<&str> = PolicyId::ALL.iter().map(|p| p.id()).collect();
        format!("unknown verification policy {:?}: serve knows {}", v.policy_id, known.join(", "))
    })?;
    let mut binding = policy.binding(v.policy_params.clone().unwrap_or_else(|| json!({})));
    if let Some(version) = &v.policy_version {
        binding.policy_version = version.clone();
    }
    if let Some(hash) = &v.policy_hash {
        binding.policy_hash = hash.clone();
    }
    require_binding(&binding).map_err(|e| format!("policy binding invalid: {e}"))?;
    Ok((policy, binding))
}

/// What one execution of a task came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Execution {
    /// It stopped before a verdict: the runtime was unreachable, lacked the profile, answered what a
    /// kernel refuses, ...
    Stopped { runtime: String, reason: &'static str, error: String },
    /// A candidate was produced and judged. `agreement` is what executions agree on (see
    /// [`agreement`]), `digest` the whole output's.
    Judged { runtime: String, digest: String, agreement: String, status: VerificationStatus, reason_codes: Vec<u16> },
}

/// What a cross-check compares of an execution's output: its `output_ref` digest, or with `agree_on`
/// the SHA-256 of the values at those JSON pointers (a missing one is `null`) as a JSON array. Real
/// runtimes put the attempt in `check_summary`, so whole outputs of one task never agree.
pub fn agreement(output: &Value, agree_on: &[String], digest: &str) -> String {
    if agree_on.is_empty() {
        return digest.to_owned();
    }
    let projection: Vec<&Value> = agree_on.iter().map(|p| output.pointer(p).unwrap_or(&Value::Null)).collect();
    let text = serde_json::to_string(&projection).expect("values serialize");
    format!("{:x}", sha2::Sha256::digest(text.as_bytes()))
}

/// How the executions settle the mission.
#[derive(Debug, PartialEq)]
pub enum Settlement {
    /// These executions (indexes) agree on a verified output, at least `quorum` of them.
    Completed {
        agreeing: Vec<usize>,
    },
    Failed {
        reason: &'static str,
        error: String,
    },
}

/// Executions agree when what they produced agrees (their [`agreement`]) and it passed verification. The largest such group (the earliest on a tie) completes the mission when it reaches
/// the quorum. Otherwise a single execution fails with its own reason, and a cross-check with
/// `crosscheck_no_quorum`, naming what each execution came to.
pub fn settle(executions: &[Execution], quorum: usize) -> Settlement {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, e) in executions.iter().enumerate() {
        if let Execution::Judged { agreement, status: VerificationStatus::Passed, .. } = e {
            match groups.iter_mut().find(|(a, _)| a == agreement) {
                Some((_, members)) => members.push(i),
                None => groups.push((agreement, vec![i])),
            }
        }
    }
    let best = groups.into_iter().rev().max_by_key(|(_, members)| members.len());
    if let Some((_, agreeing)) = best.filter(|(_, members)| members.len() >= quorum) {
        return Settlement::Completed { agreeing };
    }
    match executions {
        [Execution::Stopped { reason, error, .. }] => Settlement::Failed { reason, error: error.clone() },
        [Execution::Judged { status, reason_codes, .. }] => Settlement::Failed {
            reason: if *status == VerificationStatus::Inconclusive {
                "verification_inconclusive"
            } else {
                "verification_failed"
            },
            error: format!("verifier did not pass candidate; reason_codes={reason_codes:?}"),
        },
        _ => Settlement::Failed {
            reason: "crosscheck_no_quorum",
            error: format!(
                "no {quorum} of {} executions agreed on a verified output: {}",
                executions.len(),
                executions.iter().map(describe).collect::<Vec<_>>().join("; ")
            ),
        },
    }
}

fn describe(e: &Execution) -> String {
    match e {
        Execution::Stopped { runtime, reason, .. } => format!("{runtime} stopped ({reason})"),
        Execution::Judged { runtime, digest, status, reason_codes, .. } => {
            format!("{runtime} {} {digest} {reason_codes:?}", status_word(*status))
        }
    }
}

pub fn status_word(s: VerificationStatus) -> &'static str {
    match s {
        VerificationStatus::Passed => "passed",
        VerificationStatus::Failed => "failed",
        VerificationStatus::Inconclusive => "inconclusive",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RuntimeKind;
    use aiwg_wattswarm::wire::RuntimeCapabilities;

    fn judged(runtime: &str, digest: &str, status: VerificationStatus) -> Execution {
        let (digest, agreement) = (digest.into(), digest.into());
        Execution::Judged { runtime: runtime.into(), digest, agreement, status, reason_codes: vec![100] }
    }

    fn stopped(runtime: &str) -> Execution {
        Execution::Stopped { runtime: runtime.into(), reason: "runtime_unreachable", error: "refused".into() }
    }

    use VerificationStatus::{Failed, Inconclusive, Passed};

    #[test]
    fn a_single_execution_settles_by_its_own_verdict() {
        assert_eq!(settle(&[judged("a", "d1", Passed)], 1), Settlement::Completed { agreeing: vec![0] });
        assert_eq!(
            settle(&[judged("a", "d1", Failed)], 1),
            Settlement::Failed {
                reason: "verification_failed",
                error: "verifier did not pass candidate; reason_codes=[100]".into()
            }
        );
        let Settlement::Failed { reason, .. } = settle(&[judged("a", "d1", Inconclusive)], 1) else { panic!() };
        assert_eq!(reason, "verification_inconclusive");
        assert_eq!(
            settle(&[stopped("a")], 1),
            Settlement::Failed { reason: "runtime_unreachable", error: "refused".into() }
        );
    }

    /// Quorums over three executions, written out: which agree, and whether the mission completes.
    #[test]
    fn a_crosscheck_completes_only_when_the_quorum_agrees_on_a_verified_output() {
        let cases: [(Vec<Execution>, usize, Option<Vec<usize>>); 7] = [
            (vec![judged("a", "x", Passed), judged("b", "x", Passed), judged("c", "y", Passed)], 2, Some(vec![0, 1])),
            (vec![judged("a", "x", Passed), judged("b", "y", Passed), judged("c", "y", Passed)], 2, Some(vec![1, 2])),
            (vec![judged("a", "x", Passed), judged("b", "x", Passed), judged("c", "y", Passed)], 3, None),
            // Same output, but one verdict failed: it does not count.
            (vec![judged("a", "x", Passed), judged("b", "x", Failed), judged("c", "y", Passed)], 2, None),
            (vec![judged("a", "x", Passed), stopped("b"), judged("c", "x", Passed)], 2, Some(vec![0, 2])),
            // All differ: a tie of ones; the earliest wins a quorum of 1.
            (vec![judged("a", "x", Passed), judged("b", "y", Passed), judged("c", "z", Passed)], 1, Some(vec![0])),
            (vec![stopped("a"), stopped("b"), stopped("c")], 1, None),
        ];
        for (executions, quorum, expected) in cases {
            match (settle(&executions, quorum), expected) {
                (Settlement::Completed { agreeing }, Some(want)) => assert_eq!(agreeing, want, "{executions:?}"),
                (Settlement::Failed { reason, error }, None) => {
                    assert_eq!(reason, "crosscheck_no_quorum");
                    assert!(error.starts_with(&format!("no {quorum} of 3 executions agreed")), "{error}");
                    assert!(error.contains("a ") && error.contains("b ") && error.contains("c "), "{error}");
                }
                (got, want) => panic!("{executions:?} quorum {quorum}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// Outputs that differ only outside `agree_on` agree; a value at a pointer that differs, or is
    /// missing in one, does not; without `agree_on` the whole output's digest decides.
    #[test]
    fn executions_agree_on_what_the_task_names() {
        let attempt = |n: u32, answer: &str| json!({"answer": answer, "check_summary": format!("attempt={n}")});
        let on = |pointers: &[&str]| pointers.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let answer = on(&["/answer"]);
        assert_eq!(agreement(&attempt(1, "42"), &answer, "d1"), agreement(&attempt(2, "42"), &answer, "d2"));
        assert_ne!(agreement(&attempt(1, "42"), &answer, "d1"), agreement(&attempt(2, "43"), &answer, "d2"));
        assert_ne!(
            agreement(&json!({"answer": null}), &answer, "d"),
            agreement(&json!({}), &on(&["/answer", "/x"]), "d")
        );
        assert_eq!(agreement(&attempt(1, "42"), &[], "d1"), "d1");
        let nested = json!({"result": {"values": [1, 2]}, "noise": 1});
        assert_eq!(
            agreement(&nested, &on(&["/result/values/1"]), "a"),
            agreement(&json!({"result": {"values": [0, 2]}}), &on(&["/result/values/1"]), "b")
        );
    }

    #[test]
    fn capabilities_name_the_runtime_in_the_contracts_extension_pattern() {
        let mut r = RuntimeRecord { base_url: "http://h/rt".into(), kind: RuntimeKind::Remote, capabilities: None };
        assert_eq!(capabilities_of("Rt.1", &r), ["x-kind:http-runtime", "x-runtime:rt-1", "x-runtime-kind:remote"]);
        r.capabilities = Some(RuntimeCapabilities {
            task_types: vec!["swarm".into(), "topic_interpretation".into()],
            profiles: vec!["default".into(), "Careful Mode".into()],
            provider_family: "swarm-runtime".into(),
            model_id: "gpt-4.1".into(),
        });
        let caps = capabilities_of("rt", &r);
        for want in [
            "x-profile:default",
            "x-profile:careful-mode",
            "x-task-type:topic_interpretation",
            "x-provider:swarm-runtime",
            "x-model:gpt-4-1",
        ] {
            assert!(caps.contains(&want.to_owned()), "{want} in {caps:?}");
        }
        let pattern = |c: &String| {
            c.starts_with("x-")
                && c[2..].starts_with(|ch: char| ch.is_ascii_lowercase())
                && c.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "_:-".contains(ch))
        };
        assert!(caps.iter().all(pattern), "{caps:?}");
    }

    fn payload(task: Value) -> (DispatchPayload, Value) {
        let body = json!({"mission_id": "m", "objective": "echo hi", "completion": "prints hi",
                          "lease": {"tools": ["Bash"]}, "task": task});
        (serde_json::from_value(body.clone()).unwrap(), body)
    }

    #[test]
    fn a_dispatch_without_a_task_becomes_the_kernels_sample_task_with_the_objective_as_prompt() {
        let (p, body) = payload(Value::Null);
        let t = Task::of(&DispatchPayload { task: None, ..p }, &body).unwrap();
        assert_eq!(t.inputs, json!({"prompt": "echo hi", "completion": "prints hi", "lease": {"tools": ["Bash"]}}));
        assert_eq!((t.task_type.as_str(), t.profile.as_str()), ("swarm", "default"));
        assert_eq!(t.policy, PolicyId::SchemaOnly);
        assert_eq!(t.binding.policy_hash, PolicyId::SchemaOnly.hash());
        assert_eq!((t.executions, t.quorum), (1, 1));
        let c = t.contract("m", 1_000);
        assert_eq!(c.task_id, "m");
        assert_eq!(c.expiry_ms, 121_000);
        assert_eq!(c.acceptance.verifier_policy, t.binding);
    }

    /// A mission's budget gives the task's where the task names none: its duration as time_ms, its
    /// tokens as cost_units; the task's own wins.
    #[test]
    fn a_missions_budget_maps_to_the_tasks() {
        let (p, mut body) = payload(json!({"budget": {"cost_units": 7}}));
        body["budget"] = json!({"max_tokens": 500, "max_duration_s": 20});
        let c = Task::of(&p, &body).unwrap().contract("m", 0);
        assert_eq!((c.budget.time_ms, c.budget.cost_units), (20_000, 7));
        let (p, body) = payload(Value::Null);
        let plain = Task::of(&DispatchPayload { task: None, ..p }, &body).unwrap().contract("m", 0);
        assert_ne!(plain.budget.time_ms, 20_000, "without a budget, the kernel's");
    }

    #[test]
    fn a_task_as_given_overrides_every_default() {
        let (p, body) = payload(json!({
            "task_type": "topic_interpretation", "profile": "careful", "inputs": {"source_message": {}},
            "output_schema": {"type": "object"}, "timeout_ms": 50, "budget": {"time_ms": 5, "cost_units": 100},
            "verification": {"policy_id": "vp.schema_thresholds.v1", "policy_params": {"max_len": 10}},
            "crosscheck": {"executions": 3, "quorum": 2}
        }));
        let t = Task::of(&p, &body).unwrap();
        assert_eq!(t.inputs, json!({"source_message": {}}));
        assert_eq!(t.binding, PolicyId::SchemaThresholds.binding(json!({"max_len": 10})));
        assert_eq!((t.executions, t.quorum, t.timeout_ms), (3, 2, Some(50)));
        let c = t.contract("m", 0);
        assert_eq!((c.task_type.as_str(), c.budget.time_ms, c.budget.cost_units), ("topic_interpretation", 5, 100));
        let buckets = c.budget.explore_cost_units + c.budget.verify_cost_units + c.budget.finalize_cost_units;
        assert!(buckets <= 100 && c.budget.finalize_cost_units > 0);
    }

    #[test]
    fn a_binding_or_quorum_a_kernel_would_refuse_is_refused_at_dispatch() {
        let cases = [
            (
                json!({"verification": {"policy_id": "vp.schema_only.v1", "policy_version": "2"}}),
                "policy version mismatch",
            ),
            (
                json!({"verification": {"policy_id": "vp.schema_only.v1",
                                        "policy_hash": format!("sha256:{}", PolicyId::SchemaOnly.hash())}}),
                "policy hash mismatch",
            ),
            (json!({"crosscheck": {"executions": 2, "quorum": 3}}), "quorum 3 is more than its 2 executions"),
            (
                json!({"crosscheck": {"executions": 2, "quorum": 2, "agree_on": ["answer"]}}),
                "agree_on \"answer\" is not a JSON pointer",
            ),
            (
                json!({"verification": {"policy_id": "vp.llm_judge.v1"}}),
                "unknown verification policy \"vp.llm_judge.v1\"",
            ),
        ];
        for (task, want) in cases {
            let (p, body) = payload(task);
            let err = Task::of(&p, &body).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
        let (p, body) = payload(json!({"verification": {"policy_id": "vp.crosscheck.v1",
                                                         "policy_version": "1",
                                                         "policy_hash": PolicyId::Crosscheck.hash()}}));
        assert_eq!(Task::of(&p, &body).unwrap().policy, PolicyId::Crosscheck);
    }
}
