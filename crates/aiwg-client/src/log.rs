//! Following a mission's log (`GET /api/v1/missions/{id}/log?follow=true`) across drops and restarts of
//! serve: the bytes as serve received them (`Accept: application/octet-stream`), counted, so that a
//! follow that lost its connection asks again from the position it reached and nothing is shown twice
//! or missed. Serve shows dropped bytes as one line that says where the log resumes
//! ([`aiwg_contract::log::gap_line`]); the follower sets its count from it.

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use reqwest::header::ACCEPT;
use reqwest::Method;
use serde_json::Value;

use super::patience::Patience;
use super::{cause, refusal, CallError, Client};
use aiwg_contract::encode_segment;
use aiwg_contract::log::{gap_resumes_at, GAP_PREFIX};

/// A gap line is short; a "line" past this after the prefix is the agent's own text.
const MAX_GAP_LINE: usize = 256;

type Bytes = Pin<Box<dyn Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// Where a follow starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStart {
    /// At this position (in the stream's positions when following one stream).
    Offset(u64),
    /// At the start of the last N lines.
    Tail(u64),
}

/// A followed log. [`LogFollower::next`] gives its bytes as they come.
pub struct LogFollower {
    client: Client,
    mission_id: String,
    stream: Option<String>,
    start: LogStart,
    body: Option<Bytes>,
    /// The end of what was read when it may be the start of a gap line, to look at with the next bytes.
    scan: Vec<u8>,
    patience: Patience,
    done: bool,
}

impl Client {
    /// Follows a mission's log (its exact id: a prefix is resolved first by the caller), one stream of
    /// it (`stdout`, `stderr`) or both, until the mission ends.
    pub fn follow_log(&self, mission_id: &str, stream: Option<&str>, start: LogStart) -> LogFollower {
        LogFollower {
            client: self.clone(),
            mission_id: mission_id.to_owned(),
            stream: stream.map(str::to_owned),
            start,
            body: None,
            scan: Vec::new(),
            patience: Patience::default(),
            done: false,
        }
    }
}

impl LogFollower {
    /// The next bytes of the log; `None` once the mission has ended and every byte was given. A drop
    /// is waited out (see `patience`); a refusal (an unknown mission, a compacted one) is the error.
    pub async fn next(&mut self) -> Result<Option<Vec<u8>>, CallError> {
        while !self.done {
            if self.body.is_none() {
                match self.open().await {
                    Ok(body) => {
                        self.body = Some(body);
                        if self.patience.opened() {
                            eprintln!("serve is back; following the log on from offset {}", self.position());
                        }
                    }
                    Err(e @ CallError::Refused { .. }) => return Err(e),
                    Err(e) => {
                        self.patience.back_off(e).await?;
                        continue;
                    }
                }
            }
            match self.body.as_mut().expect("opened above").next().await {
                Some(Ok(bytes)) => {
                    self.patience.heard();
                    let out = self.take(&bytes);
                    if !out.is_empty() {
                        return Ok(Some(out));
                    }
                }
                Some(Err(e)) => {
                    self.body = None;
                    let lost = CallError::Unreachable { url: self.client.base.clone(), cause: cause(&e) };
                    self.patience.back_off(lost).await?;
                }
                None => {
                    self.body = None;
                    self.ended_or_stopped().await?;
                }
            }
        }
        Ok(None)
    }

    /// The position the follow has reached (where it would ask again from).
    pub fn position(&self) -> u64 {
        match self.start {
            LogStart::Offset(n) => n,
            LogStart::Tail(_) => 0,
        }
    }

    /// An answer that ended: the mission ended, or serve stopped (asked again).
    async fn ended_or_stopped(&mut self) -> Result<(), CallError> {
        let path = format!("/api/v1/missions/{}", encode_segment(&self.mission_id));
        match self.client.get(&path).await {
            Ok(mission) if ended(&mission) => {
                self.done = true;
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e @ CallError::Refused { .. }) => Err(e),
            Err(e) => self.patience.back_off(e).await,
        }
    }

