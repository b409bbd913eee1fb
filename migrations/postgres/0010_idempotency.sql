-- Idempotent creation: see migrations/0012_idempotency.sql.
CREATE TABLE idempotency_keys (
    operator     TEXT NOT NULL,
    key          TEXT NOT NULL,
    fingerprint  BYTEA NOT NULL,
    status       BIGINT NOT NULL,
    body         TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (operator, key)
);
CREATE INDEX idempotency_created ON idempotency_keys (created_at);
