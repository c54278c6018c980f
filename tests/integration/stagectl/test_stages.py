"""The stage controller in process against the release stack: ML runs saved and started through
the API reach their stages on the sim host's data controller, and the controller registers,
gates, waits for approval and cleans up, completing each node through the Argo server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from stagectl.runner import Leading, assemble
from tests.integration.stagectl.release_stack import GOOD_SCORECARD, ReleaseStack, eventually


@pytest.fixture
async def controller(release_stack: ReleaseStack) -> AsyncIterator[ReleaseStack]:
    """The controller leading (without an election) and the data controller ticking."""
    parts = assemble(
        release_stack.settings, pool=release_stack.pool, host_api=release_stack.stack.kube
    )
    task = asyncio.create_task(Leading(parts).run())
    data = release_stack.stack.world.host.data_argo
    assert data is not None
    data.start()
    try:
        yield release_stack
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await data.stop()


async def finished(stack: ReleaseStack, name: str) -> str:
    async def check() -> str | None:
        phase = stack.phase(name)
        return phase if phase in ("Succeeded", "Failed", "Error") else None

    return await eventually(check, what=f"{name} did not finish")


async def test_a_release_is_registered_gated_and_cleaned_up(controller: ReleaseStack) -> None:
    pipeline = await controller.save()
    name = await controller.run(pipeline)
    assert await finished(controller, name) == "Succeeded"
    [version] = await controller.versions()
    assert (version["number"], version["state"], version["verdict"]) == (1, "passed", "passed")
    assert version["release_outcome"] == "completed"
    assert version["scorecard"] == GOOD_SCORECARD
    prefix = "tenants/acme/models/churn/1/"
    assert controller.keys(prefix) == [
        prefix + "eval_scorecard.json",
        prefix + "lineage.json",
        prefix + "model.tgz",
    ]
    assert json.loads(controller.object(prefix + "eval_scorecard.json")) == GOOD_SCORECARD
    lineage = json.loads(controller.object(prefix + "lineage.json"))
    assert lineage["run"]["name"] == name
    assert lineage["pipeline"] == {"id": pipeline, "version": 1, "commit": None}
    assert lineage["parameters"] == {"day": "2026-01-01"}
    register = controller.node(name, "wm-register")
    gate = controller.node(name, "wm-gate")
    assert register is not None
    assert gate is not None
    outputs = {p["name"]: p.get("value") for p in register["outputs"]["parameters"]}
    assert outputs == {"version": "1"}
    verdict = {p["name"]: p.get("value") for p in gate["outputs"]["parameters"]}
    assert verdict["verdict"] == "passed"
    counts = controller.completions(name)
    assert sorted(counts.values()) == [1, 1, 1]
