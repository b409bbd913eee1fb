-- Timeouts and retries: see migrations/0013_attempts.sql.
ALTER TABLE missions ADD COLUMN scheduled_at TEXT;
ALTER TABLE missions ADD COLUMN timeouts TEXT;
