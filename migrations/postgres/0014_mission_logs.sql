-- Mission logs: see migrations/0016_mission_logs.sql.
CREATE TABLE mission_logs (
    mission_id TEXT   NOT NULL,
    pos        BIGINT NOT NULL,
    len        BIGINT NOT NULL,
    stream     TEXT   NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    stream_pos BIGINT NOT NULL,
    lines      BIGINT NOT NULL,
    bytes      BYTEA  NOT NULL,
    PRIMARY KEY (mission_id, pos)
);
CREATE TABLE mission_log_state (
    mission_id    TEXT   PRIMARY KEY,
    end_pos       BIGINT NOT NULL,
    stdout_bytes  BIGINT NOT NULL,
    stderr_bytes  BIGINT NOT NULL,
    lines         BIGINT NOT NULL,
    head_end      BIGINT,
    tail_start    BIGINT NOT NULL,
    dropped_lines BIGINT NOT NULL,
    attempt       BIGINT NOT NULL,
    attempt_bytes BIGINT NOT NULL
);
