"""PostgreSQL persistence of the watcher: run upserts with their change log, clusters, retention.

Every write that changes what a user sees commits, in the same transaction, a row per change in
``run_changes`` and one ``NOTIFY runs, '<highest seq>'``. Writers take a transaction-scoped
advisory lock just before inserting changes, so sequence numbers become visible in commit order
and a reader that has seen seq N never later finds a smaller one (gapless SSE resume).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import orjson

from shared.runs import RunRecord

RUN_CHANGES_LOCK = 0x776D_7275_6E73  # "wmruns": serialises change-log commits
NOTIFY_CHANNEL = "runs"
# What encoding a record for the statements raises when a value cannot be sent at all (orjson:
# an integer beyond 64 bits, a lone surrogate): like PostgreSQL refusing it, the record's fault.
UNENCODABLE: tuple[type[Exception], ...] = (orjson.JSONEncodeError, UnicodeError, OverflowError)


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A workflow Argo deleted from its cluster; its run record stays, marked gone."""

    cluster_id: str
    namespace: str
    name: str
    uid: str


def _dumps(value: Any) -> str:
    # orjson: six times faster than json.dumps on run graphs, the watcher's hottest encode.
    return orjson.dumps(value, default=str).decode()


# (column, SQL array type, cast in the INSERT, how to read it off a RunRecord)
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("cluster_id", "text[]", ""),
    ("namespace", "text[]", ""),
    ("name", "text[]", ""),
    ("uid", "text[]", ""),
    ("resource_version", "bigint[]", ""),
    ("region", "text[]", ""),
    ("provider", "text[]", ""),
    ("tenant", "text[]", ""),
    ("source", "text[]", ""),
    ("phase", "text[]", ""),
    ("message", "text[]", ""),
    ("progress_done", "int[]", ""),
    ("progress_total", "int[]", ""),
    ("created_at", "timestamptz[]", ""),
    ("started_at", "timestamptz[]", ""),
    ("finished_at", "timestamptz[]", ""),
    ("duration_seconds", "float8[]", ""),
    ("estimated_duration_seconds", "int[]", ""),
    ("parameters", "text[]", "::jsonb"),
    ("resources_duration", "text[]", "::jsonb"),
    ("template", "text[]", ""),
    ("pipeline_id", "text[]", ""),
    ("pipeline_version", "text[]", ""),
    ("cron_workflow", "text[]", ""),
    ("labels", "text[]", "::jsonb"),
    ("graph", "text[]", "::jsonb"),
    ("graph_truncated", "bool[]", ""),
    ("node_count", "int[]", ""),
)
_JSON_COLUMNS = frozenset({"parameters", "resources_duration", "labels", "graph"})
_UPDATABLE = [c for c, _, _ in _COLUMNS if c not in {"cluster_id", "namespace", "uid"}]

UPSERT_RUNS_SQL = f"""
INSERT INTO runs ({", ".join(c for c, _, _ in _COLUMNS)})
SELECT {", ".join(f"{c}{cast}" for c, _, cast in _COLUMNS)}
FROM unnest({", ".join(f"${i}::{t}" for i, (_, t, _) in enumerate(_COLUMNS, start=1))})
    AS input({", ".join(c for c, _, _ in _COLUMNS)})
ON CONFLICT (cluster_id, namespace, uid) DO UPDATE SET
    {", ".join(f"{c} = EXCLUDED.{c}" for c in _UPDATABLE)},
    deleted_at = NULL,
    updated_at = now()
WHERE runs.resource_version < EXCLUDED.resource_version
RETURNING id, cluster_id, namespace, name, tenant, phase
"""

MARK_DELETED_SQL = """
UPDATE runs SET deleted_at = now(), updated_at = now()
FROM unnest($1::text[], $2::text[], $3::text[]) AS gone(cluster_id, namespace, uid)
WHERE runs.cluster_id = gone.cluster_id AND runs.namespace = gone.namespace
  AND runs.uid = gone.uid AND runs.deleted_at IS NULL
RETURNING runs.id, runs.cluster_id, runs.namespace, runs.name, runs.tenant, runs.phase
"""

