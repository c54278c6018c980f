"""Pure decisions of actions, artifact/log location checks and SSE framing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiserver.actions.planning import (
    RetryMode,
    Shutdown,
    argo_server_for,
    check_shutdown,
    controller_labels,
    plan_retry,
    resubmission_labels,
    shutdown_patch,
    template_workflow,
    tenant_of_namespace,
)
from apiserver.artifacts.locate import (
    archived_log_location,
    checked_location,
    find_artifact,
    find_node,
    render_key_format,
)
from apiserver.stream.sse import frame, parse_last_event_id
from shared.errors import Conflict, DependencyDown, Forbidden, Invalid, NotFound


def wf(phase: str, *, uid: str = "u1", completed: bool = False) -> dict[str, Any]:
    labels = {"workflows.argoproj.io/completed": "true"} if completed else {}
    return {"metadata": {"uid": uid, "labels": labels}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("workflow", "template", "mode"),
    [
        (wf("Failed"), "etl", RetryMode.IN_PLACE),
        (wf("Error"), None, RetryMode.IN_PLACE),
        (wf("Succeeded"), "etl", RetryMode.FROM_TEMPLATE),
        (wf("Succeeded"), None, RetryMode.FROM_WORKFLOW),
        (None, "etl", RetryMode.FROM_TEMPLATE),
        (wf("Failed", uid="other"), "etl", RetryMode.FROM_TEMPLATE),
    ],
)
def test_retry_plans(
    workflow: dict[str, Any] | None, template: str | None, mode: RetryMode
) -> None:
    assert plan_retry(workflow, uid="u1", template=template).mode is mode


@pytest.mark.parametrize(
    ("workflow", "template"),
    [(wf("Running"), "etl"), (wf("Pending"), None), (None, None), (wf("Failed", uid="x"), None)],
)
def test_retry_refusals(workflow: dict[str, Any] | None, template: str | None) -> None:
    with pytest.raises(Conflict):
        plan_retry(workflow, uid="u1", template=template)


def test_shutdown_checks() -> None:
    check_shutdown(wf("Running"), uid="u1", action="stop")
    for workflow in (None, wf("Running", uid="x"), wf("Succeeded"), wf("Running", completed=True)):
        with pytest.raises(Conflict):
            check_shutdown(workflow, uid="u1", action="stop")
    assert shutdown_patch(Shutdown.TERMINATE) == {"spec": {"shutdown": "Terminate"}}


def test_template_workflow_and_labels() -> None:
    doc = template_workflow(
        namespace="ns",
        template="etl",
        parameters={"b": "2", "a": "1"},
        cluster_scope=True,
        labels=resubmission_labels(
            {
                "kubeopera.io/pipeline-id": "p",
                "team": "x",
                "workflows.argoproj.io/controller-instanceid": "data",
            },
            original="etl-abc",
        ),
    )
    assert doc["spec"]["workflowTemplateRef"] == {"name": "etl", "clusterScope": True}
    assert doc["spec"]["arguments"]["parameters"] == [
        {"name": "a", "value": "1"},
        {"name": "b", "value": "2"},
    ]
    assert doc["metadata"]["labels"] == {
        "kubeopera.io/pipeline-id": "p",
        "workflows.argoproj.io/controller-instanceid": "data",
        "workflows.argoproj.io/resubmitted-from-workflow": "etl-abc",
    }
    assert "arguments" not in template_workflow(namespace="n", template="t", parameters={})["spec"]


def test_tenant_and_argo_server() -> None:
    assert tenant_of_namespace("kubeopera-data-acme") == "acme"
    assert tenant_of_namespace("kubeopera-serve-acme") == "acme"
    assert tenant_of_namespace("kubeopera-data-") is None
    assert tenant_of_namespace("argo") is None
    url = "https://argo-data-server.kubeopera-argo-data.svc:2746"
    data = argo_server_for(is_host=True, namespace="kubeopera-data-acme", data_server_url=url)
    assert (data.service, data.namespace) == ("argo-data-server", "kubeopera-argo-data")
    other = argo_server_for(is_host=False, namespace="kubeopera-data-acme", data_server_url=url)
    assert (other.service, other.namespace) == ("argo-server", "argo")


@pytest.mark.parametrize(
    ("is_host", "namespace", "labels"),
    [
        (True, "kubeopera-data-acme", {"workflows.argoproj.io/controller-instanceid": "d"}),
        (False, "kubeopera-data-acme", {}),
        (True, "argo", {}),
        (True, "kubeopera-cicd", {}),
    ],
)
def test_a_tenant_run_on_the_host_is_labelled_for_the_data_controller(
    is_host: bool, namespace: str, labels: dict[str, str]
) -> None:
    found = controller_labels(is_host=is_host, namespace=namespace, data_instance_id="d")
    assert found == labels


GRAPH = {
    "nodes": [
        {"id": "n0", "name": "wf", "type": "DAG"},
        {
            "id": "n1",
            "name": "wf.step",
            "type": "Pod",
            "podName": "wf-step-1",
            "outputs": {
                "artifacts": [
                    {
                        "name": "out",
                        "location": {"kind": "s3", "bucket": "b", "key": "ns/wf/o.tgz"},
                    },
                    {"name": "gone", "deleted": True, "location": {"kind": "s3", "key": "ns/x"}},
                ]
            },
        },
    ],
    "artifact_repository": {
        "location": {"kind": "s3", "bucket": "b", "keyFormat": "ns/{{workflow.name}}/{{pod.name}}"}
    },
}


def test_nodes_and_artifacts() -> None:
    assert find_node(GRAPH, "n1")["id"] == "n1"
    assert find_node(GRAPH, "wf-step-1")["id"] == "n1"
    with pytest.raises(NotFound):
        find_node(GRAPH, "n9")
    assert find_artifact(find_node(GRAPH, "n1"), "out")["name"] == "out"
    with pytest.raises(NotFound):
        find_artifact(find_node(GRAPH, "n0"), "out")


@pytest.mark.parametrize(
    ("location", "admin", "error"),
    [
        ({"kind": "s3", "bucket": "b", "key": "ns/wf/o"}, False, None),
        ({"kind": "s3", "key": "ns/wf/o"}, False, None),
        ({"kind": "s3", "bucket": "b", "key": "other/o"}, False, Forbidden),
        ({"kind": "s3", "bucket": "b", "key": "other/o"}, True, None),
        ({"kind": "s3", "bucket": "evil", "key": "ns/o"}, True, Forbidden),
        ({"kind": "s3", "bucket": "b", "key": "ns/../other/o"}, False, NotFound),
        ({"kind": "gcs", "bucket": "b", "key": "ns/o"}, False, NotFound),
        ({"kind": "s3", "bucket": "b"}, False, NotFound),
    ],
)
def test_checked_location(
    location: dict[str, Any], admin: bool, error: type[Exception] | None
) -> None:
    if error is None:
        ref = checked_location(location, namespace="ns", bucket="b", admin=admin)
        assert (ref.bucket, ref.key) == ("b", location["key"])
    else:
        with pytest.raises(error):
            checked_location(location, namespace="ns", bucket="b", admin=admin)
    with pytest.raises(DependencyDown):
        checked_location(location, namespace="ns", bucket=None, admin=admin)


def test_archived_log_location() -> None:
    node = find_node(GRAPH, "n1")
    assert archived_log_location(GRAPH, node, workflow="wf", namespace="ns")["key"] == (
        "ns/wf/wf-step-1/main.log"
    )
    logs = {
        **node,
        "outputs": {
            "artifacts": [
                {"name": "main-logs", "location": {"kind": "s3", "key": "ns/custom/main.log"}}
            ]
        },
    }
    assert archived_log_location(GRAPH, logs, workflow="wf", namespace="ns")["key"] == (
        "ns/custom/main.log"
    )
    assert render_key_format("{{workflow.uid}}/x", workflow="w", namespace="n", pod="p") is None
    with pytest.raises(NotFound):
        archived_log_location({}, node, workflow="wf", namespace="ns")


def test_sse_frames() -> None:
    assert frame(event="run", event_id=7, data={"a": "x\ny"}) == (
        b'id: 7\nevent: run\ndata: {"a":"x\\ny"}\n\n'
    )
    assert frame(event="ready", data=1) == b"event: ready\ndata: 1\n\n"


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_last_event_id_round_trip(seq: int) -> None:
    assert parse_last_event_id(f" {seq} ") == seq


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "٣", str(2**63)])
def test_bad_last_event_ids(value: str) -> None:
    with pytest.raises(Invalid):
        parse_last_event_id(value)


def test_absent_last_event_id() -> None:
    assert parse_last_event_id(None) is None
    assert parse_last_event_id(" ") is None
