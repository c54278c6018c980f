"""Each scheduled pipeline's CronWorkflow: following the current version (the pipelines
service's ``Attachment`` hook), paused and resumed, and read back.

The CronWorkflow ``p-<id>`` exists while the current version has a schedule: ``attach`` applies
it (create, or replace when it drifted, keeping Argo's status and annotations) and deletes it
when the new current version has none; ``detach`` deletes it with the pipeline. A failure fails
the save, whose version is then not recorded (the hook's promise).

A pause is the CronWorkflow's own state, where Argo reads it: ``spec.suspend: true`` and our
annotations saying who paused it and when. A save, a rollback or the tenant reconciler reads the
live object first and keeps the pause, so only ``resume`` ends it (or removing the schedule,
which removes the CronWorkflow, or deleting the pipeline). ``suspend`` is the version's
``suspended`` (the definition says "not now"; changing it is a new version) or the pause.
Pausing and resuming hold the pipeline's row lock, as saves do, so a save never writes over a
pause it did not see; both are audited (``run_actions``, actions ``schedule_pause`` and
``schedule_resume``, with actor and outcome, failures included).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

import asyncpg

from compiler.automation.schedules import API_VERSION, KIND, cron_workflow, cron_workflow_name
from compiler.drift import drifted, replacement
from compiler.k8s_objects import KubeObjects
from compiler.pipelines.ports import Caller, Current
from shared import labels as L
from shared.db.audit import record_action
from shared.db.pipelines import PipelineReader, PipelineStore, VersionRow
from shared.errors import Conflict, NotFound, WorkflowManagerError
from shared.logging import get_logger
from shared.pipelines import PipelineKind, Schedule

log = get_logger(__name__)

PAUSED_BY: Final = "kubeopera.io/schedule-paused-by"
PAUSED_AT: Final = "kubeopera.io/schedule-paused-at"


def _now() -> datetime:
    return datetime.now(UTC)


def _pause_of(live: dict[str, Any] | None) -> dict[str, str]:
    """Our pause annotations on a live CronWorkflow (empty: not paused)."""
    annotations = ((live or {}).get("metadata") or {}).get("annotations") or {}
    return {key: str(annotations[key]) for key in (PAUSED_BY, PAUSED_AT) if key in annotations}


def _schedule_of(version: VersionRow) -> Schedule | None:
    recorded = version.settings.get("schedule")
    return Schedule.model_validate(recorded) if recorded else None


class ScheduleService:
    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        objects: KubeObjects,
        instance_id: str,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self._pool = pool
        self._objects = objects
        self._instance_id = instance_id  # the data controller's (ARGO_DATA_INSTANCE_ID)
        self._clock = clock

    # --- the Attachment hook ---------------------------------------------------------------
    async def attach(self, current: Current) -> None:
        name = cron_workflow_name(current.pipeline_id)
        schedule = _schedule_of(current.version)
        if schedule is None:
            if await self._objects.delete(API_VERSION, KIND, current.namespace, name):
                log.info("schedule_removed", pipeline=current.pipeline_id)
            return
        # Converged from a fresh read; a 409 (Argo wrote its status meanwhile) once more.
        try:
            await self._converge(current, schedule)
        except Conflict:
            await self._converge(current, schedule)

    async def _converge(self, current: Current, schedule: Schedule) -> None:
        name = cron_workflow_name(current.pipeline_id)
        live = await self._objects.get(API_VERSION, KIND, current.namespace, name)
        pause = _pause_of(live)
        desired = cron_workflow(
            schedule,
            tenant=current.tenant,
            kind=current.kind,
            pipeline_id=current.pipeline_id,
            version=current.version.version,
            template_name=current.version.template_name,
            paused=bool(pause),
            instance_id=self._instance_id,
        )
        if pause:
            desired["metadata"]["annotations"] = pause
        if live is None:
            await self._objects.create(desired)
        elif drifted(desired, live):
            # No status subresource on CronWorkflows: a replace without Argo's status (last
            # scheduled time, active runs) would erase it.
            body = replacement(desired, live)
            if "status" in live:
                body["status"] = live["status"]
            await self._objects.replace(body)
        else:
            return
        log.info("schedule_applied", pipeline=current.pipeline_id, version=current.version.version)

    async def detach(self, tenant: str, kind: PipelineKind, pipeline_id: str) -> None:
        namespace = f"{L.DATA_NAMESPACE_PREFIX}{tenant}"
        await self._objects.delete(API_VERSION, KIND, namespace, cron_workflow_name(pipeline_id))

    async def settle(
        self, tenant: str, kind: PipelineKind, pipeline_id: str, current: Current | None
    ) -> None:
        """Nothing to drop: a CronWorkflow is made again as it was from the recorded state."""

    # --- pause, resume, state ----------------------------------------------------------------
    async def pause(
        self, caller: Caller, kind: PipelineKind, pipeline_id: str, *, paused: bool
    ) -> dict[str, Any]:
        """Pause (or resume) the pipeline's schedule; 409 when its current version has none."""
        action = "schedule_pause" if paused else "schedule_resume"
        namespace = f"{L.DATA_NAMESPACE_PREFIX}{caller.tenant}"
        name = cron_workflow_name(pipeline_id)
        audit: dict[str, Any] = {"pipeline_id": pipeline_id}
        cluster_id: str | None = None
        found = False
        try:
            async with PipelineStore.transaction(self._pool) as store:
                pipeline = await store.lock(caller.tenant, kind, pipeline_id)
                if pipeline is None:  # another tenant's pipeline is indistinguishable from none
                    raise NotFound(
                        f"no {kind} pipeline {pipeline_id!r}", details={"id": pipeline_id}
                    )
                found = True
                cluster_id = await store.host_cluster_id()
                audit["version"] = pipeline.current_version
                version = await store.version(pipeline_id, pipeline.current_version)
                schedule = _schedule_of(version) if version is not None else None
                if schedule is None:
                    raise Conflict(
                        f"pipeline {pipeline_id!r} has no schedule in its current version",
                        details={"id": pipeline_id, "reason": "no_schedule"},
                    )
                annotations: dict[str, str | None] = {PAUSED_BY: None, PAUSED_AT: None}
                if paused:
                    moment = self._clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    annotations = {PAUSED_BY: caller.actor[:256], PAUSED_AT: moment}
                patch = {
                    "metadata": {"annotations": annotations},
                    "spec": {"suspend": paused or schedule.suspended},
                }
                try:
                    live = await self._objects.patch_merge(
                        API_VERSION, KIND, namespace, name, patch
                    )
                except NotFound:
                    raise Conflict(
                        f"pipeline {pipeline_id!r} has no CronWorkflow on the cluster; "
                        "save the pipeline again to recreate it",
                        details={"id": pipeline_id, "reason": "cron_workflow_missing"},
                    ) from None
        except WorkflowManagerError as error:
            if found:
                await self._audit(caller, cluster_id, namespace, name, action, audit, error)
            raise
        await self._audit(caller, cluster_id, namespace, name, action, audit, None)
        log.info(action, pipeline=pipeline_id, actor=caller.actor)
        return {"id": pipeline_id, **state_of(live, schedule)}

    async def state(self, caller: Caller, kind: PipelineKind, pipeline_id: str) -> dict[str, Any]:
        """The CronWorkflow as Argo runs it: paused by whom and when, last scheduled time."""
        reader = PipelineReader(self._pool)
        pipeline = await reader.find(kind, pipeline_id, tenant=caller.tenant)
        if pipeline is None:
            raise NotFound(f"no {kind} pipeline {pipeline_id!r}", details={"id": pipeline_id})
        version = await reader.version(pipeline_id, pipeline.current_version)
        schedule = _schedule_of(version) if version is not None else None
        if schedule is None:
            return {"id": pipeline_id, "scheduled": False}
        namespace = f"{L.DATA_NAMESPACE_PREFIX}{caller.tenant}"
        name = cron_workflow_name(pipeline_id)
        live = await self._objects.get(API_VERSION, KIND, namespace, name)
        return {"id": pipeline_id, **state_of(live, schedule)}

    async def _audit(
        self,
        caller: Caller,
        cluster_id: str | None,
        namespace: str,
        name: str,
        action: str,
        detail: dict[str, Any],
        error: WorkflowManagerError | None,
    ) -> None:
        recorded: dict[str, Any] = dict(detail)
        outcome = "succeeded"
        if error is not None:
            outcome, recorded["error"] = "failed", error.code
        try:
            await record_action(
                self._pool,
                cluster_id=cluster_id or "host",
                namespace=namespace,
                name=name,
                run_uid=None,
                tenant=caller.tenant,
                actor=caller.actor,
                action=action,
                parameters={},
                outcome=outcome,
                detail=recorded,
            )
        except WorkflowManagerError as failure:  # the pause happened (or failed) either way
            log.warning("schedule_audit_failed", action=action, reason=failure.message)


def state_of(live: dict[str, Any] | None, schedule: Schedule) -> dict[str, Any]:
    """What the pipeline shows of its CronWorkflow (``live`` None: not on the cluster)."""
    pause = _pause_of(live)
    status = (live or {}).get("status") or {}
    return {
        "scheduled": True,
        "cron_workflow": None if live is None else live["metadata"]["name"],
        "paused": bool(pause),
        "paused_by": pause.get(PAUSED_BY),
        "paused_at": pause.get(PAUSED_AT),
        "suspended": schedule.suspended,
        "last_scheduled_at": status.get("lastScheduledTime"),
        "active_runs": [
            str(ref.get("name")) for ref in status.get("active") or [] if isinstance(ref, dict)
        ],
    }
