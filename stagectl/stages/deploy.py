"""The deploy stage: the run's version served in staging, as a state machine whose progress is
stored (``stage_progress``), so a restart or a new leader continues where it was.

1. ``want`` (no progress yet): the version must be the run's own and must have passed its
   gate, as recorded in PostgreSQL (never the gate node's outputs, which a tenant can set).
   The version becomes staging's wanted version (``shared.db.deployments``, with a history
   entry unique to this run attempt, so a repeated step records one deployment) and the step
   becomes ``ready``. The stage controller's deployment reconciler
   (``stagectl.deployments``) applies it: the tenant's serving namespace, the
   InferenceService, its route and, at first deploy, its token.
2. ``ready``: the reconciler's observation of that generation decides: ready, the stage
   succeeds with the endpoint's URL; failed (KServe's condition message, or the release's
   ``readiness_deadline_seconds`` passed), the stage fails with that message; still
   deploying, look again in ``poll`` seconds. Staging given to another version meanwhile
   (a later run of the same model) fails this stage: this version never served.

The outcome is recorded at the stage's commit point like every stage's.
"""

from __future__ import annotations

from typing import Final

import asyncpg

from shared import stages as S
from shared.db.deployments import DeploymentStore, Wanted
from shared.db.registry_store import RegistryStore
from stagectl.outcomes import Later, Outcome
from stagectl.stages.context import ReleaseRun, record

ACTOR: Final = "stagectl"
WANT: Final = "want"
READY: Final = "ready"
# A version's gate passed (and maybe a decision was made after it): it may be deployed.
_DEPLOYABLE: Final = ("passed", "approved", "rejected", "expired")


async def deploy(
    release: ReleaseRun,
    *,
    pool: asyncpg.Pool,
    poll: float,
) -> Outcome | Later:
    """The stage's next step (see the module docstring): its outcome, recorded, or Later."""
    done = await _step(release, pool=pool, poll=poll)
    if isinstance(done, Later):
        return done
    return await record(pool, release, S.DEPLOY, done)


async def _step(release: ReleaseRun, *, pool: asyncpg.Pool, poll: float) -> Outcome | Later:
    ref = release.ref
    progress = await RegistryStore(pool).progress(ref.uid, S.DEPLOY, ref.attempt)
    serving = release.release.serving
    if serving is None:
        return Outcome.failed(S.DEPLOY, "the release has no serving block to deploy with")
    version = await RegistryStore(pool).version_for_run(ref.uid)
    if version is None or version.state not in _DEPLOYABLE:
        return Outcome.failed(S.DEPLOY, "this run has no version that passed its gate to deploy")
    if progress is None or progress[0] != READY:
        async with DeploymentStore(pool).transaction() as store:
            wanted = await store.want(
                Wanted(
                    model_id=version.model_id,
                    environment=S.STAGING,
                    version=version.number,
                    serving=serving.model_dump(mode="json"),
                    action="deploy",
                    actor=ACTOR,
                    deadline_seconds=float(serving.readiness_deadline_seconds),
                    run_uid=ref.uid,
                    attempt=ref.attempt,
                )
            )
        return Later(READY, {"generation": wanted.generation, "version": version.number}, poll)
    generation = int(progress[1].get("generation") or 0)
    row = await DeploymentStore(pool).get(version.model_id, S.STAGING)
    if row is None or (row.generation != generation and row.version != version.number):
        taken = "no version" if row is None else f"version {row.version}"
        return Outcome.failed(
            S.DEPLOY,
            f"staging was given {taken} before version {version.number} was ready",
        )
    if row.state == "ready":
        return Outcome(
            "Succeeded",
            {S.URL: row.url or ""},
            f"version {version.number} serves staging at {row.url}",
        )
    if row.state == "failed":
        return Outcome.failed(
            S.DEPLOY, f"version {version.number} did not become ready: {row.message or ''}"
        )
    return Later(READY, dict(progress[1]), poll)
