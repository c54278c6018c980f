"""The one reader of an Argo ``Workflow``'s raw JSON, shared by the watcher and stagectl.

Purely computational, no side effects: no I/O, no clock, no logging. The document comes from an
API server and, in its labels, parameters and outputs, from a tenant: it is read defensively,
a field of the wrong type reads as absent (``as_mapping``, ``as_sequence``, ``string``), never
as an exception. The TypedDicts name the raw objects' fields this code reads (every one
optional: nothing is trusted to be there).

Where a workflow's nodes are (``status_nodes``), as Argo's controller writes them:

- ``status.nodes``: the common case;
- ``status.compressedNodes``: a workflow too large for etcd has its nodes as base64 of gzipped
  JSON (Argo's ``packer``); decoded here, bounded (a zip bomb is cheap);
- ``status.offloadNodeStatusVersion``: the nodes live in the Argo controller's own database
  (node status offloading); only the Argo server's ``GET /api/v1/workflows/{ns}/{name}``
  returns them (hydrated). ``offloaded`` says so; a caller that needs the nodes fetches the
  workflow through ``shared.argo.ArgoServer.get`` and reads that document.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Mapping, Sequence
from typing import Final, Literal, TypedDict, TypeGuard, cast

__all__ = [
    "ARRAY_TYPES",
    "EMPTY",
    "MAX_DECOMPRESSED_NODES_BYTES",
    "NodeSource",
    "NodeStatus",
    "ObjectMeta",
    "Workflow",
    "WorkflowStatus",
    "as_mapping",
    "as_sequence",
    "decompress_nodes",
    "is_mapping",
    "metadata_of",
    "nodes_of",
    "offloaded",
    "status_nodes",
    "status_of",
    "string",
]

# status.compressedNodes is gzip+base64; refuse to inflate more than this.
MAX_DECOMPRESSED_NODES_BYTES: Final = 64 << 20
EMPTY: Final[Mapping[str, object]] = {}
# A JSON array: a tuple of types, since isinstance(x, list | tuple) builds the union every time.
ARRAY_TYPES: Final = (list, tuple)

NodeSource = Literal["nodes", "compressedNodes", "offloaded", "unreadable"]


class ObjectMeta(TypedDict, total=False):
    namespace: str
    name: str
    uid: str
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]


class Parameter(TypedDict, total=False):
    name: str
    value: str
    valueFrom: dict[str, object]


class S3Location(TypedDict, total=False):
    bucket: str
    key: str


class ArtifactRef(TypedDict, total=False):
    name: str
    s3: S3Location


class Outputs(TypedDict, total=False):
    parameters: list[Parameter]
    artifacts: list[ArtifactRef]


class NodeStatus(TypedDict, total=False):
    """One entry of ``status.nodes`` (Argo's ``NodeStatus``)."""

    id: str
    name: str
    displayName: str
    type: str  # Pod, Suspend, DAG, Steps, Retry, ...
    templateName: str
    phase: str
    message: str
    startedAt: str
    finishedAt: str
    children: list[str]
    outputs: Outputs


class WorkflowStatus(TypedDict, total=False):
    phase: str
    startedAt: str
    finishedAt: str
    nodes: dict[str, NodeStatus]
    compressedNodes: str
    offloadNodeStatusVersion: str
    storedWorkflowTemplateSpec: dict[str, object]
    artifactRepositoryRef: dict[str, object]


class Workflow(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, object]
    status: WorkflowStatus


def is_mapping(value: object) -> TypeGuard[Mapping[str, object]]:
    """A JSON object; the exact-type test first (isinstance against the ABC is slow)."""
    return type(value) is dict or isinstance(value, Mapping)


def as_mapping(value: object) -> Mapping[str, object]:
    """value if a JSON object, else an empty one."""
    if type(value) is dict:
        return value
    return value if value is not None and isinstance(value, Mapping) else EMPTY


def as_sequence(value: object) -> Sequence[object]:
    """value if a JSON array, else an empty one."""
    return value if isinstance(value, ARRAY_TYPES) else ()


def string(value: object) -> str | None:
    """A non-empty string as it is, else None (no cleaning: the watcher's ``reading.text``
    also makes text storable)."""
    return value if isinstance(value, str) and value else None


def metadata_of(workflow: Mapping[str, object]) -> ObjectMeta:
    return cast(ObjectMeta, as_mapping(workflow.get("metadata")))


def status_of(workflow: Mapping[str, object]) -> WorkflowStatus:
    return cast(WorkflowStatus, as_mapping(workflow.get("status")))


def decompress_nodes(encoded: str) -> Mapping[str, object] | None:
    """``status.compressedNodes`` decoded; None when it is not base64 of gzipped (or zlib)
    JSON of an object, or inflates beyond ``MAX_DECOMPRESSED_NODES_BYTES``."""
    try:
        packed = base64.b64decode(encoded)
        inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header, detected
        inflated = inflater.decompress(packed, MAX_DECOMPRESSED_NODES_BYTES)
        if inflater.unconsumed_tail:
            return None
        decoded = json.loads(inflated)
    except (binascii.Error, zlib.error, ValueError, RecursionError):
        return None
    return decoded if isinstance(decoded, Mapping) else None


def status_nodes(status: Mapping[str, object]) -> tuple[Mapping[str, object], NodeSource]:
    """A status's nodes (raw: each value still to be checked) and where they came from."""
    nodes = status.get("nodes")
    if is_mapping(nodes) and nodes:
        return nodes, "nodes"
    compressed = status.get("compressedNodes")
    if isinstance(compressed, str) and compressed:
        decoded = decompress_nodes(compressed)
        return (decoded, "compressedNodes") if decoded is not None else (EMPTY, "unreadable")
    if string(status.get("offloadNodeStatusVersion")):
        return EMPTY, "offloaded"
    return EMPTY, "nodes"


def nodes_of(workflow: Mapping[str, object]) -> dict[str, NodeStatus]:
    """The workflow's nodes by id, whichever way they are stored in the document (empty for an
    offloaded status: see ``offloaded``); entries that are not objects are left out."""
    nodes, _ = status_nodes(as_mapping(workflow.get("status")))
    return {
        node_id: cast(NodeStatus, node)
        for node_id, node in nodes.items()
        if isinstance(node_id, str) and is_mapping(node)
    }


def offloaded(workflow: Mapping[str, object]) -> bool:
    """Whether the workflow's nodes are only in the Argo controller's database (this document
    has none of them)."""
    return status_nodes(as_mapping(workflow.get("status")))[1] == "offloaded"
