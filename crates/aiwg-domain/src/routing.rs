//! Which executor gets a mission: candidate filtering and preference. Pure; no I/O.
//!
//! Candidates are registered executors with a live WebSocket that satisfy the whole filter (a pin by
//! `executor_id` must still have every requested capability), are `resumable` when the mission is
//! `long_running`, and do not declare that they would refuse the mission as it is (its lease, its
//! completion check). Those that would are counted apart: when every executor would refuse, the
//! dispatch is the caller's mistake, not a fleet that is busy. Among them: strongest isolation first (microvm/vm > container > host/none, as upstream
//! prefers sandboxes), then fewest active missions, then round-robin.
//!
//! An executor's isolation is its own word (its `isolation:*` capabilities), unless the operator chose
//! to count only what they vouch for ([`Trust::Vouched`]); the routing record says which.

use serde::Serialize;

use super::readiness::ExecutorClass;

/// What routing needs to know about one executor.
pub struct RoutingView<'a> {
    pub executor_id: &'a str,
    pub name: &'a str,
    pub capabilities: &'a [String],
    pub connected: bool,
    pub draining: bool,
    pub active_missions: usize,
}

/// Rejections kept on a mission; more are counted, not listed, so one dispatch over a large fleet stays small.
pub(crate) const MAX_LISTED_REJECTIONS: usize = 32;

pub struct Request<'a> {
    pub pin: Option<&'a str>,
    pub capabilities: &'a [String],
    pub long_running: bool,
    pub unattended: bool,
    /// The tools the mission's lease lists; `None` when it carries no tool list.
    pub lease_tools: Option<&'a [String]>,
    /// The mission carries a `completion_check` command.
    pub completion_check: bool,
    pub trust: Trust<'a>,
}

/// Whose word an executor's isolation is.
#[derive(Clone, Copy, Debug)]
pub enum Trust<'a> {
    /// The executor's own `isolation:*` capabilities (as upstream takes them): any executor may claim a
    /// VM and be preferred for every mission.
    Claimed,
    /// Only what the operator vouches for, by executor id or name (`dispatch.vouched_isolation`); an
    /// executor not listed counts as host.
    Vouched(&'a std::collections::BTreeMap<String, String>),
}

impl Trust<'_> {
    /// An executor's isolation rank (see [`isolation_rank`]) as this trust counts it.
    fn rank(self, v: &RoutingView<'_>) -> u8 {
        match self {
            Trust::Claimed => isolation_rank(v.capabilities),
            Trust::Vouched(vouched) => vouched
                .get(v.executor_id)
                .or_else(|| vouched.get(v.name))
                .map_or(1, |kind| isolation_rank(&[format!("isolation:{kind}")])),
        }
    }

    fn word(self) -> &'static str {
        match self {
            Trust::Claimed => "as the executors claim it",
            Trust::Vouched(_) => "as the operator vouches for it",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rejection {
    pub executor_id: String,
    /// Its name, for the people reading why (ids are for machines); absent for an unknown id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub reason: String,
}

impl Rejection {
    /// Who, as an operator reads it: the name and the start of the id (names need not be unique).
    pub(crate) fn who(&self) -> String {
        match &self.name {
            Some(name) => format!("{name} {}", self.executor_id.get(..8).unwrap_or(&self.executor_id)),
            None => self.executor_id.clone(),
        }
    }
}

#[derive(Debug, PartialEq)]
pub struct Plan {
    /// Eligible executors, most preferred first.
    pub ordered: Vec<String>,
    /// Why the first of `ordered` won.
    pub reason: String,
    pub rejected: Vec<Rejection>,
    pub rejected_total: usize,
    /// How many of the rejected would refuse the mission as it is, by what they declare.
    pub refusing: usize,
    /// Registered executors not considered because they have no socket (not counted as rejected).
    pub offline: usize,
}

impl Plan {
    /// Nobody takes the mission, and only because every executor that could would refuse it as it
    /// is: no executor coming back or freeing up changes that.
    pub fn refused_by_all(&self) -> bool {
        self.ordered.is_empty() && self.offline == 0 && self.rejected_total > 0 && self.refusing == self.rejected_total
    }

    /// One sentence for a 503: what stood in the way.
    pub fn why_none(&self) -> String {
        let offline = match self.offline {
            0 => None,
            1 => Some("1 registered executor is not connected".to_owned()),
            n => Some(format!("{n} registered executors are not connected")),
        };
        if self.rejected_total == 0 {
            return offline.unwrap_or_else(|| "no executor is registered".into());
        }
        let listed: Vec<String> = self.rejected.iter().take(3).map(|r| format!("{} ({})", r.who(), r.reason)).collect();
        let more = self.rejected_total.saturating_sub(listed.len());
        let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
        let offline = offline.map(|o| format!("; {o}")).unwrap_or_default();
        format!("{}{tail}{offline}", listed.join(", "))
    }
}

/// 3 for VM-class isolation, 2 for containers, 1 for host/none or undeclared, by the strongest declared.
pub(crate) fn isolation_rank(capabilities: &[String]) -> u8 {
    capabilities
        .iter()
        .filter_map(|c| c.strip_prefix("isolation:"))
        .map(|kind| match kind {
            "microvm" | "vm" => 3,
            "container" => 2,
            _ => 1,
        })
        .max()
        .unwrap_or(1)
}

fn rank_name(rank: u8) -> &'static str {
    match rank {
        3 => "vm",
        2 => "container",
        _ => "host",
    }
}

