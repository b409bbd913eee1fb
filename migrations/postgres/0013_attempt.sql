-- The number of a mission's current attempt (see migrations/0015_attempt.sql); NULL for the first.
ALTER TABLE missions ADD COLUMN attempt BIGINT;
