"""Each ML pipeline's MLflow experiment (table ``ml_experiments``, migration 0012).

The compiler records the experiment it created for a pipeline (``compiler.tracking``); the
apiserver's ``/ml-tracking`` routes read it back after checking the pipeline is the caller's
tenant's. The compiler also takes the tenant's MLflow lock here (``account_lock``): two saves of
two pipelines of one tenant must not both create its account or both write its Secret with
different passwords.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import asyncpg

from shared.db.pool import translate_db_errors

_LOCK_SQL: Final = "SELECT pg_advisory_xact_lock(hashtext('wm-mlflow:' || $1))"


@dataclass(frozen=True, slots=True)
class ExperimentRow:
    pipeline_id: str
    tenant: str
    experiment_id: str
    name: str
    created_at: datetime


class ExperimentReader:
    """The apiserver's read."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def find(self, pipeline_id: str, *, tenant: str) -> ExperimentRow | None:
        """The pipeline's experiment, when the tenant's pipeline has one."""
        with translate_db_errors():
            row = await self._pool.fetchrow(
                "SELECT pipeline_id, tenant, experiment_id, name, created_at FROM ml_experiments "
                "WHERE pipeline_id = $1 AND tenant = $2",
                pipeline_id,
                tenant,
            )
        return None if row is None else ExperimentRow(**dict(row))


class ExperimentStore(ExperimentReader):
    """The compiler's writes, and its per-tenant lock."""

    async def record(self, *, pipeline_id: str, tenant: str, experiment_id: str, name: str) -> None:
        with translate_db_errors():
            await self._pool.execute(
                "INSERT INTO ml_experiments (pipeline_id, tenant, experiment_id, name) "
                "VALUES ($1, $2, $3, $4) ON CONFLICT (pipeline_id) DO UPDATE "
                "SET tenant = EXCLUDED.tenant, experiment_id = EXCLUDED.experiment_id, "
                "name = EXCLUDED.name, created_at = now()",
                pipeline_id,
                tenant,
                experiment_id,
                name,
            )

    async def forget(self, pipeline_id: str) -> None:
        with translate_db_errors():
            await self._pool.execute(
                "DELETE FROM ml_experiments WHERE pipeline_id = $1", pipeline_id
            )

    @contextlib.asynccontextmanager
    async def account_lock(self, tenant: str) -> AsyncIterator[None]:
        """Hold the tenant's MLflow lock (a transaction-scoped advisory lock on a connection of
        its own) until the block ends."""
        with translate_db_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(_LOCK_SQL, tenant)
                yield
