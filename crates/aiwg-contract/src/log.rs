//! A mission's log on the wire (the `x-log` extension): what an agent wrote to stdout and stderr, sent
//! by the executor in chunks, beside the events and never as events.
//!
//! A chunk is one **binary** WebSocket frame: a one-line JSON header ([`ChunkHeader`]), a newline, then
//! the bytes exactly as the agent wrote them (any encoding; serve replaces invalid UTF-8 only when it
//! reads the log out as text). Binary, because a log is mostly bytes that JSON would have to escape and
//! serve would have to unescape, and an agent's output need not be UTF-8 at all.
//!
//! `offset` counts the bytes of this mission's output that this executor produced before the chunk,
//! both streams together, in this attempt: the chunk is bytes `[offset, offset + len)` of the
//! executor's own sequence. Serve answers every chunk in frame order, as it answers events: an ack
//! carrying [`LOG_OFFSET`] (how many of the attempt's bytes it has committed), marked `duplicate` when
//! it had them all already, or an error frame (`log_out_of_order` when the chunk starts past what
//! serve has, also with [`LOG_OFFSET`]). So an executor that lost its socket sends again from the last
//! offset serve acknowledged, and serve keeps each byte once. An executor sends a mission's last chunk
//! before its end event: the log is complete once the end is stored.

use serde::{Deserialize, Serialize};

/// The capability an executor declares to send log chunks. One that does not sends none, and serve
/// expects none (an executor written for upstream sees no change).
pub const CAPABILITY: &str = "x-log";
/// The `event` a log chunk's acknowledgement and refusals name in their `ref`, so that an executor
/// tells them apart from its events' answers.
pub const REF_EVENT: &str = "mission.log";
/// The key of serve's answers to a chunk that carries the attempt's committed byte count.
pub const LOG_OFFSET: &str = "log_offset";
/// The largest chunk an executor should send: well under serve's frame limit (1 MiB by default), and
/// small enough that one chunk never holds a batch of other executors' events back.
pub const MAX_CHUNK_BYTES: usize = 64 * 1024;

/// Which of the agent's output streams a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    pub fn parse(s: &str) -> Option<Stream> {
        match s {
            "stdout" => Some(Stream::Stdout),
            "stderr" => Some(Stream::Stderr),
            _ => None,
        }
    }
}

/// The header line of a chunk frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkHeader {
    pub mission_id: String,
    pub stream: Stream,
    /// The chunk's first byte in this executor's sequence for the mission (both streams, this attempt).
    pub offset: u64,
    /// The attempt the chunk belongs to, from the dispatch body's `attempt` (`x-attempts`); absent: the
    /// mission's current attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}

/// Why a binary frame is not a chunk.
#[derive(Debug, PartialEq, Eq)]
pub enum ChunkError {
    /// No newline ends a header within [`MAX_HEADER_BYTES`].
    NoHeader,
    /// The header line is not a [`ChunkHeader`] (the reason, for the error frame).
    BadHeader(String),
}

impl std::fmt::Display for ChunkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChunkError::NoHeader => {
                write!(f, "a log chunk starts with a JSON header line of at most {MAX_HEADER_BYTES} bytes")
            }
            ChunkError::BadHeader(why) => write!(f, "a log chunk's header is not valid: {why}"),
        }
    }
}

/// A header longer than this is not looked for further: a mission id is short, and a peer must not
/// make serve scan a megabyte for a newline.
pub const MAX_HEADER_BYTES: usize = 1024;

/// The line a reader of a log is shown where bytes were dropped (its mission's cap): how many bytes
/// and lines its log dropped, and the position the reader's bytes resume at, so that a reader counting
/// positions (to resume a follow after a restart, as `missions logs --follow` does) can set its count
/// right. Its shape is fixed: [`GAP_PREFIX`], the figures, `]`, a newline.
pub fn gap_line(dropped_bytes: u64, dropped_lines: u64, resumes_at: u64) -> String {
    format!(
        "{GAP_PREFIX}{dropped_bytes} bytes ({dropped_lines} lines) of this log were dropped here \
         (logs.max_bytes_per_mission); it resumes at offset {resumes_at}]\n"
    )
}

