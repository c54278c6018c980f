"""A stage's work and its node's outputs come only from the outcome recorded in PostgreSQL, and
that outcome belongs to one attempt of the run: a value someone else put on a node is never
taken as the controller's, and an in-place retry is judged and cleaned up again."""

from __future__ import annotations

import json

from shared.db.registry import RegistryReader
from tests.integration.stagectl.release_stack import ReleaseStack, eventually
from tests.integration.stagectl.test_stages import (
    argo,
    finished,
    outputs_of,
    waiting_for_approval,
)

NS = "kubeopera-data-acme"


async def test_a_decision_preset_on_the_node_fails_the_release_instead_of_approving_it(
    controller: ReleaseStack,
) -> None:
    """The tenant sets ``decision=approved`` on its own run's approval node; the person
    rejects. The node is failed, the run does not succeed, the version stays rejected and the
    attempt is audited."""
    pipeline = await controller.save(approval=True)
    name = await controller.run(pipeline)
    uid = await waiting_for_approval(controller, name)
    await argo(controller).set_node(
        NS,
        name,
        node_field_selector="templateName=wm-approval",
        phase="",
        output_parameters={"decision": "approved"},
    )
    model_id = await controller.pool.fetchval("SELECT model_id FROM approvals")
    await RegistryReader(controller.pool).decide(
        model_id, name, tenant="acme", approve=False, actor="bob@acme", reason="no"
    )
    assert await finished(controller, name) == "Failed"
    node = controller.node(name, "wm-approval")
    assert node is not None
    assert node["phase"] == "Failed"
    assert "someone other than the stage controller" in node["message"]
    [version] = await controller.versions()
    assert (version["state"], version["release_outcome"]) == ("rejected", "rejected")
    audit = await controller.pool.fetchrow(
        "SELECT outcome, detail FROM run_actions WHERE run_uid = $1 AND action = 'stage_tampered'",
        uid,
    )
    assert audit is not None
    detail = json.loads(audit["detail"]) if isinstance(audit["detail"], str) else audit["detail"]
    assert (audit["outcome"], detail["found"], detail["recorded"]) == (
        "refused",
        {"decision": "approved"},
        {"decision": "rejected"},
    )


async def test_outputs_preset_to_the_recorded_values_complete_the_node(
    controller: ReleaseStack,
) -> None:
    """An earlier attempt of ours that set the outputs and died before resuming looks the same
    as a tenant who set exactly what was recorded: the node is resumed, not failed."""
    pipeline = await controller.save(approval=True)
    name = await controller.run(pipeline)
    await waiting_for_approval(controller, name)
    await argo(controller).set_node(
        NS,
        name,
        node_field_selector="templateName=wm-approval",
        phase="",
        output_parameters={"decision": "approved"},
    )
    model_id = await controller.pool.fetchval("SELECT model_id FROM approvals")
    await RegistryReader(controller.pool).decide(
        model_id, name, tenant="acme", approve=True, actor="alice@acme", reason="ok"
    )
    assert await finished(controller, name) == "Succeeded"
    assert outputs_of(controller.node(name, "wm-approval")) == {"decision": "approved"}


async def attempts(stack: ReleaseStack, uid: str, stage: str) -> list[dict[str, object]]:
    rows = await stack.pool.fetch(
        "SELECT attempt, outcome FROM stage_outcomes WHERE run_uid = $1 AND stage = $2 "
        "ORDER BY recorded_at",
        uid,
        stage,
    )
    return [dict(row["outcome"], attempt=row["attempt"]) for row in rows]


async def test_a_failed_run_retried_to_success_is_registered_and_cleaned_up_again(
    controller: ReleaseStack,
) -> None:
    pipeline = await controller.save(fail_train="param")
    name = await controller.run(pipeline)
    assert await finished(controller, name) == "Failed"
    uid = controller.uid(name)
    first = await eventually(lambda: controller.outcome(uid, "cleanup"))
    assert first["outputs"] == {"outcome": "not_registered"}
    assert await controller.versions() == []

    await argo(controller).retry(NS, name, parameters={"fail": "false"})
    assert await finished(controller, name) == "Succeeded"
    cleanups = await eventually(
        lambda: _two(attempts(controller, uid, "cleanup")), what="no second cleanup"
    )
    assert [c["outputs"] for c in cleanups] == [
        {"outcome": "not_registered"},
        {"outcome": "completed"},
    ]
    assert cleanups[0]["attempt"] != cleanups[1]["attempt"]
    [version] = await controller.versions()
    assert (version["state"], version["release_outcome"]) == ("passed", "completed")
    assert outputs_of(controller.node(name, "wm-cleanup")) == {"outcome": "completed"}


async def _two(rows: object) -> list[dict[str, object]] | None:
    found = await rows  # type: ignore[misc]
    return found if len(found) >= 2 else None


async def test_a_stage_failed_in_one_attempt_is_worked_again_in_the_next(
    controller: ReleaseStack,
) -> None:
    """Register fails (the scorecard is not JSON); a retry runs register again, as a new
    attempt with its own outcome, and cleanup again."""
    pipeline = await controller.save(scorecard="[0.9]")
    name = await controller.run(pipeline)
    assert await finished(controller, name) == "Failed"
    uid = controller.uid(name)
    await eventually(lambda: controller.outcome(uid, "cleanup"))
    await argo(controller).retry(NS, name)
    assert await finished(controller, name) == "Failed"
    registers = await eventually(lambda: _two(attempts(controller, uid, "register")))
    assert [r["phase"] for r in registers] == ["Failed", "Failed"]
    assert len({r["attempt"] for r in registers}) == 2
    cleanups = await eventually(lambda: _two(attempts(controller, uid, "cleanup")))
    assert len({c["attempt"] for c in cleanups}) == 2
