"""Wires the watcher: registry → fleet of informers (one Lease per cluster) → writer → PostgreSQL.

Loops, each guarded by the supervisor:
- ``clusters``: reads the registry at start, on ``NOTIFY cluster_refresh`` (sent by the
  apiserver's ``POST /internal/v1/clusters/refresh``) and every CLUSTER_REFRESH_INTERVAL;
- ``election``: the sharded Lease election whose work is one informer per held cluster;
- ``writer``: the coalescing queue into PostgreSQL;
- ``retention``: finished runs older than RUN_RETENTION_DAYS, in small batches, by one replica;
- ``status``: each informed cluster's Argo reachability and last event time.

Ready (``/readyz``) while PostgreSQL answers, the writer runs and commits (``writer``), and
every cluster this replica holds is watched (``informers``); see docs/operations.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import aiohttp
import asyncpg
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from shared.clusters import plan_targets
from shared.config import Settings
from shared.db.clusters import REFRESH_CHANNEL, ClusterStore
from shared.db.listening import listen_forever
from shared.db.migrations import apply_migrations
from shared.db.pool import create_pool, database_ready
from shared.errors import DependencyDown, WorkflowManagerError
from shared.health import HealthServer
from shared.k8s import client_from_kubeconfig, host_client, translating
from shared.k8s_informer import ChangeQueue, InformerOptions
from shared.leader import LeaderElector, default_identity
from shared.leader_shards import ShardedElection
from shared.logging import get_logger
from shared.registry_client import RegistryClient
from shared.tasks import Supervisor
from watcher.fleet import Fleet
from watcher.pg_store import RunStore
from watcher.writing import RunWriter

RETENTION_PERIOD = 600.0  # seconds between retention passes
CHANGE_LOG_WINDOW = timedelta(days=1)  # how far back an SSE client can resume
LEASE_PREFIX = "wm-watcher"
log = get_logger(__name__)


def tune_collector() -> None:
    """Collect rarely: ingest allocates millions of short-lived, acyclic objects (parsed
    Workflow JSON) that reference counting frees on its own. A young-generation collection
    costs in proportion to the objects alive at that moment (the documents waiting in the
    queue), not to the threshold, so a high threshold mostly finds them already freed. The
    default (a collection every 700 allocations) spent a third of the watcher's CPU; 100,000
    still cost ~7 % of it (fifteen 70 ms collections per 20,000 runs); 1,000,000 runs about
    once a minute under full load (bench/ingest.py). Cyclic garbage, which only the collector
    frees, is rare on this path, and 1,000,000 bounds it. Objects alive after start-up are
    frozen out of the collector's reach."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(1_000_000, 50, 100)


async def host_identity(api: ApiClient) -> str:
    """The host cluster's identity: the UID of its kube-system namespace."""
    with translating():
        namespace = await CoreV1Api(api).read_namespace("kube-system")
    return str(namespace.metadata.uid)


@dataclass
class Watcher:
    """The running watcher's parts (tests and benchmarks reach into them)."""

    settings: Settings
    pool: asyncpg.Pool
    host_api: ApiClient
    host_uid: str
    queue: ChangeQueue
    fleet: Fleet
    writer: RunWriter
    runs: RunStore
    clusters: ClusterStore
    refresh_requested: asyncio.Event = field(default_factory=asyncio.Event)
    health: HealthServer | None = None  # set by ``run``

    async def writer_ready(self) -> None:
        """Readiness: the writer runs and its commits succeed."""
        if (problem := self.writer.problem()) is not None:
            raise DependencyDown(problem)

    async def informers_ready(self) -> None:
        """Readiness: every cluster this replica holds is watched (none held: ready)."""
        if late := self.fleet.not_watching():
            raise DependencyDown(
                "; ".join(f"cluster {cluster}: {why}" for cluster, why in late.items()),
                details={"clusters": sorted(late)},
            )

    async def refresh_clusters(self, registry: RegistryClient | None) -> None:
        entries = await registry.clusters() if registry is not None else []
        targets = plan_targets(entries, host_uid=self.host_uid)
        await self.clusters.sync(targets, host_uid=self.host_uid)
        await self.fleet.apply(targets)

    async def cluster_loop(self, registry: RegistryClient | None) -> None:
        interval = self.settings.CLUSTER_REFRESH_INTERVAL
        while True:
            try:
                await self.refresh_clusters(registry)
            except WorkflowManagerError as exc:
                log.warning("cluster_refresh_failed", error=exc.code, reason=exc.message)
            self.refresh_requested.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.refresh_requested.wait(), timeout=interval)

    async def listen_loop(self) -> None:
        """Hold a LISTEN connection for refresh requests; reconnect when it drops."""
        await listen_forever(
            self.settings,
            name="cluster_refresh",
            application_name="wm-watcher-listen",
            channels={REFRESH_CHANNEL: lambda *_: self.refresh_requested.set()},
            # A refresh may have been missed while disconnected.
            on_listening=self.refresh_requested.set,
            first_delay=2.0,
            max_delay=2.0,
        )

    async def retention_pass(self, *, now: datetime | None = None) -> int:
        """Delete finished runs past retention, a small batch at a time, and change-log rows
        older than the SSE resume window. Returns the runs deleted."""
        now = now or datetime.now(UTC)
        cutoff = now - timedelta(days=self.settings.RUN_RETENTION_DAYS)
        total = 0
        while deleted := await self.runs.prune_finished(older_than=cutoff):
            total += deleted
            await asyncio.sleep(0.1)  # let other writers through between batches
        while True:  # small batches, paced, so no lock is held for long
            if not await self.runs.prune_changes(older_than=now - CHANGE_LOG_WINDOW):
                break
            await asyncio.sleep(0.1)
        if total:
            log.info("runs_pruned", count=total, finished_before=cutoff.isoformat())
        return total

    async def retention_loop(self) -> None:
        while True:
            try:
                await self.retention_pass()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("retention_failed", error=type(exc).__name__)
            await asyncio.sleep(RETENTION_PERIOD)

    async def status_loop(self) -> None:
        while True:
            await asyncio.sleep(15)
            try:
                await self.fleet.report_status()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("status_report_failed", error=type(exc).__name__)


