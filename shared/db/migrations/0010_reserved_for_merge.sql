-- Placeholder on branch wt/gitsync only: versions run 1..N without gaps and this branch's
-- migration is 0012. The branch that owns 0010 replaces this file at merge (delete it).
SELECT 1;
