//! Reading a mission's log back as text: from a position, or its last lines; followed while the
//! mission lives.
//!
//! The answer is the log's bytes as received, both streams interleaved (or one), made UTF-8 lossily (a
//! character cut between two rows is joined again), with a line in place of the bytes the cap dropped
//! ([`gap_line`]). Positions are those of `aiwg_domain::log`: the answer says where its first byte is,
//! and a reader that counts the bytes it was given (less the gap lines, whose text says where the log
//! resumes) knows where to ask again.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::BoxStream;
use tokio::sync::{broadcast, watch};

use super::Logs;
use crate::error::{Error, Result};
use crate::store::{LogMeta, LogQuery};
use aiwg_contract::log::gap_line;
use aiwg_contract::log::Stream;
use aiwg_domain::log::{lossy_flush, lossy_text, LogRow, LogState};

/// Rows read at once: at most 64 KiB each.
const PAGE_ROWS: u32 = 64;
/// Rows' places read at once when looking for a tail's start.
const META_PAGE: u32 = 256;
/// A follower looks at its mission's state at least this often (its end, a restart's shutdown).
const RECHECK: Duration = Duration::from_millis(500);

/// Where a read starts: at a position (in the whole log's positions, or its stream's), or at the
/// start of its last lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    Offset(u64),
    Tail(u64),
}

/// A read of a mission's log.
#[derive(Clone, Debug)]
pub(crate) struct LogRead {
    pub(crate) mission_id: String,
    pub(crate) stream: Option<Stream>,
    pub(crate) start: Start,
    /// Kept open, and new bytes sent as they come, until the mission ends (or serve stops).
    pub(crate) follow: bool,
    /// The bytes as received, not made UTF-8: for a reader that counts positions (a follower that
    /// resumes) and decodes itself.
    pub(crate) raw: bool,
}

/// The answer to a read: the position of its first byte, the log's end when it was read, and its text.
pub(crate) struct LogText {
    pub(crate) offset: u64,
    pub(crate) end: u64,
    pub(crate) body: BoxStream<'static, std::result::Result<Vec<u8>, std::io::Error>>,
}

/// One read under way: where it is, what it carries of a cut character.
struct Reader {
    logs: Arc<Logs>,
    q: LogRead,
    pos: u64,
    state: LogState,
    carry: Vec<u8>,
    grew: broadcast::Receiver<Arc<str>>,
    shutdown: watch::Receiver<bool>,
    /// The mission has ended (or serve stops): one last read, then the answer ends.
    last: bool,
    done: bool,
}

impl Logs {
    /// Reads a mission's log (see [`LogRead`]). The mission must exist (the caller resolved it); a
    /// mission retention compacted has no log left: 410.
    pub(crate) async fn read(self: &Arc<Self>, q: LogRead, shutdown: watch::Receiver<bool>) -> Result<LogText> {
        let grew = self.subscribe();
        let store = self.store();
        let mission = store.mission(&q.mission_id).await?;
        if mission.as_ref().is_some_and(|m| m.compacted_at.is_some()) {
            return Err(Error::MissionCompacted(format!(
                "mission {}'s history was compacted by retention: its log, if it had one, was removed",
                q.mission_id
            )));
        }
        let state = store.log_state(&q.mission_id).await?.unwrap_or_else(|| LogState::new(&q.mission_id));
        let end = q.stream.map_or(state.end, |s| state.stream_end(s));
        let offset = match q.start {
            Start::Offset(n) => n,
            Start::Tail(n) => self.tail_start(&q.mission_id, q.stream, n, end).await?,
        };
        let reader = Reader {
            logs: self.clone(),
            q,
            pos: offset,
            state,
            carry: Vec::new(),
            grew,
            shutdown,
            last: false,
            done: false,
        };
        let body = futures_util::stream::unfold(reader, |mut r| async move {
            let next = r.next().await;
            next.map(|text| (text, r))
        });
        Ok(LogText { offset, end, body: Box::pin(body) })
    }