@contextlib.asynccontextmanager
async def watcher_parts(
    settings: Settings, *, informer_options: InformerOptions | None = None
) -> AsyncIterator[Watcher]:
    """Open the pool (migrating first), the host client and build the parts."""
    await apply_migrations(settings)
    pool = await create_pool(settings, application_name="wm-watcher")
    host_api = await host_client(settings)
    try:
        host_uid = await host_identity(host_api)
        queue = ChangeQueue()
        runs, clusters = RunStore(pool), ClusterStore(pool)
        fleet = Fleet(
            host_api=host_api,
            clusters=clusters,
            queue=queue,
            client_factory=client_from_kubeconfig,
            options=informer_options,
        )
        writer = RunWriter(queue=queue, store=runs, cluster_ref=fleet.ref)
        yield Watcher(settings, pool, host_api, host_uid, queue, fleet, writer, runs, clusters)
    finally:
        await host_api.close()
        await pool.close()


async def run(
    settings: Settings,
    workers: Supervisor,
    *,
    informer_options: InformerOptions | None = None,
    started: asyncio.Event | None = None,
    expose: Callable[[Watcher], None] | None = None,
) -> None:
    """The watcher's main: runs until cancelled."""
    identity = default_identity(settings.POD_NAME)
    async with (
        HealthServer.from_settings(settings) as health,
        watcher_parts(settings, informer_options=informer_options) as watcher,
        aiohttp.ClientSession() as session,
    ):
        registry = (
            RegistryClient(
                session,
                base_url=settings.KUBEOPERA_API_BASE_URL,
                internal_key=(
                    settings.KUBEOPERA_API_INTERNAL_KEY.get_secret_value()
                    if settings.KUBEOPERA_API_INTERNAL_KEY
                    else None
                ),
            )
            if settings.KUBEOPERA_API_BASE_URL
            else None
        )
        election = ShardedElection(
            watcher.host_api,
            namespace=settings.POD_NAMESPACE,
            prefix=LEASE_PREFIX,
            identity=identity,
            lease_duration=settings.LEASE_DURATION,
            renew_period=settings.LEASE_RENEW_PERIOD,
            work=watcher.fleet.inform,
        )
        watcher.fleet.election = election
        retention = LeaderElector.from_settings(
            watcher.host_api, settings, name=f"{LEASE_PREFIX}-retention"
        )

        health.add_check("postgresql", database_ready(watcher.pool))
        health.add_check("writer", watcher.writer_ready)
        health.add_check("informers", watcher.informers_ready)
        watcher.health = health
        async with election, retention:
            workers.spawn("writer", watcher.writer.run)
            workers.spawn("clusters", lambda: watcher.cluster_loop(registry))
            workers.spawn("listen", watcher.listen_loop)
            workers.spawn("retention", lambda: retention.run_while_leading(watcher.retention_loop))
            workers.spawn("status", watcher.status_loop)
            tune_collector()
            log.info("watcher_started", identity=identity, host_cluster=watcher.host_uid)
            if expose is not None:
                expose(watcher)
            if started is not None:
                started.set()
            await asyncio.Event().wait()
