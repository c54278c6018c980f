"""Fixtures for the apiserver against real PostgreSQL (and, where a test asks, simulated
clusters with Argo and moto S3): the application over real services, a client, fixture runs."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer

from apiserver.app import create_app
from apiserver.artifacts.s3_store import S3ObjectStore
from apiserver.clusters.connections import ConnectionCache
from apiserver.runs.pg_runs import RunReader
from apiserver.services import Services
from apiserver.stream.hub import ChangeSource, StreamHub
from apiserver.stream.pg_changes import PgChangeSource
from shared.k8s import client_from_kubeconfig
from shared.registry_client import RegistryClient
from shared.runs import RunPhase, RunRecord, RunSource
from watcher.pg_store import RunStore

API_KEY = "test-api-key"
NOW = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)
ALL = "workflows.read,workflows.act"


def headers(
    tenant: str | None = "acme",
    *,
    admin: bool = False,
    permissions: str = ALL,
    actor: str = "alice@acme",
    key: str | None = API_KEY,
) -> dict[str, str]:
    values = {"X-Kubeopera-Admin": "true" if admin else "false", "X-Kubeopera-Actor": actor}
    if key is not None:
        values["X-API-Key"] = key
    if tenant is not None:
        values["X-Kubeopera-Tenant"] = tenant
    if permissions:
        values["X-Kubeopera-Permissions"] = permissions
    return values


ADMIN = headers(None, admin=True, actor="root")

_uids = itertools.count(1)


def record(
    name: str,
    *,
    cluster: str = "c1",
    namespace: str | None = None,
    tenant: str | None = "acme",
    phase: RunPhase = RunPhase.SUCCEEDED,
    source: RunSource = RunSource.MANUAL,
    started: datetime | None = NOW,
    finished: datetime | None = None,
    template: str | None = None,
    pipeline: str | None = None,
    region: str | None = "eu-west-1",
    provider: str | None = "aws",
    parameters: dict[str, str] | None = None,
    graph: dict[str, Any] | None = None,
    resource_version: int = 1,
    uid: str | None = None,
) -> RunRecord:
    if namespace is None:
        namespace = f"kubeopera-data-{tenant}" if tenant else "argo"
    return RunRecord(
        cluster_id=cluster,
        cluster_name=cluster,
        region=region,
        provider=provider,
        namespace=namespace,
        name=name,
        uid=uid or f"uid-{next(_uids)}",
        resource_version=resource_version,
        tenant=tenant,
        source=source,
        phase=phase,
        message=None,
        progress_done=1,
        progress_total=2,
        created_at=started - timedelta(seconds=5) if started else NOW,
        started_at=started,
        finished_at=finished,
        duration_seconds=None,
        estimated_duration_seconds=None,
        parameters=parameters or {},
        resources_duration={},
        template=template,
        pipeline_id=pipeline,
        pipeline_version="3" if pipeline else None,
        cron_workflow=None,
        labels={},
        graph=graph or {"nodes": [], "node_count": 0, "truncated": False},
        graph_truncated=False,
        node_count=len((graph or {}).get("nodes", [])),
    )


async def add_cluster(
    pool: asyncpg.Pool,
    cluster_id: str,
    *,
    region: str = "eu-west-1",
    provider: str = "aws",
    is_host: bool = False,
    reachable: bool | None = True,
) -> None:
    await pool.execute(
        "INSERT INTO clusters (id, name, region, provider, is_host, registered, argo_reachable, "
        "argo_version, last_event_at) VALUES ($1, $1, $2, $3, $4, true, $5, 'v3.6.2', now()) "
        "ON CONFLICT (id) DO NOTHING",
        cluster_id,
        region,
        provider,
        is_host,
        reachable,
    )


@dataclass
class Api:
    """A running apiserver application over the test database."""

    client: TestClient[Any, Any]
    services: Services
    hub: StreamHub
    store: RunStore
    pool: asyncpg.Pool

    async def write(self, *records: RunRecord) -> None:
        for cluster in {r.cluster_id for r in records}:
            first = next(r for r in records if r.cluster_id == cluster)
            await add_cluster(
                self.pool, cluster, region=first.region or "", provider=first.provider or ""
            )
        await self.store.write_batch(list(records))

    async def get(self, path: str, *, as_: dict[str, str] | None = None, **params: Any) -> Any:
        response = await self.client.get(path, headers=as_ or headers(), params=params)
        return response.status, await response.json()


AppFactory = Callable[..., Awaitable[Api]]


@pytest.fixture
async def make_api(db: asyncpg.Pool, database_url: str) -> AsyncIterator[AppFactory]:
    clients: list[TestClient[Any, Any]] = []
    caches: list[ConnectionCache] = []
    sessions: list[aiohttp.ClientSession] = []

    async def build(
        *,
        registry: tuple[str, str] | None = None,
        host_kubeconfig: str | None = None,
        s3: tuple[str, str] | None = None,
        heartbeat: float = 15.0,
        queue_size: int = 1000,
        clock: Callable[[], datetime] | None = None,
        pool: asyncpg.Pool | None = None,
        wrap_source: Callable[[ChangeSource], ChangeSource] | None = None,
    ) -> Api:
        pool = pool or db
        registry_client = None
        if registry is not None:
            session = aiohttp.ClientSession()
            sessions.append(session)
            registry_client = RegistryClient(
                session, base_url=registry[0], internal_key=registry[1]
            )
        host_factory = None
        if host_kubeconfig is not None:
            text = host_kubeconfig

            async def host_factory() -> Any:
                return await client_from_kubeconfig(text)

        connections = ConnectionCache(
            registry=registry_client, host_factory=host_factory, min_refresh_seconds=0.0
        )
        caches.append(connections)
        objects = None
        bucket = None
        if s3 is not None:
            objects = S3ObjectStore(region="us-east-1", endpoint_url=s3[0])
            bucket = s3[1]
        services = Services(
            pool=pool,
            runs=RunReader(pool),
            connections=connections,
            objects=objects,
            artifact_bucket=bucket,
            argo_data_server_url="https://argo-server.argo.svc:2746",
            heartbeat_seconds=heartbeat,
        )
        if clock is not None:
            services = replace(services, clock=clock)
        source: ChangeSource = PgChangeSource(pool, dsn=database_url)
        if wrap_source is not None:
            source = wrap_source(source)
        hub = StreamHub(source, queue_size=queue_size, poll_seconds=1.0)
        app = create_app(services, hub, api_key=API_KEY)
        client: TestClient[Any, Any] = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return Api(client, services, hub, RunStore(db), db)

    yield build
    for client in clients:
        await client.close()
    for cache in caches:
        await cache.close()
    for session in sessions:
        await session.close()


@pytest.fixture
async def api(make_api: AppFactory) -> Api:
    return await make_api(clock=lambda: NOW)


@dataclass
class Process:
    """``python -m apiserver`` serving on ``port``, its stderr (one JSON object a line) kept."""

    port: int
    lines: list[str]
    grew: asyncio.Event

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def line_where(self, wanted: Callable[[dict[str, Any]], bool], *, after: int) -> int:
        """The index of the first line after ``after`` that ``wanted`` accepts (waiting for it)."""
        async with asyncio.timeout(10):
            while True:
                for index in range(after, len(self.lines)):
                    with contextlib.suppress(ValueError):
                        if wanted(json.loads(self.lines[index])):
                            return index
                self.grew.clear()
                await self.grew.wait()


@pytest.fixture
async def apiserver_process(db: asyncpg.Pool, database_url: str) -> AsyncIterator[Process]:
    """The real deployable (its logging, its server options) over the test database."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "API_KEY": API_KEY,
        "HTTP_PORT": str(port),
        "HEALTH_PORT": "0",
        "LOG_JSON": "true",
        "SHUTDOWN_GRACE": "6",
        "COMPILER_URL": "http://127.0.0.1:9",  # nothing listens: pipeline writes answer 503
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "apiserver", env=env, stderr=asyncio.subprocess.PIPE
    )
    assert child.stderr is not None
    stderr = child.stderr
    process = Process(port, [], asyncio.Event())

    async def read() -> None:
        async for raw in stderr:
            process.lines.append(raw.decode(errors="replace").rstrip("\n"))
            process.grew.set()

    reader = asyncio.create_task(read())
    try:
        await process.line_where(lambda line: line.get("event") == "apiserver_started", after=0)
        yield process
    finally:
        if child.returncode is None:
            child.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(child.wait(), 15)
            except TimeoutError:
                child.kill()
                await child.wait()
        await reader
