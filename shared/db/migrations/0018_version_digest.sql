-- A registered version records its model's digest: the SHA-256 of the bytes copied into the
-- registry (the copy itself is made only from the object the register stage checked, its ETag
-- unchanged), as 'sha256:<64 hex>'. The same value is in the version's lineage.json. NULL
-- until registered, and for versions registered before this migration.
--
-- A version abandoned by one attempt of its run (the tenant's file was written again while it
-- was being registered, or the run ended mid-registration) is registered again by a retry of
-- the same run: abandoned -> registering, under the number the run already has (a number is
-- still never given to another run).
SET LOCAL search_path = workflow_manager;

ALTER TABLE model_versions
    ADD COLUMN digest text CHECK (digest ~ '^sha256:[0-9a-f]{64}$');
