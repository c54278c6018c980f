"""Pipelines and their versions in PostgreSQL (tables ``pipelines``, ``pipeline_versions``).

The one module that holds their SQL: the compiler writes through ``PipelineStore`` and the
apiserver reads through ``PipelineReader``, so both agree on columns, scoping and order.

Every write happens inside a transaction the compiler's service holds while it applies a
template (``PipelineStore.transaction``), with the pipeline's row locked (``lock``), so two
saves of one pipeline never race for a version number and a version row is only ever written
after its template was applied.

Reads are scoped to a tenant: ``tenant`` None (an administrator not acting for a tenant) reads
every tenant's, and another tenant's pipeline is indistinguishable from a missing one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import asyncpg

from shared import labels as L
from shared.db.git_sources import GitSourceRow, GitSourceStore
from shared.db.pool import translate_db_errors
from shared.errors import Conflict
from shared.pipelines import PipelineKind
from shared.sql import contains_pattern


@dataclass(frozen=True, slots=True)
class PipelineRow:
    id: str
    tenant: str
    kind: PipelineKind
    name: str
    description: str
    definition_type: str
    current_version: int
    latest_version: int
    created_by: str
    created_at: datetime
    updated_at: datetime
    # The schedule's pause (both or neither), whoever paused it and when (migration 0014).
    schedule_paused_by: str | None = None
    schedule_paused_at: datetime | None = None
    # False until the reconciler adopted a pause made before the pause was recorded here.
    schedule_pause_adopted: bool = True


@dataclass(frozen=True, slots=True)
class VersionRow:
    pipeline_id: str
    version: int
    definition: dict[str, Any]
    parameters: list[dict[str, Any]]
    settings: dict[str, Any]  # the body's settings as saved (shared.pipelines.SETTINGS_FIELDS)
    stages: list[str]  # the ML control stages its template contains (shared.stages), in order
    template_name: str
    template: dict[str, Any]
    template_removed_at: datetime | None
    created_by: str
    created_at: datetime
    commit: str | None = None  # the Git commit its document was read at (None: not from Git)


@dataclass(frozen=True, slots=True)
class PipelinePage:
    rows: list[PipelineRow]  # up to limit + 1: the extra one says a next page exists
    total: int


_PIPELINE: Final = (
    "id, tenant, kind, name, description, definition_type, current_version, latest_version, "
    "created_by, created_at, updated_at, schedule_paused_by, schedule_paused_at, "
    "schedule_pause_adopted"
)
_VERSION: Final = (
    "pipeline_id, version, definition, parameters, settings, stages, template_name, template, "
    "template_removed_at, created_by, created_at, commit"
)
# ``$2`` is the tenant, NULL for every tenant's.
_LISTED: Final = "kind = $1 AND ($2::text IS NULL OR tenant = $2) AND name ILIKE $3"


def _aliased(columns: str, table: str, prefix: str = "") -> str:
    """``columns`` of ``table``'s alias, each renamed ``<prefix><column>`` when given."""
    names = (column.strip() for column in columns.split(","))
    return ", ".join(f"{table}.{name} AS {prefix}{name}" for name in names)


def _pipeline(row: asyncpg.Record | None) -> PipelineRow | None:
    return None if row is None else PipelineRow(**dict(row))


def _version(row: asyncpg.Record | None) -> VersionRow | None:
    return None if row is None else VersionRow(**dict(row))


