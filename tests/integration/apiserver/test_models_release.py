"""A release end to end through the /models routes: an ML pipeline with a release runs on the
sim host, the real stage controller registers and gates its model and waits for approval, a
person approves through the API, the run completes, and the version's scorecard and lineage
are served from the registry."""

from __future__ import annotations

import json

from tests.integration.compiler.pipeline_stack import headers
from tests.integration.stagectl.release_stack import (
    GOOD_SCORECARD,
    ReleaseStack,
    aws_credentials,
    controller,
    eventually,
    release_stack,
)

__all__ = ["aws_credentials", "controller", "release_stack"]

APPROVER = headers(permissions="models.read,models.approve", actor="carol@acme")


async def test_a_release_is_approved_through_the_api_and_its_files_are_served(
    controller: ReleaseStack,
) -> None:
    stack = controller.stack
    pipeline = await controller.save(approval=True)
    name = await controller.run(pipeline)

    async def waiting() -> list[dict[str, object]] | None:
        status, models = await stack.call("GET", "models", as_=APPROVER)
        assert status == 200, models
        if not models["items"]:
            return None
        status, model = await stack.call("GET", f"models/{models['items'][0]['id']}", as_=APPROVER)
        return [model] if model["pending_approvals"] else None

    [model] = await eventually(waiting, within=30, what="the release never waited for approval")
    [approval] = model["pending_approvals"]  # type: ignore[index]
    assert approval["run"]["name"] == name
    [version] = model["versions"]  # type: ignore[index]
    assert (version["number"], version["verdict"], version["state"]) == (1, "passed", "passed")

    status, decided = await stack.call(
        "POST", f"models/{model['id']}/approvals/{name}/approve", as_=APPROVER, json={}
    )
    assert status == 200, decided
    assert decided["approval"]["decided_by"] == "carol@acme"

    async def finished() -> str | None:
        phase = controller.phase(name)
        return phase if phase in ("Succeeded", "Failed", "Error") else None

    assert await eventually(finished, within=30) == "Succeeded"
    status, model = await stack.call("GET", f"models/{model['id']}", as_=APPROVER)
    assert model["pending_approvals"] == []
    assert model["versions"][0]["state"] == "approved"
    assert model["versions"][0]["release_outcome"] == "completed"

    files = f"models/{model['id']}/versions/1/files"
    response = await stack.api.get(f"/api/v1/{files}/eval_scorecard.json", headers=APPROVER)
    assert response.status == 200
    assert json.loads(await response.read()) == GOOD_SCORECARD
    status, lineage = await stack.call("GET", f"{files}/lineage.json", as_=APPROVER)
    assert status == 200, lineage
    assert name in json.dumps(lineage)
    status, _ = await stack.call("GET", f"{files}/model.pkl", as_=APPROVER)
    assert status == 404

    # The decision is in the run's action history, between the stage controller's entries.
    actions = await controller.pool.fetch(
        "SELECT action, actor, outcome FROM run_actions WHERE name = $1 ORDER BY id", name
    )
    # The route records its decision once the decision committed, and the decision's NOTIFY
    # may get stagectl's approval entry in first: those two in either order.
    entries = [tuple(a) for a in actions]
    assert entries[:3] == [
        ("run", "alice@acme", "succeeded"),
        ("stage_register", "stagectl", "succeeded"),
        ("stage_gate", "stagectl", "succeeded"),
    ]
    assert sorted(entries[3:5]) == [
        ("model_approve", "carol@acme", "succeeded"),
        ("stage_approval", "stagectl", "succeeded"),
    ]
    assert entries[5:] == [("stage_cleanup", "stagectl", "succeeded")]
