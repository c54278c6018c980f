"""Turn an Argo ``Workflow`` document into a ``RunRecord``.

Purely computational, no side effects: no I/O, no clock, no logging. The informer's worker calls
``normalise`` on the latest object for a key and hands the record to the store.

Workflow documents are read defensively. Only a document without an identity (metadata.name,
metadata.uid, a parseable metadata.resourceVersion) is refused, with ``shared.errors.Invalid``;
any other field of the wrong type or shape reads as absent. The execution graph is bounded
(``max_graph_nodes``, ``max_graph_bytes``) so that a workflow with 100k nodes yields a row of a
predictable size; ``watcher.graph`` builds it. The defensive readers both use are in
``watcher.reading``. Every rule is explained in ``docs/normalisation.md``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any, Final

from shared import labels as L
from shared.errors import Invalid
from shared.runs import ClusterRef, JSONValue, RunPhase, RunRecord, RunSource
from watcher.graph import (
    MAX_GRAPH_BYTES,
    MAX_GRAPH_NODES,
    MAX_MESSAGE_BYTES,
    MAX_PARAMETER_BYTES,
    encoded_graph,
    pod_name,
)
from watcher.reading import (
    EMPTY,
    TRUNCATION_MARKER,
    as_mapping,
    as_sequence,
    clean,
    parse_timestamp,
    scalar_text,
    text,
    trim,
)

__all__ = [
    "MAX_GRAPH_BYTES",
    "MAX_GRAPH_NODES",
    "MAX_MESSAGE_BYTES",
    "MAX_OBJECT_NAME",
    "MAX_PARAMETER_BYTES",
    "TRUNCATION_MARKER",
    "last_change_at",
    "normalise",
    "parse_progress",
    "parse_timestamp",
    "pod_name",
    "resource_version_of",
    "source_of",
    "tenant_of_namespace",
    "workflow_key",
]

_ARGO_PHASES: Final = frozenset({"Pending", "Running", "Succeeded", "Failed", "Error"})
_PROGRESS: Final = re.compile(r"(\d{1,18})/(\d{1,18})", re.ASCII)
_RESOURCE_VERSION: Final = re.compile(r"\d{1,19}", re.ASCII)
# Columns are PostgreSQL bigint (resourceVersion) and integer (progress, estimated duration):
# a larger value would fail the whole batch insert, so it reads as absent (or, for the
# resourceVersion, as an invalid document).
_MAX_BIGINT: Final = 2**63 - 1
_MAX_INT: Final = 2**31 - 1
# The longest name a Kubernetes object can have (a DNS subdomain). A template reference longer
# than that names nothing, and the column's index refuses a value of a few kilobytes outright.
MAX_OBJECT_NAME: Final = 253


# --- public helpers ---------------------------------------------------------------------------


def workflow_key(workflow: Mapping[str, Any]) -> tuple[str, str, str]:
    """(namespace, name, uid) of a Workflow; raises Invalid without a name or uid."""
    meta = as_mapping(workflow.get("metadata")) if isinstance(workflow, Mapping) else EMPTY
    name = text(meta.get("name"))
    uid = text(meta.get("uid"))
    if name is None or uid is None:
        raise Invalid(
            "workflow without metadata.name or metadata.uid",
            details={"name": name, "uid": uid},
        )
    return text(meta.get("namespace")) or "", name, uid


def resource_version_of(workflow: Mapping[str, Any]) -> int:
    """metadata.resourceVersion as an int; Invalid unless a decimal in PostgreSQL's bigint."""
    meta = as_mapping(workflow.get("metadata")) if isinstance(workflow, Mapping) else EMPTY
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
    """Where a run came from; the first matching rule wins (docs/normalisation.md). What
    started a run (its schedule, a trigger) comes before what it runs: a pipeline started by its
    schedule is a ``schedule`` run, and still carries its pipeline's id and kind."""
    if labels.get(L.ARGO_CRON_WORKFLOW):
        return RunSource.SCHEDULE
    if (
        labels.get(L.TRIGGER)
        or labels.get(L.ARGO_WORKFLOW_EVENT_BINDING)
        or labels.get(L.EVENTS_SENSOR)
        or L.SENSOR_KIND in owner_kinds
    ):
        return RunSource.EVENT_TRIGGER
    if namespace.startswith(L.DATA_NAMESPACE_PREFIX):
        kind = labels.get(L.PIPELINE_KIND)
        if kind == L.PIPELINE_KIND_ML:
            return RunSource.ML_PIPELINE
        if kind == L.PIPELINE_KIND_DATA:
            return RunSource.PIPELINE
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


