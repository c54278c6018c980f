"""Helpers of the notification tests: a tenant's data secrets in the emulator, run records
written through the watcher's own writer (``RunStore.write_batch``: upsert, change log, NOTIFY
runs, in one transaction), and reads of what the sender recorded."""

from __future__ import annotations

import base64
import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from shared import labels as L
from shared.runs import RunPhase, RunRecord, RunSource
from sim.kube.store import ClusterStore
from watcher.pg_store import RunStore, Tombstone

UI = "https://ui.example/kubeopera"
ROUTING_KEY = "R0UT1NGKEY0000000000000000000000"
_versions = itertools.count(100)


def data_secret(store: ClusterStore, tenant: str, name: str, values: dict[str, str]) -> None:
    """A data secret as the data-secrets API stores it: a labelled Secret in the tenant's
    namespace (the namespace must exist: a pipeline save provisions it)."""
    secrets = store.resolve("", "v1", "secrets")
    store.create(
        secrets,
        f"{L.DATA_NAMESPACE_PREFIX}{tenant}",
        {
            "metadata": {"name": name, "labels": {L.DATA_SECRET: L.DATA_SECRET_VALUE}},
            "type": "Opaque",
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
        },
    )


async def add_host(pool: asyncpg.Pool, cluster_id: str = "host-test") -> str:
    await pool.execute(
        "INSERT INTO clusters (id, name, is_host, registered) VALUES ($1, $1, true, true) "
        "ON CONFLICT (id) DO NOTHING",
        cluster_id,
    )
    return cluster_id


def run_record(
    *,
    cluster_id: str,
    pipeline_id: str | None,
    version: int | None,
    phase: RunPhase = RunPhase.FAILED,
    tenant: str = "acme",
    name: str | None = None,
    uid: str | None = None,
    failed_step: str = "load",
) -> RunRecord:
    """A run of a pipeline as the watcher normalises it, finished in ``phase`` (or running)."""
    uid = uid or str(uuid.uuid4())
    name = name or f"p-{pipeline_id}-v{version}-{uid[:5]}"
    started = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    finished = started + timedelta(seconds=125) if phase.finished else None
    nodes: list[dict[str, Any]] = [
        {"id": name, "name": name, "type": "DAG", "phase": phase.value, "children": ["a", "b"]},
        {
            "id": "a",
            "name": f"{name}.extract",
            "displayName": "extract",
            "type": "Pod",
            "phase": "Succeeded",
        },
    ]
    if phase in (RunPhase.FAILED, RunPhase.ERROR):
        nodes.append(
            {
                "id": "b",
                "name": f"{name}.{failed_step}",
                "displayName": failed_step,
                "type": "Pod",
                "phase": "Failed",
                "message": "Error (exit code 1)",
                "finishedAt": "2026-03-01T12:02:05Z",
            }
        )
    labels = {}
    if pipeline_id:
        labels[L.PIPELINE_ID] = pipeline_id
    if version is not None:
        labels[L.PIPELINE_VERSION] = str(version)
    return RunRecord(
        cluster_id=cluster_id,
        cluster_name=cluster_id,
        region=None,
        provider=None,
        namespace=f"{L.DATA_NAMESPACE_PREFIX}{tenant}",
        name=name,
        uid=uid,
        resource_version=next(_versions),
        tenant=tenant,
        source=RunSource.PIPELINE,
        phase=phase,
        message="child failed" if phase is RunPhase.FAILED else None,
        progress_done=None,
        progress_total=None,
        created_at=started,
        started_at=started,
        finished_at=finished,
        duration_seconds=125.0 if finished else None,
        estimated_duration_seconds=None,
        parameters={},
        resources_duration={},
        template=None,
        pipeline_id=pipeline_id,
        pipeline_version=str(version) if version is not None else None,
        cron_workflow=None,
        labels=labels,
        graph={"nodes": nodes, "truncated": False, "node_count": len(nodes)},
        graph_truncated=False,
        node_count=len(nodes),
    )


async def record_runs(pool: asyncpg.Pool, *records: RunRecord) -> None:
    """Write runs the way the watcher does: one batch, its changes, one NOTIFY."""
    await RunStore(pool).write_batch(list(records))


async def delete_runs(pool: asyncpg.Pool, *records: RunRecord) -> None:
    """Argo removed the runs: the watcher's tombstones (a 'deleted' change for each)."""
    await RunStore(pool).write_batch(
        [], [Tombstone(r.cluster_id, r.namespace, r.name, r.uid) for r in records]
    )


async def deliveries(pool: asyncpg.Pool) -> dict[tuple[str, str], asyncpg.Record]:
    """(run uid, channel) → the delivery row."""
    rows = await pool.fetch("SELECT * FROM notification_deliveries ORDER BY id")
    return {(row["run_uid"], row["channel"]): row for row in rows}


async def notify_audit(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch("SELECT * FROM run_actions WHERE action = 'notify' ORDER BY id"))
