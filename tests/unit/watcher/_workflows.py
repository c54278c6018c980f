"""Argo Workflow documents and readers of RunRecords shared by the watcher.normalise tests.

Fixtures under fixtures/ are realistic Argo documents: node ids follow Argo's NodeID (fnv32a of
the node name), pod names and log keys follow POD_NAME_FORMAT v2, artifact repository refs and
output artifacts have the shape the controller writes.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.runs import ClusterRef, RunRecord

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
