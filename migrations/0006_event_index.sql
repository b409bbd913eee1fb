-- The per-mission index of the log, written in bulk instead of with every commit.
--
-- `events_by_mission` took one leaf page per active mission in every commit: at half the ingestion
-- peak, 95 of the 119 pages a commit wrote to the WAL (64 missions streaming), about 130 MB of WAL a
-- second, whose fsync at each checkpoint stalled commits for ~100 ms. Now the writer files the events
-- above `mark` into `event_index` a few times a second, in one sorted insert (`sqlite::index`): each
-- mission's leaf is written once per interval instead of once per commit.
--
-- Per-mission reads go through `mission_events`: the indexed part, plus the events above the mark
-- (the short tail not filed yet, a range of the log's rowids). Both arms name the index's columns
-- where it has them, so that a condition on `mission_id` or `seq` pushed into the view searches the
-- index, and its rows come out in `seq` order (the arms are merged, not sorted).
CREATE TABLE event_index (
    mission_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    PRIMARY KEY (mission_id, seq)
) WITHOUT ROWID, STRICT;

CREATE TABLE event_index_mark (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    mark INTEGER NOT NULL       -- every event of a mission at or below it is in event_index
) STRICT;

INSERT INTO event_index (mission_id, seq)
    SELECT mission_id, seq FROM events WHERE mission_id IS NOT NULL ORDER BY mission_id, seq;
INSERT INTO event_index_mark (id, mark) VALUES (1, (SELECT COALESCE(MAX(seq), 0) FROM events));
DROP INDEX events_by_mission;

CREATE VIEW mission_events AS
    SELECT i.seq, e.event, e.executor_id, i.mission_id, e.ts, e.received_at, e.data, e.raw
        FROM event_index i JOIN events e ON e.seq = i.seq
    UNION ALL
    SELECT seq, event, executor_id, mission_id, ts, received_at, data, raw
        FROM events WHERE seq > (SELECT mark FROM event_index_mark) AND mission_id IS NOT NULL;

-- Retention removes events; their index entries go with them.
CREATE TRIGGER events_unindexed AFTER DELETE ON events WHEN old.mission_id IS NOT NULL
BEGIN
    DELETE FROM event_index WHERE mission_id = old.mission_id AND seq = old.seq;
END;
