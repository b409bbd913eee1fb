//! The reads of budgets (`aiwg_domain::budget`, `aiwg_domain::standing`): missions' budgets as kept,
//! and the standing budgets added through the API.

use sqlx::{Database, Encode, Executor, IntoArguments, Pool, Type};

use super::queries::NOT_LIVE;
use crate::store::rows::{located, Cols};
use crate::store::{MissionBudget, Result, StoreError};
use aiwg_contract::clock;
use aiwg_domain::budget::{Budget, Limit, Marks, OnExhausted};
use aiwg_domain::standing::Standing;
use aiwg_domain::usage::Scope;

fn budget_from_row<R: Cols>(r: &R) -> Result<MissionBudget> {
    let text = r.text("budget")?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("mission_budgets.budget: {e}")))?;
    let exhausted = r.text_opt("exhausted")?;
    let since = r.text("since")?;
    Ok(MissionBudget {
        mission_id: r.text("mission_id")?,
        budget: Budget::of(Some(&value)).unwrap_or_default(),
        since: clock::parse(&since)
            .ok_or_else(|| StoreError::Corrupt(format!("mission_budgets.since is {since:?}")))?,
        warned: Marks::parse(&r.text("warned")?),
        exhausted: exhausted.as_deref().and_then(Limit::parse),
    })
}

fn standing_from_row<R: Cols>(r: &R) -> Result<Standing> {
    let corrupt = |col: &str, v: &str| StoreError::Corrupt(format!("budgets.{col} is {v:?}"));
    let scope = r.text("scope")?;
    let on = r.text("on_exhausted")?;
    let time = |col: &str| -> Result<Option<chrono::DateTime<chrono::Utc>>> {
        r.text_opt(col)?.map(|t| clock::parse(&t).ok_or_else(|| corrupt(col, &t))).transpose()
    };
    Ok(Standing {
        id: r.text("id")?,
        scope: Scope::parse(&scope).ok_or_else(|| corrupt("scope", &scope))?,
        max_tokens: r.int_opt("max_tokens")?.map(|n| n.max(0) as u64),
        max_cost_micros: r.int_opt("max_cost_micros")?,
        period_days: u32::try_from(r.int("period_days")?).unwrap_or(1),
        on_exhausted: OnExhausted::parse(&on).ok_or_else(|| corrupt("on_exhausted", &on))?,
        created_at: time("created_at")?.unwrap_or_default(),
        created_by: r.text_opt("created_by")?,
        removed_at: time("removed_at")?,
    })
}

/// The reads of budgets, over the read pool.
pub(in crate::store) struct BudgetReads<'p, DB: Database>(pub(in crate::store) &'p Pool<DB>);

impl<DB> BudgetReads<'_, DB>
where
    DB: Database,
    DB::Row: Cols,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
{
    /// The budgets of these missions; of every live mission with `None`.
    pub(in crate::store) async fn of_missions(self, mission_ids: Option<&[String]>) -> Result<Vec<MissionBudget>> {
        let which = match mission_ids {
            Some([]) => return Ok(Vec::new()),
            Some(ids) => {
                let places: Vec<String> = (1..=ids.len()).map(|n| format!("${n}")).collect();
                format!("b.mission_id IN ({})", places.join(", "))
            }
            None => format!("m.state NOT IN ({})", *NOT_LIVE),
        };
        let sql = format!(
            "SELECT b.* FROM mission_budgets b JOIN missions m ON m.mission_id = b.mission_id WHERE {which} \
             ORDER BY b.mission_id"
        );
        let mut query = sqlx::query(&sql);
        for id in mission_ids.unwrap_or_default() {
            query = query.bind(id.as_str());
        }
        let rows = query.fetch_all(self.0).await?;
        rows.iter().map(located("mission_budgets", "mission_id", budget_from_row)).collect()
    }

    /// The standing budgets added through the API, removed ones included, oldest first.
    pub(in crate::store) async fn standing(self) -> Result<Vec<Standing>> {
        let rows = sqlx::query("SELECT * FROM budgets ORDER BY created_at, id").fetch_all(self.0).await?;
        rows.iter().map(located("budgets", "id", standing_from_row)).collect()
    }
}
