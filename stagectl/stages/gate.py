"""The gate stage: the registered version's scorecard judged against the release's thresholds
and, when asked, the production version's scorecard (``stagectl.gate``, pure). The verdict is
recorded on the version (``passed`` or ``failed``; an archived version keeps its state) with
the stage's outcome."""

from __future__ import annotations

import asyncpg

from shared import stages as S
from shared.db.registry import VersionChange, VersionState
from shared.db.registry_store import RegistryStore
from stagectl.gate import evaluate
from stagectl.outcomes import Outcome
from stagectl.stages.context import ReleaseRun, record


async def gate(release: ReleaseRun, *, pool: asyncpg.Pool) -> Outcome:
    settings = release.release.gate
    version, production = await RegistryStore(pool).version_with_production(release.run.uid)
    if settings.compare_to_production is None:
        production = None
    if version is None or version.scorecard is None:
        message = "this run registered no version to judge"
        return await record(pool, release, S.GATE, Outcome.failed(S.GATE, message))
    verdict = evaluate(version.scorecard, settings.model_dump(mode="json"), production)
    summary = "; ".join(verdict.reasons)
    message = f"version {version.number} {'passed' if verdict.passed else 'failed'}"
    outcome = Outcome(
        "Succeeded", verdict.outputs(), f"{message}: {summary}" if summary else message
    )
    state: VersionState = "passed" if verdict.passed else "failed"
    change = VersionChange(
        version.model_id,
        version.number,
        state=state,
        only_from=("registered",),  # an archived version keeps its state
        verdict=state,
        reasons=verdict.reasons,
    )
    return await record(pool, release, S.GATE, outcome, change)
