"""What an action does to a workflow, decided from the live object. Purely computational.

- stop/terminate: a merge patch of ``spec.shutdown`` (what Argo's own routes do), refused for
  a workflow that finished or is no longer the run the caller named (same name, other uid);
- retry: in place through the Argo server for a Failed/Error workflow; otherwise (gone,
  succeeded, or Argo refusing) resubmitted from its template with the same parameters; without
  a template, resubmitted by Argo from the workflow while it exists; refused when neither can
  work — never answered as done when nothing was created (upstream #10215).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from shared import labels as L
from shared.argo import ServiceRef, parse_service_url
from shared.errors import Conflict

WORKFLOW_GROUP = "argoproj.io"
WORKFLOW_VERSION = "v1alpha1"
RETRYABLE_PHASES = frozenset({"Failed", "Error"})
FINISHED_PHASES = frozenset({"Succeeded", "Failed", "Error"})
# Labels a resubmission keeps: what routes it to its controller and classifies it.
CARRIED_LABELS = (
    L.PIPELINE_ID,
    L.PIPELINE_VERSION,
    L.PIPELINE_KIND,
    L.SOURCE,
    L.ARGO_CONTROLLER_INSTANCE_ID,
)
DEFAULT_ARGO_SERVER = ServiceRef(
    scheme="https", service="argo-server", namespace="argo", port="2746"
)


class Shutdown(StrEnum):
    STOP = "Stop"
    TERMINATE = "Terminate"


class RetryMode(StrEnum):
    IN_PLACE = "in_place"
    FROM_TEMPLATE = "from_template"
    FROM_WORKFLOW = "from_workflow"


@dataclass(frozen=True, slots=True)
class RetryPlan:
    mode: RetryMode
    reason: str  # why this mode (shown to the caller and recorded)


def tenant_of_namespace(namespace: str) -> str | None:
    """A run's tenant comes from its namespace only (as the watcher derives it)."""
    for prefix in (L.DATA_NAMESPACE_PREFIX, L.SERVE_NAMESPACE_PREFIX):
        if namespace.startswith(prefix) and len(namespace) > len(prefix):
            return namespace[len(prefix) :]
    return None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def phase_of(workflow: Mapping[str, Any]) -> str:
    return str(_mapping(workflow.get("status")).get("phase") or "")


def is_finished(workflow: Mapping[str, Any]) -> bool:
    labels = _mapping(_mapping(workflow.get("metadata")).get("labels"))
    return labels.get(L.ARGO_COMPLETED) == "true" or phase_of(workflow) in FINISHED_PHASES


def same_run(workflow: Mapping[str, Any] | None, uid: str) -> bool:
    return workflow is not None and _mapping(workflow.get("metadata")).get("uid") == uid


def check_shutdown(workflow: Mapping[str, Any] | None, *, uid: str, action: str) -> None:
    """Raise Conflict when ``action`` (stop/terminate) cannot apply to this workflow."""
    if not same_run(workflow, uid):
        raise Conflict(
            f"cannot {action}: the workflow is no longer on its cluster",
            details={"reason": "workflow_gone"},
        )
    assert workflow is not None
    if is_finished(workflow):
        raise Conflict(
            f"cannot {action}: the workflow has already finished ({phase_of(workflow)})",
            details={"reason": "finished", "phase": phase_of(workflow)},
        )


def shutdown_patch(kind: Shutdown) -> dict[str, Any]:
    return {"spec": {"shutdown": kind.value}}


def plan_retry(workflow: Mapping[str, Any] | None, *, uid: str, template: str | None) -> RetryPlan:
    """How to retry the run with ``uid`` given its live workflow (None: gone)."""
    live = workflow if same_run(workflow, uid) else None
    if live is not None and not is_finished(live):
        raise Conflict("cannot retry: the workflow is still running", details={"reason": "running"})
    if live is not None and phase_of(live) in RETRYABLE_PHASES:
        return RetryPlan(RetryMode.IN_PLACE, f"the workflow {phase_of(live).lower()}")
    reason = "the workflow is gone" if live is None else f"the workflow {phase_of(live).lower()}"
    return fallback_plan(live, template=template, reason=reason)


def fallback_plan(
    live: Mapping[str, Any] | None, *, template: str | None, reason: str
) -> RetryPlan:
    """Resubmission when retrying in place is impossible for ``reason``."""
    if template:
        return RetryPlan(RetryMode.FROM_TEMPLATE, reason)
    if live is not None:
        return RetryPlan(RetryMode.FROM_WORKFLOW, reason)
    raise Conflict(
        "cannot retry: the workflow is gone and it was not started from a template",
        details={"reason": "no_template"},
    )


def template_workflow(
    *,
    namespace: str,
    template: str,
    parameters: Mapping[str, str],
    cluster_scope: bool = False,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Workflow that runs ``template`` with ``parameters`` (what Argo's submit creates)."""
    ref: dict[str, Any] = {"name": template}
    if cluster_scope:
        ref["clusterScope"] = True
    metadata: dict[str, Any] = {"generateName": f"{template[:200]}-", "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    spec: dict[str, Any] = {"workflowTemplateRef": ref}
    if parameters:
        spec["arguments"] = {
            "parameters": [{"name": k, "value": v} for k, v in sorted(parameters.items())]
        }
    return {
        "apiVersion": f"{WORKFLOW_GROUP}/{WORKFLOW_VERSION}",
        "kind": "Workflow",
        "metadata": metadata,
        "spec": spec,
    }


def resubmission_labels(run_labels: Mapping[str, str], *, original: str) -> dict[str, str]:
    carried = {key: run_labels[key] for key in CARRIED_LABELS if key in run_labels}
    carried[L.ARGO_RESUBMITTED_FROM] = original[:63]
    return carried


def is_cluster_template(run_labels: Mapping[str, str], template: str) -> bool:
    return (
        run_labels.get(L.ARGO_CLUSTER_WORKFLOW_TEMPLATE) == template
        and run_labels.get(L.ARGO_WORKFLOW_TEMPLATE) != template
    )


def argo_server_for(*, is_host: bool, namespace: str, data_server_url: str) -> ServiceRef:
    """Whose Argo server owns a run: tenant pipelines on the host run on the data controller
    (ARGO_DATA_SERVER_URL); everything else on the cluster's ``argo/argo-server``."""
    if _on_data_controller(is_host=is_host, namespace=namespace):
        return parse_service_url(data_server_url)
    return DEFAULT_ARGO_SERVER


def controller_labels(*, is_host: bool, namespace: str, data_instance_id: str) -> dict[str, str]:
    """The label a new run needs to reach its controller: the data controller's instance ID
    (ARGO_DATA_INSTANCE_ID) for a tenant pipeline on the host, which the CI/CD controller (no
    instance ID) would otherwise run; nothing elsewhere."""
    if _on_data_controller(is_host=is_host, namespace=namespace):
        return {L.ARGO_CONTROLLER_INSTANCE_ID: data_instance_id}
    return {}


def _on_data_controller(*, is_host: bool, namespace: str) -> bool:
    return is_host and namespace.startswith(L.DATA_NAMESPACE_PREFIX)
