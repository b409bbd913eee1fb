-- The audit trail: see migrations/0009_audit.sql.
CREATE TABLE audit (
    seq          BIGSERIAL PRIMARY KEY,
    at           TEXT NOT NULL,
    operator     TEXT,
    role         TEXT,
    source       TEXT,
    method       TEXT NOT NULL,
    route        TEXT NOT NULL,
    target       TEXT,
    mission_id   TEXT,
    executor_id  TEXT,
    status       BIGINT NOT NULL,
    outcome      TEXT NOT NULL
);
CREATE INDEX audit_at ON audit (at);
