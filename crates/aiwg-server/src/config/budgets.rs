//! `[[budgets]]`: standing budgets of the configuration file (`aiwg_domain::standing`).

use super::Config;
use aiwg_domain::standing::Standing;

/// What time it is, as a function: standing budgets' periods are judged by it.
pub type Clock = std::sync::Arc<dyn Fn() -> chrono::DateTime<chrono::Utc> + Send + Sync>;

/// What time it is for standing budgets' periods: the wall clock, unless a test sets its own (never
/// read from a file).
#[derive(Clone, Default)]
pub struct BudgetClock(pub Option<Clock>);

impl BudgetClock {
    /// The clock standing budgets are judged by.
    pub fn clock(&self) -> Clock {
        self.0.clone().unwrap_or_else(|| std::sync::Arc::new(aiwg_contract::clock::now))
    }
}

impl std::fmt::Debug for BudgetClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "BudgetClock(set)" } else { "BudgetClock(wall)" })
    }
}

impl Config {
    /// The configuration's standing budgets, `config-1` on in file order; an invalid one is refused
    /// at start, naming it.
    pub fn standing_budgets(&self) -> Result<Vec<Standing>, String> {
        let at = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH;
        let judged = self.budgets.iter().enumerate().map(|(i, b)| {
            b.judged(&format!("config-{}", i + 1), at, None)
                .map_err(|why| format!("[[budgets]] number {}: {why}", i + 1))
        });
        judged.collect()
    }
}
