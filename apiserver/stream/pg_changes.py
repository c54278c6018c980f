"""The change log in PostgreSQL: ``run_changes`` joined with the run as it is now, and the
LISTEN connection on channel ``runs`` (the watcher NOTIFYs it with each commit's top seq) and
on channel ``access_grants`` (a trigger NOTIFYs it with the tenant of every grant changed,
migration 0006)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg

from apiserver.grants.pg_grants import GrantStore
from apiserver.runs.query import LIST_COLUMNS
from apiserver.stream.hub import Change
from shared.config import Settings
from shared.db.listening import listening as shared_listening
from shared.db.pool import translate_db_errors

RUNS_CHANNEL = "runs"
GRANTS_CHANNEL = "access_grants"

CHANGES_SQL = f"""
SELECT c.seq AS change_seq, c.kind AS change_kind, c.cluster_id AS change_cluster_id,
       c.namespace AS change_namespace, c.name AS change_name, c.tenant AS change_tenant,
       c.phase AS change_phase, r.*
FROM run_changes AS c
LEFT JOIN LATERAL (SELECT {LIST_COLUMNS} FROM runs WHERE runs.id = c.run_id) AS r ON true
WHERE c.seq > $1
ORDER BY c.seq
LIMIT $2
"""
_CHANGE_PREFIX = "change_"


def change_of(row: Any) -> Change:
    run = None
    if row["id"] is not None:
        run = {key: value for key, value in row.items() if not key.startswith(_CHANGE_PREFIX)}
    return Change(
        seq=row["change_seq"],
        kind=row["change_kind"],
        cluster_id=row["change_cluster_id"],
        namespace=row["change_namespace"],
        name=row["change_name"],
        tenant=row["change_tenant"],
        phase=row["change_phase"],
        run=run,
    )


class PgChangeSource:
    def __init__(self, pool: asyncpg.Pool, *, dsn: Settings | str) -> None:
        self._pool = pool
        self._dsn = dsn
        self._grants = GrantStore(pool)

    async def grants_of(self, tenant: str) -> frozenset[tuple[str, str]]:
        return await self._grants.of_tenant(tenant)

    async def latest(self) -> int:
        with translate_db_errors():
            value = await self._pool.fetchval("SELECT coalesce(max(seq), 0) FROM run_changes")
        return int(value)

    async def oldest(self) -> int | None:
        with translate_db_errors():
            value = await self._pool.fetchval("SELECT min(seq) FROM run_changes")
        return None if value is None else int(value)

    async def changes_after(self, seq: int, *, limit: int) -> list[Change]:
        with translate_db_errors():
            rows = await self._pool.fetch(CHANGES_SQL, seq, limit)
        return [change_of(row) for row in rows]

    @contextlib.asynccontextmanager
    async def listening(
        self, wake: asyncio.Event, *, grants_changed: Callable[[str], None]
    ) -> AsyncIterator[asyncio.Event]:
        def on_grants(_conn: Any, _pid: int, _channel: str, tenant: str) -> None:
            grants_changed(tenant)

        channels = {RUNS_CHANNEL: lambda *_: wake.set(), GRANTS_CHANNEL: on_grants}
        async with shared_listening(
            self._dsn, application_name="wm-apiserver-listen", channels=channels
        ) as listened:
            yield listened.lost
