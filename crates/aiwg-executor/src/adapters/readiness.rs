//! The readiness report each adapter makes about itself: whether its binary is on PATH and, for the
//! unattended executor, whether it holds a workload identity with the claim scope, until when, and with
//! what budget left.

use chrono::{DateTime, Utc};

use aiwg_domain::readiness::{BudgetState, ExecutorClass, Expiry, Gap, GapKind, Report};

/// What the executor's environment looks like to an adapter judging its readiness.
pub(crate) trait Host {
    fn var(&self, name: &str) -> Option<String>;
    fn on_path(&self, binary: &str) -> bool;
    fn now(&self) -> DateTime<Utc>;
}

fn interactive_readiness(binary: &'static str) -> impl Fn(&dyn Host) -> Report {
    move |host| {
        let mut gaps = Vec::new();
        if !host.on_path(binary) {
            gaps.push(Gap { kind: GapKind::Packaging, detail: format!("{binary} not on PATH") });
        }
        // A person's own login: nobody stamped an expiry or a budget, so neither is claimed.
        Report {
            ready: gaps.is_empty(),
            class: ExecutorClass::InteractiveLocal,
            expiry: Expiry::Unknown,
            budget: BudgetState::Unknown,
            gaps,
        }
    }
}

pub(super) fn claude_readiness(host: &dyn Host) -> Report {
    interactive_readiness("claude")(host)
}

pub(super) fn codex_readiness(host: &dyn Host) -> Report {
    interactive_readiness("codex")(host)
}

pub(super) fn shell_readiness(host: &dyn Host) -> Report {
    let mut report = interactive_readiness("sh")(host);
    // A shell holds no credential at all.
    report.expiry = Expiry::Never;
    report
}

/// The scope the unattended executor's binding must carry, and nothing governance-level.
const CLAIM_SCOPE: &str = "capability.execution.claim";

pub(super) fn spine_readiness(host: &dyn Host) -> Report {
    let mut gaps = Vec::new();
    let session = host.var("VAGARIS_WORKLOAD_SESSION").filter(|s| !s.is_empty());
    if session.is_none() {
        gaps.push(Gap {
            kind: GapKind::Identity,
            detail: "identity not bound: VAGARIS_WORKLOAD_SESSION is not set".into(),
        });
    }
    let scopes = host.var("VAGARIS_WORKLOAD_SESSION_SCOPES").unwrap_or_default();
    if session.is_some() && !scopes.split_whitespace().any(|s| s == CLAIM_SCOPE) {
        gaps.push(Gap { kind: GapKind::Identity, detail: format!("the workload session lacks {CLAIM_SCOPE}") });
    }
    let expiry = match host.var("VAGARIS_WORKLOAD_SESSION_EXPIRES_AT").filter(|s| !s.is_empty()) {
        None => Expiry::Unknown,
        Some(raw) => match parse_expiry(&raw) {
            Some(at) if at <= host.now() => {
                gaps.push(Gap {
                    kind: GapKind::Credential,
                    detail: format!("the workload session expired at {}", aiwg_contract::clock::format(at)),
                });
                Expiry::At(aiwg_contract::clock::format(at))
            }
            Some(at) => Expiry::At(aiwg_contract::clock::format(at)),
            None => {
                gaps.push(Gap {
                    kind: GapKind::Credential,
                    detail: format!(
                        "VAGARIS_WORKLOAD_SESSION_EXPIRES_AT {raw:?} is neither epoch seconds nor ISO 8601"
                    ),
                });
                Expiry::Unknown
            }
        },
    };
    if !host.on_path("vagaris-exec") {
        gaps.push(Gap { kind: GapKind::Packaging, detail: "vagaris-exec not on PATH".into() });
    }
    let budget = match host.var("VAGARIS_WORKLOAD_BUDGET").as_deref() {
        Some("ok") => BudgetState::Ok,
        Some("low") => BudgetState::Low,
        Some("exhausted") => {
            gaps.push(Gap { kind: GapKind::Budget, detail: "the workload budget is exhausted".into() });
            BudgetState::Exhausted
        }
        _ => BudgetState::Unknown,
    };
    Report { ready: gaps.is_empty(), class: ExecutorClass::UnattendedMachine, expiry, budget, gaps }
}

