-- Fenced attempts (issue 53, item 6): a mission's abandoned attempts whose executor has not confirmed
-- that they stopped (it is not handed the mission again until it does), and those whose late end was
-- recorded (one each). JSON (`aiwg_domain::fence::Fence`); NULL while no attempt was abandoned.
ALTER TABLE missions ADD COLUMN fence TEXT;
