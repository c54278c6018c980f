"""The commit point of every stage: its outcome recorded, with what the stage changes on the
run's version and an entry in the run's action history, in one statement.

``stage_outcomes`` is unique per run and stage, so of two attempts (a restart, a new leader, a
decision heard twice) one inserts and the other reads what the first recorded; the version's
change and the audit entry are written only with the insert that won. Either way the caller
completes the node with the outcome that was recorded, never with one it computed and lost.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from shared.db.registry import AuditEntry, RunRef, VersionChange
from shared.db.registry_store import RegistryStore
from stagectl.outcomes import Outcome


async def commit(
    pool: asyncpg.Pool,
    ref: RunRef,
    stage: str,
    outcome: Outcome,
    *,
    tenant: str | None,
    change: VersionChange | None = None,
    detail: dict[str, Any] | None = None,
) -> Outcome:
    """Record ``outcome`` for the run's ``stage`` unless one is recorded; the recorded one."""
    audit = AuditEntry(
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
    stored, _ = await RegistryStore(pool).record_outcome(
        ref, stage, outcome.to_json(), audit=audit, change=change
    )
    return Outcome.from_json(stored.outcome)