    /// Where the last `n` lines begin: after the `n`-th newline from the end, or the `n + 1`-th when
    /// the log ends with one (its last line is whole); the first byte kept when it has fewer lines.
    async fn tail_start(&self, mission_id: &str, stream: Option<Stream>, n: u64, end: u64) -> Result<u64> {
        let store = self.store();
        let coordinate = |m: &LogMeta| if stream.is_some() { m.stream_pos } else { m.pos };
        let newest = store.log_rows(LogQuery { mission_id, stream, from: end.saturating_sub(1), rows: 1 }).await?;
        let Some(last) = newest.last() else { return Ok(end) };
        let need = n + u64::from(last.bytes.last() == Some(&b'\n'));
        if need == 0 {
            return Ok(end);
        }
        let (mut counted, mut before, mut oldest) = (0u64, u64::MAX, None);
        loop {
            let page = store.log_meta(mission_id, stream, before, true, META_PAGE).await?;
            for meta in &page {
                if counted + meta.lines >= need {
                    let row = store.log_rows(LogQuery { mission_id, stream, from: coordinate(meta), rows: 1 }).await?;
                    let bytes = row.first().map_or(&[][..], |r| r.bytes.as_slice());
                    let nth = need - counted;
                    let at = bytes.iter().enumerate().rev().filter(|(_, b)| **b == b'\n').nth((nth - 1) as usize);
                    return Ok(coordinate(meta) + at.map_or(0, |(i, _)| i as u64 + 1));
                }
                counted += meta.lines;
                oldest = Some(coordinate(meta));
            }
            match page.last() {
                Some(m) if page.len() as u32 == META_PAGE => before = m.pos,
                _ => return Ok(oldest.unwrap_or(end)),
            }
        }
    }
}

impl Reader {
    /// The next piece of text: what the next rows hold, or (following) what comes once it comes.
    async fn next(&mut self) -> Option<std::result::Result<Vec<u8>, std::io::Error>> {
        while !self.done {
            let q = LogQuery { mission_id: &self.q.mission_id, stream: self.q.stream, from: self.pos, rows: PAGE_ROWS };
            let rows = match self.logs.store().log_rows(q).await {
                Ok(rows) => rows,
                Err(e) => {
                    self.done = true;
                    return Some(Err(std::io::Error::other(e.to_string())));
                }
            };
            if !rows.is_empty() {
                let bytes = self.bytes(&rows);
                if !bytes.is_empty() {
                    return Some(Ok(bytes));
                }
                continue;
            }
            if !self.q.follow || self.last {
                self.done = true;
                let mut tail = String::new();
                lossy_flush(&mut self.carry, &mut tail);
                return (!tail.is_empty()).then_some(Ok(tail.into_bytes()));
            }
            self.wait().await;
        }
        None
    }

    /// The rows' bytes from the reader's position on (as text unless raw), a gap line wherever bytes
    /// are missing.
    fn bytes(&mut self, rows: &[LogRow]) -> Vec<u8> {
        let (mut text, mut raw) = (String::new(), Vec::new());
        for row in rows {
            let start = if self.q.stream.is_some() { row.stream_pos } else { row.pos };
            if start > self.pos {
                let gap = gap_line(self.state.dropped(), self.state.dropped_lines, start);
                match self.q.raw {
                    true => raw.extend_from_slice(gap.as_bytes()),
                    false => {
                        lossy_flush(&mut self.carry, &mut text);
                        text.push_str(&gap);
                    }
                }
                self.pos = start;
            }
            let skip = usize::try_from(self.pos - start).unwrap_or(usize::MAX).min(row.bytes.len());
            match self.q.raw {
                true => raw.extend_from_slice(&row.bytes[skip..]),
                false => lossy_text(&mut self.carry, &row.bytes[skip..], &mut text),
            }
            self.pos = start + row.bytes.len() as u64;
        }
        if self.q.raw {
            raw
        } else {
            text.into_bytes()
        }
    }

    /// Waits for the log to grow, the mission to end, or serve to stop; then reads the state again.
    async fn wait(&mut self) {
        let mission_id = self.q.mission_id.as_str();
        tokio::select! {
            _ = grown(&mut self.grew, mission_id) => {}
            _ = tokio::time::sleep(RECHECK) => {}
            _ = self.shutdown.wait_for(|stop| *stop) => self.last = true,
        }
        let store = self.logs.store();
        if let Ok(Some(state)) = store.log_state(mission_id).await {
            self.state = state;
        }
        match store.mission(mission_id).await {
            Ok(Some(m)) if !m.state.is_terminal() => {}
            // Ended (its executor's last chunk came before its end), gone, or unreadable: a last read.
            _ => self.last = true,
        }
    }
}

/// Until the bell rings for `mission_id` (or rang for so many that some were missed).
async fn grown(grew: &mut broadcast::Receiver<Arc<str>>, mission_id: &str) {
    loop {
        match grew.recv().await {
            Ok(id) if &*id == mission_id => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}
