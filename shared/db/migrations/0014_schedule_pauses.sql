-- A pipeline's schedule pause, recorded here (docs/operations.md, "Schedules and triggers"):
-- before, it lived only on the CronWorkflow (`spec.suspend` and our annotations), so a
-- CronWorkflow deleted or edited out of band lost it. The drift reconciler and every save make
-- the CronWorkflow from the current version and this record.
--
-- Pauses made before this migration exist only on CronWorkflows: existing rows start with
-- schedule_pause_adopted false, and the reconciler adopts each one's pause from its live
-- CronWorkflow once (then sets it true). Rows inserted later need no adoption.
SET LOCAL search_path = workflow_manager;

ALTER TABLE pipelines
    ADD COLUMN schedule_paused_by      text,
    ADD COLUMN schedule_paused_at      timestamptz,
    ADD COLUMN schedule_pause_adopted  boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT pipelines_schedule_pause_whole
        CHECK ((schedule_paused_by IS NULL) = (schedule_paused_at IS NULL));

ALTER TABLE pipelines ALTER COLUMN schedule_pause_adopted SET DEFAULT true;