# The common case, records without tombstones, in ONE statement (one round trip, an implicit
# transaction): upsert, then — only once a row changed — the advisory lock, then the change
# rows (their seqs are drawn after the lock: the cross join needs the lock's row first), then
# the notification. Tombstones take the multi-statement path: a statement may not modify the
# same row twice, and a deletion usually arrives with the run's final state.
_LOCK_PARAM = len(_COLUMNS) + 1
UPSERT_AND_LOG_SQL = f"""
WITH upserted AS ({UPSERT_RUNS_SQL}),
locked AS (
    SELECT pg_advisory_xact_lock(${_LOCK_PARAM}::bigint) WHERE EXISTS (SELECT 1 FROM upserted)
),
logged AS (
    INSERT INTO run_changes (run_id, cluster_id, namespace, name, tenant, phase, kind)
    SELECT u.id, u.cluster_id, u.namespace, u.name, u.tenant, u.phase, 'upsert'
    FROM upserted AS u CROSS JOIN locked
    RETURNING seq
),
top AS (SELECT count(*) AS changes, max(seq) AS seq FROM logged)
SELECT changes, (SELECT pg_notify('{NOTIFY_CHANNEL}', seq::text) WHERE seq IS NOT NULL) AS notified
FROM top
"""

INSERT_CHANGES_SQL = """
INSERT INTO run_changes (run_id, cluster_id, namespace, name, tenant, phase, kind)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::text[])
RETURNING seq
"""


def record_columns(records: Sequence[RunRecord]) -> list[list[Any]]:
    """Column-major arrays of ``records`` for UPSERT_RUNS_SQL (purely computational)."""
    columns: list[list[Any]] = []
    for column, _, _ in _COLUMNS:
        values = [getattr(record, column) for record in records]
        if column == "graph":
            values = [record.graph_json or _dumps(record.graph) for record in records]
        elif column in _JSON_COLUMNS:
            values = [_dumps(v) for v in values]
        else:
            values = [str(v) if column in ("source", "phase") else v for v in values]
        columns.append(values)
    return columns


def newest_per_key(records: Sequence[RunRecord]) -> list[RunRecord]:
    """One record per (cluster, namespace, uid), the highest resourceVersion (an upsert may not
    touch a row twice)."""
    newest: dict[tuple[str, str, str], RunRecord] = {}
    for record in records:
        key = (record.cluster_id, record.namespace, record.uid)
        held = newest.get(key)
        if held is None or held.resource_version < record.resource_version:
            newest[key] = record
    return list(newest.values())


class RunStore:
    """The watcher's writes. Every method runs in its own transaction."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def write_batch(
        self, records: Sequence[RunRecord], tombstones: Sequence[Tombstone] = ()
    ) -> int:
        """Upsert ``records`` (older resourceVersions never overwrite newer ones), mark
        ``tombstones`` gone, log each effective change and notify. Returns the change count."""
        records = newest_per_key(records)
        if not tombstones:
            if not records:
                return 0
            changes: int = await self._pool.fetchval(
                UPSERT_AND_LOG_SQL, *record_columns(records), RUN_CHANGES_LOCK
            )
            return changes
        async with self._pool.acquire() as conn, conn.transaction():
            changed: list[asyncpg.Record] = []
            if records:
                changed.extend(await conn.fetch(UPSERT_RUNS_SQL, *record_columns(records)))
            upserts = len(changed)
            if tombstones:
                changed.extend(
                    await conn.fetch(
                        MARK_DELETED_SQL,
                        [t.cluster_id for t in tombstones],
                        [t.namespace for t in tombstones],
                        [t.uid for t in tombstones],
                    )
                )
            if not changed:
                return 0
            await conn.execute("SELECT pg_advisory_xact_lock($1)", RUN_CHANGES_LOCK)
            kinds = ["upsert"] * upserts + ["deleted"] * (len(changed) - upserts)
            seqs = await conn.fetch(
                INSERT_CHANGES_SQL,
                [r["id"] for r in changed],
                [r["cluster_id"] for r in changed],
                [r["namespace"] for r in changed],
                [r["name"] for r in changed],
                [r["tenant"] for r in changed],
                [r["phase"] for r in changed],
                kinds,
            )
            await conn.execute(
                "SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, str(max(r["seq"] for r in seqs))
            )
            return len(changed)

    async def prune_finished(self, *, older_than: datetime, batch_size: int = 500) -> int:
        """Delete one small batch of runs finished before ``older_than`` (short locks)."""
        result: str = await self._pool.execute(
            """
            DELETE FROM runs WHERE id IN (
                SELECT id FROM runs WHERE finished_at < $1
                ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED)
            """,
            older_than,
            batch_size,
        )
        return int(result.split()[-1])

    async def prune_changes(self, *, older_than: datetime, batch_size: int = 5000) -> int:
        """Delete one batch of change-log rows older than the SSE resume window."""
        result: str = await self._pool.execute(
            """
            DELETE FROM run_changes WHERE seq IN (
                SELECT seq FROM run_changes WHERE changed_at < $1 ORDER BY seq LIMIT $2)
            """,
            older_than,
            batch_size,
        )
        return int(result.split()[-1])
