-- The PostgreSQL schema: the SQLite one (migrations 1 to 4) with PostgreSQL's types. Times and JSON stay
-- text in the stored format, as on SQLite, so that rows read back the same through either adapter.

-- Executors are never deleted: DELETE marks them deregistered so their missions and events keep an owner.
CREATE TABLE executors (
    executor_id         TEXT PRIMARY KEY,
    name                TEXT NOT NULL,
    version             TEXT NOT NULL,
    spec_version        TEXT NOT NULL,
    transport_endpoints TEXT NOT NULL,                  -- JSON object as registered
    capabilities        TEXT NOT NULL,                  -- JSON array as registered
    a2a_instance_id     TEXT,
    token_hash          BYTEA NOT NULL,                 -- SHA-256 of the current token; the token itself is never stored
    registered_at       TEXT NOT NULL,                  -- first registration
    registered_from     TEXT,                           -- peer address of the latest registration
    seen_non_loopback   BOOLEAN NOT NULL DEFAULT FALSE, -- the one-time rotation on the first non-loopback register happened
    draining            BOOLEAN NOT NULL DEFAULT FALSE, -- operator asked: no new missions
    last_event_ts       TEXT,
    disconnected_at     TEXT,
    deregistered_at     TEXT,
    runtime             TEXT                            -- JSON: an HTTP agent runtime's own part, NULL for a WebSocket executor
);

CREATE TABLE missions (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- dispatch order; the listing cursor
    mission_id      TEXT NOT NULL UNIQUE,
    session_id      TEXT NOT NULL,
    executor_id     TEXT REFERENCES executors (executor_id), -- NULL while queued
    state           TEXT NOT NULL,
    payload         TEXT NOT NULL,                  -- the dispatch payload as accepted
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    completed_at    TEXT,
    pty_session_ref TEXT,
    exit_code       BIGINT,
    error           TEXT,
    estimated_start TEXT,
    routing         TEXT,                           -- JSON: the routing decision
    terminal_data   TEXT,                           -- JSON: data of the event that ended it, to recognise repeats
    queued_reason   TEXT,                           -- while queued: the constraint nobody meets
    checkpoint_id   TEXT                            -- the executor's checkpoint of a suspended mission
);
CREATE INDEX missions_by_state ON missions (state, id);
CREATE INDEX missions_by_executor ON missions (executor_id, id);
CREATE INDEX missions_by_session ON missions (session_id, id);
CREATE INDEX missions_by_updated ON missions (updated_at);

-- Append-only log of every accepted event; seq is global and in commit order (see event_sequence).
CREATE TABLE events (
    seq         BIGINT PRIMARY KEY,
    event       TEXT NOT NULL,
    executor_id TEXT NOT NULL,
    mission_id  TEXT,
    ts          TEXT NOT NULL,                      -- as the envelope said
    received_at TEXT NOT NULL,                      -- server clock at commit
    data        TEXT NOT NULL,                      -- canonical data (the declared shape)
    raw         TEXT                                -- data as received, kept only when it differs
);
CREATE INDEX events_by_mission ON events (mission_id, seq) WHERE mission_id IS NOT NULL;

-- The newest sequence number taken. A transaction that appends events locks this row first and
-- releases it by committing, so sequence numbers are taken and committed in one order: a reader that
-- sees event 42 already sees 41 (a SEQUENCE would hand out numbers that commit out of order).
CREATE TABLE event_sequence (
    only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    last     BIGINT NOT NULL
);
INSERT INTO event_sequence (only_row, last) VALUES (TRUE, 0);

-- HITL requests of missions: the pending one drives `hitl-required`; answered ones keep the response
-- until it has been delivered to the executor (redelivered on reconnect otherwise).
CREATE TABLE hitl_requests (
    mission_id   TEXT NOT NULL REFERENCES missions (mission_id),
    hitl_id      TEXT NOT NULL,
    prompt       TEXT NOT NULL,
    context      TEXT,
    expires_at   TEXT,
    requested_at TEXT NOT NULL,
    outcome      TEXT NOT NULL,                   -- pending | answered | expired | withdrawn
    response     TEXT,
    responded_at TEXT,
    delivered_at TEXT,
    PRIMARY KEY (mission_id, hitl_id)
);
CREATE INDEX hitl_open ON hitl_requests (outcome) WHERE outcome = 'pending' OR (outcome = 'answered' AND delivered_at IS NULL);

-- The legacy sandbox registry (POST /api/sandboxes/register), which the agentic-sandbox executor
-- requires before anything else. Its socket's frames are stored in `events` as `sandbox.<type>`.
CREATE TABLE sandboxes (
    sandbox_id      TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    registration    TEXT NOT NULL,                  -- JSON body as registered
    token_hash      BYTEA NOT NULL,
    registered_at   TEXT NOT NULL,
    registered_from TEXT,
    deregistered_at TEXT
);
