"""The Git sources of Git-defined pipelines in PostgreSQL (table ``git_sources``).

One row per pipeline whose last save had a Git definition: the body that save carried (what
every sync renders again, with the document fetched at the new commit) and what the sync last
found. The compiler writes it (``GitSourceStore`` inside a save's transaction, ``GitSources``
for the poller's outcomes) and the apiserver reads a pipeline's git state (``GitSources.find``).

The commits, in the order a sync reads them:

- ``last_good_commit``: the newest commit whose document is the one the last version was made
  from (``last_good_blob``, its object id); a branch whose head is this commit has nothing new,
  and a newer commit with the same document makes no version either;
- ``last_seen_commit``: the newest commit whose document was judged, good or refused, so a
  refused commit is not fetched again every pass;
- ``last_error_commit``: the commit the stored error is about (None when no commit was read:
  bad credentials, an unreachable host, a missing branch; those are retried every pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import asyncpg

from shared.db.pool import translate_db_errors
from shared.pipelines import PipelineKind


@dataclass(frozen=True, slots=True)
class GitSourceRow:
    pipeline_id: str
    tenant: str
    kind: PipelineKind
    body: dict[str, Any]  # as saved; its definition is {"type": "git", ...}
    last_seen_commit: str | None
    last_good_commit: str | None
    last_good_blob: str | None
    last_error: str | None
    last_error_reason: str | None
    last_error_commit: str | None
    last_error_at: datetime | None  # since when that error has been found
    checked_at: datetime | None

    @property
    def definition(self) -> dict[str, Any]:
        definition = self.body.get("definition")
        return definition if isinstance(definition, dict) else {}


_COLUMNS: Final = (
    "g.pipeline_id, p.tenant, p.kind, g.body, g.last_seen_commit, g.last_good_commit, "
    "g.last_good_blob, "
    "g.last_error, g.last_error_reason, g.last_error_commit, g.last_error_at, g.checked_at"
)
_FROM: Final = "git_sources g JOIN pipelines p ON p.id = g.pipeline_id"


def _row(record: asyncpg.Record | None) -> GitSourceRow | None:
    return None if record is None else GitSourceRow(**dict(record))


class GitSources:
    """Reads and the poller's outcome writes, over the pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def all(self) -> list[GitSourceRow]:
        """Every Git-defined pipeline of every tenant (a poller pass), oldest check first."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {_COLUMNS} FROM {_FROM} ORDER BY g.checked_at NULLS FIRST, g.pipeline_id"
            )
        return [GitSourceRow(**dict(row)) for row in rows]

    async def find(
        self, pipeline_id: str, *, kind: PipelineKind, tenant: str | None
    ) -> GitSourceRow | None:
        """The pipeline's source, scoped like every read (None: every tenant's)."""
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_COLUMNS} FROM {_FROM} WHERE g.pipeline_id = $1 AND p.kind = $2 "
                "AND ($3::text IS NULL OR p.tenant = $3)",
                pipeline_id,
                kind,
                tenant,
            )
        return _row(row)

    async def checked(self, pipeline_ids: Sequence[str], *, clear_error: bool) -> None:
        """Nothing new on these branches: note the check (and, when their head is the last good
        commit, that nothing is wrong any more)."""
        if not pipeline_ids:
            return
        with translate_db_errors():
            await self._pool.execute(
                "UPDATE git_sources SET checked_at = now(), "
                "last_error = CASE WHEN $2 THEN NULL ELSE last_error END, "
                "last_error_reason = CASE WHEN $2 THEN NULL ELSE last_error_reason END, "
                "last_error_commit = CASE WHEN $2 THEN NULL ELSE last_error_commit END, "
                "last_error_at = CASE WHEN $2 THEN NULL ELSE last_error_at END "
                "WHERE pipeline_id = ANY($1::text[])",
                list(pipeline_ids),
                clear_error,
            )

    async def record_failure(
        self, pipeline_id: str, *, reason: str, message: str, commit: str | None
    ) -> bool:
        """Store a failed check; True when it is news (the stored error was another one), so
        the caller audits each distinct error once rather than every pass. A failure about a
        commit marks that commit seen: its document is not fetched again until a new commit
        (or a manual sync) comes."""
        with translate_db_errors():
            before = await self._pool.fetchrow(
                # The locked subquery is read before the row changes (a CTE would be read after).
                "UPDATE git_sources g SET last_error = $2, last_error_reason = $3, "
                "last_error_commit = $4, last_seen_commit = coalesce($4, g.last_seen_commit), "
                "last_error_at = CASE WHEN old.last_error IS DISTINCT FROM $2 THEN now() "
                "ELSE g.last_error_at END, checked_at = now() "
                "FROM (SELECT last_error FROM git_sources WHERE pipeline_id = $1 FOR UPDATE) old "
                "WHERE g.pipeline_id = $1 RETURNING old.last_error AS before",
                pipeline_id,
                message,
                reason,
                commit,
            )
        return before is not None and before["before"] != message


class GitSourceStore:
    """The save path's writes, over the connection of its transaction (the pipeline's row is
    locked by then, which serialises them with every other save of the pipeline)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def get(self, pipeline_id: str) -> GitSourceRow | None:
        row = await self._conn.fetchrow(
            f"SELECT {_COLUMNS} FROM {_FROM} WHERE g.pipeline_id = $1", pipeline_id
        )
        return _row(row)

    async def save(
        self, pipeline_id: str, *, body: dict[str, Any], commit: str, blob: str | None
    ) -> None:
        """A save with a Git definition: the body to follow, and the commit (and document)
        it was made from."""
        await self._conn.execute(
            "INSERT INTO git_sources (pipeline_id, body, last_seen_commit, last_good_commit, "
            "last_good_blob, checked_at) VALUES ($1, $2, $3, $3, $4, now()) "
            "ON CONFLICT (pipeline_id) DO UPDATE SET body = excluded.body, "
            "last_seen_commit = $3, last_good_commit = $3, last_good_blob = $4, "
            "last_error = NULL, last_error_reason = NULL, last_error_commit = NULL, "
            "last_error_at = NULL, checked_at = now()",
            pipeline_id,
            body,
            commit,
            blob,
        )

    async def synced(self, pipeline_id: str, *, commit: str, blob: str | None) -> None:
        """A sync found ``commit`` good: it made a version of it, or its document is the one
        the last version was made from."""
        await self._conn.execute(
            "UPDATE git_sources SET last_seen_commit = $2, last_good_commit = $2, "
            "last_good_blob = $3, last_error = NULL, last_error_reason = NULL, "
            "last_error_commit = NULL, last_error_at = NULL, checked_at = now() "
            "WHERE pipeline_id = $1",
            pipeline_id,
            commit,
            blob,
        )

    async def drop(self, pipeline_id: str) -> None:
        """A save with another definition: the pipeline follows no branch any more."""
        await self._conn.execute("DELETE FROM git_sources WHERE pipeline_id = $1", pipeline_id)
