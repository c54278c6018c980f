"""The stand-in cluster registry: the DESIGN.md contract over HTTP, and live changes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient, Configuration

from sim.registry import ClusterRecord, RunningRegistry, start_registry
from sim.world import World, start_world

KEY = "registry-test-key"


@pytest.fixture
async def registry() -> AsyncIterator[RunningRegistry]:
    running = await start_registry(internal_key=KEY)
    try:
        yield running
    finally:
        await running.stop()


async def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        return response.status, await response.json()


@pytest.mark.parametrize("headers", [None, {"X-Internal-Key": "wrong"}, {"X-API-Key": KEY}])
async def test_list_refuses_a_missing_or_wrong_key(
    registry: RunningRegistry, headers: dict[str, str] | None
) -> None:
    status, body = await _get(f"{registry.url}/internal/v1/clusters", headers)
    assert status == 401
    assert body["error"] == "unauthorized"


async def test_clusters_added_and_removed_live(registry: RunningRegistry) -> None:
    url = f"{registry.url}/internal/v1/clusters"
    headers = {"X-Internal-Key": KEY}
    assert await _get(url, headers) == (200, [])

    registry.registry.add(ClusterRecord("c1", "one", "eu-west-1", "sim", "kubeconfig: 1", "uid-1"))
    async with aiohttp.ClientSession(headers=headers) as session:
        body = {"name": "two", "region": "us-east-1", "provider": "eks", "kubeconfig": None}
        async with session.put(f"{registry.url}/sim/clusters/c2", json=body) as response:
            assert response.status == 200
    status, listed = await _get(url, headers)
    assert status == 200
    assert listed == [
        {
            "id": "c1",
            "name": "one",
            "region": "eu-west-1",
            "provider": "sim",
            "kubeconfig": "kubeconfig: 1",
            "kube_system_uid": "uid-1",
        },
        {
            "id": "c2",
            "name": "two",
            "region": "us-east-1",
            "provider": "eks",
            "kubeconfig": None,
            "kube_system_uid": None,
        },
    ]

    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.delete(f"{registry.url}/sim/clusters/c1") as response:
            assert response.status == 204
        async with session.delete(f"{registry.url}/sim/clusters/c1") as response:
            assert response.status == 404
    assert registry.registry.remove("c2")
    assert await _get(url, headers) == (200, [])


async def test_control_routes_need_the_key(registry: RunningRegistry) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.put(f"{registry.url}/sim/clusters/x", json={"name": "x"}) as response:
            assert response.status == 401
        async with session.delete(f"{registry.url}/sim/clusters/x") as response:
            assert response.status == 401
    assert registry.registry.list() == []


@pytest.fixture
async def world() -> AsyncIterator[World]:
    running = await start_world(3, tick=0.01, autostart=False, registry_key=KEY)
    try:
        yield running
    finally:
        await running.stop()


async def test_world_registry_lists_reachable_clusters_but_not_the_host(world: World) -> None:
    status, listed = await _get(
        f"{world.registry_url}/internal/v1/clusters", {"X-Internal-Key": KEY}
    )
    assert status == 200
    assert [c["name"] for c in listed] == ["cluster-1", "cluster-2"]
    assert world.host.kube_system_uid not in {c["kube_system_uid"] for c in listed}
    for entry in listed:
        configuration = Configuration()
        await config.load_kube_config_from_dict(
            yaml.safe_load(entry["kubeconfig"]),
            client_configuration=configuration,
        )
        async with ApiClient(configuration) as api:
            namespace = await client.CoreV1Api(api).read_namespace("kube-system")
            assert namespace.metadata.uid == entry["kube_system_uid"]

    world.register(world.host)
    world.unregister(world.clusters[2])
    _, listed = await _get(f"{world.registry_url}/internal/v1/clusters", {"X-Internal-Key": KEY})
    assert [(c["name"], c["kubeconfig"]) for c in listed] == [
        ("cluster-1", world.clusters[1].kubeconfig),
        ("host", None),
    ]
    assert listed[1]["kube_system_uid"] == world.host.kube_system_uid
