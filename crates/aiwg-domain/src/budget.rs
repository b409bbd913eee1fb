//! A mission's budget (issue 54, part 2): how many tokens, how much money and how long it may spend
//! (`budget` in the dispatch), and what crossing each limit does. Pure: serve's ingestion judges each
//! usage report against it under the ledger's lock, and a timer judges the duration.
//!
//! At [`WARN_PERCENT`] of a limit serve records `mission.budget_warning` once; at the whole of it the
//! mission is exhausted, once, and paused or aborted as its policy says. Spend counts every attempt of
//! the mission: what earlier attempts kept, plus what the current one keeps (`crate::usage`). Money is
//! integer micro-dollars, as usage keeps it.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::usage::{micros, Kept, MICROS};
use super::{Live, NewEvent, Origin};
use aiwg_contract::clock;

/// The event serve records when a mission reaches [`WARN_PERCENT`] of one of its limits. Serve's own:
/// no executor sends it, so it is not in the contract's vocabulary (`aiwg_contract::EventType`).
pub const WARNING_EVENT: &str = "mission.budget_warning";
/// The reason a mission paused or aborted for its budget records.
pub const EXHAUSTED: &str = "budget_exhausted";
/// Where a limit warns.
pub const WARN_PERCENT: u64 = 80;
/// The longest duration a budget may allow (30 days, as a timeout).
pub const MAX_DURATION_S: u64 = 2_592_000;

/// One limit of a budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    Tokens,
    Cost,
    Duration,
}

impl Limit {
    pub const ALL: [Limit; 3] = [Limit::Tokens, Limit::Cost, Limit::Duration];

    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Tokens => "tokens",
            Limit::Cost => "cost",
            Limit::Duration => "duration",
        }
    }

    pub fn parse(s: &str) -> Option<Limit> {
        Limit::ALL.into_iter().find(|l| l.as_str() == s)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// What happens to a mission whose budget is exhausted: paused where its executor can pause (else
/// aborted), or aborted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnExhausted {
    #[default]
    Pause,
    Abort,
}

impl OnExhausted {
    pub fn as_str(self) -> &'static str {
        match self {
            OnExhausted::Pause => "pause",
            OnExhausted::Abort => "abort",
        }
    }

    pub fn parse(s: &str) -> Option<OnExhausted> {
        [OnExhausted::Pause, OnExhausted::Abort].into_iter().find(|o| o.as_str() == s)
    }
}

/// A mission's limits (each absent is no limit) and its policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budget {
    pub max_tokens: Option<u64>,
    pub max_cost_micros: Option<i64>,
    pub max_duration_s: Option<u64>,
    pub on_exhausted: OnExhausted,
}

impl Budget {
    /// A budget as the dispatch writes it (its shape judged by the schema, `$defs/budget`): `None`
    /// without one.
    pub fn of(v: Option<&Value>) -> Option<Budget> {
        let v = v?.as_object()?;
        // A count as the schema lets it be written: an integer, or a number with no fraction (`3.0`).
        let whole = |key: &str| {
            let n = v.get(key)?;
            n.as_u64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0).map(|f| f as u64))
        };
        Some(Budget {
            max_tokens: whole("max_tokens"),
            max_cost_micros: v.get("max_cost_usd").and_then(Value::as_f64).map(micros),
            max_duration_s: whole("max_duration_s"),
            on_exhausted: v
                .get("on_exhausted")
                .and_then(Value::as_str)
                .and_then(OnExhausted::parse)
                .unwrap_or_default(),
        })
    }

    /// As the dispatch writes it.
    pub fn to_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        if let Some(n) = self.max_tokens {
            out.insert("max_tokens".into(), n.into());
        }
        if let Some(m) = self.max_cost_micros {
            out.insert("max_cost_usd".into(), json!(m as f64 / MICROS as f64));
        }
        if let Some(s) = self.max_duration_s {
            out.insert("max_duration_s".into(), s.into());
        }
        out.insert("on_exhausted".into(), self.on_exhausted.as_str().into());
        Value::Object(out)
    }

    /// The limit of `limit`, in its unit (tokens, micro-dollars, seconds).
    fn max(&self, limit: Limit) -> Option<u64> {
        match limit {
            Limit::Tokens => self.max_tokens,
            Limit::Cost => self.max_cost_micros.map(|m| m.max(0) as u64),
            Limit::Duration => self.max_duration_s,
        }
    }

    /// This budget with `raise`'s limits where it names them (and its policy, when it names one):
    /// refused, naming the limit, when one would be lowered or removed.
    pub fn raised(&self, raise: &Value) -> Result<Budget, String> {
        let asked = Budget::of(Some(raise)).unwrap_or_default();
        let mut next = *self;
        for limit in Limit::ALL {
            let (now, then) = (self.max(limit), asked.max(limit));
            match (now, then) {
                (_, None) => {}
                (Some(a), Some(b)) if b < a => {
                    return Err(format!("a budget is only raised: {} {b} is below its {a}", field(limit)))
                }
                _ => match limit {
                    Limit::Tokens => next.max_tokens = then,
                    Limit::Cost => next.max_cost_micros = asked.max_cost_micros,
                    Limit::Duration => next.max_duration_s = then,
                },
            }
        }
        if raise.get("on_exhausted").is_some() {
            next.on_exhausted = asked.on_exhausted;
        }
        Ok(next)
    }
}

