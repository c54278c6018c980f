-- The ML control stages each pipeline version's template contains (shared/stages.py:
-- register, gate, approval, cleanup), recorded by the compiler from the template it applied.
-- The stage controller acts only on stages the version lists, so a tenant's template that
-- merely looks like a stage gets nothing done (docs/security.md). Data pipelines and ML
-- pipelines without a release have none.
SET LOCAL search_path = workflow_manager;

ALTER TABLE pipeline_versions ADD COLUMN stages text[] NOT NULL DEFAULT '{}';
