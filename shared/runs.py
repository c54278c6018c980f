"""Domain types of a watched run: the cluster it lives on and its normalised record.

Pure data, no I/O. ``watcher.normalise`` builds a ``RunRecord`` from an Argo ``Workflow``; the
store writes it as one row of ``runs``; the apiserver reads rows back into the same shape.
See ``docs/normalisation.md`` for how every field is derived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TypeAlias

# A JSON document as stored in a JSONB column (the run graph).
JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"


class RunSource(StrEnum):
    """Where a run came from (first matching rule wins; see docs/normalisation.md)."""

    PIPELINE = "pipeline"
    ML_PIPELINE = "ml_pipeline"
    SCHEDULE = "schedule"
    EVENT_TRIGGER = "event_trigger"
    TEMPLATE_SUBMIT = "template_submit"
    CICD = "cicd"
    MANUAL = "manual"


class RunPhase(StrEnum):
    """Argo's workflow phases, plus Unknown for a started run whose phase we cannot read."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ERROR = "Error"
    UNKNOWN = "Unknown"

    @property
    def finished(self) -> bool:
        return self in (RunPhase.SUCCEEDED, RunPhase.FAILED, RunPhase.ERROR)


@dataclass(frozen=True, slots=True)
class ClusterRef:
    """A watched cluster as the registry describes it."""

    id: str
    name: str
    region: str | None = None
    provider: str | None = None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One row of ``runs``: a Workflow on one cluster, normalised.

    The mapping fields (parameters, resources_duration, labels, graph) are plain dicts so that
    they serialise directly; treat them as read-only. ``deleted_at`` is not part of the record:
    the store sets it when the Workflow disappears from its cluster.
    """

    cluster_id: str
    cluster_name: str
    region: str | None
    provider: str | None
    namespace: str
    name: str
    uid: str
    # Kubernetes resourceVersion as an int: the store drops a write that is not newer.
    resource_version: int
    tenant: str | None
    source: RunSource
    phase: RunPhase
    message: str | None
    progress_done: int | None
    progress_total: int | None
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    duration_seconds: float | None
    estimated_duration_seconds: int | None
    parameters: dict[str, str]
    resources_duration: dict[str, int]
    template: str | None
    pipeline_id: str | None
    pipeline_version: str | None
    cron_workflow: str | None
    labels: dict[str, str]
    graph: JSONObject
    graph_truncated: bool
    node_count: int
    # ``graph`` as compact JSON when the normaliser already encoded it (the store writes this
    # instead of encoding the graph again); not part of the record's value.
    graph_json: str | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(cluster_id, namespace, name, uid): the identity of the row."""
        return (self.cluster_id, self.namespace, self.name, self.uid)
