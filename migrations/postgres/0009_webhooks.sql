-- Webhook notifications: see migrations/0011_webhooks.sql.
CREATE TABLE webhooks (
    id          TEXT PRIMARY KEY,
    url         TEXT NOT NULL,
    topics      TEXT NOT NULL,
    format      TEXT NOT NULL,
    secret      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    created_by  TEXT,
    removed_at  TEXT
);

CREATE TABLE webhook_deliveries (
    seq          BIGSERIAL PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    webhook_id   TEXT NOT NULL,
    source       TEXT NOT NULL,
    topic        TEXT NOT NULL,
    body         TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    state        TEXT NOT NULL,
    attempts     BIGINT NOT NULL,
    next_at      TEXT,
    give_up_at   TEXT NOT NULL,
    last_status  BIGINT,
    last_error   TEXT,
    delivered_at TEXT,
    UNIQUE (webhook_id, source)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_of ON webhook_deliveries (webhook_id, seq);

CREATE TABLE notify_cursor (
    id   BIGINT PRIMARY KEY CHECK (id = 1),
    seq  BIGINT NOT NULL
);

-- The events notifications follow (a mission's question and end, an executor's deregistration), read
-- after the mark through an index of their own: the others, progress above all, are the volume. The
-- condition is repeated word for word by the reads (store/reads/queries.rs, NOTABLE), and a test holds
-- them equal.
CREATE INDEX events_notable ON events (seq) WHERE event IN ('mission.hitl_required', 'mission.completed', 'mission.failed', 'mission.aborted', 'executor.deregistered');
