-- What missions spend (issue 54): the usage executors report, kept, priced and summed.
-- A mission names the operator who dispatched it (NULL: dispatched before serve kept it); its spend is
-- summed under that name.
ALTER TABLE missions ADD COLUMN dispatched_by TEXT;
-- One row per mission, attempt and model: the largest counts and reported cost seen (a report is
-- cumulative for its attempt), and the cost the row stands at (`cost_source`: reported, estimated or
-- unpriced; `cost_micros` is 0 when unpriced). Money is integer micro-dollars.
CREATE TABLE usage_attempts (
    mission_id            TEXT    NOT NULL,
    attempt               INTEGER NOT NULL,
    model                 TEXT    NOT NULL,
    input_tokens          INTEGER NOT NULL,
    output_tokens         INTEGER NOT NULL,
    cache_read_tokens     INTEGER NOT NULL,
    cache_creation_tokens INTEGER NOT NULL,
    reasoning_tokens      INTEGER NOT NULL,
    reported_micros       INTEGER,
    cost_micros           INTEGER NOT NULL,
    cost_source           TEXT    NOT NULL,
    PRIMARY KEY (mission_id, attempt, model)
) STRICT, WITHOUT ROWID;
-- The sums, kept (never scanned from the missions): per UTC day, dispatching operator ('' when unknown),
-- executor and model, each row the sum of what the rows above added on that day (a cost can go down,
-- when a reported cost replaces a larger estimate). `reported`, `estimated` and `unpriced` are 1 when
-- something counted that day had that cost source. A scope's spend since a day is a range of one index.
CREATE TABLE usage_days (
    day                   TEXT    NOT NULL,
    operator              TEXT    NOT NULL,
    executor_id           TEXT    NOT NULL,
    model                 TEXT    NOT NULL,
    input_tokens          INTEGER NOT NULL,
    output_tokens         INTEGER NOT NULL,
    cache_read_tokens     INTEGER NOT NULL,
    cache_creation_tokens INTEGER NOT NULL,
    reasoning_tokens      INTEGER NOT NULL,
    cost_micros           INTEGER NOT NULL,
    reported              INTEGER NOT NULL,
    estimated             INTEGER NOT NULL,
    unpriced              INTEGER NOT NULL,
    PRIMARY KEY (day, operator, executor_id, model)
) STRICT, WITHOUT ROWID;
CREATE INDEX usage_days_by_operator ON usage_days (operator, day);
CREATE INDEX usage_days_by_executor ON usage_days (executor_id, day);
CREATE INDEX usage_days_by_model ON usage_days (model, day);
