"""What every stage is given: the run and the release it carries out (``ReleaseRun``), and
its commit point (``record``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from shared.db.registry import RunRef, VersionChange
from shared.pipelines import Release
from stagectl.outcomes import Outcome
from stagectl.recording import commit
from stagectl.workflow import RunFacts


@dataclass(frozen=True, slots=True)
class ReleaseRun:
    """A run of an admitted ML pipeline version: who it is, and what its version releases
    (``release``, as validated when the version was saved)."""

    run: RunFacts
    ref: RunRef
    workflow: Mapping[str, Any]
    tenant: str
    pipeline_id: str
    pipeline_version: int
    release: Release
    definition: Mapping[str, Any]
    version_settings: Mapping[str, Any]

    @property
    def model(self) -> str:
        return self.release.model


async def record(
    pool: asyncpg.Pool,
    run: ReleaseRun,
    stage: str,
    outcome: Outcome,
    change: VersionChange | None = None,
    detail: dict[str, Any] | None = None,
) -> Outcome:
    """The stage's commit point for ``run``: the outcome recorded (or the one recorded before)."""
    return await commit(
        pool, run.ref, stage, outcome, tenant=run.tenant, change=change, detail=detail
    )
