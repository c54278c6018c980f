-- Indexes for the apiserver's run queries (apiserver/runs/query.py keeps the same expressions).
-- The sort key is "start time": started_at, else created_at (pending runs), else the epoch, so
-- that it is never NULL and keyset pagination compares plain values.
SET LOCAL search_path = workflow_manager;

CREATE INDEX runs_sort_at ON runs
    ((coalesce(started_at, created_at, '1970-01-01 00:00:00+00'::timestamptz)) DESC, id DESC);
CREATE INDEX runs_tenant_sort_at ON runs
    (tenant, (coalesce(started_at, created_at, '1970-01-01 00:00:00+00'::timestamptz)) DESC, id DESC);
CREATE INDEX runs_cluster_sort_at ON runs
    (cluster_id, (coalesce(started_at, created_at, '1970-01-01 00:00:00+00'::timestamptz)) DESC, id DESC);
CREATE INDEX runs_cluster_phase_sort_at ON runs
    (cluster_id, phase, (coalesce(started_at, created_at, '1970-01-01 00:00:00+00'::timestamptz)) DESC, id DESC);
CREATE INDEX runs_phase_sort_at ON runs
    (phase, (coalesce(started_at, created_at, '1970-01-01 00:00:00+00'::timestamptz)) DESC, id DESC);
CREATE INDEX runs_template ON runs (template) WHERE template IS NOT NULL;
CREATE INDEX runs_failed_finished ON runs (finished_at) WHERE phase IN ('Failed', 'Error');

-- Free text (q=): a trigram index over the words a user searches runs by.
CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA workflow_manager;
CREATE INDEX runs_text ON runs USING gin
    ((name || ' ' || namespace || ' ' || coalesce(template, '') || ' ' || coalesce(pipeline_id, ''))
     gin_trgm_ops);

CREATE INDEX access_grants_cluster ON access_grants (cluster_id, namespace);