/// Epoch seconds or an ISO 8601 / RFC 3339 timestamp.
fn parse_expiry(raw: &str) -> Option<DateTime<Utc>> {
    if let Ok(secs) = raw.trim().parse::<i64>() {
        return DateTime::from_timestamp(secs, 0);
    }
    DateTime::parse_from_rfc3339(raw.trim()).ok().map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct FakeHost {
        vars: HashMap<&'static str, &'static str>,
        path: Vec<&'static str>,
    }

    impl Host for FakeHost {
        fn var(&self, name: &str) -> Option<String> {
            self.vars.get(name).map(|v| v.to_string())
        }
        fn on_path(&self, binary: &str) -> bool {
            self.path.contains(&binary)
        }
        fn now(&self) -> DateTime<Utc> {
            "2026-06-01T00:00:00Z".parse().unwrap()
        }
    }

    fn spine(vars: &[(&'static str, &'static str)], path: &[&'static str]) -> Report {
        spine_readiness(&FakeHost { vars: vars.iter().copied().collect(), path: path.to_vec() })
    }

    #[test]
    fn the_unattended_executor_reports_each_gap_separately() {
        let r = spine(&[], &[]);
        assert!(!r.ready);
        let kinds: Vec<GapKind> = r.gaps.iter().map(|g| g.kind).collect();
        assert_eq!(kinds, [GapKind::Identity, GapKind::Packaging], "{r:?}");
        assert_eq!(r.gaps[1].detail, "vagaris-exec not on PATH");
        assert_eq!(r.expiry, Expiry::Unknown);
        assert_eq!(r.budget, BudgetState::Unknown);

        let bound =
            [("VAGARIS_WORKLOAD_SESSION", "sess-1"), ("VAGARIS_WORKLOAD_SESSION_SCOPES", "capability.execution.claim")];
        let r = spine(&bound, &["vagaris-exec"]);
        assert!(r.ready, "{r:?}");
        assert_eq!(r.class, ExecutorClass::UnattendedMachine);

        let mut wrong_scope = bound.to_vec();
        wrong_scope[1] = ("VAGARIS_WORKLOAD_SESSION_SCOPES", "capability.governance.decide");
        assert_eq!(
            spine(&wrong_scope, &["vagaris-exec"]).gaps[0].detail,
            "the workload session lacks capability.execution.claim"
        );

        let mut epoch = bound.to_vec();
        epoch.push(("VAGARIS_WORKLOAD_SESSION_EXPIRES_AT", "1780272000"));
        let r = spine(&epoch, &["vagaris-exec"]);
        assert_eq!(r.expiry, Expiry::At("2026-06-01T00:00:00.000Z".into()));
        assert!(!r.ready, "an expiry that is now has passed");
        let mut iso = bound.to_vec();
        iso.push(("VAGARIS_WORKLOAD_SESSION_EXPIRES_AT", "2026-07-01T00:00:00Z"));
        iso.push(("VAGARIS_WORKLOAD_BUDGET", "low"));
        let r = spine(&iso, &["vagaris-exec"]);
        assert!(r.ready);
        assert_eq!((r.expiry, r.budget), (Expiry::At("2026-07-01T00:00:00.000Z".into()), BudgetState::Low));
        let mut garbage = bound.to_vec();
        garbage.push(("VAGARIS_WORKLOAD_SESSION_EXPIRES_AT", "tomorrow"));
        assert_eq!(spine(&garbage, &["vagaris-exec"]).gaps[0].kind, GapKind::Credential);
    }

    #[test]
    fn interactive_adapters_claim_no_expiry_or_budget() {
        let host = FakeHost { vars: HashMap::new(), path: vec!["sh"] };
        let claude = claude_readiness(&host);
        assert!(!claude.ready);
        assert_eq!(claude.gaps[0].detail, "claude not on PATH");
        assert_eq!((claude.expiry, claude.budget), (Expiry::Unknown, BudgetState::Unknown));
        let shell = shell_readiness(&host);
        assert!(shell.ready);
        assert_eq!(shell.expiry, Expiry::Never);
    }
}
