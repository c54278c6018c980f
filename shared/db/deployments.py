"""Where each model serves: ``model_deployments`` and ``model_deployment_history`` (migration
0017; docs/operations.md, "Deployments").

A row holds the version an environment should serve (``want``: the deploy stage for staging,
the promote and rollback routes for production) and what the stage controller's reconciler
observed of it (``observe``). Every change of the wanted version bumps ``generation`` and adds
a history entry; an observation counts only for the generation it was made for, so a slow
reconciler never reports an older version's readiness as the newer one's. When production
becomes ready its version becomes the model's ``production_version``: the gate's baseline
follows every promotion and rollback.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

import asyncpg

from shared import stages as S
from shared.db.pool import translate_db_errors
from shared.db.registry import Db

DEPLOYMENTS_CHANNEL: Final = "model_deployments"
DeploymentState = Literal["deploying", "ready", "failed"]
Action = Literal["deploy", "promote", "rollback"]

_COLUMNS: Final = (
    "model_id, environment, version, serving, generation, observed_generation, state, message, "
    "url, token_sealed, requested_by, requested_at, deadline, ready_at"
)
_HISTORY_COLUMNS: Final = (
    "id, model_id, environment, version, previous_version, action, actor, run_uid, attempt, "
    "created_at"
)


@dataclass(frozen=True, slots=True)
class DeploymentRow:
    model_id: str
    environment: str
    version: int
    serving: dict[str, Any]
    generation: int
    observed_generation: int
    state: DeploymentState
    message: str | None
    url: str | None
    token_sealed: bytes | None
    requested_by: str
    requested_at: datetime
    deadline: datetime
    ready_at: datetime | None


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    id: int
    model_id: str
    environment: str
    version: int
    previous_version: int | None
    action: Action
    actor: str
    run_uid: str | None
    attempt: str | None
    created_at: datetime


def _row(record: asyncpg.Record | None) -> DeploymentRow | None:
    if record is None:
        return None
    values = dict(record)
    if values["token_sealed"] is not None:
        values["token_sealed"] = bytes(values["token_sealed"])
    return DeploymentRow(**values)


@dataclass(frozen=True, slots=True)
class Wanted:
    """A change of what an environment serves."""

    model_id: str
    environment: str
    version: int
    serving: dict[str, Any]
    action: Action
    actor: str
    deadline_seconds: float
    run_uid: str | None = None  # the deploy stage's run and attempt
    attempt: str | None = None


class DeploymentStore:
    """Queries over one connection or a pool (a transaction where the caller holds one)."""

    def __init__(self, conn: Db) -> None:
        self._conn = conn

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[DeploymentStore]:
        """A store over one of this pool's connections in a transaction (``want``'s)."""
        assert isinstance(self._conn, asyncpg.Pool)
        with translate_db_errors():
            async with self._conn.acquire() as conn, conn.transaction():
                yield DeploymentStore(conn)

    async def want(self, wanted: Wanted) -> DeploymentRow:
        """Make ``wanted.version`` the environment's wanted version, with a history entry.
        Idempotent for a deploy stage's attempt (its history entry is unique): repeated, it
        changes nothing and answers the row as it is. Run it in a transaction."""
        if wanted.environment not in S.ENVIRONMENTS:
            raise ValueError(f"environment {wanted.environment!r}")
        with translate_db_errors():
            if wanted.run_uid is not None:
                seen = await self._conn.fetchval(
                    "SELECT 1 FROM model_deployment_history "
                    "WHERE run_uid = $1 AND attempt = $2 AND environment = $3",
                    wanted.run_uid,
                    wanted.attempt or "",
                    wanted.environment,
                )
                if seen:
                    current = await self.get(wanted.model_id, wanted.environment)
                    assert current is not None  # written with the history entry
                    return current
            previous = await self._conn.fetchrow(
                "SELECT version FROM model_deployments WHERE model_id = $1 AND environment = $2 "
                "FOR UPDATE",
                wanted.model_id,
                wanted.environment,
            )
            row = await self._conn.fetchrow(
                "INSERT INTO model_deployments AS d (model_id, environment, version, serving, "
                "requested_by, deadline) VALUES ($1, $2, $3, $4, $5, "
                "now() + make_interval(secs => $6)) "
                "ON CONFLICT (model_id, environment) DO UPDATE SET version = EXCLUDED.version, "
                "serving = EXCLUDED.serving, generation = d.generation + 1, state = 'deploying', "
                "message = NULL, requested_by = EXCLUDED.requested_by, requested_at = now(), "
                "deadline = EXCLUDED.deadline, ready_at = NULL "
                f"RETURNING {_COLUMNS}",
                wanted.model_id,
                wanted.environment,
                wanted.version,
                wanted.serving,
                wanted.actor,
                wanted.deadline_seconds,
            )
            await self._conn.execute(
                "INSERT INTO model_deployment_history (model_id, environment, version, "
                "previous_version, action, actor, run_uid, attempt) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                wanted.model_id,
                wanted.environment,
                wanted.version,
                None if previous is None else previous["version"],
                wanted.action,
                wanted.actor,
                wanted.run_uid,
                None if wanted.run_uid is None else (wanted.attempt or ""),
            )
        found = _row(row)
        assert found is not None
        return found

    async def get(self, model_id: str, environment: str) -> DeploymentRow | None:
        with translate_db_errors():
            row = await self._conn.fetchrow(
                f"SELECT {_COLUMNS} FROM model_deployments WHERE model_id = $1 "
                "AND environment = $2",
                model_id,
                environment,
            )
        return _row(row)

    async def of_model(self, model_id: str) -> list[DeploymentRow]:
        with translate_db_errors():
            rows = await self._conn.fetch(
                f"SELECT {_COLUMNS} FROM model_deployments WHERE model_id = $1 "
                "ORDER BY environment DESC",  # staging, then production
                model_id,
            )
        return [row for row in map(_row, rows) if row is not None]

    async def history(self, model_id: str, environment: str | None = None) -> list[HistoryEntry]:
        with translate_db_errors():
            rows = await self._conn.fetch(
                f"SELECT {_HISTORY_COLUMNS} FROM model_deployment_history WHERE model_id = $1 "
                "AND ($2::text IS NULL OR environment = $2) ORDER BY id",
                model_id,
                environment,
            )
        return [HistoryEntry(**dict(row)) for row in rows]

    async def serving_versions(self, model_id: str) -> dict[str, int]:
        """Environment -> the version it serves or is being deployed to serve."""
        with translate_db_errors():
            rows = await self._conn.fetch(
                "SELECT environment, version FROM model_deployments WHERE model_id = $1",
                model_id,
            )
        return {str(row["environment"]): int(row["version"]) for row in rows}

    # --- the reconciler's -----------------------------------------------------------------
    async def unsettled(self) -> list[DeploymentRow]:
        """Every deployment still deploying, oldest request first."""
        with translate_db_errors():
            rows = await self._conn.fetch(
                f"SELECT {_COLUMNS} FROM model_deployments WHERE state = 'deploying' "
                "ORDER BY requested_at"
            )
        return [row for row in map(_row, rows) if row is not None]

    async def applied(self, model_id: str, environment: str, generation: int) -> None:
        """The reconciler wrote the objects of ``generation``."""
        with translate_db_errors():
            await self._conn.execute(
                "UPDATE model_deployments SET observed_generation = greatest("
                "observed_generation, $3) WHERE model_id = $1 AND environment = $2 "
                "AND generation = $3",
                model_id,
                environment,
                generation,
            )

    async def observe(
        self,
        model_id: str,
        environment: str,
        generation: int,
        *,
        state: DeploymentState,
        url: str | None = None,
        message: str | None = None,
    ) -> bool:
        """Record how ``generation`` ended (ready with its URL, or failed with why); False
        when the wanted version changed meanwhile (nothing recorded). A production deployment
        that became ready makes its version the model's production version."""
        with translate_db_errors():
            row = await self._conn.fetchrow(
                "WITH d AS (UPDATE model_deployments SET state = $4, url = coalesce($5, url), "
                "message = $6, observed_generation = greatest(observed_generation, $3), "
                "ready_at = CASE WHEN $4 = 'ready' THEN now() ELSE ready_at END "
                "WHERE model_id = $1 AND environment = $2 AND generation = $3 "
                "AND state = 'deploying' RETURNING model_id, environment, version, state), "
                "m AS (UPDATE models SET production_version = d.version, updated_at = now() "
                "FROM d WHERE models.id = d.model_id AND d.environment = 'production' "
                "AND d.state = 'ready') SELECT 1 FROM d",
                model_id,
                environment,
                generation,
                state,
                url,
                message,
            )
        return row is not None

    async def seal_token(self, model_id: str, environment: str, sealed: bytes) -> bool:
        """Keep the deployment's first token, sealed, unless one is kept already."""
        with translate_db_errors():
            done = await self._conn.fetchval(
                "UPDATE model_deployments SET token_sealed = $3 WHERE model_id = $1 "
                "AND environment = $2 AND token_sealed IS NULL RETURNING 1",
                model_id,
                environment,
                sealed,
            )
        return bool(done)
