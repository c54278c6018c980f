"""watcher.normalise: Argo Workflow documents -> RunRecord.

Fixtures under fixtures/ are realistic Argo documents: node ids follow Argo's NodeID (fnv32a of
the node name), pod names and log keys follow POD_NAME_FORMAT v2, artifact repository refs and
output artifacts have the shape the controller writes.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import gzip
import json
import marshal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.errors import Invalid
from shared.runs import ClusterRef, RunPhase, RunRecord, RunSource
from watcher import graph
from watcher.normalise import (
    MAX_GRAPH_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_PARAMETER_BYTES,
    TRUNCATION_MARKER,
    normalise,
    parse_progress,
    parse_timestamp,
    pod_name,
    resource_version_of,
    source_of,
    tenant_of_namespace,
    workflow_key,
)

FIXTURES = Path(__file__).parent / "fixtures"
CLUSTER = ClusterRef(id="c-eu1", name="eu-prod-1", region="eu-north-1", provider="aws")


def load(name: str) -> dict[str, Any]:
    with (FIXTURES / f"{name}.json").open() as fh:
        document: dict[str, Any] = json.load(fh)
    return document


FIXTURE_NAMES = sorted(path.stem for path in FIXTURES.glob("*.json"))


def at(year: int, month: int, day: int, hour: int, minute: int, second: float = 0) -> datetime:
    whole = int(second)
    micro = round((second - whole) * 1_000_000)
    return datetime(year, month, day, hour, minute, whole, micro, tzinfo=UTC)


def graph_nodes(record: RunRecord) -> list[dict[str, Any]]:
    nodes = record.graph["nodes"]
    assert isinstance(nodes, list)
    assert all(isinstance(node, dict) for node in nodes)
    return [node for node in nodes if isinstance(node, dict)]


def nodes_by_name(record: RunRecord) -> dict[str, dict[str, Any]]:
    return {node["displayName"]: node for node in graph_nodes(record)}


# --- every field of every fixture --------------------------------------------------------------

EXPECTED: dict[str, dict[str, Any]] = {
    "running_dag_artifacts": {
        "namespace": "kubeopera-data-acme",
        "name": "daily-sales-agg-7x2kq",
        "uid": "0c1f6d0e-5d7a-4e55-9a43-6c2f0e3e8a11",
        "resource_version": 48213377,
        "tenant": "acme",
        "source": RunSource.PIPELINE,
        "phase": RunPhase.RUNNING,
        "message": None,
        "progress_done": 2,
        "progress_total": 4,
        "created_at": at(2025, 3, 14, 6, 0, 2),
        "started_at": at(2025, 3, 14, 6, 0, 3),
        "finished_at": None,
        "duration_seconds": None,
        "estimated_duration_seconds": 412,
        # Template defaults (region) and unquoted numbers (shards) come from the stored spec.
        "parameters": {"date": "2025-03-13", "region": "eu", "shards": "4"},
        "resources_duration": {"cpu": 31, "memory": 17},
        "template": "acme-daily-sales-agg-v7",
        "pipeline_id": "pl-3f9a2c",
        "pipeline_version": "7",
        "cron_workflow": None,
        "graph_truncated": False,
        "node_count": 4,
    },
    "succeeded_steps_template": {
        "namespace": "analytics",
        "name": "etl-report-q9vbn",
        "uid": "a4b2a6f2-29d3-4f0b-8bb1-2f1b7a0b7c55",
        "resource_version": 991204,
        "tenant": None,
        "source": RunSource.TEMPLATE_SUBMIT,
        "phase": RunPhase.SUCCEEDED,
        "message": None,
        "progress_done": 3,
        "progress_total": 3,
        "created_at": at(2025, 2, 1, 10, 15),
        "started_at": at(2025, 2, 1, 10, 15),
        "finished_at": at(2025, 2, 1, 10, 17, 32),
        "duration_seconds": 152.0,
        "estimated_duration_seconds": 150,
        "parameters": {"quarter": "2024Q4", "dry-run": "false"},
        "resources_duration": {"cpu": 96, "memory": 51, "nvidia.com/gpu": 0},
        "template": "etl-report",
        "pipeline_id": None,
        "pipeline_version": None,
        "cron_workflow": None,
        "graph_truncated": False,
        "node_count": 7,
    },
    "failed_retry": {
        "namespace": "ci-builds",
        "name": "build-api-5tlzp",
        "uid": "7d3e2d8e-0d4b-4b8f-9e57-1b0c55e2a9f0",
        "resource_version": 20488120,
        "tenant": None,
        "source": RunSource.CICD,
        "phase": RunPhase.FAILED,
        "message": "child 'build-api-5tlzp-3638928932' failed",
        "progress_done": 2,
        "progress_total": 4,
        "created_at": at(2025, 3, 10, 12, 0),
        "started_at": at(2025, 3, 10, 12, 0),
        "finished_at": at(2025, 3, 10, 12, 4, 30),
        "duration_seconds": 270.0,
        "estimated_duration_seconds": None,
        "parameters": {"git-sha": "9f1c2ab", "push": "true"},
        "resources_duration": {"cpu": 240, "memory": 120},
        "template": None,
        "pipeline_id": None,
        "pipeline_version": None,
        "cron_workflow": None,
        "graph_truncated": False,
        "node_count": 6,
    },
    "cron_run": {
        "namespace": "reports",
        "name": "nightly-etl-1741996800",
        "uid": "c9a1a0f4-6b59-4b7a-8b1e-3d2b9b8f6a20",
        "resource_version": 5512,
        "tenant": None,
        "source": RunSource.SCHEDULE,
        "phase": RunPhase.SUCCEEDED,
        "message": None,
        "progress_done": 1,
        "progress_total": 1,
        "created_at": at(2025, 3, 15, 0, 0),
        "started_at": at(2025, 3, 15, 0, 0),
        "finished_at": at(2025, 3, 15, 0, 2, 5.5),
        "duration_seconds": 125.5,
        "estimated_duration_seconds": 120,
        "parameters": {},
        "resources_duration": {"cpu": 12, "memory": 6},
        "template": "etl",
        "pipeline_id": None,
        "pipeline_version": None,
        "cron_workflow": "nightly-etl",
        "graph_truncated": False,
        "node_count": 1,
    },
    "suspended_ml": {
        "namespace": "kubeopera-data-acme",
        "name": "churn-model-train-h8d2m",
        "uid": "5e8d1c2b-3a4f-4e6d-8c7b-9a0b1c2d3e4f",
        "resource_version": 48219002,
        "tenant": "acme",
        "source": RunSource.ML_PIPELINE,
        "phase": RunPhase.RUNNING,
        "message": None,
        "progress_done": 2,
        "progress_total": 2,
        "created_at": at(2025, 3, 14, 9, 29, 59),
        "started_at": at(2025, 3, 14, 9, 30),
        "finished_at": None,
        "duration_seconds": None,
        "estimated_duration_seconds": None,
        "parameters": {"epochs": "20", "learning-rate": "0.001"},
        "resources_duration": {},
        "template": "acme-churn-model-train-v3",
        "pipeline_id": "pl-ml-77e1",
        "pipeline_version": "3",
        "cron_workflow": None,
        "graph_truncated": False,
        "node_count": 4,
    },
    "pending_no_status": {
        "namespace": "default",
        "name": "hello-world-abcde",
        "uid": "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9",
        "resource_version": 1001,
        "tenant": None,
        "source": RunSource.MANUAL,
        "phase": RunPhase.PENDING,
        "message": None,
        "progress_done": None,
        "progress_total": None,
        "created_at": at(2025, 3, 16, 8, 0),
        "started_at": None,
        "finished_at": None,
        "duration_seconds": None,
        "estimated_duration_seconds": None,
        "parameters": {},
        "resources_duration": {},
        "template": None,
        "pipeline_id": None,
        "pipeline_version": None,
        "cron_workflow": None,
        "graph_truncated": False,
        "node_count": 0,
    },
    "event_triggered": {
        "namespace": "integrations",
        "name": "on-upload-ingest-kw3rt",
        "uid": "9b8a7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d",
        "resource_version": 77120,
        "tenant": None,
        "source": RunSource.EVENT_TRIGGER,
        "phase": RunPhase.RUNNING,
        "message": None,
        "progress_done": 0,
        "progress_total": 1,
        "created_at": at(2025, 3, 16, 7, 45, 12),
        "started_at": at(2025, 3, 16, 7, 45, 12),
        "finished_at": None,
        "duration_seconds": None,
        "estimated_duration_seconds": None,
        "parameters": {"object-key": "incoming/2025/03/16/batch-17.csv"},
        "resources_duration": {},
        "template": "ingest",
        "pipeline_id": None,
        "pipeline_version": None,
        "cron_workflow": None,
        "graph_truncated": False,
        "node_count": 3,
    },
}


def test_every_fixture_has_expectations() -> None:
    assert sorted(EXPECTED) == FIXTURE_NAMES


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_fixture_fields(fixture: str) -> None:
    document = load(fixture)
    record = normalise(document, CLUSTER)

    expected = EXPECTED[fixture]
    actual = {field: getattr(record, field) for field in expected}
    assert actual == expected
    assert (record.cluster_id, record.cluster_name, record.region, record.provider) == (
        "c-eu1",
        "eu-prod-1",
        "eu-north-1",
        "aws",
    )
    assert record.labels == document["metadata"].get("labels", {})
    assert record.graph["node_count"] == record.node_count
    assert record.graph["truncated"] is record.graph_truncated
    for stamp in (record.created_at, record.started_at, record.finished_at):
        assert stamp is None or stamp.utcoffset() == timedelta(0)
    # Every field is accounted for by the table or the cluster/labels/graph checks above.
    checked = set(expected) | {"cluster_id", "cluster_name", "region", "provider", "labels"}
    assert {f.name for f in dataclasses.fields(RunRecord)} - checked == {"graph"}


@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_graph_is_json_storable(fixture: str) -> None:
    record = normalise(load(fixture), CLUSTER)
    text = json.dumps(record.graph, allow_nan=False, ensure_ascii=False)
    assert json.loads(text) == record.graph


def test_record_is_immutable_and_independent_of_the_document() -> None:
    document = load("running_dag_artifacts")
    record = normalise(document, CLUSTER)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.phase = RunPhase.FAILED  # type: ignore[misc]
    document["metadata"]["labels"]["kubeopera.io/pipeline-id"] = "changed"
    assert record.labels["kubeopera.io/pipeline-id"] == "pl-3f9a2c"
    assert record.key == ("c-eu1", "kubeopera-data-acme", "daily-sales-agg-7x2kq", record.uid)


# --- the graph of each fixture -----------------------------------------------------------------


def test_running_dag_graph_nodes_artifacts_and_pods() -> None:
    record = normalise(load("running_dag_artifacts"), CLUSTER)
    nodes = nodes_by_name(record)
    root = nodes["daily-sales-agg-7x2kq"]
    extract = nodes["extract"]
    transform = nodes["transform"]

    assert root["type"] == "DAG"
    assert root["children"] == [extract["id"], nodes["extract-refunds"]["id"]]
    assert "podName" not in root
    assert extract["boundaryID"] == root["id"]
    assert extract["startedAt"] == "2025-03-14T06:00:03Z"
    assert extract["finishedAt"] == "2025-03-14T06:01:10Z"
    assert extract["hostNodeName"] == "ip-10-0-12-34.eu-north-1.compute.internal"
    assert extract["inputs"] == {"parameters": [{"name": "date", "value": "2025-03-13"}]}
    # v2 pod name, and it is the pod the controller archived the log under.
    assert extract["podName"] == "daily-sales-agg-7x2kq-extract-3799872794"
    raw, logs = extract["outputs"]["artifacts"]
    assert raw == {
        "name": "raw",
        "path": "/tmp/raw.parquet",
        "location": {
            "kind": "s3",
            # Bucket and endpoint are resolved from the repository Argo froze in status.
            "bucket": "tcr-artifacts",
            "key": "acme/pipelines/daily-sales-agg-7x2kq/"
            "daily-sales-agg-7x2kq-extract-3799872794/raw.tgz",
            "endpoint": "s3.eu-north-1.amazonaws.com",
        },
    }
    assert logs["name"] == "main-logs"
    assert logs["location"]["key"] == (
        f"acme/pipelines/daily-sales-agg-7x2kq/{extract['podName']}/main.log"
    )
    assert extract["outputs"]["exitCode"] == "0"
    refunds = nodes["extract-refunds"]
    assert refunds["outputs"]["parameters"] == [{"name": "rows", "value": "18211"}]
    assert transform["phase"] == "Running"
    assert "finishedAt" not in transform
    assert transform["inputs"]["artifacts"][0]["location"]["bucket"] == "tcr-artifacts"
    assert record.graph["summary"] == {
        "phases": {"Running": 2, "Succeeded": 2},
        "types": {"DAG": 1, "Pod": 3},
    }
    assert record.graph["artifact_repository"] == {
        "configMap": "artifact-repositories",
        "key": "default-v1",
        "namespace": "kubeopera-data-acme",
        "archiveLogs": True,
        "location": {
            "kind": "s3",
            "bucket": "tcr-artifacts",
            "endpoint": "s3.eu-north-1.amazonaws.com",
            "region": "eu-north-1",
            "keyFormat": "acme/pipelines/{{workflow.name}}/{{pod.name}}",
        },
    }
    assert "accessKeySecret" not in json.dumps(record.graph)


def test_steps_graph_template_refs_gcs_and_results() -> None:
    record = normalise(load("succeeded_steps_template"), CLUSTER)
    nodes = nodes_by_name(record)
    fetch = nodes["fetch"]
    assert fetch["templateRef"] == {"name": "etl-lib", "template": "fetch"}
    # No templateName: the pod name prefix uses the templateRef's template.
    assert fetch["podName"].startswith("etl-report-q9vbn-fetch-")
    assert fetch["podName"].rsplit("-", 1)[1] == fetch["id"].rsplit("-", 1)[1]
    assert "podName" not in nodes["[0]"]
    assert nodes["[0]"]["type"] == "StepGroup"
    aggregate = nodes["aggregate"]
    assert aggregate["outputs"]["artifacts"] == [
        {
            "name": "report",
            "path": "/out/report.csv",
            "location": {"kind": "gcs", "bucket": "analytics-reports", "key": "2024Q4/report.csv"},
        }
    ]
    assert aggregate["outputs"]["result"] == "aggregated 1200 rows"
    assert record.graph["summary"] == {
        "phases": {"Succeeded": 7},
        "types": {"Steps": 1, "StepGroup": 3, "Pod": 3},
    }
    assert record.graph["artifact_repository"] == {"default": True}


def test_retry_graph_keeps_attempts_and_v1_pod_names() -> None:
    record = normalise(load("failed_retry"), CLUSTER)
    nodes = nodes_by_name(record)
    retry = nodes["test"]
    assert retry["type"] == "Retry"
    assert retry["phase"] == "Failed"
    assert retry["message"] == "No more retries left"
    attempts = [nodes[f"test({i})"] for i in range(3)]
    assert retry["children"] == [attempt["id"] for attempt in attempts]
    assert [a["phase"] for a in attempts] == ["Failed", "Error", "Failed"]
    assert attempts[2]["message"] == "Error (exit code 2): tests failed"
    # pod-name-format v1: the pod is named after the node id.
    assert all(a["podName"] == a["id"] for a in attempts)
    assert "podName" not in retry
    assert record.graph["summary"] == {
        "phases": {"Failed": 4, "Succeeded": 1, "Error": 1},
        "types": {"DAG": 1, "Pod": 4, "Retry": 1},
    }


def test_suspended_ml_graph_shows_the_waiting_stage() -> None:
    record = normalise(load("suspended_ml"), CLUSTER)
    nodes = nodes_by_name(record)
    gate = nodes["gate"]
    assert (gate["type"], gate["phase"], gate["templateName"]) == (
        "Suspend",
        "Running",
        "kubeopera-gate",
    )
    assert gate["inputs"]["parameters"] == [{"name": "model-version", "value": "12"}]
    assert "podName" not in gate
    register = nodes["register"]
    assert register["outputs"]["parameters"] == [{"name": "model-version", "value": "12"}]
    model = nodes["train"]["outputs"]["artifacts"][0]
    assert model["location"] == {
        "kind": "s3",
        "bucket": "tcr-artifacts",
        "key": "acme/ml/churn-model-train-h8d2m/model.tgz",
        "endpoint": "s3.eu-north-1.amazonaws.com",
    }


def test_pending_run_without_status_has_an_empty_graph() -> None:
    record = normalise(load("pending_no_status"), CLUSTER)
    assert record.graph["nodes"] == []
    assert record.graph["summary"] == {"phases": {}, "types": {}}
    assert record.graph["artifact_repository"] is None


def test_cron_single_pod_workflow_pod_is_the_workflow() -> None:
    record = normalise(load("cron_run"), CLUSTER)
    (node,) = graph_nodes(record)
    assert node["podName"] == "nightly-etl-1741996800"


# --- pod names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # Argo's own test vector: two-artgc-8tcvt's log key holds this pod name.
        (
            {
                "workflow_name": "two-artgc-8tcvt",
                "node_id": "two-artgc-8tcvt-802059674",
                "node_name": "two-artgc-8tcvt[0].call-first",
                "node_type": "Pod",
                "template_name": "first",
                "name_format": "v2",
            },
            "two-artgc-8tcvt-first-802059674",
        ),
        (
            {
                "workflow_name": "wf",
                "node_id": "wf-1335831723",
                "node_name": "hello",
                "node_type": "Pod",
                "template_name": None,
                "name_format": None,
            },
            "wf-1335831723",
        ),
        (
            {
                "workflow_name": "wf",
                "node_id": "wf-123",
                "node_name": "wf.main",
                "node_type": "Pod",
                "template_name": "main",
                "name_format": "v1",
            },
            "wf-123",
        ),
        (
            {
                "workflow_name": "wf",
                "node_id": "wf-9",
                "node_name": "hello.main",
                "node_type": "Container",
                "template_name": "cs",
                "name_format": "v2",
            },
            "wf-cs-1335831723",
        ),
        (
            {
                "workflow_name": "wf",
                "node_id": "wf",
                "node_name": "wf",
                "node_type": "Pod",
                "template_name": "main",
                "name_format": "v2",
            },
            "wf",
        ),
    ],
)
def test_pod_name(kwargs: dict[str, Any], expected: str) -> None:
    assert pod_name(**kwargs) == expected


def test_pod_name_prefix_is_bounded() -> None:
    name = pod_name(
        workflow_name="w" * 200,
        node_id="x",
        node_name="n",
        node_type="Pod",
        template_name="t" * 200,
        name_format=None,
    )
    assert len(name) <= 253


def test_explicit_pod_name_wins() -> None:
    document = load("running_dag_artifacts")
    node = next(iter(document["status"]["nodes"].values()))
    node["type"] = "Pod"
    node["podName"] = "given-pod"
    assert graph_nodes(normalise(document, CLUSTER))[0]["podName"] == "given-pod"


# --- tenant and source rules -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "tenant"),
    [
        ("kubeopera-data-acme", "acme"),
        ("kubeopera-serve-acme", "acme"),
        ("kubeopera-data-a-b-c", "a-b-c"),
        ("kubeopera-data-", None),
        ("kubeopera-serve-", None),
        ("kubeopera-cicd", None),
        ("acme", None),
        ("default", None),
        ("xkubeopera-data-acme", None),
        ("", None),
    ],
)
def test_tenant_of_namespace(namespace: str, tenant: str | None) -> None:
    assert tenant_of_namespace(namespace) == tenant


def test_labels_never_decide_the_tenant() -> None:
    document = load("pending_no_status")
    document["metadata"]["labels"]["kubeopera.io/tenant"] = "acme"
    document["metadata"]["labels"]["tenant"] = "acme"
    assert normalise(document, CLUSTER).tenant is None


DATA_NS = "kubeopera-data-acme"
KIND = "kubeopera.io/pipeline-kind"
CRON = "workflows.argoproj.io/cron-workflow"
WFT = "workflows.argoproj.io/workflow-template"


@pytest.mark.parametrize(
    ("namespace", "labels", "owners", "template_ref", "expected"),
    [
        (DATA_NS, {KIND: "data"}, [], None, RunSource.PIPELINE),
        (DATA_NS, {KIND: "ml"}, [], None, RunSource.ML_PIPELINE),
        # Pipeline kind wins over the schedule and the trigger that started the run.
        (DATA_NS, {KIND: "data", CRON: "nightly"}, [], "t", RunSource.PIPELINE),
        (DATA_NS, {KIND: "ml", "kubeopera.io/trigger": "tr-1"}, [], "t", RunSource.ML_PIPELINE),
        # Outside a data namespace the pipeline-kind label is ignored.
        ("analytics", {KIND: "data"}, [], None, RunSource.MANUAL),
        ("analytics", {KIND: "ml"}, [], "t", RunSource.TEMPLATE_SUBMIT),
        ("kubeopera-serve-acme", {KIND: "ml"}, [], None, RunSource.MANUAL),
        (DATA_NS, {KIND: "other"}, [], "t", RunSource.TEMPLATE_SUBMIT),
        ("reports", {CRON: "nightly", WFT: "etl"}, [], "etl", RunSource.SCHEDULE),
        ("reports", {CRON: ""}, [], None, RunSource.MANUAL),
        ("x", {"kubeopera.io/trigger": "tr-1"}, [], None, RunSource.EVENT_TRIGGER),
        (
            "x",
            {"workflows.argoproj.io/workflow-event-binding": "b"},
            [],
            None,
            RunSource.EVENT_TRIGGER,
        ),
        ("x", {"events.argoproj.io/sensor": "s"}, [], "t", RunSource.EVENT_TRIGGER),
        ("x", {}, ["Sensor"], None, RunSource.EVENT_TRIGGER),
        ("x", {}, ["CronWorkflow"], None, RunSource.MANUAL),
        ("x", {CRON: "c", "kubeopera.io/trigger": "t"}, [], None, RunSource.SCHEDULE),
        ("x", {"kubeopera.io/source": "cicd"}, [], "t", RunSource.CICD),
        ("kubeopera-cicd", {}, [], None, RunSource.CICD),
        ("x", {"workflows.argoproj.io/controller-instanceid": "cicd"}, [], None, RunSource.CICD),
        ("x", {"workflows.argoproj.io/controller-instanceid": "data"}, [], None, RunSource.MANUAL),
        (
            "x",
            {"kubeopera.io/source": "cicd", "kubeopera.io/trigger": "t"},
            [],
            None,
            RunSource.EVENT_TRIGGER,
        ),
        ("x", {"kubeopera.io/source": "other"}, [], None, RunSource.MANUAL),
        ("x", {}, [], "tmpl", RunSource.TEMPLATE_SUBMIT),
        ("x", {WFT: "tmpl"}, [], None, RunSource.TEMPLATE_SUBMIT),
        (
            "x",
            {"workflows.argoproj.io/cluster-workflow-template": "c"},
            [],
            None,
            RunSource.TEMPLATE_SUBMIT,
        ),
        ("x", {}, [], None, RunSource.MANUAL),
    ],
)
def test_source_rules(
    namespace: str,
    labels: dict[str, str],
    owners: list[str],
    template_ref: str | None,
    expected: RunSource,
) -> None:
    assert (
        source_of(namespace=namespace, labels=labels, owner_kinds=owners, template_ref=template_ref)
        == expected
    )


def test_source_and_template_read_from_the_document() -> None:
    document = load("pending_no_status")
    document["metadata"]["labels"]["workflows.argoproj.io/cluster-workflow-template"] = "shared"
    record = normalise(document, CLUSTER)
    assert (record.source, record.template) == (RunSource.TEMPLATE_SUBMIT, "shared")
    document["metadata"]["ownerReferences"] = [{"kind": "Sensor", "name": "s"}]
    assert normalise(document, CLUSTER).source == RunSource.EVENT_TRIGGER


# --- phase, timestamps, progress ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "started", "expected"),
    [
        ("Pending", None, RunPhase.PENDING),
        ("Running", "2025-01-01T00:00:00Z", RunPhase.RUNNING),
        ("Succeeded", "2025-01-01T00:00:00Z", RunPhase.SUCCEEDED),
        ("Failed", "2025-01-01T00:00:00Z", RunPhase.FAILED),
        ("Error", "2025-01-01T00:00:00Z", RunPhase.ERROR),
        (None, None, RunPhase.PENDING),
        ("", None, RunPhase.PENDING),
        ("", "2025-01-01T00:00:00Z", RunPhase.UNKNOWN),
        ("Paused", "2025-01-01T00:00:00Z", RunPhase.UNKNOWN),
        ("Paused", None, RunPhase.PENDING),
        ("running", "2025-01-01T00:00:00Z", RunPhase.UNKNOWN),
        (["Running"], None, RunPhase.PENDING),
        ({"a": 1}, "2025-01-01T00:00:00Z", RunPhase.UNKNOWN),
        ("Running", "not a time", RunPhase.RUNNING),
    ],
)
def test_phase(phase: object, started: str | None, expected: RunPhase) -> None:
    document = load("pending_no_status")
    document["status"] = {"phase": phase, "startedAt": started}
    assert normalise(document, CLUSTER).phase == expected


def test_phase_finished() -> None:
    assert [p for p in RunPhase if p.finished] == [
        RunPhase.SUCCEEDED,
        RunPhase.FAILED,
        RunPhase.ERROR,
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-03-14T06:00:03Z", datetime(2025, 3, 14, 6, 0, 3, tzinfo=UTC)),
        ("2025-03-14t06:00:03z", datetime(2025, 3, 14, 6, 0, 3, tzinfo=UTC)),
        ("2025-03-14T08:00:03+02:00", datetime(2025, 3, 14, 6, 0, 3, tzinfo=UTC)),
        ("2025-03-14T01:30:03-04:30", datetime(2025, 3, 14, 6, 0, 3, tzinfo=UTC)),
        ("2025-03-14T06:00:03.25Z", datetime(2025, 3, 14, 6, 0, 3, 250000, tzinfo=UTC)),
        ("2025-03-14T06:00:03.123456789Z", datetime(2025, 3, 14, 6, 0, 3, 123456, tzinfo=UTC)),
        ("2025-03-14 06:00:03Z", datetime(2025, 3, 14, 6, 0, 3, tzinfo=UTC)),
        # No offset: read as UTC rather than dropped.
        ("2025-03-14T06:00:03", datetime(2025, 3, 14, 6, 0, 3, tzinfo=UTC)),
        ("2025-02-30T00:00:00Z", None),
        ("2025-13-01T00:00:00Z", None),
        ("2025-03-14T25:00:00Z", None),
        ("2025-03-14", None),
        ("20250314T060003Z", None),
        ("2025-03-14T06:00:03+0200", None),
        ("yesterday", None),
        ("", None),
        ("null", None),
        (None, None),
        (1710396003, None),
        (["2025-03-14T06:00:03Z"], None),
        ("٢٠٢٥-03-14T06:00:03Z", None),
    ],
)
def test_parse_timestamp(text: object, expected: datetime | None) -> None:
    parsed = parse_timestamp(text)
    assert parsed == expected
    if parsed is not None:
        assert parsed.tzinfo is UTC


def test_duration_across_offsets_and_clock_skew() -> None:
    document = load("pending_no_status")
    document["status"] = {
        "phase": "Succeeded",
        "startedAt": "2025-03-14T08:00:00+02:00",
        "finishedAt": "2025-03-14T06:00:30.5Z",
    }
    record = normalise(document, CLUSTER)
    assert record.started_at == datetime(2025, 3, 14, 6, 0, tzinfo=UTC)
    assert record.duration_seconds == 30.5
    document["status"]["finishedAt"] = "2025-03-14T05:59:00Z"
    assert normalise(document, CLUSTER).duration_seconds == 0.0
    document["status"]["finishedAt"] = "garbage"
    record = normalise(document, CLUSTER)
    assert (record.finished_at, record.duration_seconds) == (None, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0/0", (0, 0)),
        ("2/4", (2, 4)),
        ("4/4", (4, 4)),
        (" 3/10 ", (3, 10)),
        ("120000/150000", (120000, 150000)),
        (f"0/{2**31 - 1}", (0, 2**31 - 1)),
        (f"0/{2**31}", None),  # beyond the integer column
        ("5/4", None),
        ("abc", None),
        ("1/", None),
        ("/3", None),
        ("1/2/3", None),
        ("-1/2", None),
        ("1.5/2", None),
        ("1 / 2", None),
        ("\u0661/\u0662", None),  # Arabic-Indic digits
        ("1_0/20", None),
        ("9" * 40 + "/" + "9" * 41, None),
        ("", None),
        (None, None),
        (3, None),
        ({"N": 1, "M": 2}, None),
    ],
)
def test_parse_progress(text: object, expected: tuple[int, int] | None) -> None:
    assert parse_progress(text) == expected


def test_progress_on_the_record() -> None:
    document = load("pending_no_status")
    document["status"] = {"progress": "abc"}
    record = normalise(document, CLUSTER)
    assert (record.progress_done, record.progress_total) == (None, None)


# --- identity ----------------------------------------------------------------------------------


def without(document: dict[str, Any], *path: str) -> dict[str, Any]:
    copied = copy.deepcopy(document)
    target = copied
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return copied


def with_value(document: dict[str, Any], value: object, *path: str) -> dict[str, Any]:
    copied = copy.deepcopy(document)
    target = copied
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copied


PENDING = load("pending_no_status")


@pytest.mark.parametrize(
    "document",
    [
        without(PENDING, "metadata"),
        without(PENDING, "metadata", "name"),
        without(PENDING, "metadata", "uid"),
        without(PENDING, "metadata", "resourceVersion"),
        with_value(PENDING, "", "metadata", "name"),
        with_value(PENDING, "", "metadata", "uid"),
        with_value(PENDING, 42, "metadata", "name"),
        with_value(PENDING, None, "metadata", "uid"),
        with_value(PENDING, "abc", "metadata", "resourceVersion"),
        with_value(PENDING, "", "metadata", "resourceVersion"),
        with_value(PENDING, "-5", "metadata", "resourceVersion"),
        with_value(PENDING, "1.5", "metadata", "resourceVersion"),
        with_value(PENDING, " 12", "metadata", "resourceVersion"),
        with_value(PENDING, True, "metadata", "resourceVersion"),
        with_value(PENDING, 1.0, "metadata", "resourceVersion"),
        with_value(PENDING, -1, "metadata", "resourceVersion"),
        with_value(PENDING, "9" * 5000, "metadata", "resourceVersion"),
        with_value(PENDING, str(2**63), "metadata", "resourceVersion"),
        with_value(PENDING, 2**63, "metadata", "resourceVersion"),
        with_value(PENDING, "metadata", "metadata"),
    ],
)
def test_documents_without_identity_are_invalid(document: dict[str, Any]) -> None:
    with pytest.raises(Invalid):
        normalise(document, CLUSTER)


def test_identity_helpers() -> None:
    assert workflow_key(PENDING) == ("default", "hello-world-abcde", PENDING["metadata"]["uid"])
    assert resource_version_of(PENDING) == 1001
    assert resource_version_of(with_value(PENDING, 77, "metadata", "resourceVersion")) == 77
    biggest = with_value(PENDING, str(2**63 - 1), "metadata", "resourceVersion")
    assert resource_version_of(biggest) == 2**63 - 1
    # A namespace is not identity: a Workflow missing one still normalises, under "".
    assert workflow_key(without(PENDING, "metadata", "namespace"))[0] == ""
    with pytest.raises(Invalid):
        workflow_key(without(PENDING, "metadata", "uid"))
    with pytest.raises(Invalid):
        resource_version_of(with_value(PENDING, "x1", "metadata", "resourceVersion"))


# --- degrading instead of crashing -------------------------------------------------------------

DAG = load("running_dag_artifacts")
FIRST_NODE = next(iter(DAG["status"]["nodes"]))


@pytest.mark.parametrize(
    ("path", "value", "check"),
    [
        (("status",), "Running", lambda r: r.phase == RunPhase.PENDING and r.node_count == 0),
        (("status", "nodes"), list(DAG["status"]["nodes"].values()), lambda r: r.node_count == 0),
        (("status", "nodes"), "nodes", lambda r: r.graph["nodes"] == []),
        (("status", "nodes", FIRST_NODE), "x", lambda r: r.node_count == 3),
        (("status", "nodes", FIRST_NODE, "children"), "abc", lambda r: r.node_count == 4),
        (("status", "nodes", FIRST_NODE, "children"), [1, None, {}], lambda r: r.node_count == 4),
        (("status", "nodes", FIRST_NODE, "outputs"), [], lambda r: r.node_count == 4),
        (("status", "nodes", FIRST_NODE, "startedAt"), 5, lambda r: r.node_count == 4),
        (("status", "progress"), "abc", lambda r: r.progress_done is None),
        (("status", "progress"), 7, lambda r: r.progress_total is None),
        (("status", "startedAt"), "soon", lambda r: r.started_at is None),
        (("status", "estimatedDuration"), "412", lambda r: r.estimated_duration_seconds is None),
        (("status", "estimatedDuration"), -3, lambda r: r.estimated_duration_seconds is None),
        (("status", "estimatedDuration"), 2**31, lambda r: r.estimated_duration_seconds is None),
        (("status", "estimatedDuration"), True, lambda r: r.estimated_duration_seconds is None),
        (
            ("status", "resourcesDuration"),
            {"cpu": "31", "gpu": 2, "x": True},
            lambda r: r.resources_duration == {"gpu": 2},
        ),
        (("status", "resourcesDuration"), [1, 2], lambda r: r.resources_duration == {}),
        (("status", "message"), {"m": 1}, lambda r: r.message is None),
        (
            ("status", "artifactRepositoryRef"),
            "default",
            lambda r: r.graph["artifact_repository"] is None,
        ),
        (
            ("status", "storedWorkflowTemplateSpec"),
            [],
            lambda r: r.parameters == {"date": "2025-03-13"},
        ),
        (("spec",), None, lambda r: r.template == "acme-daily-sales-agg-v7"),
        (("spec", "arguments"), {"parameters": {"date": "x"}}, lambda r: "date" in r.parameters),
        (
            ("spec", "workflowTemplateRef"),
            "name",
            lambda r: r.template == "acme-daily-sales-agg-v7",
        ),
        (
            ("metadata", "labels"),
            ["a"],
            lambda r: r.labels == {} and r.source == RunSource.TEMPLATE_SUBMIT,
        ),
        (("metadata", "labels", "kubeopera.io/pipeline-id"), 5, lambda r: r.pipeline_id is None),
        (("metadata", "annotations"), "v1", lambda r: r.node_count == 4),
        (
            ("metadata", "ownerReferences"),
            {"kind": "Sensor"},
            lambda r: r.source == RunSource.PIPELINE,
        ),
        (("metadata", "creationTimestamp"), 0, lambda r: r.created_at is None),
        (("metadata", "namespace"), 7, lambda r: r.namespace == "" and r.tenant is None),
    ],
)
def test_wrong_types_degrade(path: tuple[str, ...], value: object, check: Any) -> None:
    record = normalise(with_value(DAG, value, *path), CLUSTER)
    assert check(record)
    json.dumps(record.graph, allow_nan=False)


def test_parameters_value_default_and_types() -> None:
    document = load("pending_no_status")
    document["spec"]["arguments"] = {
        "parameters": [
            {"name": "a", "value": "x"},
            {"name": "b", "default": "d"},
            {"name": "c", "value": "", "default": "d"},
            {"name": "d", "value": 1.5},
            {"name": "e", "value": False},
            {"name": "f"},
            {"name": "g", "value": {"nested": 1}},
            {"name": "h", "value": None, "default": 3},
            {"value": "nameless"},
            {"name": "", "value": "empty name"},
            "a string",
        ]
    }
    assert normalise(document, CLUSTER).parameters == {
        "a": "x",
        "b": "d",
        "c": "",
        "d": "1.5",
        "e": "false",
        "h": "3",
    }


def test_strings_are_made_storable() -> None:
    document = load("pending_no_status")
    document["spec"]["arguments"] = {"parameters": [{"name": "p", "value": "a\x00b\ud800c"}]}
    document["metadata"]["labels"]["k"] = "v\x00"
    record = normalise(document, CLUSTER)
    assert record.parameters["p"] == "ab?c"
    assert record.labels["k"] == "v"


# --- trimming ----------------------------------------------------------------------------------


def test_long_messages_and_values_are_trimmed_with_a_marker() -> None:
    document = load("failed_retry")
    document["status"]["message"] = "x" * 100_000
    document["spec"]["arguments"]["parameters"][0]["value"] = "é" * 50_000
    node = next(iter(document["status"]["nodes"].values()))
    node["message"] = "m" * 10_000
    node["outputs"] = {
        "parameters": [{"name": "big", "value": "v" * 40_000}],
        "result": "r" * 20_000,
    }
    record = normalise(document, CLUSTER)

    assert record.message is not None
    assert record.message.endswith(TRUNCATION_MARKER)
    assert len(record.message.encode()) <= MAX_MESSAGE_BYTES
    value = record.parameters["git-sha"]
    assert value.endswith(TRUNCATION_MARKER)
    assert len(value.encode()) <= MAX_PARAMETER_BYTES
    assert set(value.removesuffix(TRUNCATION_MARKER)) == {"é"}  # cut on a character boundary
    root = graph_nodes(record)[0]
    assert len(root["message"].encode()) <= MAX_MESSAGE_BYTES
    assert root["outputs"]["parameters"][0]["value"].endswith(TRUNCATION_MARKER)
    assert len(root["outputs"]["result"].encode()) <= MAX_PARAMETER_BYTES


def test_values_at_the_limit_are_kept_whole() -> None:
    document = load("pending_no_status")
    document["status"] = {"message": "é" * (MAX_MESSAGE_BYTES // 2)}
    assert normalise(document, CLUSTER).message == "é" * (MAX_MESSAGE_BYTES // 2)


# --- bounded graphs ----------------------------------------------------------------------------


def huge_workflow(count: int) -> tuple[dict[str, Any], set[str]]:
    """A fan-out DAG of `count` pods: mostly Succeeded, some Failed/Error long ago, some Running."""
    name = "fanout-zz9k1"
    nodes: dict[str, Any] = {}
    failed: set[str] = set()
    base = datetime(2025, 3, 1, tzinfo=UTC)
    children = []
    for index in range(1, count):
        node_id = f"{name}-{index}"
        if index % 997 == 0:
            phase = "Failed" if index % 2 else "Error"
            started = base  # oldest of all: only the failure rule can keep them
            failed.add(node_id)
        elif index % 4999 == 0:
            phase, started = "Running", base + timedelta(seconds=index)
        else:
            phase, started = "Succeeded", base + timedelta(seconds=index)
        stamp = started.isoformat().replace("+00:00", "Z")
        node: dict[str, Any] = {
            "id": node_id,
            "name": f"{name}.process(#{index}:shard-{index})",
            "displayName": f"process(#{index}:shard-{index})",
            "type": "Pod",
            "templateName": "process",
            "templateScope": f"local/{name}",
            "phase": phase,
            "boundaryID": name,
            "startedAt": stamp,
            "finishedAt": None if phase == "Running" else stamp,
            "hostNodeName": f"node-{index % 40}",
            "inputs": {"parameters": [{"name": "shard", "value": str(index)}]},
            "outputs": {
                "artifacts": [{"name": "main-logs", "s3": {"key": f"{name}/p-{index}/main.log"}}],
                "exitCode": "1" if node_id in failed else "0",
            },
        }
        if node_id in failed:
            node["message"] = "Error (exit code 1)"
        nodes[node_id] = node
        children.append(node_id)
    nodes[name] = {
        "id": name,
        "name": name,
        "displayName": name,
        "type": "DAG",
        "templateName": "main",
        "phase": "Failed",
        "startedAt": "2025-03-01T00:00:00Z",
        "children": children,
    }
    document = load("running_dag_artifacts")
    document["metadata"]["name"] = name
    document["status"]["nodes"] = nodes
    return document, failed


@pytest.fixture(scope="module")
def huge() -> tuple[dict[str, Any], set[str], RunRecord]:
    document, failed = huge_workflow(50_000)
    return document, failed, normalise(document, CLUSTER)


def test_huge_graph_is_bounded(huge: tuple[dict[str, Any], set[str], RunRecord]) -> None:
    _, _, record = huge
    nodes = graph_nodes(record)
    assert record.graph_truncated is True
    assert record.graph["truncated"] is True
    assert record.node_count == 50_000
    assert 0 < len(nodes) <= 2000
    assert len(json.dumps(record.graph, separators=(",", ":"))) <= MAX_GRAPH_BYTES


def test_huge_graph_keeps_failures_root_and_summary(
    huge: tuple[dict[str, Any], set[str], RunRecord],
) -> None:
    _, failed, record = huge
    nodes = graph_nodes(record)
    ids = [node["id"] for node in nodes]
    assert ids[0] == "fanout-zz9k1"  # the root first
    assert failed <= set(ids)
    running = {f"fanout-zz9k1-{i}" for i in range(4999, 50_000, 4999) if i % 997}
    assert running <= set(ids)
    # The rest are the most recent nodes.
    assert "fanout-zz9k1-49999" in ids
    assert "fanout-zz9k1-1" not in ids
    assert record.graph["summary"] == {
        "phases": {
            "Succeeded": 49_999 - len(failed) - len(running),
            "Failed": 1 + sum(1 for i in failed if int(i.rsplit("-", 1)[1]) % 2),
            "Error": sum(1 for i in failed if not int(i.rsplit("-", 1)[1]) % 2),
            "Running": len(running),
        },
        "types": {"Pod": 49_999, "DAG": 1},
    }
    # No dangling child references.
    kept = set(ids)
    for node in nodes:
        assert isinstance(node, dict)
        assert set(node.get("children", [])) <= kept


def test_node_limit_is_a_parameter() -> None:
    document, failed = huge_workflow(3000)
    record = normalise(document, CLUSTER, max_graph_nodes=100)
    nodes = graph_nodes(record)
    assert len(nodes) == 100
    assert failed <= {node["id"] for node in nodes if isinstance(node, dict)}
    small = normalise(document, CLUSTER, max_graph_nodes=5000, max_graph_bytes=10_000_000)
    assert small.graph_truncated is False
    assert len(graph_nodes(small)) == 3000


def test_byte_limit_truncates_a_small_but_heavy_graph() -> None:
    document, _ = huge_workflow(300)
    for node in document["status"]["nodes"].values():
        node["message"] = "y" * 3000
    record = normalise(document, CLUSTER, max_graph_bytes=200_000)
    nodes = graph_nodes(record)
    assert record.graph_truncated is True
    assert record.node_count == 300
    assert len(json.dumps(record.graph, separators=(",", ":"))) <= 200_000
    assert nodes[0]["id"] == "fanout-zz9k1"
    untruncated = normalise(document, CLUSTER, max_graph_bytes=10_000_000)
    assert untruncated.graph_truncated is False


def test_graph_with_one_giant_node_stays_under_the_byte_limit() -> None:
    document = load("running_dag_artifacts")
    node = next(iter(document["status"]["nodes"].values()))
    node["inputs"] = {"parameters": [{"name": f"p{i}", "value": "z" * 16_000} for i in range(100)]}
    record = normalise(document, CLUSTER)
    assert record.graph_truncated is True
    assert len(json.dumps(record.graph, separators=(",", ":"))) <= MAX_GRAPH_BYTES
    assert len(graph_nodes(record)) == 3


# --- compressed and offloaded node status ------------------------------------------------------


def test_compressed_nodes_are_read() -> None:
    document = load("failed_retry")
    nodes = document["status"].pop("nodes")
    packed = gzip.compress(json.dumps(nodes).encode())
    document["status"]["compressedNodes"] = base64.b64encode(packed).decode()
    record = normalise(document, CLUSTER)
    assert record.node_count == 6
    assert record.graph["nodes_source"] == "compressedNodes"
    assert nodes_by_name(record)["test(2)"]["phase"] == "Failed"


@pytest.mark.parametrize(
    "payload",
    [
        "not base64!",
        base64.b64encode(b"not gzip").decode(),
        base64.b64encode(gzip.compress(b"[1, 2]")).decode(),
        base64.b64encode(gzip.compress(b"{broken")).decode(),
        # 100 MiB of zeros in ~100 KiB: refused, not inflated.
        base64.b64encode(gzip.compress(b"0" * (100 << 20))).decode(),
    ],
)
def test_unreadable_compressed_nodes(payload: str) -> None:
    document = load("pending_no_status")
    document["status"] = {"phase": "Running", "compressedNodes": payload}
    record = normalise(document, CLUSTER)
    assert (record.node_count, record.graph["nodes_source"]) == (0, "unreadable")


def test_offloaded_nodes_are_marked() -> None:
    document = load("pending_no_status")
    document["status"] = {"phase": "Running", "offloadNodeStatusVersion": "fnv:784242793"}
    record = normalise(document, CLUSTER)
    assert (record.node_count, record.graph["nodes_source"]) == (0, "offloaded")


# --- artifact locations ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("artifact", "location"),
    [
        (
            {"s3": {"bucket": "b", "key": "k"}},
            {"kind": "s3", "bucket": "b", "key": "k", "endpoint": "s3.eu-north-1.amazonaws.com"},
        ),
        (
            {"oss": {"bucket": "b", "key": "k", "endpoint": "e"}},
            {"kind": "oss", "bucket": "b", "key": "k", "endpoint": "e"},
        ),
        (
            {"azure": {"container": "c", "blob": "x/y", "endpoint": "https://a"}},
            {"kind": "azure", "container": "c", "blob": "x/y", "endpoint": "https://a"},
        ),
        (
            {"git": {"repo": "https://user:tok@github.com/o/r.git", "revision": "main"}},
            {"kind": "git", "repo": "https://github.com/o/r.git", "revision": "main"},
        ),
        (
            {"http": {"url": "https://u:p@example.com/f.tgz"}},
            {"kind": "http", "url": "https://example.com/f.tgz"},
        ),
        (
            {"artifactory": {"url": "https://art/x"}},
            {"kind": "artifactory", "url": "https://art/x"},
        ),
        ({"hdfs": {"path": "/d/f"}}, {"kind": "hdfs", "path": "/d/f"}),
        ({"raw": {"data": "secret-ish content"}}, {"kind": "raw"}),
        ({"plugin": {"name": "p", "key": "k"}}, {"kind": "plugin", "name": "p", "key": "k"}),
        ({"s3": "k"}, None),
        ({}, None),
    ],
)
def test_artifact_locations(artifact: dict[str, Any], location: dict[str, Any] | None) -> None:
    document = load("running_dag_artifacts")
    node = next(iter(document["status"]["nodes"].values()))
    node["outputs"] = {"artifacts": [{"name": "a", **artifact}]}
    compact = graph_nodes(normalise(document, CLUSTER))[0]
    assert compact["outputs"]["artifacts"][0].get("location") == location


# --- hypothesis: no document crashes normalise -------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["", "Running", "Failed", "Pod", "2025-01-01T00:00:00Z", "1/2", "v1"])
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def paths(value: object, prefix: tuple[object, ...] = ()) -> Iterator[tuple[object, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


DOCUMENTS = {name: load(name) for name in FIXTURE_NAMES}
PATHS = [(name, path) for name, doc in DOCUMENTS.items() for path in paths(doc) if path]


def check_never_crashes(document: Any) -> None:
    try:
        record = normalise(document, CLUSTER)
    except Invalid:
        return
    assert isinstance(record.phase, RunPhase)
    assert isinstance(record.source, RunSource)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in record.parameters.items())
    text = json.dumps(record.graph, allow_nan=False, ensure_ascii=False)
    text.encode("utf-8")
    assert "\\u0000" not in text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), value=json_values)
def test_any_value_at_any_path_never_crashes(data: st.DataObject, value: object) -> None:
    name, path = data.draw(st.sampled_from(PATHS))
    document = copy.deepcopy(DOCUMENTS[name])
    target: Any = document
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    check_never_crashes(document)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), value=json_values, key=st.text(max_size=12))
def test_extra_keys_anywhere_never_crash(data: st.DataObject, value: object, key: str) -> None:
    name, path = data.draw(st.sampled_from([(n, p) for n, p in PATHS if len(p) < 6]))
    document = copy.deepcopy(DOCUMENTS[name])
    target: Any = document
    for step in path:
        target = target[step]
    if isinstance(target, dict):
        target[key] = value
    check_never_crashes(document)


@settings(max_examples=200, deadline=None)
@given(document=json_values)
def test_arbitrary_documents_never_crash(document: object) -> None:
    check_never_crashes(document)


@settings(max_examples=100, deadline=None)
@given(
    name=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1),
    uid=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1),
    resource_version=st.integers(min_value=0, max_value=2**63 - 1),
    status=st.dictionaries(
        st.sampled_from(["phase", "startedAt", "finishedAt", "progress", "nodes", "message"]),
        json_values,
    ),
)
def test_documents_with_identity_always_normalise(
    name: str, uid: str, resource_version: int, status: dict[str, Any]
) -> None:
    document = {
        "metadata": {"name": name, "uid": uid, "resourceVersion": str(resource_version)},
        "status": status,
    }
    record = normalise(document, CLUSTER)
    assert record.resource_version == resource_version
    assert record.phase in RunPhase


def test_truncation_priority_failed_then_active_then_other_then_recent() -> None:
    document = load("pending_no_status")
    name = document["metadata"]["name"]

    def pod(index: int, phase: str, minute: int) -> dict[str, Any]:
        return {
            "id": f"{name}-{index}",
            "name": f"{name}.p{index}",
            "displayName": f"p{index}",
            "type": "Pod" if phase != "Omitted" else "Skipped",
            "phase": phase,
            "startedAt": f"2025-03-16T08:{minute:02d}:00Z",
        }

    pods = [
        pod(1, "Omitted", 1),
        pod(2, "Running", 2),
        pod(3, "Error", 3),
        *(pod(i, "Succeeded", 10 + i) for i in range(4, 20)),
    ]
    root = {"id": name, "name": name, "displayName": name, "type": "DAG", "phase": "Running"}
    root["children"] = [node["id"] for node in pods]
    nodes: dict[str, Any] = {name: root, **{node["id"]: node for node in pods}}
    nodes["junk"] = "not a node"
    document["status"] = {"phase": "Running", "nodes": nodes}

    def kept(limit: int) -> list[str]:
        record = normalise(document, CLUSTER, max_graph_nodes=limit)
        assert record.graph_truncated is True
        assert record.node_count == 20
        return [node["displayName"] for node in graph_nodes(record)]

    assert kept(3) == [name, "p3", "p2"]
    assert kept(4) == [name, "p3", "p2", "p1"]
    assert kept(6) == [name, "p3", "p2", "p1", "p19", "p18"]
    root_children = graph_nodes(normalise(document, CLUSTER, max_graph_nodes=4))[0]["children"]
    assert root_children == [f"{name}-1", f"{name}-2", f"{name}-3"]
    assert "children" not in graph_nodes(normalise(document, CLUSTER, max_graph_nodes=1))[0]


def test_odd_but_valid_values() -> None:
    document = load("running_dag_artifacts")
    document["status"]["resourcesDuration"] = {"cpu": 2.0, "memory": 2.5}
    document["spec"]["arguments"]["parameters"].append({"name": "huge", "value": 10**5000})
    node = next(iter(document["status"]["nodes"].values()))
    node["templateRef"] = {"name": "lib", "template": "t", "clusterScope": True}
    node["outputs"] = {"artifacts": [{"name": "a", "optional": True, "deleted": True}]}
    record = normalise(document, CLUSTER)
    assert record.resources_duration == {"cpu": 2}
    assert "huge" not in record.parameters
    root = graph_nodes(record)[0]
    assert root["templateRef"] == {"name": "lib", "template": "t", "clusterScope": True}
    assert root["outputs"]["artifacts"] == [{"name": "a", "optional": True, "deleted": True}]


def test_hostile_status_cannot_inflate_the_envelope() -> None:
    document = load("running_dag_artifacts")
    nodes = document["status"]["nodes"]
    for index in range(5000):
        nodes[f"n{index}"] = {"phase": f"Phase{index}" + "x" * 200, "type": f"T{index % 7}"}
    repository = document["status"]["artifactRepositoryRef"]["artifactRepository"]["s3"]
    repository["keyFormat"] = "k" * 100_000
    record = normalise(document, CLUSTER, max_graph_bytes=64_000)
    assert len(json.dumps(record.graph, separators=(",", ":"))) <= 64_000
    summary = record.graph["summary"]
    assert isinstance(summary, dict)
    phases = summary["phases"]
    assert isinstance(phases, dict)
    assert len(phases) == 32
    assert sum(v for v in phases.values() if isinstance(v, int)) == 5004


node_documents = st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.fixed_dictionaries(
        {},
        optional={
            "phase": st.sampled_from(["Succeeded", "Failed", "Error", "Running", "Omitted"]),
            "type": st.sampled_from(["Pod", "DAG", "Steps", "Retry", "Suspend"]),
            "startedAt": st.sampled_from(["2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z", 5]),
            "children": st.lists(st.text(min_size=1, max_size=8), max_size=5),
            "message": st.sampled_from(["", "Error (exit code 1)", "m" * 3000, "é" * 2000]),
            "inputs": json_values,
        },
    ),
    max_size=40,
)


@settings(max_examples=120, deadline=None)
@given(
    nodes=node_documents,
    max_nodes=st.integers(min_value=0, max_value=30),
    max_bytes=st.integers(min_value=4_000, max_value=40_000),
)
def test_graph_bounds_hold_for_any_nodes(
    nodes: dict[str, Any], max_nodes: int, max_bytes: int
) -> None:
    document = load("pending_no_status")
    document["status"] = {"phase": "Running", "nodes": nodes}
    record = normalise(document, CLUSTER, max_graph_nodes=max_nodes, max_graph_bytes=max_bytes)
    kept = graph_nodes(record)
    assert record.node_count == len(nodes)
    assert len(kept) <= max_nodes
    assert len(json.dumps(record.graph, separators=(",", ":"))) <= max_bytes
    assert record.graph_truncated is (len(kept) < len(nodes))
    ids = {node["id"] for node in kept}
    if record.graph_truncated:
        for node in kept:
            assert set(node.get("children", [])) <= ids


# --- the fast paths give what the slow paths give (watcher.graph) ------------------------------

any_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=30)


@settings(max_examples=500, deadline=None)
@given(value=any_text | st.sampled_from(["", "\x00", "a\x00b", "\ud800", "é\x00", "plain-ascii"]))
def test_clean_ascii_fast_path_matches_cleaning(value: str) -> None:
    assert graph.text(value) == (graph.clean(value) or None)
    assert graph.scalar_text(value) == graph.clean(value)


whole_second_timestamps = st.builds(
    "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}Z".format,
    st.integers(0, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 25),
    st.integers(0, 61),
    st.integers(0, 61),
)


@settings(max_examples=500, deadline=None)
@given(value=whole_second_timestamps | st.text(max_size=36) | st.just("2025-03-14T06:00:03z"))
def test_timestamp_fast_path_matches_parsing(value: str) -> None:
    parsed = parse_timestamp(value)
    expected = parsed.isoformat().replace("+00:00", "Z") if parsed is not None else None
    assert graph.timestamp_text(value) == expected


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_timestamps_outside_the_datetime_range_in_utc_read_as_absent(value: str) -> None:
    assert parse_timestamp(value) is None
    document = load("running_dag_artifacts")
    document["status"]["startedAt"] = value
    assert normalise(document, CLUSTER).started_at is None


def reference_fnv32a(text: str) -> int:
    value = 0x811C9DC5
    for byte in text.encode("utf-8", errors="surrogatepass"):
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


@settings(max_examples=300, deadline=None)
@given(workflow=any_text.filter(bool), rest=any_text, template=st.sampled_from([None, "step"]))
def test_pod_name_hashing_after_the_workflow_name_matches_hashing_it_all(
    workflow: str, rest: str, template: str | None
) -> None:
    node_name = workflow + rest
    named = pod_name(
        workflow_name=workflow,
        node_id="id",
        node_name=node_name,
        node_type="Pod",
        template_name=template,
        name_format=None,
    )
    if node_name == workflow:
        assert named == workflow
    else:
        prefix = f"{workflow}-{template}" if template else workflow
        assert named == f"{prefix[:242]}-{reference_fnv32a(node_name)}"


json_trees = st.recursive(
    st.none() | st.booleans() | st.integers() | any_text,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(any_text, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=500, deadline=None)
@given(value=json_trees, shared=any_text)
def test_marshal_size_bounds_the_compact_json_size(value: object, shared: str) -> None:
    # The graph is only serialised when six times its marshal size exceeds the byte budget.
    for candidate in (value, [shared] * 20, {"a": [shared, shared], "b": shared}):
        compact = json.dumps(candidate, separators=(",", ":"))
        assert len(compact) <= 6 * len(marshal.dumps(candidate, 2))


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_byte_budget_is_exact_at_the_boundary(name: str) -> None:
    document = load(name)
    whole = normalise(document, CLUSTER, max_graph_bytes=10_000_000)
    size = len(json.dumps(whole.graph, separators=(",", ":")))
    # The budget counts a comma after every node, the last one too: one byte of slack.
    assert normalise(document, CLUSTER, max_graph_bytes=size + 1) == whole
    if whole.node_count:
        assert normalise(document, CLUSTER, max_graph_bytes=size - 1).graph_truncated
