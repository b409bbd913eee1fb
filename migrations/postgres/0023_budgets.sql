-- Budgets: see migrations/0025_budgets.sql.
CREATE TABLE mission_budgets (
    mission_id  TEXT PRIMARY KEY,
    budget      TEXT NOT NULL,
    since       TEXT NOT NULL,
    warned      TEXT NOT NULL,
    exhausted   TEXT
);
CREATE TABLE budgets (
    id              TEXT PRIMARY KEY,
    scope           TEXT NOT NULL,
    max_tokens      BIGINT,
    max_cost_micros BIGINT,
    period_days     BIGINT NOT NULL,
    on_exhausted    TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    created_by      TEXT,
    removed_at      TEXT
);
DROP INDEX events_notable;
CREATE INDEX events_notable ON events (seq) WHERE event IN ('mission.hitl_required', 'mission.completed', 'mission.failed', 'mission.aborted', 'executor.deregistered', 'mission.budget_warning');
