//! What missions spend: the usage executors report (`usage` in the data of `mission.progress` and of
//! the ending events), kept per attempt and model as the largest counts seen, priced, and summed.
//!
//! A report is cumulative for its attempt and model. Serve keeps the largest value of each count it has
//! seen (and of the cost reported), so a report sent again or overtaken by a later one never counts
//! twice; a count lower than the one kept is ignored, and said to be ([`Accounted::lowered`]). Money is
//! integer micro-dollars everywhere it is kept or summed: a float sum drifts, and sums are compared with
//! budgets.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::Live;
use aiwg_contract::progress::{MAX_COST_USD, MAX_TOKENS};

/// The model of a report that names none.
pub const UNKNOWN_MODEL: &str = "unknown";
/// Models one attempt may report usage of: each is a row kept beside the mission and held in its
/// projection, so an executor naming a new model with every report must not grow them without end.
pub const MAX_MODELS: usize = 16;
/// Micro-dollars in a dollar.
pub const MICROS: i64 = 1_000_000;
/// The largest cost one attempt on one model is kept at (a million dollars, `cost_usd`'s own bound):
/// so that a sum of many rows stays far within a 64-bit integer, whatever the prices configured.
pub const MAX_COST_MICROS: i64 = 1_000_000 * MICROS;

/// Token counts (the OpenTelemetry GenAI conventions' `gen_ai.usage.*`): cached tokens are part of
/// `input`, reasoning tokens part of `output`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_creation: u64,
    pub reasoning: u64,
}

impl Tokens {
    /// The kinds of count, as metrics and sums name them, in the order of [`Tokens::counts`].
    pub const KINDS: [&'static str; 5] = ["input", "output", "cache_read", "cache_creation", "reasoning"];

    pub fn counts(&self) -> [u64; 5] {
        [self.input, self.output, self.cache_read, self.cache_creation, self.reasoning]
    }

    fn from_counts([input, output, cache_read, cache_creation, reasoning]: [u64; 5]) -> Tokens {
        Tokens { input, output, cache_read, cache_creation, reasoning }
    }

    /// What token limits count: input and output (cached and reasoning tokens are part of them).
    pub fn limited(&self) -> u64 {
        self.input.saturating_add(self.output)
    }

    /// Each count the larger of the two.
    fn max(self, other: Tokens) -> Tokens {
        let (a, b) = (self.counts(), other.counts());
        Tokens::from_counts(std::array::from_fn(|i| a[i].max(b[i])))
    }

    /// Whether any count is below `kept`'s.
    fn below(&self, kept: &Tokens) -> bool {
        self.counts().iter().zip(kept.counts()).any(|(a, b)| *a < b)
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Tokens) {
        let (a, b) = (self.counts(), other.counts());
        *self = Tokens::from_counts(std::array::from_fn(|i| a[i].saturating_add(b[i])));
    }

    /// Each count less `before`'s (what a change of kept counts added: never negative, counts only rise).
    pub fn since(&self, before: &Tokens) -> Tokens {
        let (a, b) = (self.counts(), before.counts());
        Tokens::from_counts(std::array::from_fn(|i| a[i].saturating_sub(b[i])))
    }
}

/// Where a cost comes from: the executor's report, serve's price table, or neither (never counted as
/// zero). `Mixed` is a sum's of rows of several sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostSource {
    Reported,
    Estimated,
    Unpriced,
    Mixed,
}

