//! What an agent's CLI says it used, read from its output at the end of a run: the `usage` the mission's
//! ending event carries (serve's `$defs/usage`: OpenTelemetry's names, cached tokens part of input).
//!
//! - Claude Code with `--output-format json` prints one result object as its last line:
//!   `{"type":"result", "result": "...", "total_cost_usd": 0.01, "usage": {"input_tokens", "output_tokens",
//!   "cache_read_input_tokens", "cache_creation_input_tokens", ...}, "modelUsage": {"<model>": {...}}}`.
//!   Anthropic counts cached tokens apart from `input_tokens`: they are added to it here. The model is
//!   the `modelUsage` entry that cost the most; the cost is `total_cost_usd`, reported.
//! - Codex's `exec --json` prints JSON lines, among them one `{"type":"turn.completed", "usage":
//!   {"input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens"}}` per turn
//!   (OpenAI counts cached tokens within input, as the conventions do): the run's usage is their sum. It
//!   names no model and no cost: serve prices it when `[pricing."codex"]` says how.
//!
//! Lines that are neither are the agent's own words; a CLI that prints no usage reports none.

use serde_json::{json, Map, Value};

/// How an adapter's CLI reports usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    None,
    ClaudeResult,
    CodexTurns,
}

/// The model named in the usage of a CLI that names none.
const CODEX_MODEL: &str = "codex";

/// What a run's output said it used so far.
#[derive(Debug)]
pub(crate) struct Tally {
    format: Format,
    usage: Option<Map<String, Value>>,
}

/// What a line the tally took says, for the mission's summary: its result text, if it has one.
pub(crate) enum Seen {
    /// Not a usage report: the agent's own line.
    Other,
    /// A usage report, with what the run answered (Claude's `result`), if it said.
    Report(Option<String>),
}

impl Tally {
    pub(crate) fn new(format: Format) -> Tally {
        Tally { format, usage: None }
    }

    /// Reads one line of the agent's stdout.
    pub(crate) fn line(&mut self, line: &str) -> Seen {
        let trimmed = line.trim();
        if self.format == Format::None || !trimmed.starts_with('{') {
            return Seen::Other;
        }
        let Ok(Value::Object(v)) = serde_json::from_str::<Value>(trimmed) else { return Seen::Other };
        match (self.format, v.get("type").and_then(Value::as_str)) {
            (Format::ClaudeResult, Some("result")) => {
                self.usage = claude(&v);
                Seen::Report(v.get("result").and_then(Value::as_str).map(str::to_owned))
            }
            (Format::CodexTurns, Some("turn.completed")) => {
                if let Some(turn) = v.get("usage").and_then(Value::as_object) {
                    self.add_codex_turn(turn);
                }
                Seen::Report(None)
            }
            _ => Seen::Other,
        }
    }

    /// What a whole output says was used (an HTTP runtime's run, read once it ended).
    pub(crate) fn of_output(format: Format, output: &[u8]) -> Option<Value> {
        let mut tally = Tally::new(format);
        for line in String::from_utf8_lossy(output).lines() {
            tally.line(line);
        }
        tally.usage()
    }

    /// The usage to report, once the output said any.
    pub(crate) fn usage(&self) -> Option<Value> {
        self.usage.clone().map(Value::Object)
    }

    fn add_codex_turn(&mut self, turn: &Map<String, Value>) {
        let usage = self.usage.get_or_insert_with(|| {
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
    }
}

/// A count of a CLI's report (a missing or odd one is 0).
fn count(v: &Map<String, Value>, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// Claude Code's result object as serve's usage.
fn claude(result: &Map<String, Value>) -> Option<Map<String, Value>> {
    let u = result.get("usage")?.as_object()?;
    let (read, created) = (count(u, "cache_read_input_tokens"), count(u, "cache_creation_input_tokens"));
    let mut usage = Map::new();
    usage.insert("input_tokens".into(), json!(count(u, "input_tokens").saturating_add(read).saturating_add(created)));
    usage.insert("output_tokens".into(), json!(count(u, "output_tokens")));
    usage.insert("cache_read_input_tokens".into(), json!(read));
    usage.insert("cache_creation_input_tokens".into(), json!(created));
    let costliest = result.get("modelUsage").and_then(Value::as_object).and_then(|models| {
        let cost = |m: &Value| m.get("costUSD").and_then(Value::as_f64).unwrap_or(0.0);
        models.iter().max_by(|a, b| cost(a.1).total_cmp(&cost(b.1))).map(|(name, _)| name.clone())
    });
    if let Some(model) = costliest.filter(|m| !m.is_empty() && m.chars().count() <= 200) {
        usage.insert("model".into(), json!(model));
    }
    if let Some(cost) = result.get("total_cost_usd").and_then(Value::as_f64).filter(|c| (0.0..=1e6).contains(c)) {
        usage.insert("cost_usd".into(), json!(cost));
    }
    Some(usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claude Code's `--output-format json` result, as it prints it (cached tokens apart from input).
    const CLAUDE_RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":3952,"num_turns":1,"result":"All tests pass.","session_id":"0b1","total_cost_usd":0.10457895,"usage":{"input_tokens":2,"cache_creation_input_tokens":7924,"cache_read_input_tokens":13368,"output_tokens":9,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"modelUsage":{"claude-haiku-4-5":{"inputTokens":300,"outputTokens":20,"costUSD":0.0004},"claude-sonnet-4-5":{"inputTokens":2,"outputTokens":9,"costUSD":0.1041}}}"#;

    #[test]
    fn claudes_result_is_its_usage_with_cached_tokens_in_input() {
        let mut tally = Tally::new(Format::ClaudeResult);
        assert!(matches!(tally.line("thinking about it"), Seen::Other));
        let Seen::Report(said) = tally.line(CLAUDE_RESULT) else { panic!("a report") };
        assert_eq!(said.as_deref(), Some("All tests pass."));
        assert_eq!(
            tally.usage(),
            Some(json!({"model": "claude-sonnet-4-5", "input_tokens": 21294, "output_tokens": 9,
                "cache_read_input_tokens": 13368, "cache_creation_input_tokens": 7924, "cost_usd": 0.10457895}))
        );
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
        assert_eq!(Tally::of_output(Format::ClaudeResult, output.as_bytes()).unwrap()["output_tokens"], 9);
        assert_eq!(Tally::of_output(Format::None, output.as_bytes()), None);
    }

    #[test]
    fn other_lines_and_other_formats_report_nothing() {
        let mut shell = Tally::new(Format::None);
        assert!(matches!(shell.line(CLAUDE_RESULT), Seen::Other));
        let mut claude = Tally::new(Format::ClaudeResult);
        for line in ["{not json", r#"{"type":"assistant"}"#, "[1]", r#"{"type":"result"}"#] {
            claude.line(line);
        }
        assert_eq!((shell.usage(), claude.usage()), (None, None));
    }
}
