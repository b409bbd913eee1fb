-- The number of a mission's current attempt (issue 39: the missions list shows it), set by a retry.
-- NULL for the first attempt (every mission before it was retried, and before this column).
ALTER TABLE missions ADD COLUMN attempt INTEGER;