impl CostSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CostSource::Reported => "reported",
            CostSource::Estimated => "estimated",
            CostSource::Unpriced => "unpriced",
            CostSource::Mixed => "mixed",
        }
    }

    pub fn parse(s: &str) -> Option<CostSource> {
        [CostSource::Reported, CostSource::Estimated, CostSource::Unpriced, CostSource::Mixed]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

/// A usage report as an event's data carries it (its shape judged by the schema).
#[derive(Clone, Debug, PartialEq)]
pub struct Reported {
    pub model: String,
    pub tokens: Tokens,
    /// `cost_usd`, in micro-dollars.
    pub cost_micros: Option<i64>,
}

impl Reported {
    /// The `usage` of an event's data; `None` without one, or with one that reports nothing (no count
    /// above zero, no cost): nothing to keep.
    pub fn of(data: &Value) -> Option<Reported> {
        let usage = data.get("usage")?.as_object()?;
        let count = |key: &str| usage.get(key).map_or(0, whole).min(MAX_TOKENS);
        let tokens = Tokens {
            input: count("input_tokens"),
            output: count("output_tokens"),
            cache_read: count("cache_read_input_tokens"),
            cache_creation: count("cache_creation_input_tokens"),
            reasoning: count("reasoning_output_tokens"),
        };
        let cost_micros = usage.get("cost_usd").and_then(Value::as_f64).map(micros);
        if tokens == Tokens::default() && cost_micros.is_none() {
            return None;
        }
        let model = usage.get("model").and_then(Value::as_str).filter(|m| !m.is_empty()).unwrap_or(UNKNOWN_MODEL);
        Some(Reported { model: model.to_owned(), tokens, cost_micros })
    }
}

/// A count as the schema lets it be written: an integer, or a number with no fraction (`3.0`, `1e3`).
fn whole(v: &Value) -> u64 {
    v.as_u64().or_else(|| v.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0).map(|f| f as u64)).unwrap_or(0)
}

/// Dollars as micro-dollars, within [`MAX_COST_USD`]: the one place a float meets money.
pub fn micros(usd: f64) -> i64 {
    (usd.clamp(0.0, MAX_COST_USD) * MICROS as f64).round() as i64
}

/// A model's prices, in micro-dollars per million tokens (the configuration's dollars, converted once).
/// Cache reads and writes cost what input does unless priced apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Price {
    pub input: i64,
    pub output: i64,
    pub cache_read: i64,
    pub cache_creation: i64,
}

impl Price {
    /// What `tokens` cost, in micro-dollars rounded to the nearest, at most [`MAX_COST_MICROS`]. Always
    /// computed from an attempt's whole counts, never added report by report, so that rounding does not
    /// pile up.
    pub fn of(&self, t: &Tokens) -> i64 {
        let uncached = t.input.saturating_sub(t.cache_read).saturating_sub(t.cache_creation);
        let priced = [(uncached, self.input), (t.cache_read, self.cache_read), (t.cache_creation, self.cache_creation)];
        let total: u128 = priced
            .into_iter()
            .chain([(t.output, self.output)])
            .map(|(n, price)| u128::from(n) * u128::try_from(price).unwrap_or(0))
            .sum();
        let rounded = (total + 500_000) / 1_000_000;
        i64::try_from(rounded).unwrap_or(i64::MAX).min(MAX_COST_MICROS)
    }
}

/// The configuration's price table, by model name as executors report it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pricing(pub HashMap<String, Price>);

impl Pricing {
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.0.get(model)
    }
}

/// A cost and where it comes from (`micros` is 0 when unpriced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cost {
    pub micros: i64,
    pub source: CostSource,
}

/// What serve keeps of one model's usage on one attempt: the largest counts and reported cost seen, and
/// the cost the attempt stands at on it.
#[derive(Clone, Debug, PartialEq)]
pub struct Kept {
    pub model: String,
    pub tokens: Tokens,
    /// The largest `cost_usd` reported, in micro-dollars.
    pub reported: Option<i64>,
    pub cost: Cost,
}

/// What a report does to what is kept of its model on its attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Accounted {
    /// What is kept now, when the report raised anything; `None` when it adds nothing (a repeat, a
    /// reordered earlier report).
    pub raised: Option<Kept>,
    /// The report said less than what is kept of some count (or cost): that part is ignored.
    pub lowered: bool,
}

/// Why a report is refused: it names a model beyond the [`MAX_MODELS`] its attempt reported on.
pub const TOO_MANY_MODELS: &str = "usage names a model beyond the 16 this attempt already reported on";