/// The dispatch's field of a limit.
pub fn field(limit: Limit) -> &'static str {
    match limit {
        Limit::Tokens => "max_tokens",
        Limit::Cost => "max_cost_usd",
        Limit::Duration => "max_duration_s",
    }
}

/// What a mission spent, as budgets count it: input and output tokens, and micro-dollars.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spend {
    pub tokens: u64,
    pub micros: i64,
}

impl Spend {
    /// What an attempt's kept usage comes to.
    pub fn of<'a>(kept: impl IntoIterator<Item = &'a Kept>) -> Spend {
        kept.into_iter()
            .fold(Spend::default(), |s, k| s.plus(Spend { tokens: k.tokens.limited(), micros: k.cost.micros }))
    }

    pub fn plus(self, other: Spend) -> Spend {
        Spend { tokens: self.tokens.saturating_add(other.tokens), micros: self.micros.saturating_add(other.micros) }
    }

    fn of_limit(&self, limit: Limit) -> u64 {
        match limit {
            Limit::Tokens => self.tokens,
            Limit::Cost => self.micros.max(0) as u64,
            Limit::Duration => 0,
        }
    }
}

/// A set of limits (which ones warned).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks(u8);

impl Marks {
    pub fn has(self, limit: Limit) -> bool {
        self.0 & limit.bit() != 0
    }

    pub fn with(self, limit: Limit) -> Marks {
        Marks(self.0 | limit.bit())
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = Limit> {
        Limit::ALL.into_iter().filter(move |l| self.has(*l))
    }

    /// As stored: the limits' names, comma-separated.
    pub fn to_text(self) -> String {
        self.iter().map(Limit::as_str).collect::<Vec<_>>().join(",")
    }

    pub fn parse(text: &str) -> Marks {
        text.split(',').filter_map(Limit::parse).fold(Marks::default(), Marks::with)
    }
}

/// A live mission's budget as serve watches it: its limits, when its duration counts from (its
/// dispatch), what its earlier attempts spent, which limits warned, and the limit that exhausted it
/// (until a raise leaves it room again).
#[derive(Clone, Debug, PartialEq)]
pub struct Watch {
    pub budget: Budget,
    pub since: DateTime<Utc>,
    pub earlier: Spend,
    pub warned: Marks,
    pub exhausted: Option<Limit>,
}

/// What reaching a spend newly crosses: the limits to warn of, and the one that exhausts the budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Crossing {
    pub warn: Marks,
    pub exhausted: Option<Limit>,
}

impl Crossing {
    pub fn is_none(&self) -> bool {
        self.warn.is_empty() && self.exhausted.is_none()
    }
}

impl Watch {
    pub fn new(budget: Budget, since: DateTime<Utc>) -> Watch {
        Watch { budget, since, earlier: Spend::default(), warned: Marks::default(), exhausted: None }
    }

    /// Milliseconds since its dispatch at `now`.
    pub fn elapsed_ms(&self, now: DateTime<Utc>) -> u64 {
        (now - self.since).num_milliseconds().max(0) as u64
    }

    /// When the duration next crosses a mark (warns, or is exhausted), if it has one left.
    pub fn next_duration_mark(&self) -> Option<DateTime<Utc>> {
        let (warn, max) = self.duration_marks()?;
        let at = match (self.warned.has(Limit::Duration), self.exhausted) {
            (_, Some(_)) => return None,
            (false, None) => warn,
            (true, None) => max,
        };
        Some(self.since + chrono::Duration::milliseconds(at as i64))
    }

    /// What the mission spent, its current attempt keeping `current`.
    pub fn spend(&self, current: &[Kept]) -> Spend {
        self.earlier.plus(Spend::of(current))
    }

