"""Completing a stage's suspend node through the data controller's Argo server, safely twice.

``complete`` selects the node by its template (``templateName=wm-<stage>``: one node per run).
A succeeded stage: ``PUT .../set`` fills the node's supplied output parameters (and message),
then ``PUT .../resume`` continues it, as Argo's UI completes a suspend node. A failed stage:
``set`` with phase ``Failed``, the message and the outputs ends the node at once, so no resume
follows. Either call may be repeated after a crash or by another leader: Argo answers a node
that no longer waits with "no suspend nodes matching" and outputs set before with "already
set" (workflow/util's ``updateSuspendedNode``). Neither is taken on trust: a tenant can set a
node's outputs too (a pre-set ``decision=approved``), so "already set" is read as an earlier
attempt of ours only when the node's outputs are the recorded outcome's. A node whose outputs
disagree with the record is failed (phase only: its outputs cannot be set again) and reported
as ``tampered``; the caller audits it and leaves the run alone. A workflow that is gone has
nothing left to complete.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared import stages as S
from shared.argo import ArgoRefused, ArgoServer
from shared.argo_status import as_mapping, as_sequence, nodes_of
from shared.errors import NotFound
from stagectl.outcomes import Outcome

# Argo's words for "this node is not waiting for what you are sending any more".
_NOT_WAITING: Final = "no suspend nodes matching"
_ALREADY_SET: Final = "already set"
_DONE_ALREADY: Final = (_NOT_WAITING, _ALREADY_SET)
TAMPERED_MESSAGE: Final = (
    "the node's outputs were set by someone other than the stage controller; the release stops here"
)


@dataclass(frozen=True, slots=True)
class Completion:
    """What completing a node did: the workflow's resourceVersion after the last call that
    changed it (0: none did), and, when the node's outputs were not the recorded outcome's,
    the outputs found on it."""

    resource_version: int = 0
    tampered: dict[str, str] | None = None


def node_selector(stage: str) -> str:
    return f"templateName={S.template_name(stage)}"


def _done_already(error: ArgoRefused) -> bool:
    return any(phrase in error.message for phrase in _DONE_ALREADY)


async def complete(
    argo: ArgoServer, namespace: str, name: str, stage: str, outcome: Outcome
) -> Completion:
    """Complete ``stage``'s node of workflow ``namespace/name`` with ``outcome`` (see the
    module docstring)."""
    selector = node_selector(stage)
    changed = 0
    try:
        answer = await argo.set_node(
            namespace,
            name,
            node_field_selector=selector,
            phase="Failed" if outcome.phase == "Failed" else "",
            message=outcome.message or None,
            output_parameters=outcome.outputs,
        )
        changed = _resource_version(answer)
    except ArgoRefused as exc:
        if not _done_already(exc):
            raise
        if _ALREADY_SET in exc.message:
            try:
                found = _outputs(await argo.get(namespace, name), stage)
            except NotFound:
                return Completion()
            if any(found.get(key) != value for key, value in outcome.outputs.items()):
                return await _fail_tampered(argo, namespace, name, stage, found)
            if outcome.phase == "Failed":  # our outputs, and the node still waits: end it
                return await _fail(argo, namespace, name, stage, outcome.message)
    except NotFound:
        return Completion()
    if outcome.phase == "Failed":
        return Completion(changed)  # set has ended the node; resume would only say so
    try:
        answer = await argo.resume(namespace, name, node_field_selector=selector)
        changed = _resource_version(answer) or changed
    except ArgoRefused as exc:
        if not _done_already(exc):
            raise
    except NotFound:
        return Completion(changed)
    return Completion(changed)


async def _fail(
    argo: ArgoServer, namespace: str, name: str, stage: str, message: str
) -> Completion:
    """End the waiting node as Failed with ``message`` and no outputs (0: it no longer waits)."""
    try:
        answer = await argo.set_node(
            namespace,
            name,
            node_field_selector=node_selector(stage),
            phase="Failed",
            message=message,
        )
    except ArgoRefused as exc:
        if _NOT_WAITING not in exc.message:
            raise
        return Completion()
    except NotFound:
        return Completion()
    return Completion(_resource_version(answer))


async def _fail_tampered(
    argo: ArgoServer, namespace: str, name: str, stage: str, found: dict[str, str]
) -> Completion:
    failed = await _fail(argo, namespace, name, stage, TAMPERED_MESSAGE)
    return Completion(failed.resource_version, tampered=found)


def _outputs(workflow: Mapping[str, Any], stage: str) -> dict[str, str]:
    """The output parameters set on ``stage``'s node (one per run)."""
    template = S.template_name(stage)
    for raw in nodes_of(workflow).values():
        node = as_mapping(raw)
        if node.get("templateName") != template:
            continue
        found = {}
        for entry in as_sequence(as_mapping(node.get("outputs")).get("parameters")):
            entry = as_mapping(entry)
            if isinstance(entry.get("name"), str) and isinstance(entry.get("value"), str):
                found[str(entry["name"])] = str(entry["value"])
        return found
    return {}


def _resource_version(workflow: dict[str, Any]) -> int:
    value = (workflow.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(value))
    except ValueError:
        return 0
