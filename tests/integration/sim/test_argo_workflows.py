"""The Argo simulator runs workflows against the real Kubernetes API emulator: DAGs, failures,
workflow templates, exit handlers on stop and terminate. Time is driven with `argo.step()`."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient

from sim.world import SimCluster
from tests.integration.sim._argo import (
    NS,
    Obj,
    argo,
    container,
    create,
    dag_spec,
    drive,
    node_by_display,
    phase_of,
    workflow,
)


async def test_dag_workflow_runs_to_succeeded(host: SimCluster, kube: ApiClient) -> None:
    name = (await create(kube, workflow(dag_spec())))["metadata"]["name"]
    core = client.CoreV1Api(kube)

    running = await drive(
        host, kube, name, lambda wf: wf.get("status", {}).get("phase") == "Running"
    )
    pods = await core.list_namespaced_pod(
        NS, label_selector=f"workflows.argoproj.io/workflow={name}"
    )
    assert [p.metadata.owner_references[0].name for p in pods.items] == [name]
    assert running["status"]["progress"] == "0/1"

    await drive(host, kube, name, lambda wf: phase_of(wf, "a") == "Succeeded")
    pod_a = next(p for p in (await core.list_namespaced_pod(NS)).items if "-a-" in p.metadata.name)
    assert "step-a" in await core.read_namespaced_pod_log(pod_a.metadata.name, NS, container="main")
    route = f"api/v1/workflows/{NS}/{name}/log?podName={pod_a.metadata.name}"
    status, text = await argo(host, "GET", f"{route}&logOptions.container=main")
    entries = [json.loads(line)["result"] for line in text.splitlines()]
    assert status == 200
    assert {e["podName"] for e in entries} == {pod_a.metadata.name}
    assert any("step-a" in e["content"] for e in entries)

    done = await drive(host, kube, name)
    status = done["status"]
    assert status["phase"] == "Succeeded"
    assert done["metadata"]["labels"]["workflows.argoproj.io/phase"] == "Succeeded"
    assert status["progress"] == "3/3"
    assert status["startedAt"] <= status["finishedAt"]
    assert {k: type(v) for k, v in status["resourcesDuration"].items()} == {
        "cpu": int,
        "memory": int,
    }
    nodes = status["nodes"]
    root = nodes[name]
    assert (root["type"], root["phase"]) == ("DAG", "Succeeded")
    assert [nodes[c]["displayName"] for c in root["children"]] == ["a"]
    a, b, c = (node_by_display(done, x) for x in "abc")
    assert a["children"] == [b["id"], c["id"]]
    assert b["children"] == [c["id"]]
    assert c["inputs"]["parameters"] == [{"name": "msg", "value": "from-args"}]
    assert {n["type"] for n in (a, b, c)} == {"Pod"}
    assert c["boundaryID"] == name
    assert c["outputs"]["exitCode"] == "0"


async def test_failing_step_fails_the_workflow(host: SimCluster, kube: ApiClient) -> None:
    name = (await create(kube, workflow(dag_spec(fail_last=True))))["metadata"]["name"]
    done = await drive(host, kube, name)
    c = node_by_display(done, "c")
    assert done["status"]["phase"] == "Failed"
    assert (c["phase"], c["message"]) == ("Failed", "Error (exit code 1)")
    assert done["status"]["message"] == f"child '{c['id']}' failed"
    assert done["status"]["progress"] == "2/3"


async def _template(kube: ApiClient, name: str, spec: Obj) -> None:
    body = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": name},
        "spec": spec,
    }
    await client.CustomObjectsApi(kube).create_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflowtemplates", body
    )


async def test_workflow_from_template_and_estimated_duration(
    host: SimCluster, kube: ApiClient
) -> None:
    await _template(kube, "etl", dag_spec())
    spec = {
        "workflowTemplateRef": {"name": "etl"},
        "arguments": {"parameters": [{"name": "msg", "value": "override"}]},
    }
    first = await drive(host, kube, (await create(kube, workflow(spec)))["metadata"]["name"])
    assert first["status"]["phase"] == "Succeeded"
    assert first["metadata"]["labels"]["workflows.argoproj.io/workflow-template"] == "etl"
    assert first["status"]["storedWorkflowTemplateSpec"]["entrypoint"] == "main"
    assert node_by_display(first, "c")["inputs"]["parameters"][0]["value"] == "override"
    assert "estimatedDuration" not in first["status"]

    second = await drive(host, kube, (await create(kube, workflow(spec)))["metadata"]["name"])
    assert isinstance(second["status"]["estimatedDuration"], int)


async def test_missing_template_is_an_error(host: SimCluster, kube: ApiClient) -> None:
    spec = {"workflowTemplateRef": {"name": "nowhere"}}
    done = await drive(host, kube, (await create(kube, workflow(spec)))["metadata"]["name"])
    assert done["status"]["phase"] == "Error"
    assert done["status"]["message"] == 'workflowtemplates.argoproj.io "nowhere" not found'


def _long_with_exit_handler() -> Obj:
    return {
        "entrypoint": "main",
        "onExit": "cleanup",
        "templates": [
            {"name": "main", "steps": [[{"name": "long", "template": "long"}]]},
            container("long", ticks=500),
            container("cleanup", "echo cleaning"),
        ],
    }


@pytest.mark.parametrize(
    ("action", "strategy", "exit_handler_runs"),
    [("stop", "Stop", True), ("terminate", "Terminate", False)],
)
async def test_stop_runs_exit_handler_terminate_does_not(
    host: SimCluster, kube: ApiClient, action: str, strategy: str, exit_handler_runs: bool
) -> None:
    name = (await create(kube, workflow(_long_with_exit_handler())))["metadata"]["name"]
    await drive(host, kube, name, lambda wf: phase_of(wf, "long") == "Running")
    status, body = await argo(host, "PUT", f"api/v1/workflows/{NS}/{name}/{action}", {})
    assert status == 200
    assert body["spec"]["shutdown"] == strategy

    done = await drive(host, kube, name)
    message = f"Stopped with strategy '{strategy}'"
    assert (done["status"]["phase"], done["status"]["message"]) == ("Failed", message)
    assert node_by_display(done, "long")["message"] == message
    exit_nodes = [n for n in done["status"]["nodes"].values() if n["name"] == f"{name}.onExit"]
    assert bool(exit_nodes) is exit_handler_runs
    if exit_handler_runs:
        assert exit_nodes[0]["phase"] == "Succeeded"
        pods = await client.CoreV1Api(kube).list_namespaced_pod(
            NS, label_selector="workflows.argoproj.io/on-exit=true"
        )
        assert [p.metadata.labels["workflows.argoproj.io/workflow"] for p in pods.items] == [name]

    status, body = await argo(host, "PUT", f"api/v1/workflows/{NS}/{name}/{action}", {})
    assert status == 500
    assert body["code"] == 13
    assert "completed workflow" in body["message"]
