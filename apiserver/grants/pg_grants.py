"""Access grants in PostgreSQL (table ``access_grants``): a tenant may see the runs of one
namespace of one cluster besides its own."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

import asyncpg

from shared.db.pool import translate_db_errors
from shared.errors import Conflict

_COLUMNS: Final = "id, tenant, cluster_id, namespace, granted_by, created_at"


@dataclass(frozen=True, slots=True)
class GrantRow:
    id: int
    tenant: str
    cluster_id: str
    namespace: str
    granted_by: str
    created_at: datetime


class GrantStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def of_tenant(self, tenant: str) -> frozenset[tuple[str, str]]:
        """The (cluster_id, namespace) pairs granted to ``tenant``."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                "SELECT cluster_id, namespace FROM access_grants WHERE tenant = $1", tenant
            )
        return frozenset((row["cluster_id"], row["namespace"]) for row in rows)

    async def listed(self, *, tenant: str | None) -> list[GrantRow]:
        """Every grant (``tenant`` None) or one tenant's, by tenant, cluster and namespace."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {_COLUMNS} FROM access_grants WHERE ($1::text IS NULL OR tenant = $1) "
                "ORDER BY tenant, cluster_id, namespace",
                tenant,
            )
        return [GrantRow(**dict(row)) for row in rows]

    async def create(
        self, *, tenant: str, cluster_id: str, namespace: str, granted_by: str
    ) -> GrantRow:
        """The new grant; Conflict when the same one exists already."""
        try:
            with translate_db_errors():
                row = await self._pool.fetchrow(
                    "INSERT INTO access_grants (tenant, cluster_id, namespace, granted_by) "
                    f"VALUES ($1, $2, $3, $4) RETURNING {_COLUMNS}",
                    tenant,
                    cluster_id,
                    namespace,
                    granted_by,
                )
        except asyncpg.UniqueViolationError:
            raise Conflict(
                "this grant exists already",
                details={"tenant": tenant, "cluster_id": cluster_id, "namespace": namespace},
            ) from None
        return GrantRow(**dict(row))

    async def delete(self, grant_id: int) -> GrantRow | None:
        """The grant revoked, or None if there was none with that id."""
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"DELETE FROM access_grants WHERE id = $1 RETURNING {_COLUMNS}", grant_id
            )
        return None if row is None else GrantRow(**dict(row))

    async def delete_matching(
        self, *, tenant: str, cluster_id: str, namespace: str
    ) -> GrantRow | None:
        """The grant of ``tenant`` on that namespace revoked, or None if there was none."""
        with translate_db_errors():
            row = await self._pool.fetchrow(
                "DELETE FROM access_grants WHERE tenant = $1 AND cluster_id = $2 "
                f"AND namespace = $3 RETURNING {_COLUMNS}",
                tenant,
                cluster_id,
                namespace,
            )
        return None if row is None else GrantRow(**dict(row))
