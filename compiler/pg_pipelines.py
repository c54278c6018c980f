"""Pipelines and their versions in PostgreSQL (tables ``pipelines``, ``pipeline_versions``).

Every write happens inside a transaction the service holds while it applies a template, with
the pipeline's row locked (``lock``), so two saves of one pipeline never race for a version
number and a version row is only ever written after its template was applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from compiler.stamping import PipelineKind


@dataclass(frozen=True, slots=True)
class PipelineRow:
    id: str
    tenant: str
    kind: PipelineKind
    name: str
    current_version: int
    latest_version: int


@dataclass(frozen=True, slots=True)
class VersionRow:
    pipeline_id: str
    version: int
    parameters: list[dict[str, Any]]
    template_name: str
    template: dict[str, Any]
    template_removed_at: datetime | None


_PIPELINE = "id, tenant, kind, name, current_version, latest_version"
_VERSION = "pipeline_id, version, parameters, template_name, template, template_removed_at"


def _pipeline(row: asyncpg.Record | None) -> PipelineRow | None:
    return None if row is None else PipelineRow(**dict(row))


def _version(row: asyncpg.Record | None) -> VersionRow | None:
    return None if row is None else VersionRow(**dict(row))


class PipelineStore:
    """Queries over one connection (a transaction the caller opened)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def ensure_tenant(self, tenant: str) -> None:
        await self._conn.execute(
            "INSERT INTO tenants (id) VALUES ($1) ON CONFLICT (id) DO NOTHING", tenant
        )

    async def name_taken(self, tenant: str, kind: str, name: str, *, other_than: str = "") -> bool:
        found = await self._conn.fetchval(
            "SELECT 1 FROM pipelines WHERE tenant = $1 AND kind = $2 AND name = $3 AND id <> $4",
            tenant,
            kind,
            name,
            other_than,
        )
        return found is not None

    async def lock(self, tenant: str, kind: str, pipeline_id: str) -> PipelineRow | None:
        """The pipeline of this tenant and kind, locked until the transaction ends."""
        row = await self._conn.fetchrow(
            f"SELECT {_PIPELINE} FROM pipelines WHERE id = $1 AND tenant = $2 AND kind = $3 "
            "FOR UPDATE",
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

    async def insert_version(
        self,
        *,
        pipeline_id: str,
        version: int,
        definition: dict[str, Any],
        parameters: list[dict[str, Any]],
        template_name: str,
        template: dict[str, Any],
        actor: str,
    ) -> None:
        await self._conn.execute(
            "INSERT INTO pipeline_versions (pipeline_id, version, definition, parameters, "
            "template_name, template, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            pipeline_id,
            version,
            definition,
            parameters,
            template_name,
            template,
            actor,
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

    async def host_cluster_id(self) -> str | None:
        value = await self._conn.fetchval(
            "SELECT id FROM clusters WHERE is_host AND removed_at IS NULL "
            "ORDER BY registered DESC LIMIT 1"
        )
        return str(value) if value is not None else None
