-- The one schema every table of workflow-manager lives in. The migration runner creates it
-- before this file runs (its ledger lives here), so this must stay idempotent.
CREATE SCHEMA IF NOT EXISTS workflow_manager;
