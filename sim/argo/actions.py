"""What the Argo server's workflow actions do to a workflow (retry, resubmit, set, resume,
stop, terminate), after argo-workflows' `workflow/util/util.go`.

Purely computational, no side effects: each function returns or mutates a workflow dict and
raises ActionError carrying the gRPC code the Argo server answers with.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable

from sim.argo.naming import (
    FAILED,
    LABEL_ARCHIVING_STATUS,
    LABEL_COMPLETED,
    LABEL_CREATORS,
    LABEL_PHASE,
    LABEL_RESUBMITTED_FROM,
    Obj,
    iso,
    pod_name,
)
from sim.argo.selectors import NodeSelector, SelectorError, parse_node_field_selector
from sim.argo.templates import override_parameters

INVALID_ARGUMENT = 3
NOT_FOUND = 5
ALREADY_EXISTS = 6
ABORTED = 10
INTERNAL = 13
HTTP_STATUS = {INVALID_ARGUMENT: 400, NOT_FOUND: 404, ALREADY_EXISTS: 409, ABORTED: 409}
GROUP_TYPES = frozenset({"DAG", "Steps", "StepGroup", "TaskGroup"})


class ActionError(Exception):
    """An Argo server error: gRPC `code` and message, as grpc-gateway serialises them."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)

    def body(self) -> Obj:
        return {"code": self.code, "message": self.message, "details": []}


def _selector(text: str, *, code: int) -> NodeSelector:
    try:
        return parse_node_field_selector(text)
    except SelectorError as error:
        raise ActionError(code, str(error)) from error


def _override(workflow: Obj, parameters: list[str] | None) -> None:
    if not parameters:
        return
    try:
        for spec in (
            workflow.get("spec"),
            (workflow.get("status") or {}).get("storedWorkflowTemplateSpec"),
        ):
            if spec is None:
                continue
            arguments = spec.setdefault("arguments", {})
            arguments["parameters"] = override_parameters(
                arguments.get("parameters") or [], parameters
            )
    except ValueError as error:
        raise ActionError(INVALID_ARGUMENT, str(error)) from error


def _descendants(nodes: dict[str, Obj], roots: Iterable[str]) -> set[str]:
    found: set[str] = set()
    stack = list(roots)
    while stack:
        current = stack.pop()
        if current in found or current not in nodes:
            continue
        found.add(current)
        stack.extend(nodes[current].get("children") or [])
    return found


def _ancestors(nodes: dict[str, Obj], targets: set[str]) -> set[str]:
    parents: dict[str, set[str]] = {}
    for nid, node in nodes.items():
        for child in node.get("children") or []:
            parents.setdefault(child, set()).add(nid)
        if node.get("boundaryID"):
            parents.setdefault(nid, set()).add(node["boundaryID"])
    found: set[str] = set()
    stack = list(targets)
    while stack:
        for parent in parents.get(stack.pop(), set()):
            if parent not in found:
                found.add(parent)
                stack.append(parent)
    return found


def _needs_reset(node: Obj, workflow_name: str, restart: NodeSelector | None) -> bool:
    """Exit-handler, omitted and failed leaf nodes, plus selected succeeded ones."""
    kind, phase = node.get("type"), node.get("phase")
    if str(node.get("name", "")).startswith(f"{workflow_name}.onExit"):
        return True
    if kind in GROUP_TYPES:
        return False
    if phase == "Omitted" or phase in FAILED:
        return True
    return bool(restart and not restart.empty and phase == "Succeeded" and restart.matches(node))


