"""The Kubernetes API emulator's watches through the real kubernetes-asyncio client: resuming,
selectors, bookmarks, timeouts, 410 after compaction; and the store's in-process subscribers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio import config
from kubernetes_asyncio.client import (
    ApiClient,
    Configuration,
    CoreV1Api,
    CustomObjectsApi,
)
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch

from sim.kube.server import RunningCluster, start_cluster
from sim.kube.types import WatchEvent
from tests.integration.sim._emulator import (
    MERGE,
    WF,
    _cm,
    _collect,
    _workflow,
)

pytestmark = pytest.mark.integration


async def test_watch_resumes_from_list_resource_version(api: ApiClient) -> None:
    core = CoreV1Api(api)
    await core.create_namespaced_config_map("default", _cm("before"))
    listed = await core.list_namespaced_config_map("default")
    await core.create_namespaced_config_map("default", _cm("after"))
    await core.patch_namespaced_config_map(
        "before", "default", {"data": {"n": "1"}}, _content_type=MERGE
    )
    await core.delete_namespaced_config_map("after", "default")

    events = await _collect(
        Watch(),
        core.list_namespaced_config_map,
        "default",
        resource_version=listed.metadata.resource_version,
        limit=3,
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "after"),
        ("MODIFIED", "before"),
        ("DELETED", "after"),
    ]
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs)
    assert rvs[0] > int(listed.metadata.resource_version)


async def test_watch_without_version_lists_then_streams_live(api: ApiClient) -> None:
    custom = CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(*WF, "default", "workflows", _workflow("old"))
    watch = Watch()
    seen: list[tuple[str, str]] = []
    async with watch:
        async for event in watch.stream(custom.list_cluster_custom_object, *WF, "workflows"):
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            if len(seen) == 1:
                await custom.create_namespaced_custom_object(
                    *WF, "default", "workflows", _workflow("new")
                )
            if len(seen) == 2:
                watch.stop()
                break
    assert seen == [("ADDED", "old"), ("ADDED", "new")]


async def test_watch_with_selector_sees_objects_leave_the_selection(api: ApiClient) -> None:
    core = CoreV1Api(api)
    listed = await core.list_namespaced_config_map("default")
    await core.create_namespaced_config_map("default", _cm("x", keep="yes"))
    await core.create_namespaced_config_map("default", _cm("y", keep="no"))
    await core.patch_namespaced_config_map(
        "x", "default", {"metadata": {"labels": {"keep": "no"}}}, _content_type=MERGE
    )
    events = await _collect(
        Watch(),
        core.list_namespaced_config_map,
        "default",
        resource_version=listed.metadata.resource_version,
        label_selector="keep=yes",
        limit=2,
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "x"),
        ("DELETED", "x"),
    ]


async def test_watch_bookmarks_carry_the_current_resource_version(
    api: ApiClient, cluster: RunningCluster
) -> None:
    core = CoreV1Api(api)
    listed = await core.list_namespaced_config_map("default")
    events = await _collect(
        Watch(),
        core.list_namespaced_config_map,
        "default",
        resource_version=listed.metadata.resource_version,
        allow_watch_bookmarks=True,
        limit=1,
    )
    assert events[0]["type"] == "BOOKMARK"
    rv = events[0]["raw_object"]["metadata"]["resourceVersion"]
    assert rv == str(cluster.store.resource_version)


async def test_timeout_seconds_ends_the_watch(api: ApiClient) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    events = await _collect(
        Watch(),
        CoreV1Api(api).list_namespaced_pod,
        "default",
        resource_version="1",
        timeout_seconds=1,
    )
    assert events == []
    assert 0.9 <= loop.time() - started < 3


async def test_compacted_resource_version_is_410_in_the_client(
    api: ApiClient, cluster: RunningCluster
) -> None:
    core = CoreV1Api(api)
    listed = await core.list_namespaced_config_map("default")
    await core.create_namespaced_config_map("default", _cm("later"))
    cluster.store.compact()
    with pytest.raises(ApiException) as expired:
        await _collect(
            Watch(),
            core.list_namespaced_config_map,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=5,
        )
    assert expired.value.status == 410
    # The list still answers, and watching from its resourceVersion works again.
    relisted = await core.list_namespaced_config_map("default")
    assert [c.metadata.name for c in relisted.items] == ["later"]


async def test_store_subscribers_and_in_process_watch(cluster: RunningCluster) -> None:
    store = cluster.store
    workflows = store.resolve("argoproj.io", "v1alpha1", "workflows")
    seen: list[tuple[str, str]] = []

    def on_change(event: WatchEvent, rtype: Any) -> None:
        name = event["object"]["metadata"]["name"]
        seen.append((event["type"], name))
        if event["type"] == "ADDED" and name == "a":
            # A write from inside a callback is delivered after the current change.
            store.patch(
                workflows, "default", "a", {"status": {"phase": "Running"}}, content_type=MERGE
            )

    unsubscribe = store.subscribe(on_change)
    rv = str(store.resource_version)
    store.create(workflows, "default", _workflow("a"))
    unsubscribe()
    store.create(workflows, "default", _workflow("b"))
    assert seen == [("ADDED", "a"), ("MODIFIED", "a")]

    events = [
        (e["type"], e["object"]["metadata"]["name"])
        async for e in store.watch(workflows, "default", resource_version=rv, timeout=0.05)
    ]
    assert events == [("ADDED", "a"), ("MODIFIED", "a"), ("ADDED", "b")]


async def test_stopping_a_cluster_ends_open_watches_promptly() -> None:
    running = await start_cluster("short-lived")
    configuration = Configuration()
    await config.load_kube_config_from_dict(
        running.kubeconfig_dict, client_configuration=configuration
    )
    async with ApiClient(configuration) as client:
        core = CoreV1Api(client)
        response = await core.list_namespaced_config_map(
            "default", watch=True, resource_version="1", _preload_content=False
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        await running.stop()
        assert await response.content.read() == b""
        assert loop.time() - started < 1.5


async def test_a_long_replay_is_handed_over_in_bounded_batches(cluster: RunningCluster) -> None:
    # As the API server streams a watch: the first events leave at once, not after the whole
    # backlog has been joined into one write.
    store = cluster.store
    workflows = store.resolve("argoproj.io", "v1alpha1", "workflows")
    rv = str(store.resource_version)
    for n in range(40):
        document = _workflow(f"big-{n}")
        document["metadata"]["annotations"] = {"padding": "x" * 100_000}
        store.create(workflows, "default", document)
    stream = store.open_watch(workflows, "default", resource_version=rv, timeout=1.0)
    try:
        batches = []
        while batch := await stream.next_batch(0.05):
            batches.append(batch)
    finally:
        stream.close()
    assert len(batches) > 1
    line_size = max(len(line) for batch in batches for line in batch)
    assert all(sum(map(len, batch)) < (1 << 20) + line_size for batch in batches)
    names = [json.loads(line)["object"]["metadata"]["name"] for b in batches for line in b]
    assert names == [f"big-{n}" for n in range(40)]
