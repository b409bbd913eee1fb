-- The per-mission view of the log that the reads share with SQLite (whose `mission_events` joins a
-- bulk-written index and the tail above its mark, see migrations/0006_event_index.sql). PostgreSQL's
-- index inserts go to its WAL as small records, not whole pages, so `events_by_mission` stays: here
-- the view is the log itself.
CREATE VIEW mission_events AS
    SELECT seq, event, executor_id, mission_id, ts, received_at, data, raw FROM events WHERE mission_id IS NOT NULL;
