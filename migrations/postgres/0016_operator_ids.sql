-- Operators get an id of their own: see migrations/0018_operator_ids.sql.
ALTER TABLE operators ADD COLUMN id TEXT;
UPDATE operators SET id = 'op_' || md5(random()::text || clock_timestamp()::text || name);
CREATE UNIQUE INDEX operators_id ON operators (id);
DELETE FROM idempotency_keys
WHERE operator NOT LIKE 'config-%' AND operator <> 'anonymous'
  AND NOT EXISTS (SELECT 1 FROM operators o WHERE o.name = idempotency_keys.operator
                  AND o.revoked_at IS NULL AND o.created_at <= idempotency_keys.created_at);
UPDATE idempotency_keys SET operator = (SELECT o.id FROM operators o WHERE o.name = idempotency_keys.operator)
WHERE operator NOT LIKE 'config-%' AND operator <> 'anonymous';
