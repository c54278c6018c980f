"""watcher.normalise on hostile input: wrong types degrade instead of crashing, long values are
trimmed, no document crashes it (hypothesis), and the fast paths give what the slow paths give."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.errors import Invalid
from shared.runs import RunPhase, RunRecord, RunSource
from tests.unit.watcher._workflows import (
    CLUSTER,
    FIXTURE_NAMES,
    graph_nodes,
    load,
    with_value,
)
from watcher import graph
from watcher.normalise import (
    MAX_MESSAGE_BYTES,
    MAX_OBJECT_NAME,
    MAX_PARAMETER_BYTES,
    TRUNCATION_MARKER,
    normalise,
    parse_timestamp,
    pod_name,
)
from watcher.pg_store import record_columns

# --- degrading instead of crashing -------------------------------------------------------------

DAG = load("running_dag_artifacts")
FIRST_NODE = next(iter(DAG["status"]["nodes"]))


def stored_size(record: RunRecord) -> int:
    """The graph's size as the store writes it: compact UTF-8 JSON."""
    return len(orjson.dumps(record.graph))


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
        (
            ("status", "resourcesDuration"),
            {"cpu": 2**63, "memory": -(2**63) - 1, "gpu": 2**63 - 1},
            lambda r: r.resources_duration == {"gpu": 2**63 - 1},
        ),
        (
            ("spec", "workflowTemplateRef", "name"),
            "t" * (MAX_OBJECT_NAME + 1),
            lambda r: r.template == "acme-daily-sales-agg-v7",
        ),
        (
            ("spec", "workflowTemplateRef", "name"),
            "t" * MAX_OBJECT_NAME,
            lambda r: r.template == "t" * MAX_OBJECT_NAME,
        ),
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
    record_columns([record])  # the store can encode every value it would send


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
    assert stored_size(record) <= 64_000
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
    assert stored_size(record) <= max_bytes
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


@settings(max_examples=300, deadline=None)
@given(nodes=node_documents)
def test_the_encoded_graph_is_the_graph(nodes: dict[str, Any]) -> None:
    # The store writes graph_json instead of encoding the graph again: they must be the same.
    document = load("pending_no_status")
    document["status"] = {"phase": "Running", "nodes": nodes}
    record = normalise(document, CLUSTER)
    assert record.graph_json is not None
    assert json.loads(record.graph_json) == record.graph


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_byte_budget_is_exact_at_the_boundary(name: str) -> None:
    document = load(name)
    whole = normalise(document, CLUSTER, max_graph_bytes=10_000_000)
    size = stored_size(whole)
    # The budget counts a comma after every node, the last one too: one byte of slack.
    assert normalise(document, CLUSTER, max_graph_bytes=size + 1) == whole
    if whole.node_count:
        assert normalise(document, CLUSTER, max_graph_bytes=size - 1).graph_truncated
