//! What missions spend, as counters: tokens by model and kind, cost by model, and the reports that went
//! down. Seeded at start from the kept sums and raised by every committed report, so they count
//! everything the store holds, across restarts.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use super::Counter;
use aiwg_domain::usage::{Added, Tokens, MICROS};

/// Model labels kept apart; beyond them, usage is counted under [`OTHER`]: an executor names its
/// models, and a label per name it invents would grow every scrape without end.
const MODELS: usize = 256;
const OTHER: &str = "other";

#[derive(Default)]
pub(crate) struct Usage {
    by_model: Mutex<BTreeMap<String, (Tokens, i64)>>,
    /// Usage reports ignored (in part) because a count went down.
    pub(crate) lowered: Counter,
}

impl Usage {
    /// Counts what a committed report added.
    pub(crate) fn add(&self, added: &Added) {
        self.count(&added.model, &added.tokens, added.cost_micros);
    }

    /// Counts a model's kept sums (at start).
    pub(crate) fn seed(&self, model: &str, tokens: &Tokens, cost_micros: i64) {
        self.count(model, tokens, cost_micros);
    }

    fn count(&self, model: &str, tokens: &Tokens, cost_micros: i64) {
        let mut by_model = self.by_model.lock().expect("metrics lock");
        let label = if by_model.contains_key(model) || by_model.len() < MODELS { model } else { OTHER };
        // Looked up before inserting: a model counted before (every report but its first) allocates nothing.
        if !by_model.contains_key(label) {
            by_model.insert(label.to_owned(), (Tokens::default(), 0));
        }
        let (counted, cost) = by_model.get_mut(label).expect("just inserted");
        counted.add(tokens);
        *cost = cost.saturating_add(cost_micros);
    }

    pub(super) fn render(&self, out: &mut String) {
        let by_model = self.by_model.lock().expect("metrics lock").clone();
        let name = "aiwg_tokens_total";
        let _ = writeln!(
            out,
            "# HELP {name} Tokens missions used, as executors reported them, by model and kind (cached tokens are \
             part of input, reasoning tokens part of output).\n# TYPE {name} counter"
        );
        for (model, (tokens, _)) in &by_model {
            for (kind, n) in Tokens::KINDS.iter().zip(tokens.counts()) {
                let _ = writeln!(out, "{name}{{model=\"{}\",kind=\"{kind}\"}} {n}", escape(model));
            }
        }
        let name = "aiwg_cost_usd_total";
        let _ = writeln!(
            out,
            "# HELP {name} What missions cost in US dollars, reported or estimated from the price table, by \
             model (unpriced usage counts nothing here).\n# TYPE {name} counter"
        );
        for (model, (_, micros)) in &by_model {
            let _ = writeln!(out, "{name}{{model=\"{}\"}} {}", escape(model), *micros as f64 / MICROS as f64);
        }
        super::counter(
            out,
            "aiwg_usage_lowered_total",
            "Usage reports that said less than serve kept of a count (a late or wrong report): that part is ignored.",
            self.lowered.get(),
        );
    }
}

/// A label value as Prometheus' text format needs it: backslash, quote and line feed escaped.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_counted_by_model_and_kind_with_labels_escaped() {
        let usage = Usage::default();
        let tokens = Tokens { input: 10, output: 2, ..Tokens::default() };
        usage.seed("m", &tokens, 1_500_000);
        usage.add(&Added { model: "m".into(), tokens, cost_micros: -500_000 });
        usage.add(&Added { model: "a\"b".into(), tokens, cost_micros: 0 });
        let mut out = String::new();
        usage.render(&mut out);
        assert!(out.contains("aiwg_tokens_total{model=\"m\",kind=\"input\"} 20\n"), "{out}");
        assert!(out.contains("aiwg_cost_usd_total{model=\"m\"} 1\n"), "{out}");
        assert!(out.contains("aiwg_tokens_total{model=\"a\\\"b\",kind=\"output\"} 2\n"), "{out}");
    }

    #[test]
    fn models_beyond_the_bound_are_counted_together() {
        let usage = Usage::default();
        let one = Added { model: String::new(), tokens: Tokens { input: 1, ..Tokens::default() }, cost_micros: 1 };
        for n in 0..MODELS + 3 {
            usage.add(&Added { model: format!("m{n}"), ..one.clone() });
        }
        let by_model = usage.by_model.lock().unwrap();
        assert_eq!(by_model.len(), MODELS + 1);
        assert_eq!(by_model[OTHER].0.input, 3);
    }
}
