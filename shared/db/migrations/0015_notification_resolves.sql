-- A PagerDuty incident opened for a failed run is resolved when the run, retried in place (the
-- same uid: Failed -> Running -> Succeeded), succeeds (docs/operations.md, "Run notifications").
-- The resolve is a second delivery for the same run and channel, so a delivery is now unique
-- per run, channel and kind: 'notify' (the message of the run's first finish a channel
-- matches: a Slack message or a PagerDuty trigger) or 'resolve' (the PagerDuty resolve of that
-- trigger). Every delivery before this migration is a 'notify'.
SET LOCAL search_path = workflow_manager;

ALTER TABLE notification_deliveries
    ADD COLUMN kind text NOT NULL DEFAULT 'notify' CHECK (kind IN ('notify', 'resolve')),
    DROP CONSTRAINT notification_deliveries_run_uid_channel_key,
    ADD CONSTRAINT notification_deliveries_run_uid_channel_kind_key
        UNIQUE (run_uid, channel, kind),
    ADD CONSTRAINT notification_deliveries_resolves_pagerduty
        CHECK (kind = 'notify' OR type = 'pagerduty');
