"""Helpers of the notification tests: the sender over the emulator and the local receivers
(``sender_env``), a tenant's data secrets in the emulator, run records written through the
watcher's own writer (``RunStore.write_batch``: upsert, change log, NOTIFY runs, in one
transaction), and reads of what the sender recorded."""

from __future__ import annotations

import base64
import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import asyncpg

from compiler.notifications.http_senders import open_session
from compiler.notifications.service import NotificationSender, SenderConfig
from shared import labels as L
from shared.db.notifications import FINAL_STATES
from shared.db.pipelines import PipelineStore
from shared.k8s import client_from_kubeconfig
from shared.k8s_objects import KubeObjects
from shared.pipelines import parse_body
from shared.runs import RunPhase, RunRecord, RunSource
from shared.tasks import Backoff, Supervisor
from sim.kube.server import RunningCluster, start_cluster
from sim.kube.store import ClusterStore
from sim.receivers import Receivers
from tests.integration.watcher.harness import eventually
from watcher.pg_store import RunStore, Tombstone

UI = "https://ui.example/kubeopera"
ROUTING_KEY = "R0UT1NGKEY0000000000000000000000"
HOOK = "T0/B0/very-secret-token"
SLACK = {"name": "ops-slack", "type": "slack", "secret": "slack-hook", "on": "always"}
PAGER = {"name": "pager", "type": "pagerduty", "secret": "pagerduty"}
_versions = itertools.count(100)


@dataclass
class Env:
    pool: asyncpg.Pool
    cluster: RunningCluster
    receivers: Receivers
    sender: NotificationSender
    http: aiohttp.ClientSession
    host: str

    async def pipeline(
        self, pipeline_id: str, *versions: list[dict[str, Any]], tenant: str = "acme"
    ) -> None:
        """A pipeline whose versions 1..N record these channels, as a save records them."""
        async with PipelineStore.transaction(self.pool) as store:
            await store.insert_pipeline(
                pipeline_id=pipeline_id,
                tenant=tenant,
                kind="data",
                name=f"pipeline {pipeline_id}",
                description="",
                definition_type="yaml",
                actor="alice",
            )
            for number, channels in enumerate(versions, start=1):
                body = parse_body(
                    {
                        "name": "x",
                        "definition": {"type": "yaml", "template": "t"},
                        "notifications": channels,
                    }
                )
                await store.insert_version(
                    pipeline_id=pipeline_id,
                    version=number,
                    definition={},
                    parameters=[],
                    settings=body.settings(),
                    stages=[],
                    template_name=f"p-{pipeline_id}-v{number}",
                    template={},
                    actor="alice",
                )
            await store.point_at(pipeline_id, current=len(versions), latest=len(versions))

    async def cycle(self) -> None:
        """What the sender's two loops do on a wake-up: enqueue, then send what is due."""
        await self.sender.enqueue_pending()
        await self.sender.deliver_due(self.http)


@contextlib.asynccontextmanager
async def sender_env(db: asyncpg.Pool, database_url: str) -> AsyncIterator[Env]:
    """A sender (``NotificationSender``, as the compiler assembles it) over ``db``, the host
    cluster's API (the emulator) with the tenants' namespaces and channel secrets, and the
    local receivers. Slack URLs are allowed on any loopback port (``slack_prefixes``)."""
    cluster = await start_cluster("host")
    api = await client_from_kubeconfig(cluster.kubeconfig)
    namespaces = cluster.store.resolve("", "v1", "namespaces")
    for tenant in ("acme", "globex"):
        cluster.store.create(namespaces, None, {"metadata": {"name": f"kubeopera-data-{tenant}"}})
    await db.execute("INSERT INTO tenants (id) VALUES ('acme'), ('globex')")
    async with Receivers() as receivers, open_session() as http:
        data_secret(cluster.store, "acme", "slack-hook", {"url": receivers.slack_url(HOOK)})
        data_secret(cluster.store, "acme", "pagerduty", {"routing_key": ROUTING_KEY})
        sender = NotificationSender(
            pool=db,
            objects=KubeObjects(api),
            config=SenderConfig(
                ui_url=UI,
                pagerduty_url=receivers.pagerduty_url,
                slack_prefixes=(f"{receivers.url}/slack/", "http://127.0.0.1:"),
                retention_days=90,
            ),
            listen_dsn=database_url,
            jitter=lambda: 0.0,
        )
        try:
            yield Env(db, cluster, receivers, sender, http, await add_host(db))
        finally:
            await api.close()
            await cluster.stop()


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


async def deliveries(
    pool: asyncpg.Pool, kind: str = "notify"
) -> dict[tuple[str, str], asyncpg.Record]:
    """(run uid, channel) → the delivery row of ``kind`` (notify, or a PagerDuty resolve)."""
    rows = await pool.fetch(
        "SELECT * FROM notification_deliveries WHERE kind = $1 ORDER BY id", kind
    )
    return {(row["run_uid"], row["channel"]): row for row in rows}


async def notify_audit(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch("SELECT * FROM run_actions WHERE action = 'notify' ORDER BY id"))


@contextlib.asynccontextmanager
async def sender_running(sender: NotificationSender) -> AsyncIterator[None]:
    """``sender.run`` as the compiler runs it: a supervised task, restarted after a crash (at
    once here), cancelled at the end."""
    workers = Supervisor(name="notifications-test")
    workers.spawn("notifications", sender.run, backoff=Backoff(initial=0.05, maximum=0.05))
    try:
        yield
    finally:
        await workers.shutdown(grace=10.0)


async def listen_backend(pool: asyncpg.Pool, *, other_than: int | None = None) -> int:
    """The pid of the sender's LISTEN session (``application_name`` wm-compiler-notify), once
    there is one (other than ``other_than``)."""
    found: list[int] = []

    async def listening() -> bool:
        pids = await pool.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'wm-compiler-notify' AND pid <> $1",
            other_than or 0,
        )
        found[:] = [int(row["pid"]) for row in pids]
        return len(found) == 1

    await eventually(listening, what="the sender's LISTEN session")
    return found[0]


async def settled(pool: asyncpg.Pool, total: int) -> None:
    """Every one of ``total`` deliveries has its final state."""

    async def final() -> bool:
        rows = await pool.fetch("SELECT state FROM notification_deliveries")
        return len(rows) == total and all(row["state"] in FINAL_STATES for row in rows)

    await eventually(final, within=30, what=f"{total} deliveries settled")
