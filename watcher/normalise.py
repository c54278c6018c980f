"""Turn an Argo ``Workflow`` document into a ``RunRecord``.

Purely computational, no side effects: no I/O, no clock, no logging. The informer's worker calls
``normalise`` on the latest object for a key and hands the record to the store.

Workflow documents are read defensively. Only a document without an identity (metadata.name,
metadata.uid, a parseable metadata.resourceVersion) is refused, with ``shared.errors.Invalid``;
any other field of the wrong type or shape reads as absent. The execution graph is bounded
(``max_graph_nodes``, ``max_graph_bytes``) so that a workflow with 100k nodes yields a row of a
predictable size. Every rule is explained in ``docs/normalisation.md``.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
import re
import zlib
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TypeGuard
from urllib.parse import urlsplit, urlunsplit

from shared import labels as L
from shared.errors import Invalid
from shared.runs import ClusterRef, JSONObject, JSONValue, RunPhase, RunRecord, RunSource

__all__ = [
    "MAX_GRAPH_BYTES",
    "MAX_GRAPH_NODES",
    "MAX_MESSAGE_BYTES",
    "MAX_PARAMETER_BYTES",
    "TRUNCATION_MARKER",
    "normalise",
    "parse_progress",
    "parse_timestamp",
    "pod_name",
    "resource_version_of",
    "source_of",
    "tenant_of_namespace",
    "workflow_key",
]

MAX_GRAPH_NODES: Final = 2000
MAX_GRAPH_BYTES: Final = 1 << 20
MAX_MESSAGE_BYTES: Final = 4 << 10
MAX_PARAMETER_BYTES: Final = 16 << 10
# status.compressedNodes is gzip+base64; refuse to inflate more than this (a zip bomb is cheap).
MAX_DECOMPRESSED_NODES_BYTES: Final = 64 << 20
TRUNCATION_MARKER: Final = "…[truncated]"

_ARGO_PHASES: Final = frozenset({"Pending", "Running", "Succeeded", "Failed", "Error"})
_FAILED_NODE_PHASES: Final = frozenset({"Failed", "Error"})
_ACTIVE_NODE_PHASES: Final = frozenset({"Running", "Pending"})
_POD_NODE_TYPES: Final = frozenset({"Pod", "Container"})
_LOCATION_KINDS: Final = (
    "s3",
    "gcs",
    "oss",
    "azure",
    "git",
    "http",
    "artifactory",
    "hdfs",
    "raw",
    "plugin",
)
_RFC3339: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})?", re.ASCII
)
_PROGRESS: Final = re.compile(r"(\d{1,18})/(\d{1,18})", re.ASCII)
_RESOURCE_VERSION: Final = re.compile(r"\d{1,19}", re.ASCII)
# Kubernetes names are at most 253 characters; Argo's v2 pod name leaves room for the hash.
_MAX_POD_NAME_PREFIX: Final = 253 - 10 - 1
# Phases and types are a handful of Argo constants; anything beyond is noise, bounded.
_MAX_SUMMARY_KEYS: Final = 32
_MAX_SUMMARY_KEY_BYTES: Final = 64
_MAX_REPOSITORY_FIELD_BYTES: Final = 1024
# Columns are PostgreSQL bigint (resourceVersion) and integer (progress, estimated duration):
# a larger value would fail the whole batch insert, so it reads as absent (or, for the
# resourceVersion, as an invalid document).
_MAX_BIGINT: Final = 2**63 - 1
_MAX_INT: Final = 2**31 - 1
_EMPTY: Final[Mapping[str, object]] = {}
_COMPACT_SEPARATORS: Final = (",", ":")


# --- public helpers ---------------------------------------------------------------------------


def workflow_key(workflow: Mapping[str, Any]) -> tuple[str, str, str]:
    """(namespace, name, uid) of a Workflow; raises Invalid without a name or uid."""
    meta = _mapping(workflow.get("metadata")) if isinstance(workflow, Mapping) else _EMPTY
    name = _text(meta.get("name"))
    uid = _text(meta.get("uid"))
    if name is None or uid is None:
        raise Invalid(
            "workflow without metadata.name or metadata.uid",
            details={"name": name, "uid": uid},
        )
    return _text(meta.get("namespace")) or "", name, uid


def resource_version_of(workflow: Mapping[str, Any]) -> int:
    """metadata.resourceVersion as an int; Invalid unless a decimal in PostgreSQL's bigint."""
    meta = _mapping(workflow.get("metadata")) if isinstance(workflow, Mapping) else _EMPTY
    raw = meta.get("resourceVersion")
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw <= _MAX_BIGINT:
        return raw
    if isinstance(raw, str) and _RESOURCE_VERSION.fullmatch(raw) and int(raw) <= _MAX_BIGINT:
        return int(raw)
    shown = raw if isinstance(raw, str | int | float | bool | None) else type(raw).__name__
    raise Invalid("workflow with an unparseable metadata.resourceVersion", details={"value": shown})


