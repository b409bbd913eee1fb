-- The kept sums, one row per grouping, day and name (issue 54): every read of them, the Usage page's
-- and a budget's, is a range of this table's key, however many operators, executors and models there
-- are. `usage_days` kept one row per day, operator, executor and model, so a read by any one of them
-- scanned and grouped every combination (hundreds of milliseconds at 300,000 rows).
-- `dimension`: `all` (`name` is ''), `operator` ('' when unknown), `executor` (an id) or `model`.
CREATE TABLE usage_sums (
    dimension             TEXT    NOT NULL,
    day                   TEXT    NOT NULL,
    name                  TEXT    NOT NULL,
    input_tokens          BIGINT  NOT NULL,
    output_tokens         BIGINT  NOT NULL,
    cache_read_tokens     BIGINT  NOT NULL,
    cache_creation_tokens BIGINT  NOT NULL,
    reasoning_tokens      BIGINT  NOT NULL,
    cost_micros           BIGINT  NOT NULL,
    reported              BIGINT  NOT NULL,
    estimated             BIGINT  NOT NULL,
    unpriced              BIGINT  NOT NULL,
    PRIMARY KEY (dimension, day, name)
);
INSERT INTO usage_sums
SELECT dimension, day, name, CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT),
       CAST(SUM(cache_read_tokens) AS BIGINT),
       CAST(SUM(cache_creation_tokens) AS BIGINT), CAST(SUM(reasoning_tokens) AS BIGINT),
       CAST(SUM(cost_micros) AS BIGINT), MAX(reported), MAX(estimated),
       MAX(unpriced)
FROM (SELECT 'all' AS dimension, '' AS name, * FROM usage_days
      UNION ALL SELECT 'operator', operator, * FROM usage_days
      UNION ALL SELECT 'executor', executor_id, * FROM usage_days
      UNION ALL SELECT 'model', model, * FROM usage_days) AS every
GROUP BY dimension, day, name;
DROP TABLE usage_days;
