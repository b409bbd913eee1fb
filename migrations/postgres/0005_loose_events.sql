-- Events that belong to no mission: see migrations/0007_loose_events.sql.
CREATE INDEX events_loose ON events (executor_id, seq) WHERE mission_id IS NULL;
