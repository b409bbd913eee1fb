//! What an agent's CLI says it used, read from its output as it runs: the `usage` of the mission's
//! progress events and of its ending event (serve's `$defs/usage`: OpenTelemetry's names, cached tokens
//! part of input, cumulative per model).
//!
//! - Claude Code with `--output-format stream-json --verbose` prints a JSON line per step: `assistant`
//!   messages (`{"type":"assistant","message":{"id","model","content":[{"type":"text","text"}],"usage":
//!   {"input_tokens","output_tokens","cache_read_input_tokens","cache_creation_input_tokens"}}}`, one
//!   line per content block, each repeating its message's usage), tool results (`user`), and at the end
//!   one `result` object: `{"result": "...", "total_cost_usd", "usage": {...}, "modelUsage": {"<model>":
//!   {"inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens", "costUSD"}}}`.
//!   As it runs, each model's usage is the sum of its messages' (each counted once, at its largest); the
//!   result's replaces it, per model, with the cost reported. Anthropic counts cached tokens apart from
//!   `input_tokens`: they are added to it here. A message's text is the agent's words (the progress
//!   summary); the other lines are the CLI's bookkeeping (in the log, never a summary).
//! - Codex's `exec --json` prints JSON lines, among them one `{"type":"turn.completed", "usage":
//!   {"input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens"}}` per turn
//!   (OpenAI counts cached tokens within input, as the conventions do): the run's usage is their sum. It
//!   names no model and no cost: serve prices it when `[pricing."codex"]` says how.
//!
//! Lines that are neither are the agent's own words; a CLI that prints no usage reports none. Every
//! model's figures only grow, so serve, which keeps the largest it saw per model, never counts twice.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};

/// How an adapter's CLI reports usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    None,
    ClaudeStream,
    CodexTurns,
}

/// The model named in the usage of a CLI that names none.
const CODEX_MODEL: &str = "codex";
/// The model of a Claude message or result that names none.
const CLAUDE_MODEL: &str = "claude";
/// Claude messages counted as a run goes, at most (far more than a run has; past it, the result alone
/// says what the rest used).
const MAX_MESSAGES: usize = 10_000;
/// The longest model name serve takes (`$defs/usage`).
const MAX_MODEL: usize = 200;

/// What a run's output said it used so far.
#[derive(Debug)]
pub(crate) struct Tally {
    format: Format,
    /// Each model's usage as the output last left it.
    models: BTreeMap<String, Map<String, Value>>,
    /// Claude's messages counted so far: each one's model and counts (input, output, cache read, cache
    /// creation), the largest its lines said.
    messages: HashMap<String, (String, [u64; 4])>,
    /// The model Claude's result cost the most on: the one the mission's end names.
    main: Option<String>,
    /// The model whose usage changed since [`Tally::take_changed`] last looked.
    changed: Option<String>,
}

/// What a line the tally took says, for the mission's summary.
pub(crate) enum Seen {
    /// Not the CLI's: the agent's own line.
    Other,
    /// The CLI's words for what the agent said (a Claude message's text).
    Said(String),
    /// The CLI's bookkeeping: no summary.
    Quiet,
    /// The run's final report, with what the run answered (Claude's `result`), if it said.
    Report(Option<String>),
}

impl Tally {
    pub(crate) fn new(format: Format) -> Tally {
        Tally { format, models: BTreeMap::new(), messages: HashMap::new(), main: None, changed: None }
    }

    /// Reads one line of the agent's stdout.
    pub(crate) fn line(&mut self, line: &str) -> Seen {
        let trimmed = line.trim();
        if self.format == Format::None || !trimmed.starts_with('{') {
            return Seen::Other;
        }
        let Ok(Value::Object(v)) = serde_json::from_str::<Value>(trimmed) else { return Seen::Other };
        let kind = v.get("type").and_then(Value::as_str);
        match (self.format, kind) {
            (Format::ClaudeStream, Some("result")) => {
                self.claude_result(&v);
                Seen::Report(v.get("result").and_then(Value::as_str).map(str::to_owned))
            }
            (Format::ClaudeStream, Some("assistant")) => match v.get("message").and_then(Value::as_object) {
                Some(message) => self.claude_message(message),
                None => Seen::Quiet,
            },
            (Format::ClaudeStream, Some(_)) => Seen::Quiet,
            (Format::CodexTurns, Some("turn.completed")) => {
                if let Some(turn) = v.get("usage").and_then(Value::as_object) {
                    self.add_codex_turn(turn);
                }
                Seen::Report(None)
            }
            _ => Seen::Other,
        }
    }

