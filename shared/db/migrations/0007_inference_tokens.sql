-- Model endpoints (deployments) and their bearer tokens (shared/db/inference_tokens.py), the
-- channel inference_auth's replicas drop cached tokens on, and the role inference_auth reads
-- them as (docs/inference-auth.md, docs/operations.md).
SET LOCAL search_path = workflow_manager;

-- One row per (tenant, model, environment) that has an endpoint. host is the endpoint host of
-- shared/inference_tokens.endpoint_host. The rate limits are requests per second, shared by
-- every inference_auth replica through Redis; NULL: no limit (the default).
CREATE TABLE inference_deployments (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant           text NOT NULL,
    model            text NOT NULL,
    environment      text NOT NULL,
    host             text NOT NULL UNIQUE,
    rate_limit       integer CHECK (rate_limit > 0),        -- the whole deployment
    token_rate_limit integer CHECK (token_rate_limit > 0),  -- each token of it
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, model, environment)
);

-- A token is never stored: only the SHA-256 of it (secret_hash). expires_at ends a rotated
-- token's grace; revoked_at ends a token at once.
CREATE TABLE inference_tokens (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lookup_id     text NOT NULL UNIQUE,
    secret_hash   bytea NOT NULL CHECK (length(secret_hash) = 32),
    deployment_id bigint NOT NULL REFERENCES inference_deployments (id) ON DELETE CASCADE,
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    revoked_by    text,
    replaced_by   bigint REFERENCES inference_tokens (id)
);
CREATE INDEX inference_tokens_deployment ON inference_tokens (deployment_id);

-- Every change notifies channel inference_tokens on commit: 't:<lookup id>' for a token,
-- 'd:<deployment id>' for a deployment (its host or limits changed; every token of it is
-- dropped). inference_auth LISTENs on it and drops those entries from its cache.
CREATE FUNCTION inference_tokens_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'inference_tokens' THEN
        IF TG_OP <> 'INSERT' THEN
            PERFORM pg_notify('inference_tokens', 't:' || OLD.lookup_id);
        END IF;
        IF TG_OP = 'UPDATE' AND NEW.lookup_id IS DISTINCT FROM OLD.lookup_id THEN
            PERFORM pg_notify('inference_tokens', 't:' || NEW.lookup_id);
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('inference_tokens', 'd:' || OLD.id);
    ELSIF TG_OP = 'UPDATE' THEN
        PERFORM pg_notify('inference_tokens', 'd:' || NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER inference_tokens_notify
AFTER UPDATE OR DELETE ON inference_tokens
FOR EACH ROW EXECUTE FUNCTION inference_tokens_notify();

CREATE TRIGGER inference_deployments_notify
AFTER UPDATE OR DELETE ON inference_deployments
FOR EACH ROW EXECUTE FUNCTION inference_tokens_notify();

-- The role inference_auth connects as: it reads these two tables and nothing else. Roles are
-- cluster-wide while migrations run per database, possibly several at once (test databases,
-- two installations on one server): creating it tolerates it existing already or being created
-- concurrently. It cannot log in; production gives a LOGIN role membership in it
-- (docs/operations.md).
DO $$
BEGIN
    CREATE ROLE wm_inference_auth NOLOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;
GRANT USAGE ON SCHEMA workflow_manager TO wm_inference_auth;
GRANT SELECT ON inference_deployments, inference_tokens TO wm_inference_auth;
