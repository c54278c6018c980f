"""What the stage controller reads of an Argo ``Workflow``: who it is, which pipeline version it
claims to run, the control stages waiting on it, and the artifacts its steps produced.

Purely computational, no side effects. The document comes from the host's API server (or, when
Argo offloaded its nodes, the Argo server) and is read through ``shared.argo_status``, the one
reader of Argo's workflows: a field of the wrong type reads as absent, never as an exception,
and compressed nodes are decoded. Its labels
and annotations are the tenant's to set, so nothing here decides anything: ``admission`` judges
the claims against the pipeline version in our own database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from shared import labels as L
from shared import stages as S
from shared.argo_status import as_mapping, as_sequence, nodes_of, offloaded, string

# Where the platform puts each stage's node (the release DAG's tasks, the exit handler).
EXIT_NODE_SUFFIX: Final = ".onExit"
FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed", "Error"})
# Where a tenant's step may record the MLflow run it logged to (docs/operations.md, "stagectl").
MLFLOW_RUN_PARAMETER: Final = "mlflow_run_id"
MLFLOW_RUN_LABEL: Final = "kubeopera.io/mlflow-run-id"
# The stages this controller does today; a node of any other stage is left alone.
HANDLED_STAGES: Final = (S.REGISTER, S.GATE, S.DEPLOY, S.APPROVAL, S.CLEANUP)
_TEMPLATE_STAGES: Final = {S.template_name(stage): stage for stage in HANDLED_STAGES}


@dataclass(frozen=True, slots=True)
class Artifact:
    """An output artifact of a step, where Argo recorded it in object storage."""

    name: str
    key: str
    bucket: str | None  # None: the workflow's artifact repository's


@dataclass(frozen=True, slots=True)
class WaitingStage:
    """A platform stage's suspend node that is waiting for the stage controller (``node_id``
    empty: a stage to do without a node, see ``unhandled_exit``)."""

    stage: str
    node_id: str
    node_name: str
    gone: bool = False  # the workflow was deleted: this is its last state's cleanup


@dataclass(frozen=True, slots=True)
class RunFacts:
    """The parts of a workflow the stage controller reads (the tenant's claims included)."""

    namespace: str
    name: str
    uid: str
    resource_version: int
    pipeline_id: str | None
    pipeline_version: int | None
    template_ref: str | None  # spec.workflowTemplateRef.name (namespaced only)
    entrypoint: str | None  # spec.entrypoint, when the submitter overrode it
    creator: str | None
    phase: str | None
    shutdown: str | None
    repository_bucket: str | None  # status.artifactRepositoryRef's S3 bucket
    # status.startedAt: which attempt of the run this is (an in-place retry sets it anew)
    attempt: str = ""
    parameters: dict[str, str] = field(default_factory=dict)
    input_artifacts: list[dict[str, str]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_PHASES


def _int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    return None


def _parameters(spec: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for param in as_sequence(as_mapping(spec.get("arguments")).get("parameters")):
        param = as_mapping(param)
        name, value = string(param.get("name")), param.get("value")
        if name is not None and isinstance(value, str | int | float | bool):
            found[name] = str(value)
    return found


def _input_artifacts(spec: Mapping[str, Any]) -> list[dict[str, str]]:
    found = []
    for artifact in as_sequence(as_mapping(spec.get("arguments")).get("artifacts")):
        artifact = as_mapping(artifact)
        name = string(artifact.get("name"))
        if name is None:
            continue
        entry = {"name": name}
        key = string(as_mapping(artifact.get("s3")).get("key"))
        if key is not None:
            entry["key"] = key
        found.append(entry)
    return found


def read_run(workflow: Mapping[str, Any]) -> RunFacts | None:
    """The facts of ``workflow``; None without an identity (namespace, name, uid)."""
    metadata = as_mapping(workflow.get("metadata"))
    namespace, name, uid = (string(metadata.get(key)) for key in ("namespace", "name", "uid"))
    if namespace is None or name is None or uid is None:
        return None
    labels = {k: v for k, v in as_mapping(metadata.get("labels")).items() if isinstance(v, str)}
    annotations = as_mapping(metadata.get("annotations"))
    spec = as_mapping(workflow.get("spec"))
    status = as_mapping(workflow.get("status"))
    ref = as_mapping(spec.get("workflowTemplateRef"))
    stored = as_mapping(status.get("storedWorkflowTemplateSpec"))
    # What the run was given: the template's defaults under the submitter's overrides.
    parameters = {**_parameters(stored), **_parameters(spec)}
    repository = as_mapping(
        as_mapping(status.get("artifactRepositoryRef")).get("artifactRepository")
    )
    return RunFacts(
        namespace=namespace,
        name=name,
        uid=uid,
        resource_version=_int(metadata.get("resourceVersion")) or 0,
        pipeline_id=string(labels.get(L.PIPELINE_ID)),
        pipeline_version=_int(labels.get(L.PIPELINE_VERSION)),
        template_ref=None if ref.get("clusterScope") else string(ref.get("name")),
        entrypoint=string(spec.get("entrypoint")),
        creator=string(annotations.get(L.ARGO_CREATOR)) or string(labels.get(L.ARGO_CREATOR)),
        phase=string(status.get("phase")),
        shutdown=string(spec.get("shutdown")),
        repository_bucket=string(as_mapping(repository.get("s3")).get("bucket")),
        attempt=string(status.get("startedAt")) or "",
        parameters=parameters,
        input_artifacts=_input_artifacts(stored) + _input_artifacts(spec),
        labels=labels,
    )


def _nodes(workflow: Mapping[str, Any]) -> Mapping[str, Any]:
    """The nodes, plain or compressed (``shared.argo_status``); none when offloaded."""
    return nodes_of(workflow)


def needs_fetch(workflow: Mapping[str, Any]) -> bool:
    """Whether this copy of the workflow lacks its nodes (Argo offloaded them) while a stage may
    wait on it (it runs, or was terminated and may need its cleanup): only the Argo server's GET
    shows the nodes, so the controller reads the workflow there."""
    if not offloaded(workflow):
        return False
    phase = as_mapping(workflow.get("status")).get("phase")
    return phase not in FINISHED_PHASES or as_mapping(workflow.get("spec")).get("shutdown") == (
        "Terminate"
    )


def waiting_stages(workflow: Mapping[str, Any]) -> list[WaitingStage]:
    """Suspend nodes of a platform stage's template that are waiting (phase Running), in node
    name order. Whether the platform really put them there is for ``admission`` to judge."""
    found = []
    for node_id, node in _nodes(workflow).items():
        node = as_mapping(node)
        stage = _TEMPLATE_STAGES.get(str(node.get("templateName")))
        if stage is None or node.get("type") != "Suspend" or node.get("phase") != "Running":
            continue
        name = string(node.get("name"))
        if name is None or not isinstance(node_id, str):
            continue
        found.append(WaitingStage(stage=stage, node_id=node_id, node_name=name))
    return sorted(found, key=lambda waiting: waiting.node_name)


def unhandled_exit(workflow: Mapping[str, Any]) -> WaitingStage | None:
    """The cleanup stage of a run that ended without running its exit handler: a terminated run
    (Argo runs no exit handler then) whose template's exit handler is the platform's. It has no
    node to complete (``node_id`` is empty); the controller still records how its release ended
    and removes what it left behind."""
    metadata = as_mapping(workflow.get("metadata"))
    name = string(metadata.get("name"))
    spec = as_mapping(workflow.get("spec"))
    status = as_mapping(workflow.get("status"))
    stored = as_mapping(status.get("storedWorkflowTemplateSpec"))
    if name is None or status.get("phase") not in FINISHED_PHASES:
        return None
    if spec.get("shutdown") != "Terminate" or stored.get("onExit") != S.template_name(S.CLEANUP):
        return None
    exit_node = stage_node_name(name, S.CLEANUP)
    if any(as_mapping(node).get("name") == exit_node for node in _nodes(workflow).values()):
        return None
    return WaitingStage(stage=S.CLEANUP, node_id="", node_name=exit_node)


def deleted_exit(workflow: Mapping[str, Any]) -> WaitingStage | None:
    """The cleanup stage of a run deleted before its exit handler finished (``workflow`` is
    its last state): its template's exit handler is the platform's and its exit node has not
    succeeded. Nothing is left to complete; the controller records how the release ended and
    removes what it left behind, as for a terminated run."""
    name = string(as_mapping(workflow.get("metadata")).get("name"))
    stored = as_mapping(as_mapping(workflow.get("status")).get("storedWorkflowTemplateSpec"))
    if name is None or stored.get("onExit") != S.template_name(S.CLEANUP):
        return None
    exit_node = stage_node_name(name, S.CLEANUP)
    for node in _nodes(workflow).values():
        node = as_mapping(node)
        if node.get("name") == exit_node and node.get("phase") == "Succeeded":
            return None
    return WaitingStage(stage=S.CLEANUP, node_id="", node_name=exit_node, gone=True)


def stage_node_name(workflow_name: str, stage: str) -> str:
    """The name Argo gives the node of ``stage`` in a compiled release: a task of the release
    DAG (the workflow's root), or the exit handler."""
    if stage == S.CLEANUP:
        return f"{workflow_name}{EXIT_NODE_SUFFIX}"
    return f"{workflow_name}.{S.template_name(stage)}"


def step_node(workflow: Mapping[str, Any], step: str) -> Mapping[str, Any] | None:
    """The node of the tenant's task or step named ``step`` (a retried step's node carries its
    last attempt's outputs): the one that succeeded, else any."""
    candidates = [
        as_mapping(node)
        for node in _nodes(workflow).values()
        if as_mapping(node).get("displayName") == step
        and as_mapping(node).get("type") in ("Pod", "Retry")
    ]
    succeeded = [node for node in candidates if node.get("phase") == "Succeeded"]
    chosen = succeeded or candidates
    return min(chosen, key=lambda node: str(node.get("name"))) if chosen else None


def output_artifact(node: Mapping[str, Any], artifact: str) -> Artifact | None:
    for entry in as_sequence(as_mapping(node.get("outputs")).get("artifacts")):
        entry = as_mapping(entry)
        if entry.get("name") != artifact:
            continue
        s3 = as_mapping(entry.get("s3"))
        key = string(s3.get("key"))
        if key is None:
            return None
        return Artifact(name=artifact, key=key, bucket=string(s3.get("bucket")))
    return None


def output_parameter(node: Mapping[str, Any], name: str) -> str | None:
    for entry in as_sequence(as_mapping(node.get("outputs")).get("parameters")):
        entry = as_mapping(entry)
        if entry.get("name") == name and isinstance(entry.get("value"), str):
            return str(entry["value"])
    return None


def root_phase(workflow: Mapping[str, Any]) -> str | None:
    """The phase of the workflow's root node: how the run's own work ended, before its exit
    handler (which the workflow's phase still waits for)."""
    metadata = as_mapping(workflow.get("metadata"))
    name = metadata.get("name")
    for node in _nodes(workflow).values():
        node = as_mapping(node)
        if node.get("name") == name and node.get("id") == name:
            return string(node.get("phase"))
    return None


def node_phase(workflow: Mapping[str, Any], node_name: str) -> str | None:
    for node in _nodes(workflow).values():
        node = as_mapping(node)
        if node.get("name") == node_name:
            return string(node.get("phase"))
    return None
