"""The Kubernetes API emulator beyond objects: pod logs, the service proxy and token auth."""

from __future__ import annotations

import json

import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio import config
from kubernetes_asyncio.client import (
    ApiClient,
    Configuration,
    CoreV1Api,
    V1ObjectMeta,
    V1Pod,
)
from kubernetes_asyncio.client.exceptions import ApiException

from sim.kube.server import RunningCluster
from tests.integration.sim._emulator import (
    _status,
)

pytestmark = pytest.mark.integration


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
    configuration = Configuration()
    await config.load_kube_config_from_dict(
        yaml.safe_load(cluster.kubeconfig.replace(cluster.token, "wrong")),
        client_configuration=configuration,
    )
    async with ApiClient(configuration) as client:
        with pytest.raises(ApiException) as refused:
            await CoreV1Api(client).list_namespace()
    assert refused.value.status == 401
    assert _status(refused.value)["kind"] == "Status"