def parse_progress(value: object) -> tuple[int, int] | None:
    """Argo's "N/M" progress as (N, M); None unless 0 <= N <= M < 2**31."""
    if not isinstance(value, str):
        return None
    match = _PROGRESS.fullmatch(value.strip())
    if match is None:
        return None
    done, total = int(match.group(1)), int(match.group(2))
    return (done, total) if done <= total <= _MAX_INT else None


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
    meta = as_mapping(workflow.get("metadata"))
    spec = as_mapping(workflow.get("spec"))
    status = as_mapping(workflow.get("status"))

    labels = _string_map(meta.get("labels"))
    annotations = _string_map(meta.get("annotations"))
    template_ref = text(as_mapping(spec.get("workflowTemplateRef")).get("name"))
    owner_kinds = [
        kind
        for ref in as_sequence(meta.get("ownerReferences"))
        if (kind := text(as_mapping(ref).get("kind"))) is not None
    ]

    started_at = parse_timestamp(status.get("startedAt"))
    finished_at = parse_timestamp(status.get("finishedAt"))
    duration = None
    if started_at is not None and finished_at is not None:
        duration = max(0.0, (finished_at - started_at).total_seconds())
    progress = parse_progress(status.get("progress"))
    message = text(status.get("message"))
    estimated = _integer(status.get("estimatedDuration"))

    run_graph, graph_json = encoded_graph(
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
        message=trim(message, MAX_MESSAGE_BYTES) if message else None,
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
        template=next(
            (
                name
                for name in (
                    template_ref,
                    labels.get(L.ARGO_WORKFLOW_TEMPLATE),
                    labels.get(L.ARGO_CLUSTER_WORKFLOW_TEMPLATE),
                )
                if name and len(name) <= MAX_OBJECT_NAME
            ),
            None,
        ),
        pipeline_id=labels.get(L.PIPELINE_ID) or None,
        pipeline_version=labels.get(L.PIPELINE_VERSION) or None,
        cron_workflow=labels.get(L.ARGO_CRON_WORKFLOW) or None,
        labels=labels,
        graph=run_graph,
        graph_truncated=run_graph["truncated"] is True,
        node_count=_as_int(run_graph["node_count"]),
        graph_json=graph_json.decode(),
    )


def last_change_at(record: RunRecord) -> datetime | None:
    """The newest time Argo wrote into the run: its creation, its start or end, or the start
    or end of any node kept in its graph (whole seconds, as Argo writes them). The watcher's
    lag metric measures from here to the commit."""
    newest = max(
        (moment for moment in (record.created_at, record.started_at, record.finished_at) if moment),
        default=None,
    )
    nodes = record.graph.get("nodes")
    # Node times are UTC RFC 3339 text ending in 'Z' (watcher.graph writes them so), which
    # orders as the times do, to within the fraction of a second Argo rarely writes.
    latest = ""
    for node in nodes if isinstance(nodes, list) else ():
        if isinstance(node, dict):
            for key in ("startedAt", "finishedAt"):
                moment = node.get(key)
                if isinstance(moment, str) and moment > latest:
                    latest = moment
    node_time = parse_timestamp(latest) if latest else None
    if node_time is not None and (newest is None or node_time > newest):
        return node_time
    return newest


def _phase(raw: object, started_at: datetime | None) -> RunPhase:
    if isinstance(raw, str) and raw in _ARGO_PHASES:
        return RunPhase(raw)
    return RunPhase.PENDING if started_at is None else RunPhase.UNKNOWN


def _workflow_parameters(
    spec: Mapping[str, object], status: Mapping[str, object]
) -> dict[str, str]:
    # With workflowTemplateRef the effective arguments are the template's merged with the
    # submitted ones; Argo freezes that merge in status.storedWorkflowTemplateSpec.
    stored = as_mapping(as_mapping(status.get("storedWorkflowTemplateSpec")).get("arguments"))
    submitted = as_mapping(spec.get("arguments"))
    result: dict[str, str] = {}
    for declared in (stored.get("parameters"), submitted.get("parameters")):
        for item in as_sequence(declared):
            parameter = as_mapping(item)
            name = text(parameter.get("name"))
            if name is None:
                continue
            value = scalar_text(parameter.get("value"))
            if value is None:
                value = scalar_text(parameter.get("default"))
            if value is not None:
                result[name] = trim(value, MAX_PARAMETER_BYTES)
    return result


def _resources_duration(raw: object) -> dict[str, int]:
    # Stored as JSON the store encodes with 64-bit integers: a larger one reads as absent.
    return {
        clean(key): value
        for key, item in as_mapping(raw).items()
        if isinstance(key, str)
        and (value := _integer(item)) is not None
        and -_MAX_BIGINT - 1 <= value <= _MAX_BIGINT
    }


# --- small readers ---------------------------------------------------------------------------


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


def _string_map(value: object) -> dict[str, str]:
    return {
        clean(key): clean(item)
        for key, item in as_mapping(value).items()
        if isinstance(key, str) and isinstance(item, str)
    }
