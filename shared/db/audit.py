"""The audit record of every action on a run: ``run_actions`` (actor, time, target, outcome).

Written by the apiserver (stop, terminate, retry, submit), the compiler (pipeline runs) and the
stage controller (each stage's outcome, refusals).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import asyncpg

from shared.db.pool import translate_db_errors

# The columns of an entry, in the order ``record_action`` binds them ($1..$10); the stage
# controller inserts its entries with the same list, inside the statement of a stage's outcome.
ACTION_COLUMNS = (
    "cluster_id, namespace, name, run_uid, tenant, actor, action, parameters, outcome, detail"
)


async def record_action(
    pool: asyncpg.Pool | asyncpg.Connection,
    *,
    cluster_id: str,
    namespace: str,
    name: str,
    run_uid: str | None,
    tenant: str | None,
    actor: str,
    action: str,
    parameters: Mapping[str, Any],
    outcome: str,
    detail: Mapping[str, Any],
) -> None:
    with translate_db_errors():
        await pool.execute(
            f"INSERT INTO run_actions ({ACTION_COLUMNS}) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            cluster_id,
            namespace,
            name,
            run_uid,
            tenant,
            actor,
            action,
            json.loads(json.dumps(dict(parameters), default=str)),
            outcome,
            json.loads(json.dumps(dict(detail), default=str)),
        )
