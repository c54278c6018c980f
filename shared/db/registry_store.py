"""The stage controller's writes to the model registry (``shared.db.registry`` holds the rows,
the reads and a person's decisions): stage outcomes, versions allocated and registered, gate
verdicts, approvals requested and expired, and the run's audit entries.

Every method runs on the connection it is given, inside the transaction the stage holds
(``RegistryStore.transaction``): a stage's outcome and the writes that go with it commit
together (``stagectl.recording``).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg

from shared.db.audit import ACTION_COLUMNS, record_action
from shared.db.pool import translate_db_errors
from shared.db.registry import (
    APPROVAL_A_COLUMNS,
    APPROVAL_COLUMNS,
    MODEL_COLUMNS,
    OUTCOME_COLUMNS,
    VERSION_COLUMNS,
    ApprovalRow,
    AuditEntry,
    Db,
    ModelRow,
    RunRef,
    StageOutcome,
    VersionChange,
    VersionRow,
    approval_row,
    model_row,
    outcome_row,
    version_row,
)


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
    async def outcome(self, run_uid: str, stage: str, attempt: str) -> StageOutcome | None:
        """The outcome the run's ``attempt`` recorded for ``stage`` (migration 0016)."""
        with translate_db_errors():
            row = await self._conn.fetchrow(
                f"SELECT {OUTCOME_COLUMNS} FROM stage_outcomes "
                "WHERE run_uid = $1 AND stage = $2 AND attempt = $3",
                run_uid,
                stage,
                attempt,
            )
        return outcome_row(row)

    async def outcomes(self, run_uid: str, stage: str, started: str) -> list[StageOutcome]:
        """Every outcome of ``stage`` recorded by the run's attempts that started at
        ``started`` (``started`` itself and ``started#n``), oldest first."""
        with translate_db_errors():
            rows = await self._conn.fetch(
                f"SELECT {OUTCOME_COLUMNS} FROM stage_outcomes "
                "WHERE run_uid = $1 AND stage = $2 "
                "AND (attempt = $3 OR left(attempt, length($3) + 1) = $3 || '#') "
                "ORDER BY recorded_at",
                run_uid,
                stage,
                started,
            )
        return [StageOutcome(**dict(row)) for row in rows]

    async def record_outcome(
        self,
        run: RunRef,
        stage: str,
        outcome: dict[str, Any],
        *,
        audit: AuditEntry,
        change: VersionChange | None = None,
    ) -> tuple[StageOutcome, bool]:
        """Record a stage's outcome unless one is recorded already, and only with a new one
        the run's audit entry and the version's ``change``: one statement, so one round trip
        and all or nothing. The outcome recorded, and whether it is this one."""
        change = change or VersionChange(model_id="", number=0)
        with translate_db_errors():
            row = await self._conn.fetchrow(
                "WITH o AS (INSERT INTO stage_outcomes (run_uid, stage, cluster_id, run_namespace, "
                "run_name, outcome, attempt) VALUES ($1, $2, $3, $4, $5, $6, $21) "
                f"ON CONFLICT (run_uid, stage, attempt) DO NOTHING RETURNING {OUTCOME_COLUMNS}), "
                f"a AS (INSERT INTO run_actions ({ACTION_COLUMNS}) SELECT $3, $4, $5, $1, $7, $8, "
                "$9, '{}'::jsonb, $10, $11 FROM o), "
                "v AS (UPDATE model_versions SET "
                "state = CASE WHEN state = ANY($14::text[]) THEN coalesce($13, state) "
                "ELSE state END, verdict = coalesce($15, verdict), "
                "reasons = coalesce($16, reasons), scorecard = coalesce($17, scorecard), "
                "lineage = coalesce($18, lineage), "
                "release_outcome = coalesce($19, release_outcome), "
                "digest = coalesce($22, digest), updated_at = now() "
                "WHERE model_id = $12 AND number = $20 AND EXISTS (SELECT 1 FROM o)) "
                f"SELECT {OUTCOME_COLUMNS} FROM o",
                run.uid,
                stage,
                run.cluster,
                run.namespace,
                run.name,
                outcome,
                audit.tenant,
                audit.actor,
                audit.action,
                audit.outcome,
                json.loads(json.dumps(audit.detail, default=str)),
                change.model_id,
                change.state,
                list(change.only_from),
                change.verdict,
                change.reasons,
                change.scorecard,
                change.lineage,
                change.release_outcome,
                change.number,
                run.attempt,
                change.digest,
            )
            inserted = row is not None
            if row is None:
                row = await self._conn.fetchrow(
                    f"SELECT {OUTCOME_COLUMNS} FROM stage_outcomes "
                    "WHERE run_uid = $1 AND stage = $2 AND attempt = $3",
                    run.uid,
                    stage,
                    run.attempt,
                )
        found = outcome_row(row)
        assert found is not None  # inserted, or there already
        return found, inserted

    async def mark_completed(
        self, run_uid: str, stage: str, attempt: str, *, resource_version: int = 0
    ) -> None:
        """The attempt's node is completed; ``resource_version``: the workflow's once it was
        (0: not known)."""
        with translate_db_errors():
            await self._conn.execute(
                "UPDATE stage_outcomes SET completed_at = coalesce(completed_at, now()), "
                "completed_rv = greatest(completed_rv, nullif($4, 0)) "
                "WHERE run_uid = $1 AND stage = $2 AND attempt = $3",
                run_uid,
                stage,
                attempt,
                resource_version,
            )

    async def progress(
        self, run_uid: str, stage: str, attempt: str
    ) -> tuple[str, dict[str, Any]] | None:
        """A long stage's stored progress in this attempt: its step and state."""
        with translate_db_errors():
            row = await self._conn.fetchrow(
                "SELECT step, state FROM stage_progress "
                "WHERE run_uid = $1 AND stage = $2 AND attempt = $3",
                run_uid,
                stage,
                attempt,
            )
        return None if row is None else (str(row["step"]), dict(row["state"]))

    async def save_progress(
        self, run_uid: str, stage: str, attempt: str, *, step: str, state: dict[str, Any]
    ) -> None:
        with translate_db_errors():
            await self._conn.execute(
                "INSERT INTO stage_progress (run_uid, stage, attempt, step, state) "
                "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_uid, stage, attempt) "
                "DO UPDATE SET step = EXCLUDED.step, state = EXCLUDED.state, updated_at = now()",
                run_uid,
                stage,
                attempt,
                step,
                state,
            )

    async def open_outcomes(self, *, older_than: float = 0.0) -> list[StageOutcome]:
        """Outcomes recorded at least ``older_than`` seconds ago whose node was not completed
        yet (a crash in between, or a node that no longer waits and was never seen again)."""
        with translate_db_errors():
            rows = await self._conn.fetch(
                f"SELECT {OUTCOME_COLUMNS} FROM stage_outcomes WHERE completed_at IS NULL "
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
                f"SELECT {MODEL_COLUMNS} FROM models WHERE tenant = $1 AND name = $2 FOR UPDATE",
                tenant,
                name,
            )
        found = model_row(row)
        assert found is not None
        return found

    async def model(self, model_id: str) -> ModelRow | None:
        with translate_db_errors():
            row = await self._conn.fetchrow(
                f"SELECT {MODEL_COLUMNS} FROM models WHERE id = $1", model_id
            )
        return model_row(row)

    async def version_with_production(
        self, run_uid: str
    ) -> tuple[VersionRow | None, dict[str, Any] | None]:
        """The run's version and, when its model has another version in production, that
        version's scorecard: what the gate judges, in one query."""
        columns = ", ".join(f"v.{name.strip()}" for name in VERSION_COLUMNS.split(","))
        with translate_db_errors():
            row = await self._conn.fetchrow(
                f"SELECT {columns}, p.scorecard AS production_scorecard FROM model_versions v "
                "JOIN models m ON m.id = v.model_id LEFT JOIN model_versions p "
                "ON p.model_id = m.id AND p.number = m.production_version "
                "AND p.number <> v.number WHERE v.run_uid = $1",
                run_uid,
            )
        if row is None:
            return None, None
        fields = dict(row)
        production = fields.pop("production_scorecard")
        return VersionRow(**fields), production

    async def version_for_run(self, run_uid: str) -> VersionRow | None:
        with translate_db_errors():
            row = await self._conn.fetchrow(
                f"SELECT {VERSION_COLUMNS} FROM model_versions WHERE run_uid = $1", run_uid
            )
        return version_row(row)

    async def version(self, model_id: str, number: int) -> VersionRow | None:
        with translate_db_errors():
            row = await self._conn.fetchrow(
                f"SELECT {VERSION_COLUMNS} FROM model_versions WHERE model_id = $1 AND number = $2",
                model_id,
                number,
            )
        return version_row(row)

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
        registry prefix of a number. A version an earlier attempt of the run abandoned (its
        files removed) is ``registering`` again under its number: this attempt registers."""
        existing = await self.version_for_run(run.uid)
        if existing is not None and existing.state == "abandoned":
            return await self._registering_again(existing)
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
                f"RETURNING {VERSION_COLUMNS}",
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
        found = version_row(row)
        assert found is not None
        return found

    async def _registering_again(self, version: VersionRow) -> VersionRow:
        with translate_db_errors():
            row = await self._conn.fetchrow(
                "UPDATE model_versions SET state = 'registering', scorecard = NULL, "
                "lineage = NULL, digest = NULL, verdict = NULL, reasons = '[]', "
                "release_outcome = NULL, updated_at = now() "
                "WHERE model_id = $1 AND number = $2 AND state = 'abandoned' "
                f"RETURNING {VERSION_COLUMNS}",
                version.model_id,
                version.number,
            )
        found = version_row(row)
        assert found is not None  # an abandoned row changes only here, under the model's lock
        return found

    async def abandon(self, model_id: str, number: int) -> None:
        """A version still ``registering`` that never will: ``abandoned`` (its number kept)."""
        with translate_db_errors():
            await self._conn.execute(
                "UPDATE model_versions SET state = 'abandoned', updated_at = now() "
                "WHERE model_id = $1 AND number = $2 AND state = 'registering'",
                model_id,
                number,
            )

    # --- approvals ------------------------------------------------------------------------
    async def request_approval(
        self, version: VersionRow, *, expires_in: float, attempt: str
    ) -> ApprovalRow:
        """The run's approval: the one requested already (now asked for by ``attempt``: a
        retried run's new approval node is completed with the decision made), or a new pending
        one expiring ``expires_in`` seconds from now (PostgreSQL's clock: the one expiry is
        judged by)."""
        with translate_db_errors():
            await self._conn.execute(
                "INSERT INTO approvals (run_uid, model_id, version, cluster_id, run_namespace, "
                "run_name, expires_at, attempt) "
                "VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7), $8) "
                "ON CONFLICT (run_uid) DO UPDATE SET attempt = EXCLUDED.attempt",
                version.run_uid,
                version.model_id,
                version.number,
                version.cluster_id,
                version.run_namespace,
                version.run_name,
                expires_in,
                attempt,
            )
            row = await self._conn.fetchrow(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_uid = $1", version.run_uid
            )
        found = approval_row(row)
        assert found is not None
        return found

    async def approval(self, run_uid: str) -> ApprovalRow | None:
        with translate_db_errors():
            row = await self._conn.fetchrow(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_uid = $1", run_uid
            )
        return approval_row(row)

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
                "reason = $3 WHERE run_uid = $1 AND state = 'pending' "
                f"RETURNING {APPROVAL_COLUMNS}",
                run_uid,
                actor,
                reason,
            )
        return approval_row(row)

    async def decided_unfinished(self) -> list[ApprovalRow]:
        """Decided approvals whose approval stage was not completed yet (a decision the
        controller has not acted on: it was away, or the NOTIFY was missed)."""
        with translate_db_errors():
            rows = await self._conn.fetch(
                f"SELECT {APPROVAL_A_COLUMNS} "
                "FROM approvals a LEFT JOIN stage_outcomes o "
                "ON o.run_uid = a.run_uid AND o.stage = 'approval' AND o.attempt = a.attempt "
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
