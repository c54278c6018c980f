-- Git-defined pipelines (docs/pipeline-spec.md, "Git"): the commit each version was made from,
-- and one row per pipeline that follows a Git branch, with what its sync last found.
SET LOCAL search_path = workflow_manager;

-- The commit of the repository a version's document was read at (NULL: not from Git).
ALTER TABLE pipeline_versions ADD COLUMN commit text;

-- One row per pipeline whose last save (create or update) had a Git definition; a save with
-- another definition deletes it. Written by the compiler (the save path and Git sync), read by
-- the apiserver (a pipeline's git state). No credential is ever stored here: the body names a
-- data secret, whose values live only in the tenant namespace's Secret.
CREATE TABLE git_sources (
    pipeline_id        text PRIMARY KEY REFERENCES pipelines (id) ON DELETE CASCADE,
    body               jsonb NOT NULL,   -- the body last saved: what every sync renders again
    last_seen_commit   text,             -- the newest commit whose document was judged
    last_good_commit   text,             -- the newest commit whose document is the last made
    last_good_blob     text,             -- that document's Git object id
    last_error         text,             -- why the last check failed (NULL: it succeeded)
    last_error_reason  text,             -- its kind: auth, unreachable, path_not_found, ...
    last_error_commit  text,             -- the commit that error is about (NULL: none was read)
    last_error_at      timestamptz,
    checked_at         timestamptz,      -- the last check, whatever its outcome
    created_at         timestamptz NOT NULL DEFAULT now()
);