class PipelineReader:
    """The apiserver's reads, over the pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def page(
        self,
        kind: PipelineKind,
        *,
        tenant: str | None,
        name_contains: str,
        after: tuple[str, str] | None,
        limit: int,
    ) -> PipelinePage:
        """Pipelines of ``kind`` by name, then id, after ``(name, id)``: ``limit + 1`` rows."""
        pattern = contains_pattern(name_contains)
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {_PIPELINE} FROM pipelines WHERE {_LISTED} "
                "AND ($4::text IS NULL OR (name, id) > ($4, $5)) ORDER BY name, id LIMIT $6",
                kind,
                tenant,
                pattern,
                after[0] if after else None,
                after[1] if after else "",
                limit + 1,
            )
            total = await self._pool.fetchval(
                f"SELECT count(*) FROM pipelines WHERE {_LISTED}", kind, tenant, pattern
            )
        return PipelinePage([PipelineRow(**dict(row)) for row in rows], int(total))

    async def find(
        self, kind: PipelineKind, pipeline_id: str, *, tenant: str | None
    ) -> PipelineRow | None:
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_PIPELINE} FROM pipelines WHERE id = $1 AND kind = $2 "
                "AND ($3::text IS NULL OR tenant = $3)",
                pipeline_id,
                kind,
                tenant,
            )
        return _pipeline(row)

    async def version(self, pipeline_id: str, version: int) -> VersionRow | None:
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_VERSION} FROM pipeline_versions WHERE pipeline_id = $1 AND version = $2",
                pipeline_id,
                version,
            )
        return _version(row)

    async def git_source(self, pipeline_id: str) -> GitSourceRow | None:
        """What Git sync last found for a Git-defined pipeline (read after ``find``)."""
        with translate_db_errors():
            async with self._pool.acquire() as conn:
                return await GitSourceStore(conn).get(pipeline_id)

    async def versions(
        self, pipeline_id: str, *, before: int | None, limit: int
    ) -> list[VersionRow]:
        """Newest first, older than ``before``: ``limit + 1`` rows."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {_VERSION} FROM pipeline_versions WHERE pipeline_id = $1 "
                "AND ($2::int IS NULL OR version < $2) ORDER BY version DESC LIMIT $3",
                pipeline_id,
                before,
                limit + 1,
            )
        return [VersionRow(**dict(row)) for row in rows]