/// How a [`gap_line`] starts.
pub const GAP_PREFIX: &str = "\n[aiwg-serve: ";

/// The resume position of a [`gap_line`] (`line` from its [`GAP_PREFIX`] to its newline; `None` when it
/// is not one).
pub fn gap_resumes_at(line: &str) -> Option<u64> {
    let rest = line.strip_prefix(GAP_PREFIX)?.trim_end().strip_suffix(']')?;
    rest.rsplit_once("it resumes at offset ")?.1.parse().ok()
}

/// One chunk as a binary frame's payload.
pub fn encode(header: &ChunkHeader, bytes: &[u8]) -> Vec<u8> {
    let head = serde_json::to_vec(header).expect("a chunk header serializes");
    let mut frame = Vec::with_capacity(head.len() + 1 + bytes.len());
    frame.extend_from_slice(&head);
    frame.push(b'\n');
    frame.extend_from_slice(bytes);
    frame
}

/// A binary frame's payload read as a chunk: its header and its bytes (borrowed).
pub fn decode(frame: &[u8]) -> Result<(ChunkHeader, &[u8]), ChunkError> {
    let scan = &frame[..frame.len().min(MAX_HEADER_BYTES + 1)];
    let end = scan.iter().position(|&b| b == b'\n').ok_or(ChunkError::NoHeader)?;
    let header: ChunkHeader =
        serde_json::from_slice(&frame[..end]).map_err(|e| ChunkError::BadHeader(e.to_string()))?;
    if header.mission_id.is_empty() {
        return Err(ChunkError::BadHeader("mission_id is empty".into()));
    }
    Ok((header, &frame[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(offset: u64) -> ChunkHeader {
        ChunkHeader { mission_id: "m-1".into(), stream: Stream::Stderr, offset, attempt: None }
    }

    #[test]
    fn a_chunk_round_trips_with_any_bytes() {
        let bytes = b"line\n\xff\xfe not utf-8 \n{\"json\":1}\n";
        let frame = encode(&header(42), bytes);
        let (h, b) = decode(&frame).unwrap();
        assert_eq!(h, header(42));
        assert_eq!(b, bytes);
        let empty = encode(&header(0), b"");
        assert_eq!(decode(&empty).unwrap().1, b"");
    }

    #[test]
    fn the_gap_line_says_where_the_log_resumes() {
        let line = gap_line(1_200, 12, 1_700);
        assert!(line.starts_with(GAP_PREFIX) && line.contains("1200 bytes (12 lines)"), "{line}");
        assert_eq!(gap_resumes_at(&line), Some(1_700));
        assert_eq!(gap_resumes_at("\n[aiwg-serve: nothing]\n"), None);
        assert_eq!(gap_resumes_at("plain output"), None);
    }

    #[test]
    fn a_frame_without_a_proper_header_is_refused_with_the_reason() {
        assert_eq!(decode(b"no newline at all"), Err(ChunkError::NoHeader));
        let long = [vec![b' '; MAX_HEADER_BYTES + 1], b"\nbytes".to_vec()].concat();
        assert_eq!(decode(&long), Err(ChunkError::NoHeader));
        assert!(matches!(decode(b"{\"mission_id\":\"m\"}\nx"), Err(ChunkError::BadHeader(_))));
        let unknown = b"{\"mission_id\":\"m\",\"stream\":\"stdout\",\"offset\":0,\"extra\":1}\nx";
        assert!(matches!(decode(unknown), Err(ChunkError::BadHeader(_))));
        let bad_stream = b"{\"mission_id\":\"m\",\"stream\":\"stdin\",\"offset\":0}\nx";
        assert!(matches!(decode(bad_stream), Err(ChunkError::BadHeader(_))));
        assert!(matches!(
            decode(b"{\"mission_id\":\"\",\"stream\":\"stdout\",\"offset\":0}\n"),
            Err(ChunkError::BadHeader(_))
        ));
    }
}
