"""Argo's names, ids and timestamps. Purely computational, no side effects."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
"""A raw Kubernetes/Argo JSON payload."""

GROUP = "argoproj.io"
VERSION = "v1alpha1"
LABEL_PREFIX = "workflows.argoproj.io/"
LABEL_PHASE = LABEL_PREFIX + "phase"
LABEL_COMPLETED = LABEL_PREFIX + "completed"
LABEL_WORKFLOW = LABEL_PREFIX + "workflow"
LABEL_WORKFLOW_TEMPLATE = LABEL_PREFIX + "workflow-template"
LABEL_ON_EXIT = LABEL_PREFIX + "on-exit"
LABEL_RESUBMITTED_FROM = LABEL_PREFIX + "resubmitted-from-workflow"
LABEL_ARCHIVING_STATUS = LABEL_PREFIX + "workflow-archiving-status"
LABEL_CONTROLLER_INSTANCE_ID = LABEL_PREFIX + "controller-instanceid"
LABEL_CREATORS = tuple(
    LABEL_PREFIX + s for s in ("creator", "creator-email", "creator-preferred-username")
)
ANNOTATION_NODE_ID = LABEL_PREFIX + "node-id"
ANNOTATION_NODE_NAME = LABEL_PREFIX + "node-name"

FULFILLED = frozenset({"Succeeded", "Failed", "Error", "Skipped", "Omitted"})
FAILED = frozenset({"Failed", "Error"})
MAX_NAME_LENGTH = 253
HASH_LENGTH = 10


def fnv32a(text: str) -> int:
    """FNV-1a 32-bit, the hash Argo uses for node ids and pod names."""
    value = 0x811C9DC5
    for byte in text.encode():
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return value


def node_id(workflow_name: str, node_name: str) -> str:
    """The node id Argo derives from a node name (the root node's id is the workflow name)."""
    if node_name == workflow_name:
        return workflow_name
    return f"{workflow_name}-{fnv32a(node_name)}"


def pod_name(workflow_name: str, node_name: str, template_name: str) -> str:
    """Pod name, version v2: `<workflow>-<template>-<fnv32a(node name)>`."""
    if node_name == workflow_name:
        return workflow_name
    prefix = f"{workflow_name}-{template_name}"
    if len(prefix) > MAX_NAME_LENGTH - HASH_LENGTH - 1:
        prefix = prefix[: MAX_NAME_LENGTH - HASH_LENGTH - 1]
    return f"{prefix}-{fnv32a(node_name)}"


def iso(ts: float) -> str:
    """RFC 3339 at second precision, as Kubernetes serialises metav1.Time."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str | None) -> float | None:
    """Inverse of `iso`; None for a missing or unparsable time."""
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def now() -> float:
    return time.time()


def is_completed(workflow: Obj) -> bool:
    labels = workflow.get("metadata", {}).get("labels") or {}
    return bool(labels.get(LABEL_COMPLETED) == "true")


def parse_duration(text: object) -> float | None:
    """A Go-like duration ("30", "30s", "2m", "1h") in seconds; None when unparsable."""
    raw = str(text).strip()
    if not raw:
        return None
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    unit = 1.0
    if raw[-1] in units:
        unit = units[raw[-1]]
        raw = raw[:-1]
    try:
        return float(raw) * unit
    except ValueError:
        return None
