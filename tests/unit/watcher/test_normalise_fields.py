"""watcher.normalise, record fields: every field of every fixture, tenant and source, phase,
timestamps, progress and identity. Fixtures are described in ``_workflows``."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.errors import Invalid
from shared.runs import RunPhase, RunRecord, RunSource
from tests.unit.watcher._workflows import (
    CLUSTER,
    FIXTURE_NAMES,
    at,
    load,
    with_value,
    without,
)
from watcher.normalise import (
    last_change_at,
    normalise,
    parse_progress,
    parse_timestamp,
    resource_version_of,
    source_of,
    tenant_of_namespace,
    workflow_key,
)

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
    assert {f.name for f in dataclasses.fields(RunRecord)} - checked == {"graph", "graph_json"}
    assert record.graph_json is not None
    assert json.loads(record.graph_json) == record.graph


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
        # What started the run (its schedule, a trigger) wins over the pipeline it runs.
        (DATA_NS, {KIND: "data", CRON: "nightly"}, [], "t", RunSource.SCHEDULE),
        (DATA_NS, {KIND: "ml", CRON: "nightly"}, [], "t", RunSource.SCHEDULE),
        (DATA_NS, {KIND: "ml", "kubeopera.io/trigger": "tr-1"}, [], "t", RunSource.EVENT_TRIGGER),
        (
            DATA_NS,
            {KIND: "data", "events.argoproj.io/sensor": "s"},
            [],
            "t",
            RunSource.EVENT_TRIGGER,
        ),
        (DATA_NS, {KIND: "data"}, ["Sensor"], "t", RunSource.EVENT_TRIGGER),
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


def test_a_scheduled_pipeline_run_keeps_its_pipeline_columns() -> None:
    document = load("pending_no_status")
    document["metadata"]["namespace"] = DATA_NS
    document["metadata"]["labels"].update(
        {KIND: "data", "kubeopera.io/pipeline-id": "abc123", CRON: "p-abc123"}
    )
    record = normalise(document, CLUSTER)
    assert record.source == RunSource.SCHEDULE
    assert (record.pipeline_id, record.cron_workflow) == ("abc123", "p-abc123")
    assert record.labels[KIND] == "data"


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


# --- the time of the last change Argo wrote --------------------------------------------------


def _times_in(document: dict[str, Any]) -> list[datetime]:
    """Every creation, start and end time in a raw Workflow, read independently of watcher."""
    status = document.get("status") or {}
    found = [document["metadata"].get("creationTimestamp")]
    found += [status.get("startedAt"), status.get("finishedAt")]
    for node in (status.get("nodes") or {}).values():
        found += [node.get("startedAt"), node.get("finishedAt")]
    return [datetime.fromisoformat(t.replace("Z", "+00:00")) for t in found if t]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_last_change_is_the_newest_time_argo_wrote(name: str) -> None:
    document = load(name)
    assert last_change_at(normalise(document, CLUSTER)) == max(_times_in(document))


def test_last_change_of_a_running_workflow_is_its_newest_node() -> None:
    document = load("running_dag_artifacts")
    nodes = document["status"]["nodes"]
    last = next(reversed(nodes))
    nodes[last]["startedAt"] = "2031-01-02T03:04:05Z"
    nodes[last].pop("finishedAt", None)
    assert last_change_at(normalise(document, CLUSTER)) == at(2031, 1, 2, 3, 4, 5)


def test_last_change_without_any_time_is_unknown() -> None:
    document = without(load("pending_no_status"), "metadata", "creationTimestamp")
    assert last_change_at(normalise(document, CLUSTER)) is None