def formulate_retry(
    workflow: Obj,
    *,
    restart_successful: bool,
    node_field_selector: str,
    parameters: list[str] | None,
    now: float,
) -> tuple[Obj, list[str]]:
    """The retried workflow (same object) and the pods to delete first."""
    status = workflow.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded":
        if not (restart_successful and node_field_selector):
            raise ActionError(
                INVALID_ARGUMENT,
                "To retry a succeeded workflow, set the options restartSuccessful and "
                "nodeFieldSelector",
            )
    elif phase not in FAILED:
        raise ActionError(INVALID_ARGUMENT, f"Cannot retry a workflow in phase {phase}")
    selector = _selector(node_field_selector, code=INVALID_ARGUMENT)
    new = copy.deepcopy(workflow)
    name = new["metadata"]["name"]
    labels = new["metadata"].setdefault("labels", {})
    labels.pop(LABEL_COMPLETED, None)
    labels.pop(LABEL_ARCHIVING_STATUS, None)
    labels[LABEL_PHASE] = "Running"
    new_status = new.setdefault("status", {})
    new_status["phase"] = "Running"
    new_status.pop("message", None)
    new_status.pop("finishedAt", None)
    new_status["startedAt"] = iso(now)
    new_status["conditions"] = [{"type": "Completed", "status": "False"}]
    for spec in (new.get("spec") or {}, new_status.get("storedWorkflowTemplateSpec") or {}):
        spec.pop("shutdown", None)
        if spec.get("activeDeadlineSeconds") == 0:
            spec.pop("activeDeadlineSeconds", None)
    _override(new, parameters)

    nodes: dict[str, Obj] = new_status.get("nodes") or {}
    reset = {
        nid
        for nid, node in nodes.items()
        if _needs_reset(node, name, selector if restart_successful else None)
    }
    deleted = _descendants(nodes, reset)
    pods = [
        pod_name(name, str(nodes[n]["name"]), str(nodes[n].get("templateName", "")))
        for n in sorted(deleted)
        if nodes[n].get("type") == "Pod"
    ]
    for nid in _ancestors(nodes, deleted) - deleted:
        node = nodes[nid]
        if node.get("type") in GROUP_TYPES or node.get("type") == "Retry":
            node["phase"] = "Running"
            node.pop("finishedAt", None)
            node.pop("message", None)
    for nid in deleted:
        del nodes[nid]
    for node in nodes.values():
        if node.get("children"):
            node["children"] = [c for c in node["children"] if c not in deleted]
            if not node["children"]:
                del node["children"]
    return new, pods


def formulate_resubmit(workflow: Obj, *, memoized: bool, parameters: list[str] | None) -> Obj:
    """A new workflow from an old one (not created yet). Memoized mode is validated as Argo
    does, then resubmits everything: the simulator keeps no memoization cache."""
    metadata = workflow.get("metadata") or {}
    if memoized and (workflow.get("status") or {}).get("phase") not in FAILED:
        raise ActionError(
            INVALID_ARGUMENT, "workflow must be Failed/Error to resubmit in memoized mode"
        )
    spec = copy.deepcopy(workflow.get("spec") or {})
    spec.pop("shutdown", None)
    if spec.get("activeDeadlineSeconds") == 0:
        spec.pop("activeDeadlineSeconds", None)
    skipped = {LABEL_PHASE, LABEL_COMPLETED, LABEL_ARCHIVING_STATUS, *LABEL_CREATORS}
    labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k not in skipped}
    labels[LABEL_RESUBMITTED_FROM] = str(metadata.get("name"))
    new: Obj = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "generateName": metadata.get("generateName") or f"{metadata.get('name')}-",
            "namespace": metadata.get("namespace"),
            "labels": labels,
            "annotations": dict(metadata.get("annotations") or {}),
        },
        "spec": spec,
    }
    new["metadata"]["annotations"].pop("workflows.argoproj.io/pod-name-format", None)
    if metadata.get("ownerReferences"):
        new["metadata"]["ownerReferences"] = copy.deepcopy(metadata["ownerReferences"])
    _override(new, parameters)
    return new


def _is_active_suspend(node: Obj) -> bool:
    return node.get("type") == "Suspend" and node.get("phase") == "Running"


