-- The audit trail (issue 37): every state-changing call to an operator route, refused ones too, with
-- who, from where, when, what and the outcome. Retention removes records older than
-- retention.audit_keep_days (365 by default), never sooner.
CREATE TABLE audit (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    at           TEXT NOT NULL,
    operator     TEXT,                              -- NULL: the call named no known operator (401)
    role         TEXT,
    source       TEXT,
    method       TEXT NOT NULL,
    route        TEXT NOT NULL,                     -- as the API names it: /api/v1/missions/{id}/abort
    target       TEXT,                              -- its {id} or {name}, as the caller wrote it
    mission_id   TEXT,
    executor_id  TEXT,
    status       INTEGER NOT NULL,
    outcome      TEXT NOT NULL                      -- ok, or the error code
) STRICT;
CREATE INDEX audit_at ON audit (at);
