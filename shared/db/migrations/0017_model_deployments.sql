-- Where each model serves (shared/db/deployments.py): one row per model and environment
-- holding the version it should serve (written by the deploy stage for staging, and by the
-- promote and rollback routes for production) and what the stage controller's deployment
-- reconciler observed of it (docs/operations.md, "Deployments").
--
-- generation grows with every change of the wanted version; observed_generation is the
-- generation the reconciler last applied. state: 'deploying' until the InferenceService of
-- the wanted version is ready ('ready', url set) or cannot be ('failed', message: KServe's
-- condition or the deadline). serving: how the version is served (the release's serving
-- block of its pipeline version), so a rollback serves it as it was released.
-- token_sealed: the deployment's first token, sealed (shared/token_sealing.py) with a key
-- PostgreSQL never sees; only its hash is in inference_tokens (docs/security.md).
SET LOCAL search_path = workflow_manager;

CREATE TABLE model_deployments (
    model_id             text NOT NULL REFERENCES models (id),
    environment          text NOT NULL CHECK (environment IN ('staging', 'production')),
    version              integer NOT NULL,
    serving              jsonb NOT NULL,
    generation           bigint NOT NULL DEFAULT 1,
    observed_generation  bigint NOT NULL DEFAULT 0,
    state                text NOT NULL DEFAULT 'deploying'
                             CHECK (state IN ('deploying', 'ready', 'failed')),
    message              text,
    url                  text,
    token_sealed         bytea,
    requested_by         text NOT NULL,
    requested_at         timestamptz NOT NULL DEFAULT now(),
    deadline             timestamptz NOT NULL,
    ready_at             timestamptz,
    PRIMARY KEY (model_id, environment),
    FOREIGN KEY (model_id, version) REFERENCES model_versions (model_id, number)
);
CREATE INDEX model_deployments_unsettled ON model_deployments (requested_at)
    WHERE state = 'deploying';

-- Every change of what an environment serves, oldest first: a rollback returns production to
-- the version before the current one in this history (or to a given one it served before).
-- A deploy stage's change is unique per run attempt and environment, so a stage repeated
-- after a crash records one deployment.
CREATE TABLE model_deployment_history (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    model_id          text NOT NULL REFERENCES models (id),
    environment       text NOT NULL,
    version           integer NOT NULL,
    previous_version  integer,
    action            text NOT NULL CHECK (action IN ('deploy', 'promote', 'rollback')),
    actor             text NOT NULL,
    run_uid           text,
    attempt           text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_uid, attempt, environment)
);
CREATE INDEX model_deployment_history_model ON model_deployment_history (model_id, environment, id);

-- A change of the wanted version notifies channel model_deployments with '<model id>/<env>'
-- on commit: the stage controller's reconciler applies it at once.
CREATE FUNCTION model_deployments_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.generation IS DISTINCT FROM OLD.generation THEN
        PERFORM pg_notify('model_deployments', NEW.model_id || '/' || NEW.environment);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER model_deployments_notify
AFTER INSERT OR UPDATE ON model_deployments
FOR EACH ROW EXECUTE FUNCTION model_deployments_notify();
