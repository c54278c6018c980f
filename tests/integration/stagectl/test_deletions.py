"""A workflow deleted in the middle of its release is cleaned up from its last state: nothing
waits for a decision that can no longer complete anything, and the version says how the
release ended."""

from __future__ import annotations

from kubernetes_asyncio import client

from tests.integration.stagectl.release_stack import ReleaseStack, eventually
from tests.integration.stagectl.test_stages import waiting_for_approval

NS = "kubeopera-data-acme"


async def test_a_run_deleted_while_its_approval_waits_is_cleaned_up(
    controller: ReleaseStack,
) -> None:
    pipeline = await controller.save(approval=True)
    name = await controller.run(pipeline)
    uid = await waiting_for_approval(controller, name)
    await client.CustomObjectsApi(controller.stack.kube).delete_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", name
    )
    cleanup = await eventually(lambda: controller.outcome(uid, "cleanup"), what="no cleanup")
    assert cleanup["outputs"] == {"outcome": "deleted"}
    approval = await controller.pool.fetchrow(
        "SELECT state, reason FROM approvals WHERE run_uid = $1", uid
    )
    assert (approval["state"], approval["reason"]) == ("expired", "the run ended before a decision")
    [version] = await controller.versions()
    assert (version["state"], version["release_outcome"]) == ("expired", "deleted")

    async def completed() -> bool:
        stored = await controller.outcome(uid, "cleanup")
        approval_done = await controller.outcome(uid, "approval")
        return bool(stored and stored["completed"] and approval_done and approval_done["completed"])

    await eventually(completed, what="the deleted run's outcomes were never marked completed")


async def test_a_run_deleted_after_its_release_ended_is_left_as_it_ended(
    controller: ReleaseStack,
) -> None:
    pipeline = await controller.save()
    name = await controller.run(pipeline)
    uid = await eventually(
        lambda: controller.pool.fetchval(
            "SELECT run_uid FROM model_versions WHERE release_outcome IS NOT NULL"
        ),
        what="the release never ended",
    )
    await eventually(lambda: _completed(controller, uid))
    await client.CustomObjectsApi(controller.stack.kube).delete_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", name
    )
    # The deletion is handled once the watch delivers it; a later release of another run is
    # the observable point after which a wrong second cleanup would have been recorded.
    other = await controller.run(pipeline)
    await eventually(
        lambda: controller.pool.fetchval(
            "SELECT count(*) = 2 FROM model_versions WHERE release_outcome IS NOT NULL"
        ),
        what=f"{other} never ended",
    )
    rows = await controller.pool.fetch(
        "SELECT outcome FROM stage_outcomes WHERE run_uid = $1 AND stage = 'cleanup'", uid
    )
    assert [row["outcome"]["outputs"] for row in rows] == [{"outcome": "completed"}]
    version = await controller.pool.fetchrow(
        "SELECT release_outcome FROM model_versions WHERE run_uid = $1", uid
    )
    assert version["release_outcome"] == "completed"


async def _completed(stack: ReleaseStack, uid: str) -> bool:
    stored = await stack.outcome(uid, "cleanup")
    return bool(stored and stored["completed"])