    /// What a whole output says was used (an HTTP runtime's run, read once it ended). Its answer carries
    /// one usage: every model's counts and cost, summed under the main model's name.
    pub(crate) fn of_output(format: Format, output: &[u8]) -> Option<Value> {
        let mut tally = Tally::new(format);
        for line in String::from_utf8_lossy(output).lines() {
            tally.line(line);
        }
        let mut total = tally.usage()?;
        for other in tally.others() {
            for (key, n) in other.as_object().into_iter().flatten() {
                let summed = match (total.get(key), key.as_str()) {
                    (_, "model") => continue,
                    (Some(t), "cost_usd") => json!(t.as_f64().unwrap_or(0.0) + n.as_f64().unwrap_or(0.0)),
                    (t, _) => json!(t.and_then(Value::as_u64).unwrap_or(0).saturating_add(n.as_u64().unwrap_or(0))),
                };
                total[key] = summed;
            }
        }
        Some(total)
    }

    /// The usage the mission's end reports: its main model's (the result's costliest, else the one that
    /// used the most tokens).
    pub(crate) fn usage(&self) -> Option<Value> {
        self.main_model().and_then(|m| self.models.get(m)).cloned().map(Value::Object)
    }

    /// The usage of every model but the main one, for the progress events sent before the end.
    pub(crate) fn others(&self) -> Vec<Value> {
        let main = self.main_model();
        self.models.iter().filter(|(m, _)| Some(m.as_str()) != main).map(|(_, u)| Value::Object(u.clone())).collect()
    }

    /// The usage of the model that changed since the last call, if one did.
    pub(crate) fn take_changed(&mut self) -> Option<Value> {
        let model = self.changed.take()?;
        self.models.get(&model).cloned().map(Value::Object)
    }

    fn main_model(&self) -> Option<&str> {
        let tokens = |u: &Map<String, Value>| count(u, "input_tokens").saturating_add(count(u, "output_tokens"));
        let most = || self.models.iter().max_by_key(|(_, u)| tokens(u)).map(|(m, _)| m.as_str());
        self.main.as_deref().filter(|m| self.models.contains_key(*m)).or_else(most)
    }

    fn set(&mut self, model: String, mut usage: Map<String, Value>) {
        usage.insert("model".into(), json!(model));
        self.changed = Some(model.clone());
        self.models.insert(model, usage);
    }

    /// A Claude message's line: its usage counted (once per message, at its largest), its text said.
    fn claude_message(&mut self, message: &Map<String, Value>) -> Seen {
        let id = message.get("id").and_then(Value::as_str);
        let usage = message.get("usage").and_then(Value::as_object);
        if let (Some(id), Some(u)) = (id, usage) {
            let model = model_name(message.get("model"));
            let counts = [
                count(u, "input_tokens"),
                count(u, "output_tokens"),
                count(u, "cache_read_input_tokens"),
                count(u, "cache_creation_input_tokens"),
            ];
            if self.messages.len() < MAX_MESSAGES || self.messages.contains_key(id) {
                let entry = self.messages.entry(id.to_owned()).or_insert_with(|| (model.clone(), [0; 4]));
                let grown = entry.1.iter().zip(counts).any(|(was, now)| now > *was);
                if grown {
                    entry.1 = std::array::from_fn(|i| entry.1[i].max(counts[i]));
                    let summed = self
                        .messages
                        .values()
                        .filter(|(m, _)| *m == model)
                        .fold([0u64; 4], |acc, (_, c)| std::array::from_fn(|i| acc[i].saturating_add(c[i])));
                    let [input, output, read, created] = summed;
                    self.set(model, anthropic(input, output, read, created, None));
                }
            }
        }
        let text: Vec<&str> = message
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .filter(|t| !t.trim().is_empty())
            .collect();
        match text.first() {
            Some(first) => Seen::Said(first.lines().find(|l| !l.trim().is_empty()).unwrap_or(first).to_owned()),
            None => Seen::Quiet,
        }
    }

    /// Claude's result: each model's usage as the result says it, cost reported. Per model where every
    /// `modelUsage` entry has its counts; otherwise the whole `usage` under the costliest model.
    fn claude_result(&mut self, result: &Map<String, Value>) {
        let models = result.get("modelUsage").and_then(Value::as_object).filter(|m| !m.is_empty());
        let cost = |m: &Value| m.get("costUSD").and_then(Value::as_f64).unwrap_or(0.0);
        let costliest = models.and_then(|m| m.iter().max_by(|a, b| cost(a.1).total_cmp(&cost(b.1))));
        let per_model = models.filter(|m| {
            m.len() > 1 && m.values().all(|u| u.get("inputTokens").is_some() && u.get("outputTokens").is_some())
        });
        if let Some(models) = per_model {
            for (name, u) in models {
                let Some(u) = u.as_object() else { continue };
                let (input, output) = (count(u, "inputTokens"), count(u, "outputTokens"));
                let (read, created) = (count(u, "cacheReadInputTokens"), count(u, "cacheCreationInputTokens"));
                let usage = anthropic(input, output, read, created, u.get("costUSD").and_then(Value::as_f64));
                self.set(model_name(Some(&json!(name))), usage);
            }
        } else if let Some(u) = result.get("usage").and_then(Value::as_object) {
            let model = match costliest {
                Some((name, _)) => model_name(Some(&json!(name))),
                None => self.main_model().unwrap_or(CLAUDE_MODEL).to_owned(),
            };
            let (input, output) = (count(u, "input_tokens"), count(u, "output_tokens"));
            let (read, created) = (count(u, "cache_read_input_tokens"), count(u, "cache_creation_input_tokens"));
            let cost = result.get("total_cost_usd").and_then(Value::as_f64);
            self.set(model, anthropic(input, output, read, created, cost));
        }
        self.main = costliest.map(|(name, _)| model_name(Some(&json!(name))));
    }

