"""Tenants' provisioning records in PostgreSQL (table ``tenants``): what was applied, when, the
storage user and key id in use, and why the last pass failed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Final

import asyncpg

from shared.db.pool import translate_db_errors

# Serialises passes over one tenant (two replicas' first uses, or one and the reconciler).
_LOCK_SQL: Final = "SELECT pg_advisory_xact_lock(hashtext('wm-tenant:' || $1))"


class HeldTenant:
    """One tenant's row inside the transaction that holds its lock."""

    def __init__(self, conn: asyncpg.Connection, tenant: str) -> None:
        self._conn = conn
        self._tenant = tenant

    async def record_applied(
        self, *, spec_hash: str, storage_user: str | None, storage_key_id: str | None
    ) -> None:
        """The specification applied in full; the storage user and key id if known."""
        await self._conn.execute(
            "UPDATE tenants SET spec_hash = $2, provisioned_at = now(), "
            "checked_at = now(), storage_user = coalesce($3, storage_user), "
            "storage_key_id = coalesce($4, storage_key_id), last_error = NULL "
            "WHERE id = $1",
            self._tenant,
            spec_hash,
            storage_user,
            storage_key_id,
        )


class TenantStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def ids(self) -> list[str]:
        with translate_db_errors():
            return [row["id"] for row in await self._pool.fetch("SELECT id FROM tenants")]

    async def applied_hash(self, tenant: str) -> str | None:
        """The hash of the specification last applied in full to ``tenant`` (None: never)."""
        with translate_db_errors():
            value = await self._pool.fetchval("SELECT spec_hash FROM tenants WHERE id = $1", tenant)
        return None if value is None else str(value)

    async def ensure(self, tenant: str) -> None:
        """The tenant's row, created if missing."""
        with translate_db_errors():
            await self._pool.execute(
                "INSERT INTO tenants (id) VALUES ($1) ON CONFLICT (id) DO NOTHING", tenant
            )

    @contextlib.asynccontextmanager
    async def held(self, tenant: str) -> AsyncIterator[HeldTenant]:
        """A transaction holding ``tenant``'s advisory lock until the block ends (committed) or
        raises (rolled back)."""
        with translate_db_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(_LOCK_SQL, tenant)
                yield HeldTenant(conn, tenant)

    async def record_error(self, tenant: str, message: str) -> None:
        with translate_db_errors():
            await self._pool.execute(
                "UPDATE tenants SET last_error = $2, checked_at = now() WHERE id = $1",
                tenant,
                message[:1000],
            )
