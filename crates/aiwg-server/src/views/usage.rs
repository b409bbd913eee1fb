//! What missions spend, as the API shows it: a mission's usage over its attempts (in its read and the
//! listing), and the kept sums (`GET /api/v1/usage`).

use serde::Serialize;

use crate::store::{MissionUsage, UsageGroup};
use aiwg_domain::usage::Sum;

/// Token counts, with their cost where something of them is priced.
#[derive(Debug, Serialize)]
pub struct Spent {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub reasoning_output_tokens: u64,
    /// US dollars; absent when nothing of it is priced (unpriced is never zero).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// `reported`, `estimated`, `unpriced` or `mixed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_source: Option<&'static str>,
}

impl From<&Sum> for Spent {
    fn from(s: &Sum) -> Spent {
        Spent {
            input_tokens: s.tokens.input,
            output_tokens: s.tokens.output,
            cache_read_input_tokens: s.tokens.cache_read,
            cache_creation_input_tokens: s.tokens.cache_creation,
            reasoning_output_tokens: s.tokens.reasoning,
            cost_usd: s.cost_usd(),
            cost_source: s.source().map(|c| c.as_str()),
        }
    }
}

/// A mission's usage, summed over its attempts, with each model's. Its cost is beside it in the read
/// (`cost_usd`, `cost_source`).
#[derive(Debug, Serialize)]
pub struct MissionSpend {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub reasoning_output_tokens: u64,
    pub models: Vec<ModelSpend>,
}

#[derive(Debug, Serialize)]
pub struct ModelSpend {
    pub model: String,
    #[serde(flatten)]
    pub spent: Spent,
}

/// A mission's usage in its read: the usage, and the cost beside it.
pub(crate) struct MissionCost {
    pub(crate) usage: MissionSpend,
    pub(crate) cost_usd: Option<f64>,
    pub(crate) cost_source: Option<&'static str>,
}

impl MissionCost {
    /// From one mission's rows (one a model, in model order); `None` when it reported none.
    pub(crate) fn of<'a>(rows: impl IntoIterator<Item = &'a MissionUsage>) -> Option<MissionCost> {
        let mut total = Sum::default();
        let mut models = Vec::new();
        for row in rows {
            total.add(&row.sum);
            models.push(ModelSpend { model: row.model.clone(), spent: Spent::from(&row.sum) });
        }
        if models.is_empty() {
            return None;
        }
        let t = total.tokens;
        let usage = MissionSpend {
            input_tokens: t.input,
            output_tokens: t.output,
            cache_read_input_tokens: t.cache_read,
            cache_creation_input_tokens: t.cache_creation,
            reasoning_output_tokens: t.reasoning,
            models,
        };
        Some(MissionCost { usage, cost_usd: total.cost_usd(), cost_source: total.source().map(|c| c.as_str()) })
    }
}

/// `GET /api/v1/usage`: the kept sums grouped by one key, from a day on.
#[derive(Debug, Serialize)]
pub struct UsageSums {
    /// `day`, `operator`, `executor` or `model`.
    pub by: &'static str,
    /// The first day counted (UTC), when the read named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Every group together.
    pub total: Spent,
    pub groups: Vec<UsageSum>,
}

/// One group of the sums.
#[derive(Debug, Serialize)]
pub struct UsageSum {
    /// The day (`YYYY-MM-DD`), the operator's name (empty: missions dispatched before serve kept it),
    /// the executor's id, or the model.
    pub key: String,
    /// The executor's name, when grouped by executor and serve knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    pub spent: Spent,
}

impl UsageSums {
    /// `name` names an executor's group (by its id).
    pub(crate) fn new(
        by: &'static str,
        since: Option<String>,
        groups: Vec<UsageGroup>,
        name: impl Fn(&str) -> Option<String>,
    ) -> UsageSums {
        let mut total = Sum::default();
        for g in &groups {
            total.add(&g.sum);
        }
        let groups = groups
            .into_iter()
            .map(|g| UsageSum { name: name(&g.key), spent: Spent::from(&g.sum), key: g.key })
            .collect();
        UsageSums { by, since, total: Spent::from(&total), groups }
    }
}
