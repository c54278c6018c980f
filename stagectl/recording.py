"""The commit point of every stage: its outcome recorded, with whatever else the stage writes,
in one transaction, and an entry in the run's action history.

``stage_outcomes`` is unique per run and stage, so of two attempts (a restart, a new leader, a
decision heard twice) one inserts and the other reads what the first recorded; the stage's own
writes (``also``) run only with the insert that won. Either way the caller completes the node
with the outcome that was recorded, never with one it computed and lost.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from shared.db.registry import RunRef
from shared.db.registry_store import RegistryStore
from stagectl.outcomes import Outcome

Also = Callable[[RegistryStore], Awaitable[None]]


async def commit(
    pool: asyncpg.Pool,
    ref: RunRef,
    stage: str,
    outcome: Outcome,
    *,
    tenant: str | None,
    also: Also | None = None,
    detail: dict[str, Any] | None = None,
) -> Outcome:
    """Record ``outcome`` for the run's ``stage`` unless one is recorded; the recorded one."""
    async with RegistryStore.transaction(pool) as store:
        stored, inserted = await store.record_outcome(ref, stage, outcome.to_json())
        if inserted:
            if also is not None:
                await also(store)
            await store.audit(
                ref,
                tenant=tenant,
                action=f"stage_{stage}",
                outcome="succeeded" if outcome.phase == "Succeeded" else "failed",
                detail={
                    "stage": stage,
                    "outputs": outcome.outputs,
                    "message": outcome.message,
                    **(detail or {}),
                },
            )
    return Outcome.from_json(stored.outcome)