/// Judges a report against what the attempt keeps (`kept`, one row a model), priced by `pricing` when
/// it reports no cost: refused ([`TOO_MANY_MODELS`]) when it names a model beyond the attempt's
/// [`MAX_MODELS`].
pub fn account(kept: &[Kept], report: Reported, pricing: &Pricing) -> Result<Accounted, &'static str> {
    let before = kept.iter().find(|k| k.model == report.model);
    if before.is_none() && kept.len() >= MAX_MODELS {
        return Err(TOO_MANY_MODELS);
    }
    let tokens = before.map_or(report.tokens, |b| b.tokens.max(report.tokens));
    let reported = before.and_then(|b| b.reported).max(report.cost_micros).map(|r| r.min(MAX_COST_MICROS));
    let lowered = before.is_some_and(|b| {
        report.tokens.below(&b.tokens) || report.cost_micros.zip(b.reported).is_some_and(|(r, k)| r < k)
    });
    let cost = match (reported, pricing.price(&report.model)) {
        (Some(micros), _) => Cost { micros, source: CostSource::Reported },
        (None, Some(price)) => Cost { micros: price.of(&tokens), source: CostSource::Estimated },
        (None, None) => Cost { micros: 0, source: CostSource::Unpriced },
    };
    let now = Kept { model: report.model, tokens, reported, cost };
    let raised = (before != Some(&now)).then_some(now);
    Ok(Accounted { raised, lowered })
}

/// What a change of what is kept added to its model's usage: counts (never below zero) and cost (below
/// zero when a reported cost replaced a larger estimate).
#[derive(Clone, Debug, PartialEq)]
pub struct Added {
    pub model: String,
    pub tokens: Tokens,
    pub cost_micros: i64,
}

impl Added {
    pub fn between(before: Option<&Kept>, now: &Kept) -> Added {
        let (tokens, micros) = before.map_or((Tokens::default(), 0), |b| (b.tokens, b.cost.micros));
        Added { model: now.model.clone(), tokens: now.tokens.since(&tokens), cost_micros: now.cost.micros - micros }
    }
}

/// One model's usage on one attempt as it now stands, to keep, and to count in the sums of `day` (the
/// store adds to them what it changed of the row, so that they stay the sum of the rows).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub mission_id: String,
    pub attempt: u32,
    /// The executor the attempt is on (a sum's key; the dispatching operator is the mission's).
    pub executor_id: String,
    pub day: String,
    pub kept: Kept,
}

/// A report that raised what a live mission's attempt keeps of a model: the row to keep and count, and
/// what it added.
#[derive(Clone, Debug, PartialEq)]
pub struct Spent {
    pub record: Record,
    pub added: Added,
}

/// What a report does to a live mission's attempt: what it raised (`None`: nothing new), and whether it
/// said less than what is kept somewhere (that part ignored).
#[derive(Clone, Debug, PartialEq)]
pub struct Spending {
    pub spent: Option<Spent>,
    pub lowered: bool,
}

/// Judges `report` against what `live`'s current attempt keeps (see [`account`]), for `mission_id` at
/// `now` (the day its sums count it on). The projection is not changed: [`Live::spent`] keeps `spent`'s
/// row once it is queued.
pub fn spending(
    live: &Live,
    mission_id: &str,
    report: Reported,
    pricing: &Pricing,
    now: DateTime<Utc>,
) -> Result<Spending, &'static str> {
    let accounted = account(live.usage(), report, pricing)?;
    let spent = accounted.raised.map(|kept| {
        let added = Added::between(live.usage().iter().find(|k| k.model == kept.model), &kept);
        let (attempt, executor_id) = (live.attempt(), live.executor_id().to_owned());
        Spent { record: Record { mission_id: mission_id.to_owned(), attempt, executor_id, day: day(now), kept }, added }
    });
    Ok(Spending { spent, lowered: accounted.lowered })
}

/// The day a time falls on, as sums are keyed (UTC, `YYYY-MM-DD`).
pub fn day(at: DateTime<Utc>) -> String {
    use chrono::Datelike;
    // Written out: chrono's `format` parses its pattern on every call, and this runs for every report.
    format!("{:04}-{:02}-{:02}", at.year(), at.month(), at.day())
}

/// What sums are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    Day,
    Operator,
    Executor,
    Model,
}

