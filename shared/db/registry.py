"""The model registry in PostgreSQL: ``models``, ``model_versions``, ``approvals`` and
``stage_outcomes`` (migration 0011).

Their SQL lives in two modules: this one holds the rows, the reads and a person's decisions
(``RegistryReader``: the apiserver's ``/models`` routes), and ``shared.db.registry_store`` the
stage controller's writes (``RegistryStore``, inside transactions: the stage outcome is the
commit point of a stage's work, so a version and the outcome that names it are written
together).

Reads are scoped to a tenant: ``tenant`` None (an administrator not acting for a tenant) reads
every tenant's, and another tenant's model is indistinguishable from a missing one.

A version's number is allocated once per run (``model_versions.run_uid`` is unique) while the
model's row is locked, so two runs of one model never race for a number, and a number is never
reused: a version whose registration never finished is marked ``abandoned``, not deleted (a
retry of the same run registers it again under its number, migration 0018).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, TypeAlias

import asyncpg

from shared.db.pool import translate_db_errors
from shared.errors import Conflict, NotFound

# NOTIFY channel of approval decisions (payload: the run's uid); the trigger of migration 0011
# sends it for every state change, whoever wrote it.
APPROVALS_CHANNEL: Final = "approvals"

VersionState = Literal[
    "registering",
    "registered",
    "passed",
    "failed",
    "approved",
    "rejected",
    "expired",
    "archived",
    "abandoned",
]
ApprovalState = Literal["pending", "approved", "rejected", "expired"]
# States a version can be archived from: any registered one (never one still registering).
_ARCHIVABLE: Final = ("registered", "passed", "failed", "approved", "rejected", "expired")
# A version in these states whose release recorded no ending yet is still being released (its
# gate or its approval to come): archiving it then would let the release continue on it.
_IN_FLIGHT: Final = ("registered", "passed")


@dataclass(frozen=True, slots=True)
class RunRef:
    """The workflow a stage belongs to, on the cluster that runs tenants' pipelines."""

    cluster: str
    namespace: str
    name: str
    uid: str
    # Which attempt of the run (its status.startedAt: an in-place retry starts a new one);
    # a stage's outcome belongs to one attempt (migration 0016).
    attempt: str = ""


@dataclass(frozen=True, slots=True)
class ModelRow:
    id: str
    tenant: str
    name: str
    production_version: int | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class VersionRow:
    model_id: str
    number: int
    cluster_id: str
    run_namespace: str
    run_name: str
    run_uid: str
    pipeline_id: str
    pipeline_version: int
    prefix: str  # where its files are in the artifact bucket: tenants/<t>/models/<m>/<n>/
    model_file: str  # the model artifact's name under prefix
    scorecard: dict[str, Any] | None
    verdict: str | None
    reasons: list[str]
    lineage: dict[str, Any] | None
    state: VersionState
    release_outcome: str | None
    archived_by: str | None
    archived_at: datetime | None
    created_at: datetime
    updated_at: datetime
    # The model's digest, 'sha256:<hex>' of the registered bytes (migration 0018); None until
    # registered, and for versions registered before it.
    digest: str | None = None


@dataclass(frozen=True, slots=True)
class ApprovalRow:
    run_uid: str
    model_id: str
    version: int
    cluster_id: str
    run_namespace: str
    run_name: str
    state: ApprovalState
    requested_at: datetime
    expires_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    reason: str | None
    attempt: str = ""  # the attempt whose approval stage asked (migration 0016)


@dataclass(frozen=True, slots=True)
class StageOutcome:
    run_uid: str
    stage: str
    cluster_id: str
    run_namespace: str
    run_name: str
    outcome: dict[str, Any]  # {"phase", "outputs": {name: str}, "message"}
    recorded_at: datetime
    completed_at: datetime | None  # the node was completed on the Argo server
    attempt: str = ""
    completed_rv: int | None = None  # the workflow's resourceVersion once it was

    @property
    def run(self) -> RunRef:
        return RunRef(
            self.cluster_id, self.run_namespace, self.run_name, self.run_uid, self.attempt
        )


@dataclass(frozen=True, slots=True)
class VersionChange:
    """What a stage changes on its run's version, written with its outcome: ``state`` only
    from one of ``only_from``; the other fields when given (``release_outcome`` only once)."""

    model_id: str
    number: int
    state: VersionState | None = None
    only_from: tuple[VersionState, ...] = ()
    verdict: str | None = None
    reasons: list[str] | None = None
    scorecard: dict[str, Any] | None = None
    lineage: dict[str, Any] | None = None
    release_outcome: str | None = None
    digest: str | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """The entry in the run's action history that goes with a stage's outcome."""

    tenant: str | None
    action: str
    outcome: str
    detail: dict[str, Any]
    actor: str = "stagectl"


@dataclass(frozen=True, slots=True)
class ModelPage:
    rows: list[ModelRow]  # up to limit + 1: the extra one says a next page exists
    total: int