/// The concurrency cap an executor declares with `x-max-missions:N`, if any.
pub(crate) fn max_missions(capabilities: &[String]) -> Option<usize> {
    capabilities.iter().find_map(|c| c.strip_prefix("x-max-missions:")).and_then(|n| n.parse().ok())
}

/// Why an executor does not get a mission.
enum Unfit {
    /// It declares that it would refuse the mission as it is.
    Refuses(String),
    /// It cannot take it now, or lacks what the filter asks for.
    Passed(String),
}

/// What the executor declares it would refuse in this mission, if anything. Checked before anything
/// passing, so that an executor that is also draining counts as refusing.
fn refusal(capabilities: &[String], req: &Request<'_>) -> Option<String> {
    use super::capabilities::{lease_lists, COMPLETION_CHECK, LEASE_NEEDS, LEASE_REQUIRED};
    if req.completion_check && !capabilities.iter().any(|c| c == COMPLETION_CHECK) {
        return Some(format!("does not run completion checks (no {COMPLETION_CHECK})"));
    }
    let listed = req.lease_tools.unwrap_or_default();
    if listed.is_empty() && capabilities.iter().any(|c| c == LEASE_REQUIRED) {
        return Some("never runs without a lease that lists tools".into());
    }
    let unlisted: Vec<&str> = capabilities
        .iter()
        .filter_map(|c| c.strip_prefix(LEASE_NEEDS))
        .filter(|needed| !lease_lists(listed, needed))
        .collect();
    (!unlisted.is_empty()).then(|| format!("runs only when the lease lists {}", unlisted.join(", ")))
}

fn rejection(v: &RoutingView<'_>, req: &Request<'_>) -> Option<Unfit> {
    if !v.connected {
        return Some(Unfit::Passed("not connected".into()));
    }
    if let Some(why) = refusal(v.capabilities, req) {
        return Some(Unfit::Refuses(why));
    }
    passed_over(v, req).map(Unfit::Passed)
}

