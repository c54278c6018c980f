"""Runs whose nodes Argo did not leave in ``status.nodes``: compressed into
``status.compressedNodes`` (a workflow too large for etcd) or offloaded to the controller's
database (``status.offloadNodeStatusVersion``, the nodes only through the Argo server's GET).
The stage controller sees their stages all the same, through ``shared.argo_status``."""

from __future__ import annotations

import pytest

from tests.integration.stagectl.release_stack import ReleaseStack, eventually


async def finished(stack: ReleaseStack, name: str) -> str:
    async def check() -> str | None:
        phase = stack.phase(name)
        return phase if phase in ("Succeeded", "Failed", "Error") else None

    return await eventually(check, what=f"{name} did not finish")


@pytest.mark.parametrize("mode", ["compressed", "offloaded"])
async def test_a_run_with_packed_nodes_has_its_stages_done(
    controller: ReleaseStack, mode: str
) -> None:
    controller.data_server.node_status.default = mode  # type: ignore[assignment]
    pipeline = await controller.save()
    name = await controller.run(pipeline)
    assert await finished(controller, name) == "Succeeded"
    stored = controller.stored_workflow(name)["status"]
    assert "nodes" not in stored  # the host's copy never showed the nodes
    field = "compressedNodes" if mode == "compressed" else "offloadNodeStatusVersion"
    assert stored[field]
    [version] = await controller.versions()
    assert (version["state"], version["release_outcome"]) == ("passed", "completed")
    for template in ("wm-register", "wm-gate", "wm-cleanup"):
        node = controller.node(name, template)
        assert node is not None, template
        assert node["phase"] == "Succeeded", template
    assert sorted(controller.completions(name).values()) == [1, 1, 1]