MODEL_COLUMNS: Final = "id, tenant, name, production_version, created_at, updated_at"
VERSION_COLUMNS: Final = (
    "model_id, number, cluster_id, run_namespace, run_name, run_uid, pipeline_id, "
    "pipeline_version, prefix, model_file, scorecard, verdict, reasons, lineage, state, "
    "release_outcome, archived_by, archived_at, created_at, updated_at, digest"
)
APPROVAL_COLUMNS: Final = (
    "run_uid, model_id, version, cluster_id, run_namespace, run_name, state, requested_at, "
    "expires_at, decided_by, decided_at, reason, attempt"
)
# The same columns, of the approvals table aliased ``a``.
APPROVAL_A_COLUMNS: Final = ", ".join(
    f"a.{column.strip()}" for column in APPROVAL_COLUMNS.split(",")
)
OUTCOME_COLUMNS: Final = (
    "run_uid, stage, cluster_id, run_namespace, run_name, outcome, recorded_at, completed_at, "
    "attempt, completed_rv"
)
# "$N is the tenant, NULL for every tenant's" on a query over models.
_TENANT: Final = "($%d::text IS NULL OR tenant = $%d)"
Db: TypeAlias = asyncpg.Pool | asyncpg.Connection


def model_row(row: asyncpg.Record | None) -> ModelRow | None:
    return None if row is None else ModelRow(**dict(row))


def version_row(row: asyncpg.Record | None) -> VersionRow | None:
    return None if row is None else VersionRow(**dict(row))


def approval_row(row: asyncpg.Record | None) -> ApprovalRow | None:
    return None if row is None else ApprovalRow(**dict(row))


def outcome_row(row: asyncpg.Record | None) -> StageOutcome | None:
    return None if row is None else StageOutcome(**dict(row))


def _tenant(n: int) -> str:
    return _TENANT % (n, n)


