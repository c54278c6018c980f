"""Workflow documents, a client and drivers shared by the Argo simulator tests: `drive` steps
the simulator until a workflow reaches a state; `argo` calls the Argo server through the
service proxy."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient, Configuration

from sim.argo.controller import ArgoSimulator
from sim.kube.certificates import client_context
from sim.world import SimCluster

Obj = dict[str, Any]
NS = "default"
PROXY = "api/v1/namespaces/argo/services/argo-server:2746/proxy"
# The host's data controller's Argo server (ARGO_DATA_SERVER_URL's default).
DATA_PROXY = "api/v1/namespaces/kubeopera-argo-data/services/argo-data-server:2746/proxy"


async def _client(cluster: SimCluster) -> ApiClient:
    configuration = Configuration()
    await config.load_kube_config_from_dict(
        cluster.running.kubeconfig_dict, client_configuration=configuration
    )
    return ApiClient(configuration)


def container(name: str, script: str = "echo hello", *, ticks: int = 2, **extra: Any) -> Obj:
    env = [{"name": "SIM_DURATION_TICKS", "value": str(ticks)}]
    return {
        "name": name,
        "container": {"image": "busybox", "command": ["sh", "-c"], "args": [script], "env": env},
        **extra,
    }


def workflow(spec: Obj, *, name: str = "", generate: str = "wf-") -> Obj:
    metadata: Obj = {"name": name} if name else {"generateName": generate}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": metadata,
        "spec": spec,
    }


def dag_spec(*, fail_last: bool = False) -> Obj:
    last = "exit 1" if fail_last else "echo {{inputs.parameters.msg}}"
    return {
        "entrypoint": "main",
        "arguments": {"parameters": [{"name": "msg", "value": "from-args"}]},
        "templates": [
            {
                "name": "main",
                "dag": {
                    "tasks": [
                        {"name": "a", "template": "a"},
                        {"name": "b", "template": "b", "dependencies": ["a"]},
                        {
                            "name": "c",
                            "template": "c",
                            "depends": "a && b",
                            "arguments": {
                                "parameters": [
                                    {"name": "msg", "value": "{{workflow.parameters.msg}}"}
                                ]
                            },
                        },
                    ]
                },
            },
            container("a", "echo step-a"),
            container("b"),
            container("c", last, inputs={"parameters": [{"name": "msg"}]}),
        ],
    }


async def create(kube: ApiClient, body: Obj, namespace: str = NS) -> Obj:
    api = client.CustomObjectsApi(kube)
    created: Obj = await api.create_namespaced_custom_object(
        "argoproj.io", "v1alpha1", namespace, "workflows", body
    )
    return created


async def read(kube: ApiClient, name: str, namespace: str = NS) -> Obj:
    api = client.CustomObjectsApi(kube)
    found: Obj = await api.get_namespaced_custom_object(
        "argoproj.io", "v1alpha1", namespace, "workflows", name
    )
    return found


def completed(wf: Obj) -> bool:
    return (wf["metadata"].get("labels") or {}).get("workflows.argoproj.io/completed") == "true"


async def drive(
    cluster: SimCluster,
    kube: ApiClient,
    name: str,
    until: Callable[[Obj], bool] = completed,
    *,
    namespace: str = NS,
    max_steps: int = 60,
    controller: ArgoSimulator | None = None,
) -> Obj:
    """Step `controller` (the cluster's CI/CD one by default) until `until(workflow)`."""
    for _ in range(max_steps):
        await (controller or cluster.argo).step()
        wf = await read(kube, name, namespace)
        if until(wf):
            return wf
    raise AssertionError(f"workflow {name} never reached the expected state: {wf.get('status')}")


async def argo(
    cluster: SimCluster, method: str, path: str, body: Obj | None = None, *, proxy: str = PROXY
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {cluster.running.token}"}
    assert cluster.running.ca is not None
    connector = aiohttp.TCPConnector(ssl=client_context(cluster.running.ca))
    async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
        url = f"{cluster.url}/{proxy}/{path}"
        async with session.request(method, url, json=body) as response:
            text = await response.text()
            try:
                return response.status, json.loads(text)
            except ValueError:
                return response.status, text  # empty, or a stream of JSON lines


def phase_of(wf: Obj, display: str) -> str | None:
    nodes = (wf.get("status") or {}).get("nodes") or {}
    return next((n["phase"] for n in nodes.values() if n["displayName"] == display), None)


def node_by_display(wf: Obj, display: str) -> Obj:
    return next(n for n in wf["status"]["nodes"].values() if n["displayName"] == display)
