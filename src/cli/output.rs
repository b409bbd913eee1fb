//! Everything the CLI prints on stdout goes through here: a reader that went away (`| head`) ends the
//! command quietly instead of panicking, colour is used only on a terminal, unless NO_COLOR is set, and
//! every line and table cell for a human is made printable (`aiwg_client::printable`): what serve shows
//! was written by whoever called it, and a newline or an escape sequence in it would forge lines or
//! rewrite the terminal. The only escape sequences printed are this module's own colours.

use std::fmt::Display;
use std::io::{ErrorKind, IsTerminal, Write};

use aiwg_client::printable;
use serde_json::Value;

use super::{Exit, Failure};

const BOLD: &str = "\x1b[1m";
const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const YELLOW: &str = "\x1b[33m";
const CYAN: &str = "\x1b[36m";
const MAGENTA: &str = "\x1b[35m";
const RESET: &str = "\x1b[0m";

pub(crate) struct Output {
    pub(crate) json: bool,
    /// The server as the operator named it, when not the default: printed commands name it too.
    pub(crate) server: Option<String>,
    colour: bool,
}

impl Output {
    pub(crate) fn new(json: bool) -> Output {
        // https://no-color.org: set and not empty means no colour.
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Output { json, server: None, colour: !json && !no_color && std::io::stdout().is_terminal() }
    }

    pub(crate) fn bytes(&self, bytes: &[u8]) -> Result<(), Failure> {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(bytes).and_then(|()| stdout.flush()).map_err(|e| match e.kind() {
            ErrorKind::BrokenPipe => Failure::StdoutClosed,
            _ => Failure::Exit(Exit::Failed, format!("cannot write to stdout: {e}")),
        })
    }

    /// One line for a human, made printable.
    pub(crate) fn line(&self, text: impl Display) -> Result<(), Failure> {
        self.printed(&printable(&text.to_string()))
    }

    /// One line for a human with a mission state coloured in it: `before`, the state, `after`, each made
    /// printable.
    pub(crate) fn line_with_state(&self, before: &str, state: &str, after: &str) -> Result<(), Failure> {
        self.printed(&format!("{}{}{}", printable(before), self.state(&printable(state)), printable(after)))
    }

    /// JSON for scripts, as serialized (its strings escaped the JSON way).
    pub(crate) fn json(&self, v: &Value) -> Result<(), Failure> {
        self.printed(&v.to_string())
    }

    fn printed(&self, text: &str) -> Result<(), Failure> {
        self.bytes(format!("{text}\n").as_bytes())
    }

    fn paint(&self, text: &str, colour: Option<&str>) -> String {
        match colour {
            Some(c) if self.colour => format!("{c}{text}{RESET}"),
            _ => text.to_owned(),
        }
    }

    /// A mission state (or an executor's CONNECTED value), coloured by what it means to an operator.
    fn state(&self, state: &str) -> String {
        let colour = match state {
            "done" | "yes" => Some(GREEN),
            "failed" | "no" => Some(RED),
            "aborted" | "paused" | "suspended" | "draining" => Some(YELLOW),
            "running" | "assigned" => Some(CYAN),
            "queued" | "hitl-required" => Some(MAGENTA),
            _ => None,
        };
        self.paint(state, colour)
    }

    /// Aligned columns of printable cells; the STATE and CONNECTED columns coloured by value, the header
    /// bold.
    pub(crate) fn table(&self, headers: &[&str], rows: Vec<Vec<String>>) -> Result<(), Failure> {
        let rows: Vec<Vec<String>> =
            rows.into_iter().map(|row| row.iter().map(|cell| printable(cell).into_owned()).collect()).collect();
        let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let pad =
            |cells: &[String]| -> Vec<String> { cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect() };
        let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
        self.printed(&self.paint(pad(&header).join("  ").trim_end(), Some(BOLD)))?;
        for row in rows {
            // Padding first, colour after: escape codes take no room on screen.
            let cells: Vec<String> = pad(&row)
                .into_iter()
                .zip(&row)
                .zip(headers)
                .map(|((padded, value), header)| match *header {
                    "STATE" | "CONNECTED" => padded.replacen(value.as_str(), &self.state(value), 1),
                    _ => padded,
                })
                .collect();
            self.printed(cells.join("  ").trim_end())?;
        }
        Ok(())
    }
}