class RegistryReader:
    """The apiserver's reads and a person's decisions, over the pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def page(
        self, *, tenant: str | None, after: tuple[str, str] | None, limit: int
    ) -> ModelPage:
        """Models by name, then id, after ``(name, id)``: ``limit + 1`` rows."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {MODEL_COLUMNS} FROM models WHERE {_tenant(1)} "
                "AND ($2::text IS NULL OR (name, id) > ($2, $3)) ORDER BY name, id LIMIT $4",
                tenant,
                after[0] if after else None,
                after[1] if after else "",
                limit + 1,
            )
            total = await self._pool.fetchval(
                f"SELECT count(*) FROM models WHERE {_tenant(1)}", tenant
            )
        return ModelPage([ModelRow(**dict(row)) for row in rows], int(total))

    async def find(self, model_id: str, *, tenant: str | None) -> ModelRow | None:
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {MODEL_COLUMNS} FROM models WHERE id = $1 AND {_tenant(2)}",
                model_id,
                tenant,
            )
        return model_row(row)

    async def find_by_name(self, tenant: str, name: str) -> ModelRow | None:
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {MODEL_COLUMNS} FROM models WHERE tenant = $1 AND name = $2", tenant, name
            )
        return model_row(row)

    async def versions(
        self, model_id: str, *, before: int | None = None, limit: int = 50
    ) -> list[VersionRow]:
        """Newest first, below ``before``: ``limit + 1`` rows. Every state, ``registering``
        (files being copied) and ``abandoned`` (never finished) included: callers filter."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {VERSION_COLUMNS} FROM model_versions WHERE model_id = $1 "
                "AND ($2::int IS NULL OR number < $2) ORDER BY number DESC LIMIT $3",
                model_id,
                before,
                limit + 1,
            )
        return [VersionRow(**dict(row)) for row in rows]

    async def version(self, model_id: str, number: int) -> VersionRow | None:
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {VERSION_COLUMNS} FROM model_versions WHERE model_id = $1 AND number = $2",
                model_id,
                number,
            )
        return version_row(row)

    async def version_for_run(self, run_uid: str) -> VersionRow | None:
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {VERSION_COLUMNS} FROM model_versions WHERE run_uid = $1", run_uid
            )
        return version_row(row)

    async def approvals(
        self, model_id: str, *, state: ApprovalState | None = "pending"
    ) -> list[ApprovalRow]:
        """The model's approvals in ``state`` (None: all), oldest request first."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE model_id = $1 "
                "AND ($2::text IS NULL OR state = $2) ORDER BY requested_at, run_uid",
                model_id,
                state,
            )
        return [ApprovalRow(**dict(row)) for row in rows]

    async def approval(self, run_uid: str) -> ApprovalRow | None:
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_uid = $1", run_uid
            )
        return approval_row(row)

    async def approval_of(self, model_id: str, run: str) -> ApprovalRow | None:
        """The model's approval of ``run`` (its uid or its workflow's name; the latest request
        when a name was used twice), whatever its state."""
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE model_id = $1 "
                "AND (run_uid = $2 OR run_name = $2) ORDER BY requested_at DESC LIMIT 1",
                model_id,
                run,
            )
        return approval_row(row)

    async def outcomes(self, run_uid: str) -> list[StageOutcome]:
        """What the stage controller recorded for one run, in the order it did."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {OUTCOME_COLUMNS} FROM stage_outcomes WHERE run_uid = $1 "
                "ORDER BY recorded_at",
                run_uid,
            )
        return [StageOutcome(**dict(row)) for row in rows]

    async def decide(
        self,
        model_id: str,
        run: str,
        *,
        tenant: str | None,
        approve: bool,
        actor: str,
        reason: str | None = None,
    ) -> ApprovalRow:
        """Approve or reject the release of ``run`` (its uid or its workflow's name) waiting
        for approval. Only a pending approval is decided, once: NotFound for no such approval
        (or another tenant's), Conflict when it was decided already. The stage controller
        hears the decision on ``APPROVALS_CHANNEL`` and completes the run's node."""
        state: ApprovalState = "approved" if approve else "rejected"
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"UPDATE approvals a SET state = $4, decided_by = $5, decided_at = now(), "
                f"reason = $6 FROM models m WHERE a.model_id = $1 AND m.id = a.model_id "
                f"AND (a.run_uid = $2 OR a.run_name = $2) AND a.state = 'pending' "
                f"AND ($3::text IS NULL OR m.tenant = $3) "
                f"RETURNING {APPROVAL_A_COLUMNS}",
                model_id,
                run,
                tenant,
                state,
                actor,
                reason,
            )
            if row is not None:
                return ApprovalRow(**dict(row))
            existing = await self._pool.fetchrow(
                "SELECT a.state, a.decided_by FROM approvals a JOIN models m ON m.id = a.model_id "
                "WHERE a.model_id = $1 AND (a.run_uid = $2 OR a.run_name = $2) "
                "AND ($3::text IS NULL OR m.tenant = $3) ORDER BY a.requested_at DESC LIMIT 1",
                model_id,
                run,
                tenant,
            )
        if existing is None:
            raise NotFound("no approval of this run for this model", details={"run": run})
        raise Conflict(
            f"this release was {existing['state']} already",
            details={"run": run, "state": existing["state"]},
        )

    async def archive(
        self, model_id: str, number: int, *, tenant: str | None, actor: str
    ) -> VersionRow:
        """Archive a registered version (again: no change). NotFound for no such version of a
        model of this tenant; Conflict for the production version, one not registered, one
        serving an environment (``model_deployments``), or one whose release is in flight (an
        approval pending, or no ending recorded while its gate or approval is to come)."""
        with translate_db_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                model = await conn.fetchrow(
                    f"SELECT {MODEL_COLUMNS} FROM models WHERE id = $1 AND {_tenant(2)} FOR UPDATE",
                    model_id,
                    tenant,
                )
                current = await conn.fetchrow(
                    f"SELECT {VERSION_COLUMNS} FROM model_versions "
                    "WHERE model_id = $1 AND number = $2",
                    model_id,
                    number,
                )
                if model is None or current is None:
                    raise NotFound(
                        "no such model version", details={"model": model_id, "version": number}
                    )
                if current["state"] == "archived":
                    return VersionRow(**dict(current))
                if model["production_version"] == number:
                    raise Conflict(
                        "the production version cannot be archived: promote another first",
                        details={"version": number},
                    )
                if current["state"] not in _ARCHIVABLE:
                    raise Conflict(
                        f"a version in state {current['state']} cannot be archived",
                        details={"version": number, "state": current["state"]},
                    )
                serving = await conn.fetch(
                    "SELECT environment FROM model_deployments WHERE model_id = $1 "
                    "AND version = $2 ORDER BY environment",
                    model_id,
                    number,
                )
                if serving:
                    where = " and ".join(str(r["environment"]) for r in serving)
                    raise Conflict(
                        f"version {number} serves {where}: deploy another version there first",
                        details={"version": number, "serving": [r["environment"] for r in serving]},
                    )
                waiting = await conn.fetchval(
                    "SELECT 1 FROM approvals WHERE model_id = $1 AND version = $2 "
                    "AND state = 'pending'",
                    model_id,
                    number,
                )
                if waiting or (
                    current["release_outcome"] is None and current["state"] in _IN_FLIGHT
                ):
                    raise Conflict(
                        f"version {number}'s release is in flight (run {current['run_name']}"
                        f"{': waiting for approval' if waiting else ''}); archive it once "
                        "the release ended",
                        details={
                            "version": number,
                            "run": {
                                "namespace": current["run_namespace"],
                                "name": current["run_name"],
                            },
                        },
                    )
                row = await conn.fetchrow(
                    "UPDATE model_versions SET state = 'archived', archived_by = $3, "
                    "archived_at = now(), updated_at = now() "
                    f"WHERE model_id = $1 AND number = $2 RETURNING {VERSION_COLUMNS}",
                    model_id,
                    number,
                    actor,
                )
        return VersionRow(**dict(row))

    async def mark_production(self, model_id: str, number: int | None) -> None:
        """Make ``number`` the model's production version (None: no production version).
        The promotion stages will call it; tests call it to set up a comparison."""
        with translate_db_errors():
            status = await self._pool.execute(
                "UPDATE models SET production_version = $2, updated_at = now() WHERE id = $1",
                model_id,
                number,
            )
        if status == "UPDATE 0":
            raise NotFound("no such model", details={"model": model_id})
