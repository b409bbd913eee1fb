-- Idempotent creation (issue 38): the answer to each request sent with an Idempotency-Key, per
-- operator, kept 24 hours (retention removes older ones), so that the same request again is answered
-- the same, across a restart, and another request with the key is refused.
CREATE TABLE idempotency_keys (
    operator     TEXT NOT NULL,
    key          TEXT NOT NULL,
    fingerprint  BLOB NOT NULL,                    -- SHA-256 of method, route and body
    status       INTEGER NOT NULL,
    body         TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (operator, key)
) STRICT;
CREATE INDEX idempotency_created ON idempotency_keys (created_at);
