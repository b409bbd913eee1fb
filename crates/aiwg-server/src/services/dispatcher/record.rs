//! The routing record: why a mission went where it went, kept on the mission and added to at each
//! fail-over.

use serde::Serialize;
use serde_json::{json, Value};

use crate::services::registry::Registry;
use aiwg_domain::routing::{self, Rejection};

/// Why a mission went where it went, as kept on the mission.
#[derive(Clone, Serialize)]
pub(crate) struct RoutingRecord {
    #[serde(skip_serializing_if = "Option::is_none")]
    chosen: Option<String>,
    /// The chosen executor's name, for people; filled in when the record is kept ([`RoutingRecord::kept`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    chosen_name: Option<String>,
    reason: String,
    rejected: Vec<Rejection>,
    #[serde(skip_serializing_if = "is_zero")]
    rejected_omitted: usize,
}

/// The candidates to try (at most `max_attempts`) and the record of the choice.
pub(super) fn handout_plan(plan: routing::Plan, max_attempts: usize) -> (Vec<String>, RoutingRecord) {
    let attempts: Vec<String> = plan.ordered.into_iter().take(max_attempts).collect();
    let record = RoutingRecord {
        chosen: attempts.first().cloned(),
        chosen_name: None,
        reason: plan.reason,
        rejected_omitted: plan.rejected_total - plan.rejected.len(),
        rejected: plan.rejected,
    };
    (attempts, record)
}

impl RoutingRecord {
    /// A candidate did not take the mission (`why`); `next` is tried now, or nobody is left.
    pub(super) fn passed_over(&mut self, executor_id: &str, why: &impl std::fmt::Display, next: Option<&str>) {
        self.rejected.push(Rejection { executor_id: executor_id.to_owned(), name: None, reason: why.to_string() });
        self.chosen = next.map(str::to_owned);
    }

    /// The record as the mission keeps it, with the executors' names beside their ids.
    pub(super) fn kept(&self, registry: &Registry) -> Value {
        let mut record = self.clone();
        record.chosen_name = record.chosen.as_deref().and_then(|id| registry.name(id));
        for r in record.rejected.iter_mut().filter(|r| r.name.is_none()) {
            r.name = registry.name(&r.executor_id);
        }
        json!(record)
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(ordered: &[&str], rejected: usize) -> routing::Plan {
        routing::Plan {
            ordered: ordered.iter().map(|s| s.to_string()).collect(),
            rejected: (0..rejected)
                .map(|i| Rejection { executor_id: format!("r{i}"), name: None, reason: "busy".into() })
                .collect(),
            rejected_total: rejected + 5,
            refusing: 0,
            reason: "capabilities".into(),
            offline: 0,
        }
    }

    /// At most `max_attempts` candidates are tried, the first is chosen, and the rejections the plan
    /// left out are counted.
    #[test]
    fn a_handout_plan_tries_the_first_candidates_in_order() {
        let (attempts, record) = handout_plan(plan(&["a", "b", "c", "d"], 2), 3);
        assert_eq!(attempts, ["a", "b", "c"]);
        assert_eq!(record.chosen.as_deref(), Some("a"));
        assert_eq!((record.rejected.len(), record.rejected_omitted), (2, 5));
    }

    /// Each failover names the candidate passed over and why, and moves the choice to the next one;
    /// when nobody is left, nobody is chosen.
    #[test]
    fn failover_records_every_candidate_passed_over() {
        let (_, mut record) = handout_plan(plan(&["a", "b"], 0), 3);
        record.passed_over("a", &"refused: 500", Some("b"));
        assert_eq!(record.chosen.as_deref(), Some("b"));
        record.passed_over("b", &"timed out", None);
        let value = json!(record);
        assert_eq!(
            value["rejected"],
            json!([
                {"executor_id": "a", "reason": "refused: 500"},
                {"executor_id": "b", "reason": "timed out"},
            ])
        );
        assert!(value.get("chosen").is_none(), "{value}");
    }
}
