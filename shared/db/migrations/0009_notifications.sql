-- Run notifications: the sender's durable cursor over run_changes and one delivery per run and
-- channel (docs/operations.md, "Run notifications").
SET LOCAL search_path = workflow_manager;

-- One row: the highest run_changes.seq the compiler's notification sender has processed. It
-- starts at the change log's end when this migration runs, so that installing the feature does
-- not announce every run already in history.
CREATE TABLE notification_cursor (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),
    seq         bigint NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO notification_cursor (seq) SELECT coalesce(max(seq), 0) FROM run_changes;

-- Inserted in the transaction that moves the cursor past the change that finished the run, so a
-- finish is enqueued once (the unique key) and never lost (the cursor only moves with it).
-- state: pending (waiting for its next attempt at next_attempt_at), sending (an attempt was
-- recorded and its request may be in flight), sent, failed (permanently, or given up), or
-- unconfirmed (a Slack request whose answer never came back: never sent again).
CREATE TABLE notification_deliveries (
    id                bigserial PRIMARY KEY,
    run_uid           text NOT NULL,
    channel           text NOT NULL,
    type              text NOT NULL CHECK (type IN ('slack', 'pagerduty')),
    cluster_id        text NOT NULL,
    namespace         text NOT NULL,
    name              text NOT NULL,
    tenant            text NOT NULL,
    pipeline_id       text NOT NULL,
    pipeline_version  integer NOT NULL,
    phase             text NOT NULL,            -- the finished phase the channel matched
    secret            text NOT NULL,            -- the data secret's name, never its value
    secret_key        text NOT NULL,
    message           jsonb NOT NULL,           -- Slack body or PagerDuty event, no routing key
    change_seq        bigint NOT NULL,          -- the run change that enqueued it
    state             text NOT NULL DEFAULT 'pending'
                      CHECK (state IN ('pending', 'sending', 'sent', 'failed', 'unconfirmed')),
    attempts          integer NOT NULL DEFAULT 0,   -- requests started (recorded before each)
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    attempted_at      timestamptz,              -- when the last request was recorded, before it
    sent_at           timestamptz,
    status_code       integer,                  -- the receiver's last answer
    last_error        text,                     -- why the last attempt did not deliver
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_uid, channel)
);
CREATE INDEX notification_deliveries_due ON notification_deliveries (next_attempt_at, id)
    WHERE state = 'pending';
CREATE INDEX notification_deliveries_in_flight ON notification_deliveries (id)
    WHERE state = 'sending';
CREATE INDEX notification_deliveries_run ON notification_deliveries (cluster_id, run_uid);
