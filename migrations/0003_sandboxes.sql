-- The legacy sandbox registry (POST /api/sandboxes/register), which the agentic-sandbox executor
-- requires before anything else. Its socket's frames are stored in `events` as `sandbox.<type>`.
CREATE TABLE sandboxes (
    sandbox_id      TEXT PRIMARY KEY NOT NULL,
    name            TEXT NOT NULL,
    registration    TEXT NOT NULL,                  -- JSON body as registered
    token_hash      BLOB NOT NULL,
    registered_at   TEXT NOT NULL,
    registered_from TEXT,
    deregistered_at TEXT
) STRICT;
