-- The audit trail cannot be filled by anyone (issue 53): refusals of callers without a valid operator
-- token are counted, one record per source and minute (`bucket`, its key: the source and the minute;
-- NULL for a record of one call) with how many it stands for (`count`; NULL, one, before this column).
ALTER TABLE audit ADD COLUMN count INTEGER;
ALTER TABLE audit ADD COLUMN bucket TEXT;
CREATE UNIQUE INDEX audit_bucket ON audit (bucket);
