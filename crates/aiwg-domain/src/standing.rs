//! Standing budgets (issue 54, part 2): what a scope (everyone, an operator's missions, an executor's)
//! may spend over a period, aligned to UTC days. Pure: serve's `services::budgets` reads a scope's spend
//! from the kept sums (`crate::usage`) from the period's first day on, and asks this module whether it
//! is exhausted, when that ends, and whom it binds.

use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use super::budget::{OnExhausted, Spend};
use super::usage::{micros, Scope, MICROS};

/// The periods a standing budget may have, in days.
pub const PERIODS: [u32; 3] = [1, 7, 30];

/// A standing budget: a scope's limits over a period.
#[derive(Clone, Debug, PartialEq)]
pub struct Standing {
    /// `bud_...` for the API's, `config-N` for the configuration's `[[budgets]]`.
    pub id: String,
    pub scope: Scope,
    pub max_tokens: Option<u64>,
    pub max_cost_micros: Option<i64>,
    /// One of [`PERIODS`].
    pub period_days: u32,
    /// What happens to the scope's live missions once it is exhausted.
    pub on_exhausted: OnExhausted,
    pub created_at: DateTime<Utc>,
    pub created_by: Option<String>,
    pub removed_at: Option<DateTime<Utc>>,
}

/// A standing budget as written: the configuration's `[[budgets]]`, or the body of
/// `POST /api/v1/budgets`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Written {
    pub scope: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    pub period: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exhausted: Option<String>,
}

/// The most a standing budget may allow: what a mission's may (`$defs/budget`).
const MAX_TOKENS: u64 = 1_000_000_000_000;
const MAX_COST_USD: f64 = 1_000_000.0;

impl Written {
    /// The standing budget it describes, named `id`: refused, saying what is wrong, for an unknown
    /// scope or period or policy, no limit, or a limit out of range.
    pub fn judged(&self, id: &str, created_at: DateTime<Utc>, created_by: Option<String>) -> Result<Standing, String> {
        let scope = Scope::parse(&self.scope)
            .ok_or_else(|| format!("scope {:?} is none of all, operator:NAME, executor:NAME", self.scope))?;
        let period_days =
            period(&self.period).ok_or_else(|| format!("period {:?} is none of 1d, 7d, 30d", self.period))?;
        let on_exhausted = match self.on_exhausted.as_deref() {
            None => OnExhausted::Pause,
            Some(o) => OnExhausted::parse(o).ok_or_else(|| format!("on_exhausted {o:?} is neither pause nor abort"))?,
        };
        if self.max_tokens.is_none() && self.max_cost_usd.is_none() {
            return Err("a standing budget names max_tokens, max_cost_usd or both".into());
        }
        if self.max_tokens.is_some_and(|n| n == 0 || n > MAX_TOKENS) {
            return Err(format!("max_tokens is from 1 to {MAX_TOKENS}"));
        }
        if self.max_cost_usd.is_some_and(|c| !c.is_finite() || c <= 0.0 || c > MAX_COST_USD) {
            return Err(format!("max_cost_usd is above 0 and at most {MAX_COST_USD}"));
        }
        Ok(Standing {
            id: id.to_owned(),
            scope,
            max_tokens: self.max_tokens,
            max_cost_micros: self.max_cost_usd.map(micros),
            period_days,
            on_exhausted,
            created_at,
            created_by,
            removed_at: None,
        })
    }
}

/// The period a time falls in: its first day and when the next begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub first_day: NaiveDate,
    pub resets_at: DateTime<Utc>,
}

/// `"1d"`, `"7d"` or `"30d"` as days.
pub fn period(text: &str) -> Option<u32> {
    let days: u32 = text.strip_suffix('d')?.parse().ok()?;
    PERIODS.contains(&days).then_some(days)
}

