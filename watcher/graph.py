"""The execution graph of an Argo ``Workflow`` as a bounded JSON object (``RunRecord.graph``).

Purely computational, no side effects: no I/O, no clock, no logging. ``watcher.normalise``
calls ``encoded_graph`` with the workflow's status; the rules (compact nodes, artifact
locations, pod names, bounding huge graphs) are in ``docs/normalisation.md``. The defensive
readers both modules use (a field of the wrong type reads as absent; text is made storable in
PostgreSQL) are in ``watcher.reading``. This runs on every watch event: the common case, a
clean ASCII string, costs no extra call.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import orjson

from shared import labels as L
from shared.argo_status import MAX_DECOMPRESSED_NODES_BYTES, status_nodes
from shared.runs import JSONObject, JSONValue
from watcher.reading import (
    ARRAY_TYPES,
    TRUNCATION_MARKER,
    as_mapping,
    as_sequence,
    clean,
    is_mapping,
    parse_timestamp,
    scalar_text,
    text,
    timestamp_text,
    trim,
)

__all__ = [
    "MAX_DECOMPRESSED_NODES_BYTES",
    "MAX_GRAPH_BYTES",
    "MAX_GRAPH_NODES",
    "MAX_MESSAGE_BYTES",
    "MAX_PARAMETER_BYTES",
    "TRUNCATION_MARKER",
    "encoded_graph",
    "parse_timestamp",
    "pod_name",
]

MAX_GRAPH_NODES: Final = 2000
MAX_GRAPH_BYTES: Final = 1 << 20
MAX_MESSAGE_BYTES: Final = 4 << 10
MAX_PARAMETER_BYTES: Final = 16 << 10

_FAILED_NODE_PHASES: Final = frozenset({"Failed", "Error"})
_ACTIVE_NODE_PHASES: Final = frozenset({"Running", "Pending"})
_POD_NODE_TYPES: Final = frozenset({"Pod", "Container"})
# The fields kept of each kind of artifact location: (name, whether the default repository's
# value stands in for a missing one, whether it is a URL, whose user name and password are
# removed). raw keeps none: its content is inline in the template.
_LOCATION_FIELDS: Final[Mapping[str, tuple[tuple[str, bool, bool], ...]]] = {
    "s3": (("bucket", True, False), ("key", False, False), ("endpoint", True, False)),
    "gcs": (("bucket", True, False), ("key", False, False)),
    "oss": (("bucket", True, False), ("key", False, False), ("endpoint", True, False)),
    "azure": (("container", True, False), ("blob", False, False), ("endpoint", True, False)),
    "git": (("repo", False, True), ("revision", False, False)),
    "http": (("url", False, True),),
    "artifactory": (("url", False, True),),
    "hdfs": (("path", False, False),),
    "raw": (),
    "plugin": (("name", False, False), ("key", False, False)),
}
_LOCATION_KINDS: Final = tuple(_LOCATION_FIELDS)
_FNV32_OFFSET_BASIS: Final = 0x811C9DC5
# Kubernetes names are at most 253 characters; Argo's v2 pod name leaves room for the hash.
_MAX_POD_NAME_PREFIX: Final = 253 - 10 - 1
# Phases and types are a handful of Argo constants; anything beyond is noise, bounded.
_MAX_SUMMARY_KEYS: Final = 32
_MAX_SUMMARY_KEY_BYTES: Final = 64
_MAX_REPOSITORY_FIELD_BYTES: Final = 1024
# For what orjson refuses (an integer beyond 64 bits): the same compact UTF-8 JSON.
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


# --- the graph --------------------------------------------------------------------------------


def encoded_graph(
    *,
    workflow_name: str,
    status: Mapping[str, object],
    pod_name_format: str | None,
    max_nodes: int = MAX_GRAPH_NODES,
    max_bytes: int = MAX_GRAPH_BYTES,
) -> tuple[JSONObject, bytes]:
    """The graph of a workflow's status (compact nodes, bounded, with counts over every node)
    and its compact UTF-8 JSON, at most ``max_bytes`` long. The size check needs the encoding
    anyway, so the store is handed it instead of encoding the graph again."""
    nodes, nodes_source = status_nodes(status)
    repository_ref = status.get("artifactRepositoryRef")
    context = _NodeContext(
        workflow_name=workflow_name,
        pod_name_format=pod_name_format,
        default_locations=_default_locations(repository_ref),
    )
    count, summary = _summary(nodes)
    envelope: JSONObject = {
        "nodes": [],
        "truncated": False,
        "node_count": count,
        "summary": summary,
        "nodes_source": nodes_source,
        "artifact_repository": _artifact_repository(repository_ref),
    }
    # Compacted nodes, reused if the byte budget forces a selection.
    done: dict[str, JSONObject] = {}
    truncated = count > max_nodes
    if not truncated:
        compact: list[JSONValue] = []
        for node_id, raw in nodes.items():
            if isinstance(node_id, str) and is_mapping(raw):
                node = _compact_node(node_id, raw, context, keep_children=None)
                done[node_id] = node
                compact.append(node)
        envelope["nodes"] = compact
        encoded = _encode(envelope)
        # The envelope with no nodes plus each node and its comma is one byte more than this.
        if len(encoded) <= max_bytes - (1 if compact else 0):
            return envelope, encoded
    envelope["nodes"] = []
    budget = max_bytes - _json_size(envelope)
    envelope["nodes"] = _bounded_nodes(nodes, context, done, max_nodes=max_nodes, budget=budget)
    envelope["truncated"] = True
    return envelope, _encode(envelope)


def _encode(value: JSONValue) -> bytes:
    """Compact UTF-8 JSON, as the store writes it (orjson: a third of marshal's time, a tenth of
    the standard library's)."""
    try:
        return orjson.dumps(value)
    except TypeError:  # not plain JSON to orjson (an integer beyond 64 bits, a str subclass)
        return _ENCODER.encode(value).encode("utf-8", errors="replace")


def _json_size(value: JSONValue) -> int:
    return len(_encode(value))


def _summary(nodes: Mapping[str, object]) -> tuple[int, JSONObject]:
    """How many nodes there are, by phase and by type; nothing is copied."""
    count = 0
    by_phase: dict[str, int] = {}
    by_type: dict[str, int] = {}
    for node_id, raw in nodes.items():
        if not isinstance(node_id, str) or not is_mapping(raw):
            continue
        count += 1
        phase = raw.get("phase")
        kind = raw.get("type")
        # Raw values as keys (cleaned once below); anything but a string counts as Unknown.
        phase = phase if type(phase) is str else ""
        kind = kind if type(kind) is str else ""
        by_phase[phase] = by_phase.get(phase, 0) + 1
        by_type[kind] = by_type.get(kind, 0) + 1
    return count, {"phases": _count_map(by_phase), "types": _count_map(by_type)}


def _count_map(counts: Mapping[str, int]) -> JSONObject:
    """Counts keyed by phase or type: at most _MAX_SUMMARY_KEYS keys, the rest under "Other"."""
    merged: dict[str, int] = {}
    for key, value in counts.items():
        name = trim(clean(key), _MAX_SUMMARY_KEY_BYTES) or "Unknown"
        merged[name] = merged.get(name, 0) + value
    if len(merged) <= _MAX_SUMMARY_KEYS:
        return dict(merged)
    ranked = sorted(merged.items(), key=lambda item: item[1], reverse=True)
    result: JSONObject = dict(ranked[: _MAX_SUMMARY_KEYS - 1])
    result["Other"] = sum(value for _, value in ranked[_MAX_SUMMARY_KEYS - 1 :])
    return result


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


def _bounded_nodes(
    nodes: Mapping[str, object],
    context: _NodeContext,
    done: Mapping[str, JSONObject],
    *,
    max_nodes: int,
    budget: int,
) -> list[JSONValue]:
    """The nodes worth keeping when not all fit: failures, live leaves, the root, the latest."""
    root_id: str | None = None
    failed, active, other, recent = (_TopK(max_nodes) for _ in range(4))
    # Only ids and sort keys are kept, in heaps of at most max_nodes entries each.
    for node_id, raw in nodes.items():
        if not isinstance(node_id, str) or not is_mapping(raw):
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
        if phase == "Succeeded" or as_sequence(raw.get("children")):
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
        node = done.get(node_id)
        if node is None:
            raw = nodes.get(node_id)
            if not is_mapping(raw):
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


# --- compact nodes ----------------------------------------------------------------------------


class _NodeContext:
    """What compacting a node needs besides the node: fixed per workflow."""

    __slots__ = ("default_locations", "pod_names", "timestamps", "workflow_name")

    def __init__(
        self,
        *,
        workflow_name: str,
        pod_name_format: str | None,
        default_locations: Mapping[str, Mapping[str, object]],
    ) -> None:
        self.workflow_name = workflow_name
        self.pod_names = _PodNames(workflow_name=workflow_name, name_format=pod_name_format)
        self.default_locations = default_locations
        # Timestamps written back, by their text: a node tends to start when another finished.
        self.timestamps: dict[str, str | None] = {}


def _compact_node(
    node_id: str,
    raw: Mapping[str, object],
    context: _NodeContext,
    *,
    keep_children: Mapping[str, None] | None,
) -> JSONObject:
    get = raw.get
    own_id = text(get("id")) or clean(node_id)
    name = text(get("name")) or clean(node_id)
    kind = text(get("type"))
    node: JSONObject = {"id": own_id, "name": name, "type": kind, "phase": text(get("phase"))}
    if (display_name := text(get("displayName"))) is not None:
        node["displayName"] = display_name
    if (template_name := text(get("templateName"))) is not None:
        node["templateName"] = template_name
    ref_template: str | None = None
    template_ref = get("templateRef")
    if template_ref is not None and (template_ref := as_mapping(template_ref)):
        ref: JSONObject = {}
        _put_texts(ref, template_ref, ("name", "template"))
        ref_template = text(ref.get("template"))
        if template_ref.get("clusterScope") is True:
            ref["clusterScope"] = True
        if ref:
            node["templateRef"] = ref
    timestamps = context.timestamps
    for key in ("startedAt", "finishedAt"):
        moment = get(key)
        if type(moment) is str and moment in timestamps:
            value = timestamps[moment]
        else:
            value = timestamp_text(moment)
            if type(moment) is str:
                timestamps[moment] = value
        if value is not None:
            node[key] = value
    if (message := get("message")) is not None and (message := text(message)):
        node["message"] = trim(message, MAX_MESSAGE_BYTES)
    children = get("children")
    if isinstance(children, ARRAY_TYPES) and children:
        kept: list[JSONValue] = [
            child if child.isascii() and "\x00" not in child else clean(child)
            for child in children
            if isinstance(child, str) and (keep_children is None or child in keep_children)
        ]
        if kept:
            node["children"] = kept
    _put_texts(node, raw, ("boundaryID",))
    defaults = context.default_locations
    if (section := get("inputs")) is not None and (section := _io(section, defaults, False)):
        node["inputs"] = section
    if (section := get("outputs")) is not None and (section := _io(section, defaults, True)):
        node["outputs"] = section
    _put_texts(node, raw, ("hostNodeName", "podName"))
    if "podName" not in node and kind in _POD_NODE_TYPES:
        node["podName"] = context.pod_names.of(own_id, name, kind, template_name or ref_template)
    return node


def _put_texts(target: JSONObject, source: Mapping[str, object], keys: tuple[str, ...]) -> None:
    """target[key] = text(source[key]) for each key whose text is not None."""
    for key in keys:
        value = source.get(key)
        if value is None:
            continue
        if type(value) is not str or not value.isascii() or "\x00" in value:
            value = text(value)
        if value:
            target[key] = value


def _io(
    raw: object, defaults: Mapping[str, Mapping[str, object]], outputs: bool
) -> JSONObject | None:
    # The hottest loop: a string that is clean ASCII (nearly all of them) is tested inline and
    # taken as it is; only the others pay for a call to text() or scalar_text().
    section = raw if type(raw) is dict else as_mapping(raw)
    if not section:
        return None
    result: JSONObject = {}
    parameters: list[JSONValue] = []
    items = section.get("parameters")
    for item in items if isinstance(items, ARRAY_TYPES) else ():
        parameter = item if type(item) is dict else as_mapping(item)
        name = parameter.get("name")
        if type(name) is not str or not name.isascii() or "\x00" in name:
            name = text(name)
        if not name:
            continue
        entry: JSONObject = {"name": name}
        value = parameter.get("value")
        if type(value) is not str or not value.isascii() or "\x00" in value:
            value = scalar_text(value)
        if value is not None:
            entry["value"] = (
                value if len(value) * 4 <= MAX_PARAMETER_BYTES else trim(value, MAX_PARAMETER_BYTES)
            )
        parameters.append(entry)
    if parameters:
        result["parameters"] = parameters
    artifacts: list[JSONValue] = []
    items = section.get("artifacts")
    for item in items if isinstance(items, ARRAY_TYPES) else ():
        artifact = item if type(item) is dict else as_mapping(item)
        name = artifact.get("name")
        if type(name) is not str or not name.isascii() or "\x00" in name:
            name = text(name)
        if not name:
            continue
        entry = {"name": name}
        _put_texts(entry, artifact, ("path",))
        if artifact.get("optional") is True:
            entry["optional"] = True
        if artifact.get("deleted") is True:
            entry["deleted"] = True
        if (location := _location(artifact, defaults)) is not None:
            entry["location"] = location
        artifacts.append(entry)
    if artifacts:
        result["artifacts"] = artifacts
    if outputs:
        if (value := scalar_text(section.get("exitCode"))) is not None:
            result["exitCode"] = value
        if value := text(section.get("result")):
            result["result"] = trim(value, MAX_PARAMETER_BYTES)
    return result or None


def _location(
    raw: Mapping[str, object], defaults: Mapping[str, Mapping[str, object]]
) -> JSONObject | None:
    """Where an artifact lives; bucket and endpoint fall back to the frozen default repository."""
    for kind in _LOCATION_KINDS:
        place = raw.get(kind)
        if place is None or not is_mapping(place):
            continue
        location: JSONObject = {"kind": kind}
        for field, defaulted, is_url in _LOCATION_FIELDS[kind]:
            value = place.get(field)
            # Inline, as in _io: a clean non-empty ASCII string is taken as it is.
            if type(value) is not str or not value or not value.isascii() or "\x00" in value:
                value = text(value)
                if value is None and defaulted and kind in defaults:
                    value = text(defaults[kind].get(field))
            if is_url:
                value = _url_without_userinfo(value)
            if value is not None:
                location[field] = value
        return location
    return None


def _default_locations(raw: object) -> Mapping[str, Mapping[str, object]]:
    repository = as_mapping(as_mapping(raw).get("artifactRepository"))
    return {
        kind: place
        for kind in _LOCATION_KINDS
        if isinstance(place := repository.get(kind), Mapping)
    }


def _artifact_repository(raw: object) -> JSONObject | None:
    """The resolved repository ref Argo froze in status, without credential references."""
    ref = as_mapping(raw)
    if not ref:
        return None
    result: JSONObject = {}
    for field in ("configMap", "key", "namespace"):
        if (value := _short(ref.get(field))) is not None:
            result[field] = value
    if ref.get("default") is True:
        result["default"] = True
    repository = as_mapping(ref.get("artifactRepository"))
    if repository.get("archiveLogs") is True:
        result["archiveLogs"] = True
    for kind in _LOCATION_KINDS:
        place = repository.get(kind)
        if isinstance(place, Mapping):
            location: JSONObject = {"kind": kind}
            for field in ("bucket", "endpoint", "region", "keyFormat", "container"):
                if (value := _short(place.get(field))) is not None:
                    location[field] = value
            result["location"] = location
            break
    return result or None


def _short(value: object) -> str | None:
    found = text(value)
    return trim(found, _MAX_REPOSITORY_FIELD_BYTES) if found else None


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


# --- pod names --------------------------------------------------------------------------------


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
    names = _PodNames(workflow_name=workflow_name, name_format=name_format)
    return names.of(node_id, node_name, node_type, template_name)


class _PodNames:
    """pod_name for the nodes of one workflow, hashing the workflow's name once."""

    __slots__ = ("_name_format", "_workflow_hash", "_workflow_name")

    def __init__(self, *, workflow_name: str, name_format: str | None) -> None:
        self._workflow_name = workflow_name
        self._name_format = name_format
        # FNV-1a state after the workflow's name, which begins the name of every node.
        self._workflow_hash: int | None = None

    def of(
        self, node_id: str, node_name: str, node_type: str | None, template_name: str | None
    ) -> str:
        if self._name_format == L.POD_NAME_FORMAT_V1:
            return node_id
        workflow_name = self._workflow_name
        pod_node_name = node_name
        if node_type == "Container" and "." in node_name:
            # A containerSet's container node is "<pod node name>.<container>".
            pod_node_name = node_name.rsplit(".", 1)[0]
        if pod_node_name == workflow_name:
            return workflow_name
        if pod_node_name.startswith(workflow_name):
            if self._workflow_hash is None:
                self._workflow_hash = _fnv32a(_FNV32_OFFSET_BASIS, workflow_name)
            digest = _fnv32a(self._workflow_hash, pod_node_name[len(workflow_name) :])
        else:
            digest = _fnv32a(_FNV32_OFFSET_BASIS, pod_node_name)
        prefix = f"{workflow_name}-{template_name}" if template_name else workflow_name
        return f"{prefix[:_MAX_POD_NAME_PREFIX]}-{digest}"


def _fnv32a(value: int, name: str) -> int:
    """FNV-1a (32 bits) of name in UTF-8, continuing from value; Argo hashes node names so.

    Hashing may resume after a prefix: the UTF-8 of a string is the UTF-8 of its parts, one
    after the other (surrogatepass encodes each surrogate on its own).
    """
    for byte in name.encode("utf-8", errors="surrogatepass"):
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value
