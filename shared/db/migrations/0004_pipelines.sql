-- Tenants (their provisioning record), pipelines and their immutable versions.
SET LOCAL search_path = workflow_manager;

-- One row per tenant that has used pipelines: created on first use, then kept converged by the
-- compiler's reconciler. The storage user's secret key lives only in the tenant namespace's
-- Secret, never here.
CREATE TABLE tenants (
    id              text PRIMARY KEY,
    spec_hash       text,          -- the provisioning specification last applied in full
    provisioned_at  timestamptz,   -- when spec_hash was applied
    checked_at      timestamptz,   -- the reconciler's last pass (drift check)
    storage_user    text,          -- the tenant's IAM user
    storage_key_id  text,          -- its access key id in use (not a secret)
    last_error      text,          -- why the last pass failed (NULL: it succeeded)
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pipelines (
    id               text PRIMARY KEY,
    tenant           text NOT NULL REFERENCES tenants (id),
    kind             text NOT NULL CHECK (kind IN ('data', 'ml')),
    name             text NOT NULL,
    description      text NOT NULL DEFAULT '',
    definition_type  text NOT NULL CHECK (definition_type IN ('wizard', 'yaml', 'git')),
    current_version  integer NOT NULL CHECK (current_version >= 1),
    latest_version   integer NOT NULL CHECK (latest_version >= current_version),
    created_by       text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, kind, name)
);

-- Immutable: a row is written only after its template was applied, and never updated except to
-- note that template GC removed the template from the cluster.
CREATE TABLE pipeline_versions (
    pipeline_id          text NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
    version              integer NOT NULL CHECK (version >= 1),
    definition           jsonb NOT NULL,                -- as saved: wizard spec, YAML text, git ref
    parameters           jsonb NOT NULL DEFAULT '[]',   -- declared: [{name, default, ...}]
    settings             jsonb NOT NULL DEFAULT '{}',   -- schedule, triggers, notifications
    template_name        text NOT NULL,
    template             jsonb NOT NULL,                -- the stamped document, as applied
    template_removed_at  timestamptz,                   -- template GC deleted it from the cluster
    created_by           text NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline_id, version)
);
