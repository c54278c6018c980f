"""The model registry in PostgreSQL: ``models``, ``model_versions``, ``approvals`` and
``stage_outcomes`` (migration 0011).

The one module that holds their SQL. The stage controller writes through ``RegistryStore``
(inside transactions: the stage outcome is the commit point of a stage's work, so a version and
the outcome that names it are written together); the apiserver's ``/models`` routes read and
decide through ``RegistryReader`` over the pool.

Reads are scoped to a tenant: ``tenant`` None (an administrator not acting for a tenant) reads
every tenant's, and another tenant's model is indistinguishable from a missing one.

A version's number is allocated once per run (``model_versions.run_uid`` is unique) while the
model's row is locked, so two runs of one model never race for a number, and a number is never
reused: a version whose registration never finished is marked ``abandoned``, not deleted.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, TypeAlias

import asyncpg

from shared.db.audit import record_action
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


@dataclass(frozen=True, slots=True)
class RunRef:
    """The workflow a stage belongs to, on the cluster that runs tenants' pipelines."""

    cluster: str
    namespace: str
    name: str
    uid: str


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

    @property
    def run(self) -> RunRef:
        return RunRef(self.cluster_id, self.run_namespace, self.run_name, self.run_uid)


@dataclass(frozen=True, slots=True)
class ModelPage:
    rows: list[ModelRow]  # up to limit + 1: the extra one says a next page exists
    total: int


_MODEL: Final = "id, tenant, name, production_version, created_at, updated_at"
_VERSION: Final = (
    "model_id, number, cluster_id, run_namespace, run_name, run_uid, pipeline_id, "
    "pipeline_version, prefix, model_file, scorecard, verdict, reasons, lineage, state, "
    "release_outcome, archived_by, archived_at, created_at, updated_at"
)
_APPROVAL: Final = (
    "run_uid, model_id, version, cluster_id, run_namespace, run_name, state, requested_at, "
    "expires_at, decided_by, decided_at, reason"
)
# The same columns, of the approvals table aliased ``a``.
_APPROVAL_A: Final = ", ".join(f"a.{column.strip()}" for column in _APPROVAL.split(","))
_OUTCOME: Final = (
    "run_uid, stage, cluster_id, run_namespace, run_name, outcome, recorded_at, completed_at"
)
# "$N is the tenant, NULL for every tenant's" on a query over models.
_TENANT: Final = "($%d::text IS NULL OR tenant = $%d)"
Db: TypeAlias = asyncpg.Pool | asyncpg.Connection


def _model(row: asyncpg.Record | None) -> ModelRow | None:
    return None if row is None else ModelRow(**dict(row))


def _version(row: asyncpg.Record | None) -> VersionRow | None:
    return None if row is None else VersionRow(**dict(row))


def _approval(row: asyncpg.Record | None) -> ApprovalRow | None:
    return None if row is None else ApprovalRow(**dict(row))


