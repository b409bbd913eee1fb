-- Mission logs (issue 52): what agents wrote to stdout and stderr, beside the events, in rows of at
-- most 64 KiB (aiwg_domain::log). `pos` is the row's first byte in the whole log (every attempt, both
-- streams), `stream_pos` in its stream's; positions never renumber when the cap drops bytes.
CREATE TABLE mission_logs (
    mission_id TEXT    NOT NULL,
    pos        INTEGER NOT NULL,
    len        INTEGER NOT NULL,
    stream     TEXT    NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    stream_pos INTEGER NOT NULL,
    lines      INTEGER NOT NULL,   -- newlines in bytes
    bytes      BLOB    NOT NULL,
    PRIMARY KEY (mission_id, pos)
) STRICT;
-- One row a mission with a log: how far it goes, what its cap dropped, and the attempt it counts.
CREATE TABLE mission_log_state (
    mission_id    TEXT    PRIMARY KEY,
    end_pos       INTEGER NOT NULL,
    stdout_bytes  INTEGER NOT NULL,
    stderr_bytes  INTEGER NOT NULL,
    lines         INTEGER NOT NULL,
    head_end      INTEGER,           -- NULL until the log reaches half its cap
    tail_start    INTEGER NOT NULL,
    dropped_lines INTEGER NOT NULL,
    attempt       INTEGER NOT NULL,
    attempt_bytes INTEGER NOT NULL
) STRICT;