def tenant_of_namespace(namespace: str) -> str | None:
    """The tenant owning a namespace we provision (kubeopera-data-/-serve-<tenant>), else None."""
    for prefix in (L.DATA_NAMESPACE_PREFIX, L.SERVE_NAMESPACE_PREFIX):
        if namespace.startswith(prefix) and len(namespace) > len(prefix):
            return namespace[len(prefix) :]
    return None


def source_of(
    *,
    namespace: str,
    labels: Mapping[str, str],
    owner_kinds: Collection[str] = (),
    template_ref: str | None = None,
) -> RunSource:
    """Where a run came from; the first matching rule wins (docs/normalisation.md)."""
    if namespace.startswith(L.DATA_NAMESPACE_PREFIX):
        kind = labels.get(L.PIPELINE_KIND)
        if kind == L.PIPELINE_KIND_ML:
            return RunSource.ML_PIPELINE
        if kind == L.PIPELINE_KIND_DATA:
            return RunSource.PIPELINE
    if labels.get(L.ARGO_CRON_WORKFLOW):
        return RunSource.SCHEDULE
    if (
        labels.get(L.TRIGGER)
        or labels.get(L.ARGO_WORKFLOW_EVENT_BINDING)
        or labels.get(L.EVENTS_SENSOR)
        or L.SENSOR_KIND in owner_kinds
    ):
        return RunSource.EVENT_TRIGGER
    if (
        labels.get(L.SOURCE) == L.SOURCE_CICD
        or namespace == L.CICD_NAMESPACE
        or labels.get(L.ARGO_CONTROLLER_INSTANCE_ID) == L.CICD_CONTROLLER_INSTANCE_ID
    ):
        return RunSource.CICD
    if (
        template_ref
        or labels.get(L.ARGO_WORKFLOW_TEMPLATE)
        or labels.get(L.ARGO_CLUSTER_WORKFLOW_TEMPLATE)
    ):
        return RunSource.TEMPLATE_SUBMIT
    return RunSource.MANUAL


def parse_timestamp(value: object) -> datetime | None:
    """An RFC 3339 timestamp ('Z' or an offset) as an aware UTC datetime; anything else None."""
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        return None
    text = value.replace("z", "Z").replace("t", "T")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        # Kubernetes always writes an offset; a bare time is read as UTC rather than dropped.
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def parse_progress(value: object) -> tuple[int, int] | None:
    """Argo's "N/M" progress as (N, M); None unless 0 <= N <= M < 2**31."""
    if not isinstance(value, str):
        return None
    match = _PROGRESS.fullmatch(value.strip())
    if match is None:
        return None
    done, total = int(match.group(1)), int(match.group(2))
    return (done, total) if done <= total <= _MAX_INT else None


def pod_name(
    *,
    workflow_name: str,
    node_id: str,
    node_name: str,
    node_type: str | None,
    template_name: str | None,
    name_format: str | None,
) -> str:
    """The pod of a Pod (or containerSet Container) node, as Argo's GeneratePodName names it.

    v1: the node id. v2 (Argo's default since 3.4, and assumed when the workflow carries no
    pod-name-format annotation): ``<workflow>-<template>-<fnv32a(node name)>``.
    """
    if name_format == L.POD_NAME_FORMAT_V1:
        return node_id
    pod_node_name = node_name
    if node_type == "Container" and "." in node_name:
        # A containerSet's container node is "<pod node name>.<container>".
        pod_node_name = node_name.rsplit(".", 1)[0]
    if pod_node_name == workflow_name:
        return workflow_name
    prefix = f"{workflow_name}-{template_name}" if template_name else workflow_name
    return f"{prefix[:_MAX_POD_NAME_PREFIX]}-{_fnv32a(pod_node_name)}"


# --- the record -------------------------------------------------------------------------------


