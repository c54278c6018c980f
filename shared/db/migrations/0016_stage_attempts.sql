-- A stage's outcome belongs to one attempt of its run. Argo retries a run in place (the same
-- uid): the nodes that failed, and the exit handler, run again, and the run's status.startedAt
-- is set anew. An outcome recorded by the first attempt must not answer the second: a run that
-- failed before registering, retried to success, must be judged and cleaned up again
-- (docs/operations.md, "stagectl"). attempt is the run's status.startedAt when the stage was
-- seen waiting ('' for the rows recorded before this migration, which stay their attempt's).
-- startedAt has second precision: a node that waits again after its completion in the same
-- second's attempt (completed_rv: the workflow's resourceVersion once the node was completed;
-- a copy newer than it that shows the node waiting is a new attempt) is attempt
-- '<startedAt>#2', '#3', ... (stagectl.stages).
--
-- stage_progress keeps a long stage's progress (deploy waits for readiness; part three's
-- analysis runs for minutes): a state machine's current step, so a restart or a new leader
-- continues from it instead of starting the stage again.
SET LOCAL search_path = workflow_manager;

ALTER TABLE stage_outcomes
    ADD COLUMN attempt text NOT NULL DEFAULT '',
    ADD COLUMN completed_rv bigint,
    DROP CONSTRAINT stage_outcomes_pkey,
    ADD PRIMARY KEY (run_uid, stage, attempt);

-- The attempt whose approval stage asked for the decision (a retried run that asks again keeps
-- the decision already made, and the new attempt's node is completed with it).
ALTER TABLE approvals ADD COLUMN attempt text NOT NULL DEFAULT '';

CREATE TABLE stage_progress (
    run_uid      text NOT NULL,
    stage        text NOT NULL,
    attempt      text NOT NULL,
    step         text NOT NULL,
    state        jsonb NOT NULL DEFAULT '{}',
    started_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_uid, stage, attempt)
);
