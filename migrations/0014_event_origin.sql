-- Who each event is the word of (issue 39, "who did what" on a timeline): NULL for the executor the
-- event is filed under (its own frames, most of the log, and every event recorded before this column),
-- 'serve' for serve's decisions and inferences, 'operator:<name>' for an operator's action.
ALTER TABLE events ADD COLUMN origin TEXT;

DROP VIEW mission_events;
CREATE VIEW mission_events AS
    SELECT i.seq, e.event, e.executor_id, i.mission_id, e.ts, e.received_at, e.data, e.raw, e.origin
        FROM event_index i JOIN events e ON e.seq = i.seq
    UNION ALL
    SELECT seq, event, executor_id, mission_id, ts, received_at, data, raw, origin
        FROM events WHERE seq > (SELECT mark FROM event_index_mark) AND mission_id IS NOT NULL;
