"""The approval stage: a version that passed its gate waits for a person's decision
(``approvals``, decided once through the API, or expired after STAGE_APPROVAL_TIMEOUT). The
node succeeds either way and says which in ``decision``; the version records the decision.
A decision arrives on the NOTIFY the approvals table sends (``stagectl.approvals``), so the
stage returns None while it is pending."""

from __future__ import annotations

import asyncpg

from shared import stages as S
from shared.db.registry import ApprovalRow, RunRef, VersionChange, VersionState
from shared.db.registry_store import RegistryStore
from stagectl.outcomes import Outcome, approval_outcome
from stagectl.recording import commit
from stagectl.stages.context import ReleaseRun, record

# A version whose gate passed (a decision may have been made already).
_APPROVABLE = ("passed", "approved", "rejected", "expired")


async def approval(release: ReleaseRun, *, pool: asyncpg.Pool, expires_in: float) -> Outcome | None:
    async with RegistryStore.transaction(pool) as store:
        version = await store.version_for_run(release.run.uid)
        if version is None or version.state not in _APPROVABLE:
            asked = None
        else:
            asked = await store.request_approval(
                version, expires_in=expires_in, attempt=release.ref.attempt
            )
    if asked is None:
        message = "this run has no version that passed its gate to approve"
        return await record(pool, release, S.APPROVAL, Outcome.failed(S.APPROVAL, message))
    return await decided(pool, release.ref, asked, tenant=release.tenant)


async def decided(
    pool: asyncpg.Pool, ref: RunRef, approval: ApprovalRow, *, tenant: str
) -> Outcome | None:
    """The approval stage's outcome for a decision, recorded with the version's state (None
    while it is pending)."""
    outcome = approval_outcome(approval.state, approval.reason)
    if outcome is None:
        return None
    state: VersionState = "approved" if approval.state == "approved" else "rejected"
    if approval.state == "expired":
        state = "expired"
    change = VersionChange(approval.model_id, approval.version, state, only_from=("passed",))
    detail = {"decided_by": approval.decided_by, "state": approval.state}
    return await commit(pool, ref, S.APPROVAL, outcome, tenant=tenant, change=change, detail=detail)
