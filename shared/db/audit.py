"""The audit record of every action on a run: ``run_actions`` (actor, time, target, outcome).

Written by the apiserver (stop, terminate, retry, submit) and the compiler (pipeline runs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import asyncpg

from shared.db.pool import translate_db_errors


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
            "INSERT INTO run_actions (cluster_id, namespace, name, run_uid, tenant, actor, action, "
            "parameters, outcome, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
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