def normalise(
    workflow: Mapping[str, Any],
    cluster: ClusterRef,
    *,
    max_graph_nodes: int = MAX_GRAPH_NODES,
    max_graph_bytes: int = MAX_GRAPH_BYTES,
) -> RunRecord:
    """One Workflow on one cluster as a RunRecord. Raises Invalid only without an identity."""
    namespace, name, uid = workflow_key(workflow)
    resource_version = resource_version_of(workflow)
    meta = _mapping(workflow.get("metadata"))
    spec = _mapping(workflow.get("spec"))
    status = _mapping(workflow.get("status"))

    labels = _string_map(meta.get("labels"))
    annotations = _string_map(meta.get("annotations"))
    template_ref = _text(_mapping(spec.get("workflowTemplateRef")).get("name"))
    owner_kinds = [
        kind
        for ref in _sequence(meta.get("ownerReferences"))
        if (kind := _text(_mapping(ref).get("kind"))) is not None
    ]

    started_at = parse_timestamp(status.get("startedAt"))
    finished_at = parse_timestamp(status.get("finishedAt"))
    duration = None
    if started_at is not None and finished_at is not None:
        duration = max(0.0, (finished_at - started_at).total_seconds())
    progress = parse_progress(status.get("progress"))
    message = _text(status.get("message"))
    estimated = _integer(status.get("estimatedDuration"))

    graph = _graph(
        workflow_name=name,
        status=status,
        pod_name_format=annotations.get(L.ARGO_POD_NAME_FORMAT),
        max_nodes=max_graph_nodes,
        max_bytes=max_graph_bytes,
    )
    return RunRecord(
        cluster_id=cluster.id,
        cluster_name=cluster.name,
        region=cluster.region,
        provider=cluster.provider,
        namespace=namespace,
        name=name,
        uid=uid,
        resource_version=resource_version,
        tenant=tenant_of_namespace(namespace),
        source=source_of(
            namespace=namespace, labels=labels, owner_kinds=owner_kinds, template_ref=template_ref
        ),
        phase=_phase(status.get("phase"), started_at),
        message=_trim(message, MAX_MESSAGE_BYTES) if message else None,
        progress_done=progress[0] if progress else None,
        progress_total=progress[1] if progress else None,
        created_at=parse_timestamp(meta.get("creationTimestamp")),
        started_at=started_at,
        finished_at=finished_at,
        duration_seconds=duration,
        estimated_duration_seconds=(
            estimated if estimated is not None and 0 <= estimated <= _MAX_INT else None
        ),
        parameters=_workflow_parameters(spec, status),
        resources_duration=_resources_duration(status.get("resourcesDuration")),
        template=(
            template_ref
            or labels.get(L.ARGO_WORKFLOW_TEMPLATE)
            or labels.get(L.ARGO_CLUSTER_WORKFLOW_TEMPLATE)
        ),
        pipeline_id=labels.get(L.PIPELINE_ID) or None,
        pipeline_version=labels.get(L.PIPELINE_VERSION) or None,
        cron_workflow=labels.get(L.ARGO_CRON_WORKFLOW) or None,
        labels=labels,
        graph=graph,
        graph_truncated=graph["truncated"] is True,
        node_count=_as_int(graph["node_count"]),
    )


def _phase(raw: object, started_at: datetime | None) -> RunPhase:
    if isinstance(raw, str) and raw in _ARGO_PHASES:
        return RunPhase(raw)
    return RunPhase.PENDING if started_at is None else RunPhase.UNKNOWN


def _workflow_parameters(
    spec: Mapping[str, object], status: Mapping[str, object]
) -> dict[str, str]:
    # With workflowTemplateRef the effective arguments are the template's merged with the
    # submitted ones; Argo freezes that merge in status.storedWorkflowTemplateSpec.
    stored = _mapping(_mapping(status.get("storedWorkflowTemplateSpec")).get("arguments"))
    submitted = _mapping(spec.get("arguments"))
    result: dict[str, str] = {}
    for declared in (stored.get("parameters"), submitted.get("parameters")):
        for item in _sequence(declared):
            parameter = _mapping(item)
            name = _text(parameter.get("name"))
            if name is None:
                continue
            value = _scalar_text(parameter.get("value"))
            if value is None:
                value = _scalar_text(parameter.get("default"))
            if value is not None:
                result[name] = _trim(value, MAX_PARAMETER_BYTES)
    return result


