//! The agent's stdout and stderr, read as bytes: every byte into the mission's log (`log`), and each
//! line looked at for what serve is told beside it: on stdout a line `::hitl:: <prompt>` becomes a HITL
//! request and the others progress (at most one per `PROGRESS_EVERY`, the latest line wins, with what
//! the CLI says it used so far); the last line of each stream is kept for the mission's end, and so is
//! what the CLI said it used (`adapters::Tally`).

use std::sync::atomic::Ordering;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{ChildStderr, ChildStdout};
use tokio::time::Instant;

use super::{Executor, PROGRESS_EVERY, SUMMARY_CHARS};
use crate::adapters::{Seen, Tally};
use aiwg_contract::log::Stream;

/// How much is read at once.
const READ_BYTES: usize = 64 * 1024;
/// The longest line looked at whole: a longer one is looked at in pieces (the log has it all).
const MAX_LINE: usize = 64 * 1024;

/// What the agent's stdout said, once read to its end.
pub(super) struct Stdout {
    /// Its last line (HITL requests aside; a usage report's answer stands for it).
    pub(super) last: Option<String>,
    /// What the CLI reported it used, if it did.
    pub(super) usage: Option<Value>,
}

impl Executor {
    /// Reads the agent's stdout to its end.
    pub(super) async fn follow_stdout(&self, mission_id: &str, stdout: Option<ChildStdout>) -> Stdout {
        let tally = Tally::new(self.adapter.usage);
        let mut progress = Progress { iteration: 0, emitted: None, pending: None, last: None, tally };
        self.pump(mission_id, stdout, Stream::Stdout, |line| progress.line(self, mission_id, line)).await;
        if let Some(summary) = progress.pending.take() {
            progress.emit(self, mission_id, summary);
        }
        // The end names one model: the others' last figures go before it.
        for usage in progress.tally.others() {
            self.emit("mission.progress", mission_id, json!({"usage": usage}));
        }
        Stdout { last: progress.last, usage: progress.tally.usage() }
    }

    /// Reads the agent's stderr to its end; its last line that is not blank.
    pub(super) async fn follow_stderr(&self, mission_id: &str, stderr: Option<ChildStderr>) -> Option<String> {
        let mut last = None;
        self.pump(mission_id, stderr, Stream::Stderr, |line| {
            if !line.trim().is_empty() {
                last = Some(summary(line));
            }
        })
        .await;
        last
    }

    /// Every byte of `reader` into the mission's log, each line (without its end) to `line`.
    async fn pump<R: AsyncRead + Unpin>(
        &self,
        mission_id: &str,
        reader: Option<R>,
        stream: Stream,
        mut line: impl FnMut(&str),
    ) {
        let Some(mut reader) = reader else { return };
        let mut buffer = vec![0u8; READ_BYTES];
        let mut partial = Vec::new();
        loop {
            let read = match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => &buffer[..n],
            };
            self.logs.append(mission_id, stream, read).await;
            partial.extend_from_slice(read);
            let mut from = 0;
            while let Some(end) = partial[from..].iter().position(|&b| b == b'\n') {
                line(&text(&partial[from..from + end]));
                from += end + 1;
            }
            partial.drain(..from);
            if partial.len() >= MAX_LINE {
                line(&text(&partial));
                partial.clear();
            }
        }
        if !partial.is_empty() {
            line(&text(&partial));
        }
    }
}

/// A line as text: invalid UTF-8 replaced, a Windows line end dropped.
fn text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.strip_suffix('\r').unwrap_or(&text).to_owned()
}

fn summary(line: &str) -> String {
    line.chars().take(SUMMARY_CHARS).collect()
}

/// What stdout's lines have said so far.
struct Progress {
    iteration: u64,
    /// When the last progress event was sent.
    emitted: Option<Instant>,
    /// The latest line not sent yet (sent at the end if nothing comes after it).
    pending: Option<String>,
    last: Option<String>,
    tally: Tally,
}

impl Progress {
    fn line(&mut self, executor: &Executor, mission_id: &str, line: &str) {
        if let Some(prompt) = line.strip_prefix("::hitl::") {
            let n = executor.hitl_counter.fetch_add(1, Ordering::Relaxed) + 1;
            executor.emit(
                "mission.hitl_required",
                mission_id,
                json!({"hitl_id": format!("{mission_id}-h{n}"), "prompt": prompt.trim()}),
            );
            return;
        }
        let summary = match self.tally.line(line) {
            Seen::Other => summary(line),
            Seen::Said(said) => summary(&said),
            Seen::Quiet => return,
            // The CLI's report of what it used is no line of the agent's: its answer, if it has one, is.
            Seen::Report(said) => {
                self.last = said.as_deref().map(summary).or(self.last.take());
                return;
            }
        };
        self.last = Some(summary.clone());
        if self.emitted.is_none_or(|at| at.elapsed() >= PROGRESS_EVERY) {
            self.emit(executor, mission_id, summary);
        } else {
            self.pending = Some(summary);
        }
    }

    /// A progress event: the summary, and what the CLI said it used if that changed since the last.
    fn emit(&mut self, executor: &Executor, mission_id: &str, summary: String) {
        self.iteration += 1;
        let mut data = json!({"summary": summary, "iteration": self.iteration});
        if let Some(usage) = self.tally.take_changed() {
            data["usage"] = usage;
        }
        executor.emit("mission.progress", mission_id, data);
        self.emitted = Some(Instant::now());
        self.pending = None;
    }
}
