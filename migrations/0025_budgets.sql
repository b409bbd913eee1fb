-- Budgets (issue 54, part 2). A mission's budget as serve watches it: its limits as the dispatch wrote
-- them (raised by operators), which limits warned (comma-separated: tokens,cost,duration) and the
-- limit that exhausted it, if one did. Only missions dispatched with a budget have a row.
CREATE TABLE mission_budgets (
    mission_id  TEXT PRIMARY KEY,
    budget      TEXT NOT NULL,                     -- {max_tokens, max_cost_usd, max_duration_s, on_exhausted}
    since       TEXT NOT NULL,                     -- its dispatch: what max_duration_s counts from
    warned      TEXT NOT NULL,
    exhausted   TEXT
) STRICT, WITHOUT ROWID;
-- Standing budgets added through the API (the configuration's are not stored): a scope's spend over a
-- period, aligned to UTC days.
CREATE TABLE budgets (
    id              TEXT PRIMARY KEY,              -- bud_...
    scope           TEXT NOT NULL,                 -- all | operator:NAME | executor:NAME
    max_tokens      INTEGER,
    max_cost_micros INTEGER,
    period_days     INTEGER NOT NULL,              -- 1, 7 or 30
    on_exhausted    TEXT NOT NULL,                 -- pause | abort
    created_at      TEXT NOT NULL,
    created_by      TEXT,
    removed_at      TEXT
) STRICT;
-- A budget warning notifies (the webhook topic mission.budget_warning): the notable events' index takes
-- it in. The condition is repeated word for word by the reads (store/reads/queries.rs, NOTABLE).
DROP INDEX events_notable;
CREATE INDEX events_notable ON events (seq) WHERE event IN ('mission.hitl_required', 'mission.completed', 'mission.failed', 'mission.aborted', 'executor.deregistered', 'mission.budget_warning');
