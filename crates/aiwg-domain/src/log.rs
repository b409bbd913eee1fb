//! A mission's log as serve keeps it: what its agents wrote to stdout and stderr, in the order serve
//! received it, in rows of at most [`MAX_ROW_BYTES`] beside the events (never as events), bounded per
//! mission.
//!
//! Positions are absolute: a byte's position is how many bytes of the mission's log came before it,
//! every attempt and both streams together, whether or not they are still kept; a byte's stream
//! position counts only its stream's bytes. Nothing renumbers when bytes are dropped, so an offset a
//! reader was given stays true.
//!
//! Bounded by the mission's cap: once the log reaches half of it, that first half is its head and is
//! kept for good; past the cap, the oldest bytes after the head are dropped, in whole segments of rows,
//! so that the head and the newest bytes stay. What was dropped (bytes, lines) is kept in the
//! [`LogState`], and a reader is shown it as one line (`aiwg_contract::log::gap_line`) where the bytes
//! were.
//!
//! Dedupe: an executor numbers its bytes itself (`offset`, its own count in this attempt), and sends
//! again from the last count serve acknowledged after a reconnect; serve keeps the attempt's count
//! (`attempt_bytes`) and stores only the bytes it does not hold yet ([`LogCursor::accept`]).

use std::collections::VecDeque;

use aiwg_contract::log::Stream;

/// The largest row: an executor's chunk is at most this ([`aiwg_contract::log::MAX_CHUNK_BYTES`]), and
/// what serve writes itself (a sandbox's or a runtime's output) is cut to it, so that a reader asked
/// for position N finds its row among those that start at most this far before N.
pub const MAX_ROW_BYTES: u64 = aiwg_contract::log::MAX_CHUNK_BYTES as u64;

/// A mission's log in the store, one row a mission: how far it goes and what it dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogState {
    pub mission_id: String,
    /// Bytes received in all: the position the next byte gets.
    pub end: u64,
    /// Bytes received per stream: the stream position the next byte of each gets.
    pub stdout: u64,
    pub stderr: u64,
    /// Newlines received in all.
    pub lines: u64,
    /// Where the head ends, once the log has reached half its cap (`None` before).
    pub head_end: Option<u64>,
    /// The first byte kept after the head: above `head_end` once bytes were dropped.
    pub tail_start: u64,
    /// Newlines among the dropped bytes.
    pub dropped_lines: u64,
    /// The attempt whose bytes it last received, and how many of them.
    pub attempt: u32,
    pub attempt_bytes: u64,
}

impl LogState {
    pub fn new(mission_id: &str) -> LogState {
        LogState { mission_id: mission_id.to_owned(), attempt: 1, ..LogState::default() }
    }

    /// Bytes dropped between the head and the tail.
    pub fn dropped(&self) -> u64 {
        self.head_end.map_or(0, |head| self.tail_start.saturating_sub(head))
    }

    /// The next stream position of `stream`.
    pub fn stream_end(&self, stream: Stream) -> u64 {
        match stream {
            Stream::Stdout => self.stdout,
            Stream::Stderr => self.stderr,
        }
    }
}

/// One stored row of a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRow {
    pub mission_id: String,
    pub pos: u64,
    pub stream: Stream,
    pub stream_pos: u64,
    pub lines: u64,
    pub bytes: Vec<u8>,
}

/// A run of consecutive rows after the head, dropped together when the log passes its cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
    pub lines: u64,
}

/// What serve makes of a chunk.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every byte of it is held already: acknowledged, nothing stored.
    Duplicate { log_offset: u64 },
    /// It starts past the bytes serve holds of the attempt: refused, the executor sends again from
    /// `log_offset`.
    OutOfOrder { log_offset: u64 },
    /// It belongs to an attempt that is not the mission's current one (a retry took the mission away).
    OtherAttempt { current: u32 },
    /// Stored: the row (its bytes the chunk's, less the `skip` first ones held already), the segments
    /// the cap drops, and the attempt's count once committed.
    Append { row: LogRow, drops: Vec<Segment>, log_offset: u64 },
}

/// The live projection of one mission's log (what it will be once everything queued commits): its
/// state and the segments after its head, which the cap drops oldest first.
#[derive(Clone, Debug, PartialEq)]
pub struct LogCursor {
    pub state: LogState,
    tail: VecDeque<Segment>,
}

impl LogCursor {
    /// A cursor from the stored state and the stored rows after the head, `(pos, len, lines)` in
    /// position order (see [`LogCursor::tail_rows_from`]).
    pub fn loaded(state: LogState, rows: impl IntoIterator<Item = (u64, u64, u64)>, cap: u64) -> LogCursor {
        let mut cursor = LogCursor { state, tail: VecDeque::new() };
        for (pos, len, lines) in rows {
            cursor.push_tail(pos, len, lines, cap);
        }
        cursor
    }

    /// The position from which the rows after the head must be read to load a cursor (`None`: there is
    /// no head yet, so no tail to know).
    pub fn tail_rows_from(state: &LogState) -> Option<u64> {
        state.head_end.map(|_| state.tail_start)
    }