    async fn open(&mut self) -> Result<Bytes, CallError> {
        let mut query = match self.start {
            LogStart::Offset(n) => format!("follow=true&offset={n}"),
            LogStart::Tail(n) => format!("follow=true&tail={n}"),
        };
        if let Some(s) = &self.stream {
            query.push_str(&format!("&stream={s}"));
        }
        let path = format!("/api/v1/missions/{}/log?{query}", encode_segment(&self.mission_id));
        let request = self.client.request(Method::GET, &path).header(ACCEPT, "application/octet-stream");
        let response = self.client.send(request).await?;
        let status = response.status().as_u16();
        if status != 200 {
            let json = response.json::<Value>().await.unwrap_or(Value::Null);
            return Err(refusal(status, &json));
        }
        // A tail's start is known once serve has found it; from then on the follow counts.
        let offset = response.headers().get("x-aiwg-log-offset").and_then(|v| v.to_str().ok()?.parse().ok());
        self.start = LogStart::Offset(offset.unwrap_or(self.position()));
        self.scan.clear();
        Ok(Box::pin(response.bytes_stream()))
    }

    /// Counts `bytes`, which are given on at once; a gap line sets the count to where it says the log
    /// resumes (its bytes are not the log's). A gap line cut between two chunks is recognised whole:
    /// what may be its start is kept to look at with the next bytes.
    fn take(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut position = self.position() + bytes.len() as u64;
        self.scan.extend_from_slice(bytes);
        let prefix = GAP_PREFIX.as_bytes();
        loop {
            let Some(at) = find(&self.scan, prefix) else {
                let keep = (1..prefix.len()).rev().find(|&n| self.scan.ends_with(&prefix[..n])).unwrap_or(0);
                self.scan.drain(..self.scan.len() - keep);
                break;
            };
            match self.scan[at + 1..].iter().position(|&b| b == b'\n') {
                Some(newline) => {
                    let end = at + newline + 2;
                    if let Some(resumes) = gap_resumes_at(&String::from_utf8_lossy(&self.scan[at..end])) {
                        position = resumes + (self.scan.len() - end) as u64;
                    }
                    self.scan.drain(..end);
                }
                // Too long to be a gap line: the agent's own text.
                None if self.scan.len() - at > MAX_GAP_LINE => {
                    self.scan.drain(..=at);
                }
                None => {
                    self.scan.drain(..at);
                    break;
                }
            }
        }
        self.start = LogStart::Offset(position);
        bytes.to_vec()
    }
}

fn ended(mission: &Value) -> bool {
    matches!(mission["state"].as_str(), Some("done" | "failed" | "aborted"))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aiwg_contract::log::gap_line;

    fn follower(offset: u64) -> LogFollower {
        Client::new("http://127.0.0.1:9", None).follow_log("m-1", None, LogStart::Offset(offset))
    }

    #[test]
    fn bytes_are_counted_and_a_gap_line_sets_the_count_where_the_log_resumes() {
        let mut f = follower(10);
        assert_eq!(f.take(b"hello\n"), b"hello\n");
        assert_eq!(f.position(), 16, "given and counted at once, its newline too");
        let gap = gap_line(5_000, 40, 9_000);
        // The gap line arrives cut in three, between the agent's bytes.
        let all = [b"more".as_slice(), gap.as_bytes(), b"tail\n"].concat();
        let (a, rest) = all.split_at(8);
        let (b, c) = rest.split_at(20);
        let mut shown = f.take(a);
        shown.extend(f.take(b));
        shown.extend(f.take(c));
        assert_eq!(shown, all, "everything is shown, the gap line too");
        assert_eq!(f.position(), 9_000 + 5, "counted from where the gap line says the log resumes");
    }

    #[test]
    fn text_that_only_looks_like_a_gap_line_is_counted_as_bytes() {
        let mut f = follower(0);
        let fake = format!("{GAP_PREFIX}not a gap]\n");
        assert_eq!(f.take(fake.as_bytes()), fake.as_bytes());
        assert_eq!(f.position(), fake.len() as u64);
        let long = format!("{GAP_PREFIX}{}", "x".repeat(MAX_GAP_LINE + 10));
        f.take(long.as_bytes());
        f.take(b"\n");
        assert_eq!(f.position(), (fake.len() + long.len() + 1) as u64, "too long to be a gap line");
        assert_eq!(f.scan, b"\n", "only what may start a gap line is kept to look at");
    }
}