def set_suspended_nodes(
    workflow: Obj,
    *,
    node_field_selector: str,
    phase: str,
    message: str,
    output_parameters: dict[str, str],
    now: float,
) -> None:
    """Argo's `updateSuspendedNode`: set phase, message and supplied outputs of active
    Suspend nodes matching the selector."""
    selector = _selector(node_field_selector, code=INTERNAL)
    updated = False
    for node in ((workflow.get("status") or {}).get("nodes") or {}).values():
        if not (_is_active_suspend(node) and selector.matches(node)):
            continue
        if phase:
            node["phase"] = phase
            if phase in ("Succeeded", "Failed", "Error"):
                node["finishedAt"] = iso(now)
            updated = True
        if message:
            node["message"] = message
            updated = True
        if output_parameters:
            declared = (node.get("outputs") or {}).get("parameters")
            if not declared:
                raise ActionError(
                    INTERNAL,
                    "cannot set output parameters because node is not expecting any raw parameters",
                )
            for name, value in output_parameters.items():
                param = next((p for p in declared if p.get("name") == name), None)
                if param is None:
                    raise ActionError(INTERNAL, f"node is not expecting output parameter '{name}'")
                if "supplied" not in (param.get("valueFrom") or {}):
                    raise ActionError(
                        INTERNAL,
                        f"cannot set output parameter '{name}' because it does not use "
                        "valueFrom.raw or it was already set",
                    )
                param["value"] = str(value)
                param.pop("valueFrom", None)
                updated = True
    if not updated:
        raise ActionError(
            INTERNAL,
            "currently, set only targets suspend nodes: no suspend nodes matching "
            f"nodeFieldSelector: {node_field_selector}",
        )


def parse_set_request(phase: str, output_parameters: str) -> dict[str, str]:
    """Validate a set request's phase and decode its `outputParameters` JSON string."""
    if phase not in ("Succeeded", "Failed", "Error", ""):
        raise ActionError(INVALID_ARGUMENT, f"{phase} is an invalid phase to set to")
    if not output_parameters:
        return {}
    try:
        decoded = json.loads(output_parameters)
    except ValueError as error:
        raise ActionError(
            INVALID_ARGUMENT, f"unable to parse output parameter set request: {error}"
        ) from error
    if not isinstance(decoded, dict) or not all(isinstance(v, str) for v in decoded.values()):
        raise ActionError(
            INVALID_ARGUMENT,
            "unable to parse output parameter set request: expected an object of strings",
        )
    return {str(k): v for k, v in decoded.items()}


def resume(workflow: Obj, *, node_field_selector: str, now: float) -> None:
    """Argo's `ResumeWorkflow`: by selector, or every active suspend node and spec.suspend."""
    if node_field_selector:
        set_suspended_nodes(
            workflow,
            node_field_selector=node_field_selector,
            phase="Succeeded",
            message="",
            output_parameters={},
            now=now,
        )
        return
    (workflow.get("spec") or {}).pop("suspend", None)
    for node in ((workflow.get("status") or {}).get("nodes") or {}).values():
        if not _is_active_suspend(node):
            continue
        for param in (node.get("outputs") or {}).get("parameters") or []:
            value_from = param.get("valueFrom") or {}
            if "supplied" in value_from:
                if value_from.get("default") is None:
                    raise ActionError(
                        INTERNAL,
                        f"raw output parameter '{param.get('name')}' has not been set and does "
                        "not have a default value",
                    )
                param["value"] = str(value_from["default"])
                param.pop("valueFrom", None)
        node["phase"] = "Succeeded"
        node["finishedAt"] = iso(now)


def check_shutdown_allowed(workflow: Obj) -> None:
    """Stop and terminate refuse a completed workflow, as upstream does."""
    phase = (workflow.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed", "Error"):
        name = workflow["metadata"]["name"]
        raise ActionError(INTERNAL, f'cannot shutdown a completed workflow: workflow: "{name}"')
