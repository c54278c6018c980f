"""A workflow deleted in the middle of its release is cleaned up from its last state: nothing
waits for a decision that can no longer complete anything, and the version says how the
release ended."""

from __future__ import annotations

from kubernetes_asyncio import client

from shared.db.registry import RegistryReader
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


async def test_a_pipeline_is_not_deleted_while_a_run_of_it_is_releasing(
    controller: ReleaseStack,
) -> None:
    """Deleting the pipeline would leave the release unable to finish (stagectl admits stages
    only of recorded pipeline versions): the 409 names the run; once its release ended, the
    delete goes through."""
    pipeline = await controller.save(approval=True)
    name = await controller.run(pipeline)
    await waiting_for_approval(controller, name)
    status, refused = await controller.stack.call("DELETE", f"ml-pipelines/{pipeline}")
    assert status == 409, refused
    assert refused["details"]["runs"] == [f"{NS}/{name}"]
    assert name in refused["message"]
    model_id = await controller.pool.fetchval("SELECT model_id FROM approvals")
    await RegistryReader(controller.pool).decide(
        model_id, name, tenant="acme", approve=False, actor="bob@acme", reason="no"
    )
    await eventually(
        lambda: controller.pool.fetchval(
            "SELECT release_outcome FROM model_versions WHERE run_name = $1", name
        ),
        what="the release never ended",
    )

    async def deleted() -> bool:
        status, _ = await controller.stack.call("DELETE", f"ml-pipelines/{pipeline}")
        return status == 200

    # The watcher's record of the run may still say Running for a moment after it finished.
    await eventually(deleted, what="the pipeline was never deleted once its release ended")