    /// Judges a chunk of `attempt` whose first byte is `offset` in the executor's count, and applies it
    /// to the projection when it is stored. `attempt`: the chunk's (or the mission's current one when
    /// the chunk names none); `current`: the mission's current attempt.
    pub fn accept(
        &mut self,
        attempt: u32,
        current: u32,
        stream: Stream,
        offset: u64,
        bytes: &[u8],
        cap: u64,
    ) -> Verdict {
        if attempt != current {
            return Verdict::OtherAttempt { current };
        }
        if self.state.attempt != current {
            (self.state.attempt, self.state.attempt_bytes) = (current, 0);
        }
        let held = self.state.attempt_bytes;
        if offset > held {
            return Verdict::OutOfOrder { log_offset: held };
        }
        let skip = usize::try_from(held - offset).unwrap_or(usize::MAX);
        if skip >= bytes.len() {
            return Verdict::Duplicate { log_offset: held };
        }
        let (row, drops) = self.append(stream, &bytes[skip..], cap);
        self.state.attempt_bytes += row.bytes.len() as u64;
        Verdict::Append { row, drops, log_offset: self.state.attempt_bytes }
    }

    /// Appends bytes serve writes itself (a sandbox's or a runtime's output), as one row: at most
    /// [`MAX_ROW_BYTES`] (the caller cuts), counted in no executor's attempt.
    pub fn append(&mut self, stream: Stream, bytes: &[u8], cap: u64) -> (LogRow, Vec<Segment>) {
        let s = &mut self.state;
        let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        let (pos, len) = (s.end, bytes.len() as u64);
        let stream_end = match stream {
            Stream::Stdout => &mut s.stdout,
            Stream::Stderr => &mut s.stderr,
        };
        let row = LogRow {
            mission_id: s.mission_id.clone(),
            pos,
            stream,
            stream_pos: *stream_end,
            lines,
            bytes: bytes.to_vec(),
        };
        *stream_end += len;
        s.end += len;
        s.lines += lines;
        let drops = match s.head_end {
            None if s.end >= cap / 2 => {
                // The head ends with the row that reaches half the cap: a row is never split.
                s.head_end = Some(s.end);
                s.tail_start = s.end;
                Vec::new()
            }
            None => {
                s.tail_start = s.end;
                Vec::new()
            }
            Some(_) => self.push_tail(pos, len, lines, cap),
        };
        (row, drops)
    }

    /// Adds a row after the head to the tail's segments, then drops the oldest segments while the log
    /// keeps more than `cap` (never the newest segment: the bytes just written are kept).
    fn push_tail(&mut self, pos: u64, len: u64, lines: u64, cap: u64) -> Vec<Segment> {
        let segment_bytes = (cap / 32).max(1);
        match self.tail.back_mut() {
            Some(last) if last.end == pos && last.end - last.start < segment_bytes => {
                last.end += len;
                last.lines += lines;
            }
            _ => self.tail.push_back(Segment { start: pos, end: pos + len, lines }),
        }
        let head = self.state.head_end.unwrap_or(0);
        let mut kept = head + self.tail.iter().map(|s| s.end - s.start).sum::<u64>();
        let mut drops = Vec::new();
        while kept > cap && self.tail.len() > 1 {
            let dropped = self.tail.pop_front().expect("more than one segment");
            kept -= dropped.end - dropped.start;
            self.state.dropped_lines += dropped.lines;
            drops.push(dropped);
        }
        self.state.tail_start = self.tail.front().map_or(self.state.end, |s| s.start);
        drops
    }
}

/// Text from a log's bytes as they come, row after row: invalid UTF-8 becomes U+FFFD, never an error,
/// and a character cut between two rows is joined again (`carry` holds its first bytes).
pub fn lossy_text(carry: &mut Vec<u8>, bytes: &[u8], out: &mut String) {
    let joined;
    let mut rest: &[u8] = if carry.is_empty() {
        bytes
    } else {
        joined = [carry.as_slice(), bytes].concat();
        carry.clear();
        &joined
    };
    loop {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                out.push_str(text);
                return;
            }
            Err(e) => {
                let (valid, after) = rest.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(valid).expect("valid up to here"));
                match e.error_len() {
                    Some(bad) => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        rest = &after[bad..];
                    }
                    // A sequence the next row may complete.
                    None => {
                        carry.extend_from_slice(after);
                        return;
                    }
                }
            }
        }
    }
}

