"""The sim host's two Argo controllers, as the spec runs them, through the real client and the
service proxy: the CI/CD controller (no instance ID) and the data controller (instance ID
`kubeopera-data`, Strict template referencing) with its own Argo server. Negatives are proven
by order, not by waiting: a controller has passed over a workflow once it has finished one
created after it."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient

from sim.argo.controller import ArgoSimulator
from sim.world import SimCluster
from tests.integration.sim._argo import DATA_PROXY, argo, container, create, drive, read, workflow

Obj = dict[str, Any]
LABEL = "workflows.argoproj.io/controller-instanceid"
DATA = "kubeopera-data"
TENANT = "kubeopera-data-acme"
REFERENCE_MODE = (
    "workflows must use workflowTemplateRef to be executed when the controller is in reference mode"
)


def inline() -> Obj:
    return {"entrypoint": "main", "templates": [container("main")]}


def labelled(spec: Obj, instance_id: str | None, *, generate: str = "wf-") -> Obj:
    body = workflow(spec, generate=generate)
    if instance_id is not None:
        body["metadata"]["labels"] = {LABEL: instance_id}
    return body


@pytest.fixture
async def tenant(host: SimCluster, kube: ApiClient) -> str:
    """A tenant namespace with a WorkflowTemplate `etl`."""
    await client.CoreV1Api(kube).create_namespace({"metadata": {"name": TENANT}})
    template = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": "etl"},
        "spec": inline(),
    }
    await client.CustomObjectsApi(kube).create_namespaced_custom_object(
        "argoproj.io", "v1alpha1", TENANT, "workflowtemplates", template
    )
    return TENANT


def data_controller(host: SimCluster) -> ArgoSimulator:
    assert host.data_argo is not None
    return host.data_argo


async def pods_of(kube: ApiClient, name: str, namespace: str) -> list[Any]:
    pods = await client.CoreV1Api(kube).list_namespaced_pod(
        namespace, label_selector=f"workflows.argoproj.io/workflow={name}"
    )
    return list(pods.items)


async def name_of(kube: ApiClient, body: Obj, namespace: str) -> str:
    return str((await create(kube, body, namespace))["metadata"]["name"])


async def test_a_tenant_workflow_without_a_template_reference_never_runs_on_the_data_controller(
    host: SimCluster, kube: ApiClient, tenant: str
) -> None:
    refused = await name_of(kube, labelled(inline(), DATA), tenant)
    later = await name_of(kube, labelled(inline(), None), tenant)
    # The CI/CD controller finishes the later workflow and has passed over the labelled one.
    done = await drive(host, kube, later, namespace=tenant)
    assert done["status"]["phase"] == "Succeeded"
    assert "status" not in await read(kube, refused, tenant)
    # The data controller errors it with Argo's message, before any pod.
    errored = await drive(host, kube, refused, namespace=tenant, controller=data_controller(host))
    assert (errored["status"]["phase"], errored["status"]["message"]) == ("Error", REFERENCE_MODE)
    assert await pods_of(kube, refused, tenant) == []
    # Nothing more happens to it, on either controller.
    last = await name_of(kube, labelled({"workflowTemplateRef": {"name": "etl"}}, DATA), tenant)
    await drive(host, kube, last, namespace=tenant, controller=data_controller(host))
    await host.step()
    after = await read(kube, refused, tenant)
    assert after["metadata"]["resourceVersion"] == errored["metadata"]["resourceVersion"]
    assert await pods_of(kube, refused, tenant) == []


async def test_workflows_of_the_cicd_instance_are_never_touched_by_the_data_controller(
    host: SimCluster, kube: ApiClient, tenant: str
) -> None:
    reference = {"workflowTemplateRef": {"name": "etl"}}
    # Valid under Strict, so only the instance ID keeps them off the data controller.
    unlabelled = await name_of(kube, labelled(reference, None), tenant)
    other = await name_of(kube, labelled(reference, "cicd"), tenant)
    ours = await name_of(kube, labelled(reference, DATA), tenant)
    done = await drive(host, kube, ours, namespace=tenant, controller=data_controller(host))
    assert done["status"]["phase"] == "Succeeded"
    assert {p.metadata.labels[LABEL] for p in await pods_of(kube, ours, tenant)} == {DATA}
    for name in (unlabelled, other):
        assert "status" not in await read(kube, name, tenant)
        assert await pods_of(kube, name, tenant) == []
    # The CI/CD controller runs the unlabelled one; a label for another instance is nobody's.
    ran = await drive(host, kube, unlabelled, namespace=tenant)
    assert ran["status"]["phase"] == "Succeeded"
    assert all(LABEL not in p.metadata.labels for p in await pods_of(kube, unlabelled, tenant))
    assert "status" not in await read(kube, other, tenant)


async def test_strict_errors_overrides_beyond_what_argo_lets_a_submitter_set(
    host: SimCluster, kube: ApiClient, tenant: str
) -> None:
    spec = {"workflowTemplateRef": {"name": "etl"}, "serviceAccountName": "argo-admin"}
    name = await name_of(kube, labelled(spec, DATA), tenant)
    errored = await drive(host, kube, name, namespace=tenant, controller=data_controller(host))
    assert errored["status"]["phase"] == "Error"
    assert errored["status"]["message"] == (
        "fields [ServiceAccountName] are not permitted when using workflowTemplateRef with "
        "templateReferencing restriction"
    )
    assert await pods_of(kube, name, tenant) == []


async def test_the_data_argo_server_labels_what_it_creates_and_refuses_other_instances(
    host: SimCluster, kube: ApiClient, tenant: str
) -> None:
    reference = {"workflowTemplateRef": {"name": "etl"}}
    # A submitter's own instance label is replaced by the server's, or removed by the CI/CD one.
    status, mine = await argo(
        host,
        "POST",
        f"api/v1/workflows/{tenant}",
        {"workflow": labelled(reference, "cicd")},
        proxy=DATA_PROXY,
    )
    assert status == 200, mine
    assert mine["metadata"]["labels"][LABEL] == DATA
    status, theirs = await argo(
        host, "POST", f"api/v1/workflows/{tenant}", {"workflow": labelled(inline(), DATA)}
    )
    assert status == 200, theirs
    assert LABEL not in (theirs["metadata"].get("labels") or {})
    status, submitted = await argo(
        host,
        "POST",
        f"api/v1/workflows/{tenant}/submit",
        {"resourceKind": "WorkflowTemplate", "resourceName": "etl"},
        proxy=DATA_PROXY,
    )
    assert status == 200, submitted
    assert submitted["metadata"]["labels"][LABEL] == DATA

    status, listed = await argo(host, "GET", f"api/v1/workflows/{tenant}", proxy=DATA_PROXY)
    assert status == 200
    names = {item["metadata"]["name"] for item in listed["items"]}
    assert names == {mine["metadata"]["name"], submitted["metadata"]["name"]}
    status, listed = await argo(host, "GET", f"api/v1/workflows/{tenant}")
    assert {item["metadata"]["name"] for item in listed["items"]} == {theirs["metadata"]["name"]}

    other = theirs["metadata"]["name"]
    not_managed = {"code": 3, "message": f"'{other}' is not managed by the current Argo Server"}
    for method, path in (
        ("GET", f"api/v1/workflows/{tenant}/{other}"),
        ("PUT", f"api/v1/workflows/{tenant}/{other}/terminate"),
        ("PUT", f"api/v1/workflows/{tenant}/{other}/retry"),
        ("DELETE", f"api/v1/workflows/{tenant}/{other}"),
    ):
        status, answer = await argo(host, method, path, {}, proxy=DATA_PROXY)
        assert (status, answer["code"], answer["message"]) == (400, *not_managed.values())
    assert (await read(kube, other, tenant))["spec"].get("shutdown") is None
    status, _ = await argo(host, "GET", f"api/v1/workflows/{tenant}/{mine['metadata']['name']}")
    assert status == 400
    status, _ = await argo(
        host, "GET", f"api/v1/workflows/{tenant}/{mine['metadata']['name']}", proxy=DATA_PROXY
    )
    assert status == 200