def _resources_duration(raw: object) -> dict[str, int]:
    return {
        _clean(key): value
        for key, item in _mapping(raw).items()
        if isinstance(key, str) and (value := _integer(item)) is not None
    }


# --- the graph --------------------------------------------------------------------------------


class _NodeContext:
    """What compacting a node needs besides the node: fixed per workflow."""

    __slots__ = ("default_locations", "pod_name_format", "workflow_name")

    def __init__(
        self,
        *,
        workflow_name: str,
        pod_name_format: str | None,
        default_locations: Mapping[str, Mapping[str, object]],
    ) -> None:
        self.workflow_name = workflow_name
        self.pod_name_format = pod_name_format
        self.default_locations = default_locations


class _TopK:
    """The k largest (key, id) pairs seen, in O(n log k) time and O(k) memory."""

    __slots__ = ("_heap", "_k")

    def __init__(self, k: int) -> None:
        self._k = k
        self._heap: list[tuple[str, str]] = []

    def offer(self, key: str, node_id: str) -> None:
        if self._k <= 0:
            return
        item = (key, node_id)
        if len(self._heap) < self._k:
            heapq.heappush(self._heap, item)
        elif item > self._heap[0]:
            heapq.heapreplace(self._heap, item)

    def largest_first(self) -> list[str]:
        return [node_id for _, node_id in sorted(self._heap, reverse=True)]


def _graph(
    *,
    workflow_name: str,
    status: Mapping[str, object],
    pod_name_format: str | None,
    max_nodes: int,
    max_bytes: int,
) -> JSONObject:
    nodes, nodes_source = _status_nodes(status)
    repository = _artifact_repository(status.get("artifactRepositoryRef"))
    context = _NodeContext(
        workflow_name=workflow_name,
        pod_name_format=pod_name_format,
        default_locations=_default_locations(status.get("artifactRepositoryRef")),
    )

    # Pass 1: count and summarise every node; nothing is copied.
    count = 0
    by_phase: dict[str, int] = {}
    by_type: dict[str, int] = {}
    for node_id, raw in nodes.items():
        if not isinstance(node_id, str) or not _is_mapping(raw):
            continue
        count += 1
        phase = raw.get("phase")
        kind = raw.get("type")
        # Raw values as keys (cleaned once below); anything but a string counts as Unknown.
        phase = phase if type(phase) is str else ""
        kind = kind if type(kind) is str else ""
        by_phase[phase] = by_phase.get(phase, 0) + 1
        by_type[kind] = by_type.get(kind, 0) + 1
    summary: JSONObject = {"phases": _count_map(by_phase), "types": _count_map(by_type)}

    envelope: JSONObject = {
        "nodes": [],
        "truncated": False,
        "node_count": count,
        "summary": summary,
        "nodes_source": nodes_source,
        "artifact_repository": repository,
    }
    budget = max_bytes - _json_size(envelope)

    compact: list[JSONValue] = []
    # Compacted nodes with their JSON size, reused if the byte budget forces a selection.
    done: dict[str, tuple[JSONObject, int]] = {}
    truncated = count > max_nodes
    if not truncated:
        used = 0
        for node_id, raw in nodes.items():
            if not isinstance(node_id, str) or not _is_mapping(raw):
                continue
            node = _compact_node(node_id, raw, context, keep_children=None)
            size = _json_size(node) + 1
            done[node_id] = (node, size)
            used += size
            compact.append(node)
        truncated = used > budget
    if truncated:
        compact = _bounded_nodes(nodes, context, done, max_nodes=max_nodes, budget=budget)

    envelope["nodes"] = compact
    envelope["truncated"] = truncated
    return envelope