def _outcome(row: asyncpg.Record | None) -> StageOutcome | None:
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
                f"SELECT {_MODEL} FROM models WHERE {_tenant(1)} "
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
                f"SELECT {_MODEL} FROM models WHERE id = $1 AND {_tenant(2)}", model_id, tenant
            )
        return _model(row)

    async def find_by_name(self, tenant: str, name: str) -> ModelRow | None:
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_MODEL} FROM models WHERE tenant = $1 AND name = $2", tenant, name
            )
        return _model(row)

    async def versions(
        self, model_id: str, *, before: int | None = None, limit: int = 50
    ) -> list[VersionRow]:
        """Newest first, below ``before``: ``limit + 1`` rows. Every state, ``registering``
        (files being copied) and ``abandoned`` (never finished) included: callers filter."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {_VERSION} FROM model_versions WHERE model_id = $1 "
                "AND ($2::int IS NULL OR number < $2) ORDER BY number DESC LIMIT $3",
                model_id,
                before,
                limit + 1,
            )
        return [VersionRow(**dict(row)) for row in rows]

    async def version(self, model_id: str, number: int) -> VersionRow | None:
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_VERSION} FROM model_versions WHERE model_id = $1 AND number = $2",
                model_id,
                number,
            )
        return _version(row)

    async def version_for_run(self, run_uid: str) -> VersionRow | None:
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_VERSION} FROM model_versions WHERE run_uid = $1", run_uid
            )
        return _version(row)

    async def approvals(
        self, model_id: str, *, state: ApprovalState | None = "pending"
    ) -> list[ApprovalRow]:
        """The model's approvals in ``state`` (None: all), oldest request first."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {_APPROVAL} FROM approvals WHERE model_id = $1 "
                "AND ($2::text IS NULL OR state = $2) ORDER BY requested_at, run_uid",
                model_id,
                state,
            )
        return [ApprovalRow(**dict(row)) for row in rows]

    async def approval(self, run_uid: str) -> ApprovalRow | None:
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_APPROVAL} FROM approvals WHERE run_uid = $1", run_uid
            )
        return _approval(row)

    async def approval_of(self, model_id: str, run: str) -> ApprovalRow | None:
        """The model's approval of ``run`` (its uid or its workflow's name; the latest request
        when a name was used twice), whatever its state."""
        with translate_db_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_APPROVAL} FROM approvals WHERE model_id = $1 "
                "AND (run_uid = $2 OR run_name = $2) ORDER BY requested_at DESC LIMIT 1",
                model_id,
                run,
            )
        return _approval(row)

    async def outcomes(self, run_uid: str) -> list[StageOutcome]:
        """What the stage controller recorded for one run, in the order it did."""
        with translate_db_errors():
            rows = await self._pool.fetch(
                f"SELECT {_OUTCOME} FROM stage_outcomes WHERE run_uid = $1 ORDER BY recorded_at",
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
                f"RETURNING {_APPROVAL_A}",
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
        model of this tenant; Conflict for the production version or one not registered."""
        with translate_db_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                model = await conn.fetchrow(
                    f"SELECT {_MODEL} FROM models WHERE id = $1 AND {_tenant(2)} FOR UPDATE",
                    model_id,
                    tenant,
                )
                current = await conn.fetchrow(
                    f"SELECT {_VERSION} FROM model_versions WHERE model_id = $1 AND number = $2",
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
                row = await conn.fetchrow(
                    "UPDATE model_versions SET state = 'archived', archived_by = $3, "
                    "archived_at = now(), updated_at = now() "
                    f"WHERE model_id = $1 AND number = $2 RETURNING {_VERSION}",
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


class RegistryStore:
    """The stage controller's queries over one connection (a transaction where it matters)."""

    def __init__(self, conn: Db) -> None:
        self._conn = conn

    @classmethod
    @contextlib.asynccontextmanager
    async def transaction(cls, pool: asyncpg.Pool) -> AsyncIterator[RegistryStore]:
        """A store over a connection in a transaction: committed when the block ends, rolled
        back when it raises."""
        with translate_db_errors():
            async with pool.acquire() as conn, conn.transaction():
                yield cls(conn)

    # --- stage outcomes -------------------------------------------------------------------
    async def outcome(self, run_uid: str, stage: str) -> StageOutcome | None:
        with translate_db_errors():
            row = await self._conn.fetchrow(
                f"SELECT {_OUTCOME} FROM stage_outcomes WHERE run_uid = $1 AND stage = $2",
                run_uid,
                stage,
            )
        return _outcome(row)

    async def record_outcome(
        self, run: RunRef, stage: str, outcome: dict[str, Any]
    ) -> tuple[StageOutcome, bool]:
        """Record a stage's outcome unless one is recorded already: the one recorded, and
        whether it is this one (the caller's other writes belong only with a new one)."""
        with translate_db_errors():
            row = await self._conn.fetchrow(
                "INSERT INTO stage_outcomes (run_uid, stage, cluster_id, run_namespace, run_name, "
                "outcome) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (run_uid, stage) DO NOTHING "
                f"RETURNING {_OUTCOME}",
                run.uid,
                stage,
                run.cluster,
                run.namespace,
                run.name,
                outcome,
            )
            inserted = row is not None
            if row is None:
                row = await self._conn.fetchrow(
                    f"SELECT {_OUTCOME} FROM stage_outcomes WHERE run_uid = $1 AND stage = $2",
                    run.uid,
                    stage,
                )
        found = _outcome(row)
        assert found is not None  # inserted, or there already
        return found, inserted

    async def mark_completed(self, run_uid: str, stage: str) -> None:
        with translate_db_errors():
            await self._conn.execute(
                "UPDATE stage_outcomes SET completed_at = coalesce(completed_at, now()) "
                "WHERE run_uid = $1 AND stage = $2",
                run_uid,
                stage,
            )

    async def open_outcomes(self, *, older_than: float = 0.0) -> list[StageOutcome]:
        """Outcomes recorded at least ``older_than`` seconds ago whose node was not completed
        yet (a crash in between, or a node that no longer waits and was never seen again)."""
        with translate_db_errors():
            rows = await self._conn.fetch(
                f"SELECT {_OUTCOME} FROM stage_outcomes WHERE completed_at IS NULL "
                "AND recorded_at <= now() - make_interval(secs => $1) ORDER BY recorded_at",
                older_than,
            )
        return [StageOutcome(**dict(row)) for row in rows]

    # --- models and versions --------------------------------------------------------------
    async def lock_model(self, tenant: str, name: str) -> ModelRow:
        """The tenant's model of that name, created if new, locked until the transaction ends
        (version numbers are allocated under this lock)."""
        with translate_db_errors():
            await self._conn.execute(
                "INSERT INTO models (id, tenant, name) VALUES ($1, $2, $3) "
                "ON CONFLICT (tenant, name) DO NOTHING",
                uuid.uuid4().hex[:16],
                tenant,
                name,
            )
            row = await self._conn.fetchrow(
                f"SELECT {_MODEL} FROM models WHERE tenant = $1 AND name = $2 FOR UPDATE",
                tenant,
                name,
            )
        found = _model(row)
        assert found is not None
        return found

    async def model(self, model_id: str) -> ModelRow | None:
        with translate_db_errors():
            row = await self._conn.fetchrow(f"SELECT {_MODEL} FROM models WHERE id = $1", model_id)
        return _model(row)

    async def version_for_run(self, run_uid: str) -> VersionRow | None:
        with translate_db_errors():
            row = await self._conn.fetchrow(
                f"SELECT {_VERSION} FROM model_versions WHERE run_uid = $1", run_uid
            )
        return _version(row)

    async def version(self, model_id: str, number: int) -> VersionRow | None:
        with translate_db_errors():
            row = await self._conn.fetchrow(
                f"SELECT {_VERSION} FROM model_versions WHERE model_id = $1 AND number = $2",
                model_id,
                number,
            )
        return _version(row)

    async def allocate_version(
        self,
        model: ModelRow,
        run: RunRef,
        *,
        pipeline_id: str,
        pipeline_version: int,
        prefix_of: Callable[[int], str],
        model_file: str,
    ) -> VersionRow:
        """The run's version of ``model`` (locked by ``lock_model``): the one it has, or the
        next number, allocated now in state ``registering``. ``prefix_of(number)`` is the
        registry prefix of a number."""
        existing = await self.version_for_run(run.uid)
        if existing is not None:
            return existing
        with translate_db_errors():
            number = int(
                await self._conn.fetchval(
                    "SELECT coalesce(max(number), 0) + 1 FROM model_versions WHERE model_id = $1",
                    model.id,
                )
            )
            row = await self._conn.fetchrow(
                "INSERT INTO model_versions (model_id, number, cluster_id, run_namespace, "
                "run_name, run_uid, pipeline_id, pipeline_version, prefix, model_file) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
                f"RETURNING {_VERSION}",
                model.id,
                number,
                run.cluster,
                run.namespace,
                run.name,
                run.uid,
                pipeline_id,
                pipeline_version,
                prefix_of(number),
                model_file,
            )
        found = _version(row)
        assert found is not None
        return found

    async def finish_registration(
        self,
        model_id: str,
        number: int,
        *,
        scorecard: dict[str, Any],
        lineage: dict[str, Any],
    ) -> None:
        """registering -> registered, with what identifies the version from now on."""
        with translate_db_errors():
            await self._conn.execute(
                "UPDATE model_versions SET scorecard = $3, lineage = $4, state = 'registered', "
                "updated_at = now() WHERE model_id = $1 AND number = $2 "
                "AND state = 'registering'",
                model_id,
                number,
                scorecard,
                lineage,
            )

    async def set_state(
        self,
        model_id: str,
        number: int,
        state: VersionState,
        *,
        only_from: tuple[VersionState, ...],
    ) -> bool:
        """Move a version to ``state`` if it is in one of ``only_from``; True when it moved."""
        with translate_db_errors():
            status = await self._conn.execute(
                "UPDATE model_versions SET state = $3, updated_at = now() "
                "WHERE model_id = $1 AND number = $2 AND state = ANY($4::text[])",
                model_id,
                number,
                state,
                list(only_from),
            )
        return bool(status != "UPDATE 0")

    async def record_verdict(
        self, model_id: str, number: int, *, passed: bool, reasons: list[str]
    ) -> None:
        """The gate's verdict and reasons; a registered version becomes passed or failed (an
        archived one keeps its state)."""
        verdict = "passed" if passed else "failed"
        with translate_db_errors():
            await self._conn.execute(
                "UPDATE model_versions SET verdict = $3, reasons = $4, updated_at = now(), "
                "state = CASE WHEN state = 'registered' THEN $3 ELSE state END "
                "WHERE model_id = $1 AND number = $2",
                model_id,
                number,
                verdict,
                reasons,
            )

    async def set_release_outcome(self, model_id: str, number: int, outcome: str) -> None:
        """How the version's release ended; written once (the first cleanup wins)."""
        with translate_db_errors():
            await self._conn.execute(
                "UPDATE model_versions SET release_outcome = $3, updated_at = now() "
                "WHERE model_id = $1 AND number = $2 AND release_outcome IS NULL",
                model_id,
                number,
                outcome,
            )

    # --- approvals ------------------------------------------------------------------------
    async def request_approval(self, version: VersionRow, *, expires_in: float) -> ApprovalRow:
        """The run's approval: the one requested already, or a new pending one expiring
        ``expires_in`` seconds from now (PostgreSQL's clock: the one expiry is judged by)."""
        with translate_db_errors():
            await self._conn.execute(
                "INSERT INTO approvals (run_uid, model_id, version, cluster_id, run_namespace, "
                "run_name, expires_at) "
                "VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7)) "
                "ON CONFLICT (run_uid) DO NOTHING",
                version.run_uid,
                version.model_id,
                version.number,
                version.cluster_id,
                version.run_namespace,
                version.run_name,
                expires_in,
            )
            row = await self._conn.fetchrow(
                f"SELECT {_APPROVAL} FROM approvals WHERE run_uid = $1", version.run_uid
            )
        found = _approval(row)
        assert found is not None
        return found

    async def approval(self, run_uid: str) -> ApprovalRow | None:
        with translate_db_errors():
            row = await self._conn.fetchrow(
                f"SELECT {_APPROVAL} FROM approvals WHERE run_uid = $1", run_uid
            )
        return _approval(row)

    async def expire_due(self, *, actor: str) -> list[str]:
        """Expire every pending approval past its time (rejected, reason ``expired``); the
        runs' uids."""
        with translate_db_errors():
            rows = await self._conn.fetch(
                "UPDATE approvals SET state = 'expired', decided_by = $1, decided_at = now(), "
                "reason = 'expired' WHERE state = 'pending' AND expires_at <= now() "
                "RETURNING run_uid",
                actor,
            )
        return [str(row["run_uid"]) for row in rows]

    async def expire_pending(self, run_uid: str, *, actor: str, reason: str) -> ApprovalRow | None:
        """Expire the run's approval if it is still pending (its run ended); the row then."""
        with translate_db_errors():
            row = await self._conn.fetchrow(
                "UPDATE approvals SET state = 'expired', decided_by = $2, decided_at = now(), "
                f"reason = $3 WHERE run_uid = $1 AND state = 'pending' RETURNING {_APPROVAL}",
                run_uid,
                actor,
                reason,
            )
        return _approval(row)

    async def decided_unfinished(self) -> list[ApprovalRow]:
        """Decided approvals whose approval stage was not completed yet (a decision the
        controller has not acted on: it was away, or the NOTIFY was missed)."""
        with translate_db_errors():
            rows = await self._conn.fetch(
                f"SELECT {_APPROVAL_A} "
                "FROM approvals a LEFT JOIN stage_outcomes o "
                "ON o.run_uid = a.run_uid AND o.stage = 'approval' "
                "WHERE a.state <> 'pending' AND (o.run_uid IS NULL OR o.completed_at IS NULL) "
                "ORDER BY a.decided_at"
            )
        return [ApprovalRow(**dict(row)) for row in rows]

    # --- the run's cluster and audit ------------------------------------------------------
    async def host_cluster_id(self) -> str:
        """The id the watcher records the host's runs under (``host`` before it ran once)."""
        with translate_db_errors():
            value = await self._conn.fetchval(
                "SELECT id FROM clusters WHERE is_host AND removed_at IS NULL "
                "ORDER BY registered DESC LIMIT 1"
            )
        return str(value) if value is not None else "host"

    async def audit(
        self,
        run: RunRef,
        *,
        tenant: str | None,
        action: str,
        outcome: str,
        detail: dict[str, Any],
        actor: str = "stagectl",
    ) -> None:
        """An entry in the run's action history (``run_actions``)."""
        await record_action(
            self._conn,
            cluster_id=run.cluster,
            namespace=run.namespace,
            name=run.name,
            run_uid=run.uid,
            tenant=tenant,
            actor=actor,
            action=action,
            parameters={},
            outcome=outcome,
            detail=detail,
        )

    async def refusal_audited(self, run_uid: str, stage: str) -> bool:
        """Whether a refusal of this run's stage is in the audit already (audited once)."""
        with translate_db_errors():
            found = await self._conn.fetchval(
                "SELECT 1 FROM run_actions WHERE run_uid = $1 AND action = 'stage_refused' "
                "AND detail->>'stage' = $2 LIMIT 1",
                run_uid,
                stage,
            )
        return found is not None
