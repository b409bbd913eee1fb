//! Budgets as the store keeps them (`aiwg_domain::budget`): a mission's row in `mission_budgets`, and
//! the changes a dispatch and a budget's crossing make.

use super::{Change, Mission};
use aiwg_domain::budget::{Budget, Limit, Marks, Spend, Watch};

/// A mission's budget as kept: its limits, the limits that warned, the one that exhausted it.
#[derive(Clone, Debug, PartialEq)]
pub struct MissionBudget {
    pub mission_id: String,
    pub budget: Budget,
    pub since: chrono::DateTime<chrono::Utc>,
    pub warned: Marks,
    pub exhausted: Option<Limit>,
}

impl MissionBudget {
    pub fn of(mission_id: &str, w: &Watch) -> MissionBudget {
        let (budget, since, warned, exhausted) = (w.budget, w.since, w.warned, w.exhausted);
        MissionBudget { mission_id: mission_id.to_owned(), budget, since, warned, exhausted }
    }

    /// The watch it stands for, `earlier` attempts having spent that.
    pub fn watch(&self, earlier: Spend) -> Watch {
        let (budget, since, warned, exhausted) = (self.budget, self.since, self.warned, self.exhausted);
        Watch { budget, since, earlier, warned, exhausted }
    }
}

impl Change {
    /// What a dispatch records: its mission, and its budget when it names one (`aiwg_domain::budget`),
    /// its duration counted from the mission's creation.
    pub fn dispatched(row: Mission) -> Vec<Change> {
        let budget = Budget::of(row.payload.get("budget"));
        let kept = budget.map(|b| Change::budget(&row.mission_id, &Watch::new(b, row.created_at)));
        std::iter::once(Change::InsertMission(Box::new(row))).chain(kept).collect()
    }

    /// The change that keeps a mission's budget as `watch` leaves it.
    pub fn budget(mission_id: &str, watch: &Watch) -> Change {
        Change::PutBudget(Box::new(MissionBudget::of(mission_id, watch)))
    }
}