def _bounded_nodes(
    nodes: Mapping[str, object],
    context: _NodeContext,
    done: Mapping[str, tuple[JSONObject, int]],
    *,
    max_nodes: int,
    budget: int,
) -> list[JSONValue]:
    """The nodes worth keeping when not all fit: failures, live leaves, the root, the latest."""
    root_id: str | None = None
    failed, active, other, recent = (_TopK(max_nodes) for _ in range(4))
    # Pass 2: only ids and sort keys are kept, in heaps of at most max_nodes entries each.
    for node_id, raw in nodes.items():
        if not isinstance(node_id, str) or not _is_mapping(raw):
            continue
        if root_id is None and (
            node_id == context.workflow_name or raw.get("name") == context.workflow_name
        ):
            root_id = node_id
        started = raw.get("startedAt")
        finished = raw.get("finishedAt")
        # RFC 3339 in UTC ('Z', as Kubernetes writes it) orders correctly as text.
        recency = max(
            started if type(started) is str else "", finished if type(finished) is str else ""
        )
        recent.offer(recency, node_id)
        phase = raw.get("phase")
        phase = phase if type(phase) is str else ""
        if phase == "Succeeded" or _sequence(raw.get("children")):
            continue
        if phase in _FAILED_NODE_PHASES:
            failed.offer(recency, node_id)
        elif phase in _ACTIVE_NODE_PHASES:
            active.offer(recency, node_id)
        else:
            other.offer(recency, node_id)

    candidates: dict[str, None] = {}
    ordered: list[str] = [root_id] if root_id is not None else []
    for group in (failed, active, other, recent):
        ordered.extend(group.largest_first())
    for node_id in ordered:
        if len(candidates) >= max_nodes:
            break
        candidates.setdefault(node_id, None)

    kept: list[JSONObject] = []
    kept_ids: set[str] = set()
    used = 0
    for node_id in candidates:
        if node_id in done:
            node, size = done[node_id]
        else:
            raw = nodes.get(node_id)
            if not _is_mapping(raw):
                continue
            node = _compact_node(node_id, raw, context, keep_children=candidates)
            size = _json_size(node) + 1
        if used + size > budget:
            continue  # too big to fit: a smaller, later node may still
        used += size
        kept.append(node)
        kept_ids.add(node_id)
    for node in kept:
        children = node.get("children")
        if isinstance(children, list):
            remaining: list[JSONValue] = [child for child in children if child in kept_ids]
            if remaining:
                node["children"] = remaining
            else:
                del node["children"]
    return [node for node in kept]


def _status_nodes(status: Mapping[str, object]) -> tuple[Mapping[str, object], str]:
    nodes = status.get("nodes")
    if isinstance(nodes, Mapping) and nodes:
        return nodes, "nodes"
    compressed = status.get("compressedNodes")
    if isinstance(compressed, str) and compressed:
        decoded = _decompress_nodes(compressed)
        return (decoded, "compressedNodes") if decoded is not None else (_EMPTY, "unreadable")
    if _text(status.get("offloadNodeStatusVersion")):
        # Offloaded to Argo's own database: the controller's persistence, not ours to read.
        return _EMPTY, "offloaded"
    return _EMPTY, "nodes"


def _decompress_nodes(encoded: str) -> Mapping[str, object] | None:
    try:
        packed = base64.b64decode(encoded)
        inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header, detected
        text = inflater.decompress(packed, MAX_DECOMPRESSED_NODES_BYTES)
        if inflater.unconsumed_tail:
            return None
        decoded = json.loads(text)
    except (binascii.Error, zlib.error, ValueError, RecursionError):
        return None
    return decoded if isinstance(decoded, Mapping) else None


def _compact_node(
    node_id: str,
    raw: Mapping[str, object],
    context: _NodeContext,
    *,
    keep_children: Mapping[str, None] | None,
) -> JSONObject:
    name = _text(raw.get("name")) or _clean(node_id)
    kind = _text(raw.get("type"))
    template_name = _text(raw.get("templateName"))
    template_ref = _mapping(raw.get("templateRef"))
    ref_template = _text(template_ref.get("template"))

    node: JSONObject = {
        "id": _text(raw.get("id")) or _clean(node_id),
        "name": name,
        "type": kind,
        "phase": _text(raw.get("phase")),
    }
    _put(node, "displayName", _text(raw.get("displayName")))
    _put(node, "templateName", template_name)
    if template_ref:
        ref: JSONObject = {}
        _put(ref, "name", _text(template_ref.get("name")))
        _put(ref, "template", ref_template)
        if template_ref.get("clusterScope") is True:
            ref["clusterScope"] = True
        _put(node, "templateRef", ref or None)
    _put(node, "startedAt", _timestamp_text(raw.get("startedAt")))
    _put(node, "finishedAt", _timestamp_text(raw.get("finishedAt")))
    message = _text(raw.get("message"))
    _put(node, "message", _trim(message, MAX_MESSAGE_BYTES) if message else None)
    children: list[JSONValue] = [
        _clean(child)
        for child in _sequence(raw.get("children"))
        if isinstance(child, str) and (keep_children is None or child in keep_children)
    ]
    _put(node, "children", children or None)
    _put(node, "boundaryID", _text(raw.get("boundaryID")))
    _put(node, "inputs", _io(raw.get("inputs"), context, outputs=False))
    _put(node, "outputs", _io(raw.get("outputs"), context, outputs=True))
    _put(node, "hostNodeName", _text(raw.get("hostNodeName")))
    explicit_pod = _text(raw.get("podName"))
    if explicit_pod is not None:
        node["podName"] = explicit_pod
    elif kind in _POD_NODE_TYPES:
        node["podName"] = pod_name(
            workflow_name=context.workflow_name,
            node_id=_text(raw.get("id")) or _clean(node_id),
            node_name=name,
            node_type=kind,
            template_name=template_name or ref_template,
            name_format=context.pod_name_format,
        )
    return node


