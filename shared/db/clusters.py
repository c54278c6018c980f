"""Watched clusters in PostgreSQL (table ``clusters``) and the channel that asks for a re-read.

The one module that holds their SQL. The watcher writes through it (sync with the registry,
host adoption, Argo status) and LISTENs on ``REFRESH_CHANNEL``; the apiserver reads through it
(the cluster list, one cluster) and NOTIFYs that channel when kubeopera-api says the registry
changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import asyncpg

from shared.clusters import WatchTarget, provisional_host_id
from shared.db.pool import translate_db_errors
from shared.logging import get_logger

log = get_logger(__name__)

REFRESH_CHANNEL: Final = "cluster_refresh"

# Tables that name a cluster without a foreign key (history, audit, grants).
_CLUSTER_ID_TABLES = (
    "run_changes",
    "run_actions",
    "access_grants",
    "model_versions",
    "approvals",
    "stage_outcomes",
)


_COLUMNS: Final = (
    "id, name, region, provider, is_host, registered, removed_at, argo_reachable, argo_version, "
    "last_event_at"
)


@dataclass(frozen=True, slots=True)
class ClusterRow:
    id: str
    name: str
    region: str | None
    provider: str | None
    is_host: bool
    registered: bool
    removed_at: datetime | None  # no longer in the registry; its runs stay
    argo_reachable: bool | None
    argo_version: str | None
    last_event_at: datetime | None


class ClusterStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    # --- reads (the apiserver) -------------------------------------------------------------
    async def get(self, cluster_id: str) -> ClusterRow | None:
        """The cluster, removed or not (a removed one still has history)."""
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_COLUMNS} FROM clusters WHERE id = $1", cluster_id
            )
        return None if row is None else ClusterRow(**dict(row))

    async def watched(self) -> list[ClusterRow]:
        """The clusters the registry lists now, by name."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {_COLUMNS} FROM clusters WHERE removed_at IS NULL ORDER BY name, id"
            )
        return [ClusterRow(**dict(row)) for row in rows]

    async def request_refresh(self) -> None:
        """Ask every watcher to re-read the registry now (NOTIFY ``REFRESH_CHANNEL``)."""
        with translate_db_errors():
            await self._pool.execute("SELECT pg_notify($1, '')", REFRESH_CHANNEL)

    # --- writes (the watcher) --------------------------------------------------------------

    async def sync(self, targets: Sequence[WatchTarget], *, host_uid: str | None) -> None:
        """Record the watched clusters; adopt the registered identity of the host; mark the
        clusters no longer listed as removed (their runs stay)."""
        async with self._pool.acquire() as conn, conn.transaction():
            host = next((t for t in targets if t.is_host), None)
            if host_uid is not None and host is not None:
                provisional = provisional_host_id(host_uid)
                if host.ref.id != provisional:
                    await self._adopt(conn, old_id=provisional, new=host)
            for target in targets:
                await conn.execute(
                    """
                    INSERT INTO clusters (id, name, region, provider, kube_system_uid, is_host,
                                          registered)
                    VALUES ($1, $2, $3, $4, $5, $6, $7)
                    ON CONFLICT (id) DO UPDATE SET
                        name = EXCLUDED.name, region = EXCLUDED.region,
                        provider = EXCLUDED.provider, kube_system_uid = EXCLUDED.kube_system_uid,
                        is_host = EXCLUDED.is_host, registered = EXCLUDED.registered,
                        removed_at = NULL, updated_at = now()
                    """,
                    target.ref.id,
                    target.ref.name,
                    target.ref.region,
                    target.ref.provider,
                    target.kube_system_uid,
                    target.is_host,
                    not target.ref.id.startswith("host-"),
                )
            await conn.execute(
                """
                UPDATE clusters SET removed_at = now(), updated_at = now()
                WHERE removed_at IS NULL AND NOT (id = ANY($1::text[]))
                """,
                [t.ref.id for t in targets],
            )

    async def _adopt(self, conn: asyncpg.Connection, *, old_id: str, new: WatchTarget) -> None:
        """Carry the provisional host's history over to its registered identity."""
        old = await conn.fetchrow("SELECT id FROM clusters WHERE id = $1 FOR UPDATE", old_id)
        if old is None:
            return
        exists = await conn.fetchval("SELECT 1 FROM clusters WHERE id = $1", new.ref.id)
        if exists is None:
            # Renaming the key cascades to runs through the foreign key.
            await conn.execute(
                "UPDATE clusters SET id = $2, name = $3, region = $4, provider = $5, "
                "registered = true, updated_at = now() WHERE id = $1",
                old_id,
                new.ref.id,
                new.ref.name,
                new.ref.region,
                new.ref.provider,
            )
        else:
            await conn.execute(
                """
                UPDATE runs SET cluster_id = $2 WHERE cluster_id = $1 AND NOT EXISTS (
                    SELECT 1 FROM runs AS held WHERE held.cluster_id = $2
                      AND held.namespace = runs.namespace AND held.uid = runs.uid)
                """,
                old_id,
                new.ref.id,
            )
            await conn.execute("DELETE FROM runs WHERE cluster_id = $1", old_id)
            await conn.execute("DELETE FROM clusters WHERE id = $1", old_id)
        await conn.execute(
            "UPDATE runs SET region = $2, provider = $3 WHERE cluster_id = $1",
            new.ref.id,
            new.ref.region,
            new.ref.provider,
        )
        for table in _CLUSTER_ID_TABLES:
            await conn.execute(
                f"UPDATE {table} SET cluster_id = $2 WHERE cluster_id = $1", old_id, new.ref.id
            )
        log.info("host_identity_adopted", old_cluster=old_id, cluster=new.ref.id)

    async def known_runs(self, cluster_id: str) -> dict[tuple[str, str], tuple[str, int]]:
        """(namespace, name) → (uid, resourceVersion) of the runs still present on the cluster."""
        rows = await self._pool.fetch(
            "SELECT namespace, name, uid, resource_version FROM runs "
            "WHERE cluster_id = $1 AND deleted_at IS NULL",
            cluster_id,
        )
        return {(r["namespace"], r["name"]): (r["uid"], r["resource_version"]) for r in rows}

    async def record_status(
        self,
        cluster_id: str,
        *,
        argo_reachable: bool | None,
        argo_version: str | None,
        last_event_at: float | None,
    ) -> None:
        await self._pool.execute(
            """
            UPDATE clusters SET argo_reachable = coalesce($2, argo_reachable),
                argo_version = coalesce($3, argo_version),
                last_event_at = coalesce(to_timestamp($4), last_event_at), updated_at = now()
            WHERE id = $1
            """,
            cluster_id,
            argo_reachable,
            argo_version,
            last_event_at,
        )