/// What is left of a cut character at the end of a log (or before a gap): one replacement.
pub fn lossy_flush(carry: &mut Vec<u8>, out: &mut String) {
    if !std::mem::take(carry).is_empty() {
        out.push(char::REPLACEMENT_CHARACTER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: u64 = 1_000;

    fn cursor() -> LogCursor {
        LogCursor::loaded(LogState::new("m-1"), [], CAP)
    }

    fn stored(v: Verdict) -> (LogRow, Vec<Segment>, u64) {
        match v {
            Verdict::Append { row, drops, log_offset } => (row, drops, log_offset),
            other => panic!("not stored: {other:?}"),
        }
    }

    #[test]
    fn chunks_are_kept_once_whatever_is_sent_again() {
        let mut c = cursor();
        let (row, _, n) = stored(c.accept(1, 1, Stream::Stdout, 0, b"hello\n", CAP));
        assert_eq!((row.pos, row.stream_pos, row.lines, n), (0, 0, 1, 6));
        // Sent again whole after a reconnect: nothing stored.
        assert_eq!(c.accept(1, 1, Stream::Stdout, 0, b"hello\n", CAP), Verdict::Duplicate { log_offset: 6 });
        // Sent again from an older offset with new bytes after: only the new bytes.
        let (row, _, n) = stored(c.accept(1, 1, Stream::Stderr, 3, b"lo\nerr\n", CAP));
        assert_eq!((row.bytes.as_slice(), row.pos, row.stream_pos, n), (&b"err\n"[..], 6, 0, 10));
        // A gap is refused with what serve holds.
        assert_eq!(c.accept(1, 1, Stream::Stdout, 11, b"x", CAP), Verdict::OutOfOrder { log_offset: 10 });
        assert_eq!((c.state.end, c.state.stdout, c.state.stderr, c.state.lines), (10, 6, 4, 2));
    }

    #[test]
    fn a_new_attempt_counts_from_zero_and_an_old_one_is_refused() {
        let mut c = cursor();
        stored(c.accept(1, 1, Stream::Stdout, 0, b"first\n", CAP));
        assert_eq!(c.accept(1, 2, Stream::Stdout, 6, b"late", CAP), Verdict::OtherAttempt { current: 2 });
        let (row, _, n) = stored(c.accept(2, 2, Stream::Stdout, 0, b"second\n", CAP));
        assert_eq!((row.pos, row.stream_pos, n), (6, 6, 7));
        assert_eq!((c.state.attempt, c.state.attempt_bytes, c.state.end), (2, 7, 13));
    }

    #[test]
    fn past_its_cap_a_log_keeps_its_head_and_its_newest_bytes() {
        let mut c = cursor();
        let line = [b'x'; 99].iter().chain(b"\n").copied().collect::<Vec<u8>>();
        let mut dropped = Vec::new();
        for i in 0..40u64 {
            let (row, drops, _) = stored(c.accept(1, 1, Stream::Stdout, i * 100, &line, CAP));
            assert_eq!(row.pos, i * 100);
            dropped.extend(drops);
        }
        // The head: the rows up to half the cap, kept for good.
        assert_eq!(c.state.head_end, Some(500));
        // The tail is within the cap, and what went is counted.
        let kept = 500 + (c.state.end - c.state.tail_start);
        assert!(kept <= CAP && kept > CAP - 100, "{kept}");
        assert_eq!(c.state.dropped(), dropped.iter().map(|s| s.end - s.start).sum::<u64>());
        assert_eq!(c.state.dropped_lines, c.state.dropped() / 100);
        assert_eq!(dropped.first().map(|s| s.start), Some(500));
        // Contiguous: every dropped byte is between the head and the tail, once.
        assert!(dropped.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(dropped.last().map(|s| s.end), Some(c.state.tail_start));
    }

    #[test]
    fn a_cursor_loaded_from_the_store_drops_as_the_live_one_would() {
        let mut live = cursor();
        let mut rows = Vec::new();
        for i in 0..12u64 {
            let (row, drops, _) = stored(live.accept(1, 1, Stream::Stdout, i * 100, &[b'a'; 100], CAP));
            rows.push((row.pos, 100, 0));
            rows.retain(|(pos, _, _)| !drops.iter().any(|d| (d.start..d.end).contains(pos)));
        }
        let from = LogCursor::tail_rows_from(&live.state).unwrap();
        let tail = rows.into_iter().filter(|(pos, _, _)| *pos >= from);
        let mut loaded = LogCursor::loaded(live.state.clone(), tail, CAP);
        assert_eq!(loaded, live);
        let a = live.accept(1, 1, Stream::Stdout, 1200, &[b'b'; 300], CAP);
        let b = loaded.accept(1, 1, Stream::Stdout, 1200, &[b'b'; 300], CAP);
        assert_eq!(a, b);
    }

    #[test]
    fn text_is_read_lossily_and_characters_cut_between_rows_are_joined() {
        let (mut carry, mut out) = (Vec::new(), String::new());
        let euro = "€".as_bytes();
        lossy_text(&mut carry, &[b"a".as_slice(), &euro[..2]].concat(), &mut out);
        assert_eq!((out.as_str(), carry.len()), ("a", 2));
        lossy_text(&mut carry, &[&euro[2..], b"\xffz".as_slice()].concat(), &mut out);
        assert_eq!(out, "a€\u{fffd}z");
        lossy_text(&mut carry, &euro[..1], &mut out);
        lossy_flush(&mut carry, &mut out);
        assert_eq!(out, "a€\u{fffd}z\u{fffd}");
        assert!(carry.is_empty());
    }
}