def _io(raw: object, context: _NodeContext, *, outputs: bool) -> JSONObject | None:
    section = _mapping(raw)
    if not section:
        return None
    result: JSONObject = {}
    parameters: list[JSONValue] = []
    for item in _sequence(section.get("parameters")):
        parameter = _mapping(item)
        name = _text(parameter.get("name"))
        if name is None:
            continue
        value = _scalar_text(parameter.get("value"))
        entry: JSONObject = {"name": name}
        if value is not None:
            entry["value"] = _trim(value, MAX_PARAMETER_BYTES)
        parameters.append(entry)
    artifacts: list[JSONValue] = []
    for item in _sequence(section.get("artifacts")):
        artifact = _artifact(_mapping(item), context)
        if artifact is not None:
            artifacts.append(artifact)
    _put(result, "parameters", parameters or None)
    _put(result, "artifacts", artifacts or None)
    if outputs:
        _put(result, "exitCode", _scalar_text(section.get("exitCode")))
        node_result = _text(section.get("result"))
        _put(result, "result", _trim(node_result, MAX_PARAMETER_BYTES) if node_result else None)
    return result or None


def _artifact(raw: Mapping[str, object], context: _NodeContext) -> JSONObject | None:
    name = _text(raw.get("name"))
    if name is None:
        return None
    artifact: JSONObject = {"name": name}
    _put(artifact, "path", _text(raw.get("path")))
    if raw.get("optional") is True:
        artifact["optional"] = True
    if raw.get("deleted") is True:
        artifact["deleted"] = True
    _put(artifact, "location", _location(raw, context.default_locations))
    return artifact


def _location(
    raw: Mapping[str, object], defaults: Mapping[str, Mapping[str, object]]
) -> JSONObject | None:
    """Where an artifact lives; bucket and endpoint fall back to the frozen default repository."""
    for kind in _LOCATION_KINDS:
        place = raw.get(kind)
        if not isinstance(place, Mapping):
            continue
        default = defaults.get(kind, _EMPTY)
        location: JSONObject = {"kind": kind}
        if kind in ("s3", "gcs", "oss"):
            _put(location, "bucket", _text(place.get("bucket")) or _text(default.get("bucket")))
            _put(location, "key", _text(place.get("key")))
            if kind != "gcs":
                endpoint = _text(place.get("endpoint")) or _text(default.get("endpoint"))
                _put(location, "endpoint", endpoint)
        elif kind == "azure":
            container = _text(place.get("container")) or _text(default.get("container"))
            _put(location, "container", container)
            _put(location, "blob", _text(place.get("blob")))
            _put(
                location, "endpoint", _text(place.get("endpoint")) or _text(default.get("endpoint"))
            )
        elif kind == "git":
            _put(location, "repo", _url_without_userinfo(_text(place.get("repo"))))
            _put(location, "revision", _text(place.get("revision")))
        elif kind in ("http", "artifactory"):
            _put(location, "url", _url_without_userinfo(_text(place.get("url"))))
        elif kind == "hdfs":
            _put(location, "path", _text(place.get("path")))
        elif kind == "plugin":
            _put(location, "name", _text(place.get("name")))
            _put(location, "key", _text(place.get("key")))
        # raw: the content is inline in the template; we keep only that it is raw.
        return location
    return None


def _default_locations(raw: object) -> Mapping[str, Mapping[str, object]]:
    repository = _mapping(_mapping(raw).get("artifactRepository"))
    return {
        kind: place
        for kind in _LOCATION_KINDS
        if isinstance(place := repository.get(kind), Mapping)
    }


