"""The drift reconciler of pipelines' attachments: every pipeline's CronWorkflow, event source,
sensor, webhook token Secret and Ingress made again from what PostgreSQL records (the current
version and the schedule's pause) when deleted or changed out of band. Leader-elected (the
``wm-compiler`` lease, beside the tenant reconciler: ``compiler.runner``).

One pass walks every pipeline by id, a page at a time. Each pipeline is reconciled under its
row lock, as a save is (``compiler.pipelines.attaching``): each attachment is told the current
version again, and converges (an object missing is created, one drifted is replaced, one the
version no longer has is removed), then settles (tokens of triggers the version does not have
are dropped). A pause made before pauses were recorded is adopted from its CronWorkflow first
(``ScheduleService.adopt``). A pipeline that fails is logged and the pass goes on; the next
pass retries it.

A token Secret deleted out of band comes back with new tokens: the tokens live nowhere else
(by design), and the tenant reads the new ones through the webhook route.

After the walk, objects labelled with a pipeline id that PostgreSQL does not hold (a create
whose put-back could not remove them, a delete whose tokens could not be dropped) are deleted:
CronWorkflows and WorkflowTemplates in the tenant namespaces, event sources, sensors and
Ingresses in the events namespace, and the token Secret of each pipeline found there (by name:
the compiler may not list that namespace's Secrets; a token Secret left alone authenticates
nothing, since no event source names it); only once older than ``ORPHAN_GRACE``, since a save
that has not committed yet owns objects its pipeline row does not show.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import asyncpg

from compiler import metrics
from compiler.automation import event_objects as ev
from compiler.automation.service import ScheduleService
from compiler.pipelines.attaching import Attaching, current_of
from compiler.pipelines.ports import Attachment
from compiler.tenants.pg_tenants import TenantStore
from shared import labels as L
from shared.db.pipelines import PipelineStore
from shared.errors import WorkflowManagerError
from shared.k8s_drift import orphaned
from shared.k8s_objects import KubeObjects
from shared.logging import get_logger

log = get_logger(__name__)

PAGE: Final = 200
# Longer than any save's transaction lasts (requests time out long before).
ORPHAN_GRACE: Final = timedelta(minutes=10)
ARGO: Final = "argoproj.io/v1alpha1"
# What a pipeline owns on the cluster, by where it lives.
IN_TENANT_NAMESPACE: Final = ((ARGO, "CronWorkflow"), (ARGO, "WorkflowTemplate"))
IN_EVENTS_NAMESPACE: Final = (
    (ARGO, "Sensor"),
    (ARGO, "EventSource"),
    ("networking.k8s.io/v1", "Ingress"),
)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Pass:
    """What one pass did."""

    pipelines: int = 0
    failed: int = 0
    orphans: int = 0


class AttachmentReconciler:
    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        objects: KubeObjects,
        attachments: Sequence[Attachment],
        schedules: ScheduleService,
        events_namespace: str,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self._pool = pool
        self._objects = objects
        self._attachments = tuple(attachments)
        self._schedules = schedules
        self._events_namespace = events_namespace
        self._clock = clock

    async def reconcile(self, pipeline_id: str, *, tenant: str, kind: str) -> bool:
        """Converge one pipeline's attachments; False when it is gone."""
        async with PipelineStore.transaction(self._pool) as store:
            pipeline = await store.lock(tenant, kind, pipeline_id)
            if pipeline is None:
                return False
            row = await store.version(pipeline_id, pipeline.current_version)
            if row is None:  # the schema makes this impossible
                return False
            current = current_of(pipeline.tenant, pipeline.kind, pipeline.name, row, pipeline)
            current = await self._schedules.adopt(store, current)
            attaching = Attaching(
                self._attachments, tenant=tenant, kind=pipeline.kind, pipeline_id=pipeline_id
            )
            await attaching.attach(current)
        await attaching.settle()  # outside the row lock, as after a save
        return True

    async def reconcile_all(self) -> Pass:
        """One pass over every pipeline; a failing pipeline does not stop the others."""
        done = Pass()
        known: set[str] = set()
        after = ""
        while True:
            async with PipelineStore.transaction(self._pool) as store:
                page = await store.ids(after=after, limit=PAGE)
            for pipeline_id, tenant, kind in page:
                known.add(pipeline_id)
                try:
                    await self.reconcile(pipeline_id, tenant=tenant, kind=kind)
                except Exception as error:  # logged; the next pass retries it
                    done.failed += 1
                    metrics.RECONCILES.labels(what=metrics.PIPELINE, outcome=metrics.FAILED).inc()
                    log.warning(
                        "pipeline_reconcile_failed",
                        pipeline=pipeline_id,
                        tenant=tenant,
                        error=getattr(error, "message", type(error).__name__),
                    )
                else:
                    metrics.RECONCILES.labels(what=metrics.PIPELINE, outcome=metrics.OK).inc()
                done.pipelines += 1
            if len(page) < PAGE:
                break
            after = page[-1][0]
        done.orphans = await self.collect_orphans(known)
        return done

    async def collect_orphans(self, known: set[str]) -> int:
        """Delete the objects of pipelines not in ``known`` (every recorded pipeline id, read
        before this is called); how many went."""
        places = [(self._events_namespace, kind) for kind in IN_EVENTS_NAMESPACE]
        for tenant in await TenantStore(self._pool).ids():
            namespace = f"{L.DATA_NAMESPACE_PREFIX}{tenant}"
            places += [(namespace, kind) for kind in IN_TENANT_NAMESPACE]
        removed = 0
        with_events: set[str] = set()
        for namespace, (api_version, kind) in places:
            try:
                items = await self._objects.list(
                    api_version, kind, namespace, label_selector=L.PIPELINE_ID
                )
                for item in orphaned(
                    items, known, label=L.PIPELINE_ID, now=self._clock(), grace=ORPHAN_GRACE
                ):
                    name = str(item["metadata"]["name"])
                    if namespace == self._events_namespace:
                        with_events.add(str(item["metadata"]["labels"][L.PIPELINE_ID]))
                    removed += await self._remove(api_version, kind, namespace, name)
            except WorkflowManagerError as error:  # the next pass retries
                log.warning(
                    "orphans_unchecked", kind=kind, namespace=namespace, reason=error.message
                )
        for pipeline_id in sorted(with_events):
            try:
                secret = ev.secret_name(pipeline_id)
                removed += await self._remove("v1", "Secret", self._events_namespace, secret)
            except WorkflowManagerError as error:
                log.warning("orphans_unchecked", kind="Secret", reason=error.message)
        return removed

    async def _remove(self, api_version: str, kind: str, namespace: str, name: str) -> int:
        if not await self._objects.delete(api_version, kind, namespace, name):
            return 0
        log.info("orphan_removed", kind=kind, namespace=namespace, name=name)
        return 1

    async def loop(self, interval: float, *, sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        """Reconcile every pipeline now and then every ``interval`` seconds (run while
        leading)."""
        while True:
            done = await self.reconcile_all()
            log.info(
                "pipelines_reconciled",
                pipelines=done.pipelines,
                failed=done.failed,
                orphans=done.orphans,
            )
            await sleep(interval)
