"""Each scheduled pipeline's CronWorkflow: following the current version (the pipelines
service's ``Attachment`` hook), paused and resumed, and read back.

The CronWorkflow ``p-<id>`` exists while the current version has a schedule: ``attach`` applies
it (create, or replace when it drifted, keeping Argo's status and annotations) and deletes it
when the new current version has none; ``detach`` deletes it with the pipeline. A failure fails
the save, whose version is then not recorded (the hook's promise).

A pause is recorded in PostgreSQL (``pipelines.schedule_paused_by``/``_at``, migration 0014)
and shown on the CronWorkflow, where Argo reads it: ``spec.suspend: true`` and our annotations
saying who paused it and when. Saves, rollbacks and the drift reconciler
(``compiler.automation.reconciler``) make the CronWorkflow from the current version and that
record (``Current.pause``), so a CronWorkflow deleted or edited out of band comes back paused;
only ``resume`` ends a pause (or a current version without a schedule, once recorded:
``settle``, or deleting the pipeline). ``suspend`` is the version's ``suspended`` (the
definition says "not now"; changing it is a new version) or the pause. Pausing and resuming
hold the pipeline's row lock, as saves do, record the pause and converge the CronWorkflow in
one transaction (a cluster that refuses leaves the record as it was); both are audited
(``run_actions``, actions ``schedule_pause`` and ``schedule_resume``, with actor and outcome,
failures included). Pauses made before the record existed are adopted from the live object
once (``adopt``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final

import asyncpg

from compiler.automation.schedules import API_VERSION, KIND, cron_workflow, cron_workflow_name
from compiler.pipelines.attaching import current_of
from compiler.pipelines.ports import Caller, Current, Pause, pause_of
from shared import labels as L
from shared.db.audit import record_action
from shared.db.pipelines import PipelineReader, PipelineStore, VersionRow
from shared.errors import Conflict, NotFound, WorkflowManagerError
from shared.k8s_drift import drifted, replacement
from shared.k8s_objects import KubeObjects
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


def _moment(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def annotations_of(pause: Pause) -> dict[str, str]:
    """The annotations that show a recorded pause on the CronWorkflow."""
    return {PAUSED_BY: pause.by[:256], PAUSED_AT: _moment(pause.at)}


def pause_from_live(live: dict[str, Any] | None) -> Pause | None:
    """The pause a CronWorkflow's annotations show (how pauses were kept before 0014)."""
    shown = _pause_of(live)
    if PAUSED_BY not in shown:
        return None
    try:
        at = datetime.strptime(shown.get(PAUSED_AT, ""), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        at = datetime(1970, 1, 1, tzinfo=UTC)  # paused, at a time nobody wrote down
    return Pause(shown[PAUSED_BY], at)


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
        await self._apply(current, schedule)

    async def _converge(self, current: Current, schedule: Schedule) -> dict[str, Any] | None:
        """Make the CronWorkflow what ``current`` says; the live object as it then is."""
        name = cron_workflow_name(current.pipeline_id)
        live = await self._objects.get(API_VERSION, KIND, current.namespace, name)
        pause = current.pause
        if pause is None and current.pause_unadopted:  # not adopted yet: the live one holds
            pause = pause_from_live(live)
        desired = cron_workflow(
            schedule,
            tenant=current.tenant,
            kind=current.kind,
            pipeline_id=current.pipeline_id,
            version=current.version.version,
            template_name=current.version.template_name,
            paused=pause is not None,
            instance_id=self._instance_id,
        )
        if pause is not None:
            desired["metadata"]["annotations"] = annotations_of(pause)
        stale = pause is None and bool(_pause_of(live))  # a pause shown that is not recorded
        if live is None:
            applied = await self._objects.create(desired)
        elif drifted(desired, live) or stale:
            # No status subresource on CronWorkflows: a replace without Argo's status (last
            # scheduled time, active runs) would erase it.
            body = replacement(desired, live)
            if "status" in live:
                body["status"] = live["status"]
            shown = body["metadata"].get("annotations") or {}
            for key in (PAUSED_BY, PAUSED_AT) if pause is None else ():
                shown.pop(key, None)
            applied = await self._objects.replace(body)
        else:
            return live
        log.info(
            "schedule_applied",
            pipeline=current.pipeline_id,
            version=current.version.version,
            paused=pause is not None,
            created=live is None,
        )
        return applied

    async def _apply(self, current: Current, schedule: Schedule) -> dict[str, Any] | None:
        # Converged from a fresh read; a 409 (Argo wrote its status meanwhile) once more.
        try:
            return await self._converge(current, schedule)
        except Conflict:
            return await self._converge(current, schedule)

    async def detach(self, tenant: str, kind: PipelineKind, pipeline_id: str) -> None:
        namespace = f"{L.DATA_NAMESPACE_PREFIX}{tenant}"
        await self._objects.delete(API_VERSION, KIND, namespace, cron_workflow_name(pipeline_id))

    async def settle(
        self, tenant: str, kind: PipelineKind, pipeline_id: str, current: Current | None
    ) -> None:
        """A recorded current version without a schedule ends the pause (the CronWorkflow is
        made again as it was from the record otherwise: nothing to drop)."""
        if current is None or current.pause is None or _schedule_of(current.version) is not None:
            return
        async with PipelineStore.transaction(self._pool) as store:
            if await store.end_pause(pipeline_id, while_current=current.version.version):
                log.info("schedule_pause_ended", pipeline=pipeline_id, reason="no_schedule")

    async def adopt(self, store: PipelineStore, current: Current) -> Current:
        """``current`` with the pause its live CronWorkflow shows recorded, once, for a pipeline
        paused before pauses were recorded (migration 0014); the caller holds its row lock."""
        if not current.pause_unadopted:
            return current
        live = await self._objects.get(
            API_VERSION, KIND, current.namespace, cron_workflow_name(current.pipeline_id)
        )
        pause = current.pause or pause_from_live(live)
        await store.set_pause(
            current.pipeline_id,
            by=None if pause is None else pause.by,
            at=None if pause is None else pause.at,
        )
        if pause is not None:
            log.info("schedule_pause_adopted", pipeline=current.pipeline_id)
        return replace(current, pause=pause, pause_unadopted=False)

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
                if version is None or schedule is None:
                    raise Conflict(
                        f"pipeline {pipeline_id!r} has no schedule in its current version",
                        details={"id": pipeline_id, "reason": "no_schedule"},
                    )
                moment = self._clock().replace(microsecond=0)
                pause = Pause(caller.actor[:256], moment) if paused else None
                await store.set_pause(
                    pipeline_id,
                    by=None if pause is None else pause.by,
                    at=None if pause is None else pause.at,
                )
                current = current_of(caller.tenant, kind, pipeline.name, version, pipeline)
                current = replace(current, pause=pause, pause_unadopted=False)
                # A CronWorkflow deleted meanwhile comes back, as the reconciler would make it.
                live = await self._apply(current, schedule)
        except WorkflowManagerError as error:
            if found:
                await self._audit(caller, cluster_id, namespace, name, action, audit, error)
            raise
        await self._audit(caller, cluster_id, namespace, name, action, audit, None)
        log.info(action, pipeline=pipeline_id, actor=caller.actor)
        return {"id": pipeline_id, **state_of(live, schedule, current.pause)}

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
        pause = pause_of(pipeline)
        if pause is None and not pipeline.schedule_pause_adopted:
            pause = pause_from_live(live)
        return {"id": pipeline_id, **state_of(live, schedule, pause)}

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


def state_of(
    live: dict[str, Any] | None, schedule: Schedule, pause: Pause | None
) -> dict[str, Any]:
    """What the pipeline shows of its schedule: the recorded pause, and its CronWorkflow as
    Argo runs it (``live`` None: not on the cluster)."""
    status = (live or {}).get("status") or {}
    return {
        "scheduled": True,
        "cron_workflow": None if live is None else live["metadata"]["name"],
        "paused": pause is not None,
        "paused_by": None if pause is None else pause.by,
        "paused_at": None if pause is None else _moment(pause.at),
        "suspended": schedule.suspended,
        "last_scheduled_at": status.get("lastScheduledTime"),
        "active_runs": [
            str(ref.get("name")) for ref in status.get("active") or [] if isinstance(ref, dict)
        ],
    }