    fn add_codex_turn(&mut self, turn: &Map<String, Value>) {
        let mut usage = self.models.remove(CODEX_MODEL).unwrap_or_else(|| {
            let mut u = Map::new();
            u.insert("model".into(), json!(CODEX_MODEL));
            u
        });
        for (theirs, ours) in [
            ("input_tokens", "input_tokens"),
            ("cached_input_tokens", "cache_read_input_tokens"),
            ("output_tokens", "output_tokens"),
            ("reasoning_output_tokens", "reasoning_output_tokens"),
        ] {
            let n = count(turn, theirs);
            let was = usage.get(ours).and_then(Value::as_u64).unwrap_or(0);
            usage.insert(ours.into(), json!(was.saturating_add(n)));
        }
        self.set(CODEX_MODEL.to_owned(), usage);
    }
}

/// A count of a CLI's report (a missing or odd one is 0).
fn count(v: &Map<String, Value>, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// A model's name as serve takes it (a missing, empty or overlong one is Claude's generic name).
fn model_name(v: Option<&Value>) -> String {
    let fits = |m: &&str| !m.is_empty() && m.chars().count() <= MAX_MODEL && !m.contains('\0');
    v.and_then(Value::as_str).filter(fits).unwrap_or(CLAUDE_MODEL).to_owned()
}

/// Anthropic's counts as serve's usage: cached tokens, counted apart by Anthropic, added to input.
fn anthropic(input: u64, output: u64, read: u64, created: u64, cost_usd: Option<f64>) -> Map<String, Value> {
    let mut usage = Map::new();
    usage.insert("input_tokens".into(), json!(input.saturating_add(read).saturating_add(created)));
    usage.insert("output_tokens".into(), json!(output));
    usage.insert("cache_read_input_tokens".into(), json!(read));
    usage.insert("cache_creation_input_tokens".into(), json!(created));
    if let Some(cost) = cost_usd.filter(|c| (0.0..=1e6).contains(c)) {
        usage.insert("cost_usd".into(), json!(cost));
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claude Code's result line, as it prints it (cached tokens apart from input).
    const CLAUDE_RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":3952,"num_turns":1,"result":"All tests pass.","session_id":"0b1","total_cost_usd":0.10457895,"usage":{"input_tokens":2,"cache_creation_input_tokens":7924,"cache_read_input_tokens":13368,"output_tokens":9,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":2,"outputTokens":9,"cacheReadInputTokens":13368,"cacheCreationInputTokens":7924,"costUSD":0.1041}}}"#;

    #[test]
    fn claudes_result_is_its_usage_with_cached_tokens_in_input() {
        let mut tally = Tally::new(Format::ClaudeStream);
        assert!(matches!(tally.line("thinking about it"), Seen::Other));
        let Seen::Report(said) = tally.line(CLAUDE_RESULT) else { panic!("a report") };
        assert_eq!(said.as_deref(), Some("All tests pass."));
        assert_eq!(
            tally.usage(),
            Some(json!({"model": "claude-sonnet-4-5", "input_tokens": 21294, "output_tokens": 9,
                "cache_read_input_tokens": 13368, "cache_creation_input_tokens": 7924, "cost_usd": 0.10457895}))
        );
        assert!(tally.others().is_empty(), "one model");
    }

    /// A message's lines repeat its usage as it grows: each message counts once, at its largest, per
    /// model; its text is what the agent said; the CLI's other lines are bookkeeping.
    #[test]
    fn claudes_stream_counts_each_message_once_as_it_goes() {
        let message = |id: &str, model: &str, input: u64, output: u64, text: Option<&str>| {
            let content =
                text.map_or(json!([{"type": "tool_use", "name": "Bash"}]), |t| json!([{"type": "text", "text": t}]));
            json!({"type": "assistant", "message": {"id": id, "model": model, "content": content,
                "usage": {"input_tokens": input, "output_tokens": output, "cache_read_input_tokens": 100}}})
            .to_string()
        };
        let mut tally = Tally::new(Format::ClaudeStream);
        assert!(matches!(tally.line(r#"{"type":"system","subtype":"init","model":"m"}"#), Seen::Quiet));
        assert!(
            matches!(tally.line(&message("a", "sonnet", 5, 1, Some("Reading.\nmore"))), Seen::Said(s) if s == "Reading.")
        );
        assert_eq!(tally.take_changed().unwrap()["input_tokens"], 105);
        assert!(tally.take_changed().is_none(), "nothing changed since");
        assert!(matches!(tally.line(&message("a", "sonnet", 5, 40, None)), Seen::Quiet));
        assert_eq!(tally.take_changed().unwrap()["output_tokens"], 40, "the message grew");
        assert!(matches!(tally.line(&message("a", "sonnet", 5, 40, None)), Seen::Quiet));
        assert!(tally.take_changed().is_none(), "a repeated line adds nothing");
        tally.line(&message("b", "haiku", 7, 2, None));
        tally.line(&message("c", "sonnet", 10, 3, None));
        assert_eq!(
            tally.usage(),
            Some(json!({"model": "sonnet", "input_tokens": 215, "output_tokens": 43, "cache_read_input_tokens": 200,
                "cache_creation_input_tokens": 0}))
        );
        assert_eq!(
            tally.others(),
            [json!({"model": "haiku", "input_tokens": 107, "output_tokens": 2,
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 0})]
        );
        // The result replaces both, per model, with what each cost.
        let result = json!({"type": "result", "result": "Done.", "total_cost_usd": 0.5, "modelUsage": {
            "sonnet": {"inputTokens": 15, "outputTokens": 50, "cacheReadInputTokens": 300, "cacheCreationInputTokens": 0, "costUSD": 0.4},
            "haiku": {"inputTokens": 7, "outputTokens": 2, "cacheReadInputTokens": 100, "cacheCreationInputTokens": 0, "costUSD": 0.1}}});
        assert!(matches!(tally.line(&result.to_string()), Seen::Report(Some(s)) if s == "Done."));
        assert_eq!(tally.usage().unwrap()["input_tokens"], 315);
        assert_eq!(tally.usage().unwrap()["cost_usd"], 0.4);
        assert_eq!(tally.others()[0]["cost_usd"], 0.1);
    }

    #[test]
    fn codexs_turns_add_up() {
        let mut tally = Tally::new(Format::CodexTurns);
        tally.line(r#"{"type":"thread.started","thread_id":"t"}"#);
        let turn = r#"{"type":"turn.completed","usage":{"input_tokens":1000,"cached_input_tokens":400,"output_tokens":50,"reasoning_output_tokens":20}}"#;
        assert!(matches!(tally.line(turn), Seen::Report(None)));
        tally.line(turn);
        assert_eq!(
            tally.usage(),
            Some(json!({"model": "codex", "input_tokens": 2000, "cache_read_input_tokens": 800, "output_tokens": 100,
                "reasoning_output_tokens": 40}))
        );
    }

    #[test]
    fn a_whole_output_is_read_line_by_line() {
        let output = format!("working\n{CLAUDE_RESULT}\n");
        assert_eq!(Tally::of_output(Format::ClaudeStream, output.as_bytes()).unwrap()["output_tokens"], 9);
        assert_eq!(Tally::of_output(Format::None, output.as_bytes()), None);
    }

    /// An HTTP runtime's answer carries one usage: a run on two models is reported whole, under the
    /// costliest model's name, not as that model's part alone.
    #[test]
    fn a_whole_output_on_several_models_is_summed_under_the_main_one() {
        let result = json!({"type": "result", "result": "Done.", "modelUsage": {
            "sonnet": {"inputTokens": 15, "outputTokens": 50, "cacheReadInputTokens": 300, "cacheCreationInputTokens": 0, "costUSD": 0.5},
            "haiku": {"inputTokens": 7, "outputTokens": 2, "cacheReadInputTokens": 100, "cacheCreationInputTokens": 0, "costUSD": 0.25}}});
        assert_eq!(
            Tally::of_output(Format::ClaudeStream, result.to_string().as_bytes()),
            Some(json!({"model": "sonnet", "input_tokens": 422, "output_tokens": 52, "cache_read_input_tokens": 400,
                "cache_creation_input_tokens": 0, "cost_usd": 0.75}))
        );
    }

    #[test]
    fn other_lines_and_other_formats_report_nothing() {
        let mut shell = Tally::new(Format::None);
        assert!(matches!(shell.line(CLAUDE_RESULT), Seen::Other));
        let mut claude = Tally::new(Format::ClaudeStream);
        for line in ["{not json", r#"{"type":"assistant"}"#, "[1]", r#"{"type":"result"}"#] {
            claude.line(line);
        }
        assert_eq!((shell.usage(), claude.usage()), (None, None));
    }
}
