"""Completing a stage's suspend node through the data controller's Argo server, safely twice.

``complete`` selects the node by its template (``templateName=wm-<stage>``: one node per run).
A succeeded stage: ``PUT .../set`` fills the node's supplied output parameters (and message),
then ``PUT .../resume`` continues it, as Argo's UI completes a suspend node. A failed stage:
``set`` with phase ``Failed``, the message and the outputs ends the node at once, so no resume
follows. Either call may be repeated after a crash or by another leader: Argo answers a node
that no longer waits with "no suspend nodes matching" and outputs set before with "already
set" (workflow/util's ``updateSuspendedNode``), which here mean an earlier attempt got there
first. A workflow that is gone has nothing left to complete.
"""

from __future__ import annotations

from typing import Any, Final

from shared import stages as S
from shared.argo import ArgoRefused, ArgoServer
from shared.errors import NotFound
from stagectl.outcomes import Outcome

# Argo's words for "this node is not waiting for what you are sending any more".
_DONE_ALREADY: Final = (
    "no suspend nodes matching",
    "already set",
)


def node_selector(stage: str) -> str:
    return f"templateName={S.template_name(stage)}"


def _done_already(error: ArgoRefused) -> bool:
    return any(phrase in error.message for phrase in _DONE_ALREADY)


async def complete(
    argo: ArgoServer, namespace: str, name: str, stage: str, outcome: Outcome
) -> int:
    """Complete ``stage``'s node of workflow ``namespace/name`` with ``outcome``. Returns the
    workflow's resourceVersion after the last call that changed it (0: none did)."""
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
    except NotFound:
        return 0
    if outcome.phase == "Failed":
        return changed  # set has ended the node; resume would only say so
    try:
        answer = await argo.resume(namespace, name, node_field_selector=selector)
        changed = _resource_version(answer) or changed
    except ArgoRefused as exc:
        if not _done_already(exc):
            raise
    except NotFound:
        return changed
    return changed


def _resource_version(workflow: dict[str, Any]) -> int:
    value = (workflow.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(value))
    except ValueError:
        return 0