fn passed_over(v: &RoutingView<'_>, req: &Request<'_>) -> Option<String> {
    if v.draining {
        return Some("draining".into());
    }
    if req.unattended && ExecutorClass::of(v.capabilities) != ExecutorClass::UnattendedMachine {
        return Some("interactive executor: an unattended mission would wait on a prompt nobody answers".into());
    }
    if req.long_running && !v.capabilities.iter().any(|c| c == super::capabilities::RESUMABLE) {
        return Some("not resumable (the mission is long_running)".into());
    }
    let missing: Vec<&str> =
        req.capabilities.iter().filter(|c| !v.capabilities.contains(c)).map(String::as_str).collect();
    if !missing.is_empty() {
        return Some(format!("lacks capability {}", missing.join(", ")));
    }
    match max_missions(v.capabilities) {
        Some(cap) if v.active_missions >= cap => Some(format!("at capacity ({cap} active missions)")),
        _ => None,
    }
}

/// `views` are in a stable order (registration order); `rotation` advances per dispatch so that ties are
/// served round-robin. Only the best `keep` candidates are ordered and returned (a dispatch tries a few,
/// never a whole fleet), which keeps a dispatch over a large fleet linear.
pub fn plan(req: &Request<'_>, views: &[RoutingView<'_>], rotation: usize, keep: usize) -> Plan {
    let Screened { mut eligible, rejected, rejected_total, refusing } = screen(req, views);
    let n = views.len().max(1);
    let offset = rotation % n;
    let preference = |(pos, v): &(usize, &RoutingView<'_>)| {
        (std::cmp::Reverse(req.trust.rank(v)), v.active_missions, (pos + n - offset) % n)
    };
    if keep < eligible.len() {
        eligible.select_nth_unstable_by_key(keep, preference);
        eligible.truncate(keep);
    }
    eligible.sort_by_key(preference);
    let reason = match (eligible.first(), req.pin) {
        (Some(_), Some(_)) => "pinned by executor_filter.executor_id".to_owned(),
        (Some((_, v)), None) => format!(
            "strongest isolation ({}: {}) among {} eligible, then fewest active missions ({}), then round-robin",
            req.trust.word(),
            rank_name(req.trust.rank(v)),
            eligible.len(),
            v.active_missions
        ),
        (None, _) => String::new(),
    };
    Plan {
        ordered: eligible.into_iter().map(|(_, v)| v.executor_id.to_owned()).collect(),
        reason,
        rejected,
        rejected_total,
        refusing,
        offline: 0,
    }
}

/// The executors a request may go to, each with its position in `views`, and the others with why not:
/// the first [`MAX_LISTED_REJECTIONS`] listed, all of them counted.
struct Screened<'v, 'a> {
    eligible: Vec<(usize, &'v RoutingView<'a>)>,
    rejected: Vec<Rejection>,
    rejected_total: usize,
    /// Of the rejected, those that would refuse the mission.
    refusing: usize,
}

