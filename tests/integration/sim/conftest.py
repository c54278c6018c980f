"""Fixtures for the Kubernetes API emulator tests: a fresh cluster and a real client per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

from sim.kube.server import RunningCluster, start_cluster

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
