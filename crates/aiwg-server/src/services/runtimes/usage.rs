//! What a runtime mission's executions said they used (`usage` in a runtime's `/execute` answer, our
//! extension of the protocol), kept as the mission's usage. A cross-check's executions run at once, and
//! each reports once: their reports are summed per model here, and each total reported as it grows (a
//! report is cumulative for the mission's attempt, as an executor's is).

use std::sync::Mutex;

use serde_json::{json, Value};

use aiwg_domain::usage::Reported;

#[derive(Default)]
pub(super) struct Executions(Mutex<Vec<Reported>>);

impl Executions {
    /// Adds an execution's `usage` (its model, else the runtime's `model_id`): the model's total so far,
    /// as a report and as the `usage` of the event that carries it. `None` when it reports nothing.
    pub(super) fn add(&self, usage: &Value, model_id: &str) -> Option<(Reported, Value)> {
        let mut one = usage.as_object()?.clone();
        one.entry("model").or_insert_with(|| json!(model_id));
        let report = Reported::of(&json!({ "usage": one }))?;
        let mut totals = self.0.lock().expect("usage lock");
        let total = match totals.iter_mut().find(|t| t.model == report.model) {
            Some(t) => {
                t.tokens.add(&report.tokens);
                t.cost_micros = match (t.cost_micros, report.cost_micros) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
                };
                t.clone()
            }
            None => {
                totals.push(report.clone());
                report
            }
        };
        Some((total.clone(), as_usage(&total)))
    }
}

/// A report as an event's `usage`.
fn as_usage(r: &Reported) -> Value {
    let t = r.tokens;
    let mut usage = json!({"model": r.model, "input_tokens": t.input, "output_tokens": t.output,
        "cache_read_input_tokens": t.cache_read, "cache_creation_input_tokens": t.cache_creation,
        "reasoning_output_tokens": t.reasoning});
    if let Some(micros) = r.cost_micros {
        usage["cost_usd"] = json!(micros as f64 / aiwg_domain::usage::MICROS as f64);
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executions_on_one_model_add_up_and_a_model_named_by_none_is_the_runtimes() {
        let executions = Executions::default();
        let (first, _) = executions.add(&json!({"input_tokens": 10, "cost_usd": 0.5}), "m").unwrap();
        assert_eq!((first.model.as_str(), first.tokens.input, first.cost_micros), ("m", 10, Some(500_000)));
        let (total, usage) = executions.add(&json!({"model": "m", "input_tokens": 5}), "other").unwrap();
        assert_eq!((total.tokens.input, total.cost_micros), (15, Some(500_000)));
        assert_eq!((usage["input_tokens"].as_u64(), usage["cost_usd"].as_f64()), (Some(15), Some(0.5)));
        assert!(executions.add(&json!("lots"), "m").is_none());
        assert!(executions.add(&json!({"model": "m"}), "m").is_none(), "nothing reported");
    }
}
