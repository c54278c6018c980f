-- Three indexes of 0002 that no query can use: the apiserver sorts runs by
-- coalesce(started_at, created_at, epoch) (0003), and an index on the two-argument coalesce does
-- not match that expression; the leading phase and tenant columns are covered by 0003's
-- runs_phase_sort_at and runs_tenant_sort_at. Every run upsert was keeping them up to date.
-- DROP INDEX holds the table's lock only for the catalogue change, not for a scan.
SET LOCAL search_path = workflow_manager;

DROP INDEX IF EXISTS runs_sort;
DROP INDEX IF EXISTS runs_tenant_sort;
DROP INDEX IF EXISTS runs_phase;
