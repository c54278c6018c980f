"""Fixtures for the simulator tests: a fresh emulated cluster and a real client per test
(`cluster`, `api`), and a one-cluster simulated world with Argo (`host`, `kube`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

from sim.kube.server import RunningCluster, start_cluster
from sim.world import SimCluster, World, start_world
from tests.integration.sim._argo import _client

BOOKMARK_INTERVAL_S = 0.2


@pytest.fixture
async def cluster() -> AsyncIterator[RunningCluster]:
    running = await start_cluster("test", bookmark_interval=BOOKMARK_INTERVAL_S)
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def api(cluster: RunningCluster) -> AsyncIterator[ApiClient]:
    configuration = Configuration()
    await config.load_kube_config_from_dict(
        cluster.kubeconfig_dict, client_configuration=configuration
    )
    async with ApiClient(configuration) as client:
        yield client


@pytest.fixture
async def argo_world() -> AsyncIterator[World]:
    """One cluster running the Argo simulator, stepped by the test (not autostarted)."""
    running = await start_world(1, tick=0.01, autostart=False, pod_gc_delay=0)
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
def host(argo_world: World) -> SimCluster:
    return argo_world.host


@pytest.fixture
async def kube(host: SimCluster) -> AsyncIterator[ApiClient]:
    async with await _client(host) as api:
        yield api