impl By {
    pub const ALL: [By; 4] = [By::Day, By::Operator, By::Executor, By::Model];

    pub fn as_str(self) -> &'static str {
        match self {
            By::Day => "day",
            By::Operator => "operator",
            By::Executor => "executor",
            By::Model => "model",
        }
    }

    pub fn parse(s: &str) -> Option<By> {
        By::ALL.into_iter().find(|b| b.as_str() == s)
    }
}

/// Whose spend a sum is: everyone's, an operator's (the missions they dispatched) or an executor's
/// (`all`, `operator:NAME`, `executor:ID`, as budgets name them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    Operator(String),
    Executor(String),
}

impl Scope {
    pub fn parse(s: &str) -> Option<Scope> {
        let named = |rest: &str| (!rest.is_empty()).then(|| rest.to_owned());
        match s.split_once(':') {
            None if s == "all" => Some(Scope::All),
            Some(("operator", name)) => named(name).map(Scope::Operator),
            Some(("executor", id)) => named(id).map(Scope::Executor),
            _ => None,
        }
    }

    /// As [`Scope::parse`] reads it.
    pub fn as_text(&self) -> String {
        match self {
            Scope::All => "all".into(),
            Scope::Operator(name) => format!("operator:{name}"),
            Scope::Executor(id) => format!("executor:{id}"),
        }
    }
}

/// Usage summed over rows (of a mission's attempts, of a day, of an operator, ...): the counts, the
/// cost of the priced ones, and how many rows had each source (a day's sums say only whether any had
/// it: 0 or 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sum {
    pub tokens: Tokens,
    pub cost_micros: i64,
    pub reported: i64,
    pub estimated: i64,
    pub unpriced: i64,
}

impl Sum {
    /// A row's part in a sum.
    pub fn of(kept: &Kept) -> Sum {
        let one = |s: CostSource| i64::from(kept.cost.source == s);
        Sum {
            tokens: kept.tokens,
            cost_micros: kept.cost.micros,
            reported: one(CostSource::Reported),
            estimated: one(CostSource::Estimated),
            unpriced: one(CostSource::Unpriced),
        }
    }

    pub fn add(&mut self, other: &Sum) {
        self.tokens.add(&other.tokens);
        self.cost_micros = self.cost_micros.saturating_add(other.cost_micros);
        self.reported += other.reported;
        self.estimated += other.estimated;
        self.unpriced += other.unpriced;
    }

    /// Where its cost comes from; `None` when no row is in it.
    pub fn source(&self) -> Option<CostSource> {
        let sources = [
            (self.reported, CostSource::Reported),
            (self.estimated, CostSource::Estimated),
            (self.unpriced, CostSource::Unpriced),
        ];
        let mut present = sources.into_iter().filter(|(n, _)| *n > 0).map(|(_, s)| s);
        match (present.next(), present.next()) {
            (None, _) => None,
            (Some(one), None) => Some(one),
            (Some(_), Some(_)) => Some(CostSource::Mixed),
        }
    }