impl Standing {
    /// The period `now` falls in: periods of `period_days` whole UTC days, counted from 1970-01-01, so
    /// that every replica and restart agrees on them.
    pub fn window(&self, now: DateTime<Utc>) -> Window {
        let days = i64::from(self.period_days.max(1));
        let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).expect("the epoch");
        let since = (now.date_naive() - epoch).num_days();
        let first_day = epoch + Duration::days(since - since.rem_euclid(days));
        let resets_at = (first_day + Duration::days(days)).and_hms_opt(0, 0, 0).expect("midnight").and_utc();
        Window { first_day, resets_at }
    }

    /// The limit `spend` reached, if one: `"tokens"` or `"cost"`.
    pub fn exhausted(&self, spend: Spend) -> Option<&'static str> {
        if self.max_tokens.is_some_and(|max| spend.tokens >= max) {
            return Some("tokens");
        }
        self.max_cost_micros.is_some_and(|max| spend.micros >= max).then_some("cost")
    }

    /// Whether the budget binds a mission dispatched by `operator` on executor `executor` (its id and
    /// name: the configuration may name an executor by either).
    pub fn binds(&self, operator: Option<&str>, executor: (&str, &str)) -> bool {
        match &self.scope {
            Scope::All => true,
            Scope::Operator(name) => operator == Some(name.as_str()),
            Scope::Executor(named) => named == executor.0 || named == executor.1,
        }
    }

    /// Whether it binds every mission `operator` dispatches, whichever executor runs it.
    pub fn binds_everywhere(&self, operator: &str) -> bool {
        match &self.scope {
            Scope::All => true,
            Scope::Operator(name) => name == operator,
            Scope::Executor(_) => false,
        }
    }

    /// Whether it comes from the configuration file (not deletable through the API).
    pub fn configured(&self) -> bool {
        self.id.starts_with("config-")
    }

    /// As it is written ([`Written`]).
    pub fn written(&self) -> Written {
        Written {
            scope: self.scope.as_text(),
            max_tokens: self.max_tokens,
            max_cost_usd: self.max_cost_micros.map(|m| m as f64 / MICROS as f64),
            period: format!("{}d", self.period_days),
            on_exhausted: Some(self.on_exhausted.as_str().to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing(period_days: u32) -> Standing {
        Standing {
            id: "config-1".into(),
            scope: Scope::All,
            max_tokens: Some(100),
            max_cost_micros: Some(5_000_000),
            period_days,
            on_exhausted: OnExhausted::Pause,
            created_at: Utc::now(),
            created_by: None,
            removed_at: None,
        }
    }

    fn at(s: &str) -> DateTime<Utc> {
        aiwg_contract::clock::parse(s).unwrap()
    }

    /// Periods are whole UTC days from the epoch: a day's resets at the next midnight, a week's and a
    /// month's at the same instants for every replica.
    #[test]
    fn periods_are_aligned_to_utc_days() {
        let w = standing(1).window(at("2026-12-07T23:59:59.999Z"));
        assert_eq!((w.first_day.to_string(), w.resets_at), ("2026-12-07".into(), at("2026-12-08T00:00:00.000Z")));
        let w = standing(7).window(at("2026-12-07T10:00:00.000Z"));
        assert!(w.resets_at > at("2026-12-07T10:00:00.000Z") && w.resets_at <= at("2026-12-14T10:00:00.000Z"));
        assert_eq!((w.resets_at.date_naive() - w.first_day).num_days(), 7);
        let next = standing(7).window(w.resets_at);
        assert_eq!(next.first_day, w.resets_at.date_naive(), "the next period starts where this one ends");
        assert_eq!((period("7d"), period("2d"), period("d"), period("30d")), (Some(7), None, None, Some(30)));
    }

    /// What is wrong with a written budget is said; a good one reads back as written.
    #[test]
    fn a_written_budget_is_judged() {
        let ok = Written {
            scope: "operator:ann".into(),
            max_cost_usd: Some(50.0),
            period: "7d".into(),
            ..Written::default()
        };
        let s = ok.judged("bud_1", Utc::now(), None).unwrap();
        assert_eq!((s.max_cost_micros, s.period_days, s.on_exhausted), (Some(50_000_000), 7, OnExhausted::Pause));
        assert_eq!(s.written(), Written { on_exhausted: Some("pause".into()), ..ok.clone() });
        for (bad, says) in [
            (Written { scope: "team:x".into(), ..ok.clone() }, "scope"),
            (Written { period: "2d".into(), ..ok.clone() }, "period"),
            (Written { max_cost_usd: None, ..ok.clone() }, "names max_tokens"),
            (Written { max_cost_usd: Some(f64::NAN), ..ok.clone() }, "max_cost_usd"),
            (Written { max_tokens: Some(0), ..ok.clone() }, "max_tokens"),
            (Written { on_exhausted: Some("stop".into()), ..ok.clone() }, "on_exhausted"),
        ] {
            let err = bad.judged("b", Utc::now(), None).unwrap_err();
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn exhausted_names_the_limit_reached_and_binds_by_scope() {
        let s = standing(1);
        assert_eq!(s.exhausted(Spend { tokens: 99, micros: 0 }), None);
        assert_eq!(s.exhausted(Spend { tokens: 100, micros: 0 }), Some("tokens"));
        assert_eq!(s.exhausted(Spend { tokens: 0, micros: 5_000_000 }), Some("cost"));
        let by = Standing { scope: Scope::Executor("runner".into()), ..standing(1) };
        assert!(by.binds(None, ("e1", "runner")) && by.binds(Some("x"), ("runner", "n")));
        assert!(!by.binds(None, ("e2", "other")) && !by.binds_everywhere("x"));
        let op = Standing { scope: Scope::Operator("ann".into()), ..standing(1) };
        assert!(op.binds(Some("ann"), ("e", "n")) && !op.binds(Some("bob"), ("e", "n")) && op.binds_everywhere("ann"));
    }
}
