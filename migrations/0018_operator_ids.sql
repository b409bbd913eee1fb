-- Operators get an id of their own (issue 53): a revoked operator's name may be given again, and what
-- was the old operator's (the answers kept for its Idempotency-Keys) must not pass to the new one. The
-- configuration's admins (config-N) and the anonymous admin of open routes keep their names as ids.
ALTER TABLE operators ADD COLUMN id TEXT;
UPDATE operators SET id = 'op_' || lower(hex(randomblob(16)));
CREATE UNIQUE INDEX operators_id ON operators (id);
-- Kept answers were the operator's by name; idempotency_keys.operator is the operator's id from now on.
-- Each answer goes to the operator that held its name when it was kept; those of a name revoked since
-- are forgotten.
DELETE FROM idempotency_keys
WHERE operator NOT LIKE 'config-%' AND operator <> 'anonymous'
  AND NOT EXISTS (SELECT 1 FROM operators o WHERE o.name = idempotency_keys.operator
                  AND o.revoked_at IS NULL AND o.created_at <= idempotency_keys.created_at);
UPDATE idempotency_keys SET operator = (SELECT o.id FROM operators o WHERE o.name = idempotency_keys.operator)
WHERE operator NOT LIKE 'config-%' AND operator <> 'anonymous';
