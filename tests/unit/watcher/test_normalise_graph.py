"""watcher.normalise, the execution graph: each fixture's graph, pod names, bounded graphs,
compressed and offloaded node status, artifact locations."""

from __future__ import annotations

import base64
import gzip
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from shared.runs import RunRecord
from tests.unit.watcher._workflows import (
    CLUSTER,
    graph_nodes,
    load,
    nodes_by_name,
)
from watcher.normalise import (
    MAX_GRAPH_BYTES,
    normalise,
    pod_name,
)

# --- the graph of each fixture -----------------------------------------------------------------


def stored_size(record: RunRecord) -> int:
    """The graph's size as the store writes it: compact UTF-8 JSON."""
    return len(orjson.dumps(record.graph))


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
    assert stored_size(record) <= MAX_GRAPH_BYTES


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
    assert stored_size(record) <= 200_000
    assert nodes[0]["id"] == "fanout-zz9k1"
    untruncated = normalise(document, CLUSTER, max_graph_bytes=10_000_000)
    assert untruncated.graph_truncated is False


def test_graph_with_one_giant_node_stays_under_the_byte_limit() -> None:
    document = load("running_dag_artifacts")
    node = next(iter(document["status"]["nodes"].values()))
    node["inputs"] = {"parameters": [{"name": f"p{i}", "value": "z" * 16_000} for i in range(100)]}
    record = normalise(document, CLUSTER)
    assert record.graph_truncated is True
    assert stored_size(record) <= MAX_GRAPH_BYTES
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
