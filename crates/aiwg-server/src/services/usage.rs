//! What missions spent, for operators: the kept sums grouped by day, operator, executor or model. The
//! counting is ingestion's (a report is judged under the ledger's lock, `ingest::judge`, and its sums
//! written in the unit of its event); this reads them, and seeds the metrics with them at start.

use std::sync::Arc;

use super::registry::Registry;
use super::Core;
use crate::error::Result;
use crate::store::{Store, UsageQuery};
use crate::views::usage::UsageSums;
use aiwg_domain::usage::{By, Scope};

pub struct Usage {
    store: Store,
    registry: Arc<Registry>,
}

impl Usage {
    /// The service, once the metrics count what the store holds (`aiwg_tokens_total`,
    /// `aiwg_cost_usd_total` go on across restarts).
    pub(crate) async fn load(core: &Core) -> Result<Usage> {
        let every_model = UsageQuery { by: By::Model, since: None, scope: Scope::All };
        for group in core.store.usage_sums(&every_model).await? {
            core.metrics.usage.seed(&group.key, &group.sum.tokens, group.sum.cost_micros);
        }
        Ok(Usage { store: core.store.clone(), registry: core.registry.clone() })
    }

    /// `GET /api/v1/usage`: the sums by `by`, from the day `since` on (every day when `None`).
    pub async fn sums(&self, by: By, since: Option<chrono::NaiveDate>) -> Result<UsageSums> {
        let since = since.map(|d| d.format("%Y-%m-%d").to_string());
        let groups = self.store.usage_sums(&UsageQuery { by, since: since.clone(), scope: Scope::All }).await?;
        let name = |key: &str| self.registry.name(key).filter(|_| by == By::Executor);
        Ok(UsageSums::new(by.as_str(), since, groups, name))
    }
}
