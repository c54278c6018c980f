-- Clusters, run records, the change log that feeds live streams, actions and access grants.
SET LOCAL search_path = workflow_manager;

CREATE TABLE clusters (
    id              text PRIMARY KEY,
    name            text NOT NULL,
    region          text,
    provider        text,
    kube_system_uid text,
    is_host         boolean NOT NULL DEFAULT false,
    registered      boolean NOT NULL DEFAULT false,   -- listed by kubeopera-api
    removed_at      timestamptz,                      -- no longer watched; history stays
    argo_reachable  boolean,
    argo_version    text,
    last_event_at   timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX clusters_kube_system_uid ON clusters (kube_system_uid)
    WHERE kube_system_uid IS NOT NULL AND removed_at IS NULL;

CREATE TABLE runs (
    id                          bigserial PRIMARY KEY,
    cluster_id                  text NOT NULL REFERENCES clusters (id) ON UPDATE CASCADE,
    namespace                   text NOT NULL,
    name                        text NOT NULL,
    uid                         text NOT NULL,
    resource_version            bigint NOT NULL,
    region                      text,
    provider                    text,
    tenant                      text,
    source                      text NOT NULL,
    phase                       text NOT NULL,
    message                     text,
    progress_done               integer,
    progress_total              integer,
    created_at                  timestamptz,
    started_at                  timestamptz,
    finished_at                 timestamptz,
    duration_seconds            double precision,
    estimated_duration_seconds  integer,
    parameters                  jsonb NOT NULL DEFAULT '{}',
    resources_duration          jsonb NOT NULL DEFAULT '{}',
    template                    text,
    pipeline_id                 text,
    pipeline_version            text,
    cron_workflow               text,
    labels                      jsonb NOT NULL DEFAULT '{}',
    graph                       jsonb NOT NULL DEFAULT '{}',
    graph_truncated             boolean NOT NULL DEFAULT false,
    node_count                  integer NOT NULL DEFAULT 0,
    deleted_at                  timestamptz,   -- Argo removed it from its cluster
    updated_at                  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (cluster_id, namespace, uid)
);
-- "sort by start time" with NULLs (pending runs) by creation time: one sort key for all lists.
CREATE INDEX runs_cluster_name ON runs (cluster_id, namespace, name);
CREATE INDEX runs_tenant_sort ON runs (tenant, (coalesce(started_at, created_at)) DESC, id DESC);
CREATE INDEX runs_sort ON runs ((coalesce(started_at, created_at)) DESC, id DESC);
CREATE INDEX runs_phase ON runs (phase, (coalesce(started_at, created_at)) DESC);
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX runs_pipeline ON runs (pipeline_id) WHERE pipeline_id IS NOT NULL;

-- Every committed run change, in commit order (writers take an advisory lock before inserting,
-- so a reader that has seen seq N never later sees a smaller one). SSE ids are these seqs.
CREATE TABLE run_changes (
    seq         bigserial PRIMARY KEY,
    run_id      bigint NOT NULL,
    cluster_id  text NOT NULL,
    namespace   text NOT NULL,
    name        text NOT NULL,
    tenant      text,
    phase       text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('upsert', 'deleted')),
    changed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_changes_changed_at ON run_changes (changed_at);

CREATE TABLE run_actions (
    id          bigserial PRIMARY KEY,
    cluster_id  text NOT NULL,
    namespace   text NOT NULL,
    name        text NOT NULL,
    run_uid     text,
    tenant      text,
    actor       text NOT NULL,
    action      text NOT NULL,
    parameters  jsonb NOT NULL DEFAULT '{}',
    outcome     text NOT NULL,           -- succeeded | failed
    detail      jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_actions_target ON run_actions (cluster_id, namespace, name, created_at DESC);

CREATE TABLE access_grants (
    id          bigserial PRIMARY KEY,
    tenant      text NOT NULL,
    cluster_id  text NOT NULL,
    namespace   text NOT NULL,
    granted_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, cluster_id, namespace)
);
