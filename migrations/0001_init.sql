-- Executors are never deleted: DELETE marks them deregistered so their missions and events keep an owner.
CREATE TABLE executors (
    executor_id         TEXT PRIMARY KEY NOT NULL,
    name                TEXT NOT NULL,
    version             TEXT NOT NULL,
    spec_version        TEXT NOT NULL,
    transport_endpoints TEXT NOT NULL,              -- JSON object as registered
    capabilities        TEXT NOT NULL,              -- JSON array as registered
    a2a_instance_id     TEXT,
    token_hash          BLOB NOT NULL,              -- SHA-256 of the current token; the token itself is never stored
    registered_at       TEXT NOT NULL,              -- first registration
    registered_from     TEXT,                       -- peer address of the latest registration
    seen_non_loopback   INTEGER NOT NULL DEFAULT 0, -- the one-time rotation on the first non-loopback register happened
    draining            INTEGER NOT NULL DEFAULT 0, -- operator asked: no new missions
    last_event_ts       TEXT,
    disconnected_at     TEXT,
    deregistered_at     TEXT
) STRICT;

CREATE TABLE missions (
    id              INTEGER PRIMARY KEY,            -- dispatch order; the listing cursor
    mission_id      TEXT NOT NULL UNIQUE,
    session_id      TEXT NOT NULL,
    executor_id     TEXT REFERENCES executors (executor_id), -- NULL while queued
    state           TEXT NOT NULL,
    payload         TEXT NOT NULL,                  -- the dispatch payload as accepted
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    completed_at    TEXT,
    pty_session_ref TEXT,
    exit_code       INTEGER,
    error           TEXT,
    estimated_start TEXT,
    routing         TEXT,                           -- JSON: the routing decision
    terminal_data   TEXT,                           -- JSON: data of the event that ended it, to recognise repeats
    queued_reason   TEXT,                           -- while queued: the constraint nobody meets
    checkpoint_id   TEXT                            -- the executor's checkpoint of a suspended mission
) STRICT;
CREATE INDEX missions_by_state ON missions (state, id);
CREATE INDEX missions_by_executor ON missions (executor_id, id);
CREATE INDEX missions_by_session ON missions (session_id, id);
CREATE INDEX missions_by_updated ON missions (updated_at);

-- Append-only log of every accepted event; seq is global and in commit order.
CREATE TABLE events (
    seq         INTEGER PRIMARY KEY,
    event       TEXT NOT NULL,
    executor_id TEXT NOT NULL,
    mission_id  TEXT,
    ts          TEXT NOT NULL,                      -- as the envelope said
    received_at TEXT NOT NULL,                      -- server clock at commit
    data        TEXT NOT NULL,                      -- canonical data (the declared shape)
    raw         TEXT                                -- data as received, kept only when it differs
) STRICT;
CREATE INDEX events_by_mission ON events (mission_id, seq) WHERE mission_id IS NOT NULL;
