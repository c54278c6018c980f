"""Reading runs and their actions from PostgreSQL, and the scope of runs a caller may see
(its tenant's plus its access grants, ``apiserver.grants.pg_grants``)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

import asyncpg

from apiserver.auth import Identity
from apiserver.grants.pg_grants import GrantStore
from apiserver.runs.query import (
    COUNT_CAP,
    Page,
    Query,
    RunFilters,
    count_query,
    detail_query,
    iso,
    list_query,
    summary_query,
)
from apiserver.scope import Scope
from shared.db.notifications import DeliveryView, deliveries_of_run
from shared.db.pool import translate_db_errors

# asyncpg ships no types; a Record reads like a mapping of column name to value.
Row: TypeAlias = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RunPage:
    rows: Sequence[Row]  # up to limit + 1
    total: int
    capped: bool


class RunReader:
    def __init__(self, pool: asyncpg.Pool, *, count_cap: int = COUNT_CAP) -> None:
        self._pool = pool
        self._cap = count_cap
        self._grants = GrantStore(pool)

    async def _fetch(self, query: Query) -> list[Row]:
        with translate_db_errors():
            rows: list[Row] = await self._pool.fetch(query.sql, *query.args)
        return rows

    async def scope_of(self, identity: Identity) -> Scope:
        """The runs ``identity`` may see: its tenant's plus its grants (everything for an
        administrator not acting for a tenant)."""
        if identity.tenant is None:
            return Scope(None)
        return Scope(identity.tenant, await self._grants.of_tenant(identity.tenant))

    async def page(self, filters: RunFilters, scope: Scope, page: Page) -> RunPage:
        rows, counted = await asyncio.gather(
            self._fetch(list_query(filters, scope, page)),
            self._fetch(count_query(filters, scope, cap=self._cap)),
        )
        total = int(counted[0]["count"])
        return RunPage(rows=rows, total=min(total, self._cap), capped=total > self._cap)

    async def summary(self, filters: RunFilters, scope: Scope, *, since: datetime) -> list[Row]:
        return await self._fetch(summary_query(filters, scope, since=since))

    async def find(self, scope: Scope, *, cluster_id: str, namespace: str, name: str) -> Row | None:
        rows = await self._fetch(
            detail_query(scope, cluster_id=cluster_id, namespace=namespace, name=name)
        )
        return rows[0] if rows else None

    async def actions(
        self, *, cluster_id: str, namespace: str, name: str, limit: int = 100
    ) -> list[Row]:
        return await self._fetch(
            Query(
                "SELECT id, action, actor, tenant, parameters, outcome, detail, created_at, "
                "run_uid FROM run_actions WHERE cluster_id = $1 AND namespace = $2 AND name = $3 "
                "ORDER BY created_at DESC, id DESC LIMIT $4",
                (cluster_id, namespace, name, limit),
            )
        )

    async def notifications(self, *, cluster_id: str, run_uid: str) -> list[DeliveryView]:
        """The run's notification deliveries (``shared.db.notifications``), by channel."""
        return await deliveries_of_run(self._pool, cluster_id=cluster_id, run_uid=run_uid)


def notification_item(delivery: DeliveryView) -> dict[str, Any]:
    return {
        "channel": delivery.channel,
        "kind": delivery.kind,
        "type": delivery.type,
        "state": delivery.state,
        "attempts": delivery.attempts,
        "status_code": delivery.status_code,
        "last_error": delivery.last_error,
        "attempted_at": iso(delivery.attempted_at),
        "sent_at": iso(delivery.sent_at),
        "created_at": iso(delivery.created_at),
    }


def action_item(row: Any) -> dict[str, Any]:
    from apiserver.runs.query import iso

    return {
        "id": row["id"],
        "action": row["action"],
        "actor": row["actor"],
        "tenant": row["tenant"],
        "parameters": row["parameters"] or {},
        "outcome": row["outcome"],
        "detail": row["detail"] or {},
        "at": iso(row["created_at"]),
        "run_uid": row["run_uid"],
    }
