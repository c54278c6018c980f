"""The cleanup stage (the release's exit handler, or done without a node for a terminated or
deleted run): what a release that did not complete left behind is removed or marked, and the
version records how its release ended (``stagectl.outcomes.release_ending``)."""

from __future__ import annotations

from typing import Final

import asyncpg

from shared import stages as S
from shared.db.registry import VersionChange
from shared.db.registry_store import RegistryStore
from stagectl.outcomes import RUN_ENDED_REASON, Outcome, release_ending
from stagectl.s3_registry import RegistryObjects
from stagectl.stages.approval import decided
from stagectl.stages.context import ReleaseRun, record
from stagectl.workflow import root_phase

ACTOR: Final = "stagectl"


async def cleanup(
    release: ReleaseRun, *, pool: asyncpg.Pool, objects: RegistryObjects, deleted: bool = False
) -> Outcome:
    """``deleted``: the workflow is gone, and this is its last state's cleanup."""
    store = RegistryStore(pool)
    version = await store.version_for_run(release.run.uid)
    expired = await store.expire_pending(release.run.uid, actor=ACTOR, reason=RUN_ENDED_REASON)
    if expired is not None:
        # Recorded now, so the decision's NOTIFY finds the approval stage done.
        await decided(pool, release.ref, expired, tenant=release.tenant)
    removed = 0
    if version is not None and version.state == "registering":
        removed = await objects.delete_prefix(version.prefix)
    ending = release_ending(
        version_state=version.state if version else None,
        root_phase=root_phase(release.workflow),
        shutdown=release.run.shutdown,
        deleted=deleted,
    )
    message = f"release {ending}" + (
        f"; {removed} partial registry files removed" if removed else ""
    )
    change = None
    if version is not None:
        change = VersionChange(
            version.model_id,
            version.number,
            state="abandoned",
            only_from=("registering",),
            release_outcome=ending,
        )
    outcome = Outcome("Succeeded", {S.OUTCOME: ending}, message)
    return await record(pool, release, S.CLEANUP, outcome, change)