    /// Its cost in dollars; `None` when nothing in it is priced (unpriced is never zero).
    pub fn cost_usd(&self) -> Option<f64> {
        (self.reported > 0 || self.estimated > 0).then(|| self.cost_micros as f64 / MICROS as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tokens(input: u64, output: u64) -> Tokens {
        Tokens { input, output, ..Tokens::default() }
    }

    fn report(model: &str, input: u64, output: u64, cost_usd: Option<f64>) -> Reported {
        Reported { model: model.into(), tokens: tokens(input, output), cost_micros: cost_usd.map(micros) }
    }

    fn priced(model: &str, input_usd: i64, output_usd: i64) -> Pricing {
        let price = Price {
            input: input_usd * MICROS,
            output: output_usd * MICROS,
            cache_read: input_usd * MICROS / 10,
            cache_creation: input_usd * MICROS,
        };
        Pricing([(model.to_owned(), price)].into())
    }

    /// Keeps what a report raised, as the projection does.
    fn keep(kept: &mut Vec<Kept>, a: &Accounted) {
        if let Some(now) = &a.raised {
            kept.retain(|k| k.model != now.model);
            kept.push(now.clone());
        }
    }

    #[test]
    fn a_report_is_read_from_an_events_data() {
        let data = json!({"summary": "s", "usage": {"model": "m", "input_tokens": 10, "output_tokens": 3.0,
            "cache_read_input_tokens": 4, "cache_creation_input_tokens": 1, "reasoning_output_tokens": 2,
            "cost_usd": 0.0123456, "later": {"kept": true}}});
        let read = Reported::of(&data).unwrap();
        let expected = Tokens { input: 10, output: 3, cache_read: 4, cache_creation: 1, reasoning: 2 };
        assert_eq!(read, Reported { model: "m".into(), tokens: expected, cost_micros: Some(12_346) });
        assert_eq!(Reported::of(&json!({"usage": {"input_tokens": 5}})).unwrap().model, UNKNOWN_MODEL);
        assert_eq!(Reported::of(&json!({"usage": {"model": "m"}})), None, "nothing reported");
        assert_eq!(Reported::of(&json!({"usage": {"cost_usd": 0}})).unwrap().cost_micros, Some(0));
        assert_eq!(Reported::of(&json!({})), None);
        assert_eq!(Reported::of(&json!({"usage": 7})), None);
    }

    /// Cumulative reports: the largest of each count is kept, a repeat or an earlier report arriving
    /// late adds nothing, and a count that went down is ignored and said to be.
    #[test]
    fn the_largest_report_is_kept_and_nothing_counts_twice() {
        let pricing = Pricing::default();
        let mut kept = Vec::new();
        let first = account(&kept, report("m", 100, 10, None), &pricing).unwrap();
        assert!(!first.lowered);
        keep(&mut kept, &first);
        let again = account(&kept, report("m", 100, 10, None), &pricing).unwrap();
        assert_eq!(again, Accounted { raised: None, lowered: false }, "a repeat adds nothing");
        let late = account(&kept, report("m", 50, 5, None), &pricing).unwrap();
        assert_eq!(late, Accounted { raised: None, lowered: true }, "an earlier report, late");
        let mixed = account(&kept, report("m", 150, 8, None), &pricing).unwrap();
        assert!(mixed.lowered);
        assert_eq!(mixed.raised.as_ref().unwrap().tokens, tokens(150, 10), "each count's largest");
        keep(&mut kept, &mixed);
        let other = account(&kept, report("n", 1, 1, None), &pricing).unwrap();
        keep(&mut kept, &other);
        assert_eq!(kept.len(), 2, "one row a model");
        let raised = Kept { tokens: tokens(100, 10), ..kept[0].clone() };
        assert_eq!(Added::between(Some(&raised), &kept[0]).tokens, tokens(50, 0));
        assert_eq!(Added::between(None, &kept[1]).tokens, tokens(1, 1));
    }

    #[test]
    fn cost_is_reported_else_estimated_else_unpriced_and_never_zero() {
        let pricing = priced("m", 3, 15);
        let estimated = account(&[], report("m", 1_000_000, 100_000, None), &pricing).unwrap().raised.unwrap();
        assert_eq!(estimated.cost, Cost { micros: 4_500_000, source: CostSource::Estimated });
        let reported = account(&[estimated], report("m", 1_000_000, 100_000, Some(1.25)), &pricing).unwrap();
        assert_eq!(reported.raised.unwrap().cost, Cost { micros: 1_250_000, source: CostSource::Reported });
        let unpriced = account(&[], report("other", 10, 10, None), &pricing).unwrap().raised.unwrap();
        assert_eq!(unpriced.cost, Cost { micros: 0, source: CostSource::Unpriced });
        let sum = Sum::of(&unpriced);
        assert_eq!((sum.source(), sum.cost_usd()), (Some(CostSource::Unpriced), None));
    }

    /// Cached tokens are part of input: priced at their own rates, and only the rest at input's.
    #[test]
    fn cached_tokens_are_priced_apart_from_the_rest_of_input() {
        let price = Price { input: 3 * MICROS, output: 15 * MICROS, cache_read: 300_000, cache_creation: 3_750_000 };
        let t = Tokens { input: 2_000_000, output: 0, cache_read: 1_000_000, cache_creation: 1_000_000, reasoning: 5 };
        assert_eq!(price.of(&t), 300_000 + 3_750_000);
        let odd = Tokens { input: 1, cache_read: 5, ..Tokens::default() };
        assert_eq!(price.of(&odd), 2, "more cached than input: none of input at input's price (1.5 rounds up)");
        let most = Tokens { input: MAX_TOKENS, output: MAX_TOKENS, ..Tokens::default() };
        assert_eq!(Price { input: i64::MAX, ..price }.of(&most), MAX_COST_MICROS);
        assert_eq!(micros(1e9), MAX_COST_MICROS);
    }

    #[test]
    fn an_attempt_reports_on_a_bounded_number_of_models() {
        let pricing = Pricing::default();
        let mut kept = Vec::new();
        for n in 0..MAX_MODELS {
            let a = account(&kept, report(&format!("m{n}"), 1, 1, None), &pricing).unwrap();
            keep(&mut kept, &a);
        }
        assert_eq!(account(&kept, report("one-more", 1, 1, None), &pricing), Err(TOO_MANY_MODELS));
        assert!(TOO_MANY_MODELS.contains(&MAX_MODELS.to_string()));
        assert!(account(&kept, report("m3", 2, 2, None), &pricing).is_ok(), "a model it has is fine");
    }

    #[test]
    fn a_sum_says_where_its_cost_comes_from() {
        let pricing = priced("m", 1, 1);
        let row =
            |model: &str, cost| account(&[], report(model, 1_000_000, 0, cost), &pricing).unwrap().raised.unwrap();
        let mut sum = Sum::of(&row("m", None));
        assert_eq!((sum.source(), sum.cost_usd()), (Some(CostSource::Estimated), Some(1.0)));
        sum.add(&Sum::of(&row("x", Some(0.5))));
        assert_eq!((sum.source(), sum.cost_usd()), (Some(CostSource::Mixed), Some(1.5)));
        sum.add(&Sum::of(&row("y", None)));
        assert_eq!((sum.source(), sum.tokens.limited()), (Some(CostSource::Mixed), 3_000_000));
        assert_eq!(Sum::default().source(), None);
        assert_eq!(CostSource::parse("mixed"), Some(CostSource::Mixed));
        assert_eq!(day(aiwg_contract::clock::parse("2026-11-30T23:59:59.999Z").unwrap()), "2026-11-30");
    }

    /// A live mission's report is judged against its current attempt, and keyed by its executor and day.
    #[test]
    fn a_report_is_judged_against_the_live_attempt() {
        let now = aiwg_contract::clock::parse("2026-11-30T10:00:00Z").unwrap();
        let mut live = Live::handing_over("e1", 2);
        let first = spending(&live, "m1", report("m", 10, 1, None), &Pricing::default(), now).unwrap();
        let spent = first.spent.unwrap();
        assert_eq!(
            (spent.record.attempt, spent.record.executor_id.as_str(), spent.record.day.as_str()),
            (2, "e1", "2026-11-30")
        );
        assert_eq!(spent.added.tokens, tokens(10, 1));
        live.spent(spent.record.kept);
        let again = spending(&live, "m1", report("m", 10, 1, None), &Pricing::default(), now).unwrap();
        assert_eq!(again, Spending { spent: None, lowered: false });
    }

    #[test]
    fn scopes_and_groupings_are_named_as_budgets_and_the_api_name_them() {
        assert_eq!(Scope::parse("all"), Some(Scope::All));
        assert_eq!(Scope::parse("operator:ana:b"), Some(Scope::Operator("ana:b".into())));
        assert_eq!(Scope::parse("executor:e1"), Some(Scope::Executor("e1".into())));
        for bad in ["", "operator:", "model:m", "All"] {
            assert_eq!(Scope::parse(bad), None, "{bad}");
        }
        assert_eq!(By::ALL.map(|b| By::parse(b.as_str())), By::ALL.map(Some));
    }
}
