"""The stage controller in process against the release stack: ML runs saved and started through
the API reach their stages on the sim host's data controller, and the controller registers,
gates, waits for approval and cleans up, completing each node through the Argo server."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
from prometheus_client import generate_latest

from shared.argo import ArgoServer
from shared.db.registry import RegistryReader
from sim.argo.server import DATA_ARGO_NAMESPACE, DATA_ARGO_SERVICE
from tests.integration.stagectl.holding import HoldingS3, registry_copy
from tests.integration.stagectl.release_stack import (
    BUCKET,
    GOOD_SCORECARD,
    ReleaseStack,
    eventually,
    running_controller,
)


def argo(stack: ReleaseStack) -> ArgoServer:
    return ArgoServer(stack.stack.kube, namespace=DATA_ARGO_NAMESPACE, service=DATA_ARGO_SERVICE)


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
    model = controller.object(output_key(controller, name, "train"))
    assert controller.object(prefix + "model.tgz") == model
    assert version["digest"] == "sha256:" + hashlib.sha256(model).hexdigest()
    lineage = json.loads(controller.object(prefix + "lineage.json"))
    assert lineage["digest"] == version["digest"]
    assert version["lineage"] == lineage
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
    exposed = generate_latest().decode()
    for stage in ("register", "gate", "cleanup"):
        assert f'wm_stagectl_stages_total{{phase="Succeeded",stage="{stage}"}}' in exposed
        assert f'wm_stagectl_stage_seconds_count{{stage="{stage}"}}' in exposed


def outputs_of(node: dict[str, object] | None) -> dict[str, object]:
    assert node is not None
    params = (node.get("outputs") or {}).get("parameters") or []  # type: ignore[union-attr]
    return {p["name"]: p.get("value") for p in params}


async def test_a_failed_verdict_skips_approval_and_records_how_the_release_ended(
    controller: ReleaseStack,
) -> None:
    pipeline = await controller.save(threshold=0.95, approval=True)
    name = await controller.run(pipeline)
    assert await finished(controller, name) == "Succeeded"
    [version] = await controller.versions()
    assert (version["state"], version["verdict"]) == ("failed", "failed")
    assert version["release_outcome"] == "gate_failed"
    assert "auc" in version["reasons"][0]
    verdict = outputs_of(controller.node(name, "wm-gate"))
    assert verdict["verdict"] == "failed"
    assert json.loads(str(verdict["reasons"])) == version["reasons"]
    approval = controller.node(name, "wm-approval")
    assert approval is None or approval["phase"] in ("Skipped", "Omitted")
    assert await controller.pool.fetchval("SELECT count(*) FROM approvals") == 0


async def waiting_for_approval(stack: ReleaseStack, name: str) -> str:
    async def pending() -> str | None:
        return await stack.pool.fetchval(
            "SELECT run_uid FROM approvals WHERE run_name = $1 AND state = 'pending'", name
        )

    return await eventually(pending, what=f"{name} never asked for approval")


async def test_an_approval_decided_through_the_registry_completes_the_node(
    controller: ReleaseStack,
) -> None:
    pipeline = await controller.save(approval=True)
    name = await controller.run(pipeline)
    uid = await waiting_for_approval(controller, name)
    node = controller.node(name, "wm-approval")
    assert node is not None
    assert node["phase"] == "Running"
    model_id = await controller.pool.fetchval("SELECT model_id FROM approvals")
    decided = await RegistryReader(controller.pool).decide(
        model_id, name, tenant="acme", approve=True, actor="alice@acme", reason="looks good"
    )
    assert decided.run_uid == uid
    assert await finished(controller, name) == "Succeeded"
    assert outputs_of(controller.node(name, "wm-approval")) == {"decision": "approved"}
    [version] = await controller.versions()
    assert (version["state"], version["release_outcome"]) == ("approved", "completed")
    actions = await controller.pool.fetch(
        "SELECT action, outcome FROM run_actions WHERE run_uid = $1 ORDER BY id", uid
    )
    assert [a["action"] for a in actions] == [
        "stage_register",
        "stage_gate",
        "stage_approval",
        "stage_cleanup",
    ]
    assert sorted(controller.completions(name).values()) == [1, 1, 1, 1]


async def test_a_rejected_approval_completes_the_node_and_ends_the_release(
    controller: ReleaseStack,
) -> None:
    pipeline = await controller.save(approval=True)
    name = await controller.run(pipeline)
    await waiting_for_approval(controller, name)
    model_id = await controller.pool.fetchval("SELECT model_id FROM approvals")
    await RegistryReader(controller.pool).decide(
        model_id, name, tenant="acme", approve=False, actor="bob@acme", reason="recall too low"
    )
    assert await finished(controller, name) == "Succeeded"
    assert outputs_of(controller.node(name, "wm-approval")) == {"decision": "rejected"}
    [version] = await controller.versions()
    assert (version["state"], version["release_outcome"]) == ("rejected", "rejected")
    approval = await controller.pool.fetchrow("SELECT state, decided_by, reason FROM approvals")
    assert dict(approval) == {
        "state": "rejected",
        "decided_by": "bob@acme",
        "reason": "recall too low",
    }
    assert sorted(controller.completions(name).values()) == [1, 1, 1, 1]


async def test_an_approval_nobody_decides_expires_as_rejected(controller: ReleaseStack) -> None:
    pipeline = await controller.save(approval=True)
    name = await controller.run(pipeline)
    uid = await waiting_for_approval(controller, name)
    await controller.pool.execute(
        "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE run_uid = $1", uid
    )
    assert await finished(controller, name) == "Succeeded"
    assert outputs_of(controller.node(name, "wm-approval")) == {"decision": "rejected"}
    row = await controller.pool.fetchrow("SELECT * FROM approvals WHERE run_uid = $1", uid)
    assert (row["state"], row["reason"], row["decided_by"]) == ("expired", "expired", "stagectl")
    [version] = await controller.versions()
    assert (version["state"], version["release_outcome"]) == ("expired", "expired")


async def test_a_stopped_release_expires_its_pending_approval(controller: ReleaseStack) -> None:
    pipeline = await controller.save(approval=True)
    name = await controller.run(pipeline)
    uid = await waiting_for_approval(controller, name)
    await argo(controller).stop("kubeopera-data-acme", name)
    assert await finished(controller, name) == "Failed"
    cleanup = await eventually(lambda: controller.outcome(uid, "cleanup"))
    assert cleanup["outputs"] == {"outcome": "stopped"}
    row = await controller.pool.fetchrow("SELECT * FROM approvals WHERE run_uid = $1", uid)
    assert (row["state"], row["reason"]) == ("expired", "the run ended before a decision")
    [version] = await controller.versions()
    assert version["release_outcome"] == "stopped"


@pytest.mark.parametrize(
    ("scorecard", "message"),
    [
        (None, "is not valid JSON"),
        ("[0.9]", "is not a JSON object"),
        ('{"auc": 1e999}', "too large"),
    ],
)
async def test_a_malformed_scorecard_fails_the_stage_with_a_message_the_tenant_can_act_on(
    controller: ReleaseStack, scorecard: str | None, message: str
) -> None:
    pipeline = await controller.save(scorecard=scorecard)
    name = await controller.run(pipeline)
    assert await finished(controller, name) == "Failed"
    register = controller.node(name, "wm-register")
    assert register is not None
    assert register["phase"] == "Failed"
    assert message in register["message"]
    assert "artifact 'scorecard' of step 'evaluate'" in register["message"]
    assert await controller.versions() == []
    assert controller.keys("tenants/acme/models/") == []
    cleanup = await controller.outcome(controller.uid(name), "cleanup")
    assert cleanup is not None
    assert cleanup["outputs"] == {"outcome": "not_registered"}


async def test_the_gate_compares_with_the_production_version(controller: ReleaseStack) -> None:
    first = await controller.save(compare=True)
    name = await controller.run(first)
    assert await finished(controller, name) == "Succeeded"
    [version] = await controller.versions()
    await RegistryReader(controller.pool).mark_production(version["model_id"], 1)
    worse = await controller.save("churn-2", scorecard=json.dumps({"auc": 0.85}), compare=True)
    name = await controller.run(worse)
    assert await finished(controller, name) == "Succeeded"
    versions = await controller.versions()
    assert [(v["number"], v["state"]) for v in versions] == [(1, "passed"), (2, "failed")]
    assert "production" in " ".join(versions[1]["reasons"])


async def test_a_model_released_twice_is_gated_against_the_first_as_production(
    controller: ReleaseStack,
) -> None:
    """register → gate → approval, twice: the second gated against the first, marked production
    through the registry (promotion arrives with serving), within the allowed regression."""
    reader = RegistryReader(controller.pool)

    async def released(pipeline: str) -> str:
        name = await controller.run(pipeline)
        await waiting_for_approval(controller, name)
        model_id = await controller.pool.fetchval(
            "SELECT model_id FROM approvals WHERE run_name = $1", name
        )
        await reader.decide(
            model_id, name, tenant="acme", approve=True, actor="alice@acme", reason="ok"
        )
        assert await finished(controller, name) == "Succeeded"
        assert outputs_of(controller.node(name, "wm-approval")) == {"decision": "approved"}
        return str(model_id)

    model_id = await released(await controller.save(compare=True, approval=True))
    await reader.mark_production(model_id, 1)
    close = json.dumps({"auc": 0.895, "loss": 0.2})  # 0.015 below production: within 0.02
    await released(await controller.save("churn-2", scorecard=close, compare=True, approval=True))
    versions = await controller.versions()
    assert [(v["number"], v["state"], v["release_outcome"]) for v in versions] == [
        (1, "approved", "completed"),
        (2, "approved", "completed"),
    ]
    assert versions[1]["verdict"] == "passed"
    # The first had nothing to compare with; the second was compared, and within the margin.
    assert "no version is in production" in " ".join(versions[0]["reasons"])
    assert versions[1]["reasons"] == []


async def test_a_scorecard_rewritten_after_it_was_checked_is_not_registered(
    release_stack: ReleaseStack,
) -> None:
    """The tenant's scorecard was checked, then rewritten (to a better one, valid JSON) before
    the copy into the registry ran. moto ignores the copy's If-Match (S3 refuses it), so the
    newer bytes are copied; their digest is not the one checked, and the attempt fails: the
    version is abandoned, its files removed, and nothing the stage did not check is kept."""
    stack = release_stack
    proxy = HoldingS3(stack.moto)
    await proxy.start()
    try:
        proxy.hold = lambda request: (
            registry_copy(request) and request.path.endswith("eval_scorecard.json")
        )
        async with running_controller(stack, S3_ENDPOINT_URL=proxy.url):
            pipeline = await stack.save()
            name = await stack.run(pipeline)
            await asyncio.wait_for(proxy.gate.arrived.wait(), 60)
            source = output_key(stack, name, "evaluate")
            stack.s3().put_object(Bucket=BUCKET, Key=source, Body=b'{"auc": 0.99}')
            proxy.hold = None
            proxy.gate.release(proceed=True)
            assert await finished(stack, name) == "Failed"
    finally:
        await proxy.stop()
    register = stack.node(name, "wm-register")
    assert register is not None
    assert register["message"].startswith(
        "the scorecard (artifact 'scorecard' of step 'evaluate') was written again after it "
        "was checked"
    )
    assert "retry the run" in register["message"]
    [version] = await stack.versions()
    assert (version["state"], version["release_outcome"]) == ("abandoned", "abandoned")
    assert (version["scorecard"], version["digest"]) == (None, None)
    assert stack.keys(version["prefix"]) == []


def output_key(stack: ReleaseStack, name: str, step: str) -> str:
    """Where the step's (only) output artifact is stored, as the run's status says."""
    node = next(
        node
        for node in stack.workflow(name)["status"]["nodes"].values()
        if node.get("displayName") == step
    )
    return str(node["outputs"]["artifacts"][0]["s3"]["key"])


async def test_a_terminated_release_is_cleaned_up_without_its_exit_handler(
    controller: ReleaseStack,
) -> None:
    """Argo runs no exit handler for a terminated run; the controller still records how the
    release ended and expires what waits for a decision."""
    pipeline = await controller.save(approval=True)
    name = await controller.run(pipeline)
    uid = await waiting_for_approval(controller, name)
    await argo(controller).terminate("kubeopera-data-acme", name)
    assert await finished(controller, name) == "Failed"
    cleanup = await eventually(lambda: controller.outcome(uid, "cleanup"))
    assert cleanup["outputs"] == {"outcome": "stopped"}
    assert controller.node(name, "wm-cleanup") is None
    row = await controller.pool.fetchrow("SELECT * FROM approvals WHERE run_uid = $1", uid)
    assert (row["state"], row["reason"]) == ("expired", "the run ended before a decision")
    [version] = await controller.versions()
    assert version["release_outcome"] == "stopped"

    async def completed() -> bool:
        stored = await controller.outcome(uid, "cleanup")
        return bool(stored and stored["completed"])

    await eventually(completed)