    /// What reaching `spend` (and, for the duration, `elapsed_ms` since the dispatch) newly crosses: a
    /// warning once per limit, the exhaustion once.
    pub fn crossing(&self, spend: Spend, elapsed_ms: Option<u64>) -> Crossing {
        let mut c = Crossing::default();
        for limit in Limit::ALL {
            let Some(max) = self.budget.max(limit) else { continue };
            let (used, max) = match limit {
                Limit::Duration => (elapsed_ms.unwrap_or(0), max.saturating_mul(1000)),
                _ => (spend.of_limit(limit), max),
            };
            let over = |percent: u64| u128::from(used) * 100 >= u128::from(max) * u128::from(percent);
            if over(WARN_PERCENT) && !self.warned.has(limit) {
                c.warn = c.warn.with(limit);
            }
            if over(100) && self.exhausted.is_none() && c.exhausted.is_none() {
                c.exhausted = Some(limit);
            }
        }
        c
    }

    /// The watch once `c` is recorded.
    pub fn crossed(&mut self, c: Crossing) {
        self.warned = Marks(self.warned.0 | c.warn.0);
        self.exhausted = self.exhausted.or(c.exhausted);
    }

    /// The watch with its budget raised to `budget`, at `spend` and `elapsed_ms`: a limit it is now
    /// below 80% of may warn again, and it is exhausted no more unless a limit still is.
    pub fn raised(&self, budget: Budget, spend: Spend, elapsed_ms: u64) -> Watch {
        let fresh =
            Watch { budget, since: self.since, earlier: self.earlier, warned: Marks::default(), exhausted: None };
        let still = fresh.crossing(spend, Some(elapsed_ms));
        Watch { warned: still.warn, exhausted: still.exhausted.filter(|_| self.exhausted.is_some()), ..fresh }
    }

    /// The milliseconds since dispatch at which the duration warns and is exhausted.
    pub fn duration_marks(&self) -> Option<(u64, u64)> {
        let max = self.budget.max_duration_s?.saturating_mul(1000);
        Some((max * WARN_PERCENT / 100, max))
    }

    /// How the mission's read shows it.
    pub fn view(&self) -> Value {
        let mut v = self.budget.to_json();
        let warned: Vec<&str> = self.warned.iter().map(Limit::as_str).collect();
        v["warned"] = json!(warned);
        v["exhausted"] = json!(self.exhausted.map(Limit::as_str));
        v
    }
}

/// What a usage report or the clock crossed of a live mission's budget: the crossing, the warnings to
/// record, and the watch once they are.
#[derive(Clone, Debug, PartialEq)]
pub struct Crossed {
    pub crossing: Crossing,
    pub warnings: Vec<NewEvent>,
    pub watch: Watch,
}

impl Crossed {
    /// The limit that exhausted the budget now, and what that does.
    pub fn exhausted(&self) -> Option<(Limit, OnExhausted)> {
        Some((self.crossing.exhausted?, self.watch.budget.on_exhausted))
    }
}

/// What a report that raised `raised` (one model's usage on the current attempt) crosses of `live`'s
/// budget: `None` without a budget (the usual case: nothing is computed) or when nothing is crossed.
pub fn on_report(live: &Live, mission_id: &str, raised: &Kept, now: DateTime<Utc>) -> Option<Box<Crossed>> {
    let watch = live.budget()?;
    let others = live.usage().iter().filter(|k| k.model != raised.model);
    let spend = watch.earlier.plus(Spend::of(others)).plus(Spend::of([raised]));
    crossed(live, mission_id, watch, spend, None, now)
}

/// What the clock crossed of `live`'s budget at `now` (its duration).
pub fn on_clock(live: &Live, mission_id: &str, now: DateTime<Utc>) -> Option<Box<Crossed>> {
    let watch = live.budget()?;
    crossed(live, mission_id, watch, watch.spend(live.usage()), Some(watch.elapsed_ms(now)), now)
}

fn crossed(
    live: &Live,
    mission_id: &str,
    watch: &Watch,
    spend: Spend,
    elapsed_ms: Option<u64>,
    now: DateTime<Utc>,
) -> Option<Box<Crossed>> {
    let crossing = watch.crossing(spend, elapsed_ms);
    if crossing.is_none() {
        return None;
    }
    let elapsed = elapsed_ms.unwrap_or_else(|| watch.elapsed_ms(now));
    let warnings = crossing
        .warn
        .iter()
        .map(|limit| warning(live.executor_id(), mission_id, limit, watch, spend, elapsed, now))
        .collect();
    let mut after = watch.clone();
    after.crossed(crossing);
    Some(Box::new(Crossed { crossing, warnings, watch: after }))
}

