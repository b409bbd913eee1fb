-- A mission's fenced attempts (see migrations/0020_fence.sql); NULL while no attempt was abandoned.
ALTER TABLE missions ADD COLUMN fence TEXT;