class PipelineStore:
    """The compiler's queries over one connection, inside a transaction."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn
        self.git = GitSourceStore(conn)  # the pipeline's Git source, in the same transaction

    @classmethod
    @contextlib.asynccontextmanager
    async def transaction(cls, pool: asyncpg.Pool) -> AsyncIterator[PipelineStore]:
        """A store over a connection in a transaction: committed when the block ends, rolled
        back when it raises."""
        with translate_db_errors():
            async with pool.acquire() as conn, conn.transaction():
                yield cls(conn)

    async def name_taken(self, tenant: str, kind: str, name: str, *, other_than: str = "") -> bool:
        found = await self._conn.fetchval(
            "SELECT 1 FROM pipelines WHERE tenant = $1 AND kind = $2 AND name = $3 AND id <> $4",
            tenant,
            kind,
            name,
            other_than,
        )
        return found is not None

    async def lock(
        self, tenant: str, kind: str, pipeline_id: str, *, wait: bool = True
    ) -> PipelineRow | None:
        """The pipeline of this tenant and kind, locked until the transaction ends; with
        ``wait`` False, None at once when another transaction holds it."""
        row = await self._conn.fetchrow(
            f"SELECT {_PIPELINE} FROM pipelines WHERE id = $1 AND tenant = $2 AND kind = $3 "
            f"FOR UPDATE{'' if wait else ' SKIP LOCKED'}",
            pipeline_id,
            tenant,
            kind,
        )
        return _pipeline(row)

    async def version(self, pipeline_id: str, version: int) -> VersionRow | None:
        row = await self._conn.fetchrow(
            f"SELECT {_VERSION} FROM pipeline_versions WHERE pipeline_id = $1 AND version = $2",
            pipeline_id,
            version,
        )
        return _version(row)

    async def insert_pipeline(
        self,
        *,
        pipeline_id: str,
        tenant: str,
        kind: str,
        name: str,
        description: str,
        definition_type: str,
        actor: str,
    ) -> None:
        """Conflict when the tenant has a pipeline of that kind and name already (a save that
        won the race after ``name_taken``); the transaction is then unusable."""
        try:
            await self._conn.execute(
                "INSERT INTO pipelines (id, tenant, kind, name, description, definition_type, "
                "current_version, latest_version, created_by) "
                "VALUES ($1, $2, $3, $4, $5, $6, 1, 1, $7)",
                pipeline_id,
                tenant,
                kind,
                name,
                description,
                definition_type,
                actor,
            )
        except asyncpg.UniqueViolationError:
            raise Conflict(
                f"a {kind} pipeline named {name!r} exists already", details={"name": name}
            ) from None

    async def insert_version(
        self,
        *,
        pipeline_id: str,
        version: int,
        definition: dict[str, Any],
        parameters: list[dict[str, Any]],
        settings: dict[str, Any],
        stages: list[str],
        template_name: str,
        template: dict[str, Any],
        actor: str,
        commit: str | None = None,
    ) -> None:
        await self._conn.execute(
            "INSERT INTO pipeline_versions (pipeline_id, version, definition, parameters, "
            "settings, stages, template_name, template, created_by, commit) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            pipeline_id,
            version,
            definition,
            parameters,
            settings,
            stages,
            template_name,
            template,
            actor,
            commit,
        )

    async def point_at(
        self,
        pipeline_id: str,
        *,
        current: int,
        latest: int,
        name: str | None = None,
        description: str | None = None,
        definition_type: str | None = None,
    ) -> None:
        await self._conn.execute(
            "UPDATE pipelines SET current_version = $2, latest_version = $3, "
            "name = coalesce($4, name), description = coalesce($5, description), "
            "definition_type = coalesce($6, definition_type), updated_at = now() WHERE id = $1",
            pipeline_id,
            current,
            latest,
            name,
            description,
            definition_type,
        )

    async def surplus_templates(self, pipeline_id: str, *, keep: int, current: int) -> list[str]:
        """Templates still applied beyond the newest ``keep`` versions (never the current)."""
        rows = await self._conn.fetch(
            "SELECT template_name FROM pipeline_versions WHERE pipeline_id = $1 "
            "AND template_removed_at IS NULL AND version <> $2 "
            "ORDER BY version DESC OFFSET $3",
            pipeline_id,
            current,
            max(keep - 1, 0),
        )
        return [row["template_name"] for row in rows]

    async def mark_removed(self, pipeline_id: str, template_names: list[str]) -> None:
        await self._conn.execute(
            "UPDATE pipeline_versions SET template_removed_at = now() "
            "WHERE pipeline_id = $1 AND template_name = ANY($2::text[])",
            pipeline_id,
            template_names,
        )

    async def mark_restored(self, pipeline_id: str, version: int) -> None:
        await self._conn.execute(
            "UPDATE pipeline_versions SET template_removed_at = NULL "
            "WHERE pipeline_id = $1 AND version = $2",
            pipeline_id,
            version,
        )

    async def delete(self, pipeline_id: str) -> None:
        await self._conn.execute("DELETE FROM pipelines WHERE id = $1", pipeline_id)

    async def releases_in_flight(
        self, tenant: str, pipeline_id: str, *, limit: int = 20
    ) -> tuple[list[str], int]:
        """The ML pipeline's runs whose release has not ended (``namespace/name``, at most
        ``limit``, and how many there are): a version of it with no release ending recorded
        yet or an approval pending (the model registry, written by stagectl), or a run in the
        tenant's namespace still pending or running that has registered nothing yet (the
        watcher's record). Deleting the pipeline under them would leave each release unable to
        finish its stages (stagectl admits stages only of recorded pipeline versions)."""
        rows = await self._conn.fetch(
            "WITH flying AS ("
            "SELECT run_namespace AS namespace, run_name AS name FROM model_versions v "
            "WHERE pipeline_id = $2 AND (release_outcome IS NULL AND state IN "
            "('registering', 'registered', 'passed', 'approved') OR EXISTS (SELECT 1 FROM "
            "approvals a WHERE a.run_uid = v.run_uid AND a.state = 'pending')) "
            "UNION SELECT namespace, name FROM runs WHERE pipeline_id = $2 AND namespace = $1 "
            "AND phase IN ('Pending', 'Running')) "
            "SELECT namespace, name, count(*) OVER () AS total FROM flying "
            "ORDER BY namespace, name LIMIT $3",
            f"{L.DATA_NAMESPACE_PREFIX}{tenant}",
            pipeline_id,
            limit,
        )
        total = int(rows[0]["total"]) if rows else 0
        return [f"{row['namespace']}/{row['name']}" for row in rows], total

    async def guard_data_secrets(self, tenant: str, *, exclusive: bool) -> None:
        """Hold ``tenant``'s data-secrets lock until the transaction ends: shared by saves and
        rollbacks (which read the tenant's data secrets and record a version referring to
        them), exclusive for a data secret's delete (which checks that no current version
        refers to it), so that a delete never passes its check while a save that found the
        secret is still recording."""
        function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        await self._conn.execute(f"SELECT {function}(hashtext('wm-data-secrets:' || $1))", tenant)

    async def current_versions_mentioning(
        self, tenant: str, text: str
    ) -> list[tuple[PipelineRow, VersionRow]]:
        """The tenant's pipelines (both kinds) whose current version's template, definition or
        settings hold ``text`` anywhere (a cheap superset of those referring to a Secret of
        that name; the caller decides), by name."""
        rows = await self._conn.fetch(
            f"SELECT {_aliased(_PIPELINE, 'p')}, {_aliased(_VERSION, 'v', 'v_')} "
            "FROM pipelines p JOIN pipeline_versions v "
            "ON v.pipeline_id = p.id AND v.version = p.current_version "
            "WHERE p.tenant = $1 AND (strpos(v.template::text, $2) > 0 "
            "OR strpos(v.definition::text, $2) > 0 OR strpos(v.settings::text, $2) > 0) "
            "ORDER BY p.name, p.kind, p.id",
            tenant,
            text,
        )
        found = []
        for row in rows:
            record = dict(row)
            version = {k[2:]: record.pop(k) for k in list(record) if k.startswith("v_")}
            found.append((PipelineRow(**record), VersionRow(**version)))
        return found

    async def set_pause(
        self, pipeline_id: str, *, by: str | None, at: datetime | None, adopted: bool = True
    ) -> None:
        """Record the schedule's pause (``by`` and ``at``), or its end (both None)."""
        await self._conn.execute(
            "UPDATE pipelines SET schedule_paused_by = $2, schedule_paused_at = $3, "
            "schedule_pause_adopted = schedule_pause_adopted OR $4 WHERE id = $1",
            pipeline_id,
            by,
            at,
            adopted,
        )

    async def end_pause(self, pipeline_id: str, *, while_current: int) -> bool:
        """End the schedule's pause if version ``while_current`` is still the current one;
        whether a pause ended."""
        ended = await self._conn.fetchval(
            "UPDATE pipelines SET schedule_paused_by = NULL, schedule_paused_at = NULL "
            "WHERE id = $1 AND current_version = $2 AND schedule_paused_by IS NOT NULL "
            "RETURNING id",
            pipeline_id,
            while_current,
        )
        return ended is not None

    async def ids(self, *, after: str, limit: int) -> list[tuple[str, str, str]]:
        """(id, tenant, kind) of every tenant's pipelines by id after ``after``: a reconciler's
        walk, one page at a time."""
        rows = await self._conn.fetch(
            "SELECT id, tenant, kind FROM pipelines WHERE id > $1 ORDER BY id LIMIT $2",
            after,
            limit,
        )
        return [(row["id"], row["tenant"], row["kind"]) for row in rows]

    async def host_cluster_id(self) -> str | None:
        value = await self._conn.fetchval(
            "SELECT id FROM clusters WHERE is_host AND removed_at IS NULL "
            "ORDER BY registered DESC LIMIT 1"
        )
        return str(value) if value is not None else None
