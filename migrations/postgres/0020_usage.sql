-- What missions spend: see migrations/0022_usage.sql.
ALTER TABLE missions ADD COLUMN dispatched_by TEXT;
CREATE TABLE usage_attempts (
    mission_id            TEXT   NOT NULL,
    attempt               BIGINT NOT NULL,
    model                 TEXT   NOT NULL,
    input_tokens          BIGINT NOT NULL,
    output_tokens         BIGINT NOT NULL,
    cache_read_tokens     BIGINT NOT NULL,
    cache_creation_tokens BIGINT NOT NULL,
    reasoning_tokens      BIGINT NOT NULL,
    reported_micros       BIGINT,
    cost_micros           BIGINT NOT NULL,
    cost_source           TEXT   NOT NULL,
    PRIMARY KEY (mission_id, attempt, model)
);
CREATE TABLE usage_days (
    day                   TEXT   NOT NULL,
    operator              TEXT   NOT NULL,
    executor_id           TEXT   NOT NULL,
    model                 TEXT   NOT NULL,
    input_tokens          BIGINT NOT NULL,
    output_tokens         BIGINT NOT NULL,
    cache_read_tokens     BIGINT NOT NULL,
    cache_creation_tokens BIGINT NOT NULL,
    reasoning_tokens      BIGINT NOT NULL,
    cost_micros           BIGINT NOT NULL,
    reported              BIGINT NOT NULL,
    estimated             BIGINT NOT NULL,
    unpriced              BIGINT NOT NULL,
    PRIMARY KEY (day, operator, executor_id, model)
);
CREATE INDEX usage_days_by_operator ON usage_days (operator, day);
CREATE INDEX usage_days_by_executor ON usage_days (executor_id, day);
CREATE INDEX usage_days_by_model ON usage_days (model, day);
