"""The simulated Argo server through the service proxy: suspend and resume with an output
parameter, retry, resubmit and lint. Time is driven with `argo.step()`."""

from __future__ import annotations

import json

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
    read,
    workflow,
)


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