/// Sorts `views` (only the pinned one, with a pin) into eligible and rejected; a pinned executor that is
/// not among them is rejected as not registered.
fn screen<'v, 'a>(req: &Request<'_>, views: &'v [RoutingView<'a>]) -> Screened<'v, 'a> {
    let mut screened = Screened { eligible: Vec::new(), rejected: Vec::new(), rejected_total: 0, refusing: 0 };
    for (pos, v) in views.iter().enumerate() {
        if req.pin.is_some_and(|pin| pin != v.executor_id) {
            continue;
        }
        match rejection(v, req) {
            Some(unfit) => {
                screened.rejected_total += 1;
                let reason = match unfit {
                    Unfit::Refuses(why) => {
                        screened.refusing += 1;
                        why
                    }
                    Unfit::Passed(why) => why,
                };
                if screened.rejected.len() < MAX_LISTED_REJECTIONS {
                    screened.rejected.push(Rejection {
                        executor_id: v.executor_id.to_owned(),
                        name: Some(v.name.to_owned()),
                        reason,
                    });
                }
            }
            None => screened.eligible.push((pos, v)),
        }
    }
    if let Some(pin) = req.pin {
        if !views.iter().any(|v| v.executor_id == pin) {
            screened.rejected_total += 1;
            screened.rejected.push(Rejection {
                executor_id: pin.to_owned(),
                name: None,
                reason: "not registered".into(),
            });
        }
    }
    screened
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fleet(Vec<(String, Vec<String>, bool, usize)>);

    impl Fleet {
        fn views(&self) -> Vec<RoutingView<'_>> {
            self.0
                .iter()
                .map(|(id, caps, connected, active)| RoutingView {
                    executor_id: id,
                    name: id,
                    capabilities: caps,
                    connected: *connected,
                    draining: id.starts_with("draining"),
                    active_missions: *active,
                })
                .collect()
        }
    }

    fn ex(id: &str, caps: &[&str], connected: bool, active: usize) -> (String, Vec<String>, bool, usize) {
        (id.into(), caps.iter().map(|c| c.to_string()).collect(), connected, active)
    }

    fn req<'a>(pin: Option<&'a str>, caps: &'a [String], long_running: bool) -> Request<'a> {
        Request {
            pin,
            capabilities: caps,
            long_running,
            unattended: false,
            lease_tools: None,
            completion_check: false,
            trust: Trust::Claimed,
        }
    }

    /// Claimed, an executor's word ranks it; vouched, only the operator's list does (by id or name),
    /// and an executor not on it is host, whatever it claims.
    #[test]
    fn isolation_is_ranked_by_whose_word_counts() {
        let fleet = Fleet(vec![ex("claims-vm", &["isolation:vm"], true, 0), ex("quiet", &["isolation:host"], true, 0)]);
        let views = fleet.views();
        let mut vouched = std::collections::BTreeMap::new();
        assert_eq!(Trust::Claimed.rank(&views[0]), 3);
        assert_eq!(Trust::Vouched(&vouched).rank(&views[0]), 1, "claimed, not vouched for");
        vouched.insert("quiet".to_owned(), "container".to_owned());
        assert_eq!(Trust::Vouched(&vouched).rank(&views[1]), 2);
        let caps: Vec<String> = Vec::new();
        let request = Request { trust: Trust::Vouched(&vouched), ..req(None, &caps, false) };
        let plan = plan(&request, &views, 0, 8);
        assert_eq!(plan.ordered, ["quiet", "claims-vm"]);
        assert!(plan.reason.contains("as the operator vouches for it: container"), "{}", plan.reason);
    }

    #[test]
    fn unattended_missions_never_reach_interactive_executors() {
        let fleet = Fleet(vec![
            ex("laptop", &["isolation:host"], true, 0),
            ex("declared-interactive", &["x-class:interactive_local"], true, 0),
            ex("ci", &["x-class:unattended_machine"], true, 0),
        ]);
        let unattended = Request { unattended: true, ..req(None, &[], false) };
        let p = plan(&unattended, &fleet.views(), 0, usize::MAX);
        assert_eq!(p.ordered, ["ci"]);
        assert_eq!(p.rejected.len(), 2);
        assert!(p.rejected.iter().all(|r| r.reason.starts_with("interactive executor")));
        let pinned = Request { pin: Some("laptop"), ..unattended };
        assert!(plan(&pinned, &fleet.views(), 0, usize::MAX).ordered.is_empty());
        assert_eq!(plan(&req(None, &[], false), &fleet.views(), 0, usize::MAX).ordered.len(), 3);
    }

    #[test]
    fn prefers_isolation_then_load_then_rotates() {
        let fleet = Fleet(vec![
            ex("host", &["isolation:host"], true, 0),
            ex("vm-busy", &["isolation:vm"], true, 2),
            ex("ctr", &["isolation:container"], true, 0),
            ex("vm-idle", &["isolation:vm", "isolation:host"], true, 1),
        ]);
        let p = plan(&req(None, &[], false), &fleet.views(), 0, usize::MAX);
        assert_eq!(p.ordered, ["vm-idle", "vm-busy", "ctr", "host"]);
        assert!(p.rejected.is_empty());

        let twins = Fleet(vec![ex("a", &[], true, 0), ex("b", &[], true, 0), ex("c", &[], true, 0)]);
        let firsts: Vec<String> =
            (0..3).map(|r| plan(&req(None, &[], false), &twins.views(), r, usize::MAX).ordered[0].clone()).collect();
        assert_eq!(firsts, ["a", "b", "c"]);
    }

    #[test]
    fn filters_and_explains_every_rejection() {
        let fleet = Fleet(vec![
            ex("off", &["runtime:codex", "resumable"], false, 0),
            ex("nocap", &["resumable"], true, 0),
            ex("notres", &["runtime:codex"], true, 0),
            ex("ok", &["runtime:codex", "resumable"], true, 0),
        ]);
        let caps = vec!["runtime:codex".to_string()];
        let p = plan(&req(None, &caps, true), &fleet.views(), 0, usize::MAX);
        assert_eq!(p.ordered, ["ok"]);
        let reasons: Vec<(&str, &str)> =
            p.rejected.iter().map(|r| (r.executor_id.as_str(), r.reason.as_str())).collect();
        assert_eq!(
            reasons,
            [
                ("off", "not connected"),
                ("nocap", "lacks capability runtime:codex"),
                ("notres", "not resumable (the mission is long_running)")
            ]
        );
        assert_eq!(p.rejected_total, 3);
    }

    #[test]
    fn a_pin_must_still_satisfy_the_filter() {
        let fleet = Fleet(vec![ex("a", &["runtime:codex"], true, 0), ex("b", &["runtime:aider"], true, 0)]);
        let caps = vec!["runtime:codex".to_string()];
        assert_eq!(plan(&req(Some("a"), &caps, false), &fleet.views(), 0, usize::MAX).ordered, ["a"]);
        let p = plan(&req(Some("b"), &caps, false), &fleet.views(), 0, usize::MAX);
        assert!(p.ordered.is_empty());
        assert_eq!(
            p.rejected,
            [Rejection {
                executor_id: "b".into(),
                name: Some("b".into()),
                reason: "lacks capability runtime:codex".into()
            }]
        );
        let p = plan(&req(Some("zzz"), &[], false), &fleet.views(), 0, usize::MAX);
        assert_eq!(p.why_none(), "zzz (not registered)");
    }

    #[test]
    fn rejection_list_is_capped_but_counted() {
        let fleet = Fleet((0..100).map(|i| ex(&format!("e{i}"), &[], false, 0)).collect());
        let p = plan(&req(None, &[], false), &fleet.views(), 0, usize::MAX);
        assert_eq!(p.rejected.len(), MAX_LISTED_REJECTIONS);
        assert_eq!(p.rejected_total, 100);
        assert!(p.why_none().ends_with("and 97 more"), "{}", p.why_none());
        assert_eq!(plan(&req(None, &[], false), &[], 0, usize::MAX).why_none(), "no executor is registered");
    }

    #[test]
    fn keeping_the_best_few_orders_them_as_a_full_sort_would() {
        let fleet = Fleet(
            (0..200)
                .map(|i| ex(&format!("e{i:03}"), if i % 7 == 0 { &["isolation:vm"] } else { &[] }, true, i % 5))
                .collect(),
        );
        for rotation in [0, 3, 199] {
            let all = plan(&req(None, &[], false), &fleet.views(), rotation, usize::MAX);
            let best = plan(&req(None, &[], false), &fleet.views(), rotation, 5);
            assert_eq!(best.ordered, all.ordered[..5]);
        }
    }

    #[test]
    fn capacity_and_draining() {
        let fleet = Fleet(vec![
            ex("full", &["x-max-missions:2"], true, 2),
            ex("draining-one", &[], true, 0),
            ex("room", &["x-max-missions:2"], true, 1),
        ]);
        let p = plan(&req(None, &[], false), &fleet.views(), 0, usize::MAX);
        assert_eq!(p.ordered, ["room"]);
        let reasons: Vec<&str> = p.rejected.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(reasons, ["at capacity (2 active missions)", "draining"]);
        assert_eq!(max_missions(&["x-max-missions:7".to_string()]), Some(7));
        assert_eq!(max_missions(&["x-max-missions:lots".to_string()]), None);
    }

    /// An executor's declared refusals keep a mission away from it, with why; only when every executor
    /// would refuse (none offline, none merely busy) is nobody taking it the mission's fault.
    #[test]
    fn declared_refusals_are_routed_around_and_counted_apart() {
        let fleet = Fleet(vec![
            ex("shell", &["x-lease:required", "x-lease-needs:bash"], true, 0),
            ex("claude", &["x-lease:required", "x-completion-check:shell"], true, 0),
            ex("open", &[], true, 0),
        ]);
        let tools = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let route = |lease: Option<&[String]>, check: bool| {
            let request = Request { lease_tools: lease, completion_check: check, ..req(None, &[], false) };
            plan(&request, &fleet.views(), 0, usize::MAX)
        };
        let reasons =
            |p: &Plan| p.rejected.iter().map(|r| format!("{}: {}", r.executor_id, r.reason)).collect::<Vec<_>>();

        let p = route(None, false);
        assert_eq!(p.ordered, ["open"]);
        assert_eq!(
            reasons(&p),
            [
                "shell: never runs without a lease that lists tools",
                "claude: never runs without a lease that lists tools"
            ]
        );
        assert_eq!((p.refusing, p.refused_by_all()), (2, false));

        let read = tools(&["Read"]);
        let p = route(Some(&read), false);
        assert_eq!(p.ordered, ["claude", "open"]);
        assert_eq!(reasons(&p), ["shell: runs only when the lease lists bash"]);
        let bash = tools(&["Read", "BASH"]);
        assert_eq!(route(Some(&bash), false).ordered, ["shell", "claude", "open"], "case is ignored");
        let none: Vec<String> = Vec::new();
        assert_eq!(route(Some(&none), false).ordered, ["open"], "an empty list lists no tools");

        let p = route(Some(&bash), true);
        assert_eq!(p.ordered, ["claude"]);
        assert_eq!(
            reasons(&p),
            [
                "shell: does not run completion checks (no x-completion-check:shell)",
                "open: does not run completion checks (no x-completion-check:shell)"
            ]
        );

        assert_eq!(route(Some(&read), true).ordered, ["claude"]);
        let p = route(None, true);
        assert!(p.ordered.is_empty());
        assert!(p.refused_by_all(), "{p:?}");
        let busy =
            Fleet(vec![ex("draining-claude", &["x-completion-check:shell"], true, 0), ex("shell", &[], true, 0)]);
        let request = Request { completion_check: true, ..req(None, &[], false) };
        let p = plan(&request, &busy.views(), 0, usize::MAX);
        assert_eq!((p.rejected_total, p.refusing, p.refused_by_all()), (2, 1, false), "one is only draining");
        assert!(!Plan { offline: 1, ..route(None, true) }.refused_by_all(), "one offline might take it");
    }

    /// Refusals and 503s name executors as people know them, with the start of the id (names need not
    /// be unique); an id serve does not know stays whole.
    #[test]
    fn a_rejection_says_who_for_people() {
        let r = Rejection {
            executor_id: "64b2cb45-2973-446d-b272-a7c333bc9305".into(),
            name: Some("plain".into()),
            reason: "draining".into(),
        };
        assert_eq!(r.who(), "plain 64b2cb45");
        assert_eq!(Rejection { name: None, ..r.clone() }.who(), "64b2cb45-2973-446d-b272-a7c333bc9305");
        let p = Plan {
            ordered: vec![],
            reason: String::new(),
            rejected: vec![r],
            rejected_total: 1,
            refusing: 0,
            offline: 0,
        };
        assert_eq!(p.why_none(), "plain 64b2cb45 (draining)");
    }

    #[test]
    fn isolation_ranks() {
        let caps = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(isolation_rank(&caps(&["isolation:microvm"])), 3);
        assert_eq!(isolation_rank(&caps(&["isolation:container", "isolation:none"])), 2);
        assert_eq!(isolation_rank(&caps(&["runtime:codex"])), 1);
    }
}
