"""Kubernetes clients and the Argo server client against the Kubernetes API emulator."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from shared.argo import ArgoRefused, ArgoServer
from shared.errors import DependencyDown, Invalid, NotFound
from shared.k8s import client_from_kubeconfig, translating
from sim.kube.server import RunningCluster, start_cluster


@dataclass
class Recorded:
    method: str
    path: str
    body: Any


@dataclass
class FakeArgo:
    """An Argo server behind the service proxy that records what reaches it."""

    requests: list[Recorded] = field(default_factory=list)
    status: int = 200
    answer: dict[str, Any] = field(default_factory=lambda: {"metadata": {"name": "wf-1"}})

    async def __call__(self, request: web.Request, path: str) -> web.StreamResponse:
        raw = await request.read()
        self.requests.append(Recorded(request.method, path, json.loads(raw) if raw else None))
        return web.json_response(self.answer, status=self.status)


@pytest.fixture
async def cluster() -> AsyncIterator[RunningCluster]:
    running = await start_cluster("shared-test")
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def api(cluster: RunningCluster) -> AsyncIterator[ApiClient]:
    client = await client_from_kubeconfig(cluster.kubeconfig)
    try:
        yield client
    finally:
        await client.close()


async def test_client_from_kubeconfig_talks_to_the_cluster(
    cluster: RunningCluster, api: ApiClient
) -> None:
    namespace = await CoreV1Api(api).read_namespace("kube-system")
    assert namespace.metadata.uid == cluster.kube_system_uid
    with pytest.raises(NotFound), translating():
        await CoreV1Api(api).read_namespace("no-such-namespace")


async def test_a_wrong_token_is_an_operator_problem(cluster: RunningCluster) -> None:
    wrong = cluster.kubeconfig.replace(cluster.token, "not-the-token")
    client = await client_from_kubeconfig(wrong)
    try:
        with pytest.raises(DependencyDown, match="refused our credentials"), translating():
            await CoreV1Api(client).read_namespace("kube-system")
    finally:
        await client.close()


async def test_argo_routes_reach_the_proxied_service(
    cluster: RunningCluster, api: ApiClient
) -> None:
    fake = FakeArgo()
    cluster.store.register_proxy("argo", "argo-server", "2746", fake)
    argo = ArgoServer(api)
    assert await argo.retry("team-a", "wf-1", restart_successful=True, node_field_selector="id=n")
    await argo.set_node(
        "team-a",
        "wf-1",
        node_field_selector="id=wf-1-123",
        phase="Succeeded",
        message="approved",
        output_parameters={"approved": "true"},
    )
    await argo.resume("team-a", "wf-1", node_field_selector="id=wf-1-123")
    await argo.terminate("team-a", "wf-1")
    await argo.lint_template("team-a", {"kind": "WorkflowTemplate"})
    await argo.version()
    assert fake.requests == [
        Recorded(
            "PUT",
            "api/v1/workflows/team-a/wf-1/retry",
            {"restartSuccessful": True, "nodeFieldSelector": "id=n"},
        ),
        Recorded(
            "PUT",
            "api/v1/workflows/team-a/wf-1/set",
            {
                "nodeFieldSelector": "id=wf-1-123",
                "phase": "Succeeded",
                "message": "approved",
                "outputParameters": '{"approved":"true"}',
            },
        ),
        Recorded(
            "PUT", "api/v1/workflows/team-a/wf-1/resume", {"nodeFieldSelector": "id=wf-1-123"}
        ),
        Recorded("PUT", "api/v1/workflows/team-a/wf-1/terminate", {}),
        Recorded(
            "POST",
            "api/v1/workflow-templates/team-a/lint",
            {"namespace": "team-a", "template": {"kind": "WorkflowTemplate"}},
        ),
        Recorded("GET", "api/v1/version", None),
    ]


async def test_data_server_url_selects_the_proxied_service(
    cluster: RunningCluster, api: ApiClient
) -> None:
    fake = FakeArgo(answer={"metadata": {"name": "wf-2"}})
    cluster.store.register_proxy("kubeopera-argo-data", "argo-data-server", "2746", fake)
    argo = ArgoServer.from_url(api, "https://argo-data-server.kubeopera-argo-data.svc:2746")
    answer = await argo.resubmit("tenant-x", "wf-1", memoized=True, parameters={"p": "v"})
    assert answer == {"metadata": {"name": "wf-2"}}
    assert fake.requests == [
        Recorded(
            "PUT",
            "api/v1/workflows/tenant-x/wf-1/resubmit",
            {"memoized": True, "parameters": ["p=v"]},
        )
    ]


async def test_argo_errors_keep_argos_message(cluster: RunningCluster, api: ApiClient) -> None:
    fake = FakeArgo(status=500, answer={"code": 13, "message": "no suspend node matched"})
    cluster.store.register_proxy("argo", "argo-server", "2746", fake)
    argo = ArgoServer(api)
    with pytest.raises(ArgoRefused, match="no suspend node matched"):
        await argo.set_node("ns", "wf", node_field_selector="id=x", phase="Succeeded")
    fake.status, fake.answer = 500, {"code": 2, "message": "spec.entrypoint is required"}
    with pytest.raises(Invalid, match=r"spec\.entrypoint is required"):
        await argo.lint_workflow("ns", {"spec": {}})
    fake.status, fake.answer = 404, {"code": 5, "message": 'workflows "wf" not found'}
    with pytest.raises(NotFound, match="not found"):
        await argo.terminate("ns", "wf")


async def test_no_argo_behind_the_proxy_is_dependency_down(
    cluster: RunningCluster, api: ApiClient
) -> None:
    with pytest.raises(DependencyDown, match="no endpoints available") as caught:
        await ArgoServer(api).version()
    assert caught.value.details["http_status"] == 503


async def test_unreachable_cluster_is_dependency_down(cluster: RunningCluster) -> None:
    client = await client_from_kubeconfig(cluster.kubeconfig)
    try:
        await cluster.stop()
        with pytest.raises(DependencyDown):
            await ArgoServer(client).version()
    finally:
        await client.close()
