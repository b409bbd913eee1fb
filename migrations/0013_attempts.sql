-- Timeouts and retries (issue 38).
-- scheduled_at: when the mission's current attempt was scheduled. NULL for the first attempt (its
-- dispatch, created_at); a retry sets it to when the next attempt may start, which is where that
-- attempt's schedule-to-start timeout counts from.
-- timeouts: the dispatch's own `timeouts` (JSON), written once with the mission, so that the task that
-- watches deadlines reads every live mission's in one query, never a payload.
ALTER TABLE missions ADD COLUMN scheduled_at TEXT;
ALTER TABLE missions ADD COLUMN timeouts TEXT;