def _artifact_repository(raw: object) -> JSONObject | None:
    """The resolved repository ref Argo froze in status, without credential references."""
    ref = _mapping(raw)
    if not ref:
        return None
    result: JSONObject = {}
    _put(result, "configMap", _short(ref.get("configMap")))
    _put(result, "key", _short(ref.get("key")))
    _put(result, "namespace", _short(ref.get("namespace")))
    if ref.get("default") is True:
        result["default"] = True
    repository = _mapping(ref.get("artifactRepository"))
    if repository.get("archiveLogs") is True:
        result["archiveLogs"] = True
    for kind in _LOCATION_KINDS:
        place = repository.get(kind)
        if isinstance(place, Mapping):
            location: JSONObject = {"kind": kind}
            for field in ("bucket", "endpoint", "region", "keyFormat", "container"):
                _put(location, field, _short(place.get(field)))
            result["location"] = location
            break
    return result or None


# --- small readers ----------------------------------------------------------------------------


def _mapping(value: object) -> Mapping[str, object]:
    return value if _is_mapping(value) else _EMPTY


def _is_mapping(value: object) -> TypeGuard[Mapping[str, object]]:
    # The exact-type test first: isinstance against the Mapping ABC is slow on 100k nodes.
    return type(value) is dict or isinstance(value, Mapping)


def _count_map(counts: Mapping[str, int]) -> JSONObject:
    """Counts keyed by phase or type: at most _MAX_SUMMARY_KEYS keys, the rest under "Other"."""
    merged: dict[str, int] = {}
    for key, value in counts.items():
        name = _trim(_clean(key), _MAX_SUMMARY_KEY_BYTES) or "Unknown"
        merged[name] = merged.get(name, 0) + value
    if len(merged) <= _MAX_SUMMARY_KEYS:
        return dict(merged)
    ranked = sorted(merged.items(), key=lambda item: item[1], reverse=True)
    result: JSONObject = dict(ranked[: _MAX_SUMMARY_KEYS - 1])
    result["Other"] = sum(value for _, value in ranked[_MAX_SUMMARY_KEYS - 1 :])
    return result


def _sequence(value: object) -> Sequence[object]:
    return value if isinstance(value, list | tuple) else ()


def _text(value: object) -> str | None:
    return (_clean(value) or None) if isinstance(value, str) else None


def _clean(text: str) -> str:
    """text storable in PostgreSQL: no NUL characters, no lone surrogates."""
    if text.isascii():
        return text.replace("\x00", "") if "\x00" in text else text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", errors="replace").decode("utf-8")
    return text.replace("\x00", "")


def _short(value: object) -> str | None:
    text = _text(value)
    return _trim(text, _MAX_REPOSITORY_FIELD_BYTES) if text else None


def _integer(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _as_int(value: JSONValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _scalar_text(value: object) -> str | None:
    """Argo's AnyString: a string, or a number or boolean written without quotes."""
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        try:
            return json.dumps(value)
        except ValueError:  # an int beyond Python's conversion limit
            return None
    return None


def _string_map(value: object) -> dict[str, str]:
    return {
        _clean(key): _clean(item)
        for key, item in _mapping(value).items()
        if isinstance(key, str) and isinstance(item, str)
    }


def _timestamp_text(value: object) -> str | None:
    parsed = parse_timestamp(value)
    return parsed.isoformat().replace("+00:00", "Z") if parsed is not None else None


def _trim(text: str, limit: int) -> str:
    """text cut to at most limit UTF-8 bytes, marked when cut."""
    if len(text) * 4 <= limit:
        return text
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= limit:
        return text
    kept = encoded[: max(0, limit - len(TRUNCATION_MARKER.encode()))]
    return kept.decode("utf-8", errors="ignore") + TRUNCATION_MARKER


def _put(target: JSONObject, key: str, value: JSONValue) -> None:
    if value is not None:
        target[key] = value


def _json_size(value: JSONValue) -> int:
    # ensure_ascii escapes make this an upper bound on the UTF-8 size of the stored JSON.
    return len(json.dumps(value, separators=_COMPACT_SEPARATORS))


def _url_without_userinfo(url: str | None) -> str | None:
    if url is None or "@" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _fnv32a(text: str) -> int:
    value = 0x811C9DC5
    for byte in text.encode("utf-8", errors="surrogatepass"):
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value
