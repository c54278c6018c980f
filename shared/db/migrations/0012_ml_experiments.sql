-- Each ML pipeline's MLflow experiment, as the compiler created it (docs/operations.md,
-- "Experiment tracking"). The id is kept rather than found again by name: the tenant's account
-- holds EDIT on the experiment, which lets it rename it, and a name can then be taken by
-- another experiment; the id never changes.
--
-- No foreign key to pipelines: the row is written by the compiler's tracking attachment while
-- the save's transaction (which inserted the pipeline) is still open on another connection, so
-- the pipeline row is not visible to it yet. The pipeline's delete removes the row (detach);
-- a row left by a save that rolled back names a pipeline id nobody holds, and is harmless.
SET LOCAL search_path = workflow_manager;

CREATE TABLE ml_experiments (
    pipeline_id    text PRIMARY KEY,
    tenant         text NOT NULL,
    experiment_id  text NOT NULL,
    name           text NOT NULL,      -- as created: <tenant>/<pipeline id>
    created_at     timestamptz NOT NULL DEFAULT now()
);
