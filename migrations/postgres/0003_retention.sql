-- Retention: when a mission's history was compacted (its progress events removed, its first and last
-- events and every other kept), and how far compaction has reached into the log.
ALTER TABLE missions ADD COLUMN compacted_at TEXT;
CREATE TABLE compaction (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    horizon BIGINT NOT NULL,    -- the highest sequence number compacted away: the log is whole above it
    removed BIGINT NOT NULL     -- events compacted away, in all
);
INSERT INTO compaction (id, horizon, removed) VALUES (1, 0, 0);
-- Ended missions not compacted yet, oldest end first: what a compaction pass looks for.
CREATE INDEX missions_to_compact ON missions (completed_at) WHERE compacted_at IS NULL AND completed_at IS NOT NULL;
