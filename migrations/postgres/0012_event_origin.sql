-- Who each event is the word of (see migrations/0014_event_origin.sql): NULL for the executor the event
-- is filed under, 'serve', or 'operator:<name>'. Adding a nullable column without a default rewrites
-- nothing.
ALTER TABLE events ADD COLUMN origin TEXT;

CREATE OR REPLACE VIEW mission_events AS
    SELECT seq, event, executor_id, mission_id, ts, received_at, data, raw, origin
        FROM events WHERE mission_id IS NOT NULL;
