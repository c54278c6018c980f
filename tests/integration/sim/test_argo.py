"""The Argo simulator and Argo server against the real Kubernetes API emulator, through the
real kubernetes-asyncio client and the service proxy. Time is driven with `argo.step()`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import boto3
import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient, Configuration
from moto.server import ThreadedMotoServer

from sim.world import SimCluster, World, start_world

Obj = dict[str, Any]
NS = "default"
PROXY = "api/v1/namespaces/argo/services/argo-server:2746/proxy"


@pytest.fixture
async def world() -> AsyncIterator[World]:
    running = await start_world(1, tick=0.01, autostart=False, pod_gc_delay=0)
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
def host(world: World) -> SimCluster:
    return world.host


async def _client(cluster: SimCluster) -> ApiClient:
    configuration = Configuration()
    await config.load_kube_config_from_dict(
        cluster.running.kubeconfig_dict, client_configuration=configuration
    )
    return ApiClient(configuration)


@pytest.fixture
async def kube(host: SimCluster) -> AsyncIterator[ApiClient]:
    async with await _client(host) as api:
        yield api


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
) -> Obj:
    for _ in range(max_steps):
        await cluster.argo.step()
        wf = await read(kube, name, namespace)
        if until(wf):
            return wf
    raise AssertionError(f"workflow {name} never reached the expected state: {wf.get('status')}")


async def argo(
    cluster: SimCluster, method: str, path: str, body: Obj | None = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {cluster.running.token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        url = f"{cluster.url}/{PROXY}/{path}"
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


def _approval_spec() -> Obj:
    return {
        "entrypoint": "main",
        "templates": [
            {
                "name": "main",
                "dag": {
                    "tasks": [
                        {"name": "approve", "template": "approve"},
                        {
                            "name": "use",
                            "template": "use",
                            "depends": "approve",
                            "arguments": {
                                "parameters": [
                                    {
                                        "name": "answer",
                                        "value": "{{tasks.approve.outputs.parameters.answer}}",
                                    }
                                ]
                            },
                        },
                    ]
                },
            },
            {
                "name": "approve",
                "suspend": {},
                "outputs": {
                    "parameters": [
                        {"name": "answer", "valueFrom": {"supplied": {}}},
                        {"name": "fixed", "value": "x"},
                    ]
                },
            },
            container(
                "use",
                "echo {{inputs.parameters.answer}}",
                inputs={"parameters": [{"name": "answer"}]},
            ),
        ],
    }


async def test_suspend_node_set_then_resume_with_output_parameter(
    host: SimCluster, kube: ApiClient
) -> None:
    name = (await create(kube, workflow(_approval_spec())))["metadata"]["name"]
    waiting = await drive(host, kube, name, lambda wf: bool(wf.get("status", {}).get("nodes")))
    for _ in range(5):
        await host.argo.step()
    waiting = await read(kube, name)
    approve = node_by_display(waiting, "approve")
    assert (approve["type"], approve["phase"], waiting["status"]["phase"]) == (
        "Suspend",
        "Running",
        "Running",
    )
    path = f"api/v1/workflows/{NS}/{name}"

    status, body = await argo(
        host,
        "PUT",
        f"{path}/set",
        {
            "nodeFieldSelector": "displayName=approve",
            "outputParameters": json.dumps({"fixed": "y"}),
        },
    )
    assert status == 500
    assert "does not use valueFrom.raw" in body["message"]
    status, body = await argo(
        host, "PUT", f"{path}/set", {"nodeFieldSelector": "displayName=nope", "message": "m"}
    )
    assert status == 500
    assert body["message"].startswith("currently, set only targets suspend nodes")
    status, body = await argo(
        host, "PUT", f"{path}/set", {"nodeFieldSelector": "x", "phase": "Running"}
    )
    assert (status, body["code"]) == (400, 3)

    selector = f"id={approve['id']}"
    status, body = await argo(
        host,
        "PUT",
        f"{path}/set",
        {"nodeFieldSelector": selector, "outputParameters": json.dumps({"answer": "yes"})},
    )
    assert status == 200
    assert node_by_display(body, "approve")["outputs"]["parameters"][0] == {
        "name": "answer",
        "value": "yes",
    }
    status, body = await argo(host, "PUT", f"{path}/resume", {"nodeFieldSelector": selector})
    assert status == 200
    assert node_by_display(body, "approve")["phase"] == "Succeeded"

    done = await drive(host, kube, name)
    assert done["status"]["phase"] == "Succeeded"
    assert node_by_display(done, "use")["inputs"]["parameters"] == [
        {"name": "answer", "value": "yes"}
    ]


def _switchable_spec() -> Obj:
    return {
        "entrypoint": "main",
        "arguments": {"parameters": [{"name": "fail", "value": "true"}]},
        "templates": [
            {
                "name": "main",
                "dag": {
                    "tasks": [
                        {"name": "ok", "template": "ok"},
                        {"name": "flaky", "template": "flaky", "depends": "ok"},
                    ]
                },
            },
            container("ok"),
            {
                "name": "flaky",
                "container": {
                    "image": "busybox",
                    "env": [{"name": "SIM_FAIL", "value": "{{workflow.parameters.fail}}"}],
                },
            },
        ],
    }


async def test_retry_a_failed_run_through_the_proxy(host: SimCluster, kube: ApiClient) -> None:
    name = (await create(kube, workflow(_switchable_spec())))["metadata"]["name"]
    path = f"api/v1/workflows/{NS}/{name}/retry"
    await drive(host, kube, name, lambda wf: wf.get("status", {}).get("phase") == "Running")
    status, body = await argo(host, "PUT", path, {})
    assert (status, body["code"], body["message"]) == (
        400,
        3,
        "Cannot retry a workflow in phase Running",
    )

    failed = await drive(host, kube, name)
    assert failed["status"]["phase"] == "Failed"
    ok_before = node_by_display(failed, "ok")
    status, body = await argo(host, "PUT", path, {"parameters": ["fail=false"]})
    assert status == 200
    assert body["metadata"]["uid"] == failed["metadata"]["uid"]
    assert "workflows.argoproj.io/completed" not in body["metadata"]["labels"]
    assert body["status"]["phase"] == "Running"
    assert [
        n["displayName"] for n in body["status"]["nodes"].values() if n["phase"] == "Failed"
    ] == []

    done = await drive(host, kube, name)
    assert done["status"]["phase"] == "Succeeded"
    assert node_by_display(done, "ok")["finishedAt"] == ok_before["finishedAt"]  # not re-run

    status, body = await argo(host, "PUT", path, {})
    assert status == 400
    assert (
        body["message"]
        == "To retry a succeeded workflow, set the options restartSuccessful and nodeFieldSelector"
    )
    status, _ = await argo(
        host, "PUT", path, {"restartSuccessful": True, "nodeFieldSelector": "displayName=ok"}
    )
    assert status == 200
    rerun = await drive(host, kube, name)
    assert rerun["status"]["phase"] == "Succeeded"
    assert node_by_display(rerun, "ok")["startedAt"] >= ok_before["startedAt"]

    status, body = await argo(host, "PUT", f"api/v1/workflows/{NS}/missing/retry", {})
    assert (status, body["code"]) == (404, 5)


async def test_resubmit_creates_a_new_labelled_run(host: SimCluster, kube: ApiClient) -> None:
    name = (await create(kube, workflow(_switchable_spec(), name="nightly")))["metadata"]["name"]
    assert (await drive(host, kube, name))["status"]["phase"] == "Failed"
    status, body = await argo(
        host, "PUT", f"api/v1/workflows/{NS}/{name}/resubmit", {"parameters": ["fail=false"]}
    )
    assert status == 200
    new = body["metadata"]["name"]
    assert new.startswith("nightly-")
    assert new != name
    assert (
        body["metadata"]["labels"]["workflows.argoproj.io/resubmitted-from-workflow"] == "nightly"
    )
    assert (await drive(host, kube, new))["status"]["phase"] == "Succeeded"


async def test_lint_routes_answer_like_argo(host: SimCluster) -> None:
    status, body = await argo(host, "GET", "api/v1/version")
    assert status == 200
    assert body["version"].startswith("v3.")
    bad = {"metadata": {"name": "t"}, "spec": {"entrypoint": "nope", "templates": [container("a")]}}
    status, body = await argo(
        host, "POST", f"api/v1/workflow-templates/{NS}/lint", {"namespace": NS, "template": bad}
    )
    assert (status, body["code"], body["message"]) == (
        400,
        3,
        "spec.entrypoint template 'nope' undefined",
    )
    spec = dag_spec()
    spec["templates"][0]["dag"]["tasks"][1]["dependencies"] = ["ghost"]
    status, body = await argo(
        host, "POST", f"api/v1/workflows/{NS}/lint", {"namespace": NS, "workflow": workflow(spec)}
    )
    assert (status, body["message"]) == (
        400,
        "templates.main.tasks.b dependency 'ghost' not defined",
    )
    duplicate = {"entrypoint": "a", "templates": [container("a"), container("a")]}
    status, body = await argo(
        host,
        "POST",
        f"api/v1/workflows/{NS}/lint",
        {"namespace": NS, "workflow": workflow(duplicate)},
    )
    assert (status, body["message"]) == (400, "spec.templates[1].name 'a' is not unique")
    good = workflow(dag_spec())
    status, body = await argo(
        host, "POST", f"api/v1/workflows/{NS}/lint", {"namespace": NS, "workflow": good}
    )
    assert status == 200
    assert body["spec"]["entrypoint"] == "main"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def s3_endpoint() -> Any:
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


async def test_logs_archived_to_s3_before_pod_gc(s3_endpoint: str) -> None:
    world = await start_world(
        1, tick=0.01, autostart=False, pod_gc_delay=0, s3_endpoint=s3_endpoint, bucket="logs"
    )
    try:
        host = world.host
        async with await _client(host) as kube:
            name = (await create(kube, workflow(dag_spec())))["metadata"]["name"]
            done = await drive(host, kube, name)
            a = node_by_display(done, "a")
            pod = f"{name}-a-{a['id'].rsplit('-', 1)[1]}"
            key = f"{name}/{pod}/main.log"
            assert {"name": "main-logs", "s3": {"key": key}} in a["outputs"]["artifacts"]
            assert done["status"]["artifactRepositoryRef"]["default"] is True
            for _ in range(3):
                await host.argo.step()
            pods = await client.CoreV1Api(kube).list_namespaced_pod(NS)
            assert pods.items == []
            s3 = boto3.client(
                "s3",
                endpoint_url=s3_endpoint,
                aws_access_key_id="t",
                aws_secret_access_key="t",
                region_name="us-east-1",
            )
            body = s3.get_object(Bucket="logs", Key=key)["Body"].read().decode()
            assert "step-a" in body
            status, text = await argo(
                host,
                "GET",
                f"api/v1/workflows/{NS}/{name}/log?podName={pod}&logOptions.container=main",
            )
            assert (status, text) == (200, "")
    finally:
        await world.stop()


REPO = Path(__file__).resolve().parents[3]


async def test_python_m_sim_writes_working_kubeconfigs(tmp_path: Path) -> None:
    args = ["-m", "sim", "--clusters", "2", "--state-dir", str(tmp_path), "--tick", "0.05"]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        ready = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        assert ready.startswith(b"sim world ready"), ready
        described = json.loads((tmp_path / "world.json").read_text())
        assert [c["name"] for c in described["clusters"]] == ["host", "cluster-1"]
        assert [c["registered"] for c in described["clusters"]] == [False, True]
        for cluster in described["clusters"]:
            api = await config.new_client_from_config(cluster["kubeconfig"])
            async with api:
                core = client.CoreV1Api(api)
                names = {n.metadata.name for n in (await core.list_namespace()).items}
                assert {"kube-system", "default", "argo"} <= names
                kube_system = await core.read_namespace("kube-system")
                assert kube_system.metadata.uid == cluster["kube_system_uid"]
        registry = described["registry"]
        async with aiohttp.ClientSession() as session:
            url = f"{registry['url']}/internal/v1/clusters"
            headers = {"X-Internal-Key": registry["key"]}
            async with session.get(url, headers=headers) as response:
                assert [c["name"] for c in await response.json()] == ["cluster-1"]
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=10) == 0
