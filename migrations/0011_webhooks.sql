-- Webhook notifications (issue 37): stored subscriptions, the outbox of their deliveries, and how far
-- the log has been read for them. A delivery is queued in the store before it is sent, so that serve
-- killed between an event and its delivery still delivers it after a restart (at least once).
CREATE TABLE webhooks (
    id          TEXT PRIMARY KEY,                  -- wh_...
    url         TEXT NOT NULL,
    topics      TEXT NOT NULL,                     -- comma-separated: mission.hitl_required,...
    format      TEXT NOT NULL,                     -- standard | slack
    secret      TEXT NOT NULL,                     -- whsec_...: signing needs the key itself
    created_at  TEXT NOT NULL,
    created_by  TEXT,
    removed_at  TEXT
) STRICT;

CREATE TABLE webhook_deliveries (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,             -- msg_...: the webhook-id header
    webhook_id   TEXT NOT NULL,                    -- wh_... or config-N
    source       TEXT NOT NULL,                    -- event:<seq> or queued:<mission id>
    topic        TEXT NOT NULL,
    body         TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    state        TEXT NOT NULL,                    -- pending | delivered | failed
    attempts     INTEGER NOT NULL,
    next_at      TEXT,
    give_up_at   TEXT NOT NULL,
    last_status  INTEGER,
    last_error   TEXT,
    delivered_at TEXT,
    UNIQUE (webhook_id, source)                    -- a notice is queued once per subscription
) STRICT;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_of ON webhook_deliveries (webhook_id, seq);

-- The last event of the log read for notifications (one row).
CREATE TABLE notify_cursor (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL
) STRICT;

-- The events notifications follow (a mission's question and end, an executor's deregistration), read
-- after the mark through an index of their own: the others, progress above all, are the volume. The
-- condition is repeated word for word by the reads (store/reads/queries.rs, NOTABLE), and a test holds
-- them equal.
CREATE INDEX events_notable ON events (seq) WHERE event IN ('mission.hitl_required', 'mission.completed', 'mission.failed', 'mission.aborted', 'executor.deregistered');
