"""The Kubernetes API emulator, exercised through the real kubernetes-asyncio client."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import config
from kubernetes_asyncio.client import (
    ApiClient,
    ApisApi,
    Configuration,
    CoordinationV1Api,
    CoreApi,
    CoreV1Api,
    CustomObjectsApi,
    V1ConfigMap,
    V1Lease,
    V1LeaseSpec,
    V1Namespace,
    V1ObjectMeta,
    V1Pod,
    VersionApi,
)
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch

from sim.kube.server import RunningCluster, start_cluster
from sim.kube.types import WatchEvent

pytestmark = pytest.mark.integration

MERGE = "application/merge-patch+json"
WF = ("argoproj.io", "v1alpha1")


def _status(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def _workflow(name: str, *, phase: str | None = None, **labels: str) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name, "labels": labels},
        "spec": {"entrypoint": "main"},
    }
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def _cm(name: str, **labels: str) -> V1ConfigMap:
    return V1ConfigMap(metadata=V1ObjectMeta(name=name, labels=labels), data={"k": "v"})


async def _collect(
    watch: Watch, func: Any, *args: Any, limit: int | None = None, **kwargs: Any
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with watch:
        async for event in watch.stream(func, *args, **kwargs):
            events.append(event)
            if limit is not None and len(events) >= limit:
                watch.stop()
                break
    return events


async def test_discovery(api: ApiClient) -> None:
    version = await VersionApi(api).get_code()
    assert version.major == "1"
    assert (await CoreApi(api).get_api_versions()).versions == ["v1"]
    core = await CoreV1Api(api).get_api_resources()
    names = {r.name: r for r in core.resources}
    assert names["configmaps"].namespaced
    assert names["configmaps"].kind == "ConfigMap"
    assert not names["namespaces"].namespaced
    assert "pods/log" in names
    groups = {g.name: g for g in (await ApisApi(api).get_api_versions()).groups}
    assert groups["argoproj.io"].preferred_version.version == "v1alpha1"
    assert "coordination.k8s.io" in groups
    argo = await CustomObjectsApi(api).get_api_resources("argoproj.io", "v1alpha1")
    kinds = {r.name: (r.kind, r.namespaced) for r in argo.resources}
    assert kinds["workflows"] == ("Workflow", True)
    assert kinds["clusterworkflowtemplates"] == ("ClusterWorkflowTemplate", False)


async def test_kube_system_and_default_exist(api: ApiClient, cluster: RunningCluster) -> None:
    core = CoreV1Api(api)
    kube_system = await core.read_namespace("kube-system")
    assert kube_system.metadata.uid == cluster.kube_system_uid
    assert (await core.read_namespace("default")).status.phase == "Active"


async def test_configmap_lifecycle(api: ApiClient) -> None:
    core = CoreV1Api(api)
    created = await core.create_namespaced_config_map("default", _cm("one", app="a"))
    assert created is not None, "create must answer 201 with the object"
    meta = created.metadata
    assert meta.uid
    assert meta.resource_version
    assert meta.creation_timestamp is not None
    assert meta.namespace == "default"

    fetched = await core.read_namespaced_config_map("one", "default")
    assert fetched.data == {"k": "v"}

    fetched.data = {"k": "w"}
    replaced = await core.replace_namespaced_config_map("one", "default", fetched)
    assert int(replaced.metadata.resource_version) > int(meta.resource_version)
    assert replaced.data == {"k": "w"}

    patched = await core.patch_namespaced_config_map(
        "one", "default", {"data": {"x": "y"}}, _content_type=MERGE
    )
    assert patched.data == {"k": "w", "x": "y"}

    listed = await core.list_namespaced_config_map("default")
    assert [c.metadata.name for c in listed.items] == ["one"]
    assert int(listed.metadata.resource_version) >= int(patched.metadata.resource_version)

    deleted = await core.delete_namespaced_config_map("one", "default")
    assert (deleted.status, deleted.details.name) == ("Success", "one")
    with pytest.raises(ApiException) as missing:
        await core.read_namespaced_config_map("one", "default")
    assert missing.value.status == 404
    status = _status(missing.value)
    assert (status["kind"], status["apiVersion"]) == ("Status", "v1")
    assert (status["status"], status["reason"], status["code"]) == ("Failure", "NotFound", 404)
    assert "one" in status["message"]


async def test_generate_name_and_namespace_cascade(api: ApiClient) -> None:
    core = CoreV1Api(api)
    await core.create_namespace(V1Namespace(metadata=V1ObjectMeta(name="tenant-a")))
    made = await core.create_namespaced_config_map(
        "tenant-a", V1ConfigMap(metadata=V1ObjectMeta(generate_name="cm-"))
    )
    assert made.metadata.name.startswith("cm-")
    assert len(made.metadata.name) == 8

    with pytest.raises(ApiException) as no_namespace:
        await core.create_namespaced_config_map("nowhere", _cm("x"))
    assert no_namespace.value.status == 404

    await core.delete_namespace("tenant-a")
    assert (await core.list_namespaced_config_map("tenant-a")).items == []
    with pytest.raises(ApiException) as gone:
        await core.read_namespace("tenant-a")
    assert gone.value.status == 404


async def test_workflow_lifecycle(api: ApiClient) -> None:
    custom = CustomObjectsApi(api)
    created = await custom.create_namespaced_custom_object(
        *WF, "default", "workflows", _workflow("wf-1")
    )
    assert created["metadata"]["generation"] == 1
    assert created["metadata"]["creationTimestamp"].endswith("Z")

    status_only = await custom.patch_namespaced_custom_object(
        *WF, "default", "workflows", "wf-1", {"status": {"phase": "Running"}}, _content_type=MERGE
    )
    assert status_only["status"] == {"phase": "Running"}
    assert status_only["metadata"]["generation"] == 1, "a status change keeps the generation"

    spec = await custom.patch_namespaced_custom_object(
        *WF, "default", "workflows", "wf-1", {"spec": {"shutdown": "Stop"}}, _content_type=MERGE
    )
    assert spec["spec"] == {"entrypoint": "main", "shutdown": "Stop"}
    assert spec["metadata"]["generation"] == 2

    spec["metadata"]["labels"] = {"tenant": "t1"}
    replaced = await custom.replace_namespaced_custom_object(
        *WF, "default", "workflows", "wf-1", spec
    )
    assert replaced["metadata"]["labels"] == {"tenant": "t1"}

    everywhere = await custom.list_cluster_custom_object(*WF, "workflows")
    assert [w["metadata"]["name"] for w in everywhere["items"]] == ["wf-1"]
    assert everywhere["kind"] == "WorkflowList"

    status = await custom.get_namespaced_custom_object_status(*WF, "default", "workflows", "wf-1")
    assert status["status"] == {"phase": "Running"}
    through_status = await custom.patch_namespaced_custom_object_status(
        *WF,
        "default",
        "workflows",
        "wf-1",
        {"status": {"phase": "Succeeded"}, "spec": {"entrypoint": "ignored"}},
        _content_type=MERGE,
    )
    assert through_status["status"] == {"phase": "Succeeded"}
    assert through_status["spec"]["entrypoint"] == "main", "/status changes only the status"

    await custom.delete_namespaced_custom_object(*WF, "default", "workflows", "wf-1")
    with pytest.raises(ApiException) as missing:
        await custom.get_namespaced_custom_object(*WF, "default", "workflows", "wf-1")
    assert missing.value.status == 404


async def test_lease_renewal_and_stale_replace(api: ApiClient) -> None:
    leases = CoordinationV1Api(api)
    lease = V1Lease(
        metadata=V1ObjectMeta(name="leader"),
        spec=V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    created = await leases.create_namespaced_lease("default", lease)
    created.spec.holder_identity = "b"
    renewed = await leases.replace_namespaced_lease("leader", "default", created)
    assert renewed.spec.holder_identity == "b"

    created.spec.holder_identity = "c"  # still carries the old resourceVersion
    with pytest.raises(ApiException) as stale:
        await leases.replace_namespaced_lease("leader", "default", created)
    assert stale.value.status == 409
    assert _status(stale.value)["reason"] == "Conflict"
    current = await leases.read_namespaced_lease("leader", "default")
    assert current.spec.holder_identity == "b"


async def test_name_clash_is_409_already_exists(api: ApiClient) -> None:
    core = CoreV1Api(api)
    await core.create_namespaced_config_map("default", _cm("same"))
    with pytest.raises(ApiException) as clash:
        await core.create_namespaced_config_map("default", _cm("same"))
    assert clash.value.status == 409
    assert _status(clash.value)["reason"] == "AlreadyExists"


async def test_stale_resource_version_in_merge_patch_is_409(api: ApiClient) -> None:
    custom = CustomObjectsApi(api)
    created = await custom.create_namespaced_custom_object(
        *WF, "default", "workflows", _workflow("wf")
    )
    old_rv = created["metadata"]["resourceVersion"]
    await custom.patch_namespaced_custom_object(
        *WF, "default", "workflows", "wf", {"metadata": {"labels": {"a": "b"}}}, _content_type=MERGE
    )
    with pytest.raises(ApiException) as stale:
        await custom.patch_namespaced_custom_object(
            *WF,
            "default",
            "workflows",
            "wf",
            {"metadata": {"resourceVersion": old_rv}, "spec": {"shutdown": "Stop"}},
            _content_type=MERGE,
        )
    assert stale.value.status == 409
    current = await custom.get_namespaced_custom_object(*WF, "default", "workflows", "wf")
    assert "shutdown" not in current["spec"]


async def test_json_patch_needs_a_list_so_the_client_default_is_caught(api: ApiClient) -> None:
    custom = CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(*WF, "default", "workflows", _workflow("wf"))
    ops = [
        {"op": "add", "path": "/spec/shutdown", "value": "Terminate"},
        {"op": "test", "path": "/spec/entrypoint", "value": "main"},
    ]
    patched = await custom.patch_namespaced_custom_object(*WF, "default", "workflows", "wf", ops)
    assert patched["spec"]["shutdown"] == "Terminate"

    # Without _content_type the client sends a dict as application/json-patch+json.
    with pytest.raises(ApiException) as refused:
        await custom.patch_namespaced_custom_object(
            *WF, "default", "workflows", "wf", {"spec": {"shutdown": "Stop"}}
        )
    assert refused.value.status in (400, 422)

    failing_test = [{"op": "test", "path": "/spec/entrypoint", "value": "other"}]
    with pytest.raises(ApiException) as failed:
        await custom.patch_namespaced_custom_object(*WF, "default", "workflows", "wf", failing_test)
    assert failed.value.status == 422


async def test_unknown_patch_content_type_is_415(api: ApiClient) -> None:
    core = CoreV1Api(api)
    await core.create_namespaced_config_map("default", _cm("cm"))
    with pytest.raises(ApiException) as unsupported:
        await core.patch_namespaced_config_map(
            "cm", "default", {"data": {"a": "b"}}, _content_type="application/apply-patch+yaml"
        )
    assert unsupported.value.status == 415
    assert _status(unsupported.value)["reason"] == "UnsupportedMediaType"


async def test_label_and_field_selectors(api: ApiClient) -> None:
    core = CoreV1Api(api)
    await core.create_namespaced_config_map("default", _cm("a", app="web", tier="front"))
    await core.create_namespaced_config_map("default", _cm("b", app="web", tier="back"))
    await core.create_namespaced_config_map("default", _cm("c", app="db"))

    async def names(**kwargs: str) -> list[str]:
        listed = await core.list_namespaced_config_map("default", **kwargs)
        return [c.metadata.name for c in listed.items]

    assert await names(label_selector="app=web") == ["a", "b"]
    assert await names(label_selector="app==web,tier!=back") == ["a"]
    assert await names(label_selector="tier in (back, front)") == ["a", "b"]
    assert await names(label_selector="tier notin (front)") == ["b", "c"]
    assert await names(label_selector="!tier") == ["c"]
    assert await names(label_selector="tier,app=web") == ["a", "b"]
    assert await names(field_selector="metadata.name=b") == ["b"]
    assert await names(field_selector="metadata.namespace==default,metadata.name!=a") == [
        "b",
        "c",
    ]

    custom = CustomObjectsApi(api)
    for name, phase in (("w1", "Running"), ("w2", "Succeeded"), ("w3", "Running")):
        await custom.create_namespaced_custom_object(
            *WF, "default", "workflows", _workflow(name, phase=phase)
        )
    running = await custom.list_cluster_custom_object(
        *WF, "workflows", field_selector="status.phase=Running"
    )
    assert [w["metadata"]["name"] for w in running["items"]] == ["w1", "w3"]

    with pytest.raises(ApiException) as bad:
        await core.list_namespaced_config_map("default", label_selector="app in web")
    assert bad.value.status == 400


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


async def test_finalizers_hold_deletion_until_removed(api: ApiClient) -> None:
    core = CoreV1Api(api)
    body = V1ConfigMap(metadata=V1ObjectMeta(name="held", finalizers=["example.com/keep"]))
    await core.create_namespaced_config_map("default", body)
    listed = await core.list_namespaced_config_map("default")

    answer = await core.delete_namespaced_config_map("held", "default", _preload_content=False)
    assert json.loads(await answer.read())["metadata"]["deletionTimestamp"]
    still = await core.read_namespaced_config_map("held", "default")
    assert still.metadata.deletion_timestamp is not None

    await core.patch_namespaced_config_map(
        "held", "default", {"metadata": {"finalizers": None}}, _content_type=MERGE
    )
    with pytest.raises(ApiException) as gone:
        await core.read_namespaced_config_map("held", "default")
    assert gone.value.status == 404
    events = await _collect(
        Watch(),
        core.list_namespaced_config_map,
        "default",
        resource_version=listed.metadata.resource_version,
        limit=2,
    )
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]


async def test_owner_references_are_garbage_collected(api: ApiClient) -> None:
    custom = CustomObjectsApi(api)
    core = CoreV1Api(api)
    wf = await custom.create_namespaced_custom_object(*WF, "default", "workflows", _workflow("o"))
    owner = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "name": "o",
        "uid": wf["metadata"]["uid"],
    }
    pod = {"metadata": {"name": "o-pod", "ownerReferences": [owner]}, "spec": {"containers": []}}
    await core.create_namespaced_pod("default", pod)
    await custom.delete_namespaced_custom_object(*WF, "default", "workflows", "o")
    assert (await core.list_namespaced_pod("default")).items == []


async def test_pod_logs(api: ApiClient, cluster: RunningCluster) -> None:
    core = CoreV1Api(api)
    store = cluster.store
    await core.create_namespaced_pod("default", V1Pod(metadata=V1ObjectMeta(name="p")))
    for line in ("one", "two", "three"):
        store.append_log("default", "p", line)
    store.append_log("default", "p", "waiting", container="wait")

    assert await core.read_namespaced_pod_log("p", "default", container="main") == (
        "one\ntwo\nthree\n"
    )
    assert await core.read_namespaced_pod_log("p", "default", tail_lines=1) == "three\n"
    assert await core.read_namespaced_pod_log("p", "default", container="wait") == "waiting\n"
    with pytest.raises(ApiException) as no_container:
        await core.read_namespaced_pod_log("p", "default", container="other")
    assert no_container.value.status == 400
    with pytest.raises(ApiException) as no_pod:
        await core.read_namespaced_pod_log("ghost", "default")
    assert no_pod.value.status == 404

    response = await core.read_namespaced_pod_log(
        "p", "default", container="main", follow=True, _preload_content=False
    )
    async with response:
        assert await response.content.readline() == b"one\n"
        await response.content.readline()
        await response.content.readline()
        store.append_log("default", "p", "four")
        assert await response.content.readline() == b"four\n"
        store.close_log("default", "p")
        assert await response.content.read() == b""

    follower = await core.read_namespaced_pod_log(
        "p", "default", container="wait", follow=True, _preload_content=False
    )
    async with follower:
        assert await follower.content.readline() == b"waiting\n"
        await core.delete_namespaced_pod("p", "default")
        assert await follower.content.read() == b"", "following ends when the pod is deleted"


async def test_service_proxy_forwards_methods_paths_and_bodies(
    api: ApiClient, cluster: RunningCluster
) -> None:
    seen: list[tuple[str, str, str, dict[str, str]]] = []

    async def argo_server(request: web.Request, path: str) -> web.StreamResponse:
        seen.append((request.method, path, await request.text(), dict(request.query)))
        return web.json_response({"method": request.method, "path": path})

    cluster.store.register_proxy("argo", "argo-server", "2746", argo_server)
    core = CoreV1Api(api)

    response = await core.connect_get_namespaced_service_proxy_with_path(
        "http:argo-server:2746", "argo", "api/v1/info", _preload_content=False
    )
    assert json.loads(await response.read()) == {"method": "GET", "path": "api/v1/info"}
    response = await core.connect_put_namespaced_service_proxy_with_path(
        "argo-server:2746", "argo", "api/v1/workflows/t1/wf/retry", _preload_content=False
    )
    assert response.status == 200

    for method in ("PUT", "POST"):
        raw = await api.call_api(
            "/api/v1/namespaces/{namespace}/services/{name}/proxy/{path}",
            method,
            path_params={
                "namespace": "argo",
                "name": "https:argo-server:2746",
                "path": "api/v1/workflows/t1/wf/set",
            },
            query_params=[("dry", "1")],
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body={"nodeFieldSelector": "displayName=approve", "phase": "Succeeded"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        assert raw.status == 200
        assert json.loads(await raw.read())["method"] == method

    assert [(m, p) for m, p, _, _ in seen] == [
        ("GET", "api/v1/info"),
        ("PUT", "api/v1/workflows/t1/wf/retry"),
        ("PUT", "api/v1/workflows/t1/wf/set"),
        ("POST", "api/v1/workflows/t1/wf/set"),
    ]
    assert json.loads(seen[-1][2]) == {
        "nodeFieldSelector": "displayName=approve",
        "phase": "Succeeded",
    }
    assert seen[-1][3] == {"dry": "1"}

    with pytest.raises(ApiException) as unavailable:
        await core.connect_get_namespaced_service_proxy_with_path("http:missing:80", "argo", "x")
    assert unavailable.value.status == 503
    assert _status(unavailable.value)["reason"] == "ServiceUnavailable"


async def test_requests_without_the_token_are_401(cluster: RunningCluster) -> None:
    configuration = Configuration(host=cluster.url, api_key={"BearerToken": "Bearer wrong"})
    async with ApiClient(configuration) as client:
        with pytest.raises(ApiException) as refused:
            await CoreV1Api(client).list_namespace()
    assert refused.value.status == 401
    assert _status(refused.value)["kind"] == "Status"


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


async def test_paged_list_is_a_consistent_snapshot(api: ApiClient) -> None:
    core = CoreV1Api(api)
    for index in range(7):
        await core.create_namespaced_config_map(
            "default", V1ConfigMap(metadata=V1ObjectMeta(name=f"page-{index}"))
        )
    first = await core.list_namespaced_config_map("default", limit=3)
    assert [c.metadata.name for c in first.items] == ["page-0", "page-1", "page-2"]
    assert first.metadata._continue
    # A change after the first page is not part of the snapshot being paged through.
    await core.create_namespaced_config_map(
        "default", V1ConfigMap(metadata=V1ObjectMeta(name="page-9"))
    )
    names, token = [c.metadata.name for c in first.items], first.metadata._continue
    while token:
        page = await core.list_namespaced_config_map("default", limit=3, _continue=token)
        assert page.metadata.resource_version == first.metadata.resource_version
        names += [c.metadata.name for c in page.items]
        token = page.metadata._continue
    assert names == [f"page-{i}" for i in range(7)]
    with pytest.raises(ApiException) as expired:
        await core.list_namespaced_config_map("default", limit=3, _continue="unknown:3")
    assert expired.value.status == 410
