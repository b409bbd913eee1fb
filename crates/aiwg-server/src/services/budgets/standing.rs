//! Standing budgets (`aiwg_domain::standing`): the configuration's and those added through the API,
//! their spend (the kept sums, `usage_sums`, from the period's first day on: never a scan of missions),
//! the dispatches they rule out, and the live missions of a scope that ran out.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::Clock;
use crate::error::{Error, Result};
use crate::services::registry::Registry;
use crate::store::{Change, Store, UsageQuery};
use aiwg_contract::clock;
use aiwg_domain::budget::Spend;
use aiwg_domain::standing::{Standing, Written};
use aiwg_domain::usage::{By, Scope, MICROS};

/// The body of `POST /api/v1/budgets`.
pub(crate) type NewStanding = Written;

/// A standing budget as operators read it: as written, where it comes from, and its period's spend.
#[derive(Debug, Serialize)]
pub struct BudgetView {
    pub id: String,
    #[serde(flatten)]
    pub written: Written,
    /// `config` (the file's `[[budgets]]`: not removed through the API) or `api`.
    pub source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// The current period's first day (UTC) and when the next begins.
    pub period_start: String,
    pub resets_at: String,
    pub spent_tokens: u64,
    pub spent_cost_usd: f64,
    /// The limit the period's spend reached (`tokens` or `cost`), if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exhausted: Option<&'static str>,
}

/// The standing budgets: read by dispatch (which they may refuse) and by the budgets' look (which
/// acts on those that ran out).
pub struct Standings {
    store: Store,
    registry: Arc<Registry>,
    /// The configuration's `[[budgets]]` (`config-N`), listed and never removed through the API.
    configured: Vec<Standing>,
    /// Those added through the API and not removed, as stored (read once at start: a dispatch reads
    /// nothing of the store for them, and with none, nothing at all).
    added: Mutex<Vec<Standing>>,
    clock: Clock,
}

impl Standings {
    pub(crate) async fn load(
        store: Store,
        registry: Arc<Registry>,
        configured: Vec<Standing>,
        clock: Clock,
    ) -> Result<Standings> {
        let added = store.standing_budgets().await?.into_iter().filter(|s| s.removed_at.is_none()).collect();
        Ok(Standings { store, registry, configured, added: Mutex::new(added), clock })
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// The standing budgets in force: the configuration's, then those added through the API.
    fn in_force(&self) -> Vec<Standing> {
        let added = self.added.lock().expect("standing lock").clone();
        self.configured.iter().cloned().chain(added).collect()
    }

    /// What `s`'s scope spent in the period `now` falls in, from the kept sums.
    async fn spend(&self, s: &Standing, now: DateTime<Utc>) -> Result<Spend> {
        let scope = match &s.scope {
            // The configuration may name an executor by its name; the sums are kept by its id.
            Scope::Executor(named) => Scope::Executor(self.registry.resolve(named).unwrap_or_else(|_| named.clone())),
            other => other.clone(),
        };
        let since = Some(s.window(now).first_day.to_string());
        let groups = self.store.usage_sums(&UsageQuery { by: By::Day, since, scope }).await?;
        let spend = |g: &crate::store::UsageGroup| Spend { tokens: g.sum.tokens.limited(), micros: g.sum.cost_micros };
        Ok(groups.iter().map(spend).fold(Spend::default(), Spend::plus))
    }

    async fn view(&self, s: Standing, now: DateTime<Utc>) -> Result<BudgetView> {
        let spent = self.spend(&s, now).await?;
        let window = s.window(now);
        Ok(BudgetView {
            written: s.written(),
            source: if s.configured() { "config" } else { "api" },
            created_by: s.created_by.clone(),
            period_start: window.first_day.to_string(),
            resets_at: clock::format(window.resets_at),
            spent_tokens: spent.tokens,
            spent_cost_usd: spent.micros as f64 / MICROS as f64,
            exhausted: s.exhausted(spent),
            id: s.id,
        })
    }

    /// `GET /api/v1/budgets`: every standing budget in force, with its period's spend.
    pub async fn list(&self) -> Result<Vec<BudgetView>> {
        let now = self.now();
        let mut views = Vec::new();
        for s in self.in_force() {
            views.push(self.view(s, now).await?);
        }
        Ok(views)
    }

    /// `POST /api/v1/budgets`: adds a standing budget, kept before it is answered.
    pub async fn add(&self, written: &NewStanding, by: &str) -> Result<BudgetView> {
        let id = format!("bud_{}", uuid::Uuid::new_v4().simple());
        let s = written.judged(&id, clock::now(), Some(by.to_owned())).map_err(Error::InvalidBudget)?;
        self.store.commit(vec![Change::PutStanding(Box::new(s.clone()))]).await?;
        self.added.lock().expect("standing lock").push(s.clone());
        self.view(s, self.now()).await
    }

    /// `DELETE /api/v1/budgets/{id}`: removes a standing budget added through the API.
    pub async fn remove(&self, id: &str) -> Result<()> {
        if self.configured.iter().any(|s| s.id == id) {
            return Err(Error::Conflict(format!(
                "budget {id} is the configuration file's ([[budgets]]): remove it there and restart serve"
            )));
        }
        let found = self.added.lock().expect("standing lock").iter().find(|s| s.id == id).cloned();
        let Some(s) = found else { return Err(Error::NotFound(format!("budget {id} not found"))) };
        let removed = Standing { removed_at: Some(clock::now()), ..s };
        self.store.commit(vec![Change::PutStanding(Box::new(removed))]).await?;
        self.added.lock().expect("standing lock").retain(|s| s.id != id);
        Ok(())
    }

    /// The exhausted standing budgets that bind a mission `operator` dispatches on each of
    /// `candidates` (ids): the candidates they rule out, each with why. Nothing is read without
    /// standing budgets that bind one of them.
    pub(crate) async fn ruled_out(&self, operator: &str, candidates: &[String]) -> Result<Vec<(String, String)>> {
        let now = self.now();
        let mut out = Vec::new();
        for s in self.in_force() {
            let binding: Vec<&String> = candidates
                .iter()
                .filter(|id| s.binds(Some(operator), (id, &self.registry.name(id).unwrap_or_default())))
                .collect();
            if binding.is_empty() {
                continue;
            }
            let Some(limit) = s.exhausted(self.spend(&s, now).await?) else { continue };
            let why = format!(
                "standing budget {} ({}) reached its {limit} limit for the period; it resets at {}",
                s.id,
                s.scope.as_text(),
                clock::format(s.window(now).resets_at)
            );
            out.extend(binding.into_iter().map(|id| (id.clone(), why.clone())));
        }
        Ok(out)
    }

    /// The standing budgets exhausted now, with the limit each reached (what the look acts on).
    pub(crate) async fn exhausted_now(&self) -> Result<Vec<(Standing, &'static str)>> {
        let now = self.now();
        let mut out = Vec::new();
        for s in self.in_force() {
            if let Some(limit) = s.exhausted(self.spend(&s, now).await?) {
                out.push((s, limit));
            }
        }
        Ok(out)
    }
}
