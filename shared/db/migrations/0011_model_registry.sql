-- The model registry (shared/db/registry.py): models, their immutable versions, approvals, and
-- the stage controller's record of every control stage's outcome (docs/operations.md, "stagectl").
SET LOCAL search_path = workflow_manager;

-- One row per (tenant, model name), created by the first run that registers a version of it.
-- production_version: the version serving production (set by promotion; NULL: none yet).
CREATE TABLE models (
    id                  text PRIMARY KEY,
    tenant              text NOT NULL,
    name                text NOT NULL,
    production_version  integer,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, name)
);

-- A version is allocated (state 'registering') before its files are copied into the registry
-- under its number, and becomes 'registered' in the transaction that records the register
-- stage's outcome. Numbers are never reused: a version whose registration never finished is
-- 'abandoned', not deleted. One version per run (run_uid). What identifies it (number, run,
-- pipeline version, scorecard, lineage, files) never changes once registered; only its state
-- moves: registering -> registered -> passed | failed -> approved | rejected | expired, and
-- any registered version -> archived; registering -> abandoned.
CREATE TABLE model_versions (
    model_id          text NOT NULL REFERENCES models (id),
    number            integer NOT NULL CHECK (number >= 1),
    cluster_id       text NOT NULL,
    run_namespace     text NOT NULL,
    run_name          text NOT NULL,
    run_uid           text NOT NULL UNIQUE,
    pipeline_id       text NOT NULL,
    pipeline_version  integer NOT NULL,
    prefix            text NOT NULL,                -- registry prefix: tenants/<t>/models/<m>/<n>/
    model_file        text NOT NULL,                -- the model artifact's name under prefix
    scorecard         jsonb,                        -- NULL until registered
    verdict           text CHECK (verdict IN ('passed', 'failed')),
    reasons           jsonb NOT NULL DEFAULT '[]',
    lineage           jsonb,                        -- NULL until registered
    state             text NOT NULL DEFAULT 'registering' CHECK (state IN (
                          'registering', 'registered', 'passed', 'failed', 'approved',
                          'rejected', 'expired', 'archived', 'abandoned')),
    release_outcome   text,                         -- how its release ended (cleanup stage)
    archived_by       text,
    archived_at       timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model_id, number)
);

ALTER TABLE models ADD FOREIGN KEY (id, production_version)
    REFERENCES model_versions (model_id, number);

-- A release waiting for a person. Decided once: approved or rejected by someone through the
-- API, or expired by the stage controller at expires_at; never changed after.
CREATE TABLE approvals (
    run_uid         text PRIMARY KEY,
    model_id        text NOT NULL,
    version         integer NOT NULL,
    cluster_id     text NOT NULL,
    run_namespace   text NOT NULL,
    run_name        text NOT NULL,
    state           text NOT NULL DEFAULT 'pending'
                        CHECK (state IN ('pending', 'approved', 'rejected', 'expired')),
    requested_at    timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    decided_by      text,
    decided_at      timestamptz,
    reason          text,
    FOREIGN KEY (model_id, version) REFERENCES model_versions (model_id, number),
    CHECK ((state = 'pending') = (decided_at IS NULL))
);
CREATE INDEX approvals_pending ON approvals (expires_at) WHERE state = 'pending';
CREATE INDEX approvals_model ON approvals (model_id, state);

-- The idempotency record of the stage controller: one row per (run, stage), written before the
-- node is completed (the commit point of the stage's work), completed_at set once the Argo
-- server resumed the node. outcome: {"phase", "outputs", "message"}.
CREATE TABLE stage_outcomes (
    run_uid        text NOT NULL,
    stage          text NOT NULL,
    cluster_id    text NOT NULL,
    run_namespace  text NOT NULL,
    run_name       text NOT NULL,
    outcome        jsonb NOT NULL,
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    completed_at   timestamptz,
    PRIMARY KEY (run_uid, stage)
);
CREATE INDEX stage_outcomes_open ON stage_outcomes (recorded_at) WHERE completed_at IS NULL;

-- A decision notifies channel approvals with the run's uid on commit, whoever wrote it (the
-- API, the stage controller's expiry, an operator in psql): the stage controller completes the
-- waiting node at once instead of at its next periodic check.
CREATE FUNCTION approvals_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        PERFORM pg_notify('approvals', NEW.run_uid);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER approvals_notify
AFTER UPDATE ON approvals
FOR EACH ROW EXECUTE FUNCTION approvals_notify();