/// The `mission.budget_warning` serve records for `limit` of a mission owned by `executor_id`, at
/// `spend` and `elapsed_ms`: what it used of its `max` (tokens, dollars, or seconds).
fn warning(
    executor_id: &str,
    mission_id: &str,
    limit: Limit,
    watch: &Watch,
    spend: Spend,
    elapsed_ms: u64,
    now: DateTime<Utc>,
) -> NewEvent {
    let max = watch.budget.max(limit).unwrap_or(0);
    let (used, max) = match limit {
        Limit::Tokens => (json!(spend.tokens), json!(max)),
        Limit::Cost => (json!(spend.micros as f64 / MICROS as f64), json!(max as f64 / MICROS as f64)),
        Limit::Duration => (json!(elapsed_ms as f64 / 1000.0), json!(max)),
    };
    NewEvent {
        event: WARNING_EVENT.into(),
        executor_id: executor_id.to_owned(),
        mission_id: Some(mission_id.to_owned()),
        ts: clock::format(now),
        data: json!({"limit": limit.as_str(), "field": field(limit), "used": used, "max": max, "percent": WARN_PERCENT}),
        raw: None,
        origin: Origin::Serve,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::{Cost, CostSource, Tokens};

    fn kept(input: u64, micros: i64) -> Kept {
        Kept {
            model: "m".into(),
            tokens: Tokens { input, ..Tokens::default() },
            reported: None,
            cost: Cost { micros, source: CostSource::Estimated },
        }
    }

    fn budget(v: Value) -> Budget {
        Budget::of(Some(&v)).unwrap()
    }

    /// A warning once per limit at 80%, the exhaustion once at 100%, counting earlier attempts.
    #[test]
    fn a_limit_warns_once_and_exhausts_once() {
        let mut w = Watch::new(budget(json!({"max_tokens": 100, "max_cost_usd": 1.0})), Utc::now());
        assert!(w.crossing(w.spend(&[kept(79, 0)]), None).is_none());
        let c = w.crossing(w.spend(&[kept(80, 0)]), None);
        assert_eq!((c.warn.iter().collect::<Vec<_>>(), c.exhausted), (vec![Limit::Tokens], None));
        w.crossed(c);
        assert!(w.crossing(w.spend(&[kept(99, 0)]), None).is_none(), "warned once");
        w.earlier = Spend { tokens: 50, micros: 900_000 };
        let c = w.crossing(w.spend(&[kept(50, 0)]), None);
        assert_eq!((c.warn.iter().collect::<Vec<_>>(), c.exhausted), (vec![Limit::Cost], Some(Limit::Tokens)));
        w.crossed(c);
        assert_eq!(w.crossing(w.spend(&[kept(60, 200_000)]), None).exhausted, None, "exhausted once");
        assert_eq!(Marks::parse(&w.warned.to_text()), w.warned);
    }

    /// A raise keeps its limits or raises them; lowering one is refused naming it; the raised watch is
    /// exhausted no more and warns again below 80%.
    #[test]
    fn a_raise_only_raises() {
        let b = budget(json!({"max_tokens": 100, "on_exhausted": "abort"}));
        let err = b.raised(&json!({"max_tokens": 50})).unwrap_err();
        assert!(err.contains("max_tokens"), "{err}");
        let r = b.raised(&json!({"max_tokens": 1000, "max_duration_s": 60})).unwrap();
        assert_eq!((r.max_tokens, r.max_duration_s, r.on_exhausted), (Some(1000), Some(60), OnExhausted::Abort));
        let w = Watch {
            warned: Marks::default().with(Limit::Tokens),
            exhausted: Some(Limit::Tokens),
            ..Watch::new(b, Utc::now())
        };
        let raised = w.raised(r, Spend { tokens: 100, micros: 0 }, 0);
        assert_eq!((raised.warned, raised.exhausted), (Marks::default(), None));
        assert_eq!(raised.view()["max_tokens"], 1000);
    }

    #[test]
    fn the_duration_warns_and_exhausts_by_its_elapsed_seconds() {
        let since = Utc::now();
        let mut w = Watch::new(budget(json!({"max_duration_s": 10})), since);
        assert_eq!(w.duration_marks(), Some((8_000, 10_000)));
        assert_eq!(w.next_duration_mark(), Some(since + chrono::Duration::seconds(8)));
        assert!(w.crossing(Spend::default(), Some(7_999)).is_none());
        w.crossed(w.crossing(Spend::default(), Some(8_000)));
        assert_eq!(w.next_duration_mark(), Some(since + chrono::Duration::seconds(10)));
        assert_eq!(w.crossing(Spend::default(), Some(10_000)).exhausted, Some(Limit::Duration));
        assert!(w.crossing(Spend::default(), None).is_none(), "usage alone never crosses the duration");
    }
}
